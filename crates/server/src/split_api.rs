//! Split models through the API (the Models page): where each split model's layers are
//! (`GET /api/models/split`), split one over the peers that share their memory (`POST`), and
//! serve it whole again (`DELETE /api/models/split/{id}`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::api::{json_body, ApiFailure};
use crate::state::AppState;
use hearth_split::SplitError;

pub(crate) async fn list(State(state): State<Arc<AppState>>) -> Response {
    Json(json!({
        "splits": state.splits.placements(&state.cluster),
        "share_memory": state.splits.shares_memory(),
        // The most this node gives peers' split models, in MiB (null: what is free).
        "share_memory_limit_mib": state.splits.share_limit().filter(|&l| l != u64::MAX).map(|l| l >> 20),
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SplitBody {
    model: String,
}

pub(crate) async fn split(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let body: SplitBody = json_body(body)?;
    if !hearth_models::registry::plain_name(&body.model) {
        return Err(ApiFailure::bad_request(
            "model must be a model name from GET /api/models",
        ));
    }
    match state.splits.start(&state.cluster, &body.model).await {
        Ok(placement) => Ok((StatusCode::ACCEPTED, Json(placement)).into_response()),
        Err(e) => {
            let (status, code) = match &e {
                SplitError::Unknown(_) => (StatusCode::NOT_FOUND, "not_found"),
                SplitError::Already(_) | SplitError::Stopped(_) => {
                    (StatusCode::CONFLICT, "already_split")
                }
                SplitError::NoLayers(_) => (StatusCode::BAD_REQUEST, "not_splittable"),
                SplitError::NoCluster | SplitError::NoPeer(_) => {
                    (StatusCode::CONFLICT, "no_peer_shares_memory")
                }
                SplitError::NoRoom { .. } => (StatusCode::CONFLICT, "not_enough_memory"),
                SplitError::Worker(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
            };
            Err(ApiFailure::new(status, code, e.to_string()))
        }
    }
}

pub(crate) async fn unsplit(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    let model = hearth_protocol::ModelId(id.strip_suffix(".gguf").unwrap_or(&id).to_owned());
    if state.splits.stop(&state.cluster, &model) {
        Ok(Json(json!({"model": model, "split": false})).into_response())
    } else {
        Err(ApiFailure::not_found("split model"))
    }
}
