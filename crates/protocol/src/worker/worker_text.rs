//! Worker -> hub text frames of Hearth's extension: how many tokens a data frame's text
//! carries ([`tokens_frame`]), how a task ended ([`TaskDone`]) or why it failed
//! ([`TaskFailure`]), sent before the task's end frame, and how a hub reads them
//! ([`parse_worker_text`]).

use serde::{Deserialize, Serialize};

use super::{parse_object, short, FrameError, TaskId};
use crate::generation::{FinishReason, Usage};

/// How a task ended, as a Hearth worker reports it to a Hearth hub (extension).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDone {
    pub finish_reason: FinishReason,
    pub usage: Usage,
    /// Waiting for a slot on the worker, in ms.
    #[serde(default)]
    pub queued_ms: f64,
    /// Prefill on the worker, in ms.
    #[serde(default)]
    pub prefill_ms: f64,
    /// The stop string that ended the answer, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
    /// Prompt tokens the worker's prompt cache served instead of prefill.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_tokens: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Why a task failed, as a Hearth worker reports it to a Hearth hub (extension). `code` is
/// one of `invalid_task`, `context_length_exceeded`, `model_loading`, `queue_full`,
/// `unavailable`, `internal_error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailure {
    pub code: String,
    pub message: String,
}

/// The code of a task refused as it was given (bad input: an image that does not decode, a
/// field out of range).
pub const INVALID_TASK: &str = "invalid_task";
/// The code of a task whose prompt is over the worker's context.
pub const CONTEXT_LENGTH_EXCEEDED: &str = "context_length_exceeded";

impl TaskFailure {
    /// The task itself was at fault (bad input, a prompt over the worker's context): the
    /// client's to fix, not a reason to place it elsewhere.
    pub fn is_the_requests(&self) -> bool {
        matches!(self.code.as_str(), INVALID_TASK | CONTEXT_LENGTH_EXCEEDED)
    }
}

/// Hearth's failure code for a task cut short because its worker is stopping (shutdown,
/// quit, a model change): a Hearth hub places the task again from the text it already has,
/// as for a worker it lost; other hubs only see the task's end frame.
pub const WORKER_STOPPING: &str = "worker_stopping";

/// A text frame from a worker.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerText {
    /// The data frames since the last count carry this many generated tokens.
    Tokens {
        id: TaskId,
        count: u32,
    },
    Done {
        id: TaskId,
        done: TaskDone,
    },
    Failed {
        id: TaskId,
        failure: TaskFailure,
    },
}

/// `{"id":N,"tokens":K}`: sent after a task's data frames, the tokens their text carries
/// (tokens whose text was held back count with the frame that carries it), so that a hub that
/// loses this worker mid-answer knows the real count of what it already has.
pub fn tokens_frame(id: TaskId, count: u32) -> String {
    format!(r#"{{"id":{},"tokens":{count}}}"#, id.0)
}

/// `{"id":N,"done":{...}}`.
pub fn done_frame(id: TaskId, done: &TaskDone) -> String {
    let body = serde_json::to_string(done).unwrap_or_else(|_| "{}".into());
    format!(r#"{{"id":{},"done":{body}}}"#, id.0)
}

/// `{"id":N,"error":{...}}`.
pub fn error_frame(id: TaskId, failure: &TaskFailure) -> String {
    let body = serde_json::to_string(failure)
        .unwrap_or_else(|_| r#"{"code":"internal_error","message":""}"#.into());
    format!(r#"{{"id":{},"error":{body}}}"#, id.0)
}

/// Parse a text frame from a worker. `Ok(None)` for an empty (keepalive) frame.
pub fn parse_worker_text(text: &str) -> Result<Option<WorkerText>, FrameError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let m = parse_object(text)?;
    let id = TaskId::from_json(m.get("id").ok_or(FrameError::MissingId)?)?;
    if let Some(t) = m.get("tokens") {
        let count = t
            .as_u64()
            .and_then(|c| u32::try_from(c).ok())
            .ok_or_else(|| FrameError::Invalid {
                id,
                message: format!("tokens must be a count, got {}", short(&t.to_string())),
            })?;
        return Ok(Some(WorkerText::Tokens { id, count }));
    }
    if let Some(d) = m.get("done") {
        let done =
            serde_json::from_value::<TaskDone>(d.clone()).map_err(|e| FrameError::Invalid {
                id,
                message: format!("done: {e}"),
            })?;
        return Ok(Some(WorkerText::Done { id, done }));
    }
    if let Some(f) = m.get("error") {
        let failure =
            serde_json::from_value::<TaskFailure>(f.clone()).map_err(|e| FrameError::Invalid {
                id,
                message: format!("error: {e}"),
            })?;
        return Ok(Some(WorkerText::Failed { id, failure }));
    }
    Err(FrameError::Unexpected(short(text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_extension_frames_round_trip() {
        let done = TaskDone {
            finish_reason: FinishReason::Length,
            usage: Usage::new(12, 5),
            queued_ms: 1.0,
            prefill_ms: 2.5,
            stop_sequence: Some("END".into()),
            cached_tokens: 11,
        };
        assert_eq!(
            parse_worker_text(&done_frame(TaskId(9), &done)).unwrap(),
            Some(WorkerText::Done {
                id: TaskId(9),
                done
            })
        );
        let failure = TaskFailure {
            code: "context_length_exceeded".into(),
            message: "too long".into(),
        };
        assert_eq!(
            parse_worker_text(&error_frame(TaskId(9), &failure)).unwrap(),
            Some(WorkerText::Failed {
                id: TaskId(9),
                failure
            })
        );
        assert_eq!(
            parse_worker_text(&tokens_frame(TaskId(9), 3)).unwrap(),
            Some(WorkerText::Tokens {
                id: TaskId(9),
                count: 3
            })
        );
        for bad in [
            r#"{"id":9,"tokens":-1}"#,
            r#"{"id":9,"tokens":"3"}"#,
            r#"{"id":9,"tokens":1.5}"#,
        ] {
            assert!(
                matches!(parse_worker_text(bad), Err(FrameError::Invalid { .. })),
                "{bad}"
            );
        }
        assert_eq!(parse_worker_text(""), Ok(None));
        assert!(matches!(
            parse_worker_text(r#"{"id":1}"#),
            Err(FrameError::Unexpected(_))
        ));
    }
}
