//! The signed-challenge WebSocket protocol (`protocols/auth-ws.md`, with the reference
//! implementation's forms from NOTES.md "auth-ws"). Client messages here: one text frame is one
//! message or a `batch` of them; [`parse_text`] turns it into typed messages, and anything
//! malformed into a [`MessageError`] carrying the `id` to report it under. What the node sends
//! is typed in [`server`], registration's body and answers in [`register`]. What needs the node
//! (is the client authenticated, is the model loaded, how long is its context) stays with the
//! door.
//!
//! Forms accepted: `stop` names its target by `requestId` (the reference) or `id` (the
//! document); the token limit is `max_tokens` (the document), `maxTokens` (the reference
//! client library) or `num_predict` (Ollama, where a negative value means "until the context
//! is full"); `repeat_penalty` is Ollama's `repetition_penalty`; ids are strings or numbers and
//! are echoed as sent.

pub mod register;
pub mod server;

use serde_json::{Map, Number, Value};

use crate::generation::{ChatMessage, RawParams, StopField};

/// Longest `id`, `requestId` or `clientId` accepted.
pub const MAX_ID_BYTES: usize = 256;
/// Longest `signature` accepted (base64 of an RSA-4096 signature is 684 bytes).
pub const MAX_SIGNATURE_BYTES: usize = 4096;
/// Messages one `batch` may carry.
pub const MAX_BATCH_MESSAGES: usize = 64;

/// An id as the client sent it: echoed in every reply about it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WireId {
    Text(String),
    Number(Number),
}

impl WireId {
    /// The JSON value to echo.
    pub fn to_json(&self) -> Value {
        match self {
            WireId::Text(s) => Value::String(s.clone()),
            WireId::Number(n) => Value::Number(n.clone()),
        }
    }

    /// The id as text (the key of a running generation).
    pub fn key(&self) -> String {
        match self {
            WireId::Text(s) => s.clone(),
            WireId::Number(n) => n.to_string(),
        }
    }

    /// Whatever the client put in `field`, if it can be echoed (for errors about a message
    /// whose id was itself the problem, nothing is echoed).
    fn echo(obj: &Map<String, Value>, field: &str) -> Option<Self> {
        match obj.get(field) {
            Some(Value::String(s)) if s.len() <= MAX_ID_BYTES => Some(WireId::Text(s.clone())),
            Some(Value::Number(n)) => Some(WireId::Number(n.clone())),
            _ => None,
        }
    }
}

/// A message the door cannot act on: reported as an `invalid_request` error about `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageError {
    pub message: String,
    pub id: Option<WireId>,
}

impl MessageError {
    fn new(message: impl Into<String>, id: Option<WireId>) -> Self {
        Self {
            message: message.into(),
            id,
        }
    }
}

/// One text frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    One(ClientMessage),
    /// `batch`: its messages in order, each parsed on its own (or why the batch itself is bad).
    Batch(Result<Vec<Result<ClientMessage, MessageError>>, MessageError>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClientMessage {
    /// `clientId` and `signature`, or why they cannot be checked (the attempt still counts).
    Authenticate(Result<Credentials, String>),
    Generate(Box<Generate>),
    Stop {
        /// The generation to stop (`requestId`, else `id`).
        target: WireId,
        /// This message's own `id`, echoed in the acknowledgement.
        id: Option<WireId>,
    },
    Models {
        id: Option<WireId>,
    },
    Ping {
        id: Option<WireId>,
    },
}

impl ClientMessage {
    /// What the message is called on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientMessage::Authenticate(_) => "authenticate",
            ClientMessage::Generate(_) => "generate",
            ClientMessage::Stop { .. } => "stop",
            ClientMessage::Models { .. } => "models",
            ClientMessage::Ping { .. } => "ping",
        }
    }

    /// The id to report errors about this message under.
    pub fn id(&self) -> Option<&WireId> {
        match self {
            ClientMessage::Authenticate(_) => None,
            ClientMessage::Generate(g) => g.id.as_ref(),
            ClientMessage::Stop { target, .. } => Some(target),
            ClientMessage::Models { id } | ClientMessage::Ping { id } => id.as_ref(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub client_id: String,
    pub signature: String,
}

/// `generate`, structurally valid; its options are checked against the model's context by
/// [`GenerateOptions::raw`]'s caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Generate {
    /// None: the door makes one.
    pub id: Option<WireId>,
    pub prompt: GeneratePrompt,
    /// The model asked for (None or empty: the served one).
    pub model: Option<String>,
    pub options: GenerateOptions,
}

#[derive(Debug, Clone, PartialEq)]
pub enum GeneratePrompt {
    /// Rendered with the model's chat template (`messages`, or `prompt` as one user turn, with
    /// `system` first when given).
    Chat(Vec<ChatMessage>),
    /// `raw: true`: the prompt as is.
    Raw(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerateOptions {
    pub raw: RawParams,
    /// Ollama's negative `num_predict`: no token limit but the context.
    pub unlimited: bool,
}

/// Parse one text frame.
pub fn parse_text(text: &str) -> Result<Frame, MessageError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| MessageError::new(format!("invalid JSON: {e}"), None))?;
    if value.get("type").and_then(Value::as_str) == Some("batch") {
        return Ok(Frame::Batch(parse_batch(&value)));
    }
    parse_message(&value).map(Frame::One)
}

fn parse_batch(value: &Value) -> Result<Vec<Result<ClientMessage, MessageError>>, MessageError> {
    let Some(Value::Array(items)) = value.get("messages") else {
        return Err(MessageError::new(
            "batch needs messages: an array of messages",
            None,
        ));
    };
    if items.len() > MAX_BATCH_MESSAGES {
        return Err(MessageError::new(
            format!(
                "a batch may carry at most {MAX_BATCH_MESSAGES} messages, got {}",
                items.len()
            ),
            None,
        ));
    }
    Ok(items
        .iter()
        .map(|m| {
            if m.get("type").and_then(Value::as_str) == Some("batch") {
                Err(MessageError::new(
                    "a batch cannot contain another batch",
                    None,
                ))
            } else {
                parse_message(m)
            }
        })
        .collect())
}

fn parse_message(value: &Value) -> Result<ClientMessage, MessageError> {
    let Value::Object(obj) = value else {
        return Err(MessageError::new(
            "each message must be a JSON object with a \"type\"",
            None,
        ));
    };
    let kind = match obj.get("type") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(MessageError::new("type must be a string", None)),
        None => return Err(MessageError::new("the message has no \"type\"", None)),
    };
    let echo = WireId::echo(obj, "id");
    match kind {
        "authenticate" => Ok(ClientMessage::Authenticate(credentials(obj))),
        "ping" => Ok(ClientMessage::Ping { id: echo }),
        "models" => Ok(ClientMessage::Models { id: echo }),
        "stop" => parse_stop(obj, echo),
        "generate" => parse_generate(obj),
        other => {
            let shown: String = other.chars().take(64).collect();
            Err(MessageError::new(
                format!("unknown message type '{shown}' (expected authenticate, generate, stop, models, ping or batch)"),
                echo,
            ))
        }
    }
}

fn credentials(obj: &Map<String, Value>) -> Result<Credentials, String> {
    let client_id = obj.get("clientId").and_then(Value::as_str);
    let signature = obj.get("signature").and_then(Value::as_str);
    let (Some(client_id), Some(signature)) = (client_id, signature) else {
        return Err(
            "Invalid authentication data: authenticate needs clientId and signature strings".into(),
        );
    };
    if client_id.is_empty()
        || client_id.len() > MAX_ID_BYTES
        || signature.len() > MAX_SIGNATURE_BYTES
    {
        return Err(
            "Invalid authentication data: clientId or signature is too long or empty".into(),
        );
    }
    Ok(Credentials {
        client_id: client_id.to_owned(),
        signature: signature.to_owned(),
    })
}

/// A usable id in `field`: a string or a number, not too long.
fn parse_id(obj: &Map<String, Value>, field: &str) -> Result<Option<WireId>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_ID_BYTES => {
            Ok(Some(WireId::Text(s.clone())))
        }
        Some(Value::String(_)) => Err(format!("{field} must be 1 to {MAX_ID_BYTES} bytes")),
        Some(Value::Number(n)) => Ok(Some(WireId::Number(n.clone()))),
        Some(_) => Err(format!("{field} must be a string or a number")),
    }
}

fn parse_stop(
    obj: &Map<String, Value>,
    echo: Option<WireId>,
) -> Result<ClientMessage, MessageError> {
    let target = match parse_id(obj, "requestId") {
        Ok(Some(t)) => t,
        Ok(None) => match parse_id(obj, "id") {
            Ok(Some(t)) => t,
            Ok(None) => {
                return Err(MessageError::new(
                    "stop needs requestId (or id): the generation to stop",
                    None,
                ))
            }
            Err(message) => return Err(MessageError::new(message, None)),
        },
        Err(message) => return Err(MessageError::new(message, echo)),
    };
    Ok(ClientMessage::Stop { target, id: echo })
}

fn parse_generate(obj: &Map<String, Value>) -> Result<ClientMessage, MessageError> {
    let id = parse_id(obj, "id").map_err(|m| MessageError::new(m, None))?;
    let fail = |message: String| MessageError::new(message, id.clone());
    let prompt = parse_prompt(obj).map_err(fail)?;
    let model = match obj.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(fail("model must be a string".into())),
    };
    let options = parse_options(obj.get("options")).map_err(fail)?;
    Ok(ClientMessage::Generate(Box::new(Generate {
        id,
        prompt,
        model,
        options,
    })))
}

fn parse_prompt(obj: &Map<String, Value>) -> Result<GeneratePrompt, String> {
    let system = match obj.get("system") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("system must be a string".into()),
    };
    let raw = match obj.get("raw") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("raw must be true or false".into()),
    };
    let mut chat = Vec::new();
    if let Some(s) = system {
        chat.push(ChatMessage::new("system", s));
    }
    if let Some(messages) = obj.get("messages").filter(|v| !v.is_null()) {
        let Value::Array(items) = messages else {
            return Err("messages must be an array of {role, content} objects".into());
        };
        if items.is_empty() {
            return Err("messages must not be empty".into());
        }
        for (i, m) in items.iter().enumerate() {
            let (Some(role), Some(content)) = (
                m.get("role").and_then(Value::as_str),
                m.get("content").and_then(Value::as_str),
            ) else {
                return Err(format!(
                    "messages[{i}] must be an object with string role and content"
                ));
            };
            if !matches!(role, "system" | "user" | "assistant") {
                let shown: String = role.chars().take(32).collect();
                return Err(format!(
                    "messages[{i}].role must be system, user or assistant, got {shown}"
                ));
            }
            chat.push(ChatMessage::new(role, content));
        }
        return Ok(GeneratePrompt::Chat(chat));
    }
    let prompt = match obj.get("prompt") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err("prompt must not be empty".into()),
        None | Some(Value::Null) => return Err("generate needs a prompt (a string)".into()),
        Some(_) => return Err("prompt must be a string".into()),
    };
    if raw {
        return Ok(GeneratePrompt::Raw(prompt));
    }
    chat.push(ChatMessage::new("user", prompt));
    Ok(GeneratePrompt::Chat(chat))
}

fn opt_number(o: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("options.{key} must be a number")),
        Some(_) => Err(format!("options.{key} must be a number")),
    }
}

fn opt_integer(o: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                Ok(Some(i))
            } else if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15) {
                Ok(Some(f as i64))
            } else {
                Err(format!("options.{key} must be an integer, got {n}"))
            }
        }
        Some(_) => Err(format!("options.{key} must be an integer")),
    }
}

fn parse_options(options: Option<&Value>) -> Result<GenerateOptions, String> {
    let o = match options {
        None | Some(Value::Null) => return Ok(GenerateOptions::default()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err("options must be an object".into()),
    };
    let max_tokens = match opt_integer(o, "max_tokens")? {
        Some(n) => Some(n),
        None => opt_integer(o, "maxTokens")?,
    };
    let num_predict = opt_integer(o, "num_predict")?;
    let stop = match o.get("stop") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(StopField::One(s.clone())),
        Some(Value::Array(items)) => Some(StopField::Many(
            items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or("options.stop must be a string or an array of strings")?,
        )),
        Some(_) => return Err("options.stop must be a string or an array of strings".into()),
    };
    Ok(GenerateOptions {
        raw: RawParams {
            temperature: opt_number(o, "temperature")?,
            top_p: opt_number(o, "top_p")?,
            top_k: opt_integer(o, "top_k")?,
            repetition_penalty: match opt_number(o, "repetition_penalty")? {
                Some(v) => Some(v),
                None => opt_number(o, "repeat_penalty")?,
            },
            seed: opt_integer(o, "seed")?,
            max_tokens: max_tokens.or(num_predict.filter(|n| *n >= 0)),
            stop,
            ..RawParams::default()
        },
        unlimited: max_tokens.is_none() && num_predict.is_some_and(|n| n < 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(v: Value) -> Result<ClientMessage, MessageError> {
        match parse_text(&v.to_string())? {
            Frame::One(m) => Ok(m),
            Frame::Batch(_) => panic!("a batch"),
        }
    }

    #[test]
    fn every_message_type_parses() {
        assert_eq!(
            one(json!({"type": "authenticate", "clientId": "abc", "signature": "c2ln"})),
            Ok(ClientMessage::Authenticate(Ok(Credentials {
                client_id: "abc".into(),
                signature: "c2ln".into()
            })))
        );
        assert_eq!(
            one(json!({"type": "ping", "id": 7})),
            Ok(ClientMessage::Ping {
                id: Some(WireId::Number(7.into()))
            })
        );
        assert_eq!(
            one(json!({"type": "stop", "requestId": "r1", "id": "s1"})),
            Ok(ClientMessage::Stop {
                target: WireId::Text("r1".into()),
                id: Some(WireId::Text("s1".into()))
            })
        );
        // The document's form: the target in `id`.
        assert_eq!(
            one(json!({"type": "stop", "id": "r1"})),
            Ok(ClientMessage::Stop {
                target: WireId::Text("r1".into()),
                id: Some(WireId::Text("r1".into()))
            })
        );
        let Ok(ClientMessage::Generate(g)) = one(json!({"type": "generate", "id": "g",
            "prompt": "Hi", "system": "Be brief", "model": "m",
            "options": {"maxTokens": 12, "temperature": 0.5, "stop": ["\n"], "repeat_penalty": 1.1}}))
        else {
            panic!("not a generate");
        };
        assert_eq!(g.id, Some(WireId::Text("g".into())));
        assert_eq!(
            g.prompt,
            GeneratePrompt::Chat(vec![
                ChatMessage::new("system", "Be brief"),
                ChatMessage::new("user", "Hi")
            ])
        );
        assert_eq!(g.model.as_deref(), Some("m"));
        assert_eq!(g.options.raw.max_tokens, Some(12));
        assert_eq!(g.options.raw.repetition_penalty, Some(1.1));
        assert!(!g.options.unlimited);
    }

    #[test]
    fn the_token_limit_has_three_names() {
        for (options, max, unlimited) in [
            (json!({"max_tokens": 5}), Some(5), false),
            (json!({"maxTokens": 6}), Some(6), false),
            (json!({"num_predict": 7}), Some(7), false),
            (json!({"num_predict": -1}), None, true),
            (json!({"max_tokens": 5, "maxTokens": 6}), Some(5), false),
        ] {
            let Ok(ClientMessage::Generate(g)) =
                one(json!({"type": "generate", "prompt": "x", "options": options}))
            else {
                panic!("{options}");
            };
            assert_eq!(
                (g.options.raw.max_tokens, g.options.unlimited),
                (max, unlimited),
                "{options}"
            );
        }
    }

    #[test]
    fn malformed_messages_name_the_problem_and_the_id() {
        for (v, needle, id) in [
            (json!([1]), "JSON object", None),
            (json!({"id": 1}), "no \"type\"", None),
            (json!({"type": 3}), "type must be a string", None),
            (
                json!({"type": "dance", "id": "d"}),
                "unknown message type 'dance'",
                Some("d"),
            ),
            (
                json!({"type": "generate", "id": "g"}),
                "needs a prompt",
                Some("g"),
            ),
            (
                json!({"type": "generate", "id": {"x": 1}, "prompt": "x"}),
                "id must be",
                None,
            ),
            (
                json!({"type": "generate", "id": "g", "prompt": "x", "options": {"top_k": 1.5}}),
                "options.top_k",
                Some("g"),
            ),
            (
                json!({"type": "generate", "id": "g", "messages": [{"role": "robot", "content": "x"}]}),
                "role must be",
                Some("g"),
            ),
            (json!({"type": "stop"}), "stop needs requestId", None),
        ] {
            let e = one(v.clone()).unwrap_err();
            assert!(e.message.contains(needle), "{v}: {e:?}");
            assert_eq!(e.id.map(|i| i.key()), id.map(str::to_owned), "{v}");
        }
        assert!(matches!(
            one(json!({"type": "authenticate", "clientId": ""})),
            Ok(ClientMessage::Authenticate(Err(_)))
        ));
        assert!(parse_text("{")
            .unwrap_err()
            .message
            .starts_with("invalid JSON"));
    }

    #[test]
    fn batches_parse_each_message_and_refuse_nesting() {
        let Ok(Frame::Batch(Ok(items))) = parse_text(
            &json!({"type": "batch", "messages": [{"type": "ping"}, {"type": "batch", "messages": []}, 5]})
                .to_string(),
        ) else {
            panic!("not a batch");
        };
        assert_eq!(items.len(), 3);
        assert!(matches!(items[0], Ok(ClientMessage::Ping { id: None })));
        assert!(items[1]
            .as_ref()
            .unwrap_err()
            .message
            .contains("another batch"));
        assert!(items[2].is_err());
        let too_many: Vec<Value> = (0..=MAX_BATCH_MESSAGES)
            .map(|_| json!({"type": "ping"}))
            .collect();
        assert!(matches!(
            parse_text(&json!({"type": "batch", "messages": too_many}).to_string()),
            Ok(Frame::Batch(Err(_)))
        ));
    }
}
