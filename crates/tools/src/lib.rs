//! hearth-tools: the MCP client. It owns the MCP servers a user configured, their processes,
//! their sessions and the calls of their tools, on the official Rust SDK (`rmcp`).
//!
//! # Architecture invariant
//!
//! Below `hearth-server`: knows no HTTP route, no `AppState`, no SQLite, no model. Of Hearth's
//! crates it may use `hearth-base` only. The node keeps the specs (in `hearth.db`) and hands
//! them here; the server's doors and the chat loop call [`McpServers`]. "Tool" means two things
//! in Hearth; here every public name says MCP (`McpTool`, `McpToolOutcome`, `McpCallError`), so
//! a grep tells an MCP server's tool from a model's function call.
//!
//! # Layout
//!
//! - `spec`: [`McpServerSpec`], what a server is (command or URL, switches, timeout).
//! - `import`: [`import_mcp_servers_json`], the `mcpServers` JSON of Claude Desktop, LM Studio, Jan.
//! - `names`: `server__tool`, the names a model is offered ([`mcp_tool_name`]).
//! - `manager`: [`McpServers`], start on need, idle stop, restart with backoff, status.
//! - `connection`: one rmcp session, its actor, calls with timeout and cancellation.
//! - `stdio`: a child-process server in its own process group; its stdio lines.
//! - `http`: a server at a URL (streamable HTTP).
//! - `outcome`: [`McpToolOutcome`], a result folded and capped at 1 MiB.
//! - `log`: a server's last stderr lines.
//! - `error`: [`McpServerError`], [`McpCallError`].

mod connection;
mod error;
mod http;
mod import;
mod log;
mod manager;
pub mod names;
mod outcome;
mod spec;
mod stdio;

pub use error::{McpCallError, McpServerError};
pub use import::{import_mcp_servers_json, EntryProblem, McpImportError};
pub use log::{LOG_LINES, LOG_LINE_BYTES};
pub use manager::{McpOffer, McpServerStatus, McpServerView, McpServers, McpSettings, McpTool};
pub use names::{mcp_tool_name, mcp_tool_prefix, parse_mcp_tool_name};
pub use outcome::{McpContent, McpToolOutcome, MAX_OUTCOME_BYTES};
pub use spec::{McpServerSpec, McpTransport, SpecError, DEFAULT_CALL_TIMEOUT};
pub use stdio::MAX_MESSAGE_BYTES;

/// Re-exported for callers that pass a cancellation to [`McpServers::call`].
pub use tokio_util::sync::CancellationToken;
