//! The Ollama door (Ollama's `docs/api.md`): `/api/chat` and `/api/generate` (NDJSON lines, or
//! one object with `"stream": false`) through the route like every other door, `/api/embed`
//! and `/api/embeddings` (this node's model), `/api/tags`, `/api/show`, `/api/ps`,
//! `/api/version`, `/api/pull` (a download from the hub) and `/api/delete`. It only translates: validation is `hearth_protocol::ollama`'s, and every error is
//! Ollama's `{"error": "..."}` with Ollama's status.
//!
//! Ollama names models `name:tag`; a model here has no tag, so `name:latest` means `name`.
//! A model in the models folder loads when a request names it; a request's `keep_alive` sets
//! how long it stays loaded idle, and no input with `keep_alive: 0` unloads it.

mod chat;
mod embed;
mod models;
mod pull;

use std::time::SystemTime;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{Failure, FailureKind, SubmitError};
use hearth_protocol::ollama::OllamaError;

use hearth_route::ResolveError;

pub(crate) use chat::{chat, generate};
pub(crate) use embed::{embed, embeddings};
pub(crate) use models::{delete, ps, show, tags, version};
pub(crate) use pull::pull;

/// The paths of Ollama's API served here: errors on them, the security layer's too, are
/// Ollama's `{"error": "..."}`.
pub(crate) const PATHS: &[&str] = &[
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/api/tags",
    "/api/show",
    "/api/ps",
    "/api/version",
    "/api/pull",
    "/api/delete",
];

/// Those of [`PATHS`] that manage the models folder rather than use a model: the guard keeps
/// them from keys of scope `use`.
pub(crate) const MANAGEMENT_PATHS: &[&str] = &["/api/pull", "/api/delete"];

/// An Ollama-shaped error as an HTTP response.
#[derive(Debug)]
pub(crate) struct Reply(pub(crate) OllamaError);

impl From<OllamaError> for Reply {
    fn from(e: OllamaError) -> Self {
        Self(e)
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(%status, message = %self.0.message, "ollama request failed");
        }
        let mut response = (status, Json(self.0.body())).into_response();
        if let Some(v) = self
            .0
            .retry_after
            .and_then(|s| axum::http::HeaderValue::from_str(&s.to_string()).ok())
        {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, v);
        }
        response
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> OllamaError {
    OllamaError {
        status: status.as_u16(),
        message: message.into(),
        retry_after: None,
    }
}

/// The model a client named, as this node names it (`name:latest` is `name`).
fn model_name(requested: &str) -> &str {
    let name = requested.strip_suffix(":latest").unwrap_or(requested);
    // A model pulled from the hub (`hf.co/OWNER/REPO/FILE.gguf`) is its file here.
    match name.rsplit_once('/') {
        Some((_, file)) if file.ends_with(".gguf") => file.strip_suffix(".gguf").unwrap_or(file),
        _ => name,
    }
}

fn resolve_error(e: ResolveError, requested: &str) -> OllamaError {
    match e {
        ResolveError::Unknown { .. } => OllamaError::model_not_found(requested),
        ResolveError::Engine(e) => submit_error(e),
    }
}

fn submit_error(e: SubmitError) -> OllamaError {
    let status = match &e {
        SubmitError::ContextLengthExceeded { .. } | SubmitError::Prompt(_) => {
            StatusCode::BAD_REQUEST
        }
        SubmitError::QueueFull { .. } => {
            // Ollama's own words when its queue is full.
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server busy, please try again.  maximum pending requests exceeded",
            );
        }
        SubmitError::LoadFailed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        SubmitError::ModelLoading { .. }
        | SubmitError::ShuttingDown
        | SubmitError::NoModel
        | SubmitError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
    };
    let retry_after = match &e {
        SubmitError::Unavailable { retry_after, .. } => Some(retry_after.as_secs().max(1)),
        _ => None,
    };
    OllamaError {
        retry_after,
        ..error(status, e.to_string())
    }
}

fn failure_error(f: Option<&Failure>) -> OllamaError {
    match f {
        Some(f) if f.kind == FailureKind::Decode => {
            error(StatusCode::INTERNAL_SERVER_ERROR, f.message.clone())
        }
        Some(f) if f.kind == FailureKind::Invalid => {
            error(StatusCode::BAD_REQUEST, f.message.clone())
        }
        Some(f) => error(StatusCode::SERVICE_UNAVAILABLE, f.message.clone()),
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down",
        ),
    }
}

/// Now, as Ollama writes `created_at`.
fn now_rfc3339() -> String {
    humantime::format_rfc3339_nanos(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latest_tag_names_the_model_itself() {
        assert_eq!(model_name("smol:latest"), "smol");
        assert_eq!(model_name("smol"), "smol");
        assert_eq!(model_name("smol:q4"), "smol:q4");
        // Pulled from the hub under its file's name.
        assert_eq!(model_name("hf.co/o/r/dir/Smol-Q4.gguf"), "Smol-Q4");
    }

    #[test]
    fn a_full_queue_is_ollamas_busy_error() {
        let e = submit_error(SubmitError::QueueFull {
            slots: 1,
            queued: 1,
            retry_after: std::time::Duration::from_secs(1),
        });
        assert_eq!(e.status, 503);
        assert!(e.message.starts_with("server busy"), "{}", e.message);
        assert_eq!(submit_error(SubmitError::NoModel).status, 503);
    }
}
