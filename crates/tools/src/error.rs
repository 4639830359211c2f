//! The MCP client's errors, one enum per operation: reaching a server ([`McpServerError`]) and
//! calling one of its tools ([`McpCallError`]). Each message says which server and what to do
//! where there is something to do; a chat shows it and a model reads it as the tool's error.

use std::time::Duration;

/// Why a server could not be used (for listing its tools or calling one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpServerError {
    #[error("no MCP server is named {0:?}")]
    Unknown(String),
    #[error("MCP server {0:?} is disabled")]
    Disabled(String),
    #[error("MCP server {server:?} did not start: {detail}")]
    Start { server: String, detail: String },
    #[error(
        "MCP server {server:?} failed {failures} times in a row (last: {last_error}); \
         next try in {} s", retry_in.as_secs_f32().ceil()
    )]
    Backoff {
        server: String,
        failures: u32,
        last_error: String,
        retry_in: Duration,
    },
    #[error("the MCP client is shutting down")]
    ShutDown,
}

/// Why a tool call gave no result. A tool that ran and failed is not an error here: that is an
/// [`crate::McpToolOutcome`] with `is_error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpCallError {
    #[error(transparent)]
    Server(#[from] McpServerError),
    #[error("MCP server {server:?} has no tool {tool:?}")]
    UnknownTool { server: String, tool: String },
    #[error("tool {tool:?} of MCP server {server:?} is switched off")]
    ToolDisabled { server: String, tool: String },
    #[error("{0:?} is not the name of an MCP tool (server__tool)")]
    BadToolName(String),
    #[error("the arguments of a tool call must be a JSON object, not {0}")]
    ArgumentsNotAnObject(&'static str),
    #[error("tool {tool:?} of MCP server {server:?} gave no answer in {} s; the call was cancelled", after.as_secs_f32())]
    Timeout {
        server: String,
        tool: String,
        after: Duration,
    },
    #[error("the call of tool {tool:?} of MCP server {server:?} was cancelled")]
    Cancelled { server: String, tool: String },
    #[error("MCP server {server:?} stopped during the call: {detail}")]
    ServerExited { server: String, detail: String },
    #[error("MCP server {server:?} broke the protocol: {detail}")]
    Protocol { server: String, detail: String },
    /// The server answered with a JSON-RPC error (unknown tool, invalid arguments, ...).
    #[error("MCP server {server:?} refused the call ({code}): {message}")]
    Refused {
        server: String,
        code: i32,
        message: String,
    },
}

impl McpCallError {
    /// Whether the server itself is at fault (its status turns to failed and the next need
    /// restarts it), as against the call or the caller.
    pub fn is_server_failure(&self) -> bool {
        matches!(
            self,
            McpCallError::ServerExited { .. } | McpCallError::Protocol { .. }
        )
    }
}
