//! `GET /api/status`: the node's model state and engine load as JSON, for scripts, tests and
//! the UI. Read-only and cheap: it copies counters, it does not ask the engine thread.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use hearth_engine::ModelState;
use serde::Serialize;

use super::AppState;

#[derive(Debug, Serialize)]
pub(crate) struct Status {
    model: ModelStatus,
    slots: usize,
    active: usize,
    queued: usize,
    tokens_generated: u64,
    requests_finished: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct ModelStatus {
    id: String,
    /// `loading`, `ready`, `failed` or `stopped`.
    state: &'static str,
    progress: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ctx_per_slot: Option<u32>,
}

pub(crate) async fn status(State(state): State<Arc<AppState>>) -> Json<Status> {
    let stats = state.engine.stats();
    let model = match &*state.engine.model_state().borrow() {
        ModelState::Loading { progress, .. } => ModelStatus {
            id: state.model_id.to_string(),
            state: "loading",
            progress: *progress,
            error: None,
            ctx_per_slot: None,
        },
        ModelState::Ready(info) => ModelStatus {
            id: info.id.to_string(),
            state: "ready",
            progress: 1.0,
            error: None,
            ctx_per_slot: Some(info.ctx_per_slot),
        },
        ModelState::Failed { message, .. } => ModelStatus {
            id: state.model_id.to_string(),
            state: "failed",
            progress: 0.0,
            error: Some(message.clone()),
            ctx_per_slot: None,
        },
        ModelState::Stopped => ModelStatus {
            id: state.model_id.to_string(),
            state: "stopped",
            progress: 0.0,
            error: None,
            ctx_per_slot: None,
        },
    };
    Json(Status {
        model,
        slots: stats.slots,
        active: stats.active,
        queued: stats.queued,
        tokens_generated: stats.tokens_generated,
        requests_finished: stats.requests_finished,
    })
}
