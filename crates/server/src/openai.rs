//! The OpenAI door: `GET /v1/models`, `POST /v1/chat/completions` (in `chat`),
//! `POST /v1/completions`, non-streaming and streaming (SSE ending in `data: [DONE]`, a usage chunk when
//! `stream_options.include_usage`). It only translates: validation is hearth-protocol's, token
//! counts and finish reasons are the engine's. A client that disconnects cancels its generation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{Done, Prompt, Request, TokenEvent};

use super::door::{body_bytes, collect, now_secs, resolve};
use super::stream::End;

use hearth_protocol::openai::{self as oa, parse_body, CompletionBody, ErrorBody, RequestError};
use hearth_route::Generation;

use super::caller::Caller;
use super::error::ApiError;
use crate::state::AppState;

mod chat;
pub(crate) mod embeddings;
pub(crate) use chat::chat_completions;
pub(crate) use embeddings::embeddings;

pub(crate) async fn models(State(state): State<Arc<AppState>>) -> Json<oa::ModelList> {
    let ids = state.router.models();
    Json(oa::ModelList {
        object: "list",
        data: with_senses(&state, ids).await,
    })
}

/// The entries of `ids`, each with what its projector takes in where this node knows it (the
/// loaded engine's, or the projector beside its file: a header read, off the async threads).
async fn with_senses(state: &AppState, ids: Vec<hearth_protocol::ModelId>) -> Vec<oa::ModelEntry> {
    let host = state.router.host().clone();
    let registry = state.router.registry().clone();
    let known = ids.clone();
    let senses = tokio::task::spawn_blocking(move || {
        known
            .iter()
            .map(|id| match host.model_info(id) {
                Some(i) => Some(hearth_engine::Senses {
                    vision: i.vision,
                    audio: i.audio,
                }),
                None => registry
                    .find(id.as_str())
                    .map(|(_, path)| hearth_engine::projector_senses(&path)),
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    ids.iter()
        .enumerate()
        .map(|(n, id)| entry(id, senses.get(n).copied().flatten()))
        .collect()
}

/// `GET /v1/models/{id}` (the SDKs' `models.retrieve`): the model as `/v1/models` lists it, or
/// OpenAI's `model_not_found`. An id may hold slashes (a peer's `owner/name`).
pub(crate) async fn model(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<oa::ModelEntry>, ApiError> {
    let models = state.router.models();
    match models.iter().find(|m| m.as_str() == id || m.matches(&id)) {
        Some(m) => Ok(Json(
            with_senses(&state, vec![m.clone()]).await.swap_remove(0),
        )),
        None => Err(ApiError::model_not_found(
            &id.chars().take(200).collect::<String>(),
            &models,
        )),
    }
}

fn entry(id: &hearth_protocol::ModelId, senses: Option<hearth_engine::Senses>) -> oa::ModelEntry {
    oa::ModelEntry {
        id: id.to_string(),
        object: "model",
        created: now_secs(),
        owned_by: "hearth",
        capabilities: senses.map(|s| {
            let mut c = vec!["completion"];
            if s.vision {
                c.push("vision");
            }
            if s.audio {
                c.push("audio");
            }
            c
        }),
    }
}

fn timings(d: &Done) -> oa::Timings {
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    let predicted = d
        .timing
        .first_token
        .map_or(Duration::ZERO, |f| d.timing.total.saturating_sub(f));
    let n = d.usage.completion_tokens;
    oa::Timings {
        queued_ms: ms(d.timing.queued),
        prompt_n: d.usage.prompt_tokens,
        cache_n: d.timing.cached_tokens,
        prompt_ms: ms(d.timing.prefill),
        predicted_n: n,
        predicted_ms: ms(predicted),
        // The first token comes from prefill, so decode speed counts the ones after it.
        predicted_per_second: if n > 1 && !predicted.is_zero() {
            f64::from(n - 1) / predicted.as_secs_f64()
        } else {
            0.0
        },
    }
}

fn chat_logprobs(tokens: &[TokenEvent]) -> oa::ChatLogprobs {
    oa::ChatLogprobs {
        content: tokens.iter().filter_map(chat_token_logprob).collect(),
    }
}

fn chat_token_logprob(t: &TokenEvent) -> Option<oa::ChatTokenLogprob> {
    let lp = t.logprobs.as_ref()?;
    Some(oa::ChatTokenLogprob {
        token: lp.token.text.clone(),
        logprob: lp.token.logprob,
        bytes: lp.token.bytes.clone(),
        top_logprobs: lp
            .top
            .iter()
            .map(|c| oa::TopLogprob {
                token: c.text.clone(),
                logprob: c.logprob,
                bytes: c.bytes.clone(),
            })
            .collect(),
    })
}

fn text_logprobs(tokens: &[TokenEvent], start_offset: usize) -> oa::TextLogprobs {
    let mut out = oa::TextLogprobs::default();
    let mut offset = start_offset;
    for t in tokens {
        let Some(lp) = &t.logprobs else { continue };
        out.tokens.push(lp.token.text.clone());
        out.token_logprobs.push(lp.token.logprob);
        out.top_logprobs.push(
            lp.top
                .iter()
                .map(|c| (c.text.clone(), c.logprob))
                .collect::<BTreeMap<_, _>>(),
        );
        out.text_offset.push(offset);
        offset += t.text.len();
    }
    out
}

pub(crate) async fn completions(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let wire: CompletionBody = parse_body(&body).map_err(ApiError::bad_request)?;
    let target = resolve(&state, wire.model.as_deref()).await?;
    let req = wire.validate(target.ctx()).map_err(ApiError::bad_request)?;
    if req.echo && req.logprobs {
        return Err(ApiError::bad_request(RequestError {
            message: "echo together with logprobs is not supported".into(),
            param: Some("echo".into()),
        }));
    }
    let echo = req.echo.then(|| req.prompt.clone());
    let mut gen = state
        .router
        .submit(
            &target,
            Request {
                prompt: Prompt::Text(req.prompt),
                params: req.params,
                owner: caller.cache_owner(),
            },
        )
        .map_err(|e| ApiError::from(e).naming_prompt())?;
    let id = format!("cmpl-{}", gen.id);
    let model = target.model.to_string();
    let created = now_secs();
    if !req.stream {
        let c = collect(&mut gen, &state.shutdown, req.logprobs).await?;
        let mut text = echo.unwrap_or_default();
        text.push_str(&c.text);
        return Ok(Json(oa::TextCompletion {
            id,
            object: "text_completion",
            created,
            model,
            choices: vec![oa::TextChoice {
                index: 0,
                text,
                logprobs: req.logprobs.then(|| text_logprobs(&c.tokens, 0)),
                finish_reason: Some(finish_reason(c.done.reason).to_owned()),
            }],
            usage: Some(Some(oa::CompletionUsage::new(
                c.done.usage,
                c.done.timing.cached_tokens,
            ))),
            timings: Some(timings(&c.done)),
        })
        .into_response());
    }
    let include_usage = req.include_usage;
    let logprobs = req.logprobs;
    let usage_field = move || include_usage.then_some(None);
    let chunk = move |choices: Vec<oa::TextChoice>,
                      usage: Option<Option<oa::CompletionUsage>>,
                      timings: Option<oa::Timings>| {
        json(&oa::TextCompletion {
            id: id.clone(),
            object: "text_completion",
            created,
            model: model.clone(),
            choices,
            usage,
            timings,
        })
    };
    let choice = |text: String, logprobs: Option<oa::TextLogprobs>, finish: Option<String>| {
        vec![oa::TextChoice {
            index: 0,
            text,
            logprobs,
            finish_reason: finish,
        }]
    };
    let first: Vec<String> = echo
        .map(|p| chunk(choice(p, None, None), usage_field(), None))
        .into_iter()
        .collect();
    let mut offset = 0usize;
    let on_token = {
        let chunk = chunk.clone();
        move |t: &TokenEvent| -> Option<String> {
            if t.text.is_empty() && !(logprobs && t.logprobs.is_some()) {
                return None;
            }
            let lp = logprobs.then(|| text_logprobs(std::slice::from_ref(t), offset));
            offset += t.text.len();
            Some(chunk(choice(t.text.clone(), lp, None), usage_field(), None))
        }
    };
    let on_done = move |d: &Done| -> Vec<String> {
        let mut out = vec![chunk(
            choice(
                String::new(),
                None,
                Some(finish_reason(d.reason).to_owned()),
            ),
            usage_field(),
            Some(timings(d)),
        )];
        if include_usage {
            // The usage chunk carries no choices, as OpenAI sends it.
            let usage = oa::CompletionUsage::new(d.usage, d.timing.cached_tokens);
            out.push(chunk(vec![], Some(Some(usage)), None));
        }
        out
    };
    Ok(sse_response(gen, &state, first, on_token, on_done))
}

/// OpenAI's finish reasons have no "cancelled": an answer the client stopped ends as `stop`.
fn finish_reason(r: hearth_protocol::FinishReason) -> &'static str {
    match r {
        hearth_protocol::FinishReason::Cancelled => "stop",
        other => other.as_str(),
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| {
        json_error(&ErrorBody::new(
            "server_error",
            Some("internal_error"),
            None,
            e.to_string(),
        ))
    })
}

fn json_error(e: &ErrorBody) -> String {
    serde_json::to_string(e).unwrap_or_else(|_| r#"{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}"#.into())
}

/// Stream a generation as SSE: `first` chunks, one chunk per token, the closing chunks, then
/// `[DONE]`. Errors (and shutdown) become an OpenAI error object before `[DONE]`.
fn sse_response<T, D>(
    gen: Generation,
    state: &AppState,
    first: Vec<String>,
    on_token: T,
    on_done: D,
) -> Response
where
    T: FnMut(&TokenEvent) -> Option<String> + Send + 'static,
    D: FnOnce(&Done) -> Vec<String> + Send + 'static,
{
    let on_end = |end: End<'_>| {
        let mut out = match end {
            End::Done => vec![],
            End::Failed(f) => vec![json_error(&ApiError::from_failure(f).body)],
            End::ShuttingDown => vec![json_error(&ApiError::shutting_down().body)],
        };
        out.push("[DONE]".into());
        out
    };
    let batches = super::stream::batches(
        gen,
        state.shutdown.clone(),
        first,
        on_token,
        on_done,
        on_end,
    );
    let events = super::stream::sse_events(batches, |data| SseEvent::default().data(data));
    super::stream::sse(events, state.limits.sse_keep_alive)
}
