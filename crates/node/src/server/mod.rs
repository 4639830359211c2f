//! The HTTP server: one axum router for every door on one port, the shared [`AppState`],
//! and graceful shutdown (doors watch the shutdown token and send their final messages, then
//! the listener stops and the engine is stopped).

pub(crate) mod error;
pub(crate) mod generate;
pub(crate) mod openai;
pub(crate) mod status;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use hearth_engine::Engine;
use hearth_protocol::limits::MAX_HTTP_BODY_BYTES;
use hearth_protocol::ModelId;
use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// What every door shares.
#[derive(Debug)]
pub struct AppState {
    pub engine: Engine,
    pub store: Store,
    /// The model this node serves, as clients name it.
    pub model_id: ModelId,
    /// Cancelled when the node begins shutting down.
    pub shutdown: CancellationToken,
}

/// Every route of the node. Tests drive it with `oneshot` or over a real socket.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/generate", get(generate::upgrade))
        .route("/api/status", get(status::status))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        // Our own limit sits above axum's default so the OpenAI door reports it in its format.
        .layer(DefaultBodyLimit::max(MAX_HTTP_BODY_BYTES))
        .with_state(state)
}
