//! `POST /v1/chat/completions`: the conversation with its tools and `response_format` to the
//! route, and the answer back as OpenAI sends it: thinking in `reasoning_content`, calls in
//! `tool_calls` (`finish_reason: "tool_calls"`), streamed as deltas of each.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{Chat, Done, TokenEvent};
use hearth_protocol::openai::{self as oa, parse_body, ChatCompletionBody, RequestError};
use hearth_protocol::{FinishReason, ToolCall};

use super::{chat_logprobs, chat_token_logprob, json, json_error, sse_response, timings};
use crate::caller::Caller;
use crate::door::{body_bytes, collect, fetch_image_urls, now_secs, resolve, submit_chat};
use crate::error::ApiError;
use crate::state::AppState;
use hearth_engine::answer::{self, Piece};

fn invalid(param: &str, message: String) -> ApiError {
    ApiError::bad_request(RequestError {
        message,
        param: Some(param.into()),
    })
}

pub(crate) async fn chat_completions(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let body = fetch_image_urls(&state, body).await?;
    let wire: ChatCompletionBody = parse_body(&body).map_err(ApiError::bad_request)?;
    let target = resolve(&state, wire.model.as_deref()).await?;
    let mut req = wire.validate(target.ctx()).map_err(ApiError::bad_request)?;
    if let Some(t) = &req.tools {
        hearth_engine::tools::check(t).map_err(|e| invalid("tools", e.to_string()))?;
    }
    answer::constrain(&mut req.params, req.format.take())
        .map_err(|e| invalid("response_format", format!("invalid response_format: {e}")))?;
    let chat = Chat {
        messages: req.messages,
        tools: req.tools,
        think: None,
    };
    let (mut gen, splitter) = submit_chat(
        &state.router,
        &target,
        chat,
        req.params,
        true,
        caller.cache_owner(),
    )?;
    let id = format!("chatcmpl-{}", gen.id);
    let model = target.model.to_string();
    let created = now_secs();
    if !req.stream {
        let c = collect(&mut gen, &state.shutdown, req.logprobs).await?;
        let (reasoning, content, calls) = answer::split_whole(splitter, &c.text, c.done.reason)
            .map_err(|e| ApiError::from_call(&e))?;
        return Ok(Json(oa::ChatCompletion {
            id,
            object: "chat.completion",
            created,
            model,
            choices: vec![oa::ChatChoice {
                index: 0,
                finish_reason: Some(finish_reason(c.done.reason, &calls)),
                message: oa::AssistantMessage {
                    role: "assistant",
                    // OpenAI's `null` for a turn that is only calls.
                    content: (calls.is_empty() || !content.is_empty()).then_some(content),
                    refusal: None,
                    reasoning_content: reasoning,
                    tool_calls: calls.iter().map(|c| oa::CallOut::new(c, None)).collect(),
                },
                logprobs: req.logprobs.then(|| chat_logprobs(&c.tokens)),
            }],
            usage: oa::CompletionUsage::new(c.done.usage, c.done.timing.cached_tokens),
            timings: timings(&c.done),
        })
        .into_response());
    }
    let include_usage = req.include_usage;
    let logprobs = req.logprobs;
    let chunk = move |delta: oa::Delta,
                      logprobs: Option<oa::ChatLogprobs>,
                      finish: Option<(String, oa::Timings)>| {
        let (finish_reason, timings) = match finish {
            Some((r, t)) => (Some(r), Some(t)),
            None => (None, None),
        };
        json(&oa::ChatChunk {
            id: id.clone(),
            object: "chat.completion.chunk",
            created,
            model: model.clone(),
            choices: vec![oa::ChunkChoice {
                index: 0,
                delta,
                logprobs,
                finish_reason,
            }],
            usage: include_usage.then_some(None),
            timings,
        })
    };
    let usage_chunk = {
        let chunk_id = format!("chatcmpl-{}", gen.id);
        let model = target.model.to_string();
        move |usage: oa::CompletionUsage| {
            json(&oa::ChatChunk {
                id: chunk_id.clone(),
                object: "chat.completion.chunk",
                created,
                model: model.clone(),
                choices: vec![],
                usage: Some(Some(usage)),
                timings: None,
            })
        }
    };
    let first = chunk(
        oa::Delta {
            role: Some("assistant"),
            content: Some(String::new()),
            ..oa::Delta::default()
        },
        None,
        None,
    );
    let splitter = Arc::new(Mutex::new(Some(splitter)));
    let on_token = {
        let chunk = chunk.clone();
        let splitter = splitter.clone();
        move |t: &TokenEvent| -> Option<String> {
            let pieces = match splitter.lock().ok()?.as_mut() {
                Some(s) => s.push(&t.text),
                None => vec![],
            };
            let token_logprobs = logprobs && t.logprobs.is_some();
            if pieces.is_empty() && !token_logprobs {
                return None;
            }
            Some(chunk(
                delta(pieces),
                logprobs.then(|| oa::ChatLogprobs {
                    content: chat_token_logprob(t).into_iter().collect(),
                }),
                None,
            ))
        }
    };
    let on_done = move |d: &Done| -> Vec<String> {
        let Some(splitter) = splitter.lock().ok().and_then(|mut s| s.take()) else {
            return vec![];
        };
        let ending = match splitter.finish(d.reason) {
            Ok(e) => e,
            Err(e) => return vec![json_error(&ApiError::from_call(&e).body)],
        };
        let mut out = Vec::new();
        if !ending.pieces.is_empty() {
            out.push(chunk(delta(ending.pieces), None, None));
        }
        for (i, c) in ending.calls.iter().enumerate() {
            let call = oa::CallOut::new(c, Some(i as u32));
            out.push(chunk(
                oa::Delta {
                    tool_calls: vec![call],
                    ..oa::Delta::default()
                },
                None,
                None,
            ));
        }
        out.push(chunk(
            oa::Delta::default(),
            None,
            Some((finish_reason(d.reason, &ending.calls), timings(d))),
        ));
        if include_usage {
            out.push(usage_chunk(oa::CompletionUsage::new(
                d.usage,
                d.timing.cached_tokens,
            )));
        }
        out
    };
    Ok(sse_response(gen, &state, vec![first], on_token, on_done))
}

/// `tool_calls` when the answer is calls, else why it ended.
fn finish_reason(reason: FinishReason, calls: &[ToolCall]) -> String {
    if calls.is_empty() {
        super::finish_reason(reason).to_owned()
    } else {
        "tool_calls".to_owned()
    }
}

/// One delta for the pieces a token released: its thinking and its text.
fn delta(pieces: Vec<Piece>) -> oa::Delta {
    let mut d = oa::Delta::default();
    for p in pieces {
        let (field, text) = match p {
            Piece::Reasoning(t) => (&mut d.reasoning_content, t),
            Piece::Content(t) => (&mut d.content, t),
        };
        field.get_or_insert_with(String::new).push_str(&text);
    }
    d
}
