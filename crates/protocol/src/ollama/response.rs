//! What Ollama's endpoints answer, with Ollama's field names and units: generation lines for
//! `/api/chat` and `/api/generate` (durations in integer nanoseconds, `created_at` RFC 3339),
//! embeddings, pull progress, `/api/version` and the `{"error": "..."}` body.

use std::time::Duration;

use serde::Serialize;

use crate::generation::FinishReason;
use crate::tools::ToolCall;

/// A duration in Ollama's unit: whole nanoseconds (saturating, past 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `done_reason` of a final line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DoneReason {
    Stop,
    Length,
    /// A request without a prompt or messages loaded the model.
    Load,
    /// A request without a prompt or messages, with `keep_alive: 0`, unloaded it.
    Unload,
}

impl From<FinishReason> for DoneReason {
    /// Ollama has no "cancelled": a generation the client stopped ends as `stop` (its client
    /// has usually gone by then anyway).
    fn from(r: FinishReason) -> Self {
        match r {
            FinishReason::Stop | FinishReason::Cancelled => DoneReason::Stop,
            FinishReason::Length => DoneReason::Length,
        }
    }
}

/// The statistics on a final line. Durations are nanoseconds ([`nanos`]); tokens per second
/// is `eval_count / eval_duration * 1e9`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Metrics {
    /// From receiving the request to the last token.
    pub total_duration: u64,
    /// Loading the model (0 when it was loaded already).
    pub load_duration: u64,
    /// The whole prompt, cached tokens included (Ollama's count since 0.30).
    pub prompt_eval_count: u32,
    /// Prompt tokens the prompt cache served instead of prefill (omitted when none).
    #[serde(skip_serializing_if = "is_zero")]
    pub prompt_eval_cached_count: u32,
    pub prompt_eval_duration: u64,
    pub eval_count: u32,
    pub eval_duration: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One line of `/api/chat`: a streamed piece (`done: false`), or the final line with
/// `done_reason` and [`Metrics`]; without streaming, the final line carries the whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatResponse {
    pub model: String,
    /// RFC 3339.
    pub created_at: String,
    pub message: ReplyMessage,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<DoneReason>,
    #[serde(flatten)]
    pub metrics: Option<Metrics>,
}

/// The assistant's message on a `/api/chat` line: its text, its thinking (with `think`) and
/// its tool calls, each left out when empty as Ollama leaves them out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplyMessage {
    pub role: &'static str,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// A streamed `/api/chat` line is the same object as the final one.
pub type ChatChunk = ChatResponse;

impl ChatResponse {
    /// A streamed piece of the assistant's answer.
    pub fn chunk(model: &str, created_at: &str, content: impl Into<String>) -> Self {
        Self {
            model: model.to_owned(),
            created_at: created_at.to_owned(),
            message: ReplyMessage {
                role: "assistant",
                content: content.into(),
                thinking: None,
                tool_calls: Vec::new(),
            },
            done: false,
            done_reason: None,
            metrics: None,
        }
    }

    /// The final line: `content` is empty when streaming, the whole answer otherwise; a
    /// load or unload has no metrics.
    pub fn done(
        model: &str,
        created_at: &str,
        content: impl Into<String>,
        reason: DoneReason,
        metrics: Option<Metrics>,
    ) -> Self {
        Self {
            done: true,
            done_reason: Some(reason),
            metrics,
            ..Self::chunk(model, created_at, content)
        }
    }
}

/// One line of `/api/generate`, like [`ChatResponse`] with the text in `response`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerateResponse {
    pub model: String,
    pub created_at: String,
    pub response: String,
    /// The model's thinking, with `think: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<DoneReason>,
    /// Token ids of the conversation, to send back as `context` (not in raw mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Vec<u32>>,
    #[serde(flatten)]
    pub metrics: Option<Metrics>,
}

pub type GenerateChunk = GenerateResponse;

impl GenerateResponse {
    pub fn chunk(model: &str, created_at: &str, response: impl Into<String>) -> Self {
        Self {
            model: model.to_owned(),
            created_at: created_at.to_owned(),
            response: response.into(),
            thinking: None,
            done: false,
            done_reason: None,
            context: None,
            metrics: None,
        }
    }

    pub fn done(
        model: &str,
        created_at: &str,
        response: impl Into<String>,
        reason: DoneReason,
        metrics: Option<Metrics>,
    ) -> Self {
        Self {
            done: true,
            done_reason: Some(reason),
            metrics,
            ..Self::chunk(model, created_at, response)
        }
    }
}

/// `/api/embed`'s answer. The statistics are there whenever vectors were computed (the Vercel
/// AI SDK's Ollama provider requires `load_duration`, even when the model was loaded already:
/// then it is the time taken to find it); a load-only request answers `{"model",
/// "embeddings": []}` as Ollama does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbedResponse {
    pub model: String,
    pub embeddings: Vec<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_duration: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_duration: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_eval_count: Option<u32>,
}

/// `/api/embeddings`' answer (empty for a load-only request).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingsResponse {
    pub embedding: Vec<f32>,
}

/// One line of `/api/pull` progress; `{"status": "success"}` ends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProgressLine {
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
}

impl ProgressLine {
    pub fn status(status: impl Into<String>) -> Self {
        Self {
            status: status.into(),
            digest: None,
            total: None,
            completed: None,
        }
    }
}

/// `/api/version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionResponse {
    pub version: String,
}

/// Ollama's error body: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn metrics() -> Metrics {
        Metrics {
            total_duration: 4_883_583_458,
            load_duration: 1_334_875,
            prompt_eval_count: 26,
            prompt_eval_cached_count: 0,
            prompt_eval_duration: 342_546_000,
            eval_count: 282,
            eval_duration: 4_535_599_000,
        }
    }

    /// What goes on the wire, read back (so `f32`s compare as the text they are written as).
    fn wire<T: Serialize>(v: &T) -> serde_json::Value {
        serde_json::from_str(&serde_json::to_string(v).unwrap()).unwrap()
    }

    #[test]
    fn chat_lines_match_the_docs() {
        let at = "2023-08-04T19:22:45.499127Z";
        assert_eq!(
            wire(&ChatChunk::chunk("llama3.2", at, "The")),
            json!({"model": "llama3.2", "created_at": at,
                   "message": {"role": "assistant", "content": "The"}, "done": false})
        );
        assert_eq!(
            wire(&ChatResponse::done(
                "llama3.2",
                at,
                "",
                DoneReason::Stop,
                Some(metrics())
            )),
            json!({"model": "llama3.2", "created_at": at,
                   "message": {"role": "assistant", "content": ""}, "done_reason": "stop",
                   "done": true, "total_duration": 4883583458u64, "load_duration": 1334875,
                   "prompt_eval_count": 26, "prompt_eval_duration": 342546000,
                   "eval_count": 282, "eval_duration": 4535599000u64})
        );
        assert_eq!(
            wire(&ChatResponse::done(
                "llama3.2",
                at,
                "",
                DoneReason::Load,
                None
            )),
            json!({"model": "llama3.2", "created_at": at,
                   "message": {"role": "assistant", "content": ""}, "done_reason": "load",
                   "done": true})
        );
    }

    #[test]
    fn generate_lines_match_the_docs() {
        let at = "2023-08-04T19:22:45.499127Z";
        assert_eq!(
            wire(&GenerateChunk::chunk("llama3.2", at, "The")),
            json!({"model": "llama3.2", "created_at": at, "response": "The", "done": false})
        );
        let m = Metrics {
            total_duration: 10_706_818_083,
            load_duration: 6_338_219_291,
            prompt_eval_count: 26,
            prompt_eval_cached_count: 0,
            prompt_eval_duration: 130_079_000,
            eval_count: 259,
            eval_duration: 4_232_710_000,
        };
        let done = GenerateResponse {
            context: Some(vec![1, 2, 3]),
            ..GenerateResponse::done("llama3.2", at, "", DoneReason::Stop, Some(m))
        };
        assert_eq!(
            wire(&done),
            json!({"model": "llama3.2", "created_at": at, "response": "", "done": true,
                   "done_reason": "stop", "context": [1, 2, 3],
                   "total_duration": 10706818083u64, "load_duration": 6338219291u64,
                   "prompt_eval_count": 26, "prompt_eval_duration": 130079000,
                   "eval_count": 259, "eval_duration": 4232710000u64})
        );
        assert_eq!(
            wire(&GenerateResponse::done(
                "llama3.2",
                at,
                "",
                DoneReason::Unload,
                None
            )),
            json!({"model": "llama3.2", "created_at": at, "response": "", "done": true,
                   "done_reason": "unload"})
        );
    }

    #[test]
    fn durations_are_integer_nanoseconds() {
        assert_eq!(nanos(Duration::from_millis(1500)), 1_500_000_000);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
        assert_eq!(DoneReason::from(FinishReason::Length), DoneReason::Length);
        assert_eq!(DoneReason::from(FinishReason::Cancelled), DoneReason::Stop);
    }

    #[test]
    fn embeddings_progress_version_and_error_shapes() {
        let e = EmbedResponse {
            model: "all-minilm".into(),
            embeddings: vec![vec![0.010071029, -0.0017594862]],
            total_duration: Some(14_143_917),
            load_duration: Some(1_019_500),
            prompt_eval_count: Some(8),
        };
        assert_eq!(
            wire(&e),
            json!({"model": "all-minilm", "embeddings": [[0.010071029, -0.0017594862]],
                   "total_duration": 14143917, "load_duration": 1019500, "prompt_eval_count": 8})
        );
        let load = EmbedResponse {
            embeddings: vec![],
            total_duration: None,
            load_duration: None,
            prompt_eval_count: None,
            ..e
        };
        assert_eq!(
            wire(&load),
            json!({"model": "all-minilm", "embeddings": []})
        );
        assert_eq!(
            wire(&EmbeddingsResponse {
                embedding: vec![0.5, -0.25]
            }),
            json!({"embedding": [0.5, -0.25]})
        );
        assert_eq!(
            wire(&ProgressLine::status("pulling manifest")),
            json!({"status": "pulling manifest"})
        );
        let pulling = ProgressLine {
            digest: Some("digestname".into()),
            total: Some(2_142_590_208),
            completed: Some(241_970),
            ..ProgressLine::status("pulling digestname")
        };
        assert_eq!(
            wire(&pulling),
            json!({"status": "pulling digestname", "digest": "digestname",
                   "total": 2142590208u64, "completed": 241970})
        );
        assert_eq!(
            wire(&VersionResponse {
                version: "0.5.1".into()
            }),
            json!({"version": "0.5.1"})
        );
        assert_eq!(
            wire(&ErrorBody {
                error: "boom".into()
            }),
            json!({"error": "boom"})
        );
    }
}
