//! Downloads for the Models page: `POST /api/models/downloads` (`{"model":
//! "OWNER/REPO/FILE.gguf"}`) starts one, `GET` lists them with their progress, `DELETE
//! /api/models/downloads/{id}` cancels one. A finished file is in the models folder, where a
//! request naming it loads it.

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
use super::AppState;
use crate::models::DownloadError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartBody {
    /// `OWNER/REPO/FILE.gguf`, as on the hub.
    model: String,
}

pub(crate) fn failure(e: &DownloadError) -> ApiFailure {
    match e {
        DownloadError::Exists(_) | DownloadError::Busy { .. } => {
            ApiFailure::new(StatusCode::CONFLICT, "model_exists", e.to_string())
        }
        _ => ApiFailure::bad_request(e.to_string()),
    }
}

pub(crate) async fn start(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let body: StartBody = json_body(body)?;
    let progress = state
        .downloads
        .start(&body.model)
        .map_err(|e| failure(&e))?;
    Ok((StatusCode::ACCEPTED, Json(progress)).into_response())
}

pub(crate) async fn list(State(state): State<Arc<AppState>>) -> Response {
    Json(json!({"downloads": state.downloads.list()})).into_response()
}

pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    if !state.downloads.cancel(&id) {
        return Err(ApiFailure::not_found("download under way"));
    }
    Ok(Json(json!({"cancelled": id})).into_response())
}
