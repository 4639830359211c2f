//! Model sharing between peers: `modelQuery` / `modelQueryResponse` (who has a model, and
//! its size), then `modelTransferRequest`, the `modelTransferChunk`s (1 MiB of a file each,
//! base64, with its byte offset in its file) and `modelTransferComplete`; a model of several
//! files (a split GGUF's shards) comes one file after another. Hearth adds the SHA-256 of each
//! file to the answer (and the model's vision projector, with its own), and one file, a byte
//! range and the offer to take binary chunks to the request; TealeNet peers ignore them.

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
    /// Hearth's extension: the file's SHA-256 (lowercase hex), which the receiver checks. For a
    /// model of one file only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Hearth's extension: a model of several files (a split GGUF) lists each, in the order a
    /// whole transfer sends them; `totalSizeBytes` is their sum. Empty for a model of one file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ModelFileOffer>,
    /// Hearth's extension: the vision projector that goes with the model, named
    /// `mmproj-<the model's (first) file>` whatever its name at the peer; a transfer of it
    /// names it as `fileName`. Not counted in `totalSizeBytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projector: Option<ModelFileOffer>,
}

/// One file of a model of several, in a [`ModelQueryResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelFileOffer {
    pub file_name: String,
    pub size_bytes: u64,
    /// Lowercase hex.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelTransferRequest {
    #[serde(rename = "transferID")]
    pub transfer_id: PeerUuid,
    #[serde(rename = "modelID")]
    pub model_id: String,
    /// Hearth's extension: only this file of a model of several (one of the answer's
    /// `files`). Without it, every file of the model, one after another.
    #[serde(rename = "fileName", default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// Hearth's extension: only `length` bytes from `offset` of the model's file (a transfer
    /// resumed, or one range of several sources); with `fileName`, of that file. Without them,
    /// the whole file. A model of several files asked for without `fileName` comes whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// Hearth's extension: the chunks may come as [`super::HearthChunk`]s of this layout
    /// version ([`super::BINARY_CHUNK_VERSION`]; 0: not asked). A Hearth node asks; a Hearth
    /// sender over the encrypted transport that writes that version answers so, and any other
    /// sends the document's chunks.
    #[serde(rename = "binaryChunks", default, skip_serializing_if = "is_zero")]
    pub binary_chunks: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    /// The chunk's bytes; `None` when `data` is not base64 (standard alphabet, padded).
    pub fn bytes(&self) -> Option<Vec<u8>> {
        base64_simd::STANDARD.decode_to_vec(&self.data).ok()
    }

    /// `bytes` as a chunk's `data`.
    pub fn encode(bytes: &[u8]) -> String {
        base64_simd::STANDARD.encode_to_string(bytes)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelTransferComplete {
    #[serde(rename = "transferID")]
    pub transfer_id: PeerUuid,
    #[serde(rename = "modelID")]
    pub model_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: &str) -> ModelTransferChunk {
        ModelTransferChunk {
            transfer_id: PeerUuid::from_bytes([2; 16]),
            file_name: "m.gguf".into(),
            offset: 0,
            data: data.into(),
            is_last_chunk: false,
        }
    }

    #[test]
    fn a_chunks_data_is_standard_padded_base64_both_ways() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let data = ModelTransferChunk::encode(&bytes);
        assert_eq!(
            data,
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes)
        );
        assert_eq!(chunk(&data).bytes(), Some(bytes));
        assert_eq!(chunk("QUJD").bytes().as_deref(), Some(&b"ABC"[..]));
        for bad in ["QUI", "QU!D", "QUJD\n", "-_8=", "QQ=="[..3].into()] {
            assert_eq!(chunk(bad).bytes(), None, "{bad:?}");
        }
    }
}
