//! The UI's chat door: `POST /api/conversations/{id}/chat` streams an answer as SSE while a
//! task of its own drives the generation and saves the answer as it grows (every
//! [`SAVE_EVERY`]), so a reload, a closed window or a killed node keeps what was generated.
//! `POST /api/messages/{id}/stop` stops an answer. One answer streams per conversation
//! (`crate::state::chats` keeps the answers streaming now).
//! A message's images and audio clips are read and sent as `media` says.

mod media;

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
use hearth_engine::{Event, Prompt, Request, SubmitError};

use hearth_protocol::audio::MAX_CLIPS;
use hearth_protocol::generation::RawParams;
use hearth_protocol::media::MAX_IMAGES;
use hearth_protocol::{FinishReason, SamplingParams};
use hearth_route::{Generation, ResolveError};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::api::{json_body, ApiFailure};
use crate::caller::Caller;
use crate::state::chats::RunningChat;
use crate::state::AppState;
use hearth_store::{Message, MessageStatus, NewMessage, Stats};
use media::{Attached, Takes, TurnFiles, TURN_AUDIO_BYTES, TURN_IMAGE_BYTES};

/// How often a streaming answer is written to the database.
const SAVE_EVERY: Duration = Duration::from_millis(250);
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
    let settled = settle_turn(&state, &conversation_id, &messages, &body, attached).await?;
    let turn = Turn {
        conversation_id,
        target,
        takes,
        params,
        first_events: settled.first_events,
        replaces: settled.replaces,
        edit: settled.edit,
        owner: caller.cache_owner(),
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
    /// The answer a regenerated one replaces: deleted once the new one has started.
    replaces: Option<String>,
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
    let settled = |first_events, added, replaces| Settled {
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
                ..settled(Vec::new(), None, None)
            })
        }
        (None, true, None) => {
            let last = messages
                .last()
                .ok_or_else(|| ApiFailure::bad_request("nothing to regenerate"))?;
            if !messages.iter().any(|m| m.role == "user") {
                return Err(ApiFailure::bad_request("nothing to regenerate"));
            }
            let replaces = (last.role == "assistant").then(|| last.id.clone());
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
                None,
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
    /// The answer this one replaces (regenerate): left out of the prompt, deleted once this
    /// one has started.
    replaces: Option<String>,
    /// The user message this turn edits, and its new words: the prompt ends there, and the
    /// store is changed once this answer has started.
    edit: Option<(String, String)>,
    /// Whose prompt cache the turn reads.
    owner: hearth_engine::CacheOwner,
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
    } = turn;
    let (_, mut history) = state
        .store
        .conversation(conversation_id.clone())
        .await?
        .ok_or_else(|| ApiFailure::not_found("conversation"))?;
    history.retain(|m| Some(&m.id) != replaces.as_ref());
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
    let mut files = TurnFiles::default();
    let through = edit.as_ref().map(|(id, _)| id.clone());
    if takes.images {
        files.images = state
            .store
            .newest_image_files(
                conversation_id.clone(),
                through.clone(),
                MAX_IMAGES,
                TURN_IMAGE_BYTES,
            )
            .await?;
    }
    if takes.audio {
        files.audio = state
            .store
            .newest_audio_files(
                conversation_id.clone(),
                through,
                MAX_CLIPS,
                TURN_AUDIO_BYTES,
            )
            .await?;
    }
    let prompt = media::turn_prompt(system_prompt, &history, files, takes);
    // A template that opens the thinking block itself: the saved answer opens it too, so the
    // UI (and the next turn's history) reads it as a reasoning model's answer is read.
    let opened =
        hearth_engine::answer::starts_in_thinking(target.local.as_deref(), None, &params, None);
    let generation = state
        .router
        .submit(
            &target,
            Request {
                prompt: Prompt::Chat(prompt.into()),
                params,
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
    let assistant = match assistant {
        Ok(a) => a,
        Err(e) => {
            let _ = generation.control.stop();
            return Err(e.into());
        }
    };
    let running = RunningChat {
        message_id: assistant.id.clone(),
        control: generation.control.clone(),
        stop_requested: Arc::default(),
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
        (None, Some(old)) => state
            .store
            .delete_message(old)
            .await
            .map(drop)
            .map_err(ApiFailure::from),
        (None, None) => Ok(()),
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
    tokio::spawn(drive(
        state.clone(),
        conversation_id,
        assistant,
        generation,
        running,
        tx,
        opened,
    ));
    let events = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(super::stream::sse(events, state.limits.sse_keep_alive))
}

/// The node answering now: a worker in hub mode, else this one.
fn answering_node(state: &AppState, generation: &Generation) -> String {
    generation
        .node
        .current()
        .unwrap_or_else(|| state.node_name.clone())
}

/// Runs one answer to its end, independent of the browser: tokens go to the client while it
/// listens, the text goes to the database every [`SAVE_EVERY`], and the ending is recorded.
async fn drive(
    state: Arc<AppState>,
    conversation_id: String,
    message: Message,
    mut generation: Generation,
    running: RunningChat,
    tx: mpsc::Sender<SseEvent>,
    opened_thinking: bool,
) {
    let mut text = String::new();
    if opened_thinking {
        text.push_str(OPENED_THINKING);
        let _ = tx.try_send(event(json!({"type": "token", "text": OPENED_THINKING})));
    }
    let mut saved_len = 0;
    let mut client_gone = false;
    let mut save = tokio::time::interval(SAVE_EVERY);
    save.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        tokio::select! {
            ev = generation.events.recv() => match ev {
                Some(Event::Token(t)) if !t.text.is_empty() => {
                    text.push_str(&t.text);
                    if !client_gone {
                        let ev = event(json!({"type": "token", "text": t.text}));
                        let gone = match tx.try_send(ev) {
                            Ok(()) => false,
                            // A browser that cannot keep up: wait for it.
                            Err(mpsc::error::TrySendError::Full(ev)) => tx.send(ev).await.is_err(),
                            Err(mpsc::error::TrySendError::Closed(_)) => true,
                        };
                        if gone {
                            client_gone = true;
                            let _ = running.control.stop();
                        }
                    }
                }
                Some(Event::Token(_)) => {}
                Some(Event::Done(done)) => break Ok(done),
                Some(Event::Error(f)) => break Err(f.message),
                Some(Event::Restarted | Event::Paused | Event::Resumed | Event::Modified) => {}
                None => break Err("the engine stopped".to_owned()),
            },
            () = tx.closed(), if !client_gone => {
                // The browser left (reload, closed window): stop, keep what we have.
                client_gone = true;
                let _ = running.control.stop();
            }
            _ = save.tick() => {
                if text.len() != saved_len {
                    saved_len = text.len();
                    if let Err(e) = state.store.save_partial(message.id.clone(), text.clone()).await {
                        tracing::warn!(error = %e, "saving a partial answer failed");
                    }
                }
            }
            () = state.shutdown.cancelled() => {
                break Err("the node is shutting down".to_owned());
            }
        }
    };
    let stop_requested = running
        .stop_requested
        .load(std::sync::atomic::Ordering::Acquire);
    let (status, stats, error) = match &outcome {
        Ok(done) => {
            let status = match done.reason {
                FinishReason::Cancelled if stop_requested => MessageStatus::Stopped,
                FinishReason::Cancelled => MessageStatus::Interrupted,
                _ => MessageStatus::Complete,
            };
            let decode = done
                .timing
                .first_token
                .map(|f| done.timing.total.saturating_sub(f))
                .unwrap_or_default();
            let n = done.usage.completion_tokens;
            let stats = Stats {
                tokens: i64::from(n),
                tokens_per_s: if n > 1 && !decode.is_zero() {
                    f64::from(n - 1) / decode.as_secs_f64()
                } else {
                    0.0
                },
                ttft_ms: done
                    .timing
                    .first_token
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            };
            (status, Some(stats), None)
        }
        Err(message) if state.shutdown.is_cancelled() => {
            (MessageStatus::Interrupted, None, Some(message.clone()))
        }
        Err(message) => (MessageStatus::Error, None, Some(message.clone())),
    };
    // A re-dispatched answer was finished elsewhere: name the node that ended it.
    let node = answering_node(&state, &generation);
    let stored = state
        .store
        .finish_message(message.id.clone(), text, status, stats, node, error.clone())
        .await;
    state.chats.end(&conversation_id);
    let stored = match stored {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(error = %e, "saving a finished answer failed");
            None
        }
    };
    let last = match error {
        None => json!({"type": "done", "message": stored}),
        Some(e) => json!({"type": "error", "error": e, "message": stored}),
    };
    let _ = tx.send(event(last)).await;
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
    running
        .control
        .stop()
        .map_err(|e| ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, "busy", e.to_string()))?;
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
