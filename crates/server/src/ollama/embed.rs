//! `POST /api/embed` (unit-length vectors, several inputs, `truncate`, `dimensions`) and the
//! older `POST /api/embeddings` (one prompt, the vector as the model pools it), computed by
//! this node's model through `crate::embeddings::compute`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hearth_engine::{EmbedError, EmbedFailure, EmbedInput, Embeddings};
use hearth_protocol::ollama::{
    nanos, parse_body, EmbedBody, EmbedResponse, EmbeddingsBody, KeepAlive, OllamaEmbed,
    OllamaError,
};

use super::chat::{keep, read_body, resolve, unload_named};
use super::{error, model_name, resolve_error, submit_error, Reply};
use crate::embeddings::{compute, EmbedProblem};
use crate::state::AppState;

fn problem(p: EmbedProblem, requested: &str) -> OllamaError {
    match p {
        EmbedProblem::Resolve(e) => resolve_error(e, requested),
        EmbedProblem::Remote(m) => OllamaError::bad_request(EmbedProblem::remote_message(&m)),
        EmbedProblem::Engine(EmbedFailure::Submit(e)) => submit_error(e),
        // Ollama's words for an input longer than the context, with `truncate: false`.
        EmbedProblem::Engine(EmbedFailure::Embed(e @ EmbedError::TooLong { .. })) => {
            OllamaError::bad_request(format!("input length exceeds the context length: {e}"))
        }
        EmbedProblem::Engine(EmbedFailure::Embed(e @ EmbedError::Failed(_))) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        EmbedProblem::Engine(EmbedFailure::Embed(e)) => OllamaError::bad_request(e.to_string()),
    }
}

/// The validated request's vectors and how long finding (or loading) the model took, or
/// `None` for a load-only request (no input).
async fn run(
    state: &AppState,
    req: &OllamaEmbed,
) -> Result<Option<(Embeddings, Duration)>, OllamaError> {
    if req.is_load_only() && req.keep_alive.is_some_and(KeepAlive::is_unload) {
        unload_named(state, &req.model).await?;
        return Ok(None);
    }
    // Still an unknown model's 404 for a load-only request; and the model's keep-alive.
    let (target, load) = resolve(state, &req.model).await?;
    keep(state, &target, req.keep_alive);
    if req.is_load_only() {
        return Ok(None);
    }
    let inputs = req.inputs.iter().cloned().map(EmbedInput::Text).collect();
    compute(state, Some(model_name(&req.model)), inputs, req.truncate)
        .await
        .map(|(_, e)| Some((e, load)))
        .map_err(|p| problem(p, &req.model))
}

pub(crate) async fn embed(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<EmbedResponse>, Reply> {
    let received = Instant::now();
    let body = read_body(body)?;
    let req = parse_body::<EmbedBody>(&body)?.validate()?;
    let Some((embeddings, load)) = run(&state, &req).await? else {
        // A load-only request: Ollama's `{"model", "embeddings": []}`.
        return Ok(Json(EmbedResponse {
            model: req.model,
            embeddings: Vec::new(),
            total_duration: None,
            load_duration: None,
            prompt_eval_count: None,
        }));
    };
    let (mut vectors, tokens) = (embeddings.vectors, embeddings.prompt_tokens);
    for v in &mut vectors {
        // Matryoshka-style shortening, as Ollama does: cut, then unit length again.
        if let Some(d) = req.dimensions.filter(|d| (*d as usize) < v.len()) {
            v.truncate(d as usize);
        }
        hearth_engine::normalize(v);
    }
    Ok(Json(EmbedResponse {
        model: req.model,
        embeddings: vectors,
        total_duration: Some(nanos(received.elapsed())),
        load_duration: Some(nanos(load)),
        prompt_eval_count: Some(tokens),
    }))
}

pub(crate) async fn embeddings(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<hearth_protocol::ollama::EmbeddingsResponse>, Reply> {
    let body = read_body(body)?;
    let req = parse_body::<EmbeddingsBody>(&body)?.validate()?;
    let out = run(&state, &req).await?;
    let embedding = out
        .and_then(|(e, _)| e.vectors.into_iter().next())
        .unwrap_or_default();
    Ok(Json(hearth_protocol::ollama::EmbeddingsResponse {
        embedding,
    }))
}
