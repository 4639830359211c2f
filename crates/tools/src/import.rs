//! Reads the `mcpServers` JSON that Claude Desktop (`claude_desktop_config.json`), LM Studio
//! (`mcp.json`), Jan (`mcp_config.json`) and Cursor share into [`McpServerSpec`]s. Only
//! parsing: the caller decides what to keep.
//!
//! Accepted per entry: `{command, args, env, cwd}` (a local server, `type: "stdio"` optional),
//! `{url, headers}` or `{type: "http" | "streamable-http" | "streamableHttp", url, headers}` (a
//! server at a URL); `disabled: true` (Cursor, Cline) and `active: false` (Jan) import it off.
//! Unknown keys are ignored, since every app adds its own. `type: "sse"` (MCP's transport of
//! 2024, replaced by streamable HTTP) is refused by name: rmcp 3 has no client for it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::names;
use crate::spec::{McpServerSpec, McpTransport, SpecError};

/// Why an `mcpServers` document cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum McpImportError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no \"mcpServers\" object at the top of the JSON")]
    NoMcpServers,
    #[error("server {name:?}: {problem}")]
    Entry { name: String, problem: EntryProblem },
    #[error("servers {first:?} and {second:?} both become {name:?} (names may use letters, digits, '-' and '_')")]
    Duplicate {
        first: String,
        second: String,
        name: String,
    },
}

/// What is wrong with one entry of `mcpServers`.
#[derive(Debug, thiserror::Error)]
pub enum EntryProblem {
    #[error("its value is not an object")]
    NotAnObject,
    #[error("it needs \"command\" (a local server) or \"url\" (a server at a URL), as its \"type\" says")]
    NoCommandOrUrl,
    #[error("it has both \"command\" and \"url\"")]
    CommandAndUrl,
    #[error("\"{field}\" must be {expected}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
    },
    #[error(
        "it uses the SSE transport (MCP 2024-11-05), which Hearth's MCP client (rmcp) cannot \
         speak; use the server's streamable HTTP endpoint (often /mcp) with \"type\": \"http\""
    )]
    SseUnsupported,
    #[error("unknown \"type\" {0:?} (stdio, http, streamable-http)")]
    UnknownType(String),
    #[error("its name has no letter or digit to keep")]
    EmptyName,
    #[error(transparent)]
    Invalid(SpecError),
}

/// Parses an `mcpServers` document into specs, in the document's key order (sorted, as JSON
/// objects are read here). Names are made valid (other characters become `-`).
pub fn import_mcp_servers_json(json: &str) -> Result<Vec<McpServerSpec>, McpImportError> {
    let document: Value = serde_json::from_str(json)?;
    let servers = document
        .get("mcpServers")
        .and_then(Value::as_object)
        .ok_or(McpImportError::NoMcpServers)?;
    let mut specs = Vec::with_capacity(servers.len());
    let mut taken: BTreeMap<String, String> = BTreeMap::new();
    for (original, entry) in servers {
        let fail = |problem| McpImportError::Entry {
            name: original.clone(),
            problem,
        };
        let name =
            names::sanitize_server_name(original).ok_or_else(|| fail(EntryProblem::EmptyName))?;
        if let Some(first) = taken.insert(name.clone(), original.clone()) {
            return Err(McpImportError::Duplicate {
                first,
                second: original.clone(),
                name,
            });
        }
        let entry = entry
            .as_object()
            .ok_or_else(|| fail(EntryProblem::NotAnObject))?;
        let spec = entry_spec(name, entry).map_err(fail)?;
        spec.validate()
            .map_err(|e| fail(EntryProblem::Invalid(e)))?;
        specs.push(spec);
    }
    Ok(specs)
}

fn entry_spec(name: String, entry: &Map<String, Value>) -> Result<McpServerSpec, EntryProblem> {
    let kind = string(entry, "type")?;
    let command = string(entry, "command")?;
    let url = string(entry, "url")?;
    let transport = match (kind.as_deref(), command, url) {
        (Some("sse"), _, _) => return Err(EntryProblem::SseUnsupported),
        (_, Some(_), Some(_)) => return Err(EntryProblem::CommandAndUrl),
        (None | Some("stdio"), Some(command), None) => McpTransport::Stdio {
            command,
            args: strings(entry, "args")?,
            env: string_map(entry, "env")?,
            cwd: string(entry, "cwd")?.map(Into::into),
        },
        (None | Some("http" | "streamable-http" | "streamableHttp"), None, Some(url)) => {
            McpTransport::Http {
                url,
                headers: string_map(entry, "headers")?,
            }
        }
        // A known type without the field it needs (stdio with a url only, http with a command).
        (None | Some("stdio" | "http" | "streamable-http" | "streamableHttp"), _, _) => {
            return Err(EntryProblem::NoCommandOrUrl)
        }
        (Some(other), _, _) => return Err(EntryProblem::UnknownType(other.to_owned())),
    };
    let disabled = boolean(entry, "disabled")?.unwrap_or(false);
    let active = boolean(entry, "active")?.unwrap_or(true);
    Ok(McpServerSpec {
        name,
        transport,
        enabled: active && !disabled,
        call_timeout_ms: crate::spec::DEFAULT_CALL_TIMEOUT.as_millis() as u64,
        disabled_tools: BTreeSet::new(),
    })
}

fn string(entry: &Map<String, Value>, field: &'static str) -> Result<Option<String>, EntryProblem> {
    match entry.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(EntryProblem::WrongType {
            field,
            expected: "a string",
        }),
    }
}

fn boolean(entry: &Map<String, Value>, field: &'static str) -> Result<Option<bool>, EntryProblem> {
    match entry.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(EntryProblem::WrongType {
            field,
            expected: "true or false",
        }),
    }
}

fn strings(entry: &Map<String, Value>, field: &'static str) -> Result<Vec<String>, EntryProblem> {
    let wrong = EntryProblem::WrongType {
        field,
        expected: "an array of strings",
    };
    match entry.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or(wrong),
        Some(_) => Err(wrong),
    }
}

/// An object of strings; numbers and booleans are written as text (people write `"PORT": 8080`).
fn string_map(
    entry: &Map<String, Value>,
    field: &'static str,
) -> Result<BTreeMap<String, String>, EntryProblem> {
    let wrong = EntryProblem::WrongType {
        field,
        expected: "an object of strings",
    };
    match entry.get(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), s.clone())),
                Value::Number(n) => Some((k.clone(), n.to_string())),
                Value::Bool(b) => Some((k.clone(), b.to_string())),
                _ => None,
            })
            .collect::<Option<BTreeMap<_, _>>>()
            .ok_or(wrong),
        Some(_) => Err(wrong),
    }
}
