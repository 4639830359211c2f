//! Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`): what
//! Claude Code speaks. A request is validated by `hearth_protocol::anthropic`, placed by the
//! route like every other door's, and its answer split by `hearth_engine::answer` (thinking,
//! tool calls) into content blocks by `hearth_protocol::anthropic`'s writer: whole, or streamed
//! as Anthropic's events (`message_start`, per block `content_block_start`/`_delta`/`_stop`,
//! `message_delta`, `message_stop`, `ping` while waiting). Errors keep Anthropic's shape
//! (`{"type": "error", "error": {...}}`).

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{Chat, Done, TokenEvent};
use hearth_protocol::anthropic::{
    self as wire, Blocks, Ended, ErrorBody, ErrorDetail, Message, MessagesBody, MessagesRequest,
    StreamEvent, TokenCount, Usage,
};
use hearth_protocol::openai::{parse_body, RequestError};

use crate::caller::Caller;
use crate::door::submit_chat;
use crate::door::{body_bytes, collect, fetch_image_urls, resolve};
use crate::error::ApiError;
use crate::state::AppState;
use crate::stream::{self as door_stream, End};
use hearth_engine::answer;

/// Whether `path` is this door's: its errors, wherever they arise (the guard, unknown paths,
/// a wrong method), take Anthropic's shape.
pub(crate) fn owns(path: &str) -> bool {
    path.starts_with("/v1/messages")
}

/// An error in Anthropic's shape, with the status (and `retry-after`) of the node's own.
#[derive(Debug)]
pub(crate) struct AnthropicError(pub(crate) ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let status = self.0.status;
        let mut message = self.0.body.error.message.clone();
        // The words Claude Code recognises as "the conversation no longer fits".
        if self.0.body.error.code == Some("context_length_exceeded") {
            message = format!("prompt is too long: {message}");
        }
        let body = ErrorBody::for_status(status.as_u16(), message);
        let mut response = self.0.into_response();
        *response.body_mut() =
            axum::body::Body::from(serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec()));
        response
    }
}

fn bad(e: RequestError) -> AnthropicError {
    AnthropicError(ApiError::bad_request(e))
}

/// Parse and validate a body, resolving its model first (its context bounds `max_tokens`).
async fn read(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    count: bool,
) -> Result<(hearth_route::Target, MessagesRequest), AnthropicError> {
    let body = body_bytes(body)?;
    let body = fetch_image_urls(state, body).await?;
    let wire: MessagesBody = parse_body(&body).map_err(bad)?;
    let model = match wire.model.as_deref().map(str::trim) {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => return Err(bad(RequestError::new("model", "model: Field required"))),
    };
    let target = resolve(state, Some(&model)).await?;
    let req = if count {
        wire.validate_count()
    } else {
        wire.validate(target.ctx())
    }
    .map_err(bad)?;
    if let Some(t) = &req.tools {
        hearth_engine::tools::check(t)
            .map_err(|e| bad(RequestError::new("tools", format!("tools: {e}"))))?;
    }
    Ok((target, req))
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens by this node's model's template
/// and tokenizer (with the tools as the template renders them, and each image as its
/// projector cuts it).
pub(crate) async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TokenCount>, AnthropicError> {
    let (target, req) = read(&state, body, true).await?;
    let Some(info) = target.local.clone() else {
        return Err(bad(RequestError::new(
            "model",
            format!(
                "counting tokens needs the model '{}' on this node; it is served by a peer",
                target.model
            ),
        )));
    };
    let chat = Chat {
        messages: req.messages,
        tools: req.tools,
        think: req.think,
    };
    // Images and clips count as the projector cuts them, not as their markers' few tokens.
    let counted =
        tokio::task::spawn_blocking(move || hearth_engine::count_chat_tokens(&info, &chat))
            .await
            .map_err(|e| {
                ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    Some("internal_error"),
                    None,
                    e.to_string(),
                )
            })?
            .map_err(|e| bad(RequestError::new("messages", e.to_string())))?;
    Ok(Json(TokenCount {
        input_tokens: u32::try_from(counted).unwrap_or(u32::MAX),
    }))
}

/// `POST /v1/messages`.
pub(crate) async fn messages(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AnthropicError> {
    let (target, req) = read(&state, body, false).await?;
    let chat = Chat {
        messages: req.messages,
        tools: req.tools,
        think: req.think,
    };
    let (mut gen, splitter) = submit_chat(
        &state.router,
        &target,
        chat,
        req.params,
        true,
        caller.cache_owner(),
    )
    .map_err(ApiError::from)?;
    let splitter = splitter.broken_calls_as_text();
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    let model = target.model.to_string();
    if !req.stream {
        let c = collect(&mut gen, &state.shutdown, false).await?;
        let (thinking, text, calls) = answer::split_whole(splitter, &c.text, c.done.reason)
            .map_err(|e| ApiError::from_call(&e))?;
        let message = wire::whole(id, model, thinking, text, &calls, &ended(&c.done));
        return Ok(Json(message).into_response());
    }
    let mut first = Message::new(id, model);
    first.usage.input_tokens = gen.prompt_tokens.unwrap_or(0);
    let start = StreamEvent::MessageStart { message: first };
    let blocks = Arc::new(Mutex::new(Blocks::default()));
    let splitter = Arc::new(Mutex::new(Some(splitter)));
    let on_token = {
        let (blocks, splitter) = (blocks.clone(), splitter.clone());
        move |t: &TokenEvent| -> Vec<StreamEvent> {
            let mut out = Vec::new();
            let pieces = match splitter.lock().ok().as_deref_mut().and_then(Option::as_mut) {
                Some(s) => s.push(&t.text),
                None => return out,
            };
            if let Ok(mut blocks) = blocks.lock() {
                blocks.pieces(pieces, &mut out);
            }
            out
        }
    };
    let on_done = move |d: &Done| -> Vec<StreamEvent> {
        let (Some(splitter), Ok(mut blocks)) = (
            splitter.lock().ok().and_then(|mut s| s.take()),
            blocks.lock(),
        ) else {
            return vec![];
        };
        let ending = match splitter.finish(d.reason) {
            Ok(e) => e,
            Err(e) => return vec![error_event(&ApiError::from_call(&e))],
        };
        let mut out = Vec::new();
        blocks.end(ending.pieces, &ending.calls, &ended(d), &mut out);
        out
    };
    let on_end = |end: End<'_>| match end {
        End::Done => vec![],
        End::Failed(f) => vec![error_event(&ApiError::from_failure(f))],
        End::ShuttingDown => vec![error_event(&ApiError::shutting_down())],
    };
    let batches = door_stream::batches(
        gen,
        state.shutdown.clone(),
        vec![start, StreamEvent::Ping],
        on_token,
        on_done,
        on_end,
    );
    let events = door_stream::sse_events(batches, sse_event);
    let ping = sse_event(StreamEvent::Ping);
    Ok(door_stream::sse_with_ping(
        events,
        state.limits.sse_keep_alive,
        ping,
    ))
}

/// An event under its `type` as the SSE event name (Anthropic's clients drop data-only ones).
fn sse_event(e: StreamEvent) -> SseEvent {
    door_stream::typed_event(serde_json::to_value(e).unwrap_or_default())
}

fn error_event(e: &ApiError) -> StreamEvent {
    StreamEvent::Error {
        error: ErrorDetail::for_status(e.status.as_u16(), e.body.error.message.clone()),
    }
}

/// How generation ended, as the Messages door reports it.
fn ended(d: &Done) -> Ended {
    Ended {
        reason: d.reason,
        stop_sequence: d.stop_sequence.clone(),
        usage: Usage::new(
            d.usage.prompt_tokens,
            d.usage.completion_tokens,
            d.timing.cached_tokens,
        ),
    }
}
