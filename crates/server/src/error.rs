//! OpenAI-format errors for the HTTP doors: one [`ApiError`] type that becomes
//! `{"error":{"message","type","param","code"}}` with the right status, and the one mapping
//! from engine errors to it.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{Failure, FailureKind, SubmitError};
use hearth_protocol::openai::{ErrorBody, RequestError};

#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) body: ErrorBody,
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        kind: &'static str,
        code: Option<&'static str>,
        param: Option<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            body: ErrorBody::new(kind, code, param, message),
            retry_after: None,
        }
    }

    pub(crate) fn bad_request(e: RequestError) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            e.param,
            e.message,
        )
    }

    pub(crate) fn model_not_found(requested: &str, served: &[hearth_protocol::ModelId]) -> Self {
        let served = match served {
            [] => "no model".to_owned(),
            list => list
                .iter()
                .map(|m| format!("'{m}'"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            Some("model_not_found"),
            Some("model".into()),
            format!("The model '{requested}' does not exist or is not loaded. This node serves {served}."),
        )
    }

    pub(crate) fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            Some("server_shutdown"),
            None,
            "The server is shutting down.",
        )
    }

    /// An answer whose tool calls could not be read: cut off by `max_tokens` (the client's
    /// to change), or not valid.
    pub(crate) fn from_call(e: &hearth_engine::answer::CallError) -> Self {
        match e {
            hearth_engine::answer::CallError::Cut(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("tool_call_cut_off"),
                Some("max_tokens".into()),
                e.to_string(),
            ),
            hearth_engine::answer::CallError::Invalid(_) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                Some("tool_call_invalid"),
                None,
                e.to_string(),
            ),
        }
    }

    /// For `/v1/completions`, whose prompt is `prompt`: the chat door's `messages` renamed.
    pub(crate) fn naming_prompt(mut self) -> Self {
        if self.body.error.param.as_deref() == Some("messages") {
            self.body.error.param = Some("prompt".into());
        }
        self
    }

    pub(crate) fn from_failure(f: &Failure) -> Self {
        match f.kind {
            FailureKind::ShuttingDown => Self::shutting_down(),
            FailureKind::Unloaded => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                Some("model_unloaded"),
                None,
                f.message.clone(),
            ),
            FailureKind::Invalid => Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                None,
                None,
                f.message.clone(),
            ),
            FailureKind::Decode => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                Some("internal_error"),
                None,
                f.message.clone(),
            ),
        }
    }
}

/// What a door says of a body it could not read: axum's words, but for a body over the limit,
/// which says the limit (axum's says only "length limit exceeded").
pub(crate) fn body_rejection_text(e: &axum::extract::rejection::BytesRejection) -> String {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return format!(
            "the request body is over this node's limit of {} MiB (images and audio count as base64)",
            hearth_protocol::limits::MAX_HTTP_BODY_BYTES >> 20
        );
    }
    e.body_text()
}

impl From<hearth_route::ResolveError> for ApiError {
    fn from(e: hearth_route::ResolveError) -> Self {
        match e {
            hearth_route::ResolveError::Unknown { requested, served } => {
                Self::model_not_found(&requested, &served)
            }
            hearth_route::ResolveError::Engine(e) => e.into(),
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let message = e.to_string();
        match e {
            SubmitError::ContextLengthExceeded { .. } => Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("context_length_exceeded"),
                Some("messages".into()),
                message,
            ),
            SubmitError::QueueFull { retry_after, .. } => Self {
                retry_after: Some(retry_after.as_secs().max(1)),
                ..Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    Some("rate_limit_exceeded"),
                    None,
                    message,
                )
            },
            SubmitError::ModelLoading { .. } => Self {
                retry_after: Some(1),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    Some("model_loading"),
                    None,
                    message,
                )
            },
            SubmitError::LoadFailed { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                Some("model_load_failed"),
                None,
                message,
            ),
            SubmitError::Prompt(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("invalid_prompt"),
                Some("messages".into()),
                message,
            ),
            SubmitError::Unavailable { retry_after, .. } => Self {
                retry_after: Some(retry_after.as_secs().max(1)),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    Some("model_unavailable"),
                    None,
                    message,
                )
            },
            SubmitError::ShuttingDown => Self::shutting_down(),
            SubmitError::NoModel => Self {
                retry_after: Some(5),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    Some("no_model"),
                    None,
                    message,
                )
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, message = %self.body.error.message, "request failed");
        }
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

pub(crate) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        Some("not_found"),
        None,
        format!("Unknown path {}", uri.path()),
    )
}

pub(crate) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        Some("method_not_allowed"),
        None,
        format!("{method} is not allowed on {}", uri.path()),
    )
}
