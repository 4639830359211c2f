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
//! - the worker adds `hearth=1` to its query ([`HEARTH_QUERY_PARAM`]); a reference server
//!   ignores unknown query parameters;
//! - the hub answers the upgrade with the header [`HEARTH_HUB_HEADER`]; only then does the
//!   worker send, before a task's end frame, one text frame `{"id":N,"done":{...}}`
//!   ([`TaskDone`]) or `{"id":N,"error":{...}}` ([`TaskFailure`]);
//! - a task may carry a `"hearth"` object ([`HearthTask`]) with the other sampling parameters,
//!   a raw text prompt, or text already generated to continue from. Reference workers ignore it,
//!   so a hub sends tasks that need it only to Hearth workers.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::generation::{ChatMessage, FinishReason, Usage};

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

/// A task as the hub sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: TaskId,
    /// [`STATE_PENDING`] for a task to run.
    pub state: i64,
    pub system: Option<String>,
    /// The conversation after `system`, roles resolved.
    pub messages: Vec<ChatMessage>,
    /// Wire value; the worker validates it (and caps it at its context).
    pub max_new_tokens: Option<i64>,
    pub temperature: Option<f64>,
    /// Seconds since the Unix epoch (informational).
    pub created_at: Option<f64>,
    pub hearth: Option<HearthTask>,
}

impl Task {
    pub fn is_pending(&self) -> bool {
        self.state == STATE_PENDING
    }

    /// `system` (when not empty) followed by the messages, as a chat template takes them.
    pub fn conversation(&self) -> Vec<ChatMessage> {
        let mut out = Vec::with_capacity(self.messages.len() + 1);
        if let Some(s) = self.system.as_deref().filter(|s| !s.is_empty()) {
            out.push(ChatMessage::new("system", s));
        }
        out.extend(self.messages.iter().cloned());
        out
    }

    /// The task's text frame. Messages are sent as `{"role","content"}` objects (what the
    /// reference server sends); `hearth` only when set.
    pub fn to_json(&self) -> String {
        let mut m = Map::new();
        m.insert("state".into(), Value::from(self.state));
        m.insert("id".into(), Value::from(self.id.0));
        m.insert(
            "system".into(),
            Value::from(self.system.clone().unwrap_or_default()),
        );
        m.insert(
            "messages".into(),
            Value::Array(
                self.messages
                    .iter()
                    .map(|c| {
                        let mut o = Map::new();
                        o.insert("role".into(), Value::from(c.role.clone()));
                        o.insert("content".into(), Value::from(c.content.clone()));
                        Value::Object(o)
                    })
                    .collect(),
            ),
        );
        if let Some(n) = self.max_new_tokens {
            m.insert("max_new_tokens".into(), Value::from(n));
        }
        if let Some(t) = self.temperature {
            m.insert("temperature".into(), Value::from(t));
        }
        if let Some(c) = self.created_at {
            m.insert("created_at".into(), Value::from(c));
        }
        if let Some(h) = &self.hearth {
            if let Ok(v) = serde_json::to_value(h) {
                m.insert("hearth".into(), v);
            }
        }
        Value::Object(m).to_string()
    }
}

/// Hearth's optional task extension (see the module docs). Wire types are the widest ones so
/// that the worker's validation, not the JSON parser, reports bad values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HearthTask {
    /// A raw text prompt, used as is instead of rendering `system` + `messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Text already delivered to the client by another worker that was lost: the worker
    /// generates what follows it (the prompt, then this text, then new tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
}

/// A text frame from the hub.
#[derive(Debug, Clone, PartialEq)]
pub enum HubMessage {
    Task(Box<Task>),
    /// `{"id":N,"stop":true}`.
    Stop {
        id: TaskId,
    },
}

/// The stop frame for a task.
pub fn stop_frame(id: TaskId) -> String {
    format!(r#"{{"id":{},"stop":true}}"#, id.0)
}

/// A text frame from the hub to a worker.
#[derive(Debug, Clone, PartialEq)]
pub enum HubFrame {
    /// A new task.
    Task(Box<Task>),
    /// `{"id":N,"stop":true}`: cancel task N.
    Stop(TaskId),
}

impl HubFrame {
    /// The frame's text.
    pub fn to_text(&self) -> String {
        match self {
            HubFrame::Task(t) => t.to_json(),
            HubFrame::Stop(id) => stop_frame(*id),
        }
    }
}

fn parse_object(text: &str) -> Result<Map<String, Value>, FrameError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(FrameError::NotObject(short(&other.to_string()))),
        Err(e) => Err(FrameError::Json(e.to_string())),
    }
}

/// Parse a text frame from the hub. `Ok(None)` for an empty (keepalive) frame.
pub fn parse_hub_text(text: &str) -> Result<Option<HubMessage>, FrameError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let m = parse_object(text)?;
    let id = TaskId::from_json(m.get("id").ok_or(FrameError::MissingId)?)?;
    if m.get("stop") == Some(&Value::Bool(true)) {
        return Ok(Some(HubMessage::Stop { id }));
    }
    let invalid = |message: String| FrameError::Invalid { id, message };
    let state = match m.get("state") {
        None | Some(Value::Null) => STATE_PENDING,
        Some(v) => v.as_i64().ok_or_else(|| {
            invalid(format!(
                "state must be an integer, got {}",
                short(&v.to_string())
            ))
        })?,
    };
    let system = match m.get("system") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(invalid(format!(
                "system must be a string, got {}",
                short(&v.to_string())
            )))
        }
    };
    let messages = match m.get("messages") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| message(i, v))
            .collect::<Result<Vec<_>, String>>()
            .map_err(invalid)?,
        Some(v) => {
            return Err(invalid(format!(
                "messages must be a list, got {}",
                short(&v.to_string())
            )))
        }
    };
    let max_new_tokens = match m.get("max_new_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| {
            invalid(format!(
                "max_new_tokens must be an integer, got {}",
                short(&v.to_string())
            ))
        })?),
    };
    let temperature = number(m.get("temperature"), "temperature").map_err(invalid)?;
    let created_at = number(m.get("created_at"), "created_at").map_err(invalid)?;
    let hearth = match m.get("hearth") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value::<HearthTask>(v.clone())
                .map_err(|e| invalid(format!("hearth: {e}")))?,
        ),
    };
    Ok(Some(HubMessage::Task(Box::new(Task {
        id,
        state,
        system,
        messages,
        max_new_tokens,
        temperature,
        created_at,
        hearth,
    }))))
}

fn number(v: Option<&Value>, name: &str) -> Result<Option<f64>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("{name} must be a number, got {}", short(&v.to_string()))),
    }
}

/// One entry of `messages`: a bare string (role by position) or a `{"role","content"}` object.
fn message(index: usize, v: &Value) -> Result<ChatMessage, String> {
    match v {
        Value::String(s) => {
            let role = if index.is_multiple_of(2) {
                "user"
            } else {
                "assistant"
            };
            Ok(ChatMessage::new(role, s.clone()))
        }
        Value::Object(o) => {
            let role = match o.get("role") {
                Some(Value::String(r)) if !r.is_empty() => r.clone(),
                _ => return Err(format!("messages[{index}] needs a role")),
            };
            let content = match o.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match p {
                            Value::String(s) => text.push_str(s),
                            Value::Object(po) => {
                                if let Some(Value::String(s)) = po.get("text") {
                                    text.push_str(s);
                                }
                            }
                            _ => {
                                return Err(format!(
                                    "messages[{index}].content parts must be strings or objects"
                                ))
                            }
                        }
                    }
                    text
                }
                Some(other) => {
                    return Err(format!(
                        "messages[{index}].content must be a string, got {}",
                        short(&other.to_string())
                    ))
                }
            };
            Ok(ChatMessage { role, content })
        }
        other => Err(format!(
            "messages[{index}] must be a string or an object, got {}",
            short(&other.to_string())
        )),
    }
}

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
}

/// Why a task failed, as a Hearth worker reports it to a Hearth hub (extension). `code` is
/// one of `invalid_task`, `context_length_exceeded`, `model_loading`, `queue_full`,
/// `unavailable`, `internal_error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailure {
    pub code: String,
    pub message: String,
}

/// Hearth's failure code for a task cut short because its worker is stopping (shutdown,
/// quit, a model change): a Hearth hub places the task again from the text it already has,
/// as for a worker it lost; other hubs only see the task's end frame.
pub const WORKER_STOPPING: &str = "worker_stopping";

/// A text frame from a worker.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerText {
    Done { id: TaskId, done: TaskDone },
    Failed { id: TaskId, failure: TaskFailure },
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

/// A data frame: the task id and text (possibly empty only for the end frame).
pub fn encode_data(id: TaskId, text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(ID_LEN + text.len());
    out.extend_from_slice(&id.0.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// The frame that ends a task: the id alone.
pub fn encode_end(id: TaskId) -> Vec<u8> {
    id.0.to_be_bytes().to_vec()
}

/// A binary frame from a worker, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFrame<'a> {
    pub id: TaskId,
    /// UTF-8 text; empty for the end frame.
    pub payload: &'a [u8],
}

impl DataFrame<'_> {
    /// Whether this frame ends its task.
    pub fn is_end(&self) -> bool {
        self.payload.is_empty()
    }
}

/// Split a binary frame into its id and payload.
pub fn decode_binary(frame: &[u8]) -> Result<DataFrame<'_>, FrameError> {
    if frame.len() < ID_LEN {
        return Err(FrameError::ShortFrame(frame.len()));
    }
    let (id, payload) = frame.split_at(ID_LEN);
    let id = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
    Ok(DataFrame {
        id: TaskId(id),
        payload,
    })
}

/// Pieces of `text` of at most `max` bytes each (at least 4, the longest character), never
/// splitting a character. An empty text yields nothing.
pub fn split_utf8(text: &str, max: usize) -> Utf8Pieces<'_> {
    Utf8Pieces {
        rest: text,
        max: max.max(4),
    }
}

/// Iterator returned by [`split_utf8`].
#[derive(Debug, Clone)]
pub struct Utf8Pieces<'a> {
    rest: &'a str,
    max: usize,
}

impl<'a> Iterator for Utf8Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let mut end = self.rest.len().min(self.max);
        while !self.rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(text: &str) -> Task {
        match parse_hub_text(text).unwrap().unwrap() {
            HubMessage::Task(t) => *t,
            other => panic!("not a task: {other:?}"),
        }
    }

    #[test]
    fn parses_the_documents_example() {
        let t = task(
            r#"{"state": 0, "id": 123, "system": "system_message", "messages": ["message1", "message2"], "max_new_tokens": 100, "temperature": 0.5, "created_at": 1633028302}"#,
        );
        assert_eq!(t.id, TaskId(123));
        assert!(t.is_pending());
        assert_eq!(t.system.as_deref(), Some("system_message"));
        assert_eq!(
            t.messages,
            vec![
                ChatMessage::new("user", "message1"),
                ChatMessage::new("assistant", "message2")
            ]
        );
        assert_eq!(t.max_new_tokens, Some(100));
        assert_eq!(t.temperature, Some(0.5));
        assert_eq!(t.created_at, Some(1_633_028_302.0));
        assert_eq!(
            t.conversation(),
            vec![
                ChatMessage::new("system", "system_message"),
                ChatMessage::new("user", "message1"),
                ChatMessage::new("assistant", "message2")
            ]
        );
    }

    #[test]
    fn bare_strings_alternate_starting_with_user() {
        let t = task(r#"{"id":1,"messages":["a","b","c"]}"#);
        let roles: Vec<_> = t.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert!(t.is_pending(), "a missing state counts as pending");
        assert!(t.conversation().iter().all(|m| m.role != "system"));
    }

    #[test]
    fn object_messages_and_unknown_fields() {
        let t = task(
            r#"{"state":0,"id":5,"system":"","resp":"","modLastCheckedPos":0,"user":{"id":9},
               "messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null},
                           {"role":"user","content":[{"type":"text","text":"a"},"b"]}],
               "max_new_tokens":10,"temperature":0,"created_at":1.5}"#,
        );
        assert_eq!(t.messages[0], ChatMessage::new("user", "hi"));
        assert_eq!(t.messages[1], ChatMessage::new("assistant", ""));
        assert_eq!(t.messages[2], ChatMessage::new("user", "ab"));
        assert_eq!(t.conversation().len(), 3, "an empty system is left out");
    }

    #[test]
    fn state_other_than_pending_is_kept() {
        let t = task(r#"{"id":5,"state":2,"messages":["x"]}"#);
        assert!(!t.is_pending());
        assert_eq!(t.state, 2);
    }

    #[test]
    fn stop_frame_round_trips() {
        assert_eq!(stop_frame(TaskId(7)), r#"{"id":7,"stop":true}"#);
        assert_eq!(
            parse_hub_text(&stop_frame(TaskId(u32::MAX))).unwrap(),
            Some(HubMessage::Stop {
                id: TaskId(u32::MAX)
            })
        );
    }

    #[test]
    fn ids_must_fit_in_32_bits() {
        for ok in [0u64, 1, (1 << 31) - 1, 1 << 31, u64::from(u32::MAX)] {
            let t = task(&format!(r#"{{"id":{ok},"messages":["x"]}}"#));
            assert_eq!(u64::from(t.id.0), ok);
        }
        let big = parse_hub_text(r#"{"id":4294967296,"messages":["x"]}"#).unwrap_err();
        assert_eq!(big, FrameError::IdOutOfRange("4294967296".into()));
        assert!(big.to_string().contains("4294967296"), "{big}");
        assert!(matches!(
            parse_hub_text(r#"{"id":-1,"messages":["x"]}"#),
            Err(FrameError::IdOutOfRange(_))
        ));
        assert!(matches!(
            parse_hub_text(r#"{"id":18446744073709551616,"messages":["x"]}"#),
            Err(FrameError::IdNotInteger(_) | FrameError::IdOutOfRange(_))
        ));
        assert!(matches!(
            parse_hub_text(r#"{"id":1.5,"messages":["x"]}"#),
            Err(FrameError::IdNotInteger(_))
        ));
        assert!(matches!(
            parse_hub_text(r#"{"id":"12","messages":["x"]}"#),
            Err(FrameError::IdNotInteger(_))
        ));
        assert_eq!(
            parse_hub_text(r#"{"messages":["x"]}"#),
            Err(FrameError::MissingId)
        );
        assert!(matches!(
            parse_hub_text(r#"{"id":4294967296,"stop":true}"#),
            Err(FrameError::IdOutOfRange(_))
        ));
    }

    #[test]
    fn bad_fields_name_the_task() {
        for bad in [
            r#"{"id":3,"messages":"hi"}"#,
            r#"{"id":3,"messages":[1]}"#,
            r#"{"id":3,"messages":[{"content":"no role"}]}"#,
            r#"{"id":3,"state":"0"}"#,
            r#"{"id":3,"max_new_tokens":"ten"}"#,
            r#"{"id":3,"temperature":"hot"}"#,
            r#"{"id":3,"system":5}"#,
            r#"{"id":3,"hearth":{"top_k":"x"}}"#,
        ] {
            let e = parse_hub_text(bad).unwrap_err();
            assert_eq!(e.task(), Some(TaskId(3)), "{bad}: {e}");
        }
        assert!(matches!(parse_hub_text("nope"), Err(FrameError::Json(_))));
        assert!(matches!(
            parse_hub_text("[1]"),
            Err(FrameError::NotObject(_))
        ));
        assert_eq!(parse_hub_text(""), Ok(None));
        assert_eq!(parse_hub_text("  "), Ok(None));
    }

    #[test]
    fn task_json_round_trips_with_the_extension() {
        let t = Task {
            id: TaskId(42),
            state: 0,
            system: Some("be brief".into()),
            messages: vec![ChatMessage::new("user", "hi \"there\"")],
            max_new_tokens: Some(16),
            temperature: Some(0.0),
            created_at: Some(1_700_000_000.0),
            hearth: Some(HearthTask {
                continue_from: Some("Hel".into()),
                seed: Some(3),
                stop: Some(vec!["\n".into()]),
                ..HearthTask::default()
            }),
        };
        assert_eq!(task(&t.to_json()), t);
        let plain = Task { hearth: None, ..t };
        let v: Value = serde_json::from_str(&plain.to_json()).unwrap();
        assert!(v.get("hearth").is_none());
        assert_eq!(v["messages"][0]["role"], "user");
    }

    #[test]
    fn binary_frames_round_trip() {
        let f = encode_data(TaskId(0x0102_0304), "héllo");
        assert_eq!(&f[..4], &[1, 2, 3, 4]);
        let d = decode_binary(&f).unwrap();
        assert_eq!(d.id, TaskId(0x0102_0304));
        assert_eq!(d.payload, "héllo".as_bytes());
        assert!(!d.is_end());
        let end = encode_end(TaskId(u32::MAX));
        assert_eq!(end, vec![0xff; 4]);
        let d = decode_binary(&end).unwrap();
        assert!(d.is_end());
        assert_eq!(d.id, TaskId(u32::MAX));
        assert_eq!(decode_binary(&[1, 2]), Err(FrameError::ShortFrame(2)));
        assert_eq!(decode_binary(&[]), Err(FrameError::ShortFrame(0)));
    }

    #[test]
    fn split_never_cuts_a_character() {
        let text = "aé€😀b€é😀😀x";
        for max in 0..=text.len() + 1 {
            let pieces: Vec<&str> = split_utf8(text, max).collect();
            assert_eq!(pieces.concat(), text, "max {max}");
            for p in &pieces {
                assert!(!p.is_empty());
                assert!(p.len() <= max.max(4), "max {max}: {p:?}");
                // Each piece is a &str, so each is valid UTF-8 on its own; check the frame too.
                let frame = encode_data(TaskId(1), p);
                assert!(std::str::from_utf8(decode_binary(&frame).unwrap().payload).is_ok());
            }
        }
        assert_eq!(split_utf8("", 10).count(), 0);
    }

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

    #[test]
    fn worker_extension_frames_round_trip() {
        let done = TaskDone {
            finish_reason: FinishReason::Length,
            usage: Usage::new(12, 5),
            queued_ms: 1.0,
            prefill_ms: 2.5,
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
        assert_eq!(parse_worker_text(""), Ok(None));
        assert!(matches!(
            parse_worker_text(r#"{"id":1}"#),
            Err(FrameError::Unexpected(_))
        ));
    }
}
