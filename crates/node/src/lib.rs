//! # hearth-node
//!
//! The node service behind the `hearth-node` binary: it loads a model into a
//! [`hearth_engine::Engine`] and serves it on one HTTP port through every door — the web UI
//! and its `/api`, the OpenAI API, the streaming WebSocket `/generate`, the batch WebSocket
//! `/ws`, the signed-challenge WebSocket on `/` and, in hub mode, the workers' `/node` — with
//! its data in SQLite.
//!
//! ## Layout
//! The parts are crates of their own, each depending only on those below it (ARCHITECTURE.md,
//! "Crates"): `hearth_server` (the doors and `AppState`), `hearth_split`, `hearth_cluster`,
//! `hearth_route` (the one route, worker mode), `hearth_hub` (remote providers, placement),
//! `hearth_models` (model files, downloads, the engines loaded here, telemetry),
//! `hearth_store`, `hearth_auth`, `hearth_base`. This crate puts them together:
//! - [`Node`] (in `node`): start everything (its steps, one function each, are `start`), hand
//!   out the address, go on and off the LAN (`node::exposure`), shut down gracefully
//!   (`node::shutdown`); its cluster listener, which follows the doors on and off the LAN
//!   (`node::cluster`), is `node_cluster`. Why it could not: [`NodeError`] (`error`).
//! - [`cli`], [`config`]: the `serve` flags and their `HEARTH_*` variables (shared with the
//!   desktop app); [`NodeConfig`], default paths, `--model` resolution.
//! - [`telemetry`]: the samples the desktop app's tray shows (`hearth_models::telemetry`),
//!   with [`ModelState`] and [`Placement`]; [`logging`]: the log setup both programs share;
//!   [`shutdown_signal`] (`signals`): the signals on which both stop gracefully.
//!
//! Architecture invariant: `hearth-node` is the top of the node's crates and the only one the
//! desktop app knows, and no other crate depends on it.
//!
//! ## Invariants
//! - Doors only translate between their protocol and the engine's request/event stream.
//! - On shutdown every open stream gets a final message before the port closes.

pub mod cli;
pub mod config;
mod error;
pub mod logging;
mod mcp;
mod node;
mod node_cluster;
mod signals;
mod start;

pub use config::NodeConfig;
pub use error::NodeError;
/// A document is read in a child process that is this program (`hearth_docs::Reader`): both
/// programs call this first in `main`.
pub use hearth_docs::run_if_asked as read_document_if_asked;
/// What the desktop app's tray shows of the model, so that it needs no crate below this one.
pub use hearth_engine::{ModelState, Placement};
/// The machine's samples, which the desktop app's tray shows (it knows this crate only).
pub use hearth_models::telemetry;
pub use node::Node;
pub use signals::shutdown_signal;
