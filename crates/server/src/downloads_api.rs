//! Downloads for the Models page: `POST /api/models/downloads` (`{"model":
//! "OWNER/REPO/FILE.gguf"}`) starts one (with `"wait": true`, answers when it is over), `GET`
//! lists them with their progress, `DELETE
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
use crate::state::AppState;
use hearth_models::DownloadError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartBody {
    /// `OWNER/REPO/FILE.gguf`, as on the hub, or a model name the cluster's peers have.
    model: String,
    /// Answer once the download is over (a script's way to wait without asking again).
    #[serde(default)]
    wait: bool,
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
    if !body.wait {
        return Ok((StatusCode::ACCEPTED, Json(progress)).into_response());
    }
    // Over: the download's last progress, whether it was done, failed or cancelled (the
    // download goes on if the client leaves first).
    let over = state.downloads.wait(&progress.id).await.unwrap_or(progress);
    Ok(Json(over).into_response())
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
