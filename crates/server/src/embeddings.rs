//! Embeddings: OpenAI's `POST /v1/embeddings`, and [`compute`], the one call it and the Ollama
//! door make. Embeddings are computed by this node's own model on its engine (in a context
//! beside the generation slots): a model that only peers or workers serve is refused with the
//! reason, since neither the worker protocol nor TealeNet's messages carry embeddings.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hearth_engine::{EmbedError, EmbedFailure, EmbedInput, Embeddings, ModelInfo, SubmitError};
use hearth_protocol::embeddings::{EmbeddingBody, EmbeddingList, Input};
use hearth_protocol::openai::parse_body;
use hearth_protocol::ModelId;

use super::error::ApiError;
use super::openai::{body_bytes, MODEL_WAIT};
use super::AppState;
use hearth_route::ResolveError;

/// Why no embeddings were made, before each door words it.
#[derive(Debug)]
pub(crate) enum EmbedProblem {
    Resolve(ResolveError),
    /// The model is served only by peers or workers.
    Remote(ModelId),
    Engine(EmbedFailure),
}

impl EmbedProblem {
    /// Said the same way by both doors.
    pub(crate) fn remote_message(model: &ModelId) -> String {
        format!("embeddings are computed by a node's own model, and '{model}' is served only by other nodes of this cluster")
    }
}

/// The embeddings of `inputs` by the model `requested` names (none: this node's model).
pub(crate) async fn compute(
    state: &AppState,
    requested: Option<&str>,
    inputs: Vec<EmbedInput>,
    truncate: bool,
) -> Result<(Arc<ModelInfo>, Embeddings), EmbedProblem> {
    let target = state
        .router
        .resolve(requested, MODEL_WAIT)
        .await
        .map_err(EmbedProblem::Resolve)?;
    let Some(info) = target.local else {
        return Err(EmbedProblem::Remote(target.model));
    };
    // The engine of the model named, not the focus model's.
    // Marked busy while it runs, so the model is neither reaped nor evicted under it.
    let (engine, _in_use) = state
        .router
        .host()
        .embedding(&target.model)
        .ok_or(EmbedProblem::Engine(SubmitError::NoModel.into()))?;
    let out = tokio::select! {
        r = engine.embed(inputs, truncate) => r.map_err(EmbedProblem::Engine)?,
        () = state.shutdown.cancelled() => {
            return Err(EmbedProblem::Engine(SubmitError::ShuttingDown.into()))
        }
    };
    Ok((info, out))
}

fn api_error(p: EmbedProblem) -> ApiError {
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
            EmbedError::Unsupported(_) => ApiError::new(
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
pub(crate) async fn openai(
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
