//! Inference between peers: `inferenceRequest` (an OpenAI chat request inside), the
//! provider's `inferenceChunk`s (OpenAI chunks), then `inferenceComplete` or `inferenceError`.
//!
//! The request inside is kept as the JSON object the consumer sent: it is an OpenAI body, and
//! the OpenAI door's own decoder ([`crate::openai`]) reads it where it is served, so the rules
//! stay the same for every door. Chunks from peers are read leniently (`choices: []` with
//! `usage`, `delta: {}`, extra fields); Hearth writes every field the Swift app needs.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::ids::PeerUuid;
use crate::Usage;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceRequest {
    #[serde(rename = "requestID")]
    pub request_id: PeerUuid,
    /// An OpenAI chat completion request, as sent.
    pub request: Map<String, Value>,
    /// Existing providers always stream, whatever this says.
    #[serde(default = "yes")]
    pub streaming: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceChunk {
    #[serde(rename = "requestID")]
    pub request_id: PeerUuid,
    pub chunk: Chunk,
    /// Hearth's extension between Hearth nodes: the tokens behind this chunk's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hearth_tokens: Option<u32>,
}

/// An OpenAI `chat.completion.chunk`, with what peers may leave out defaulted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    #[serde(default)]
    pub id: String,
    #[serde(default = "chunk_object")]
    pub object: String,
    /// Seconds since the Unix epoch; an integer on the wire.
    #[serde(default, deserialize_with = "whole_seconds")]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

fn chunk_object() -> String {
    "chat.completion.chunk".into()
}

/// `created` as an integer, also when a peer writes it as a float.
fn whole_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v >= 0.0 {
        // Saturates far beyond any date.
        Ok(v as u64)
    } else {
        Err(serde::de::Error::custom(format!(
            "created {v} is not a time"
        )))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: ChunkDelta,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

impl Chunk {
    /// The text this chunk adds (all choices' content, in order).
    pub fn text(&self) -> String {
        self.choices
            .iter()
            .filter_map(|c| c.delta.content.as_deref())
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceComplete {
    #[serde(rename = "requestID")]
    pub request_id: PeerUuid,
    /// The Rust node's extra, which Hearth sends too: tokens generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<u32>,
    /// Hearth's extension between Hearth nodes: why it ended, the usage and the timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hearth_done: Option<crate::worker::TaskDone>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceError {
    #[serde(rename = "requestID")]
    pub request_id: PeerUuid,
    #[serde(default)]
    pub error_message: String,
    /// The Rust node's extra. It drops an error whose code is not one of these six, so Hearth
    /// writes only these; a code a peer invents reads as none.
    #[serde(
        default,
        deserialize_with = "known_code",
        skip_serializing_if = "Option::is_none"
    )]
    pub code: Option<ErrorCode>,
    /// Hearth's extra, for a Hearth peer that asked: the worker protocol's code for the
    /// failure when `code` says too little (`invalid_task`, `context_length_exceeded`: the
    /// request itself was at fault, the client's to fix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hearth_code: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    ModelNotLoaded,
    QueueFull,
    Unavailable,
    InternalError,
    Timeout,
    Cancelled,
}

impl ErrorCode {
    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ModelNotLoaded => "model_not_loaded",
            ErrorCode::QueueFull => "queue_full",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Cancelled => "cancelled",
        }
    }
}

fn known_code<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ErrorCode>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(v.and_then(|v| serde_json::from_value(v).ok()))
}

/// `hearthControl`: Hearth's own message, sent only to a Hearth peer inside the encrypted
/// transport: pause or resume the request `requestID` that peer is running for the sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HearthControl {
    #[serde(rename = "requestID")]
    pub request_id: PeerUuid,
    pub action: ControlAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    Pause,
    Resume,
}
