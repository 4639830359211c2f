//! Ollama's request bodies as they arrive (`/api/chat`, `/api/generate`, `/api/embed`,
//! `/api/embeddings`, `/api/show`, `/api/delete`, `/api/pull`), with the widest types so that
//! validation, not serde, says what is wrong; and the validation of the embedding and model bodies.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::keep_alive::KeepAlive;
use super::options::{deserialize_options, Options};
use super::{model_name, OllamaError};
use crate::limits::MAX_EMBEDDING_INPUTS;

/// One message of `/api/chat`. `thinking` and other fields are accepted and ignored; `images`
/// are base64 strings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct WireMessage {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub images: Option<Vec<Value>>,
    /// An assistant turn's calls: `[{"function": {"name", "arguments": {...}}}]`.
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
    /// The function a `tool` turn's result comes from.
    #[serde(default)]
    pub tool_name: Option<String>,
}

/// `messages` as objects only (`null` is none, as in Ollama); see [`super::parse_body`].
fn deserialize_messages<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<WireMessage>, D::Error> {
    Option::<Vec<Map<String, Value>>>::deserialize(d)?
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            serde_json::from_value(Value::Object(m))
                .map_err(|e| D::Error::custom(format!("messages[{i}]: {e}")))
        })
        .collect()
}

/// `POST /api/chat`. An empty `messages` only loads (or, with `keep_alive: 0`, unloads) the model.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ChatBody {
    /// Required: an empty or missing model is refused in validation with Ollama's words.
    #[serde(default)]
    pub model: String,
    #[serde(default, deserialize_with = "deserialize_messages")]
    pub messages: Vec<WireMessage>,
    /// Ollama streams unless this is `false`.
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default, deserialize_with = "deserialize_options")]
    pub options: Option<Options>,
    #[serde(default)]
    pub keep_alive: Option<Value>,
    /// `true`/`false` or `"low"`, `"medium"`, `"high"`, `"max"`.
    #[serde(default)]
    pub think: Option<Value>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// Hearth's extension, as OpenAI's: `"auto"` (Ollama's only behaviour), `"required"`,
    /// `"none"` or a named function.
    #[serde(default)]
    pub tool_choice: Option<Value>,
}

/// `POST /api/generate`. A missing or empty `prompt` only loads (or unloads) the model.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct GenerateBody {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub template: Option<String>,
    /// The prompt is already formatted: no chat template is applied.
    #[serde(default)]
    pub raw: Option<bool>,
    #[serde(default)]
    pub images: Option<Vec<Value>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub format: Option<Value>,
    #[serde(default, deserialize_with = "deserialize_options")]
    pub options: Option<Options>,
    #[serde(default)]
    pub keep_alive: Option<Value>,
    /// Deprecated in Ollama: token ids returned by an earlier `/api/generate`.
    #[serde(default)]
    pub context: Option<Vec<i64>>,
    #[serde(default)]
    pub think: Option<Value>,
}

/// `POST /api/embed`: `input` is a string or an array of strings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EmbedBody {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub input: Option<Value>,
    /// Cut inputs longer than the context instead of failing (Ollama's default: `true`).
    #[serde(default)]
    pub truncate: Option<bool>,
    #[serde(default, deserialize_with = "deserialize_options")]
    pub options: Option<Options>,
    #[serde(default)]
    pub keep_alive: Option<Value>,
    #[serde(default)]
    pub dimensions: Option<i64>,
}

/// `POST /api/embeddings`, the older single-prompt form of `/api/embed`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct EmbeddingsBody {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default, deserialize_with = "deserialize_options")]
    pub options: Option<Options>,
    #[serde(default)]
    pub keep_alive: Option<Value>,
}

/// `POST /api/show`: the model by `model`, or by the older `name`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ShowBody {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub verbose: Option<bool>,
}

/// `DELETE /api/delete`: the model by `model` or `name`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct DeleteBody {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub name: Option<String>,
}

/// `POST /api/pull`: the model by `model` or `name`; `insecure` is accepted (Ollama ignores it too).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PullBody {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub insecure: Option<bool>,
    #[serde(default)]
    pub stream: Option<bool>,
}

impl ShowBody {
    /// The model named, or 400 "model is required".
    pub fn model_name(&self) -> Result<String, OllamaError> {
        model_name(&self.model, self.name.as_deref())
    }
}

impl DeleteBody {
    pub fn model_name(&self) -> Result<String, OllamaError> {
        model_name(&self.model, self.name.as_deref())
    }
}

impl PullBody {
    pub fn model_name(&self) -> Result<String, OllamaError> {
        model_name(&self.model, self.name.as_deref())
    }

    /// Progress lines unless `stream` is `false`.
    pub fn stream(&self) -> bool {
        self.stream.unwrap_or(true)
    }
}

/// A validated `/api/embed` or `/api/embeddings` request. No inputs only loads the model.
#[derive(Debug, Clone, PartialEq)]
pub struct OllamaEmbed {
    pub model: String,
    pub inputs: Vec<String>,
    pub truncate: bool,
    /// Shorten each vector to this length (and normalize it again), when smaller.
    pub dimensions: Option<u32>,
    pub keep_alive: Option<KeepAlive>,
}

impl OllamaEmbed {
    pub fn is_load_only(&self) -> bool {
        self.inputs.is_empty()
    }
}

impl EmbedBody {
    /// `input` as Ollama reads it: an empty string is no input, an array must hold only
    /// strings. Sampling `options` do not apply to embeddings and are not checked.
    pub fn validate(self) -> Result<OllamaEmbed, OllamaError> {
        let model = model_name(&self.model, None)?;
        let inputs = match self.input {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) if s.is_empty() => Vec::new(),
            Some(Value::String(s)) => vec![s],
            Some(Value::Array(items)) => {
                if items.len() > MAX_EMBEDDING_INPUTS {
                    return Err(OllamaError::bad_request(format!(
                        "at most {MAX_EMBEDDING_INPUTS} inputs are allowed, got {}",
                        items.len()
                    )));
                }
                items
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s),
                        _ => Err(OllamaError::bad_request("invalid input type")),
                    })
                    .collect::<Result<_, _>>()?
            }
            Some(_) => return Err(OllamaError::bad_request("invalid input type")),
        };
        // Ollama ignores a dimension of 0 or less; a negative one is a mistake we name.
        let dimensions = match self.dimensions {
            None | Some(0) => None,
            Some(d) if d < 0 => {
                return Err(OllamaError::bad_request(format!(
                    "dimensions must be a positive number, got {d}"
                )))
            }
            Some(d) => Some(u32::try_from(d).unwrap_or(u32::MAX)),
        };
        Ok(OllamaEmbed {
            model,
            inputs,
            truncate: self.truncate.unwrap_or(true),
            dimensions,
            keep_alive: KeepAlive::parse(self.keep_alive.as_ref())?,
        })
    }
}

impl EmbeddingsBody {
    /// The one `prompt` as the only input (none when empty: a load). The legacy endpoint has
    /// no `truncate`; `/api/embed`'s default (truncate) applies.
    pub fn validate(self) -> Result<OllamaEmbed, OllamaError> {
        let model = model_name(&self.model, None)?;
        Ok(OllamaEmbed {
            model,
            inputs: self.prompt.filter(|p| !p.is_empty()).into_iter().collect(),
            truncate: true,
            dimensions: None,
            keep_alive: KeepAlive::parse(self.keep_alive.as_ref())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_body;
    use super::*;
    use std::time::Duration;

    #[test]
    fn embed_examples_from_the_docs() {
        let e =
            parse_body::<EmbedBody>(br#"{"model":"all-minilm","input":"Why is the sky blue?"}"#)
                .unwrap()
                .validate()
                .unwrap();
        assert_eq!(e.model, "all-minilm");
        assert_eq!(e.inputs, vec!["Why is the sky blue?".to_string()]);
        assert!(e.truncate && e.dimensions.is_none() && e.keep_alive.is_none());
        let e = parse_body::<EmbedBody>(
            br#"{"model":"all-minilm","input":["Why is the sky blue?","Why is the grass green?"],
                "truncate":false,"dimensions":3,"keep_alive":"10m","options":{"num_ctx":512}}"#,
        )
        .unwrap()
        .validate()
        .unwrap();
        assert_eq!(e.inputs.len(), 2);
        assert!(!e.truncate);
        assert_eq!(e.dimensions, Some(3));
        assert_eq!(e.keep_alive, Some(KeepAlive::For(Duration::from_secs(600))));
    }

    #[test]
    fn embed_load_only_and_refusals() {
        for body in [
            r#"{"model":"m"}"#,
            r#"{"model":"m","input":""}"#,
            r#"{"model":"m","input":[]}"#,
        ] {
            let e = parse_body::<EmbedBody>(body.as_bytes())
                .unwrap()
                .validate()
                .unwrap();
            assert!(e.is_load_only(), "{body}");
        }
        for (body, says) in [
            (r#"{"input":"x"}"#, "model is required"),
            (r#"{"model":"m","input":5}"#, "invalid input type"),
            (r#"{"model":"m","input":["a",1]}"#, "invalid input type"),
            (r#"{"model":"m","input":"x","dimensions":-1}"#, "dimensions"),
            (
                r#"{"model":"m","input":"x","keep_alive":"soon"}"#,
                "keep_alive",
            ),
        ] {
            let e = parse_body::<EmbedBody>(body.as_bytes())
                .unwrap()
                .validate()
                .expect_err(body);
            assert_eq!(e.status, 400);
            assert!(e.message.contains(says), "{body}: {e}");
        }
        let many = serde_json::json!({"model": "m", "input": vec!["a"; MAX_EMBEDDING_INPUTS + 1]});
        let body: EmbedBody = serde_json::from_value(many).unwrap();
        assert!(body.validate().is_err());
        for body in [
            r#"{"model":"m","truncate":"yes"}"#,
            r#"{"model":"m","dimensions":1.5}"#,
        ] {
            assert_eq!(
                parse_body::<EmbedBody>(body.as_bytes()).unwrap_err().status,
                400
            );
        }
    }

    #[test]
    fn legacy_embeddings() {
        let e = parse_body::<EmbeddingsBody>(
            br#"{"model":"all-minilm","prompt":"Here is an article about llamas..."}"#,
        )
        .unwrap()
        .validate()
        .unwrap();
        assert_eq!(
            e.inputs,
            vec!["Here is an article about llamas...".to_string()]
        );
        let e = parse_body::<EmbeddingsBody>(br#"{"model":"m","prompt":""}"#)
            .unwrap()
            .validate()
            .unwrap();
        assert!(e.is_load_only());
        assert!(parse_body::<EmbeddingsBody>(br#"{"model":"m","prompt":["a"]}"#).is_err());
    }

    #[test]
    fn model_bodies_take_model_or_name() {
        let show = parse_body::<ShowBody>(br#"{"model":"llava"}"#).unwrap();
        assert_eq!(show.model_name().unwrap(), "llava");
        assert_eq!(show.verbose, None);
        let show = parse_body::<ShowBody>(br#"{"name":"llava","verbose":true}"#).unwrap();
        assert_eq!(show.model_name().unwrap(), "llava");
        assert_eq!(show.verbose, Some(true));
        let delete = parse_body::<DeleteBody>(br#"{"model":"llama3:13b"}"#).unwrap();
        assert_eq!(delete.model_name().unwrap(), "llama3:13b");
        assert_eq!(
            parse_body::<DeleteBody>(b"{}")
                .unwrap()
                .model_name()
                .unwrap_err()
                .status,
            400
        );
        let pull = parse_body::<PullBody>(br#"{"model":"llama3.2"}"#).unwrap();
        assert_eq!(pull.model_name().unwrap(), "llama3.2");
        assert!(pull.stream());
        let pull =
            parse_body::<PullBody>(br#"{"name":"x","insecure":true,"stream":false}"#).unwrap();
        assert_eq!(
            (pull.model_name().unwrap(), pull.stream()),
            ("x".into(), false)
        );
        assert!(parse_body::<ShowBody>(br#"{"model":"m","verbose":"yes"}"#).is_err());
        assert!(parse_body::<PullBody>(br#"{"model":["m"]}"#).is_err());
    }
}
