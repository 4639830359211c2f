//! Embeddings: [`compute`], the one call the OpenAI door (`POST /v1/embeddings`, in
//! `openai::embeddings`) and the Ollama door make. They are computed by this node's own model
//! on its engine (in a context beside the generation slots): a model that only peers or
//! workers serve is refused with the reason, since neither the worker protocol nor TealeNet's
//! messages carry embeddings.

use std::sync::Arc;

use hearth_engine::{EmbedFailure, EmbedInput, Embeddings, ModelInfo, SubmitError};
use hearth_protocol::ModelId;
use hearth_route::ResolveError;

use crate::door::MODEL_WAIT;
use crate::state::AppState;

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
        format!("embeddings and rankings are computed by a node's own model, and '{model}' is served only by other nodes of this cluster")
    }
}

/// The embeddings of `inputs` by the model `requested` names (none: this node's model).
pub(crate) async fn compute(
    state: &AppState,
    requested: Option<&str>,
    inputs: Vec<EmbedInput>,
    truncate: bool,
) -> Result<(Arc<ModelInfo>, Embeddings), EmbedProblem> {
    on_engine(state, requested, |engine| async move {
        engine.embed(inputs, truncate).await
    })
    .await
}

/// `work` on the engine of the model `requested` names (none: this node's model), loaded on
/// demand and held busy while it runs (neither reaped nor evicted under it): what embeddings
/// and reranking share.
pub(crate) async fn on_engine<T, F, Fut>(
    state: &AppState,
    requested: Option<&str>,
    work: F,
) -> Result<(Arc<ModelInfo>, T), EmbedProblem>
where
    F: FnOnce(hearth_engine::Engine) -> Fut,
    Fut: std::future::Future<Output = Result<T, EmbedFailure>>,
{
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
        r = work(engine) => r.map_err(EmbedProblem::Engine)?,
        () = state.shutdown.cancelled() => {
            return Err(EmbedProblem::Engine(SubmitError::ShuttingDown.into()))
        }
    };
    Ok((info, out))
}
