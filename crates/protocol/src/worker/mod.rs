//! The worker protocol between a hub (the document's "API server") and a worker node
//! (`protocols/worker-node.md`, with the behaviour of the real implementations from
//! `protocols/NOTES.md`).
//!
//! A worker opens a WebSocket to the hub with `token`, `model`, `max_concurrency` and `name` in
//! the query. The hub sends tasks and stops as JSON text frames; the worker answers with binary
//! frames: a 4-byte big-endian task id, then UTF-8 text. A frame of exactly 4 bytes ends the
//! task. Workers send an empty text frame every [`KEEPALIVE_INTERVAL_SECS`] seconds.
//!
//! ## Decisions where the document is silent
//! - **Ids** are unsigned 32-bit on the wire (what the reference server reads). A task whose
//!   `id` is not an integer in `0..=4294967295` is refused with [`FrameError::IdOutOfRange`] /
//!   [`FrameError::IdNotInteger`]: it could never be answered. A hub hands out ids below 2^31.
//! - **Messages** are `{"role","content"}` objects or bare strings; bare strings alternate
//!   user/assistant by their position in the list, starting with user. `content` may also be
//!   `null` (empty) or an array of text parts (`"text"` fields, or strings), joined.
//! - **`state`** missing counts as pending (0); any other integer is kept so the worker can log
//!   that the task is not pending. Unknown fields (`resp`, `modLastCheckedPos`, `user`, ...) are
//!   ignored.
//! - **Stop**: `{"id":N,"stop":true}` cancels task N.
//! - **Text**: every data frame holds whole characters ([`split_utf8`]); a receiver still
//!   decodes tolerantly ([`crate::utf8::Utf8Stream`]) in case another implementation splits one.
//!
//! ## Hearth's optional extension (only between Hearth hubs and Hearth workers)
//! The document's frames carry no finish reason, token counts or sampling parameters beyond
//! temperature. When both ends are Hearth they add, without changing any documented frame:
//! - the worker adds `hearth=1` to its query ([`HEARTH_QUERY_PARAM`]), and `vision=1`
//!   ([`VISION_QUERY_PARAM`]) when its model reads images; a reference server ignores unknown
//!   query parameters;
//! - the hub answers the upgrade with the header [`HEARTH_HUB_HEADER`]; only then does the
//!   worker send, after its data frames, `{"id":N,"tokens":K}` (the tokens their text carries:
//!   a hub that loses the worker mid-answer knows the real count of what it has), and before a
//!   task's end frame one text frame `{"id":N,"done":{...}}` ([`TaskDone`]) or
//!   `{"id":N,"error":{...}}` ([`TaskFailure`]);
//! - a task may carry a `"hearth"` object ([`HearthTask`]) with the other sampling parameters,
//!   a raw text prompt, or text already generated to continue from. Reference workers ignore it,
//!   so a hub sends tasks that need it only to Hearth workers.

mod binary;
mod hub_text;
mod worker_text;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use binary::{decode_binary, encode_data, encode_end, split_utf8, DataFrame, Utf8Pieces};
pub use hub_text::{parse_hub_text, stop_frame, HearthTask, HubFrame, HubMessage, Task};
pub use worker_text::{
    done_frame, error_frame, parse_worker_text, tokens_frame, TaskDone, TaskFailure, WorkerText,
    CONTEXT_LENGTH_EXCEEDED, INVALID_TASK, WORKER_STOPPING,
};

/// Bytes of the big-endian task id at the start of every binary frame.
pub const ID_LEN: usize = 4;

/// `state` of a task the worker should run.
pub const STATE_PENDING: i64 = 0;

/// Workers send an empty text frame this often (what the reference nodes do).
pub const KEEPALIVE_INTERVAL_SECS: u64 = 10;

/// Most text bytes a worker puts in one binary frame. Tokens are a few bytes each; the bound
/// only matters when a burst of ready tokens is coalesced, and keeps every frame far below any
/// receiver's message limit.
pub const MAX_FRAME_TEXT_BYTES: usize = 64 * 1024;

/// Ids a hub hands out stay below 2^31 (NOTES.md: the reference server's ids do), so that
/// receivers that read the id as a signed 32-bit integer (the document says Int32BE) agree.
pub const MAX_HUB_TASK_ID: u32 = i32::MAX as u32;

/// Close codes the hub uses (NOTES.md).
pub const CLOSE_NORMAL: u16 = 4000;
/// A query parameter (`token`, `model`, `max_concurrency`, `name`) is missing or unusable.
pub const CLOSE_MISSING_PARAMETER: u16 = 4001;
/// The token is wrong.
pub const CLOSE_BAD_TOKEN: u16 = 4002;
/// A newer connection with the same model and name replaced this one.
pub const CLOSE_SUPERSEDED: u16 = 4003;

/// Query parameter a Hearth worker adds so a Hearth hub knows it understands [`HearthTask`].
pub const HEARTH_QUERY_PARAM: &str = "hearth";
/// Query parameter a Hearth worker adds (`vision=1`) when its model's projector reads images:
/// a Hearth hub then sends it images before any worker that does not say so.
pub const VISION_QUERY_PARAM: &str = "vision";
/// Response header of a Hearth hub's upgrade; a worker that sees it sends `done` / `error`
/// text frames before each end frame.
pub const HEARTH_HUB_HEADER: &str = "x-hearth-hub";

/// A task id: an unsigned 32-bit integer on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub u32);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl TaskId {
    /// The id of a JSON value: an integer that fits in 32 bits unsigned.
    pub fn from_json(v: &Value) -> Result<Self, FrameError> {
        match v {
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    u32::try_from(u)
                        .map(TaskId)
                        .map_err(|_| FrameError::IdOutOfRange(n.to_string()))
                } else if n.as_i64().is_some() {
                    // Negative.
                    Err(FrameError::IdOutOfRange(n.to_string()))
                } else {
                    Err(FrameError::IdNotInteger(n.to_string()))
                }
            }
            other => Err(FrameError::IdNotInteger(short(&other.to_string()))),
        }
    }
}

/// Why a frame was not understood. Each message says what was wrong in words a log reader
/// can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("expected a JSON object, got {0}")]
    NotObject(String),
    #[error("the message has no id")]
    MissingId,
    #[error("task id {0} does not fit in 32 bits (0 to 4294967295); the task is refused")]
    IdOutOfRange(String),
    #[error("task id must be an integer, got {0}; the task is refused")]
    IdNotInteger(String),
    #[error("task {id}: {message}")]
    Invalid { id: TaskId, message: String },
    #[error("a binary frame needs at least 4 bytes (the task id), got {0}")]
    ShortFrame(usize),
    #[error("unexpected text message: {0}")]
    Unexpected(String),
}

impl FrameError {
    /// The task this error is about, when its id could be read.
    pub fn task(&self) -> Option<TaskId> {
        match self {
            Self::Invalid { id, .. } => Some(*id),
            _ => None,
        }
    }
}

/// At most 80 characters of a value, for error messages about untrusted input.
fn short(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

/// A text frame's JSON object, or why it is not one.
fn parse_object(text: &str) -> Result<Map<String, Value>, FrameError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(FrameError::NotObject(short(&other.to_string()))),
        Err(e) => Err(FrameError::Json(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_decodes_to_what_its_bytes_say_or_to_an_error() {
        // A small deterministic generator beside the fuzz target: every prefix of noisy input.
        let mut x: u32 = 0x1234_5678;
        let mut bytes = Vec::new();
        for _ in 0..512 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            bytes.push((x & 0xff) as u8);
        }
        for n in 0..bytes.len() {
            let frame = &bytes[..n];
            match decode_binary(frame) {
                Ok(d) => {
                    let id = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                    assert_eq!((d.id, d.payload), (TaskId(id), &frame[4..]));
                }
                Err(FrameError::ShortFrame(len)) => assert!(n < 4 && len == n),
                Err(e) => panic!("{n} bytes: {e}"),
            }
            let s = String::from_utf8_lossy(frame);
            // Noise is never a task or a worker's frame: the one exception is empty text,
            // the keepalive.
            match parse_hub_text(&s) {
                Ok(None) => assert!(s.trim().is_empty(), "{s:?}"),
                Ok(Some(m)) => panic!("noise parsed as {m:?}"),
                Err(_) => {}
            }
            match parse_worker_text(&s) {
                Ok(None) => assert!(s.trim().is_empty(), "{s:?}"),
                Ok(Some(m)) => panic!("noise parsed as {m:?}"),
                Err(_) => {}
            }
        }
    }
}
