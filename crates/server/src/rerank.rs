//! `POST /v1/rerank` and `/rerank`: a query scored against documents by a reranker GGUF, in the
//! shape llama-server, Jina and Cohere share: `model`, `query`, `documents` (strings, or
//! objects with a `text`), `top_n`, `return_documents` → `results` (`index`,
//! `relevance_score`, `document` when asked for), best first, with `usage`. Scores come from
//! this node's own model (`embeddings::on_engine`), loaded on demand, or from a Hearth peer
//! that has the reranker loaded (`hearth_cluster`'s `rerank_on_peer`); refusals are in
//! OpenAI's error shape, as the embeddings door's are.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hearth_protocol::value_kind::kind;
use serde::Deserialize;
use serde_json::{json, Value};

use hearth_protocol::openai::parse_body;

use crate::door::body_bytes;
use crate::embeddings::{on_engine, EmbedProblem};
use crate::error::ApiError;
use crate::openai::embeddings::api_error;
use crate::state::AppState;
use hearth_cluster::PeerRerankError;
use hearth_engine::SubmitError;

/// The most documents one request may rank (Cohere's limit).
pub(crate) const MAX_DOCUMENTS: usize = hearth_protocol::limits::MAX_RERANK_DOCUMENTS;

/// The body as clients send it; fields other clients add (Cohere's `max_chunks_per_doc`,
/// Jina's `truncation`) are ignored.
#[derive(Debug, Deserialize)]
struct RerankBody {
    #[serde(default)]
    model: Option<String>,
    query: Value,
    documents: Value,
    #[serde(default)]
    top_n: Option<Value>,
    #[serde(default)]
    return_documents: Option<bool>,
    /// llama-server's name for `return_documents`.
    #[serde(default)]
    return_text: Option<bool>,
}

/// A checked request.
#[derive(Debug, PartialEq)]
struct Rerank {
    model: Option<String>,
    query: String,
    documents: Vec<String>,
    top_n: Option<usize>,
    return_documents: bool,
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        Some("invalid_value"),
        Some(param.into()),
        message.into(),
    )
}

fn check(body: RerankBody) -> Result<Rerank, ApiError> {
    let query = match body.query {
        Value::String(q) if !q.trim().is_empty() => q,
        Value::String(_) => return Err(invalid("query", "'query' is empty")),
        other => {
            return Err(invalid(
                "query",
                format!("'query' must be a string, not {}", kind(&other)),
            ))
        }
    };
    let Value::Array(items) = body.documents else {
        return Err(invalid(
            "documents",
            format!(
                "'documents' must be an array of strings or of objects with a \"text\", not {}",
                kind(&body.documents)
            ),
        ));
    };
    if items.is_empty() {
        return Err(invalid("documents", "'documents' is empty"));
    }
    if items.len() > MAX_DOCUMENTS {
        return Err(invalid(
            "documents",
            format!(
                "{} documents; at most {MAX_DOCUMENTS} are ranked in one request",
                items.len()
            ),
        ));
    }
    let mut documents = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let text = match item {
            Value::String(t) => t,
            Value::Object(mut o) => match o.remove("text") {
                Some(Value::String(t)) => t,
                _ => {
                    return Err(invalid(
                        &format!("documents[{i}]"),
                        format!("documents[{i}] has no string \"text\""),
                    ))
                }
            },
            other => {
                return Err(invalid(
                    &format!("documents[{i}]"),
                    format!(
                        "documents[{i}] must be a string or an object with a \"text\", not {}",
                        kind(&other)
                    ),
                ))
            }
        };
        documents.push(text);
    }
    let top_n = match body.top_n {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            _ => {
                return Err(invalid(
                    "top_n",
                    format!("'top_n' must be a whole number of at least 1, not {v}"),
                ))
            }
        },
    };
    Ok(Rerank {
        model: body.model.filter(|m| !m.is_empty()),
        query,
        documents,
        top_n,
        return_documents: body.return_documents.or(body.return_text).unwrap_or(false),
    })
}

/// The results, best first (a tie keeps the documents' order), cut to `top_n`.
fn ranked(req: &Rerank, scores: &[f32]) -> Vec<Value> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b)));
    // (The engine gives finite scores only: a missing one is an error there.)
    order.truncate(req.top_n.unwrap_or(usize::MAX));
    order
        .into_iter()
        .map(|i| {
            let mut r = json!({"index": i, "relevance_score": scores[i]});
            if req.return_documents {
                r["document"] = json!({"text": req.documents[i]});
            }
            r
        })
        .collect()
}

pub(crate) async fn rerank(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = body_bytes(body)?;
    let wire: RerankBody = parse_body(&body).map_err(ApiError::bad_request)?;
    let req = check(wire)?;
    let here = on_engine(&state, req.model.as_deref(), |engine| {
        let (query, documents) = (req.query.clone(), req.documents.clone());
        async move { engine.rerank(&query, &documents).await }
    })
    .await;
    let (model, scores, tokens) = match here {
        Ok((info, ranking)) => (info.id.to_string(), ranking.scores, ranking.prompt_tokens),
        // A reranker only a Hearth peer has loaded: that peer scores them.
        Err(EmbedProblem::Remote(model)) => {
            let asked = state
                .cluster
                .rerank_on_peer(model.as_str(), &req.query, &req.documents);
            let answer = tokio::select! {
                answer = asked => answer,
                () = state.shutdown.cancelled() => {
                    return Err(SubmitError::ShuttingDown.into());
                }
            };
            match answer {
                Some(Ok(r)) => (model.to_string(), r.scores, r.prompt_tokens),
                Some(Err(e)) => return Err(peer_refused(&e)),
                None => return Err(api_error(EmbedProblem::Remote(model))),
            }
        }
        Err(e) => return Err(api_error(e)),
    };
    Ok(Json(json!({
        "model": model,
        "object": "list",
        "results": ranked(&req, &scores),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}

/// A peer's refusal as the door words its own: what the input or the model is wrong for is
/// a 400, as here; a peer busy, gone or silent a 503.
fn peer_refused(e: &PeerRerankError) -> ApiError {
    let code = match e {
        PeerRerankError::Refused { code, .. } => code.as_deref(),
        PeerRerankError::TooLarge { .. } => Some("invalid_input"),
        _ => None,
    };
    let (code, param): (&'static str, &str) = match code {
        Some("context_length_exceeded") => ("context_length_exceeded", "documents"),
        Some("invalid_input") => ("invalid_input", "documents"),
        Some("model_not_supported") => ("model_not_supported", "model"),
        _ => {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                Some("model_unavailable"),
                Some("model".into()),
                e.to_string(),
            )
        }
    };
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        Some(code),
        Some(param.into()),
        e.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_refusal_is_worded_as_the_door_words_its_own() {
        use axum::response::IntoResponse as _;
        let refused = |code: Option<&str>| PeerRerankError::Refused {
            model: "r".into(),
            why: "w".into(),
            code: code.map(str::to_owned),
        };
        let status = |e: PeerRerankError| peer_refused(&e).into_response().status().as_u16();
        assert_eq!(status(refused(Some("context_length_exceeded"))), 400);
        assert_eq!(status(refused(Some("invalid_input"))), 400);
        assert_eq!(status(refused(Some("model_not_supported"))), 400);
        assert_eq!(status(refused(Some("busy"))), 503);
        assert_eq!(status(refused(None)), 503);
        assert_eq!(status(PeerRerankError::Gone { model: "r".into() }), 503);
        assert_eq!(status(PeerRerankError::TooLarge { bytes: 2, max: 1 }), 400);
    }

    fn body(v: Value) -> Result<Rerank, ApiError> {
        check(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn strings_and_text_objects_are_the_same_documents() {
        let a = body(json!({"query": "q", "documents": ["one", "two"]})).unwrap();
        let b = body(json!({"model": "m", "query": "q", "documents": [{"text": "one"}, {"text": "two", "id": 7}],
            "top_n": 1, "return_documents": true, "max_chunks_per_doc": 10}))
        .unwrap();
        assert_eq!(a.documents, b.documents);
        assert_eq!((a.top_n, a.return_documents), (None, false));
        assert_eq!(
            (b.top_n, b.return_documents, b.model.as_deref()),
            (Some(1), true, Some("m"))
        );
        let c = body(json!({"query": "q", "documents": ["x"], "return_text": true})).unwrap();
        assert!(c.return_documents, "llama-server's name");
    }

    #[test]
    fn bad_requests_name_what_is_wrong() {
        for (v, says) in [
            (json!({"query": "", "documents": ["a"]}), "'query' is empty"),
            (
                json!({"query": 3, "documents": ["a"]}),
                "'query' must be a string, not a number",
            ),
            (
                json!({"query": "q", "documents": []}),
                "'documents' is empty",
            ),
            (json!({"query": "q", "documents": "a"}), "not a string"),
            (
                json!({"query": "q", "documents": [{"title": "a"}]}),
                "documents[0] has no string \"text\"",
            ),
            (
                json!({"query": "q", "documents": ["a", 5]}),
                "documents[1] must be",
            ),
            (
                json!({"query": "q", "documents": ["a"], "top_n": 0}),
                "'top_n' must be a whole number",
            ),
            (
                json!({"query": "q", "documents": vec!["a"; MAX_DOCUMENTS + 1]}),
                "at most 1000",
            ),
        ] {
            let e = body(v.clone()).unwrap_err();
            let said = e.body.error.message;
            assert!(said.contains(says), "{v}: {said}");
        }
    }

    #[test]
    fn results_are_best_first_cut_to_top_n_with_documents_when_asked() {
        let req = body(
            json!({"query": "q", "documents": ["a", "b", "c"], "top_n": 2,
            "return_documents": true}),
        )
        .unwrap();
        let r = ranked(&req, &[0.2, 0.9, 0.2]);
        assert_eq!(
            Value::Array(r),
            json!([
                {"index": 1, "relevance_score": 0.9f32, "document": {"text": "b"}},
                {"index": 0, "relevance_score": 0.2f32, "document": {"text": "a"}}
            ])
        );
    }
}
