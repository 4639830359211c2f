//! The UI's chat door: `POST /api/conversations/{id}/chat` settles a turn and streams its answer
//! as SSE while a task of its own (`drive`) generates and saves it as it grows, so a reload, a
//! closed window or a killed node keeps what was generated. `POST /api/messages/{id}/stop`
//! stops an answer. One answer streams per conversation (`crate::state::chats`). A message's
//! images and audio clips are read and sent as `media` says; the MCP tools a turn offers and
//! the consent their calls need, as `tool_loop` and `decide` say; results too long for the
//! context are cut in `fit`. What a turn is given of the conversation's documents (whole, or
//! the passages that answer) is chosen in `documents`, with `vectors` for embeddings.

mod decide;
mod documents;
mod drive;
mod fit;
mod media;
pub(crate) mod tool_loop;
pub(crate) mod vectors;

pub(crate) use decide::decide;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use hearth_engine::{Prompt, Request, SubmitError};

use hearth_protocol::generation::RawParams;
use hearth_protocol::SamplingParams;
use hearth_route::{Generation, ResolveError};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::api::{json_body, ApiFailure};
use crate::caller::Caller;
use crate::state::chats::RunningChat;
use crate::state::AppState;
use hearth_store::{Message, MessageStatus, NewMessage};
use media::{Attached, Takes};

/// How long a chat message waits for a model that is loading.
const CHAT_MODEL_WAIT: Duration = Duration::from_secs(600);
/// What an answer starts with when the model's template opened its thinking block.
const OPENED_THINKING: &str = "<think>\n";
/// Events buffered for the browser before the driver waits for it.
const CLIENT_BUFFER: usize = 256;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChatBody {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    regenerate: bool,
    #[serde(default)]
    edit_message_id: Option<String>,
    /// Images attached to a new message: data URIs (or bare base64), in order.
    #[serde(default)]
    images: Vec<String>,
    /// Audio clips (WAV or MP3) attached to a new message: data URIs or bare base64.
    #[serde(default)]
    audio: Vec<String>,
}

fn event(v: Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

pub(crate) async fn chat(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(conversation_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let body: ChatBody = json_body(body)?;
    let (conversation, messages) = state
        .store
        .conversation(conversation_id.clone())
        .await?
        .ok_or_else(|| ApiFailure::not_found("conversation"))?;
    if state.chats.is_running(&conversation_id) {
        return Err(busy());
    }
    // The UI chats with this node's model; it waits while the model loads (the UI shows that).
    let target = state
        .router
        .resolve(None, CHAT_MODEL_WAIT)
        .await
        .map_err(|e| match e {
            ResolveError::Engine(e) => submit_failure(e),
            unknown => ApiFailure::new(StatusCode::NOT_FOUND, "no_model", unknown.to_string()),
        })?;
    // Everything that can refuse the turn is checked before anything of it is kept.
    let attached = Attached::read(&body.images, &body.audio)?;
    let new_message = !body.regenerate && body.edit_message_id.is_none();
    let takes = Takes::of(target.local.as_deref(), state.router.sees_images(&target));
    media::check(
        &attached,
        new_message,
        target.local.as_deref(),
        takes,
        &target.model,
    )?;
    let params = turn_params(&conversation.settings, target.ctx())?;
    let (tools, notice) =
        match tool_loop::offer(&state, &conversation.settings, &caller, &target).await {
            tool_loop::Offer::Tools(set) => (Some(set), None),
            tool_loop::Offer::None(notice) => (None, notice),
        };
    let settled = settle_turn(&state, &conversation_id, &messages, &body, attached).await?;
    tool_loop::skip_undecided(&state, &messages).await?;
    let mut first_events = settled.first_events;
    if let Some(text) = notice {
        first_events.push(json!({"type": "notice", "text": text}));
    }
    let turn = Turn {
        conversation_id,
        target,
        takes,
        params,
        first_events,
        replaces: settled.replaces,
        edit: settled.edit,
        owner: caller.cache_owner(),
        tools,
        max_steps: conversation.settings.tool_steps,
    };
    let started = start_answer(&state, &conversation.settings.system_prompt, turn).await;
    if let (true, Some(user)) = (started.is_err(), settled.added) {
        // The message the user just sent goes back to them (the UI restores it), not twice.
        state.store.delete_message(user).await?;
    }
    started
}

fn busy() -> ApiFailure {
    ApiFailure::new(
        StatusCode::CONFLICT,
        "busy",
        "an answer is already streaming in this conversation",
    )
}

/// The conversation's settings as sampling parameters, checked as every door checks them.
fn turn_params(
    settings: &hearth_store::Settings,
    ctx: Option<u32>,
) -> Result<SamplingParams, ApiFailure> {
    RawParams {
        temperature: Some(settings.temperature),
        top_p: Some(settings.top_p),
        max_tokens: settings.max_tokens,
        ..RawParams::default()
    }
    .validate(&SamplingParams::default(), Some(ctx.unwrap_or(u32::MAX)))
    .map_err(|e| ApiFailure::bad_request(format!("settings.{}: {}", e.param, e.message)))
}

/// A conversation's history settled for a turn.
struct Settled {
    /// The events to send first.
    first_events: Vec<Value>,
    /// The user's new message: deleted again when the turn cannot start.
    added: Option<String>,
    /// The answers a regenerated one replaces (a tool loop's too): deleted once the new one
    /// has started.
    replaces: Vec<String>,
    /// The user message an edit changes (its id and new words): changed, and the messages
    /// after it deleted, once the new answer has started.
    edit: Option<(String, String)>,
}

/// Settle the conversation's history for this turn: a new message, an edit, or the last
/// answer to regenerate (an edit and a regenerate change nothing until the new answer starts,
/// so a refused turn loses nothing).
async fn settle_turn(
    state: &AppState,
    conversation_id: &str,
    messages: &[Message],
    body: &ChatBody,
    attached: Attached,
) -> Result<Settled, ApiFailure> {
    let settled = |first_events, added, replaces: Vec<String>| Settled {
        first_events,
        added,
        replaces,
        edit: None,
    };
    let content = body.content.as_deref().map(str::trim_end);
    // A new message may be images or clips alone.
    let content = match (content, attached.is_empty()) {
        (None, false) => Some(""),
        (content, _) => content,
    };
    match (&body.edit_message_id, body.regenerate, content) {
        (Some(edit), false, Some(text)) if !text.trim().is_empty() => {
            let target = messages
                .iter()
                .find(|m| &m.id == edit && m.role == "user")
                .ok_or_else(|| ApiFailure::not_found("user message in this conversation"))?;
            Ok(Settled {
                edit: Some((target.id.clone(), text.to_owned())),
                ..settled(Vec::new(), None, Vec::new())
            })
        }
        (None, true, None) => {
            // Every answer after the last user message: one, or a tool loop's.
            let Some(user) = messages.iter().rposition(|m| m.role == "user") else {
                return Err(ApiFailure::bad_request("nothing to regenerate"));
            };
            let replaces = messages[user + 1..]
                .iter()
                .filter(|m| m.role == "assistant")
                .map(|m| m.id.clone())
                .collect();
            Ok(settled(Vec::new(), None, replaces))
        }
        (None, false, Some(text)) if !text.trim().is_empty() || !attached.is_empty() => {
            let user = state
                .store
                .add_message(NewMessage {
                    conversation_id,
                    role: "user",
                    content: text,
                    status: MessageStatus::Complete,
                    model: None,
                    node: None,
                    images: attached.images,
                    audio: attached.audio,
                })
                .await?;
            let id = user.id.clone();
            Ok(settled(
                vec![json!({"type": "user", "message": user})],
                Some(id),
                Vec::new(),
            ))
        }
        _ => Err(ApiFailure::bad_request(
            "send {\"content\"}, {\"regenerate\": true} or {\"edit_message_id\", \"content\"} with non-empty content",
        )),
    }
}

/// A turn whose history is settled, ready to be answered.
struct Turn {
    conversation_id: String,
    target: hearth_route::Target,
    /// What the model answering takes in: images where some place serving it sees them,
    /// audio only on this node's own copy.
    takes: Takes,
    params: SamplingParams,
    first_events: Vec<Value>,
    /// The answers this one replaces (regenerate): left out of the prompt, deleted once this
    /// one has started.
    replaces: Vec<String>,
    /// The user message this turn edits, and its new words: the prompt ends there, and the
    /// store is changed once this answer has started.
    edit: Option<(String, String)>,
    /// Whose prompt cache the turn reads.
    owner: hearth_engine::CacheOwner,
    /// The MCP tools offered, and how many answers with calls the turn may chain.
    tools: Option<tool_loop::Offered>,
    max_steps: i64,
}

/// Submit the turn, keep its answer as it streams, and stream it to the browser.
async fn start_answer(
    state: &Arc<AppState>,
    system_prompt: &str,
    turn: Turn,
) -> Result<Response, ApiFailure> {
    let Turn {
        conversation_id,
        target,
        takes,
        params,
        mut first_events,
        replaces,
        edit,
        owner,
        tools,
        max_steps,
    } = turn;
    let (_, mut history) = state
        .store
        .conversation(conversation_id.clone())
        .await?
        .ok_or_else(|| ApiFailure::not_found("conversation"))?;
    history.retain(|m| !replaces.contains(&m.id));
    if let Some((id, text)) = &edit {
        let at = history
            .iter()
            .position(|m| &m.id == id)
            .ok_or_else(|| ApiFailure::not_found("message"))?;
        history.truncate(at + 1);
        history[at].content.clone_from(text);
    }
    // A model that cannot see (or hear) is sent none: their files are not read. An edited
    // turn's come from the messages it keeps.
    let through = edit.as_ref().map(|(id, _)| id.clone());
    let files = media::turn_files(state, &conversation_id, through, takes).await?;
    let prompt = media::turn_prompt(system_prompt, &history, files, takes);
    // A template that opens the thinking block itself: the saved answer opens it too, so the
    // UI (and the next turn's history) reads it as a reasoning model's answer is read.
    let opened =
        hearth_engine::answer::starts_in_thinking(target.local.as_deref(), None, &params, None);
    let mut chat = hearth_engine::Chat {
        messages: prompt,
        tools: tools.as_ref().map(|t| t.set.clone()),
        think: None,
    };
    let given = documents::given(
        state,
        &conversation_id,
        &history,
        target.local.clone(),
        params.max_tokens,
        &chat,
    )
    .await?;
    if let Some(given) = &given {
        documents::apply(given, &mut chat.messages);
    }
    let chat = fit::fitted(target.local.clone(), chat, params.max_tokens).await;
    let generation = state
        .router
        .submit(
            &target,
            Request {
                prompt: Prompt::Chat(chat),
                params: params.clone(),
                owner,
            },
        )
        .map_err(submit_failure)?;
    let node = answering_node(state, &generation);
    let assistant = state
        .store
        .add_message(NewMessage {
            conversation_id: &conversation_id,
            role: "assistant",
            content: "",
            status: MessageStatus::Streaming,
            model: Some(target.model.as_str()),
            node: Some(&node),
            images: Vec::new(),
            audio: Vec::new(),
        })
        .await;
    let mut assistant = match assistant {
        Ok(a) => a,
        Err(e) => {
            let _ = generation.control.stop();
            return Err(e.into());
        }
    };
    if let Some(given) = &given {
        // What it was given is kept with the answer from its start.
        let kept = state
            .store
            .set_sources(assistant.id.clone(), Some(given.sources.clone()))
            .await;
        if let Err(e) = kept {
            let _ = generation.control.stop();
            let _ = state.store.delete_message(assistant.id.clone()).await;
            return Err(e.into());
        }
        assistant.sources = Some(given.sources.clone());
    }
    let running = RunningChat {
        message_id: assistant.id.clone(),
        control: Some(generation.control.clone()),
        stop_requested: Arc::default(),
        cancel: hearth_tools::CancellationToken::new(),
    };
    if !state.chats.begin(&conversation_id, running.clone()) {
        // Another answer started meanwhile: this one goes, with nothing of it kept.
        let _ = generation.control.stop();
        state.store.delete_message(assistant.id.clone()).await?;
        return Err(busy());
    }
    // The answer has started and is this conversation's: the edit is kept now, the messages
    // after it go (but this answer), and a regenerated answer goes.
    let settled = match (edit, replaces) {
        (Some((id, text)), _) => state
            .store
            .edit_and_truncate(id, text, Some(assistant.id.clone()))
            .await
            .map_err(ApiFailure::from)
            .and_then(|edited| edited.ok_or_else(|| ApiFailure::not_found("message")))
            .map(|edited| first_events.push(json!({"type": "user", "message": edited}))),
        (None, old) => {
            let mut deleted = Ok(());
            for id in old {
                if let Err(e) = state.store.delete_message(id).await {
                    deleted = Err(ApiFailure::from(e));
                    break;
                }
            }
            deleted
        }
    };
    if let Err(e) = settled {
        state.chats.end(&conversation_id);
        let _ = generation.control.stop();
        let _ = state.store.delete_message(assistant.id.clone()).await;
        return Err(e);
    }
    first_events.push(json!({"type": "start", "message": assistant}));

    let (tx, rx) = mpsc::channel::<SseEvent>(CLIENT_BUFFER);
    for e in first_events {
        let _ = tx.try_send(event(e));
    }
    let turn = tools.map(|tools| drive::ToolTurn {
        tools: Some(tools),
        target,
        params,
        system_prompt: system_prompt.to_owned(),
        takes,
        owner,
        steps: 0,
        max_steps,
        given,
    });
    let step = drive::Step {
        message: assistant,
        generation,
        opened_thinking: opened,
    };
    let held = drive::Held::new(state, &conversation_id);
    tokio::spawn(drive::drive(
        state.clone(),
        conversation_id,
        step,
        running,
        tx,
        turn,
        held,
    ));
    Ok(event_stream(state, rx))
}

/// The browser's side of a turn's events.
fn event_stream(state: &AppState, rx: mpsc::Receiver<SseEvent>) -> Response {
    let events = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    super::stream::sse(events, state.limits.sse_keep_alive)
}

/// The node answering now: a worker in hub mode, else this one.
fn answering_node(state: &AppState, generation: &Generation) -> String {
    generation
        .node
        .current()
        .unwrap_or_else(|| state.node_name.clone())
}

pub(crate) async fn stop(
    State(state): State<Arc<AppState>>,
    Path(message_id): Path<String>,
) -> Result<Response, ApiFailure> {
    let running = state
        .chats
        .by_message(&message_id)
        .ok_or_else(|| ApiFailure::not_found("streaming message"))?;
    running
        .stop_requested
        .store(true, std::sync::atomic::Ordering::Release);
    // A tool call running between two answers of a loop is cancelled (MCP's cancellation);
    // the answer's generation has ended then, and its control has nothing to stop.
    running.cancel.cancel();
    if let Some(Err(e)) = running.control.as_ref().map(|c| c.stop()) {
        tracing::debug!(error = %e, "a stopped chat's generation had ended already");
    }
    Ok(Json(json!({"id": message_id, "stopping": true})).into_response())
}

fn submit_failure(e: SubmitError) -> ApiFailure {
    let message = e.to_string();
    match e {
        SubmitError::ContextLengthExceeded { .. } => ApiFailure::new(
            StatusCode::BAD_REQUEST,
            "context_length_exceeded",
            format!("{message}; start a new conversation or shorten it"),
        ),
        SubmitError::QueueFull { .. } => {
            ApiFailure::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message)
        }
        SubmitError::Prompt(_) => ApiFailure::bad_request(message),
        SubmitError::ModelLoading { .. } => {
            ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, "model_loading", message)
        }
        SubmitError::LoadFailed { .. } | SubmitError::NoModel => {
            ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, "no_model", message)
        }
        SubmitError::ShuttingDown => {
            ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message)
        }
        SubmitError::Unavailable { .. } => ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "model_unavailable",
            message,
        ),
    }
}
