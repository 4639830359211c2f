//! The HTTP server: one axum app ([`app`], in `routes`) for every door on one port, the shared
//! [`AppState`] (in `state`: the handles the node gives the doors, and the doors' own state), and
//! graceful shutdown (doors watch the shutdown token and send their final messages, then the
//! listener stops and the engine is stopped). The doors, each only translating between its
//! protocol and the route (`hearth_route`):
//! - `/v1/models`, `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`: the OpenAI API
//!   (`openai`; embeddings computed by `embeddings`, which the Ollama door shares);
//!   `/v1/rerank` and `/rerank` (a reranker's scores, `rerank`);
//!   `/v1/responses` (OpenAI's Responses API, `responses`); `/v1/messages` (Anthropic's
//!   Messages API, `anthropic`);
//! - `/generate`: the streaming WebSocket (`generate`);
//! - `/ws` and `/api/ws`: the batch WebSocket (`batch`);
//! - `/` (upgrade) and `/api/auth/register`: the signed-challenge door ([`auth`]);
//! - `/node`: hub mode's worker door (`hub_door`);
//! - `/api/chat`, `/api/generate`, `/api/embed`, `/api/tags`, ...: the Ollama API (`ollama`);
//! - `/api/...`: the UI's API (`api`) and chat (`chat`), a chat's documents
//!   (`documents_api`), the hub's model search (`search_api`), the coding agents' settings
//!   (`agents_api`, its text from [`connect`], which `hearth-node connect` prints too), live
//!   status `/api/events` (`events`), `/api/status` (`status`);
//! - `/metrics` (`metrics`); and the web UI's files for every other `GET` (`ui`).
//!
//! In front of them all: the guard ([`security`]), which names each request's caller (`caller`);
//! under them, the accept loop ([`listen`]).
//! Beside them, `door`: the toolkit every door shares (body, model, submitting with the
//! reader of the answer from `hearth_engine::answer`, collecting), so no door imports another.
//!
//! Architecture invariant: only `hearth-server` knows HTTP routes and `AppState`; below it no
//! crate names axum. A door translates between its protocol and the route and holds no
//! generation logic of its own; what the cluster and the split need of the node they get
//! through `hearth_cluster::Context`, never through `AppState`.

pub(crate) mod agents_api;
pub(crate) mod anthropic;
pub(crate) mod api;
pub mod auth;
pub(crate) mod batch;
pub(crate) mod caller;
pub(crate) mod chat;
pub(crate) mod cluster_api;
pub mod connect;
pub(crate) mod documents_api;
pub(crate) mod door;
pub(crate) mod downloads_api;
pub(crate) mod embeddings;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod generate;
pub(crate) mod hub_door;
pub mod image_urls;
pub mod listen;
pub(crate) mod mcp_api;
pub mod mcp_secrets;
pub(crate) mod metrics;
pub(crate) mod models_api;
pub(crate) mod node_settings;
pub(crate) mod ollama;
pub(crate) mod openai;
pub(crate) mod rerank;
pub(crate) mod responses;
mod routes;
pub(crate) mod search_api;
pub mod security;
pub(crate) mod split_api;
pub(crate) mod state;
pub(crate) mod status;
pub(crate) mod stream;
pub(crate) mod ui;
pub(crate) mod ws;

pub use image_urls::ImageUrls;
/// The setting that keeps the throttle cap made on the Settings page (the node applies it at start).
pub use node_settings::SETTING_THROTTLE_CAP;
pub use routes::app;
pub use state::{AppState, DoorSettings};
