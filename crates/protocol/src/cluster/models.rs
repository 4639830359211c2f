//! Model sharing between peers: `modelQuery` / `modelQueryResponse` (who has a model, and
//! its size), then `modelTransferRequest`, the `modelTransferChunk`s (1 MiB of a file each,
//! base64, with its byte offset) and `modelTransferComplete`.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::ids::PeerUuid;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelQuery {
    #[serde(rename = "modelID")]
    pub model_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelQueryResponse {
    #[serde(rename = "modelID")]
    pub model_id: String,
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_size_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelTransferRequest {
    #[serde(rename = "transferID")]
    pub transfer_id: PeerUuid,
    #[serde(rename = "modelID")]
    pub model_id: String,
}

/// One chunk of one file. The reference sets `isLastChunk` only on the last chunk of the last
/// file (the document says per file): a file ends when the next one starts or the transfer
/// completes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelTransferChunk {
    #[serde(rename = "transferID")]
    pub transfer_id: PeerUuid,
    pub file_name: String,
    pub offset: u64,
    /// Base64 of the chunk's bytes, as on the wire ([`ModelTransferChunk::bytes`] decodes it).
    pub data: String,
    #[serde(default)]
    pub is_last_chunk: bool,
}

impl ModelTransferChunk {
    /// The chunk's bytes; `None` when `data` is not base64.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .ok()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelTransferComplete {
    #[serde(rename = "transferID")]
    pub transfer_id: PeerUuid,
    #[serde(rename = "modelID")]
    pub model_id: String,
}
