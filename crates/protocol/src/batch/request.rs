//! Client -> server messages: the shapes a client builds ([`Payload`], [`PromptEntry`],
//! [`Options`]) and the server's two-stage [`parse_message`], where one bad entry or shared
//! field fails only itself and a whole message is refused only when nothing in it is usable.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{field, kind, GenerationConfig, MAX_BATCH_PROMPTS};

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
    if map.get("images").is_some_and(|v| !v.is_null()) {
        return Err(EntryError {
            request_id: Some(request_id),
            message: format!("prompts[{index}].images: {}", crate::media::TEXT_ONLY_DOOR),
        });
    }
    Ok(PromptEntry { request_id, prompt })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchDefaults;
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
    fn an_entry_with_images_is_refused_not_read_as_text() {
        let r = parse(json!({"prompts": [
            {"request_id": "a", "prompt": "what is this?", "images": ["iVBORw0KGgo="]},
            {"request_id": "b", "prompt": "fine", "images": null}
        ]}));
        let e = r.entries[0].as_ref().unwrap_err();
        assert_eq!(e.request_id.as_deref(), Some("a"));
        assert!(
            e.message
                .contains("prompts[0].images: images are not part of this protocol"),
            "{e:?}"
        );
        assert!(r.entries[1].is_ok());
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
