//! The MCP client against real servers: `@modelcontextprotocol/server-everything` and
//! `server-filesystem` (npm, pinned by scripts/mcp-servers.sh) and our own server on the Python
//! `mcp` SDK (tests/mcp/py_server.py), over stdio and streamable HTTP. Run with
//! `cargo test -p hearth-tools`; scripts/setup.sh installs the servers.

mod common;
mod everything;
mod filesystem;
mod import;
mod python_http;
mod python_stdio;
