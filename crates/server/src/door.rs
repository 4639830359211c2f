//! The doors' shared toolkit: reading a request's body, resolving its model (waiting a while
//! for one that loads), fetching the images it names by URL, submitting a conversation with
//! the reader of its answer, collecting a whole answer, and the clock the answers are stamped
//! with. Every door takes these from here, so that no door imports another.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use hearth_engine::answer::{starts_in_thinking, Splitter};
use hearth_protocol::SamplingParams;
use hearth_route::{Generation, Target};
use tokio_util::sync::CancellationToken;

use crate::error::{body_rejection_text, ApiError};
use crate::state::AppState;
use crate::stream::Collected;

/// How long a request waits for a model that is still loading.
pub(crate) const MODEL_WAIT: Duration = Duration::from_secs(120);

/// Seconds since the Unix epoch: the `created` of an answer.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The request's body, or its rejection (too large: `request_too_large`) as a 4xx.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        let status = e.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            Some("request_too_large")
        } else {
            None
        };
        ApiError::new(
            status,
            "invalid_request_error",
            code,
            None,
            body_rejection_text(&e),
        )
    })
}

/// `body` with the images it names by http(s) URL fetched, where the node allows it
/// (`--image-urls`; else as it came, and the door refuses such a URL), once the model the body
/// names is known to take images: a model sure not to see them is refused before any fetch.
pub(crate) async fn fetch_image_urls(state: &AppState, body: Bytes) -> Result<Bytes, ApiError> {
    let Some(urls) = &state.image_urls else {
        return Ok(body);
    };
    let gate = async |model: Option<String>| {
        let target = resolve(state, model.as_deref()).await?;
        Ok(state.router.refuses_images(&target)?)
    };
    urls.inline(body, gate).await
}

/// What the request's model name means here, waiting (bounded) for a model that loads.
pub(crate) async fn resolve(state: &AppState, requested: Option<&str>) -> Result<Target, ApiError> {
    Ok(state.router.resolve(requested, MODEL_WAIT).await?)
}

/// The whole answer of `gen` (its token details too when `keep_tokens`), or its failure.
pub(crate) async fn collect(
    gen: &mut Generation,
    shutdown: &CancellationToken,
    keep_tokens: bool,
) -> Result<Collected, ApiError> {
    crate::stream::collect(gen, shutdown, keep_tokens)
        .await
        .map_err(|f| f.map_or_else(ApiError::shutting_down, |f| ApiError::from_failure(&f)))
}

/// Submit a conversation through the route, with the splitter for its answer: thinking apart
/// when `reasoning`, calls read when it has tools, and the start inside a thinking block when
/// the template of this node's model opens one.
pub(crate) fn submit_chat(
    router: &hearth_route::Router,
    target: &hearth_route::Target,
    chat: hearth_engine::Chat,
    params: SamplingParams,
    reasoning: bool,
    owner: hearth_engine::CacheOwner,
) -> Result<(hearth_route::Generation, Splitter), hearth_engine::SubmitError> {
    let tools = chat.tools.clone();
    let opened = starts_in_thinking(target.local.as_deref(), chat.think, &params, tools.as_ref());
    let gen = router.submit(
        target,
        hearth_engine::Request {
            prompt: hearth_engine::Prompt::Chat(chat),
            params,
            owner,
        },
    )?;
    let splitter = Splitter::new(reasoning, tools, gen.id.to_string()).opened_thinking(opened);
    Ok((gen, splitter))
}
