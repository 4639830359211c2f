//! The embeddings side of a turn's retrieval. With an embedding model named in Settings
//! ([`SETTING`], `PATCH /api/node`), a document's passages get its vectors as soon as it is
//! attached ([`embed_missing`], in the background), and a turn gives those still without one
//! theirs (up to [`PER_TURN`]); the question gets one, and the passages nearest it by cosine
//! are fused with those BM25 found by reciprocal rank (RRF, k = [`RRF_K`]). The model is
//! loaded on demand, as the embeddings door loads it; when it cannot embed, words alone rank,
//! and the log says why.

use std::collections::HashMap;

use hearth_engine::EmbedInput;
use hearth_store::documents::Hit;

use crate::embeddings::{compute, EmbedProblem};
use crate::state::AppState;

/// The node setting naming the documents' embedding model.
pub(crate) const SETTING: &str = "documents_embedding_model";
/// Passages given vectors in one turn, at most: the rest wait for the background.
const PER_TURN: usize = 256;
/// Passages of a conversation given vectors in the background, at most (20 documents' worth).
const IN_BACKGROUND: usize = 20_000;
/// Inputs in one embedding request.
const BATCH: usize = 64;
/// Reciprocal rank fusion's constant: a passage at rank r of a list scores 1 / (k + r).
const RRF_K: f64 = 60.0;
/// Passages taken from the nearest by cosine.
const NEAREST: usize = 30;

/// `words` (BM25's passages, best first) fused with the passages nearest the question by the
/// embedding model named in Settings, and the model's name; `words` alone when none is named
/// or it cannot embed.
pub(super) async fn fused(
    state: &AppState,
    conversation_id: &str,
    question: &str,
    words: Vec<Hit>,
) -> (Vec<Hit>, Option<String>) {
    let model = match state.store.node_setting(SETTING).await {
        Ok(Some(model)) => model,
        Ok(None) => return (words, None),
        Err(e) => {
            tracing::warn!(error = %e, "the documents' embedding model could not be read");
            return (words, None);
        }
    };
    match nearest(state, conversation_id, question, &model).await {
        Ok(near) => (fuse(&[words, near]), Some(model)),
        Err(why) => {
            tracing::warn!(%model, %why, "passages ranked by their words alone");
            (words, None)
        }
    }
}

/// Give the conversation's passages without a vector of the model named in Settings theirs:
/// after a document is attached. Failures are only logged (a turn tries again).
pub(crate) async fn embed_missing(state: &AppState, conversation_id: &str) {
    let Ok(Some(model)) = state.store.node_setting(SETTING).await else {
        return;
    };
    if let Err(why) = vectors_for(state, conversation_id, &model, IN_BACKGROUND).await {
        tracing::warn!(%model, %why, "a document's passages were not embedded");
    }
}

/// Make the vectors of up to `most` of the conversation's passages that have none of `model`.
async fn vectors_for(
    state: &AppState,
    conversation_id: &str,
    model: &str,
    most: usize,
) -> Result<(), String> {
    let mut done = 0;
    while done < most {
        let missing = state
            .store
            .passages_without_vector(
                conversation_id.to_owned(),
                model.to_owned(),
                BATCH.min(most - done),
            )
            .await
            .map_err(|e| e.to_string())?;
        if missing.is_empty() {
            break;
        }
        done += missing.len();
        let texts = missing.iter().map(|(_, t)| t.clone()).collect();
        let vectors = embed(state, model, texts).await?;
        let ids = missing.iter().map(|(id, _)| *id);
        state
            .store
            .set_passage_vectors(model.to_owned(), ids.zip(vectors).collect())
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The passages nearest the question, best first, once the missing vectors are made.
async fn nearest(
    state: &AppState,
    conversation_id: &str,
    question: &str,
    model: &str,
) -> Result<Vec<Hit>, String> {
    vectors_for(state, conversation_id, model, PER_TURN).await?;
    let asked = embed(state, model, vec![question.to_owned()])
        .await?
        .pop()
        .ok_or("no vector for the question")?;
    let kept = state
        .store
        .passage_vectors(conversation_id.to_owned(), model.to_owned())
        .await
        .map_err(|e| e.to_string())?;
    // Each passage scored once, off the async threads (thousands of vectors).
    tokio::task::spawn_blocking(move || {
        let mut scored: Vec<(f32, Hit)> = kept
            .into_iter()
            .map(|(h, v)| (v.iter().zip(&asked).map(|(a, b)| a * b).sum(), h))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(NEAREST).map(|(_, h)| h).collect()
    })
    .await
    .map_err(|e| e.to_string())
}

/// The texts' vectors, normalized, in order.
async fn embed(state: &AppState, model: &str, texts: Vec<String>) -> Result<Vec<Vec<f32>>, String> {
    let inputs = texts.into_iter().map(EmbedInput::Text).collect();
    let (_, embeddings) = compute(state, Some(model), inputs, true)
        .await
        .map_err(|e| match e {
            EmbedProblem::Resolve(e) => e.to_string(),
            EmbedProblem::Remote(m) => EmbedProblem::remote_message(&m),
            EmbedProblem::Engine(e) => e.to_string(),
        })?;
    Ok(embeddings
        .vectors
        .into_iter()
        .map(|mut v| {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                v.iter_mut().for_each(|x| *x /= norm);
            }
            v
        })
        .collect())
}

/// Lists of passages, each best first, fused by reciprocal rank: best first.
fn fuse(lists: &[Vec<Hit>]) -> Vec<Hit> {
    let mut scored: HashMap<(String, i64), (f64, Hit)> = HashMap::new();
    for list in lists {
        for (rank, hit) in list.iter().enumerate() {
            let score = 1.0 / (RRF_K + rank as f64 + 1.0);
            scored
                .entry((hit.document_id.clone(), hit.seq))
                .and_modify(|(s, _)| *s += score)
                .or_insert_with(|| (score, hit.clone()));
        }
    }
    let mut fused: Vec<(f64, Hit)> = scored.into_values().collect();
    // Ties (a passage at the same rank of two lists) keep the document order.
    fused.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| (&a.1.document_id, a.1.seq).cmp(&(&b.1.document_id, b.1.seq)))
    });
    fused.into_iter().map(|(_, h)| h).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(seq: i64) -> Hit {
        Hit {
            document_id: "d".into(),
            document: "a.txt".into(),
            seq,
            page: None,
            heading: None,
            text: seq.to_string(),
            rank: 0.0,
        }
    }

    #[test]
    fn a_passage_both_lists_rank_high_comes_first() {
        let words = vec![hit(1), hit(2), hit(3)];
        let near = vec![hit(3), hit(4), hit(1)];
        let order: Vec<i64> = fuse(&[words, near]).iter().map(|h| h.seq).collect();
        // 1: 1/61 + 1/63; 3: 1/63 + 1/61 (a tie, document order); then 2 and 4 at rank 2.
        assert_eq!(order, vec![1, 3, 2, 4]);
    }
}
