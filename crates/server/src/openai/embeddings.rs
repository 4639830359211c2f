//! OpenAI's `POST /v1/embeddings`: the inputs through [`crate::embeddings::compute`], each
//! vector made unit-length as OpenAI's are, and every refusal in OpenAI's error shape.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hearth_engine::{EmbedError, EmbedFailure, EmbedInput, SubmitError};
use hearth_protocol::embeddings::{EmbeddingBody, EmbeddingList, Input};
use hearth_protocol::openai::parse_body;

use crate::door::body_bytes;
use crate::embeddings::{compute, EmbedProblem};
use crate::error::ApiError;
use crate::state::AppState;

/// An embedding or ranking problem in OpenAI's error shape (`/v1/rerank` answers so too).
pub(crate) fn api_error(p: EmbedProblem) -> ApiError {
    let bad = |code, message: String| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some(code),
            Some("input".into()),
            message,
        )
    };
    match p {
        EmbedProblem::Resolve(e) => e.into(),
        EmbedProblem::Remote(m) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("model_not_supported"),
            Some("model".into()),
            EmbedProblem::remote_message(&m),
        ),
        EmbedProblem::Engine(EmbedFailure::Submit(SubmitError::Prompt(e))) => {
            bad("invalid_input", e.to_string())
        }
        EmbedProblem::Engine(EmbedFailure::Submit(e)) => e.into(),
        EmbedProblem::Engine(EmbedFailure::Embed(e)) => match e {
            EmbedError::TooLong { .. } => bad("context_length_exceeded", e.to_string()),
            EmbedError::EmptyInput { .. } | EmbedError::NoInput => {
                bad("invalid_input", e.to_string())
            }
            EmbedError::Unsupported(_) | EmbedError::NotReranker(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("model_not_supported"),
                Some("model".into()),
                e.to_string(),
            ),
            EmbedError::Failed(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                Some("internal_error"),
                None,
                e.to_string(),
            ),
        },
    }
}

/// `POST /v1/embeddings`: unit-length vectors, as OpenAI's are.
pub(crate) async fn embeddings(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<EmbeddingList>, ApiError> {
    let body = body_bytes(body)?;
    let wire: EmbeddingBody = parse_body(&body).map_err(ApiError::bad_request)?;
    let req = wire.validate().map_err(ApiError::bad_request)?;
    let inputs = req
        .inputs
        .into_iter()
        .map(|i| match i {
            Input::Text(t) => EmbedInput::Text(t),
            Input::Tokens(t) => EmbedInput::Tokens(t),
        })
        .collect();
    // OpenAI refuses an input that is too long rather than cutting it.
    let (info, mut out) = compute(&state, req.model.as_deref(), inputs, false)
        .await
        .map_err(api_error)?;
    let width = out.vectors.first().map_or(0, Vec::len);
    if let Some(d) = req.dimensions.filter(|d| *d as usize != width) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("invalid_value"),
            Some("dimensions".into()),
            format!("'{}' makes vectors of {width} dimensions, not {d}", info.id),
        ));
    }
    for v in &mut out.vectors {
        hearth_engine::normalize(v);
    }
    Ok(Json(EmbeddingList::new(
        info.id.to_string(),
        out.vectors,
        req.encoding,
        out.prompt_tokens,
    )))
}
