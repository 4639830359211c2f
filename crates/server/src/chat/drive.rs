//! Driving a turn to its end, independent of the browser: each answer's tokens go to the client
//! while it listens and to the database every [`SAVE_EVERY`]; an answer that calls MCP tools
//! (`tool_loop`) has its calls recorded, run when allowed, and the next answer of the loop
//! started, until an answer calls none, a call waits for consent, or the step limit.

use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event as SseEvent;
use hearth_engine::answer::{CallError, Piece, Splitter};
use hearth_engine::{Event, Prompt, Request};
use hearth_protocol::tools::{ToolCall, ToolSet};
use hearth_protocol::{FinishReason, SamplingParams};
use hearth_route::Generation;
use hearth_store::{Message, MessageStatus, NewMessage, Stats};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::tool_loop::{self, CallRecord, CallState};
use super::{answering_node, event, media, OPENED_THINKING};
use crate::state::chats::RunningChat;
use crate::state::AppState;

/// How often a streaming answer is written to the database.
const SAVE_EVERY: Duration = Duration::from_millis(250);

/// One answer being generated: its message and its generation.
pub(super) struct Step {
    pub(super) message: Message,
    pub(super) generation: Generation,
    pub(super) opened_thinking: bool,
}

/// What a turn with tools needs to go on after an answer's calls.
pub(super) struct ToolTurn {
    /// `None` when a decision found no tool to offer (its server failing): the next answer
    /// reads the results it has and answers without tools.
    pub(super) tools: Option<tool_loop::Offered>,
    pub(super) target: hearth_route::Target,
    pub(super) params: SamplingParams,
    pub(super) system_prompt: String,
    pub(super) takes: media::Takes,
    pub(super) owner: hearth_engine::CacheOwner,
    /// Answers with calls this turn has had so far, and how many it may have.
    pub(super) steps: i64,
    pub(super) max_steps: i64,
    /// What the turn was given of its documents: each step is given the same.
    pub(super) given: Option<super::documents::Given>,
}

/// A conversation's running answer, held: released (`Chats::end`) when dropped, however the
/// work ends, a panic included, so no conversation stays "busy".
pub(super) struct Held {
    state: Arc<AppState>,
    conversation: String,
}

impl Held {
    /// Hold the conversation `Chats::begin` gave this turn.
    pub(super) fn new(state: &Arc<AppState>, conversation: &str) -> Self {
        Self {
            state: state.clone(),
            conversation: conversation.to_owned(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.state.chats.end(&self.conversation);
    }
}

/// How one answer ended.
struct Ended {
    stored: Option<Message>,
    error: Option<String>,
    calls: Vec<ToolCall>,
    /// A call the answer began that could not be read (it stays in the text).
    unread: Option<CallError>,
}

/// The browser's side of one answer: its tokens while it listens (waiting for a browser that
/// cannot keep up); once it has gone, the answer is stopped and kept as it is.
struct Listener<'a> {
    tx: &'a mpsc::Sender<SseEvent>,
    gone: bool,
}

impl Listener<'_> {
    async fn token(&mut self, piece: &str, control: &hearth_route::Control) {
        let ev = event(json!({"type": "token", "text": piece}));
        if !self.gone && self.tx.send(ev).await.is_err() {
            self.gone = true;
            let _ = control.stop();
        }
    }
}

/// What the chat tells the user of a call the model began but that could not be made; an
/// answer cut short of the conversation's Max tokens filled the model's context.
fn unread_notice(e: &CallError, at_max_tokens: bool) -> String {
    match e {
        CallError::Cut(_) if at_max_tokens => "The answer reached its token limit in the middle of a tool call, so no tool was called: raise \"Max tokens\" in the chat's settings.".to_owned(),
        CallError::Cut(_) => "The answer filled the model's context in the middle of a tool call, so no tool was called: start a new chat, or load the model with a larger context.".to_owned(),
        CallError::Invalid(why) => format!("No tool was called: {why}; the call is shown as text."),
    }
}

/// Whether the answer ended at the conversation's Max tokens (else the context was full first).
fn at_max_tokens(turn: Option<&ToolTurn>, ended: &Ended) -> bool {
    let tokens = ended.stored.as_ref().and_then(|s| s.stats.as_ref());
    turn.and_then(|t| t.params.max_tokens)
        .zip(tokens)
        .is_some_and(|(m, s)| s.tokens >= i64::from(m))
}

/// Sends an event while the browser listens; a browser gone stops nothing here.
async fn send(tx: &mpsc::Sender<SseEvent>, v: Value) {
    let _ = tx.send(event(v)).await;
}

/// Runs a turn's answers to their end (see the module doc); the conversation's running answer
/// is `running` throughout, `held` until the end.
pub(super) async fn drive(
    state: Arc<AppState>,
    conversation_id: String,
    mut step: Step,
    mut running: RunningChat,
    tx: mpsc::Sender<SseEvent>,
    mut turn: Option<ToolTurn>,
    held: Held,
) {
    loop {
        let offered = turn.as_ref().and_then(|t| t.tools.clone());
        let later = turn.as_ref().is_some_and(|t| t.steps > 0);
        let tools = offered.as_ref().map(|o| o.for_answer(later));
        let ended = answer(&state, step, &running, &tx, tools).await;
        let unread = ended
            .unread
            .as_ref()
            .map(|e| unread_notice(e, at_max_tokens(turn.as_ref(), &ended)));
        let (Some(t), Some(offered), Some(stored), None, false) = (
            turn.as_mut(),
            offered,
            ended.stored.clone(),
            &ended.error,
            ended.calls.is_empty(),
        ) else {
            drop(held);
            let last = match ended.error {
                None => json!({"type": "done", "message": ended.stored}),
                Some(e) => json!({"type": "error", "error": e, "message": ended.stored}),
            };
            send(&tx, last).await;
            if let Some(text) = unread {
                send(&tx, json!({"type": "notice", "text": text})).await;
            }
            return;
        };
        let mut calls: Vec<CallRecord> = ended
            .calls
            .into_iter()
            .map(|c| CallRecord::from_call(c, &offered))
            .collect();
        t.steps += 1;
        let over = t.steps > t.max_steps;
        if over {
            for c in calls.iter_mut().filter(|c| !c.ended()) {
                c.state = CallState::Skipped;
                c.error = Some(format!(
                    "the turn's step limit ({}) was reached before this call",
                    t.max_steps
                ));
            }
        } else {
            tool_loop::pre_allow(&state, &conversation_id, &mut calls).await;
        }
        let stored = save_calls(&state, &stored, &calls).await;
        for c in &calls {
            send(
                &tx,
                json!({"type": "tool_call", "message_id": stored.id, "call": c}),
            )
            .await;
        }
        send(
            &tx,
            json!({"type": "done", "message": stored, "next": !over}),
        )
        .await;
        if over {
            drop(held);
            let text = format!(
                "The loop stopped at its step limit ({} answers with tool calls); raise \"Tool steps\" in the chat's settings to let it go further.",
                t.max_steps
            );
            send(&tx, json!({"type": "notice", "text": text})).await;
            return;
        }
        let next = match go_on(&state, &conversation_id, stored, calls, &running, &tx, t).await {
            Ok(next) => next,
            Err(last) => {
                // Released before the last event: a client that answers it at once (a
                // decision) finds the conversation free.
                drop(held);
                send(&tx, last).await;
                return;
            }
        };
        running = RunningChat {
            message_id: next.message.id.clone(),
            control: Some(next.generation.control.clone()),
            ..running
        };
        state.chats.replace(&conversation_id, running.clone());
        send(&tx, json!({"type": "start", "message": next.message})).await;
        step = next;
    }
}

/// After an answer's calls were recorded: stop for consent, or run the allowed calls and start
/// the loop's next answer. `Err`: the turn ends here, with this last event to send once the
/// conversation is released (the calls waiting for consent, a stop, a failure).
pub(super) async fn go_on(
    state: &Arc<AppState>,
    conversation_id: &str,
    mut message: Message,
    mut calls: Vec<CallRecord>,
    running: &RunningChat,
    tx: &mpsc::Sender<SseEvent>,
    turn: &ToolTurn,
) -> Result<Step, Value> {
    let waiting: Vec<&str> = calls
        .iter()
        .filter(|c| c.state == CallState::Pending)
        .map(|c| c.id.as_str())
        .collect();
    if !waiting.is_empty() {
        return Err(json!({"type": "consent", "message_id": message.id, "calls": waiting}));
    }
    for i in 0..calls.len() {
        if calls[i].state != CallState::Running {
            continue;
        }
        if running.cancel.is_cancelled() {
            calls[i].state = CallState::Cancelled;
            calls[i].error = Some("the answer was stopped".to_owned());
        } else {
            let cancel = running.cancel.child_token();
            tool_loop::run(state, &mut calls[i], cancel).await;
        }
        message = save_calls(state, &message, &calls).await;
        send(
            tx,
            json!({"type": "tool_update", "message_id": message.id, "call": calls[i]}),
        )
        .await;
    }
    if running.cancel.is_cancelled() {
        return Err(json!({"type": "done", "message": message}));
    }
    next_step(state, conversation_id, turn)
        .await
        .map_err(|e| json!({"type": "error", "error": e, "message": message}))
}

async fn save_calls(state: &AppState, message: &Message, calls: &[CallRecord]) -> Message {
    match state
        .store
        .set_tool_calls(message.id.clone(), tool_loop::records_json(calls))
        .await
    {
        Ok(Some(m)) => m,
        Ok(None) => message.clone(),
        Err(e) => {
            tracing::error!(error = %e, "saving an answer's tool calls failed");
            message.clone()
        }
    }
}

/// The loop's next answer: the whole conversation (calls and results included) submitted again,
/// into a new assistant message.
async fn next_step(
    state: &Arc<AppState>,
    conversation_id: &str,
    turn: &ToolTurn,
) -> Result<Step, String> {
    let (_, history) = state
        .store
        .conversation(conversation_id.to_owned())
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the conversation was deleted".to_owned())?;
    let files = media::turn_files(state, conversation_id, None, turn.takes)
        .await
        .map_err(|e| e.to_string())?;
    let mut prompt = media::turn_prompt(&turn.system_prompt, &history, files, turn.takes);
    if let Some(given) = &turn.given {
        super::documents::apply(given, &mut prompt);
    }
    let opened = hearth_engine::answer::starts_in_thinking(
        turn.target.local.as_deref(),
        None,
        &turn.params,
        None,
    );
    let chat = hearth_engine::Chat {
        messages: prompt,
        tools: turn.tools.as_ref().map(|o| o.for_answer(true)),
        think: None,
    };
    let chat = super::fit::fitted(turn.target.local.clone(), chat, turn.params.max_tokens).await;
    let generation = state
        .router
        .submit(
            &turn.target,
            Request {
                prompt: Prompt::Chat(chat),
                params: turn.params.clone(),
                owner: turn.owner,
            },
        )
        .map_err(|e| e.to_string())?;
    let node = answering_node(state, &generation);
    let message = state
        .store
        .add_message(NewMessage {
            conversation_id,
            role: "assistant",
            content: "",
            status: MessageStatus::Streaming,
            model: Some(turn.target.model.as_str()),
            node: Some(&node),
            images: Vec::new(),
            audio: Vec::new(),
        })
        .await;
    let mut message = match message {
        Ok(message) => message,
        Err(e) => {
            let _ = generation.control.stop();
            return Err(e.to_string());
        }
    };
    // Each answer of the loop keeps the sources it was given, the last (which cites them) too.
    if let Some(given) = &turn.given {
        let kept = state
            .store
            .set_sources(message.id.clone(), Some(given.sources.clone()))
            .await;
        if let Err(e) = kept {
            let _ = generation.control.stop();
            return Err(e.to_string());
        }
        message.sources = Some(given.sources.clone());
    }
    Ok(Step {
        message,
        generation,
        opened_thinking: opened,
    })
}

/// One answer to its end: tokens to the client while it listens, the text to the database every
/// [`SAVE_EVERY`], the ending recorded; with `tools`, the calls it made read apart from its text.
async fn answer(
    state: &AppState,
    step: Step,
    running: &RunningChat,
    tx: &mpsc::Sender<SseEvent>,
    tools: Option<ToolSet>,
) -> Ended {
    let Step {
        message,
        mut generation,
        opened_thinking,
    } = step;
    let mut splitter =
        tools.map(|t| Splitter::new(false, Some(t), message.id.clone()).broken_calls_as_text());
    let mut text = String::new();
    let mut client = Listener {
        tx,
        gone: tx.is_closed(),
    };
    // A loop's next answer after the browser left: stopped at once, kept as interrupted.
    if client.gone {
        let _ = generation.control.stop();
    }
    if opened_thinking {
        text.push_str(OPENED_THINKING);
        client.token(OPENED_THINKING, &generation.control).await;
    }
    let mut stopping = false;
    let mut saved_len = 0;
    let mut save = tokio::time::interval(SAVE_EVERY);
    save.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        tokio::select! {
            ev = generation.events.recv() => match ev {
                Some(Event::Token(t)) if !t.text.is_empty() => {
                    let pieces = match splitter.as_mut() {
                        Some(s) => s.push(&t.text),
                        None => vec![Piece::Content(t.text)],
                    };
                    for p in pieces {
                        let (Piece::Content(p) | Piece::Reasoning(p)) = p;
                        text.push_str(&p);
                        client.token(&p, &generation.control).await;
                    }
                }
                Some(Event::Token(_)) => {}
                Some(Event::Done(done)) => break Ok(done),
                Some(Event::Error(f)) => break Err(f.message),
                Some(Event::Restarted | Event::Paused | Event::Resumed | Event::Modified) => {}
                None => break Err("the engine stopped".to_owned()),
            },
            // A stop asked while the loop was between answers reaches this one.
            () = running.cancel.cancelled(), if !stopping => {
                stopping = true;
                let _ = generation.control.stop();
            }
            () = tx.closed(), if !client.gone => {
                // The browser left (reload, closed window): stop, keep what we have.
                client.gone = true;
                let _ = generation.control.stop();
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
    let mut calls = Vec::new();
    let mut unread = None;
    if let (Ok(done), Some(s)) = (&outcome, splitter) {
        match s.finish(done.reason) {
            Ok(ending) => {
                for p in ending.pieces {
                    let (Piece::Content(p) | Piece::Reasoning(p)) = p;
                    text.push_str(&p);
                    client.token(&p, &generation.control).await;
                }
                // A stopped answer's calls are not made.
                if done.reason != FinishReason::Cancelled {
                    calls = ending.calls;
                    unread = ending.unread;
                }
            }
            Err(e) => tracing::warn!(error = %e, "an answer's tool call could not be read"),
        }
    }
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
                prompt_tokens: i64::from(done.usage.prompt_tokens),
                cached_tokens: i64::from(done.timing.cached_tokens.min(done.usage.prompt_tokens)),
                total_ms: done.timing.total.as_secs_f64() * 1000.0,
            };
            (status, Some(stats), None)
        }
        Err(message) if state.shutdown.is_cancelled() => {
            (MessageStatus::Interrupted, None, Some(message.clone()))
        }
        Err(message) => (MessageStatus::Error, None, Some(message.clone())),
    };
    if client.gone {
        calls.clear();
    }
    // A re-dispatched answer was finished elsewhere: name the node that ended it.
    let node = answering_node(state, &generation);
    let stored = state
        .store
        .finish_message(message.id.clone(), text, status, stats, node, error.clone())
        .await;
    let stored = match stored {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(error = %e, "saving a finished answer failed");
            None
        }
    };
    Ended {
        stored,
        error,
        calls,
        unread,
    }
}
