//! The OpenAI HTTP API as Hearth serves it: request bodies for `/v1/chat/completions` and
//! `/v1/completions`, their responses and SSE chunks, `/v1/models`, and OpenAI's error body.
//! Requests are parsed leniently (unknown fields ignored) and validated strictly into
//! [`ChatRequest`] / [`CompletionRequest`], which carry only what the engine needs.

use serde::{Deserialize, Serialize};

use crate::generation::{ParamError, RawParams, SamplingParams, StopField};
use crate::tools::ToolCall;
use crate::Usage;

mod chat;
pub use chat::{ChatCompletionBody, ChatRequest, ContentPart, MessageContent, WireMessage};

// ---------------------------------------------------------------------------------------------
// Requests (wire)

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `prompt` of `/v1/completions`: a string or a one-element list of strings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum PromptField {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CompletionBody {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: PromptField,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default, alias = "repeat_penalty")]
    pub repetition_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<StopField>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub best_of: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub logprobs: Option<i64>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Hearth extension: `auto`, `none`, `ngram` or `draft` speculation for this request.
    #[serde(default)]
    pub speculative: Option<String>,
    #[serde(default)]
    pub suffix: Option<String>,
}

/// OpenAI's default `max_tokens` for `/v1/completions`.
pub const COMPLETIONS_DEFAULT_MAX_TOKENS: u32 = 16;

/// How a request failed to parse or validate, in OpenAI's terms.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub message: String,
    pub param: Option<String>,
}

impl From<ParamError> for RequestError {
    fn from(e: ParamError) -> Self {
        Self {
            message: e.message,
            param: Some(e.param.to_owned()),
        }
    }
}

impl RequestError {
    pub fn new(param: &str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            param: Some(param.to_owned()),
        }
    }
}

/// Parse a JSON body, turning serde's complaint into OpenAI's wording.
pub fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, RequestError> {
    serde_json::from_slice(body).map_err(|e| {
        let message = if e.is_syntax() || e.is_eof() {
            format!("We could not parse the JSON body of your request: {e}")
        } else {
            format!("Invalid request body: {e}")
        };
        RequestError {
            message,
            param: None,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Requests (validated)

/// A validated text completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: String,
    pub params: SamplingParams,
    pub stream: bool,
    pub include_usage: bool,
    pub echo: bool,
    pub logprobs: bool,
}

impl CompletionBody {
    pub fn validate(self, max_context: Option<u32>) -> Result<CompletionRequest, RequestError> {
        check_n(self.n)?;
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(RequestError::new(
                "best_of",
                "best_of other than 1 is not supported",
            ));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(RequestError::new("suffix", "suffix is not supported"));
        }
        let prompt = match self.prompt {
            PromptField::One(p) => p,
            PromptField::Many(mut v) if v.len() == 1 => v.remove(0),
            PromptField::Many(v) => {
                return Err(RequestError::new(
                    "prompt",
                    format!(
                        "exactly one prompt is supported per request, got {}",
                        v.len()
                    ),
                ))
            }
        };
        let logprobs = self.logprobs.is_some();
        if let Some(n) = self.logprobs {
            if !(0..=5).contains(&n) {
                return Err(RequestError::new(
                    "logprobs",
                    format!("logprobs must be between 0 and 5, got {n}"),
                ));
            }
        }
        let defaults = SamplingParams {
            max_tokens: Some(COMPLETIONS_DEFAULT_MAX_TOKENS),
            ..SamplingParams::default()
        };
        let raw = RawParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
            max_tokens: self.max_tokens,
            stop: self.stop,
            top_logprobs: self.logprobs,
            ignore_eos: self.ignore_eos,
            speculative: self.speculative.clone(),
        };
        let mut params = raw.validate(&defaults, max_context)?;
        if let (Some(ctx), None) = (max_context, self.max_tokens) {
            params.max_tokens = params.max_tokens.map(|m| m.min(ctx));
        }
        Ok(CompletionRequest {
            model: self.model,
            prompt,
            params,
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
            echo: self.echo.unwrap_or(false),
            logprobs,
        })
    }
}

pub(crate) fn check_n(n: Option<i64>) -> Result<(), RequestError> {
    match n {
        None | Some(1) => Ok(()),
        Some(n) => Err(RequestError::new(
            "n",
            format!("only n=1 is supported, got {n}"),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Responses

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelEntry {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// Hearth's extension, named as Ollama's `/api/show` names them: `completion`, then
    /// `vision` and `audio` where its projector takes them. Absent for a model another node
    /// serves, whose projector this node does not know.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<&'static str>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: CompletionUsage,
    pub timings: Timings,
}

/// Token counts as OpenAI reports them: the usual three, and how many prompt tokens the
/// prompt cache served (`prompt_tokens_details.cached_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CompletionUsage {
    #[serde(flatten)]
    pub usage: Usage,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: u32,
}

impl CompletionUsage {
    pub fn new(usage: Usage, cached_tokens: u32) -> Self {
        Self {
            usage,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: cached_tokens.min(usage.prompt_tokens),
            },
        }
    }
}

/// Where the time went, as llama-server reports it (`timings`), so clients and benchmarks
/// can tell the engine's own prefill from what the server adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Timings {
    /// Waiting for a free slot.
    pub queued_ms: f64,
    pub prompt_n: u32,
    /// Prompt tokens kept in the KV cache from the slot's previous generation, not prefilled
    /// again (llama-server's `cache_n`).
    pub cache_n: u32,
    /// Prefill: from taking a slot to the first sampled token.
    pub prompt_ms: f64,
    pub predicted_n: u32,
    /// From the first sampled token to the last.
    pub predicted_ms: f64,
    pub predicted_per_second: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// `null` when the turn is only tool calls, as OpenAI sends it.
    pub content: Option<String>,
    /// Always `null` (a local model refuses in its text), present as OpenAI sends it.
    pub refusal: Option<String>,
    /// Text between the model's thinking markers (llama-server's and DeepSeek's field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<CallOut>,
}

/// A tool call as OpenAI returns it: arguments as JSON text. Streamed, it carries its `index`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionOut {
    pub name: String,
    pub arguments: String,
}

impl CallOut {
    pub fn new(call: &ToolCall, index: Option<u32>) -> Self {
        Self {
            index,
            id: call.id.clone(),
            kind: "function",
            function: FunctionOut {
                name: call.name.clone(),
                arguments: call.arguments.to_string(),
            },
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    /// Present (as `null`) on every chunk when usage was asked for, as OpenAI does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<CompletionUsage>>,
    /// On the chunk that carries the finish reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<CallOut>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<TextChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<CompletionUsage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<TextLogprobs>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<std::collections::BTreeMap<String, f32>>,
    pub text_offset: Vec<usize>,
}

/// OpenAI's error body: `{"error":{"message","type","param","code"}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ErrorBody {
    pub fn new(
        kind: &'static str,
        code: Option<&'static str>,
        param: Option<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            error: ErrorDetail {
                message: message.into(),
                kind,
                param,
                code,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_defaults_and_rejections() {
        let r = parse_body::<CompletionBody>(br#"{"prompt":["Once"],"echo":true,"logprobs":2}"#)
            .unwrap()
            .validate(Some(1024))
            .unwrap();
        assert_eq!(r.prompt, "Once");
        assert_eq!(r.params.max_tokens, Some(COMPLETIONS_DEFAULT_MAX_TOKENS));
        assert!(r.echo && r.logprobs);
        for (body, param) in [
            (r#"{"prompt":["a","b"]}"#, "prompt"),
            (r#"{"prompt":"a","logprobs":9}"#, "logprobs"),
            (r#"{"prompt":"a","suffix":"z"}"#, "suffix"),
            (r#"{"prompt":"a","best_of":3}"#, "best_of"),
        ] {
            let e = parse_body::<CompletionBody>(body.as_bytes())
                .unwrap()
                .validate(Some(1024))
                .expect_err(body);
            assert_eq!(e.param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn error_body_shape() {
        let v = serde_json::to_value(ErrorBody::new(
            "invalid_request_error",
            Some("model_not_found"),
            Some("model".into()),
            "no such model",
        ))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error":{"message":"no such model","type":"invalid_request_error",
                "param":"model","code":"model_not_found"}})
        );
    }

    #[test]
    fn chunk_usage_is_null_only_when_asked_for() {
        let chunk = ChatChunk {
            id: "c".into(),
            object: "chat.completion.chunk",
            created: 1,
            model: "m".into(),
            choices: vec![],
            usage: Some(None),
            timings: None,
        };
        let v = serde_json::to_value(&chunk).unwrap();
        assert!(v.get("usage").unwrap().is_null());
        let v = serde_json::to_value(ChatChunk {
            usage: None,
            ..chunk
        })
        .unwrap();
        assert!(v.get("usage").is_none());
    }
}
