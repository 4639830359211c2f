//! `POST /api/conversations/{id}/tool_calls/{call_id}`: the user's consent to one MCP call the
//! last answer made (allow once, for this chat, always; or deny, with a reason the model is
//! told). Once no call of that answer waits, the allowed ones run and the loop goes on, in the
//! event stream this request answers with, as the chat's own does.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::Event as SseEvent;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::tool_loop::{self, CallState, Consent};
use super::{
    busy, documents, drive, event, event_stream, media, turn_params, Takes, CHAT_MODEL_WAIT,
    CLIENT_BUFFER,
};
use crate::api::{json_body, ApiFailure};
use crate::caller::Caller;
use crate::state::chats::RunningChat;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    decision: Decision,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Decision {
    Once,
    Chat,
    Always,
    Deny,
}

/// The most characters of a denial's reason kept (it goes to the model).
const MAX_REASON_CHARS: usize = 2000;

pub(crate) async fn decide(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path((conversation_id, call_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    crate::mcp_api::owner_only(&caller)?;
    let body: DecisionBody = json_body(body)?;
    if body.reason.is_some() && body.decision != Decision::Deny {
        return Err(ApiFailure::bad_request(
            "a reason goes with \"decision\": \"deny\" only",
        ));
    }
    // The conversation is held from here, before its calls are read: a second decision, a new
    // message or a stop waits for this one's calls to be saved (and run).
    let mut running = RunningChat {
        message_id: String::new(),
        control: None,
        stop_requested: Arc::default(),
        cancel: hearth_tools::CancellationToken::new(),
    };
    if !state.chats.begin(&conversation_id, running.clone()) {
        return Err(busy());
    }
    let held = drive::Held::new(&state, &conversation_id);
    let (conversation, messages) = state
        .store
        .conversation(conversation_id.clone())
        .await?
        .ok_or_else(|| ApiFailure::not_found("conversation"))?;
    let message = messages
        .iter()
        .find(|m| m.role == "assistant" && tool_loop::records(m).iter().any(|c| c.id == call_id))
        .ok_or_else(|| ApiFailure::not_found("tool call"))?
        .clone();
    let mut calls = tool_loop::records(&message);
    let last = messages.iter().rev().find(|m| m.role == "assistant");
    let Some(call) = calls.iter_mut().find(|c| c.id == call_id) else {
        return Err(ApiFailure::not_found("tool call"));
    };
    // Only the last answer's calls wait: an older one was left behind by a later turn.
    if call.state != CallState::Pending || last.map(|m| &m.id) != Some(&message.id) {
        return Err(ApiFailure::new(
            StatusCode::CONFLICT,
            "not_pending",
            "this call does not wait for consent",
        ));
    }
    running.message_id = message.id.clone();
    state.chats.replace(&conversation_id, running.clone());
    // Consent kept for good is this machine's to give, as it alone can take it back.
    if body.decision == Decision::Always && caller != Caller::Owner {
        return Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            "local_only",
            "a tool is always allowed only on the machine that runs the node: allow it once or for this chat",
        ));
    }
    let consent = match body.decision {
        Decision::Deny => None,
        Decision::Chat => Some(Consent::Chat),
        Decision::Always => Some(Consent::Always),
        Decision::Once => Some(Consent::Once),
    };
    let name = call.name.clone();
    match consent {
        None => {
            call.state = CallState::Denied;
            call.reason = body
                .reason
                .map(|r| r.trim().chars().take(MAX_REASON_CHARS).collect())
                .filter(|r: &String| !r.is_empty());
        }
        Some(c) => {
            call.state = CallState::Running;
            call.consent = Some(c);
        }
    }
    let mut changed = vec![call_id.clone()];
    // Consent for the chat or for good covers the answer's other calls of that tool too.
    if matches!(consent, Some(Consent::Chat | Consent::Always)) {
        for other in calls
            .iter_mut()
            .filter(|c| c.state == CallState::Pending && c.name == name)
        {
            other.state = CallState::Running;
            other.consent = consent;
            changed.push(other.id.clone());
        }
    }
    let waiting: Vec<String> = calls
        .iter()
        .filter(|c| c.state == CallState::Pending)
        .map(|c| c.id.clone())
        .collect();
    // Every call of the answer decided: the loop goes on where the chat would have; what it
    // needs is checked before anything of the decision is kept.
    let mut notice = None;
    let turn = if waiting.is_empty() {
        let target = state
            .router
            .resolve(None, CHAT_MODEL_WAIT)
            .await
            .map_err(|e| {
                ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, "no_model", e.to_string())
            })?;
        let takes = Takes::of(target.local.as_deref(), state.router.sees_images(&target));
        let params = turn_params(&conversation.settings, target.ctx())?;
        // No tool to offer now (the server failing, the tools switched off since): the
        // decided calls still run (or fail, and the model reads why), and the next answer
        // reads their results without tools; the chat says why.
        let tools = match tool_loop::offer(&state, &conversation.settings, &caller, &target).await {
            tool_loop::Offer::Tools(set) => Some(set),
            tool_loop::Offer::None(why) => {
                notice = why;
                None
            }
        };
        let last_user = messages.iter().rposition(|m| m.role == "user").unwrap_or(0);
        let steps = messages[last_user..]
            .iter()
            .filter(|m| m.role == "assistant" && m.tool_calls.is_some())
            .count() as i64;
        // The conversation's documents, given to the next answers as to the turn's first.
        let system_prompt = &conversation.settings.system_prompt;
        let chat = hearth_engine::Chat {
            messages: media::turn_prompt(system_prompt, &messages, Default::default(), takes),
            tools: tools.as_ref().map(|t| t.set.clone()),
            think: None,
        };
        let given = documents::given(
            &state,
            &conversation_id,
            &messages,
            target.local.clone(),
            params.max_tokens,
            &chat,
        )
        .await?;
        Some(drive::ToolTurn {
            tools,
            target,
            params,
            system_prompt: conversation.settings.system_prompt.clone(),
            takes,
            owner: caller.cache_owner(),
            steps,
            max_steps: conversation.settings.tool_steps,
            given,
        })
    } else {
        None
    };
    match consent {
        Some(Consent::Chat) => {
            state
                .store
                .allow_mcp_tool_for_chat(conversation_id.clone(), name.clone())
                .await?
        }
        Some(Consent::Always) => {
            state
                .store
                .set_mcp_always_allowed(name.clone(), true)
                .await?
        }
        _ => {}
    }
    let message = state
        .store
        .set_tool_calls(message.id.clone(), tool_loop::records_json(&calls))
        .await?
        .unwrap_or(message);
    let (tx, rx) = mpsc::channel::<SseEvent>(CLIENT_BUFFER);
    for c in calls.iter().filter(|c| changed.contains(&c.id)) {
        let _ = tx.try_send(event(
            json!({"type": "tool_update", "message_id": message.id, "call": c}),
        ));
    }
    if let Some(text) = notice {
        let _ = tx.try_send(event(json!({"type": "notice", "text": text})));
    }
    let Some(turn) = turn else {
        let _ = tx.try_send(event(
            json!({"type": "consent", "message_id": message.id, "calls": waiting}),
        ));
        drop(tx);
        drop(held);
        return Ok(event_stream(&state, rx));
    };
    let task_state = state.clone();
    tokio::spawn(async move {
        let state = task_state;
        let next = drive::go_on(
            &state,
            &conversation_id,
            message,
            calls,
            &running,
            &tx,
            &turn,
        )
        .await;
        let step = match next {
            Ok(step) => step,
            Err(last) => {
                drop(held);
                let _ = tx.send(event(last)).await;
                return;
            }
        };
        let running = RunningChat {
            message_id: step.message.id.clone(),
            control: Some(step.generation.control.clone()),
            ..running
        };
        state.chats.replace(&conversation_id, running.clone());
        let _ = tx
            .send(event(json!({"type": "start", "message": step.message})))
            .await;
        drive::drive(state, conversation_id, step, running, tx, Some(turn), held).await;
    });
    Ok(event_stream(&state, rx))
}
