//! What the node sends on the signed-challenge socket (`protocols/auth-ws.md`, the reference's
//! forms from NOTES.md): one typed [`ServerMessage`] per text frame, written with the
//! `timestamp` (ms since the Unix epoch) every message carries.

use serde::{Serialize, Serializer};

use super::WireId;

/// The `details` of an entry: Ollama's own object, shared with `/api/tags`.
pub use crate::ollama::ModelDetails;

impl Serialize for WireId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            WireId::Text(t) => s.serialize_str(t),
            WireId::Number(n) => n.serialize(s),
        }
    }
}

/// Error codes of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    AuthFailed,
    AuthTimeout,
    RateLimited,
    InvalidModel,
    ModelLoading,
    GenerationFailed,
    InvalidRequest,
    InternalError,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// 32 random bytes as 64 hex digits, to sign.
    Challenge {
        challenge: String,
    },
    AuthResult(AuthResult),
    StreamStart {
        id: WireId,
        model: String,
    },
    StreamToken {
        id: WireId,
        token: String,
    },
    StreamEnd(StreamEnd),
    ModelsResult {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<WireId>,
        models: Vec<ModelEntry>,
    },
    Pong {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<WireId>,
    },
    /// The reference server's acknowledgement of a `stop`.
    Ack {
        action: &'static str,
        #[serde(rename = "requestId")]
        request_id: WireId,
        /// The `stop` message's own id, when it had one.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<WireId>,
    },
    Error(ErrorMessage),
}

impl ServerMessage {
    /// The text frame, stamped with `timestamp`.
    pub fn to_text(&self, timestamp: u64) -> String {
        #[derive(Serialize)]
        struct Stamped<'a> {
            #[serde(flatten)]
            message: &'a ServerMessage,
            timestamp: u64,
        }
        serde_json::to_string(&Stamped {
            message: self,
            timestamp,
        })
        .unwrap_or_else(|e| {
            // Not reached (every field serializes); still an answer in the protocol.
            serde_json::json!({"type": "error", "error": format!("encoding a reply failed: {e}"),
                "code": "internal_error", "timestamp": timestamp})
            .to_string()
        })
    }

    /// An `error` about `id` (when the message had one).
    pub fn error(code: ErrorCode, message: impl Into<String>, id: Option<&WireId>) -> Self {
        ServerMessage::Error(ErrorMessage {
            error: message.into(),
            code,
            id: id.cloned(),
            retry_after: None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthResult {
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_attempts: Option<u32>,
    /// Seconds until the client may try again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl AuthResult {
    pub fn failed(error: impl Into<String>) -> Self {
        Self {
            success: false,
            client_id: None,
            error: Some(error.into()),
            remaining_attempts: None,
            retry_after: None,
        }
    }
}

/// How a generation ended. A generation cut short without counts (shutdown) carries only
/// `finishReason` and `isCancelled`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamEnd {
    pub id: WireId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// Milliseconds from submission.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_time: Option<u64>,
    pub finish_reason: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_cancelled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorMessage {
    pub error: String,
    pub code: ErrorCode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<WireId>,
    /// Seconds, on `rate_limited`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

/// One model of `models_result`, in the shape of Ollama's `/api/tags` entries (the reference
/// server passes those on, and its client library reads `name`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelEntry {
    pub name: String,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<ModelDetails>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn wire(m: &ServerMessage) -> Value {
        serde_json::from_str(&m.to_text(42)).unwrap()
    }

    #[test]
    fn messages_have_the_documents_shapes() {
        let id = WireId::Text("req-123".into());
        assert_eq!(
            wire(&ServerMessage::StreamToken {
                id: id.clone(),
                token: " world".into()
            }),
            json!({"type": "stream_token", "id": "req-123", "token": " world", "timestamp": 42})
        );
        assert_eq!(
            wire(&ServerMessage::error(
                ErrorCode::InvalidModel,
                "Invalid model specified",
                None
            )),
            json!({"type": "error", "error": "Invalid model specified", "code": "invalid_model", "timestamp": 42})
        );
        assert_eq!(
            wire(&ServerMessage::StreamEnd(StreamEnd {
                id: WireId::Number(7.into()),
                total_tokens: Some(42),
                prompt_tokens: Some(3),
                elapsed_time: Some(1234),
                finish_reason: "stop".into(),
                is_cancelled: false,
            })),
            json!({"type": "stream_end", "id": 7, "totalTokens": 42, "promptTokens": 3,
                   "elapsedTime": 1234, "finishReason": "stop", "timestamp": 42})
        );
        assert_eq!(
            wire(&ServerMessage::AuthResult(AuthResult {
                remaining_attempts: Some(4),
                ..AuthResult::failed("bad signature")
            })),
            json!({"type": "auth_result", "success": false, "error": "bad signature",
                   "remainingAttempts": 4, "timestamp": 42})
        );
        assert_eq!(
            wire(&ServerMessage::Ack {
                action: "stop",
                request_id: id,
                id: None,
            }),
            json!({"type": "ack", "action": "stop", "requestId": "req-123", "timestamp": 42})
        );
        assert_eq!(
            wire(&ServerMessage::Pong { id: None }),
            json!({"type": "pong", "timestamp": 42})
        );
    }
}
