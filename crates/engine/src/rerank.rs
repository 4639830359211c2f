//! Reranking ([`Engine::rerank`]): a reranker GGUF (llama.cpp's rank pooling: a classification
//! head over a query and a document read together) scores a query against each document, on
//! the embedding context (`embedder`). Each pair is made as llama-server makes it: the GGUF's
//! rerank prompt with `{query}` and `{document}` filled in, or else BOS, the query, EOS, SEP,
//! the document, EOS (each as the vocabulary asks for it). A score is the head's first output.

use std::time::{Duration, Instant};

use llama_cpp_2::token::LlamaToken;

use crate::embedder::EmbedError;
use crate::handle::{EmbedFailure, Engine};
use crate::model::ModelInfo;

/// A query's scores against documents, in the documents' order.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    pub scores: Vec<f32>,
    /// Tokens of every pair together.
    pub prompt_tokens: u32,
    /// From submission to the last score.
    pub total: Duration,
}

/// The tokens of one query-document pair, as `info`'s reranker reads them.
fn pair(info: &ModelInfo, query: &str, document: &str) -> Vec<LlamaToken> {
    let vocab = info.prompter.model.vocab();
    if let Some(template) = &info.rerank_template {
        // The template's own text may hold special tokens; the user's never do (a document
        // cannot close the turn and answer "yes" for itself), and a placeholder written in a
        // query is text.
        let mut tokens = Vec::new();
        for (piece, user) in fill(template, query, document) {
            tokens.extend(vocab.tokenize(piece.as_bytes(), false, !user));
        }
        return tokens;
    }
    let eos = match vocab.eos() {
        t if t.0 >= 0 => t,
        _ => vocab.sep(),
    };
    let mut tokens = Vec::new();
    if vocab.should_add_bos() {
        tokens.push(vocab.bos());
    }
    tokens.extend(vocab.tokenize(query.as_bytes(), false, false));
    if vocab.should_add_eos() {
        tokens.push(eos);
    }
    if vocab.should_add_sep() {
        tokens.push(vocab.sep());
    }
    tokens.extend(vocab.tokenize(document.as_bytes(), false, false));
    if vocab.should_add_eos() {
        tokens.push(eos);
    }
    tokens
}

/// The rerank template in pieces, each marked whether it is the user's text: `{query}` and
/// `{document}` replaced where the template has them (once each, the first).
fn fill<'a>(template: &'a str, query: &'a str, document: &'a str) -> Vec<(&'a str, bool)> {
    let mut marks: Vec<(usize, &str, &str)> = [("{query}", query), ("{document}", document)]
        .into_iter()
        .filter_map(|(mark, text)| template.find(mark).map(|at| (at, mark, text)))
        .collect();
    marks.sort_by_key(|m| m.0);
    let mut out = Vec::new();
    let mut at = 0;
    for (start, mark, text) in marks {
        if start < at {
            continue;
        }
        out.push((&template[at..start], false));
        out.push((text, true));
        at = start + mark.len();
    }
    out.push((&template[at..], false));
    out
}

impl Engine {
    /// `query` scored against each of `documents` by this engine's reranker, beside the
    /// running generations as embeddings are. A pair longer than the embedding context takes
    /// is refused, naming its document.
    pub async fn rerank(&self, query: &str, documents: &[String]) -> Result<Ranking, EmbedFailure> {
        let submitted = Instant::now();
        let model = self.serving()?;
        if !model.reranker {
            return Err(EmbedError::NotReranker(model.id.to_string()).into());
        }
        if documents.is_empty() {
            return Err(EmbedError::NoInput.into());
        }
        let max = model.embed_max_tokens as usize;
        let mut pairs = Vec::with_capacity(documents.len());
        for (index, document) in documents.iter().enumerate() {
            let tokens = pair(&model, query, document);
            if tokens.len() > max {
                return Err(EmbedError::TooLong {
                    index,
                    tokens: tokens.len(),
                    max: model.embed_max_tokens,
                }
                .into());
            }
            pairs.push(tokens);
        }
        let out = self.embed_tokens(pairs, submitted).await?;
        let scores = out
            .vectors
            .iter()
            .map(|v| v.first().copied().filter(|s| s.is_finite()))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| {
                EmbedError::Failed("the reranker gave no score for a document".into())
            })?;
        Ok(Ranking {
            scores,
            prompt_tokens: out.prompt_tokens,
            total: out.total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn the_users_text_is_marked_apart_from_the_template() {
        assert_eq!(
            fill(
                "<s>Q: {query}\nD: {document}<e>",
                "a {document}",
                "b<|im_end|>"
            ),
            [
                ("<s>Q: ", false),
                ("a {document}", true),
                ("\nD: ", false),
                ("b<|im_end|>", true),
                ("<e>", false)
            ]
        );
        assert_eq!(
            fill("{document} then {query}", "q", "d"),
            [
                ("", false),
                ("d", true),
                (" then ", false),
                ("q", true),
                ("", false)
            ]
        );
    }
}
