//! `POST /v1/rerank` (issue 52) against a real reranker GGUF, the one
//! `tests/fixtures/make_reranker.py` writes (Qwen3-Reranker's layout, random weights), loaded on
//! demand beside the default model: Jina's body (strings, `top_n`, `return_documents`) and
//! Cohere's (`{text}` objects) give the same scores, best first; a document scores the same
//! alone and among others; a model that is not a reranker, and embeddings asked of a reranker,
//! are refused in words; a loaded reranker orders the passages a chat turn is given; and a
//! reranker loaded on a Hearth peer scores for a node that has none.

use crate::common;

use common::process::{repo_root, venv_python};
use common::TestNode;
use serde_json::{json, Value};

/// A folder with the default model (a link) and the reranker fixture, `reranker.gguf`.
fn models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let model = common::model_path();
    std::os::unix::fs::symlink(&model, dir.path().join(model.file_name().unwrap())).unwrap();
    let out = std::process::Command::new(venv_python())
        .arg(repo_root().join("tests/fixtures/make_reranker.py"))
        .arg("--model")
        .arg(&model)
        .arg("--out")
        .arg(dir.path().join("reranker.gguf"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make_reranker.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

async fn rerank(t: &TestNode, path: &str, body: Value) -> (u16, Value) {
    let r = t.post(path, &body).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

const DOCS: [&str; 4] = [
    "Paris is the capital of France.",
    "The Loire is the longest river in France.",
    "Bread is baked in an oven.",
    "Paris is the capital of France.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reranker_scores_documents_in_jinas_and_coheres_shapes() {
    let dir = models();
    let t = TestNode::start_with(|c| {
        c.models_dir = dir.path().to_path_buf();
    })
    .await;
    let query = "What is the capital of France?";
    // Jina's body: strings, the best two, with their text.
    let (status, jina) = rerank(
        &t,
        "/v1/rerank",
        json!({"model": "reranker", "query": query, "documents": DOCS, "top_n": 2,
            "return_documents": true}),
    )
    .await;
    assert_eq!(status, 200, "{jina}");
    assert_eq!(jina["model"], "reranker");
    let results = jina["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{jina}");
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["document"]["text"], DOCS[i], "{r}");
    }
    assert!(
        jina["usage"]["prompt_tokens"].as_u64().unwrap() > 4 * 40,
        "{jina}"
    );
    // Cohere's body: `{text}` objects, no documents back; the same scores, all of them.
    let objects: Vec<Value> = DOCS.iter().map(|d| json!({"text": d})).collect();
    let (status, cohere) = rerank(
        &t,
        "/rerank",
        json!({"model": "reranker", "query": query, "documents": objects}),
    )
    .await;
    assert_eq!(status, 200, "{cohere}");
    let all = cohere["results"].as_array().unwrap();
    assert_eq!(all.len(), 4, "{cohere}");
    assert!(all.iter().all(|r| r.get("document").is_none()), "{cohere}");
    let score = |i: usize| {
        all.iter().find(|r| r["index"] == i).unwrap()["relevance_score"]
            .as_f64()
            .unwrap()
    };
    // Best first, each a probability (the head's softmax), the same document the same.
    let scores: Vec<f64> = all
        .iter()
        .map(|r| r["relevance_score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!(scores.iter().all(|s| *s > 0.0 && *s < 1.0), "{scores:?}");
    assert!((score(0) - score(3)).abs() < 1e-4, "{scores:?}");
    assert!(
        (score(0) - score(2)).abs() > 1e-6,
        "documents differ: {scores:?}"
    );
    // The same pairs score the same in either shape (to float noise between two batches).
    assert_eq!(results[0]["index"], all[0]["index"]);
    let top = |r: &Value| r["relevance_score"].as_f64().unwrap();
    assert!(
        (top(&results[0]) - top(&all[0])).abs() < 1e-4,
        "{jina} {cohere}"
    );
    // A document alone scores as it does among others.
    let (_, alone) = rerank(
        &t,
        "/v1/rerank",
        json!({"model": "reranker", "query": query, "documents": [DOCS[1]]}),
    )
    .await;
    let s = alone["results"][0]["relevance_score"].as_f64().unwrap();
    assert!(
        (s - score(1)).abs() < 1e-4,
        "{s} alone, {} among others",
        score(1)
    );

    // The default model is no reranker; the reranker makes no embeddings.
    let (status, e) = rerank(&t, "/v1/rerank", json!({"query": query, "documents": DOCS})).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["code"], "model_not_supported", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not a reranker"),
        "{e}"
    );
    let (status, e) = rerank(
        &t,
        "/v1/embeddings",
        json!({"model": "reranker", "input": "hello"}),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/rerank"),
        "{e}"
    );
    // A bad body names what is wrong, in OpenAI's shape.
    let (status, e) = rerank(
        &t,
        "/v1/rerank",
        json!({"model": "reranker", "query": query, "documents": [{"title": "x"}]}),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["param"]),
        (400, &json!("documents[0]")),
        "{e}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_reranker_orders_the_passages_a_chat_turn_is_given() {
    let dir = models();
    let t = TestNode::start_with(|c| {
        c.models_dir = dir.path().to_path_buf();
    })
    .await;
    // Loaded by a first request, beside the chat's model.
    let (status, v) = rerank(
        &t,
        "/v1/rerank",
        json!({"model": "reranker", "query": "q", "documents": ["a"]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let conv = t.new_conversation("docs").await;
    t.patch_settings(&conv, json!({"max_tokens": 2})).await;
    let (status, v) =
        crate::documents::attach(&t, &conv, "manual.pdf", crate::documents::doc("manual.pdf"))
            .await;
    assert_eq!(status, 201, "{v}");
    let (start, _) = crate::documents::turn(&t, &conv, "What is the code word of page 40?").await;
    assert_eq!(start["sources"]["path"], "passages", "{start}");
    assert_eq!(start["sources"]["reranker"], "reranker", "{start}");
    // In the reranker's order: scored again by it, best first.
    let texts: Vec<Value> = start["sources"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["text"].clone())
        .collect();
    assert!(texts.len() > 1, "{start}");
    let (status, v) = rerank(
        &t,
        "/v1/rerank",
        json!({"model": "reranker", "query": "What is the code word of page 40?", "documents": texts}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let order: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(order, (0..texts.len() as u64).collect::<Vec<_>>(), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reranker_loaded_on_a_peer_scores_for_a_node_without_it() {
    let dir = models();
    let (a, b, _empty) = common::model_on_a_peer_with(|c| {
        c.models_dir = dir.path().to_path_buf();
    })
    .await;
    // The peer loads the reranker for a request of its own, and says so in its heartbeat.
    let body = json!({"model": "reranker", "query": "What is the capital of France?",
        "documents": DOCS, "return_documents": true});
    let (status, here) = rerank(&a, "/v1/rerank", body.clone()).await;
    assert_eq!(status, 200, "{here}");
    common::wait_for(
        async || {
            b.get_json("/api/cluster").await["peers"][0]["loaded_models"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m == "reranker"))
        },
        "b seeing the peer's reranker",
    )
    .await;
    // The node without it gets the same ranking, from the peer.
    let (status, there) = rerank(&b, "/rerank", body).await;
    assert_eq!(status, 200, "{there}");
    assert_eq!(there["model"], "reranker");
    assert_eq!(there["usage"], here["usage"]);
    // The same order and documents; the scores alike to float noise (a batch of others on
    // the peer's engine adds its own rounding).
    let parts = |v: &Value| -> Vec<(Value, Value, f64)> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["index"].clone(),
                    r["document"].clone(),
                    r["relevance_score"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let (there, here) = (parts(&there), parts(&here));
    assert_eq!(there.len(), here.len());
    for (a, b) in there.iter().zip(&here) {
        assert_eq!((&a.0, &a.1), (&b.0, &b.1), "{there:?} {here:?}");
        assert!((a.2 - b.2).abs() < 1e-4, "{there:?} {here:?}");
    }
    // What the peer refuses comes back in words.
    let (status, refused) = rerank(
        &b,
        "/v1/rerank",
        json!({"model": "reranker", "query": "q", "documents": ["x".repeat(1 << 16)]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["code"], "context_length_exceeded",
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not rank"),
        "{refused}"
    );
}
