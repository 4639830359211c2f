//! Hub -> worker text frames: a [`Task`] (with Hearth's optional [`HearthTask`] extension)
//! or a stop, how a hub writes them ([`Task::to_json`], [`stop_frame`]) and how a worker reads
//! them ([`parse_hub_text`]), tolerant of fields and message shapes the document leaves open.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{parse_object, short, FrameError, TaskId, STATE_PENDING};
use crate::generation::ChatMessage;

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
                    // Role and content, plus the tool fields when a turn has them.
                    .filter_map(|c| serde_json::to_value(c).ok())
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

/// Hearth's optional task extension (see the `worker` module docs). Wire types are the widest
/// ones so that the worker's validation, not the JSON parser, reports bad values.
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
    /// A GBNF grammar the answer must follow (a JSON format or schema the client asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
    /// The tools the model may call; the worker renders and constrains them for its model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<crate::tools::ToolSet>,
    /// Whether the model should think first, where its template can turn thinking on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think: Option<bool>,
    /// The request's own speculation setting (`auto`, `none`, `ngram`, `draft`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<String>,
    /// Whose prompt cache the task reads, as the hub names its caller (32 hex digits, a
    /// digest): the worker keys its cache by the hub and this, so that one caller of the hub
    /// never reads another's cached prompts there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_owner: Option<String>,
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
            let tool_calls = match o.get("tool_calls") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| format!("messages[{index}].tool_calls: {e}"))?,
            };
            // Hearth's own task carries images (base64), each within the limits.
            let images: Vec<crate::media::Image> = match o.get("images") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| format!("messages[{index}].images: {e}"))?,
            };
            crate::media::check_count(images.len())
                .map_err(|e| format!("messages[{index}].images: {e}"))?;
            // And audio clips (base64), each within the limits.
            let audio: Vec<crate::audio::Audio> = match o.get("audio") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| format!("messages[{index}].audio: {e}"))?,
            };
            crate::audio::check_count(audio.len())
                .map_err(|e| format!("messages[{index}].audio: {e}"))?;
            let text = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
            Ok(ChatMessage {
                role,
                content,
                tool_calls,
                tool_call_id: text("tool_call_id"),
                name: text("name"),
                images,
                audio,
            })
        }
        other => Err(format!(
            "messages[{index}] must be a string or an object, got {}",
            short(&other.to_string())
        )),
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
                speculative: Some("ngram".into()),
                cache_owner: Some("00ff".repeat(8)),
                ..HearthTask::default()
            }),
        };
        assert_eq!(task(&t.to_json()), t);
        let plain = Task { hearth: None, ..t };
        let v: Value = serde_json::from_str(&plain.to_json()).unwrap();
        assert!(v.get("hearth").is_none());
        assert_eq!(v["messages"][0]["role"], "user");
    }
}
