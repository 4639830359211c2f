//! What the Messages door sends: the message (content blocks, `stop_reason`, `usage` with the
//! prompt-cache fields), its SSE events in Anthropic's order, `count_tokens`' answer, and
//! Anthropic's error body.

use serde::Serialize;
use serde_json::Value;

/// A whole answer (`"type": "message"`), also the `message` of `message_start`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: String,
    pub content: Vec<Block>,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

impl Message {
    pub fn new(id: String, model: String) -> Self {
        Self {
            id,
            kind: "message",
            role: "assistant",
            model,
            content: vec![],
            stop_reason: None,
            stop_sequence: None,
            usage: Usage::default(),
        }
    }
}

/// A content block of the answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
        /// Anthropic signs thinking so that it can be sent back; Hearth's is unsigned.
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// Token counts as Anthropic reports them: `input_tokens` are the prompt tokens computed for
/// this request, `cache_read_input_tokens` those served from the prompt cache (their sum is
/// the prompt). Hearth writes no cache entries on request, so creation is always 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub cache_creation_input_tokens: u32,
    pub cache_read_input_tokens: u32,
}

impl Usage {
    /// From the engine's prompt and answer counts and the prompt tokens its cache served.
    pub fn new(prompt_tokens: u32, output_tokens: u32, cached: u32) -> Self {
        let cached = cached.min(prompt_tokens);
        Self {
            input_tokens: prompt_tokens - cached,
            output_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    }
}

/// A change to the block being streamed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta { text: String },
    ThinkingDelta { thinking: String },
    SignatureDelta { signature: String },
    InputJsonDelta { partial_json: String },
}

/// `message_delta`'s `delta`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageDelta {
    pub stop_reason: &'static str,
    pub stop_sequence: Option<String>,
}

/// One SSE event of a streamed answer; the SSE `event:` name is its `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart { message: Message },
    ContentBlockStart { index: usize, content_block: Block },
    ContentBlockDelta { index: usize, delta: BlockDelta },
    ContentBlockStop { index: usize },
    MessageDelta { delta: MessageDelta, usage: Usage },
    MessageStop,
    Ping,
    Error { error: ErrorDetail },
}

/// `POST /v1/messages/count_tokens`' answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TokenCount {
    pub input_tokens: u32,
}

/// Anthropic's error body: `{"type": "error", "error": {"type": ..., "message": ...}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

impl ErrorBody {
    /// The error for an HTTP status, typed as Anthropic types its errors.
    pub fn for_status(status: u16, message: impl Into<String>) -> Self {
        Self {
            kind: "error",
            error: ErrorDetail::for_status(status, message),
        }
    }
}

impl ErrorDetail {
    pub fn for_status(status: u16, message: impl Into<String>) -> Self {
        let kind = match status {
            400 | 405 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            _ => "api_error",
        };
        Self {
            kind,
            message: message.into(),
        }
    }
}
