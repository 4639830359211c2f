//! The HTTP server: one axum app ([`app`]) for every door on one port, the shared [`AppState`], and
//! graceful shutdown (doors watch the shutdown token and send their final messages, then the
//! listener stops and the engine is stopped). The doors, each only translating between its
//! protocol and the route (`hearth_route`):
//! - `/v1/models`, `/v1/chat/completions`, `/v1/completions`: the OpenAI API (`openai`);
//!   `/v1/embeddings` (`embeddings`, shared with the Ollama door); `/v1/responses` (OpenAI's
//!   Responses API, `responses`); `/v1/messages` (Anthropic's Messages API, `anthropic`);
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
pub(crate) mod search_api;
pub mod security;
pub(crate) mod split_api;
pub(crate) mod status;
pub(crate) mod stream;
pub(crate) mod ui;
pub(crate) mod ws;

/// The setting that keeps the throttle cap made on the Settings page (the node applies it at start).
pub use image_urls::ImageUrls;
pub use node_settings::SETTING_THROTTLE_CAP;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::Uri;
use axum::routing::{delete, get, post};
use axum::Router;
use hearth_protocol::limits::MAX_HTTP_BODY_BYTES;

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

/// Unknown API paths answer in the OpenAI error format; everything else is the web UI.
async fn fallback(method: axum::http::Method, uri: Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = uri.path();
    if anthropic::owns(path) {
        return anthropic::AnthropicError(error::not_found(uri).await).into_response();
    }
    if method != axum::http::Method::GET || path.starts_with("/v1/") || path.starts_with("/api/") {
        return error::not_found(uri).await.into_response();
    }
    ui::serve(uri).await
}

/// A method a path does not take, in the door's own error shape.
async fn not_allowed(method: axum::http::Method, uri: Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let messages = anthropic::owns(uri.path());
    let e = error::method_not_allowed(method, uri).await;
    if messages {
        return anthropic::AnthropicError(e).into_response();
    }
    e.into_response()
}

/// Every route of the node, as one axum app (the route that places requests is `state.router`).
/// Tests drive it with `oneshot` or over a real socket.
pub fn app(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{*id}", get(openai::model))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/", get(auth::root))
        .route("/api/auth/register", post(auth::register))
        .route("/generate", get(generate::upgrade))
        .route("/node", get(hub_door::upgrade))
        .route("/metrics", get(metrics::metrics))
        .route("/ws", get(batch::upgrade))
        .route("/api/ws", get(batch::upgrade))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/embed", post(ollama::embed))
        .route("/api/embeddings", post(ollama::embeddings))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version))
        .route("/api/pull", post(ollama::pull))
        .route("/api/delete", axum::routing::delete(ollama::delete))
        .route("/api/status", get(status::status))
        .route("/api/events", get(events::upgrade))
        .route("/api/models", get(models_api::list_models))
        .route("/api/models/load", post(models_api::load_model))
        .route("/api/models/unload", post(models_api::unload_model))
        .route("/api/models/importable", get(models_api::importable))
        .route("/api/models/search", get(search_api::search))
        .route("/api/models/import", post(models_api::import))
        .route(
            "/api/models/split",
            get(split_api::list).post(split_api::split),
        )
        .route("/api/models/split/{id}", delete(split_api::unsplit))
        .route("/api/models/{id}", delete(models_api::remove))
        .route(
            "/api/models/downloads",
            get(downloads_api::list).post(downloads_api::start),
        )
        .route("/api/models/downloads/{id}", delete(downloads_api::cancel))
        .route(
            "/api/conversations",
            get(api::list_conversations).post(api::create_conversation),
        )
        .route(
            "/api/conversations/{id}",
            get(api::get_conversation)
                .patch(api::update_conversation)
                .delete(api::delete_conversation),
        )
        .route("/api/conversations/{id}/chat", post(chat::chat))
        .route("/api/messages/{id}/stop", post(chat::stop))
        .route("/api/images/{id}", get(api::get_image))
        .route("/api/audio/{id}", get(api::get_audio))
        .route("/api/keys", get(api::list_keys).post(api::create_key))
        .route(
            "/api/cluster",
            get(cluster_api::get).patch(cluster_api::patch),
        )
        .route("/api/cluster/peers", post(cluster_api::add_peer))
        .route("/api/node", axum::routing::patch(node_settings::patch))
        .route(
            "/api/cluster/peers/{address}",
            axum::routing::delete(cluster_api::remove_peer),
        )
        .route("/api/keys/{id}", axum::routing::delete(api::revoke_key))
        .fallback(fallback)
        .method_not_allowed_fallback(not_allowed)
        // Our own limit sits above axum's default so the OpenAI door reports it in its format.
        .layer(DefaultBodyLimit::max(MAX_HTTP_BODY_BYTES))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            state.limits.header_timeout,
        ))
        // Inside the guard, so the Host and Origin checks run first.
        .layer(security::cors())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::guard,
        ))
        .with_state(state)
}
