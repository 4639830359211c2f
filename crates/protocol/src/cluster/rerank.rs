//! Hearth's own rerank between Hearth nodes (never sent to a TealeNet peer): a node whose
//! reranker only a peer has loaded asks it to score documents against a query
//! (`hearthRerank`), and the peer answers with one score per document, in order, or why not
//! (`hearthRerankResult`).

use serde::{Deserialize, Serialize};

use super::PeerUuid;

/// Score `documents` against `query` with the peer's `model`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HearthRerank {
    #[serde(rename = "requestID")]
    pub request_id: PeerUuid,
    pub model: String,
    pub query: String,
    pub documents: Vec<String>,
}

/// The scores of a [`HearthRerank`], or why there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HearthRerankResult {
    #[serde(rename = "requestID")]
    pub request_id: PeerUuid,
    /// One per document, in the request's order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<Vec<f32>>,
    /// Tokens of every query-document pair together.
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What kind of refusal `error` is, as a rerank door words it: `context_length_exceeded`,
    /// `invalid_input`, `model_not_supported`, `busy` or `unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}
