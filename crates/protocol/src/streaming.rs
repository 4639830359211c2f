//! The `/generate` streaming WebSocket protocol (`protocols/streaming-ws.md`): one enum per
//! direction, field names exactly as the document writes them. Parsing turns any malformed
//! message into a [`ParseError`] the door reports as an `invalid_request` error message.
//!
//! Decisions where the document is silent (also in the README):
//! - `prompt` is rendered with the model's chat template as one user turn, as Ollama's
//!   `/api/generate` does; `options.raw: true` sends it to the model as is.
//! - `echo_prompt: true` prefixes `generated_text` (in tokens and the completion) with the prompt.
//! - A user `stop` ends with a `completion` whose `finish_reason` is `"cancelled"`.
//! - `pause`, `resume`, `modify` and `feedback` are acknowledged with a `status` message.

use serde::{Deserialize, Serialize};

use crate::generation::{RawParams, StopField};

/// Client -> server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    Config(Config),
    Control(Control),
    Feedback(Feedback),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Config {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: String,
    #[serde(default)]
    pub parameters: Parameters,
    /// Not part of this protocol: present, the message is refused
    /// ([`crate::media::TEXT_ONLY_DOOR`]) rather than its pictures dropped unseen.
    #[serde(default)]
    images: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    pub options: Options,
}

/// `parameters` of `config` and of `modify`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Parameters {
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<StopField>,
    /// Hearth extension (llama-server's name): keep generating past end-of-sequence.
    pub ignore_eos: Option<bool>,
    /// Hearth extension: `auto`, `none`, `ngram` or `draft` speculation for this request.
    pub speculative: Option<String>,
}

impl Parameters {
    /// The first parameter set here that only a request's start takes (`modify` refuses it
    /// rather than ignore it): guessing ahead and ignoring end-of-sequence shape the whole
    /// answer.
    pub fn fixed_at_start(&self) -> Option<&'static str> {
        if self.speculative.is_some() {
            Some("speculative")
        } else if self.ignore_eos.is_some() {
            Some("ignore_eos")
        } else {
            None
        }
    }

    pub fn to_raw(&self, top_logprobs: Option<i64>) -> RawParams {
        RawParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
            max_tokens: self.max_tokens,
            stop: self.stop.clone(),
            top_logprobs,
            ignore_eos: self.ignore_eos,
            speculative: self.speculative.clone(),
            ..RawParams::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Options {
    #[serde(default = "yes")]
    pub stream: bool,
    #[serde(default)]
    pub echo_prompt: bool,
    #[serde(default)]
    pub include_token_ids: bool,
    #[serde(default)]
    pub include_logprobs: bool,
    #[serde(default)]
    pub include_timing: bool,
    /// Hearth extension: how many alternatives per token when `include_logprobs` (default 5).
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    /// Hearth extension: send the prompt to the model without the chat template.
    #[serde(default)]
    pub raw: bool,
}

fn yes() -> bool {
    true
}

impl Default for Options {
    fn default() -> Self {
        Self {
            stream: true,
            echo_prompt: false,
            include_token_ids: false,
            include_logprobs: false,
            include_timing: false,
            top_logprobs: None,
            raw: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Control {
    Stop,
    Pause,
    Resume,
    Regenerate,
    Modify {
        #[serde(default)]
        parameters: Parameters,
    },
}

impl Control {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Regenerate => "regenerate",
            Self::Modify { .. } => "modify",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Feedback {
    pub rating: f64,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub position: Option<i64>,
}

/// A client message that could not be understood, with a message fit to send back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// Parse one text frame.
pub fn parse_client_message(text: &str) -> Result<ClientMessage, ParseError> {
    let message: ClientMessage = serde_json::from_str(text).map_err(|e| {
        let detail = e.to_string();
        if e.is_syntax() || e.is_eof() {
            ParseError(format!("message is not valid JSON: {detail}"))
        } else {
            ParseError(format!("invalid message: {detail}"))
        }
    })?;
    if let ClientMessage::Config(Config {
        images: Some(_), ..
    }) = &message
    {
        return Err(ParseError(crate::media::TEXT_ONLY_DOOR.into()));
    }
    Ok(message)
}

/// Server -> client.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Init(Init),
    Token(Token),
    Completion(Completion),
    Error(ErrorMessage),
    Status(Status),
}

impl ServerMessage {
    pub fn to_json(&self) -> String {
        // Serializing these types cannot fail: no maps with non-string keys, no custom impls.
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                r#"{{"type":"error","error":"internal_error","message":"{e}","recoverable":false}}"#
            )
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Init {
    pub request_id: String,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_info: Option<ModelInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    pub version: String,
    pub max_tokens: u32,
    pub quantization: String,
    pub architecture: String,
    pub parameters: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Token {
    pub token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_id: Option<i32>,
    pub generated_text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<TokenLogprob>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<TokenTiming>,
    pub finish_reason: Option<String>,
    pub finished: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenTiming {
    pub token_ms: f64,
    pub total_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    pub request_id: String,
    pub generated_text: String,
    pub finish_reason: String,
    pub usage: crate::Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<CompletionTiming>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CompletionTiming {
    pub first_token_ms: f64,
    pub total_ms: f64,
}

/// Error types of the document, plus Hearth's `server_shutdown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InvalidRequest,
    ContextLengthExceeded,
    MemoryPressure,
    Timeout,
    InternalError,
    ModelLoadingError,
    RateLimited,
    ServerShutdown,
}

/// What a client should do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// Send the same request again.
    Retry,
    /// Send it again after a pause (the node is busy).
    RetryLater,
    /// Change the request: it will fail the same way again.
    FixRequest,
    /// Shorten the prompt.
    ReducePrompt,
    /// Reconnect (the node is going away).
    Reconnect,
    /// Nothing will help.
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorMessage {
    pub error: ErrorKind,
    pub message: String,
    pub recoverable: bool,
    pub recovery_action: RecoveryAction,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub operation: String,
    pub progress: u8,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documents_config_example() {
        let msg = parse_client_message(
            r#"{"type":"config","model":"llama-7b","prompt":"Once upon a time",
            "parameters":{"max_tokens":100,"temperature":0.7,"top_p":0.9,"top_k":40,
            "repetition_penalty":1.1,"stop":["\n\n","THE END"]},
            "options":{"stream":true,"echo_prompt":false,"include_token_ids":false,
            "include_logprobs":false,"include_timing":false}}"#,
        )
        .unwrap();
        let ClientMessage::Config(c) = msg else {
            panic!("not a config")
        };
        assert_eq!(c.model.as_deref(), Some("llama-7b"));
        assert_eq!(c.parameters.max_tokens, Some(100));
        assert_eq!(
            c.parameters.stop,
            Some(StopField::Many(vec!["\n\n".into(), "THE END".into()]))
        );
        assert!(c.options.stream);
    }

    #[test]
    fn config_without_parameters_or_options_uses_defaults() {
        let ClientMessage::Config(c) =
            parse_client_message(r#"{"type":"config","prompt":"hi"}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(c.options, Options::default());
        assert_eq!(c.parameters, Parameters::default());
    }

    #[test]
    fn parses_every_control_action_and_feedback() {
        for (text, name) in [
            (r#"{"type":"control","action":"stop"}"#, "stop"),
            (r#"{"type":"control","action":"pause"}"#, "pause"),
            (r#"{"type":"control","action":"resume"}"#, "resume"),
            (r#"{"type":"control","action":"regenerate"}"#, "regenerate"),
            (
                r#"{"type":"control","action":"modify","parameters":{"temperature":0.9,"top_p":0.95}}"#,
                "modify",
            ),
        ] {
            let ClientMessage::Control(c) = parse_client_message(text).unwrap() else {
                panic!("{text}")
            };
            assert_eq!(c.name(), name);
        }
        let ClientMessage::Feedback(f) = parse_client_message(
            r#"{"type":"feedback","rating":1,"text":"Great response!","position":120}"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(f.rating, 1.0);
        assert_eq!(f.position, Some(120));
    }

    #[test]
    fn malformed_messages_get_clear_errors() {
        let e = parse_client_message("not json").unwrap_err();
        assert!(e.0.contains("not valid JSON"), "{e}");
        let e = parse_client_message(r#"{"type":"bogus"}"#).unwrap_err();
        assert!(e.0.contains("bogus"), "{e}");
        let e = parse_client_message(r#"{"type":"control","action":"explode"}"#).unwrap_err();
        assert!(e.0.contains("explode"), "{e}");
        let e = parse_client_message(r#"{"type":"config","prompt":5}"#).unwrap_err();
        assert!(e.0.contains("invalid type"), "{e}");
        let e = parse_client_message(
            r#"{"type":"config","prompt":"x","parameters":{"max_tokens":"ten"}}"#,
        )
        .unwrap_err();
        assert!(e.0.contains("invalid type"), "{e}");
        let e = parse_client_message(r#"{"type":"config","prompt":"x","images":["aGk="]}"#)
            .unwrap_err();
        assert!(e.0.contains("images are not part of this protocol"), "{e}");
        assert!(parse_client_message(r#"{"type":"config","prompt":"x","images":null}"#).is_ok());
        let e = parse_client_message(r#"{"prompt":"x"}"#).unwrap_err();
        assert!(e.0.contains("type"), "{e}");
    }

    #[test]
    fn server_messages_match_the_documents_shapes() {
        let token = ServerMessage::Token(Token {
            token: " the".into(),
            token_id: Some(262),
            generated_text: "Once upon a time the".into(),
            logprobs: Some(vec![TokenLogprob {
                token: " the".into(),
                logprob: -0.5,
            }]),
            timing: Some(TokenTiming {
                token_ms: 42.5,
                total_ms: 156.25,
            }),
            finish_reason: None,
            finished: false,
        });
        let v: serde_json::Value = serde_json::from_str(&token.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"token","token":" the","token_id":262,
                "generated_text":"Once upon a time the",
                "logprobs":[{"token":" the","logprob":-0.5}],
                "timing":{"token_ms":42.5,"total_ms":156.25},
                "finish_reason":null,"finished":false})
        );
        let err = ServerMessage::Error(ErrorMessage {
            error: ErrorKind::ContextLengthExceeded,
            message: "too long".into(),
            recoverable: true,
            recovery_action: RecoveryAction::ReducePrompt,
            request_id: Some("gen_1".into()),
        });
        let v: serde_json::Value = serde_json::from_str(&err.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"error","error":"context_length_exceeded","message":"too long",
                "recoverable":true,"recovery_action":"reduce_prompt","request_id":"gen_1"})
        );
        let status = ServerMessage::Status(Status {
            operation: "model_loading".into(),
            progress: 67,
            message: "Loading".into(),
            eta_seconds: Some(3.5),
        });
        let v: serde_json::Value = serde_json::from_str(&status.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"status","operation":"model_loading","progress":67,
                "message":"Loading","eta_seconds":3.5})
        );
    }
}
