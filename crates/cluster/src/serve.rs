//! A peer's `inferenceRequest`, served by this node's engine (a peer chose this node: passing
//! it on could send it back): the OpenAI body inside is read and validated by the OpenAI
//! door's own decoder, or, from a Hearth peer, the Hearth task it carries by worker mode's
//! (a raw prompt, text to continue from). The tokens go back as `inferenceChunk`s (OpenAI
//! chunks, the last with the finish reason and usage; a Hearth peer also gets each chunk's
//! token count), then `inferenceComplete` with `tokensOut` (and, for a Hearth peer, the
//! finish reason, usage and timings). A Hearth peer may pause and resume it (`hearthControl`). Failures are an `inferenceError` with one of the six
//! codes the Rust node reads (it drops any other): `model_not_loaded`, `queue_full`,
//! `unavailable`, `internal_error`, `timeout`, `cancelled`.

use std::time::{SystemTime, UNIX_EPOCH};

use hearth_engine::{CacheOwner, Event, FailureKind, Prompt, Request, SubmitError};
use hearth_protocol::cluster::{
    Chunk, ChunkChoice, ChunkDelta, ControlAction, ErrorCode, InferenceChunk, InferenceComplete,
    InferenceError, InferenceRequest, Message,
};
use hearth_protocol::openai::ChatCompletionBody;
use hearth_protocol::worker as wp;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::peers::Kind;
use super::provider::HEARTH_TASK_KEY;
use crate::me::Me;
use hearth_route::{Control, Generation};

/// A served request's controls for a Hearth peer's `hearthControl`: one that arrives before
/// the request has started is kept and applied when it starts.
#[derive(Debug, Default)]
pub(super) struct ControlSlot(std::sync::Mutex<(Option<Control>, Option<ControlAction>)>);

impl ControlSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<Control>, Option<ControlAction>)> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The request started: its controls, and any action that came first.
    fn set(&self, control: Control) {
        let mut slot = self.lock();
        if let Some(action) = slot.1.take() {
            apply(&control, action);
        }
        slot.0 = Some(control);
    }

    /// Pause or resume it now, or as soon as it starts.
    pub(super) fn apply(&self, action: ControlAction) {
        let mut slot = self.lock();
        match &slot.0 {
            Some(control) => apply(control, action),
            None => slot.1 = Some(action),
        }
    }
}

fn apply(control: &Control, action: ControlAction) {
    let _ = match action {
        ControlAction::Pause => control.pause(),
        ControlAction::Resume => control.resume(),
    };
}

/// Hand `m` to the connection unless the request is cancelled first; whether it went.
async fn send(out: &mpsc::Sender<Message>, cancel: &CancellationToken, m: Message) -> bool {
    tokio::select! {
        biased;
        () = cancel.cancelled() => false,
        r = out.send(m) => r.is_ok(),
    }
}

/// Serve `req` until it ends, the peer cancels it or the connection goes.
pub(super) async fn inference(
    me: &Me,
    req: InferenceRequest,
    out: &mpsc::Sender<Message>,
    cancel: &CancellationToken,
    (kind, origin): (Kind, &str),
    control: &ControlSlot,
) {
    let hearth = kind == Kind::Hearth;
    let id = req.request_id.clone();
    let fail = |r: Refusal| {
        Message::InferenceError(InferenceError {
            request_id: id.clone(),
            error_message: r.message,
            code: Some(r.code),
            // Only a Hearth peer reads it; the others get the six codes they know.
            hearth_code: r.hearth.filter(|_| hearth).map(str::to_owned),
        })
    };
    let mut gen = match start(me, req.request, hearth, origin) {
        Ok(g) => g,
        Err(r) => {
            send(out, cancel, fail(r)).await;
            return;
        }
    };
    control.set(gen.control.clone());
    let model = gen.model.to_string();
    let chunk_id = format!("chatcmpl-{}", gen.id);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let chunk = |delta: ChunkDelta, finish: Option<String>, usage, tokens: Option<u32>| {
        Message::InferenceChunk(InferenceChunk {
            request_id: id.clone(),
            chunk: Chunk {
                id: chunk_id.clone(),
                object: "chat.completion.chunk".into(),
                created,
                model: model.clone(),
                choices: vec![ChunkChoice {
                    index: 0,
                    delta,
                    finish_reason: finish,
                }],
                usage,
            },
            hearth_tokens: tokens.filter(|_| hearth),
        })
    };
    let mut first = true;
    // Tokens whose text was empty (held back), counted with the next chunk.
    let mut uncounted: u32 = 0;
    loop {
        let event = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                let _ = gen.control.stop();
                return;
            }
            e = gen.events.recv() => e,
        };
        let message = match event {
            Some(Event::Token(t)) if t.text.is_empty() => {
                uncounted += u32::from(t.id.is_some());
                continue;
            }
            Some(Event::Token(t)) => {
                let role = first.then(|| "assistant".to_owned());
                first = false;
                let tokens = std::mem::take(&mut uncounted) + u32::from(t.id.is_some());
                chunk(
                    ChunkDelta {
                        role,
                        content: Some(t.text),
                    },
                    None,
                    None,
                    Some(tokens),
                )
            }
            Some(Event::Done(d)) => {
                let last = chunk(
                    ChunkDelta::default(),
                    Some(d.reason.as_str().to_owned()),
                    Some(d.usage),
                    (uncounted > 0).then_some(uncounted),
                );
                if !send(out, cancel, last).await {
                    return;
                }
                send(
                    out,
                    cancel,
                    Message::InferenceComplete(InferenceComplete {
                        request_id: id.clone(),
                        tokens_out: Some(d.usage.completion_tokens),
                        hearth_done: hearth.then_some(hearth_protocol::worker::TaskDone {
                            finish_reason: d.reason,
                            usage: d.usage,
                            queued_ms: d.timing.queued.as_secs_f64() * 1000.0,
                            prefill_ms: d.timing.prefill.as_secs_f64() * 1000.0,
                            stop_sequence: d.stop_sequence.clone(),
                            cached_tokens: d.timing.cached_tokens,
                        }),
                    }),
                )
                .await;
                return;
            }
            Some(Event::Error(f)) => {
                let (code, hearth) = match f.kind {
                    FailureKind::Decode => (ErrorCode::InternalError, None),
                    FailureKind::ShuttingDown | FailureKind::Unloaded => {
                        (ErrorCode::Unavailable, None)
                    }
                    FailureKind::Invalid => (ErrorCode::InternalError, Some(wp::INVALID_TASK)),
                };
                let r = Refusal {
                    code,
                    hearth,
                    message: f.message,
                };
                send(out, cancel, fail(r)).await;
                return;
            }
            Some(_) => continue,
            None => {
                let r = Refusal::new(ErrorCode::Unavailable, "the engine stopped".into());
                send(out, cancel, fail(r)).await;
                return;
            }
        };
        // A connection whose outbox is gone has ended: dropping `gen` stops the generation.
        if !send(out, cancel, message).await {
            return;
        }
    }
}

/// Why a peer's request is not answered: the code every peer reads, Hearth's own code where
/// the request itself was at fault, and the message.
struct Refusal {
    code: ErrorCode,
    hearth: Option<&'static str>,
    message: String,
}

impl Refusal {
    fn new(code: ErrorCode, message: String) -> Self {
        Self {
            code,
            hearth: None,
            message,
        }
    }
}

/// Read the OpenAI body with the OpenAI door's decoder (or a Hearth peer's task) and start it
/// on this node's engine; why not, for the peer, when that cannot be done.
fn start(
    me: &Me,
    mut request: serde_json::Map<String, serde_json::Value>,
    hearth: bool,
    origin: &str,
) -> Result<Generation, Refusal> {
    let invalid = |e: &dyn std::fmt::Display| Refusal {
        code: ErrorCode::InternalError,
        hearth: Some(wp::INVALID_TASK),
        message: format!("invalid request: {e}"),
    };
    let task = request.remove(HEARTH_TASK_KEY);
    let body: ChatCompletionBody =
        serde_json::from_value(serde_json::Value::Object(request)).map_err(|e| invalid(&e))?;
    let asked = body.model.clone().filter(|m| !m.is_empty());
    let info = me.state.host.ready_model(asked.as_deref()).ok_or_else(|| {
        let asked = asked.clone().unwrap_or_default();
        Refusal::new(
            ErrorCode::ModelNotLoaded,
            format!("model '{asked}' is not loaded on this node"),
        )
    })?;
    let request = match task.filter(|_| hearth) {
        Some(task) => {
            let text = task
                .as_str()
                .ok_or_else(|| invalid(&"the Hearth task is not text"))?;
            let task = match hearth_protocol::worker::parse_hub_text(text) {
                Ok(Some(hearth_protocol::worker::HubMessage::Task(t))) if t.is_pending() => t,
                Ok(_) => return Err(invalid(&"the Hearth task is not a task")),
                Err(e) => return Err(invalid(&e)),
            };
            hearth_route::task::prepare(&task, &info, origin).map_err(|f| invalid(&f.message))?
        }
        None => {
            let chat = body.validate(Some(info.context)).map_err(|e| invalid(&e))?;
            // Their answers need a door that reads the calls back and a grammar: refused
            // rather than answered as plain text.
            if chat.tools.is_some() || chat.format.is_some() {
                return Err(invalid(
                    &"tools and response_format are served to Hearth nodes only (in Hearth's task)",
                ));
            }
            Request {
                prompt: Prompt::Chat(chat.messages.into()),
                params: chat.params,
                owner: CacheOwner::remote(origin, None),
            }
        }
    };
    me.state
        .host
        .submit(&info.id, request)
        .map(Generation::local)
        .map_err(|e| Refusal {
            code: submit_code(&e),
            hearth: match e {
                SubmitError::Prompt(_) => Some(wp::INVALID_TASK),
                SubmitError::ContextLengthExceeded { .. } => Some(wp::CONTEXT_LENGTH_EXCEEDED),
                _ => None,
            },
            message: e.to_string(),
        })
}

fn submit_code(e: &SubmitError) -> ErrorCode {
    match e {
        SubmitError::QueueFull { .. } => ErrorCode::QueueFull,
        SubmitError::ModelLoading { .. } | SubmitError::NoModel => ErrorCode::ModelNotLoaded,
        SubmitError::ShuttingDown
        | SubmitError::LoadFailed { .. }
        | SubmitError::Unavailable { .. } => ErrorCode::Unavailable,
        SubmitError::ContextLengthExceeded { .. } | SubmitError::Prompt(_) => {
            ErrorCode::InternalError
        }
    }
}
