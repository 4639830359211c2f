//! Worker mode's shared setup: a hub node and worker nodes joined to it with the test token,
//! the hub's view of its workers (waiting until it lists a given number), and a greedy chat
//! body for the default model.

use std::time::{Duration, Instant};

use hearth_hub::HubConfig;
use hearth_route::join::JoinConfig;
use serde_json::{json, Value};

use super::{user, TestNode, MODEL_ID};

/// The hub token every test hub and worker uses.
pub const TOKEN: &str = "test-hub-token";

pub async fn start_hub(parallel: usize, serve_locally: bool) -> TestNode {
    start_hub_with(parallel, serve_locally, |_| {}).await
}

/// A hub with more of its configuration changed by `f`.
pub async fn start_hub_with(
    parallel: usize,
    serve_locally: bool,
    f: impl FnOnce(&mut hearth_node::config::NodeConfig),
) -> TestNode {
    TestNode::start_with(|c| {
        c.parallel = parallel;
        c.name = "hub".into();
        c.hub = Some(HubConfig::new(TOKEN.into(), serve_locally));
        f(c);
    })
    .await
}

pub async fn start_worker_at(url: String, name: &str, parallel: usize) -> TestNode {
    let name = name.to_owned();
    TestNode::start_with(move |c| {
        c.parallel = parallel;
        c.name = name.clone();
        c.join = Some(JoinConfig {
            url,
            token: TOKEN.into(),
            name,
            max_concurrency: None,
        });
    })
    .await
}

pub async fn start_worker(hub: &TestNode, name: &str, parallel: usize) -> TestNode {
    start_worker_at(format!("{}/node", hub.ws_base), name, parallel).await
}

pub async fn hub_status(hub: &TestNode) -> Value {
    hub.status().await["hub"].clone()
}

pub async fn workers(hub: &TestNode) -> Vec<Value> {
    hub_status(hub).await["workers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Wait until the hub lists exactly `n` workers.
pub async fn wait_workers(hub: &TestNode, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let w = workers(hub).await;
        if w.len() == n {
            return w;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} workers, the hub lists {}: {w:?}",
            w.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn greedy(prompt: &str, max_tokens: u32) -> Value {
    json!({"model": MODEL_ID, "messages": user(prompt), "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": true})
}

/// A raw worker connection to a hub, and the hub's `x-hearth-hub` answer header.
pub async fn raw_worker(
    hub: &TestNode,
    query: &str,
) -> (
    super::Ws,
    Option<tokio_tungstenite::tungstenite::http::HeaderValue>,
) {
    let (ws, resp) = tokio_tungstenite::connect_async(format!("{}/node?{query}", hub.ws_base))
        .await
        .expect("upgrade");
    let header = resp.headers().get("x-hearth-hub").cloned();
    (ws, header)
}

/// A worker's binary frame: the task id, big-endian, then the bytes (none: the end frame).
pub fn frame(id: u32, bytes: &[u8]) -> tokio_tungstenite::tungstenite::Message {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(bytes);
    tokio_tungstenite::tungstenite::Message::binary(v)
}

/// A chat completion sent to `node` in the background; the task yields its answer's JSON.
pub fn spawn_chat(node: &TestNode, body: Value) -> tokio::task::JoinHandle<Value> {
    let url = node.url("/v1/chat/completions");
    tokio::spawn(async move {
        super::client()
            .post(url)
            .json(&body)
            .send()
            .await
            .expect("request sent")
            .json::<Value>()
            .await
            .expect("a JSON answer")
    })
}

/// Like [`spawn_chat`], for an answer that may be an error: its status and JSON body.
pub fn spawn_chat_status(
    node: &TestNode,
    body: Value,
) -> tokio::task::JoinHandle<(reqwest::StatusCode, Value)> {
    let url = node.url("/v1/chat/completions");
    tokio::spawn(async move {
        let r = super::client()
            .post(url)
            .json(&body)
            .send()
            .await
            .expect("request sent");
        (r.status(), r.json::<Value>().await.expect("a JSON answer"))
    })
}
