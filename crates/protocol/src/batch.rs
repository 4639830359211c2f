//! The batch WebSocket protocol, `/ws` and `/api/ws` (`protocols/batch-ws.md`): one message
//! carries several prompts with client-chosen `request_id`s and one shared `generation_config`;
//! every server message is a JSON array of events for that batch. Field names are exactly the
//! document's. Parsing is two-staged so that one bad entry fails only itself: [`parse_message`]
//! refuses a whole message only when it is not JSON or has no usable `prompts`.
//!
//! Decisions where the document is silent (NOTES.md decides the rest; also in the README):
//! - Events: ACCEPTED (always first: the prompt passed validation), STARTED (handed to the
//!   engine, which queues it for a slot), INITIALIZED (the prompt is prefilled and the first
//!   token sampled), PROGRESS (text released by one token), then COMPLETE, or ERROR ending the
//!   request. Each array holds one event type, in prompt order; prompts that finished are left
//!   out of later arrays. `stream_response: false` sends only ACCEPTED, STARTED and COMPLETE.
//!   A token that releases no text (part of a multi-byte character) sends no PROGRESS.
//! - Invalid entries get their ERROR in an array after the ACCEPTED array of the valid ones.
//!   A bad shared field (`only_new_tokens`, `stream_response`, `generation_config`) fails every
//!   entry with its own ERROR, so each `request_id` always gets an ending.
//! - Whole-message failures are `[{"type":"ERROR","request_id":null,"error":"..."}]`.
//! - `stream_response` and `only_new_tokens` default to true. `null` means the default for
//!   every field. Unknown fields are ignored.
//! - `generation_config`: NOTES.md defaults (overridable in the node's config); `do_sample:
//!   false` is greedy, as is `temperature: 0`; `num_beams` above 1 is refused per request
//!   (beam search is not supported); `length_penalty` is accepted and unused (it only affects
//!   beam search); `max_new_tokens` larger than the model's context is capped at the context.
//!   Hearth extension: `seed`.
//! - `request_id`s are strings, unique within a message; at most [`MAX_BATCH_PROMPTS`] entries.
//! - Continuation (key: the message's request ids in order): a prompt with saved unfinished
//!   state ignores its `prompt` and continues; one that already reached end-of-sequence
//!   completes at once with `new_tokens_count: 0`. With `only_new_tokens: false`, INITIALIZED
//!   and COMPLETE `text` start with the original prompt plus everything generated before.
//!   `new_tokens_count` and `execution_time` count this message's work only.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::generation::{ParamError, RawParams, SamplingParams};

/// Most prompts in one message. The engine queues what it cannot run at once; this bounds
/// what one message can make the node hold (a home node's slots are a handful).
pub const MAX_BATCH_PROMPTS: usize = 256;

/// `generation_config` values used when a message leaves a key out (NOTES.md), overridable
/// in the node's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchDefaults {
    pub num_beams: i64,
    pub do_sample: bool,
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i64,
    /// Capped at the model's context per request.
    pub max_new_tokens: i64,
    pub repetition_penalty: f64,
    pub length_penalty: f64,
}

impl Default for BatchDefaults {
    fn default() -> Self {
        Self {
            num_beams: 1,
            do_sample: true,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 50,
            max_new_tokens: 4096,
            repetition_penalty: 1.0,
            length_penalty: 1.0,
        }
    }
}

impl BatchDefaults {
    /// Whether a message that leaves every key out could run: checked when the defaults are
    /// set, so a bad default fails the node's start, not every later batch.
    pub fn validate(&self) -> Result<(), ParamError> {
        GenerationConfig::default().validate(self, None).map(|_| ())
    }
}

/// A whole client message, for clients that build one (the server parses with
/// [`parse_message`] instead, so one bad entry does not fail the others).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    pub prompts: Vec<PromptEntry>,
    #[serde(flatten)]
    pub options: Options,
}

/// One entry of `prompts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptEntry {
    pub request_id: String,
    /// Required, except when continuing a cached generation (then it is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// The fields a message shares between its prompts. `None` means the default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Options {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_new_tokens: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_response: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_config: Option<GenerationConfig>,
}

impl Options {
    /// Return only generated text (default), or the prompt followed by it.
    pub fn only_new_tokens(&self) -> bool {
        self.only_new_tokens.unwrap_or(true)
    }

    /// Send INITIALIZED and PROGRESS events (default).
    pub fn stream_response(&self) -> bool {
        self.stream_response.unwrap_or(true)
    }

    pub fn generation_config(&self) -> GenerationConfig {
        self.generation_config.clone().unwrap_or_default()
    }
}

/// `generation_config` as sent, with the widest types so that out-of-range values reach
/// validation and get a message naming the field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_beams: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub do_sample: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// Accepted and unused: it only changes how beam search ranks beams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_penalty: Option<f64>,
    /// Hearth extension: a fixed sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

impl GenerationConfig {
    /// Read `generation_config` field by field, so a wrong type names its field.
    fn from_json(value: &Value) -> Result<Self, String> {
        let map = match value {
            Value::Null => return Ok(Self::default()),
            Value::Object(map) => map,
            other => {
                return Err(format!(
                    "generation_config must be an object, got {}",
                    kind(other)
                ))
            }
        };
        let p = "generation_config.";
        Ok(Self {
            num_beams: field(map, "num_beams", p)?,
            do_sample: field(map, "do_sample", p)?,
            temperature: field(map, "temperature", p)?,
            top_p: field(map, "top_p", p)?,
            top_k: field(map, "top_k", p)?,
            max_new_tokens: field(map, "max_new_tokens", p)?,
            repetition_penalty: field(map, "repetition_penalty", p)?,
            length_penalty: field(map, "length_penalty", p)?,
            seed: field(map, "seed", p)?,
        })
    }

    /// Validate on top of `defaults` into the engine's sampling parameters. `max_context`
    /// (the model's context per request, when known) caps `max_new_tokens`; NOTES.md caps
    /// rather than refuses, because clients of the reference send 4096 routinely.
    pub fn validate(
        &self,
        defaults: &BatchDefaults,
        max_context: Option<u32>,
    ) -> Result<SamplingParams, ParamError> {
        let num_beams = self.num_beams.unwrap_or(defaults.num_beams);
        if num_beams < 1 {
            return Err(ParamError::new(
                "num_beams",
                format!("num_beams must be at least 1, got {num_beams}"),
            ));
        }
        if num_beams > 1 {
            return Err(ParamError::new(
                "num_beams",
                format!("beam search is not supported: set num_beams to 1 (got {num_beams})"),
            ));
        }
        let mut max_new_tokens = self.max_new_tokens.unwrap_or(defaults.max_new_tokens);
        if max_new_tokens < 1 {
            return Err(ParamError::new(
                "max_new_tokens",
                format!("max_new_tokens must be at least 1, got {max_new_tokens}"),
            ));
        }
        if let Some(ctx) = max_context {
            max_new_tokens = max_new_tokens.min(i64::from(ctx));
        }
        let raw = RawParams {
            temperature: Some(self.temperature.unwrap_or(defaults.temperature)),
            top_p: Some(self.top_p.unwrap_or(defaults.top_p)),
            top_k: Some(self.top_k.unwrap_or(defaults.top_k)),
            repetition_penalty: Some(
                self.repetition_penalty
                    .unwrap_or(defaults.repetition_penalty),
            ),
            seed: self.seed,
            max_tokens: Some(max_new_tokens),
            ..RawParams::default()
        };
        let mut params = raw
            .validate(&SamplingParams::default(), max_context)
            .map_err(|e| {
                // Name the field as this protocol spells it.
                if e.param == "max_tokens" {
                    ParamError::new(
                        "max_new_tokens",
                        e.message.replace("max_tokens", "max_new_tokens"),
                    )
                } else {
                    e
                }
            })?;
        if !self.do_sample.unwrap_or(defaults.do_sample) {
            params.temperature = 0.0;
        }
        Ok(params)
    }
}

/// An entry of `prompts` that cannot run, with the id to report it under when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    pub request_id: Option<String>,
    pub message: String,
}

/// A message refused as a whole (not JSON, or no usable `prompts`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MessageError(pub String);

/// A parsed message: each entry usable or not, and the shared fields (or why they are bad).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    pub entries: Vec<Result<PromptEntry, EntryError>>,
    pub options: Result<Options, String>,
}

impl BatchRequest {
    /// The continuation-cache key: every entry's request id, in order (a different order is a
    /// different key). `None` when an entry has no usable id.
    pub fn cache_key(&self) -> Option<Vec<String>> {
        self.entries
            .iter()
            .map(|e| match e {
                Ok(entry) => Some(entry.request_id.clone()),
                Err(err) => err.request_id.clone(),
            })
            .collect()
    }
}

/// Parse one text message.
pub fn parse_message(text: &str) -> Result<BatchRequest, MessageError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| MessageError(format!("Invalid JSON received: {e}")))?;
    let mut map = match value {
        Value::Object(map) => map,
        other => {
            return Err(MessageError(format!(
                "the message must be a JSON object with a `prompts` array, got {}",
                kind(&other)
            )))
        }
    };
    let prompts = match map.remove("prompts") {
        None | Some(Value::Null) => {
            return Err(MessageError(
                "missing `prompts`: send an array of {\"request_id\", \"prompt\"} objects".into(),
            ))
        }
        Some(Value::Array(prompts)) => prompts,
        Some(other) => {
            return Err(MessageError(format!(
                "`prompts` must be an array of {{\"request_id\", \"prompt\"}} objects, got {}",
                kind(&other)
            )))
        }
    };
    if prompts.is_empty() {
        return Err(MessageError("`prompts` is empty".into()));
    }
    if prompts.len() > MAX_BATCH_PROMPTS {
        return Err(MessageError(format!(
            "at most {MAX_BATCH_PROMPTS} prompts are allowed per message, got {}",
            prompts.len()
        )));
    }
    let options = parse_options(&map);
    let entries = prompts
        .iter()
        .enumerate()
        .map(|(i, v)| parse_entry(i, v))
        .collect();
    Ok(BatchRequest {
        entries: without_duplicates(entries),
        options,
    })
}

/// A `request_id` given to several prompts names none of them: its first entry becomes one
/// ERROR and the others are dropped, so nothing else is ever sent for that id.
fn without_duplicates(
    entries: Vec<Result<PromptEntry, EntryError>>,
) -> Vec<Result<PromptEntry, EntryError>> {
    let id = |e: &Result<PromptEntry, EntryError>| match e {
        Ok(p) => Some(p.request_id.clone()),
        Err(e) => e.request_id.clone(),
    };
    let mut positions: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        if let Some(id) = id(e) {
            positions.entry(id).or_default().push(i);
        }
    }
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let Some(at) = id(&e).and_then(|id| positions.get(&id).filter(|p| p.len() > 1)) else {
            out.push(e);
            continue;
        };
        if at[0] == i {
            let request_id = id(&e);
            let places: Vec<String> = at.iter().map(|p| format!("prompts[{p}]")).collect();
            out.push(Err(EntryError {
                message: format!(
                    "request_id '{}' is used by {}: request ids must be unique in a message, so none of them runs",
                    request_id.as_deref().unwrap_or_default(),
                    places.join(", ")
                ),
                request_id,
            }));
        }
    }
    out
}

fn parse_options(map: &Map<String, Value>) -> Result<Options, String> {
    Ok(Options {
        only_new_tokens: field(map, "only_new_tokens", "")?,
        stream_response: field(map, "stream_response", "")?,
        generation_config: match map.get("generation_config") {
            None | Some(Value::Null) => None,
            Some(v) => Some(GenerationConfig::from_json(v)?),
        },
    })
}

fn parse_entry(index: usize, value: &Value) -> Result<PromptEntry, EntryError> {
    let Value::Object(map) = value else {
        return Err(EntryError {
            request_id: None,
            message: format!(
                "prompts[{index}] must be an object with `request_id` and `prompt`, got {}",
                kind(value)
            ),
        });
    };
    let request_id = match map.get("request_id") {
        Some(Value::String(id)) => id.clone(),
        None | Some(Value::Null) => {
            return Err(EntryError {
                request_id: None,
                message: format!("prompts[{index}].request_id is required"),
            })
        }
        Some(other) => {
            return Err(EntryError {
                request_id: None,
                message: format!(
                    "prompts[{index}].request_id must be a string, got {}",
                    kind(other)
                ),
            })
        }
    };
    let prompt = match map.get("prompt") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) => Some(p.clone()),
        Some(other) => {
            return Err(EntryError {
                request_id: Some(request_id),
                message: format!(
                    "prompts[{index}].prompt must be a string, got {}",
                    kind(other)
                ),
            })
        }
    };
    Ok(PromptEntry { request_id, prompt })
}

/// One optional field; `null` counts as absent. Errors name the field.
fn field<T: DeserializeOwned>(
    map: &Map<String, Value>,
    name: &str,
    prefix: &str,
) -> Result<Option<T>, String> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(|e| format!("{prefix}{name}: {e}")),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Server -> client: one event of one prompt. Messages are arrays of these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BatchEvent {
    /// Passed validation; queued for execution.
    Accepted { request_id: String },
    /// Picked up: handed to the engine.
    Started { request_id: String },
    /// Prefilled; generating. `text` is empty with `only_new_tokens`, else the prompt.
    Initialized { request_id: String, text: String },
    /// The text one new token released.
    Progress { request_id: String, text: String },
    /// The summary at the end.
    Complete {
        request_id: String,
        /// Generated text, after the prompt unless `only_new_tokens`.
        text: String,
        /// Generation ended at end-of-sequence (not at `max_new_tokens` or the context's end).
        is_eos: bool,
        new_tokens_count: u32,
        /// Seconds, from submission to the last token.
        execution_time: f64,
    },
    /// The request failed (or, with `request_id: null`, the whole message did).
    Error {
        request_id: Option<String>,
        error: String,
    },
}

impl BatchEvent {
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::Accepted { request_id }
            | Self::Started { request_id }
            | Self::Initialized { request_id, .. }
            | Self::Progress { request_id, .. }
            | Self::Complete { request_id, .. } => Some(request_id.as_str()),
            Self::Error { request_id, .. } => request_id.as_deref(),
        }
    }
}

/// One server message: a JSON array of events.
pub fn to_json(events: &[BatchEvent]) -> String {
    // Serializing these types cannot fail: plain structs and strings, finite floats.
    serde_json::to_string(events).unwrap_or_else(|e| message_error_json(&e.to_string()))
}

/// A whole-message failure: `[{"type":"ERROR","request_id":null,"error":"..."}]`, which
/// carries both the reference's `error` key and this protocol's event shape.
pub fn message_error(message: &str) -> String {
    to_json(&[BatchEvent::Error {
        request_id: None,
        error: message.to_owned(),
    }])
}

fn message_error_json(message: &str) -> String {
    serde_json::json!([{"type": "ERROR", "request_id": null, "error": message}]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> BatchRequest {
        parse_message(&v.to_string()).unwrap()
    }

    #[test]
    fn parses_the_documents_example() {
        let r = parse(json!({
            "prompts": [{"request_id": "2835f3c5",
                "prompt": "[INST] Generate a very long poem about 1000 cats [/INST]\n\n"}],
            "only_new_tokens": true,
            "stream_response": true,
            "generation_config": {"num_beams": 1, "do_sample": true, "temperature": 1,
                "top_p": 1, "top_k": 50, "max_new_tokens": 100, "repetition_penalty": 1,
                "length_penalty": 1}
        }));
        assert_eq!(r.entries.len(), 1);
        let entry = r.entries[0].as_ref().unwrap();
        assert_eq!(entry.request_id, "2835f3c5");
        assert!(entry.prompt.as_deref().unwrap().starts_with("[INST]"));
        let o = r.options.clone().unwrap();
        assert!(o.only_new_tokens() && o.stream_response());
        let g = o.generation_config();
        assert_eq!(g.max_new_tokens, Some(100));
        assert_eq!(g.length_penalty, Some(1.0));
        let p = g.validate(&BatchDefaults::default(), Some(1024)).unwrap();
        assert_eq!(p.temperature, 1.0);
        assert_eq!(p.top_p, 1.0);
        assert_eq!(p.top_k, 50);
        assert_eq!(p.repetition_penalty, 1.0);
        assert_eq!(p.max_tokens, Some(100));
        assert_eq!(r.cache_key(), Some(vec!["2835f3c5".to_owned()]));
    }

    #[test]
    fn omitted_and_null_fields_take_the_notes_defaults() {
        for msg in [
            json!({"prompts": [{"request_id": "a", "prompt": "x"}]}),
            json!({"prompts": [{"request_id": "a", "prompt": "x"}], "only_new_tokens": null,
                "stream_response": null, "generation_config": null}),
            json!({"prompts": [{"request_id": "a", "prompt": "x"}],
                "generation_config": {"temperature": null, "max_new_tokens": null}}),
        ] {
            let o = parse(msg).options.unwrap();
            assert!(o.only_new_tokens());
            assert!(o.stream_response());
            let p = o
                .generation_config()
                .validate(&BatchDefaults::default(), None)
                .unwrap();
            assert_eq!(p.temperature, 1.0);
            assert_eq!(p.top_p, 1.0);
            assert_eq!(p.top_k, 50);
            assert_eq!(p.max_tokens, Some(4096));
            assert_eq!(p.repetition_penalty, 1.0);
            assert!(!p.is_greedy());
        }
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let r = parse(
            json!({"prompts": [{"request_id": "a", "prompt": "x", "extra": [1]}],
            "mystery": true, "generation_config": {"bogus": "yes", "max_new_tokens": 3}}),
        );
        assert!(r.entries[0].is_ok());
        let o = r.options.unwrap();
        assert_eq!(o.generation_config().max_new_tokens, Some(3));
    }

    #[test]
    fn whole_message_errors() {
        for (text, needle) in [
            ("not json", "Invalid JSON"),
            ("{\"prompts\": [", "Invalid JSON"),
            (
                r#"{"prompts":[],"generation_config":{"temperature":NaN}}"#,
                "Invalid JSON",
            ),
            ("[1, 2]", "JSON object"),
            ("\"hello\"", "JSON object"),
            ("{}", "missing `prompts`"),
            (r#"{"prompts": null}"#, "missing `prompts`"),
            (r#"{"prompts": "hi"}"#, "must be an array"),
            (r#"{"prompts": {"request_id": "a"}}"#, "must be an array"),
            (r#"{"prompts": []}"#, "empty"),
        ] {
            let e = parse_message(text).unwrap_err();
            assert!(e.0.contains(needle), "{text}: {e}");
        }
        let many: Vec<Value> = (0..=MAX_BATCH_PROMPTS)
            .map(|i| json!({"request_id": i.to_string(), "prompt": "x"}))
            .collect();
        let e = parse_message(&json!({ "prompts": many }).to_string()).unwrap_err();
        assert!(e.0.contains("at most"), "{e}");
    }

    #[test]
    fn a_bad_entry_fails_only_itself() {
        let r = parse(json!({"prompts": [
            {"request_id": "a", "prompt": "fine"},
            {"request_id": "b", "prompt": 42},
            {"prompt": "no id"},
            {"request_id": 7, "prompt": "numeric id"},
            "just a string",
            {"request_id": "a", "prompt": "duplicate"},
            {"request_id": "c"}
        ]}));
        // The second "a" is dropped: its id is one ERROR, at the first "a".
        assert_eq!(r.entries.len(), 6);
        let e = r.entries[0].as_ref().unwrap_err();
        assert_eq!(e.request_id.as_deref(), Some("a"));
        assert!(
            e.message.contains("prompts[0], prompts[5]") && e.message.contains("none of them runs"),
            "{e:?}"
        );
        let e = r.entries[1].as_ref().unwrap_err();
        assert_eq!(e.request_id.as_deref(), Some("b"));
        assert!(
            e.message.contains("prompts[1].prompt must be a string"),
            "{e:?}"
        );
        let e = r.entries[2].as_ref().unwrap_err();
        assert_eq!(e.request_id, None);
        assert!(e.message.contains("request_id is required"), "{e:?}");
        let e = r.entries[3].as_ref().unwrap_err();
        assert!(e.message.contains("must be a string"), "{e:?}");
        let e = r.entries[4].as_ref().unwrap_err();
        assert!(e.message.contains("must be an object"), "{e:?}");
        // A missing prompt is a parse success: it may be a continuation.
        let c = r.entries[5].as_ref().unwrap();
        assert_eq!(c.prompt, None);
        // Entries without a usable id make the message uncacheable.
        assert_eq!(r.cache_key(), None);
    }

    #[test]
    fn bad_shared_fields_name_the_field() {
        for (mut msg, needle) in [
            (json!({"stream_response": "yes"}), "stream_response"),
            (json!({"only_new_tokens": 1}), "only_new_tokens"),
            (
                json!({"generation_config": "greedy"}),
                "generation_config must be an object",
            ),
            (
                json!({"generation_config": {"temperature": "hot"}}),
                "generation_config.temperature",
            ),
            (
                json!({"generation_config": {"top_k": 1.5}}),
                "generation_config.top_k",
            ),
            (
                json!({"generation_config": {"do_sample": "no"}}),
                "generation_config.do_sample",
            ),
        ] {
            msg["prompts"] = json!([{"request_id": "a", "prompt": "x"}]);
            let r = parse(msg.clone());
            let e = r.options.unwrap_err();
            assert!(e.contains(needle), "{msg}: {e}");
            assert!(r.entries[0].is_ok());
        }
    }

    fn config(v: Value) -> GenerationConfig {
        GenerationConfig::from_json(&v).unwrap()
    }

    #[test]
    fn do_sample_false_is_greedy() {
        let p = config(json!({"do_sample": false, "temperature": 0.9}))
            .validate(&BatchDefaults::default(), Some(512))
            .unwrap();
        assert!(p.is_greedy());
        let p = config(json!({"temperature": 0}))
            .validate(&BatchDefaults::default(), Some(512))
            .unwrap();
        assert!(p.is_greedy());
    }

    #[test]
    fn beam_search_is_refused_and_length_penalty_accepted() {
        let e = config(json!({"num_beams": 4}))
            .validate(&BatchDefaults::default(), None)
            .unwrap_err();
        assert_eq!(e.param, "num_beams");
        assert!(e.message.contains("beam search is not supported"), "{e}");
        let e = config(json!({"num_beams": 0}))
            .validate(&BatchDefaults::default(), None)
            .unwrap_err();
        assert_eq!(e.param, "num_beams");
        assert!(config(json!({"num_beams": 1, "length_penalty": 2.5}))
            .validate(&BatchDefaults::default(), None)
            .is_ok());
        assert!(config(json!({"length_penalty": -3}))
            .validate(&BatchDefaults::default(), None)
            .is_ok());
    }

    #[test]
    fn max_new_tokens_is_capped_at_the_context_and_must_be_positive() {
        let d = BatchDefaults::default();
        let p = config(json!({})).validate(&d, Some(1024)).unwrap();
        assert_eq!(p.max_tokens, Some(1024), "the 4096 default is capped");
        let p = config(json!({"max_new_tokens": 100000}))
            .validate(&d, Some(1024))
            .unwrap();
        assert_eq!(p.max_tokens, Some(1024));
        let p = config(json!({"max_new_tokens": 7}))
            .validate(&d, Some(1024))
            .unwrap();
        assert_eq!(p.max_tokens, Some(7));
        for bad in [0, -5] {
            let e = config(json!({ "max_new_tokens": bad }))
                .validate(&d, Some(1024))
                .unwrap_err();
            assert_eq!(e.param, "max_new_tokens");
            assert!(e.message.contains("max_new_tokens"), "{e}");
        }
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        for (v, name) in [
            (json!({"temperature": -1}), "temperature"),
            (json!({"top_p": 0}), "top_p"),
            (json!({"top_p": 1.5}), "top_p"),
            (json!({"top_k": -1}), "top_k"),
            (json!({"repetition_penalty": 0}), "repetition_penalty"),
            (json!({"seed": -2}), "seed"),
        ] {
            let e = config(v.clone())
                .validate(&BatchDefaults::default(), Some(512))
                .unwrap_err();
            assert_eq!(e.param, name, "{v}: {e}");
        }
    }

    #[test]
    fn node_defaults_override_the_notes_defaults() {
        let d = BatchDefaults {
            do_sample: false,
            max_new_tokens: 64,
            ..BatchDefaults::default()
        };
        let p = config(json!({})).validate(&d, Some(1024)).unwrap();
        assert!(p.is_greedy());
        assert_eq!(p.max_tokens, Some(64));
        let p = config(json!({"do_sample": true, "max_new_tokens": 10}))
            .validate(&d, Some(1024))
            .unwrap();
        assert!(!p.is_greedy());
        assert_eq!(p.max_tokens, Some(10));
        let d: BatchDefaults = serde_json::from_value(json!({"top_k": 20})).unwrap();
        assert_eq!(d.top_k, 20);
        assert_eq!(d.max_new_tokens, 4096);
    }

    #[test]
    fn events_match_the_documents_shapes() {
        let events = vec![
            BatchEvent::Accepted {
                request_id: "2835f3c5".into(),
            },
            BatchEvent::Started {
                request_id: "2835f3c5".into(),
            },
            BatchEvent::Initialized {
                request_id: "2835f3c5".into(),
                text: "[INST] Lorem Impsum...".into(),
            },
            BatchEvent::Progress {
                request_id: "2835f3c5".into(),
                text: "The".into(),
            },
            BatchEvent::Complete {
                request_id: "2835f3c5".into(),
                text: "In the land of cats...".into(),
                is_eos: false,
                new_tokens_count: 100,
                execution_time: 1.711,
            },
            BatchEvent::Error {
                request_id: Some("9099dc5e".into()),
                error: "boom".into(),
            },
        ];
        let v: Value = serde_json::from_str(&to_json(&events)).unwrap();
        assert_eq!(
            v,
            json!([
                {"request_id": "2835f3c5", "type": "ACCEPTED"},
                {"request_id": "2835f3c5", "type": "STARTED"},
                {"request_id": "2835f3c5", "type": "INITIALIZED", "text": "[INST] Lorem Impsum..."},
                {"request_id": "2835f3c5", "type": "PROGRESS", "text": "The"},
                {"request_id": "2835f3c5", "type": "COMPLETE", "text": "In the land of cats...",
                    "is_eos": false, "new_tokens_count": 100, "execution_time": 1.711},
                {"request_id": "9099dc5e", "type": "ERROR", "error": "boom"}
            ])
        );
        let back: Vec<BatchEvent> = serde_json::from_value(v).unwrap();
        assert_eq!(back, events);
        assert_eq!(events[5].request_id(), Some("9099dc5e"));
    }

    #[test]
    fn whole_message_error_has_type_and_null_id() {
        let v: Value = serde_json::from_str(&message_error("Invalid JSON received")).unwrap();
        assert_eq!(
            v,
            json!([{"type": "ERROR", "request_id": null, "error": "Invalid JSON received"}])
        );
        let v: Value = serde_json::from_str(&message_error_json("x\"y")).unwrap();
        assert_eq!(v[0]["error"], "x\"y");
    }

    #[test]
    fn payload_round_trips_for_clients() {
        let p = Payload {
            prompts: vec![PromptEntry {
                request_id: "a".into(),
                prompt: Some("hi".into()),
            }],
            options: Options {
                stream_response: Some(false),
                generation_config: Some(GenerationConfig {
                    do_sample: Some(false),
                    max_new_tokens: Some(5),
                    ..GenerationConfig::default()
                }),
                ..Options::default()
            },
        };
        let text = serde_json::to_string(&p).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"prompts": [{"request_id": "a", "prompt": "hi"}], "stream_response": false,
                "generation_config": {"do_sample": false, "max_new_tokens": 5}})
        );
        let r = parse_message(&text).unwrap();
        assert_eq!(r.entries[0].as_ref().unwrap(), &p.prompts[0]);
        assert_eq!(r.options.unwrap(), p.options);
        let back: Payload = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p);
    }
}
