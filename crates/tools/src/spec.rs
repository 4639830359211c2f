//! What an MCP server is, as the user configured it: a name, how to reach it (a command started
//! as a child process, or a URL), whether it is on, its call timeout and which of its tools are
//! off. Plain serde values; nothing here starts anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::names;

/// A call that gets no answer within this long fails (issue 51: "default 60 s, per server").
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerSpec {
    /// Unique; also the first half of every tool name offered to a model (`server__tool`), so
    /// it is checked by [`McpServerSpec::validate`]: 1 to [`names::MAX_SERVER_NAME`]
    /// characters of `[A-Za-z0-9_-]`, without `__`.
    pub name: String,
    pub transport: McpTransport,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Per-call limit, in whole milliseconds on the wire.
    #[serde(default = "default_timeout_ms", rename = "call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// The server's own names of the tools the user switched off.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub disabled_tools: BTreeSet<String>,
}

/// How to reach a server. `Debug` shows the names of env entries and headers, never their
/// values (tokens live there).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpTransport {
    /// A local server: a child process spoken to over its stdin and stdout.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<PathBuf>,
    },
    /// A remote (or local) server over MCP's streamable HTTP transport.
    Http {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            McpTransport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

fn yes() -> bool {
    true
}

fn default_timeout_ms() -> u64 {
    DEFAULT_CALL_TIMEOUT.as_millis() as u64
}

/// Why a spec cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "server name {0:?} is not allowed: use 1 to {max} letters, digits, '-' or '_', without '__'",
        max = names::MAX_SERVER_NAME
    )]
    BadName(String),
    #[error("server {0:?}: the command is empty")]
    EmptyCommand(String),
    #[error("server {name:?}: {url:?} is not an http:// or https:// URL")]
    BadUrl { name: String, url: String },
    #[error("server {name:?}: header {header:?} is not a valid HTTP header")]
    BadHeader { name: String, header: String },
    #[error("server {0:?}: the call timeout must be at least 1 ms")]
    ZeroTimeout(String),
    #[error("a server named {0:?} already exists")]
    Duplicate(String),
}

impl McpServerSpec {
    /// A server started as `command args...`, enabled, with the default timeout.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        Self::with_transport(
            name,
            McpTransport::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A server at `url` (streamable HTTP), enabled, with the default timeout.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_transport(
            name,
            McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        )
    }

    fn with_transport(name: impl Into<String>, transport: McpTransport) -> Self {
        Self {
            name: name.into(),
            transport,
            enabled: true,
            call_timeout_ms: default_timeout_ms(),
            disabled_tools: BTreeSet::new(),
        }
    }

    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout_ms = timeout.as_millis().min(u64::MAX as u128) as u64;
        self
    }

    pub fn tool_enabled(&self, tool: &str) -> bool {
        !self.disabled_tools.contains(tool)
    }

    /// Whether the two specs start the same server (a change of only `enabled`, the timeout
    /// or the tool switches keeps a running server).
    pub(crate) fn same_server(&self, other: &Self) -> bool {
        self.name == other.name && self.transport == other.transport
    }

    /// Checks what must hold before a server is kept or started.
    pub fn validate(&self) -> Result<(), SpecError> {
        if !names::valid_server_name(&self.name) {
            return Err(SpecError::BadName(self.name.clone()));
        }
        if self.call_timeout_ms == 0 {
            return Err(SpecError::ZeroTimeout(self.name.clone()));
        }
        match &self.transport {
            McpTransport::Stdio { command, .. } => {
                if command.trim().is_empty() {
                    return Err(SpecError::EmptyCommand(self.name.clone()));
                }
            }
            McpTransport::Http { url, headers } => {
                let lower = url.to_ascii_lowercase();
                let scheme_ok = lower.starts_with("http://") || lower.starts_with("https://");
                if !scheme_ok || url.parse::<http::Uri>().is_err() {
                    return Err(SpecError::BadUrl {
                        name: self.name.clone(),
                        url: url.clone(),
                    });
                }
                for (key, value) in headers {
                    if http::HeaderName::try_from(key.as_str()).is_err()
                        || http::HeaderValue::try_from(value.as_str()).is_err()
                    {
                        return Err(SpecError::BadHeader {
                            name: self.name.clone(),
                            header: key.clone(),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_round_trips_through_json_with_its_defaults() {
        let spec: McpServerSpec = serde_json::from_value(serde_json::json!({
            "name": "fs",
            "transport": {"type": "stdio", "command": "npx", "args": ["-y", "x"]}
        }))
        .unwrap();
        assert!(spec.enabled);
        assert_eq!(spec.call_timeout(), DEFAULT_CALL_TIMEOUT);
        assert_eq!(
            spec,
            McpServerSpec::stdio("fs", "npx", vec!["-y".into(), "x".into()])
        );
        let back: McpServerSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn debug_leaves_out_secret_values() {
        let mut spec = McpServerSpec::http("a", "https://example.com/mcp");
        if let McpTransport::Http { headers, .. } = &mut spec.transport {
            headers.insert("Authorization".into(), "Bearer s3cret".into());
        }
        let shown = format!("{spec:?}");
        assert!(
            shown.contains("Authorization") && !shown.contains("s3cret"),
            "{shown}"
        );
    }

    #[test]
    fn validate_names_each_kind_of_bad_spec() {
        assert!(McpServerSpec::stdio("ok-1_a", "node", vec![])
            .validate()
            .is_ok());
        assert_eq!(
            McpServerSpec::stdio("a__b", "node", vec![]).validate(),
            Err(SpecError::BadName("a__b".into()))
        );
        assert_eq!(
            McpServerSpec::stdio("a b", "node", vec![]).validate(),
            Err(SpecError::BadName("a b".into()))
        );
        assert_eq!(
            McpServerSpec::stdio("a", " ", vec![]).validate(),
            Err(SpecError::EmptyCommand("a".into()))
        );
        assert!(matches!(
            McpServerSpec::http("a", "ftp://x").validate(),
            Err(SpecError::BadUrl { .. })
        ));
        let mut spec = McpServerSpec::http("a", "https://example.com/mcp");
        assert!(spec.validate().is_ok());
        if let McpTransport::Http { headers, .. } = &mut spec.transport {
            headers.insert("bad header".into(), "v".into());
        }
        assert!(matches!(spec.validate(), Err(SpecError::BadHeader { .. })));
        assert_eq!(
            McpServerSpec::http("a", "http://x/")
                .with_call_timeout(Duration::ZERO)
                .validate(),
            Err(SpecError::ZeroTimeout("a".into()))
        );
    }
}
