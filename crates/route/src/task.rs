//! One task a hub gave this node in worker mode: its frame turned into an engine request
//! (the conversation rendered with the model's chat template, or Hearth's raw prompt and text
//! to continue from), started through the route on this node's model, and its tokens streamed
//! back as binary frames of whole characters (each followed, for a Hearth hub, by the count of
//! tokens it carries), ending with the 4-byte end frame.

use std::sync::Arc;
use std::time::Duration;

use hearth_engine::{
    CacheOwner, Chat, Event, FailureKind, ModelInfo, Prompt, Request, SubmitError,
};
use hearth_protocol::generation::{RawParams, StopField};
use hearth_protocol::worker::{
    self as wp, Task, TaskDone, TaskFailure, TaskId, CONTEXT_LENGTH_EXCEEDED, INVALID_TASK,
};
use hearth_protocol::SamplingParams;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::router::Router;
use crate::target::Target;

/// Most ready token events joined into one frame.
const MAX_COALESCE: usize = 32;

/// A frame a runner wants sent. `last` is the task's end frame.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub(super) id: TaskId,
    pub(super) seq: u64,
    pub(super) msg: Message,
    pub(super) last: bool,
}

/// Runs one task: submit, stream frames, end.
#[derive(Debug)]
pub(super) struct Runner {
    pub(super) id: TaskId,
    pub(super) seq: u64,
    pub(super) router: Router,
    pub(super) model: Arc<ModelInfo>,
    pub(super) out: mpsc::Sender<Outgoing>,
    pub(super) cancel: CancellationToken,
    pub(super) extensions: bool,
    /// The hub, as the prompt cache names the origin of its tasks.
    pub(super) origin: Arc<str>,
}

impl Runner {
    pub(super) async fn run(self, task: Task) {
        let request = match prepare(&task, &self.model, &self.origin) {
            Ok(r) => r,
            Err(f) => return self.fail(f).await,
        };
        let target = Target::local(self.model.clone());
        let mut gen = match self.router.submit(&target, request) {
            Ok(g) => g,
            Err(e) => return self.fail(submit_failure(&e)).await,
        };
        let mut pending: Option<Event> = None;
        // Tokens generated since the last count sent to a Hearth hub.
        let mut uncounted: u32 = 0;
        loop {
            let event = match pending.take() {
                Some(e) => Some(e),
                None => tokio::select! {
                    e = gen.events.recv() => e,
                    () = self.cancel.cancelled() => {
                        // Dropping the events cancels too; stopping frees the slot sooner.
                        let _ = gen.control.stop();
                        return;
                    }
                },
            };
            match event {
                Some(Event::Token(t)) => {
                    // Flushed held-back text (no id) is not a token of its own.
                    let mut text = t.text;
                    uncounted += u32::from(t.id.is_some());
                    for _ in 0..MAX_COALESCE {
                        match gen.events.try_recv() {
                            Some(Event::Token(t)) => {
                                text.push_str(&t.text);
                                uncounted += u32::from(t.id.is_some());
                            }
                            Some(other) => {
                                pending = Some(other);
                                break;
                            }
                            None => break,
                        }
                    }
                    for piece in wp::split_utf8(&text, wp::MAX_FRAME_TEXT_BYTES) {
                        let frame = Message::binary(wp::encode_data(self.id, piece));
                        if !self.send(frame, false).await {
                            return;
                        }
                    }
                    if self.extensions && !text.is_empty() {
                        let count = Message::text(wp::tokens_frame(self.id, uncounted));
                        if !self.send(count, false).await {
                            return;
                        }
                        uncounted = 0;
                    }
                }
                Some(Event::Done(done)) => {
                    if self.extensions {
                        let d = TaskDone {
                            finish_reason: done.reason,
                            usage: done.usage,
                            queued_ms: ms(done.timing.queued),
                            prefill_ms: ms(done.timing.prefill),
                            stop_sequence: done.stop_sequence,
                            cached_tokens: done.timing.cached_tokens,
                        };
                        if !self
                            .send(Message::text(wp::done_frame(self.id, &d)), false)
                            .await
                        {
                            return;
                        }
                    }
                    self.end().await;
                    return;
                }
                Some(Event::Error(f)) => {
                    let failure = TaskFailure {
                        code: failure_code(f.kind).into(),
                        message: f.message,
                    };
                    return self.fail(failure).await;
                }
                // No controls but stop reach a worker's generations.
                Some(Event::Restarted | Event::Paused | Event::Resumed | Event::Modified) => {}
                None => {
                    let failure = TaskFailure {
                        code: "unavailable".into(),
                        message: "the engine stopped".into(),
                    };
                    return self.fail(failure).await;
                }
            }
        }
    }

    async fn send(&self, msg: Message, last: bool) -> bool {
        self.out
            .send(Outgoing {
                id: self.id,
                seq: self.seq,
                msg,
                last,
            })
            .await
            .is_ok()
    }

    async fn end(&self) {
        let _ = self
            .send(Message::binary(wp::encode_end(self.id)), true)
            .await;
    }

    /// End the task after an error: log it, tell a Hearth hub why, send the end frame.
    async fn fail(&self, failure: TaskFailure) {
        if self.cancel.is_cancelled() {
            return;
        }
        tracing::warn!(task = %self.id, code = %failure.code, "task failed: {}", failure.message);
        if self.extensions {
            let frame = Message::text(wp::error_frame(self.id, &failure));
            if !self.send(frame, false).await {
                return;
            }
        }
        self.end().await;
    }
}

fn invalid(message: impl Into<String>) -> TaskFailure {
    TaskFailure {
        code: INVALID_TASK.into(),
        message: message.into(),
    }
}

/// The engine request for a task from `origin` (a hub, a LAN peer): the conversation rendered
/// by the model's chat template, or (Hearth extension) a raw prompt, and text to continue
/// from; its prompt cache is the origin's caller's (the task's `cache_owner`) under the origin.
pub fn prepare(task: &Task, model: &ModelInfo, origin: &str) -> Result<Request, TaskFailure> {
    let ctx = model.context;
    let ext = task.hearth.clone().unwrap_or_default();
    let max_tokens = match task.max_new_tokens {
        None => None,
        Some(n) if n <= 0 => {
            return Err(invalid(format!(
                "max_new_tokens must be at least 1, got {n}"
            )))
        }
        // Hubs ask for what their own model allows; this node gives what its context holds.
        Some(n) => Some(n.min(i64::from(ctx))),
    };
    let raw = RawParams {
        temperature: task.temperature,
        top_p: ext.top_p,
        top_k: ext.top_k,
        repetition_penalty: ext.repetition_penalty,
        frequency_penalty: ext.frequency_penalty,
        presence_penalty: ext.presence_penalty,
        seed: ext.seed,
        max_tokens,
        stop: ext.stop.map(StopField::Many),
        ignore_eos: ext.ignore_eos,
        speculative: ext.speculative,
        ..RawParams::default()
    };
    let mut params = raw
        .validate(&SamplingParams::default(), Some(ctx))
        .map_err(|e| invalid(format!("{}: {}", e.param, e.message)))?;
    // The engine checks it against the model before the task queues.
    params.grammar = ext.grammar;
    let prompt = match ext.prompt {
        Some(p) => Prompt::Text(p),
        None => {
            let conversation = task.conversation();
            if conversation.is_empty() {
                return Err(invalid("the task has no system message and no messages"));
            }
            Prompt::Chat(Chat {
                messages: conversation,
                tools: ext.tools.clone(),
                think: ext.think,
            })
        }
    };
    let continued = ext.continue_from.unwrap_or_default();
    let prompt = crate::continuation::continuation(model, prompt, &continued).map_err(invalid)?;
    let theirs = ext.cache_owner.as_deref().and_then(CacheOwner::from_hex);
    Ok(Request {
        prompt,
        params,
        owner: CacheOwner::remote(origin, theirs),
    })
}

fn submit_failure(e: &SubmitError) -> TaskFailure {
    let code = match e {
        SubmitError::ContextLengthExceeded { .. } => CONTEXT_LENGTH_EXCEEDED,
        SubmitError::QueueFull { .. } => "queue_full",
        SubmitError::ModelLoading { .. } => "model_loading",
        SubmitError::Prompt(_) => INVALID_TASK,
        SubmitError::LoadFailed { .. }
        | SubmitError::NoModel
        | SubmitError::ShuttingDown
        | SubmitError::Unavailable { .. } => "unavailable",
    };
    TaskFailure {
        code: code.into(),
        message: e.to_string(),
    }
}

fn failure_code(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Decode => "internal_error",
        FailureKind::ShuttingDown | FailureKind::Unloaded => "unavailable",
        FailureKind::Invalid => INVALID_TASK,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_have_stable_codes() {
        assert_eq!(
            submit_failure(&SubmitError::ContextLengthExceeded {
                prompt_tokens: 5000,
                context: 1024,
                at_least: false,
            })
            .code,
            "context_length_exceeded"
        );
        assert_eq!(submit_failure(&SubmitError::NoModel).code, "unavailable");
        assert_eq!(failure_code(FailureKind::Decode), "internal_error");
        // A refusal judged elsewhere stays the request's own fault on the way back.
        let invalid = TaskFailure {
            code: failure_code(FailureKind::Invalid).into(),
            message: String::new(),
        };
        assert!(invalid.is_the_requests());
        assert!(!TaskFailure {
            code: failure_code(FailureKind::Decode).into(),
            message: String::new()
        }
        .is_the_requests());
    }
}
