//! `POST /api/chat` and `POST /api/generate`: validated by `hearth_protocol::ollama`, placed by
//! the route (this node, a hub worker or a LAN peer), answered as NDJSON lines (one per token,
//! then a final line with `done_reason` and Ollama's nanosecond metrics) or, with
//! `"stream": false`, as one object. A `format` (JSON, or a JSON schema) becomes a llama.cpp
//! grammar; `/api/generate` answers with `context` (the token ids to send back) when this
//! node's model ran it.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{Stream, StreamExt as _};
use hearth_engine::{Chat, Done, Failure, Prompt, Request, SubmitError, TokenEvent};
use hearth_protocol::ollama::{
    parse_body, ChatBody, ChatResponse, DoneReason, ErrorBody, Format, GenerateBody,
    GenerateResponse, KeepAlive, Metrics, OllamaError,
};
use hearth_protocol::{SamplingParams, ToolCall};

use super::{error, failure_error, model_name, now_rfc3339, resolve_error, submit_error, Reply};
use crate::caller::Caller;
use crate::door::submit_chat;
use crate::door::MODEL_WAIT;
use crate::state::AppState;
use crate::stream::{self, End};
use hearth_engine::answer::{self, CallError, Piece, Splitter};
use hearth_route::{Generation, Target};

/// The body's bytes, or Ollama's error for a body that is too large or never arrived.
pub(super) fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, OllamaError> {
    body.map_err(|e| OllamaError {
        status: e.status().as_u16(),
        message: crate::error::body_rejection_text(&e),
        retry_after: None,
    })
}

/// What `model` means here, and how long finding it took (waiting for a model that loads).
pub(super) async fn resolve(
    state: &AppState,
    model: &str,
) -> Result<(Target, Duration), OllamaError> {
    if model.trim().is_empty() {
        return Err(OllamaError::bad_request("model is required"));
    }
    let started = Instant::now();
    let target = state
        .router
        .resolve(Some(model_name(model)), MODEL_WAIT)
        .await
        .map_err(|e| resolve_error(e, model))?;
    Ok((target, started.elapsed()))
}

/// `format` as a grammar on `params`.
fn constrain(params: &mut SamplingParams, format: Option<Format>) -> Result<(), OllamaError> {
    answer::constrain(params, format)
        .map_err(|e| OllamaError::bad_request(format!("invalid format: {e}")))
}

/// An answer whose tool calls could not be read: cut off (the client's `num_predict` to
/// raise), or not valid.
fn call_error(e: &CallError) -> OllamaError {
    OllamaError {
        status: match e {
            CallError::Cut(_) => 400,
            CallError::Invalid(_) => 500,
        },
        message: e.to_string().replace("max_tokens", "num_predict"),
        retry_after: None,
    }
}

/// One streamed line of `/api/chat` for what a token released: its text and its thinking.
fn chat_line(model: &str, pieces: Vec<Piece>, calls: Vec<ToolCall>) -> Option<String> {
    if pieces.is_empty() && calls.is_empty() {
        return None;
    }
    let mut chunk = ChatResponse::chunk(model, &now_rfc3339(), "");
    for p in pieces {
        match p {
            Piece::Content(t) => chunk.message.content.push_str(&t),
            Piece::Reasoning(t) => chunk
                .message
                .thinking
                .get_or_insert_with(String::new)
                .push_str(&t),
        }
    }
    chunk.message.tool_calls = calls;
    Some(line(&chunk))
}

/// Ollama's unload request (no input and `keep_alive: 0`): unload `model` when it is loaded
/// here, without loading it first. `false` when the request is not one.
async fn unload_request(
    state: &AppState,
    model: &str,
    keep_alive: Option<&serde_json::Value>,
    no_input: bool,
) -> Result<bool, OllamaError> {
    if !no_input || !KeepAlive::parse(keep_alive)?.is_some_and(KeepAlive::is_unload) {
        return Ok(false);
    }
    unload_named(state, model).await?;
    Ok(true)
}

/// Unload the model `model` names here, once its running answers finish.
pub(super) async fn unload_named(state: &AppState, model: &str) -> Result<(), OllamaError> {
    if model.trim().is_empty() {
        return Err(OllamaError::bad_request("model is required"));
    }
    let host = state.router.host();
    let here = host
        .models_here()
        .into_iter()
        .find(|m| m.matches(model_name(model)));
    match here {
        // Other clients' answers finish first, as with Ollama: the model unloads once idle.
        Some(id) if host.is_busy(&id) => host.set_keep_alive(&id, Some(Duration::ZERO)),
        Some(id) => {
            host.unload(Some(&id)).await;
        }
        None if state
            .router
            .models()
            .iter()
            .any(|m| m.matches(model_name(model))) => {}
        None => return Err(OllamaError::model_not_found(model)),
    }
    Ok(())
}

/// A request's `keep_alive` for the model that runs it here.
pub(super) fn keep(state: &AppState, target: &Target, keep_alive: Option<KeepAlive>) {
    if target.local.is_some() {
        let d = keep_alive.map(|k| k.duration().unwrap_or(Duration::MAX));
        state.router.host().set_keep_alive(&target.model, d);
    }
}

fn metrics(d: &Done, received: Instant, load: Duration) -> Metrics {
    let t = &d.timing;
    let decoding = t.total.saturating_sub(t.first_token.unwrap_or(t.total));
    Metrics {
        total_duration: hearth_protocol::ollama::nanos(received.elapsed()),
        load_duration: hearth_protocol::ollama::nanos(load),
        prompt_eval_count: d.usage.prompt_tokens,
        prompt_eval_cached_count: t.cached_tokens.min(d.usage.prompt_tokens),
        prompt_eval_duration: hearth_protocol::ollama::nanos(t.prefill),
        eval_count: d.usage.completion_tokens,
        eval_duration: hearth_protocol::ollama::nanos(decoding),
    }
}

fn line<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| error_line(&e.to_string()))
}

pub(super) fn error_line(message: &str) -> String {
    serde_json::to_string(&ErrorBody {
        error: message.to_owned(),
    })
    .unwrap_or_else(|_| r#"{"error":"internal error"}"#.into())
}

fn end_lines(end: End<'_>) -> Vec<String> {
    match end {
        End::Done => vec![],
        End::Failed(f) => vec![error_line(&failure_error(Some(f)).message)],
        End::ShuttingDown => vec![error_line(&failure_error(None).message)],
    }
}

/// NDJSON: each batch of lines leaves in one write.
pub(super) fn ndjson(batches: impl Stream<Item = Vec<String>> + Send + 'static) -> Response {
    let body = Body::from_stream(batches.map(|lines| {
        let mut text = lines.join("\n");
        text.push('\n');
        Ok::<_, Infallible>(Bytes::from(text))
    }));
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

fn collected_error(f: Option<Failure>) -> Reply {
    Reply(failure_error(f.as_ref()))
}

pub(crate) async fn chat(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Reply> {
    let received = Instant::now();
    let body = read_body(body)?;
    let wire: ChatBody = parse_body(&body)?;
    if unload_request(
        &state,
        &wire.model,
        wire.keep_alive.as_ref(),
        wire.messages.is_empty(),
    )
    .await?
    {
        let done = ChatResponse::done(&wire.model, &now_rfc3339(), "", DoneReason::Unload, None);
        return Ok(Json(done).into_response());
    }
    let (target, load) = resolve(&state, &wire.model).await?;
    let mut req = wire.validate(target.ctx())?;
    keep(&state, &target, req.keep_alive);
    let model = req.model.clone();
    if req.is_load_only() {
        let done = ChatResponse::done(&model, &now_rfc3339(), "", DoneReason::Load, None);
        return Ok(Json(done).into_response());
    }
    constrain(&mut req.params, req.format.take())?;
    if let Some(t) = &req.tools {
        hearth_engine::tools::check(t)
            .map_err(|e| OllamaError::bad_request(format!("invalid tools: {e}")))?;
    }
    // Thinking goes apart unless the client turned it off (then it stays in the text, if the
    // template could not turn it off).
    let reasoning = req.think != Some(false);
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
        reasoning,
        caller.cache_owner(),
    )
    .map_err(submit_error)?;
    if !req.stream {
        let c = stream::collect(&mut gen, &state.shutdown, false)
            .await
            .map_err(collected_error)?;
        let (thinking, content, calls) = answer::split_whole(splitter, &c.text, c.done.reason)
            .map_err(|e| Reply(call_error(&e)))?;
        let mut done = ChatResponse::done(
            &model,
            &now_rfc3339(),
            content,
            c.done.reason.into(),
            Some(metrics(&c.done, received, load)),
        );
        done.message.thinking = thinking;
        done.message.tool_calls = calls;
        return Ok(Json(done).into_response());
    }
    let splitter = Arc::new(Mutex::new(Some(splitter)));
    let on_token = {
        let model = model.clone();
        let splitter = splitter.clone();
        move |t: &TokenEvent| -> Option<String> {
            let pieces = splitter.lock().ok()?.as_mut()?.push(&t.text);
            chat_line(&model, pieces, vec![])
        }
    };
    let on_done = move |d: &Done| -> Vec<String> {
        let Some(splitter) = splitter.lock().ok().and_then(|mut s| s.take()) else {
            return vec![];
        };
        let ending = match splitter.finish(d.reason) {
            Ok(e) => e,
            Err(e) => return vec![error_line(&call_error(&e).message)],
        };
        // Ollama sends the calls on a line of their own before the final one.
        let mut out: Vec<String> = chat_line(&model, ending.pieces, vec![])
            .into_iter()
            .chain(chat_line(&model, vec![], ending.calls))
            .collect();
        out.push(line(&ChatResponse::done(
            &model,
            &now_rfc3339(),
            "",
            d.reason.into(),
            Some(metrics(d, received, load)),
        )));
        out
    };
    Ok(ndjson(stream::batches(
        gen,
        state.shutdown.clone(),
        vec![],
        on_token,
        on_done,
        end_lines,
    )))
}

pub(crate) async fn generate(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Reply> {
    let received = Instant::now();
    let body = read_body(body)?;
    let wire: GenerateBody = parse_body(&body)?;
    let no_input = wire.prompt.as_deref().is_none_or(str::is_empty);
    if unload_request(&state, &wire.model, wire.keep_alive.as_ref(), no_input).await? {
        let done =
            GenerateResponse::done(&wire.model, &now_rfc3339(), "", DoneReason::Unload, None);
        return Ok(Json(done).into_response());
    }
    let (target, load) = resolve(&state, &wire.model).await?;
    let mut req = wire.validate(target.ctx())?;
    keep(&state, &target, req.keep_alive);
    let model = req.model.clone();
    if req.is_load_only() {
        let done = GenerateResponse::done(&model, &now_rfc3339(), "", DoneReason::Load, None);
        return Ok(Json(done).into_response());
    }
    constrain(&mut req.params, req.format.take())?;
    let opened = answer::starts_in_thinking(target.local.as_deref(), req.think, &req.params, None);
    // The token ids of the prompt as this node's model reads it: the start of `context`, which
    // is answered only when this node's model ran the whole answer (tokens with ids).
    let mut context: Option<Vec<u32>> = None;
    let chat = Chat {
        messages: req.messages(),
        tools: None,
        think: req.think,
    };
    // Token ids cannot hold images: no `context` with them, either way.
    let with_images = !req.images.is_empty();
    if with_images && !req.context.is_empty() {
        return Err(OllamaError::bad_request(
            "context (token ids) cannot be combined with images; send the conversation to /api/chat instead",
        )
        .into());
    }
    let prompt = if req.raw {
        Prompt::Text(req.prompt.clone())
    } else if let Some(info) = target.local.as_ref().filter(|_| !with_images) {
        let rendered = info
            .render_chat(&chat)
            .map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))?;
        // Judged by its length first: a prompt that cannot fit is never tokenized here.
        let least = info.least_tokens(&rendered);
        if least >= info.context as usize {
            return Err(submit_error(SubmitError::ContextLengthExceeded {
                prompt_tokens: least,
                context: info.context,
                at_least: true,
            })
            .into());
        }
        let mut ids = std::mem::take(&mut req.context);
        let continuing = !ids.is_empty();
        ids.extend(if continuing {
            info.tokenize_after(&rendered)
        } else {
            info.tokenize(&rendered)
        });
        context = Some(ids.clone());
        if continuing {
            // Token ids are this node's own: such a request runs here.
            Prompt::Tokens(ids)
        } else {
            Prompt::Chat(chat)
        }
    } else if req.context.is_empty() {
        Prompt::Chat(chat)
    } else {
        return Err(OllamaError::bad_request(format!(
            "context (token ids) can only continue on a node that has '{model}' itself; send the conversation to /api/chat instead"
        ))
        .into());
    };
    let mut gen = state
        .router
        .submit(
            &target,
            Request {
                prompt,
                params: req.params,
                owner: caller.cache_owner(),
            },
        )
        .map_err(submit_error)?;
    // Only this engine's tokens carry its ids.
    let context = context.filter(|_| gen.is_local());
    // The thinking apart, in `thinking`, as /api/chat has it: unless `think: false` (or raw).
    let splitter = (req.think != Some(false) && !req.raw)
        .then(|| Splitter::new(true, None, gen.id.to_string()).opened_thinking(opened));
    let with_ids = |mut ids: Vec<u32>, tokens: &[TokenEvent]| {
        ids.extend(tokens.iter().filter_map(token_id));
        ids
    };
    if !req.stream {
        let c = stream::collect(&mut gen, &state.shutdown, context.is_some())
            .await
            .map_err(collected_error)?;
        let (thinking, text) = match splitter {
            Some(s) => {
                let (thinking, content, _) = answer::split_whole(s, &c.text, c.done.reason)
                    .map_err(|e| Reply(call_error(&e)))?;
                (thinking, content)
            }
            None => (None, c.text),
        };
        let mut done = GenerateResponse::done(
            &model,
            &now_rfc3339(),
            text,
            c.done.reason.into(),
            Some(metrics(&c.done, received, load)),
        );
        done.thinking = thinking;
        // Empty when this node cannot give its ids (raw, or another node answered): the Vercel
        // AI SDK's Ollama provider requires the field.
        done.context = Some(context.map_or_else(Vec::new, |ids| with_ids(ids, &c.tokens)));
        return Ok(Json(done).into_response());
    }
    Ok(generate_stream(
        gen, &state, model, context, splitter, received, load,
    ))
}

/// The token's id (text released at the end, a held-back tail, has none).
fn token_id(t: &TokenEvent) -> Option<u32> {
    t.id.and_then(|id| u32::try_from(id).ok())
}

fn generate_stream(
    gen: Generation,
    state: &AppState,
    model: String,
    context: Option<Vec<u32>>,
    splitter: Option<Splitter>,
    received: Instant,
    load: Duration,
) -> Response {
    let context = Arc::new(Mutex::new(context));
    let splitter = Arc::new(Mutex::new(splitter));
    let line_of = |model: &str, pieces: Vec<Piece>| -> Option<String> {
        let mut chunk = GenerateResponse::chunk(model, &now_rfc3339(), "");
        for p in pieces {
            match p {
                Piece::Content(t) => chunk.response.push_str(&t),
                Piece::Reasoning(t) => chunk.thinking.get_or_insert_with(String::new).push_str(&t),
            }
        }
        (!chunk.response.is_empty() || chunk.thinking.is_some()).then(|| line(&chunk))
    };
    let on_token = {
        let model = model.clone();
        let context = context.clone();
        let splitter = splitter.clone();
        move |t: &TokenEvent| -> Option<String> {
            if let (Some(id), Ok(mut c)) = (token_id(t), context.lock()) {
                if let Some(ids) = c.as_mut() {
                    ids.push(id);
                }
            }
            let pieces = match splitter.lock().ok()?.as_mut() {
                Some(s) => s.push(&t.text),
                None => vec![Piece::Content(t.text.clone())],
            };
            line_of(&model, pieces)
        }
    };
    let on_done = move |d: &Done| -> Vec<String> {
        let held = splitter.lock().ok().and_then(|mut s| s.take());
        let mut out: Vec<String> = match held.map(|s| s.finish(d.reason)) {
            Some(Ok(end)) => line_of(&model, end.pieces).into_iter().collect(),
            Some(Err(e)) => return vec![error_line(&call_error(&e).message)],
            None => vec![],
        };
        let mut done = GenerateResponse::done(
            &model,
            &now_rfc3339(),
            "",
            d.reason.into(),
            Some(metrics(d, received, load)),
        );
        done.context = Some(
            context
                .lock()
                .ok()
                .and_then(|mut c| c.take())
                .unwrap_or_default(),
        );
        out.push(line(&done));
        out
    };
    ndjson(stream::batches(
        gen,
        state.shutdown.clone(),
        vec![],
        on_token,
        on_done,
        end_lines,
    ))
}
