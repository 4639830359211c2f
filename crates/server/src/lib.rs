//! The HTTP server: one axum app ([`app`], in `routes`) for every door on one port, the shared
//! [`AppState`] (here: every module's vocabulary), and
//! graceful shutdown (doors watch the shutdown token and send their final messages, then the
//! listener stops and the engine is stopped). The doors, each only translating between its
//! protocol and the route (`hearth_route`):
//! - `/v1/models`, `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`: the OpenAI API
//!   (`openai`; embeddings computed by `embeddings`, which the Ollama door shares);
//!   `/v1/responses` (OpenAI's Responses API, `responses`); `/v1/messages` (Anthropic's
//!   Messages API, `anthropic`);
//! - `/generate`: the streaming WebSocket (`generate`);
//! - `/ws` and `/api/ws`: the batch WebSocket (`batch`);
//! - `/` (upgrade) and `/api/auth/register`: the signed-challenge door ([`auth`]);
//! - `/node`: hub mode's worker door (`hub_door`);
//! - `/api/chat`, `/api/generate`, `/api/embed`, `/api/tags`, ...: the Ollama API (`ollama`);
//! - `/api/...`: the UI's API (`api`) and chat (`chat`), the hub's model search
//!   (`search_api`), live status `/api/events`
//!   (`events`), `/api/status` (`status`);
//! - `/metrics` (`metrics`); and the web UI's files for every other `GET` (`ui`).
//!
//! In front of them all: the guard ([`security`]); under them, the accept loop ([`listen`]).
//! Beside them, `door`: the toolkit every door shares (body, model, submitting with the
//! reader of the answer from `hearth_engine::answer`, collecting), so no door imports another.
//!
//! Architecture invariant: only `hearth-server` knows HTTP routes and `AppState`; below it no
//! crate names axum. A door translates between its protocol and the route and holds no
//! generation logic of its own; what the cluster and the split need of the node they get
//! through `hearth_cluster::Context`, never through `AppState`.

pub(crate) mod anthropic;
pub(crate) mod api;
pub mod auth;
pub(crate) mod batch;
pub(crate) mod chat;
pub(crate) mod cluster_api;
pub(crate) mod door;
pub(crate) mod downloads_api;
pub(crate) mod embeddings;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod generate;
pub(crate) mod hub_door;
pub mod image_urls;
pub mod listen;
pub(crate) mod metrics;
pub(crate) mod models_api;
pub(crate) mod node_settings;
pub(crate) mod ollama;
pub(crate) mod openai;
pub(crate) mod responses;
mod routes;
pub(crate) mod search_api;
pub mod security;
pub(crate) mod split_api;
pub(crate) mod status;
pub(crate) mod stream;
pub(crate) mod ui;
pub(crate) mod ws;

pub use image_urls::ImageUrls;
/// The setting that keeps the throttle cap made on the Settings page (the node applies it at start).
pub use node_settings::SETTING_THROTTLE_CAP;
pub use routes::app;

use std::sync::Arc;

/// What every door shares.
#[derive(Debug)]
pub struct AppState {
    /// The cluster's side of this node (its port when it listens, the peers connected to it,
    /// the dialer), and the node's [`hearth_cluster::Core`] that the doors read through this
    /// state as if its own fields: the model host, store, route, identity, samples, limits and
    /// shutdown token.
    pub cluster: Arc<hearth_cluster::Context>,
    /// Where GGUF files live.
    pub models_dir: std::path::PathBuf,
    /// Where other apps keep models that can be imported.
    pub import_roots: hearth_models::import::Roots,
    /// Downloads from the hub or from peers into the models folder (`--hub-url`).
    pub downloads: Arc<hearth_models::Downloads>,
    /// Answers streaming into conversations right now.
    pub chats: chat::Chats,
    /// Whether the node is shared on the LAN, and the Host names it answers to.
    pub exposure: security::Exposure,
    /// The batch door's defaults and continuation cache.
    pub batch: batch::BatchDoor,
    /// The signed-challenge door's timeout and failure counters.
    pub auth: auth::AuthState,
    /// Notified when the cluster's passcode changed: the node moves its listener.
    pub cluster_rebind: Arc<tokio::sync::Notify>,
    /// Split models: this node's, and whether it shares its memory with peers' ones.
    pub splits: Arc<hearth_split::Splits>,
    /// Fetches images named by http(s) URL (`--image-urls`); `None`: only data URIs are read.
    pub image_urls: Option<image_urls::ImageUrls>,
}

impl std::ops::Deref for AppState {
    type Target = hearth_cluster::Core;

    fn deref(&self) -> &hearth_cluster::Core {
        &self.cluster.core
    }
}

/// What the node gives the doors besides the cluster's [`hearth_cluster::Context`] (and the
/// [`hearth_cluster::Core`] in it). The doors' own state (answers streaming into
/// conversations, exposure, the batch door's cache, the signed-challenge door's counters) is
/// made here.
#[derive(Debug)]
pub struct Parts {
    pub cluster: Arc<hearth_cluster::Context>,
    pub models_dir: std::path::PathBuf,
    pub import_roots: hearth_models::import::Roots,
    pub downloads: Arc<hearth_models::Downloads>,
    /// Start shared on the LAN, answering to these Host names besides loopback and addresses.
    pub exposed: bool,
    pub allowed_hosts: Vec<String>,
    pub batch_defaults: hearth_protocol::batch::BatchDefaults,
    pub auth_timeout: std::time::Duration,
    pub splits: Arc<hearth_split::Splits>,
    pub image_urls: Option<image_urls::ImageUrls>,
}

impl AppState {
    pub fn new(p: Parts) -> Self {
        Self {
            models_dir: p.models_dir,
            import_roots: p.import_roots,
            downloads: p.downloads,
            chats: chat::Chats::default(),
            exposure: security::Exposure::new(p.exposed, p.allowed_hosts),
            batch: batch::BatchDoor::new(p.batch_defaults),
            auth: auth::AuthState::new(p.auth_timeout),
            cluster_rebind: Arc::new(tokio::sync::Notify::new()),
            splits: p.splits,
            image_urls: p.image_urls,
            cluster: p.cluster,
        }
    }

    /// The cluster's dialer, while the cluster runs.
    pub fn dialer(&self) -> Option<Arc<hearth_cluster::dial::Dialer>> {
        self.cluster.dialer()
    }
}
