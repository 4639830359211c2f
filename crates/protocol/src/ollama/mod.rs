//! Ollama's HTTP API (`/api/*`, Ollama's `docs/api.md`) as Hearth serves it: request bodies
//! parsed leniently (unknown fields ignored) and validated strictly into what the engine needs,
//! the response lines with Ollama's field names and units, and Ollama's `{"error": "..."}`.
//!
//! Choices where Ollama is loose, each explained where it is made: values Ollama clamps or
//! passes on silently (temperature above 2, `repeat_penalty` 0) are refused with a 400 like
//! every other Hearth door; `template` and `suffix` are refused since a node cannot honour
//! them; images are read here and judged by the engine (a model without a projector refuses them); a negative or zero `num_predict` means "no limit" and a negative
//! `seed` means "random", as in Ollama's own runner.

pub mod chat;
pub mod generate;
pub mod keep_alive;
pub mod models;
pub mod options;
pub mod request;
pub mod response;

pub use chat::OllamaChat;
pub use generate::OllamaGenerate;
pub use keep_alive::{KeepAlive, DEFAULT_KEEP_ALIVE};
pub use models::{ModelDetails, PsModel, PsResponse, ShowResponse, TagsModel, TagsResponse};
pub use options::{ollama_defaults, Format, Options};
pub use request::{
    ChatBody, DeleteBody, EmbedBody, EmbeddingsBody, GenerateBody, OllamaEmbed, PullBody, ShowBody,
    WireMessage,
};
pub use response::{
    nanos, ChatChunk, ChatResponse, DoneReason, EmbedResponse, EmbeddingsResponse, ErrorBody,
    GenerateChunk, GenerateResponse, Metrics, ProgressLine, ReplyMessage, VersionResponse,
};

use serde::Deserialize;
use serde_json::Value;

use crate::generation::{ParamError, SamplingParams};
use crate::media::{check_count, Image};

/// A request Ollama's way refused: the HTTP status and the text of `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OllamaError {
    pub status: u16,
    pub message: String,
    /// Seconds a client may wait before it tries again (`Retry-After`), when the refusal is
    /// for a while only.
    pub retry_after: Option<u64>,
}

impl OllamaError {
    /// 400: the body or one of its values is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 404 in Ollama's words for a model it does not have.
    pub fn model_not_found(name: &str) -> Self {
        Self {
            status: 404,
            message: format!("model {name:?} not found, try pulling it first"),
            retry_after: None,
        }
    }

    /// The JSON body to send: `{"error": "..."}`.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.message.clone(),
        }
    }
}

impl From<ParamError> for OllamaError {
    /// A sampling value out of range, named by its Ollama option name.
    fn from(e: ParamError) -> Self {
        let message = match e.param {
            "repetition_penalty" => e.message.replace("repetition_penalty", "repeat_penalty"),
            "max_tokens" => e.message.replace("max_tokens", "num_predict"),
            _ => e.message,
        };
        Self::bad_request(message)
    }
}

/// Parse a JSON body; anything serde refuses (bad JSON, a value of the wrong type) is a 400
/// carrying serde's description, and an empty body is Ollama's "missing request body".
///
/// Derived structs would also read a JSON array, field by position; Ollama's bodies, messages
/// and options are objects, so an array where one belongs is refused (here for the body, by
/// `options::deserialize_options` and the messages' reader in `request`).
pub fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, OllamaError> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(OllamaError::bad_request("missing request body")),
        Some(b'{') => {}
        Some(_) if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() => {
            return Err(OllamaError::bad_request(
                "invalid request body: expected a JSON object",
            ))
        }
        Some(_) => {}
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        // Nested parsers (options, messages) name their own field.
        if path.is_empty() || path == "." || message.starts_with(path.as_str()) {
            OllamaError::bad_request(message)
        } else {
            OllamaError::bad_request(format!("{path}: {message}"))
        }
    })?;
    de.end()
        .map_err(|e| OllamaError::bad_request(e.to_string()))?;
    Ok(parsed)
}

/// The model a body names: `model`, or the older `name` when `model` is empty.
pub(crate) fn model_name(model: &str, name: Option<&str>) -> Result<String, OllamaError> {
    let chosen = if model.is_empty() {
        name.unwrap_or("")
    } else {
        model
    };
    if chosen.trim().is_empty() {
        return Err(OllamaError::bad_request("model is required"));
    }
    Ok(chosen.to_owned())
}

/// What every generation body shares, validated.
struct Common {
    think: Option<bool>,
    params: SamplingParams,
    num_ctx: Option<u32>,
    format: Option<Format>,
    keep_alive: Option<KeepAlive>,
}

fn common(
    options: Option<&Options>,
    format: Option<&Value>,
    keep_alive: Option<&Value>,
    think: Option<&Value>,
    max_context: Option<u32>,
) -> Result<Common, OllamaError> {
    let none = Options::default();
    let (params, num_ctx) = options.unwrap_or(&none).validate(max_context)?;
    let think = check_think(think)?;
    Ok(Common {
        think,
        params,
        num_ctx,
        format: Format::parse(format)?,
        keep_alive: KeepAlive::parse(keep_alive)?,
    })
}

/// `think`: a boolean or a level, as Ollama checks it. `None`: not said (the model's default).
fn check_think(think: Option<&Value>) -> Result<Option<bool>, OllamaError> {
    match think {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if ["low", "medium", "high", "max"].contains(&s.as_str()) => {
            Ok(Some(true))
        }
        Some(other) => Err(OllamaError::bad_request(format!(
            "invalid think value: {other} (must be true, false, \"low\", \"medium\", \"high\" or \"max\")"
        ))),
    }
}

/// A message's or a prompt's `images` (base64 strings), each checked against the limits.
fn read_images(at: &str, images: Option<Vec<Value>>) -> Result<Vec<Image>, OllamaError> {
    let images = images.unwrap_or_default();
    check_count(images.len()).map_err(|e| OllamaError::bad_request(format!("{at}: {e}")))?;
    images
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Image::from_base64(&s)
                .map_err(|e| OllamaError::bad_request(format!("{at}[{i}]: {e}"))),
            other => Err(OllamaError::bad_request(format!(
                "{at}[{i}]: an image is a base64 string, not {}",
                crate::value_kind::kind(&other)
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_have_ollamas_wording_and_body() {
        let e = OllamaError::model_not_found("llama3.2");
        assert_eq!(e.status, 404);
        assert_eq!(
            serde_json::to_value(e.body()).unwrap(),
            json!({"error": "model \"llama3.2\" not found, try pulling it first"})
        );
        let e = OllamaError::from(ParamError::new(
            "repetition_penalty",
            "repetition_penalty must be > 0 (1 disables it), got 0",
        ));
        assert_eq!(e.status, 400);
        assert!(e.message.starts_with("repeat_penalty must be"), "{e}");
    }

    #[test]
    fn parse_body_maps_every_failure_to_400() {
        for body in [
            &b""[..],
            b"  \n",
            b"{",
            b"[1]",
            br#"["m"]"#,
            b"\"m\"",
            br#"{"model": 3}"#,
        ] {
            let e = parse_body::<ChatBody>(body).expect_err("refused");
            assert_eq!(e.status, 400, "{e}");
        }
        assert_eq!(
            parse_body::<ChatBody>(b"").unwrap_err().message,
            "missing request body"
        );
    }

    #[test]
    fn model_or_name() {
        assert_eq!(model_name("a", Some("b")).unwrap(), "a");
        assert_eq!(model_name("", Some("b")).unwrap(), "b");
        assert_eq!(
            model_name("", None).unwrap_err().message,
            "model is required"
        );
        assert!(model_name(" ", None).is_err());
    }
}
