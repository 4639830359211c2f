//! Rerank through a Hearth peer: when the reranker a request names is loaded on a peer and not
//! here, the rerank door asks that peer (`hearthRerank`, over the encrypted connection; never
//! a TealeNet peer, whose protocol has no such message) and waits for its scores
//! (`hearthRerankResult`). A peer serves one with its own engine, beside its generations, as
//! its own rerank door would. Only the query and the documents travel.

use std::time::Duration;

use hearth_protocol::cluster::{HearthRerank, HearthRerankResult, Message, PeerUuid};
use hearth_protocol::ModelId;
use tokio::sync::oneshot;

use super::context::Context;

/// How long a peer may take to score one request.
const PEER_RERANK_WAIT: Duration = Duration::from_secs(120);

/// Why a peer gave no scores.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerRerankError {
    #[error("the peer serving {model} could not rank: {why}")]
    Refused { model: String, why: String },
    #[error("the peer serving {model} did not answer within {secs} s")]
    TimedOut { model: String, secs: u64 },
    #[error("the connection to the peer serving {model} ended before its answer")]
    Gone { model: String },
}

/// Scores from a peer, one per document, and the tokens of every pair together.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerRanking {
    pub scores: Vec<f32>,
    pub prompt_tokens: u32,
    /// The peer's name.
    pub peer: String,
}

impl Context {
    /// `documents` scored against `query` by the reranker `model` on a Hearth peer that has it
    /// loaded (the least busy); `None` when no connected Hearth peer has.
    pub async fn rerank_on_peer(
        &self,
        model: &str,
        query: &str,
        documents: &[String],
    ) -> Option<Result<PeerRanking, PeerRerankError>> {
        let (peer, outbox) = self.peers.hearth_outbox_for(model)?;
        let id = PeerUuid::from_bytes(*uuid::Uuid::new_v4().as_bytes());
        let key = id.as_str().to_ascii_uppercase();
        let (tx, rx) = oneshot::channel();
        self.reranks.wait(key.clone(), tx);
        let ask = Message::HearthRerank(HearthRerank {
            request_id: id,
            model: model.to_owned(),
            query: query.to_owned(),
            documents: documents.to_vec(),
        });
        let gone = || PeerRerankError::Gone {
            model: model.to_owned(),
        };
        let answer = async {
            outbox.send(ask).await.map_err(|_| gone())?;
            rx.await.map_err(|_| gone())
        };
        let answer = tokio::time::timeout(PEER_RERANK_WAIT, answer).await;
        self.reranks.forget(&key);
        Some(match answer {
            Err(_) => Err(PeerRerankError::TimedOut {
                model: model.to_owned(),
                secs: PEER_RERANK_WAIT.as_secs(),
            }),
            Ok(Err(e)) => Err(e),
            Ok(Ok(result)) => match (result.scores, result.error) {
                (Some(scores), None) if scores.len() == documents.len() => Ok(PeerRanking {
                    scores,
                    prompt_tokens: result.prompt_tokens,
                    peer,
                }),
                (_, why) => Err(PeerRerankError::Refused {
                    model: model.to_owned(),
                    why: why.unwrap_or_else(|| "its scores do not match the documents".into()),
                }),
            },
        })
    }
}

/// A peer's `hearthRerank`, scored by the reranker loaded here (one not loaded is refused: the
/// peer asked because this node's heartbeat listed it).
pub(crate) async fn serve(state: &Context, ask: HearthRerank) -> HearthRerankResult {
    let refused = |why: String| HearthRerankResult {
        request_id: ask.request_id.clone(),
        scores: None,
        prompt_tokens: 0,
        error: Some(why),
    };
    let model = ModelId(ask.model.clone());
    // Marked busy while it runs, so the model is neither reaped nor evicted under it.
    let Some((engine, _in_use)) = state.host.embedding(&model) else {
        return refused(format!("{model} is not loaded on this node"));
    };
    match engine.rerank(&ask.query, &ask.documents).await {
        Ok(ranking) => HearthRerankResult {
            request_id: ask.request_id.clone(),
            scores: Some(ranking.scores),
            prompt_tokens: ranking.prompt_tokens,
            error: None,
        },
        Err(e) => refused(e.to_string()),
    }
}
