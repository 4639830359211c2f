//! Rerank through a Hearth peer: when the reranker a request names is loaded on a peer and not
//! here, the rerank door asks that peer (`hearthRerank`, over the encrypted connection; never
//! a TealeNet peer, whose protocol has no such message) and waits for its scores
//! (`hearthRerankResult`). A peer serves one with its own engine, beside its generations, as
//! its own rerank door would. Only the query and the documents travel.

use std::time::Duration;

use hearth_engine::{EmbedError, EmbedFailure, SubmitError};
use hearth_protocol::cluster::{self as cm, HearthRerank, HearthRerankResult, Message, PeerUuid};
use hearth_protocol::limits::MAX_CLUSTER_FRAME_BYTES;
use hearth_protocol::ModelId;
use tokio::sync::oneshot;

use super::asks::Pending;
use super::context::Context;

/// Reranks served for one peer at once: more are refused at once as `busy`.
pub(crate) const SERVED_AT_ONCE: usize = 2;

/// How long a peer may take to score one request.
const PEER_RERANK_WAIT: Duration = Duration::from_secs(120);

/// Why a peer gave no scores.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerRerankError {
    /// `code`: the kind of refusal, as [`HearthRerankResult::code`] says it.
    #[error("the peer serving {model} could not rank: {why}")]
    Refused {
        model: String,
        why: String,
        code: Option<String>,
    },
    #[error(
        "the request is too large to send to a peer ({bytes} bytes; a cluster message holds {max})"
    )]
    TooLarge { bytes: usize, max: usize },
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
        let ask = Message::HearthRerank(HearthRerank {
            request_id: id,
            model: model.to_owned(),
            query: query.to_owned(),
            documents: documents.to_vec(),
        });
        // A frame over the limit would close the whole connection at the peer.
        let bytes = cm::encode(&ask, cm::Shape::Wrapped).len();
        let max = MAX_CLUSTER_FRAME_BYTES - 4096;
        if bytes > max {
            return Some(Err(PeerRerankError::TooLarge { bytes, max }));
        }
        let (tx, rx) = oneshot::channel();
        // Waited for until this call ends, however it ends (a client that goes away too).
        let _waiting = Waiting::new(&self.reranks, key, tx);
        let gone = || PeerRerankError::Gone {
            model: model.to_owned(),
        };
        let answer = async {
            outbox.send(ask).await.map_err(|_| gone())?;
            tokio::select! {
                answer = rx => answer.map_err(|_| gone()),
                // The connection ended: no answer can come.
                () = outbox.closed() => Err(gone()),
            }
        };
        let answer = tokio::time::timeout(PEER_RERANK_WAIT, answer).await;
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
                    code: result.code,
                }),
            },
        })
    }
}

/// A request id waited for, forgotten when dropped.
struct Waiting<'a> {
    pending: &'a Pending,
    key: String,
}

impl<'a> Waiting<'a> {
    fn new(pending: &'a Pending, key: String, tx: oneshot::Sender<HearthRerankResult>) -> Self {
        pending.wait(key.clone(), tx);
        Self { pending, key }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.pending.forget(&self.key);
    }
}

/// A refusal of `ask`, with its kind.
pub(crate) fn refused(ask: &HearthRerank, why: String, code: &str) -> HearthRerankResult {
    HearthRerankResult {
        request_id: ask.request_id.clone(),
        scores: None,
        prompt_tokens: 0,
        error: Some(why),
        code: Some(code.to_owned()),
    }
}

/// A peer's `hearthRerank`, scored by the reranker loaded here (one not loaded is refused: the
/// peer asked because this node's heartbeat listed it).
pub(crate) async fn serve(state: &Context, ask: HearthRerank) -> HearthRerankResult {
    let model = ModelId(ask.model.clone());
    // Marked busy while it runs, so the model is neither reaped nor evicted under it.
    let Some((engine, _in_use)) = state.host.embedding(&model) else {
        return refused(
            &ask,
            format!("{model} is not loaded on this node"),
            "unavailable",
        );
    };
    match engine.rerank(&ask.query, &ask.documents).await {
        Ok(ranking) => HearthRerankResult {
            request_id: ask.request_id.clone(),
            scores: Some(ranking.scores),
            prompt_tokens: ranking.prompt_tokens,
            error: None,
            code: None,
        },
        Err(e) => {
            let code = match &e {
                EmbedFailure::Embed(EmbedError::TooLong { .. }) => "context_length_exceeded",
                EmbedFailure::Embed(EmbedError::EmptyInput { .. } | EmbedError::NoInput)
                | EmbedFailure::Submit(SubmitError::Prompt(_)) => "invalid_input",
                EmbedFailure::Embed(EmbedError::NotReranker(_) | EmbedError::Unsupported(_)) => {
                    "model_not_supported"
                }
                EmbedFailure::Submit(SubmitError::QueueFull { .. }) => "busy",
                _ => "unavailable",
            };
            refused(&ask, e.to_string(), code)
        }
    }
}
