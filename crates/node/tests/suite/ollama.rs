//! The Ollama door beyond what the official client checks: an NDJSON chat stream served by a
//! hub worker (the route at work, a JSON schema's grammar travelling with the task), bad input
//! answered in Ollama's error shape while the node keeps serving, `/api/tags` agreeing with
//! `/v1/models`, and embeddings with the pooling a GGUF names.

use crate::common;

use common::hub::{start_hub, start_worker, wait_workers, workers};
use common::{client, TestNode, MODEL_ID};
use serde_json::{json, Value};

/// An Ollama request's status and JSON body (one object, or the NDJSON lines as an array).
async fn ollama(t: &TestNode, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let r = client()
        .post(t.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request sent");
    let status = r.status().as_u16();
    let ndjson = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/x-ndjson");
    let text = r.text().await.expect("a body");
    let body = if ndjson {
        Value::Array(
            text.lines()
                .map(|l| serde_json::from_str(l).expect("every line is JSON"))
                .collect(),
        )
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"))
    };
    (status, body)
}

fn chat_body(prompt: &str, stream: bool) -> String {
    json!({"model": MODEL_ID, "messages": [{"role": "user", "content": prompt}],
        "stream": stream, "options": {"temperature": 0, "num_predict": 16}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ollama_chat_stream_is_served_by_a_hub_worker() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    wait_workers(&hub, 1).await;

    let (status, lines) = ollama(&hub, "/api/chat", chat_body("Name three fruits.", true)).await;
    assert_eq!(status, 200, "{lines}");
    let lines = lines.as_array().expect("NDJSON lines");
    let (last, pieces) = lines.split_last().expect("lines");
    assert!(pieces.len() >= 3, "{lines:?}");
    assert!(pieces.iter().all(|l| l["done"] == false), "{lines:?}");
    assert_eq!(last["done"], true, "{last}");
    assert_eq!(last["model"], MODEL_ID);
    let text: String = pieces
        .iter()
        .map(|l| l["message"]["content"].as_str().expect("content"))
        .collect();
    // The worker's own answer, asked directly: the same greedy text and counts.
    let (_, direct) = ollama(&worker, "/api/chat", chat_body("Name three fruits.", false)).await;
    assert_eq!(direct["message"]["content"], text.as_str(), "{direct}");
    assert_eq!(last["eval_count"], direct["eval_count"], "{last}");
    assert_eq!(last["prompt_eval_count"], direct["prompt_eval_count"]);
    assert!(last["eval_duration"].as_u64().unwrap() > 0, "{last}");

    // A JSON schema's grammar travels with the task: the worker's answer follows it.
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"]});
    let body = json!({"model": MODEL_ID, "stream": false, "format": schema,
        "messages": [{"role": "user", "content": "Which city is the capital of France? Answer in JSON."}],
        "options": {"temperature": 0, "num_predict": 64}});
    let (status, answer) = ollama(&hub, "/api/chat", body.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    let content = answer["message"]["content"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {content}"));
    assert!(parsed["city"].is_string(), "{parsed}");

    // The hub's own engine took nothing (--hub-local false): the worker answered both.
    let status = hub.status().await;
    assert_eq!(status["requests_finished"], 0, "{status}");
    assert_eq!(workers(&hub).await[0]["completed"], 2);
    worker.stop().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_ollamas_errors_and_the_node_keeps_serving() {
    let t = TestNode::start(1).await;
    let huge = format!(
        r#"{{"model":"{MODEL_ID}","prompt":"{}"}}"#,
        "a".repeat(hearth_protocol::limits::MAX_HTTP_BODY_BYTES + 1)
    );
    let unknown = json!({"model": "no-such-model", "prompt": "hi"}).to_string();
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("/api/generate", "{".into(), 400, "EOF"),
        ("/api/chat", "".into(), 400, "missing request body"),
        ("/api/chat", "[1]".into(), 400, "object"),
        (
            "/api/chat",
            json!({"model": MODEL_ID, "messages": "hello"}).to_string(),
            400,
            "messages",
        ),
        (
            "/api/generate",
            json!({"model": MODEL_ID, "prompt": "x", "options": {"temperature": "hot"}})
                .to_string(),
            400,
            "options.temperature",
        ),
        (
            "/api/generate",
            json!({"model": MODEL_ID, "prompt": "x", "options": {"top_p": 7}}).to_string(),
            400,
            "top_p",
        ),
        (
            "/api/generate",
            json!({"model": MODEL_ID, "prompt": "x", "options": {"num_ctx": 100_000_000}})
                .to_string(),
            400,
            "num_ctx",
        ),
        (
            "/api/generate",
            json!({"model": MODEL_ID, "prompt": "x", "format": "yaml"}).to_string(),
            400,
            "format",
        ),
        (
            "/api/generate",
            json!({"model": MODEL_ID, "prompt": "x", "format": {"type": "no-such-type"}})
                .to_string(),
            400,
            "format",
        ),
        // A format with ignore_eos would leave llama.cpp no token to choose (it aborted the
        // node): refused.
        (
            "/api/chat",
            json!({"model": MODEL_ID, "stream": false, "format": "json",
                   "messages": [{"role": "user", "content": "Give a JSON object."}],
                   "options": {"ignore_eos": true, "num_predict": 200}})
            .to_string(),
            400,
            "ignore_eos",
        ),
        (
            "/api/generate",
            json!({"prompt": "x"}).to_string(),
            400,
            "model is required",
        ),
        ("/api/generate", unknown.clone(), 404, "no-such-model"),
        (
            "/api/chat",
            unknown
                .replace("prompt", "messages")
                .replace("\"hi\"", "[]"),
            404,
            "not found",
        ),
        (
            "/api/show",
            json!({"model": "no-such-model"}).to_string(),
            404,
            "not found",
        ),
        (
            "/api/embed",
            json!({"model": "no-such-model", "input": "x"}).to_string(),
            404,
            "not found",
        ),
        (
            "/api/embed",
            json!({"model": MODEL_ID, "input": [1, 2]}).to_string(),
            400,
            "input",
        ),
        ("/api/generate", huge, 413, "limit of 12 MiB"),
        (
            "/api/pull",
            json!({"model": "llama3.2"}).to_string(),
            400,
            "OWNER/REPO/FILE.gguf",
        ),
    ];
    for (path, body, want, says) in cases {
        let shown: String = body.chars().take(80).collect();
        let (status, v) = ollama(&t, path, body).await;
        assert_eq!(status, want, "{path} {shown}: {v}");
        let message = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} {shown}: {v}"));
        assert!(
            message.contains(says),
            "{path} {shown}: {message:?} does not say {says:?}"
        );
        assert_eq!(v.as_object().unwrap().len(), 1, "only `error`: {v}");
    }
    // DELETE of a model this node does not have is Ollama's 404.
    let r = client()
        .delete(t.url("/api/delete"))
        .json(&json!({"model": "no-such-model"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Still serving, streamed and not.
    let (status, v) = ollama(
        &t,
        "/api/generate",
        json!({"model": MODEL_ID, "prompt": "Hi",
        "stream": false, "options": {"num_predict": 3, "temperature": 0}})
        .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["eval_count"], 3, "{v}");
    assert_eq!(v["done_reason"], "length", "{v}");
    assert!(v["context"].as_array().is_some_and(|c| c.len() > 3), "{v}");
    let (_, lines) = ollama(&t, "/api/chat", chat_body("Hi", true)).await;
    assert_eq!(lines.as_array().unwrap().last().unwrap()["done"], true);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_and_the_openai_model_list_agree() {
    let t = TestNode::start(1).await;
    let tags = t.get_json("/api/tags").await;
    let models = t.get_json("/v1/models").await;
    let tag_names: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let openai_ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(tag_names, openai_ids);
    assert_eq!(tag_names, [MODEL_ID]);
    let m = &tags["models"][0];
    assert_eq!(m["details"]["format"], "gguf", "{m}");
    assert_eq!(
        m["digest"].as_str().map(str::len),
        Some(64),
        "SHA-256 hex: {m}"
    );
    // `name:latest` is the model itself, as Ollama's clients write it.
    let (status, v) = ollama(
        &t,
        "/api/generate",
        json!({"model": format!("{MODEL_ID}:latest"),
        "prompt": "Hi", "stream": false, "options": {"num_predict": 2}})
        .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let ps = t.get_json("/api/ps").await;
    assert_eq!(ps["models"][0]["name"], MODEL_ID, "{ps}");
    t.stop().await;
}

/// The default model copied with `<arch>.pooling_type` set in its GGUF header (by llama.cpp's
/// own `gguf` Python package), into `dir` as `name.gguf`.
async fn pooled_copy(dir: &std::path::Path, name: &str, pooling: u32) {
    let mut cmd = std::process::Command::new(common::process::venv_python());
    cmd.arg(common::process::repo_root().join("tests/pooled_model.py"))
        .arg(common::model_path())
        .arg(dir.join(format!("{name}.gguf")))
        .arg(pooling.to_string());
    common::process::run_peer(cmd, "the GGUF copy").await;
}

async fn embedding(t: &TestNode, model: &str) -> (u16, Value) {
    let body = json!({"model": model, "input": "The cat sat on the mat."}).to_string();
    let r = client()
        .post(t.url("/v1/embeddings"))
        .body(body)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedding_models_own_pooling_is_used() {
    // The same weights with last-token pooling named in the GGUF (as an embedding model's
    // header names its pooling) give other vectors than the chat model's mean pooling; a
    // reranker's rank pooling makes no embeddings and says so.
    let dir = tempfile::tempdir().unwrap();
    pooled_copy(dir.path(), "last", 3).await;
    pooled_copy(dir.path(), "rank", 4).await;
    let vector = |v: &Value| -> Vec<f64> {
        v["data"][0]["embedding"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let plain = TestNode::start(1).await;
    let (_, mean) = embedding(&plain, MODEL_ID).await;
    plain.stop().await;
    let models = dir.path().to_owned();
    let last = TestNode::start_with(|c| {
        c.parallel = 1;
        c.models_dir = models.clone();
        c.model = Some("last".into());
    })
    .await;
    let (status, pooled) = embedding(&last, "last").await;
    assert_eq!(status, 200, "{pooled}");
    let cosine: f64 = vector(&mean)
        .iter()
        .zip(vector(&pooled))
        .map(|(a, b)| a * b)
        .sum();
    assert!(
        cosine < 0.95,
        "last-token pooling gave the mean's vector: cosine {cosine}"
    );
    last.stop().await;
    let rank = TestNode::start_with(|c| {
        c.parallel = 1;
        c.models_dir = models.clone();
        c.model = Some("rank".into());
    })
    .await;
    let (status, v) = embedding(&rank, "rank").await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("reranker"),
        "{v}"
    );
    // It still generates.
    let (status, g) = ollama(
        &rank,
        "/api/generate",
        json!({"model": "rank", "prompt": "Hi",
        "stream": false, "options": {"num_predict": 2}})
        .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{g}");
    rank.stop().await;
}

/// A copy of the default model in `dir` whose header asks for a BOS token
/// (`tokenizer.ggml.add_bos_token` set), as Llama-family models do; the default model's is off.
fn model_wanting_bos(dir: &std::path::Path) -> std::path::PathBuf {
    let mut bytes = std::fs::read(common::model_path()).unwrap();
    let key = b"tokenizer.ggml.add_bos_token";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("the key is in the header");
    // The key, its type (7: bool, four bytes), then the value's byte.
    let ty = at + key.len();
    assert_eq!(bytes[ty..ty + 4], [7, 0, 0, 0], "a bool");
    bytes[ty + 4] = 1;
    let path = dir.join("with-bos.gguf");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generate_context_continues_without_a_second_bos() {
    let dir = tempfile::tempdir().unwrap();
    let path = model_wanting_bos(dir.path());
    let t = TestNode::start_with(|c| {
        common::without_model(c, dir.path());
        c.model = Some(path.to_string_lossy().into_owned());
    })
    .await;
    let ask = |context: Value| {
        json!({"model": "with-bos", "prompt": "Hi", "stream": false, "context": context,
        "options": {"num_predict": 2, "temperature": 0}})
        .to_string()
    };
    let (status, first) = ollama(&t, "/api/generate", ask(json!([]))).await;
    assert_eq!(status, 200, "{first}");
    let ctx: Vec<u64> = serde_json::from_value(first["context"].clone()).unwrap();
    // BOS (1) and the template's own first token, which in this vocabulary is the same id.
    assert_eq!(ctx[..2], [1, 1], "the copy asks for a BOS: {ctx:?}");
    let (status, second) = ollama(&t, "/api/generate", ask(json!(ctx))).await;
    assert_eq!(status, 200, "{second}");
    let ctx2: Vec<u64> = serde_json::from_value(second["context"].clone()).unwrap();
    assert_eq!(ctx2[..ctx.len()], ctx[..], "the context continues");
    // The continuation starts with the template's token, not a second BOS before it.
    assert_eq!(ctx2[ctx.len()], 1, "{ctx2:?}");
    assert_ne!(ctx2[ctx.len() + 1], 1, "a BOS in the middle: {ctx2:?}");
    t.stop().await;
}
