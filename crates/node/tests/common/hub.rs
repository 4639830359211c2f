//! Worker mode's shared setup: a hub node and worker nodes joined to it with the test token,
//! the hub's view of its workers (waiting until it lists a given number), and a greedy chat
//! body for the default model.

use std::time::{Duration, Instant};

use hearth_node::hub::join::JoinConfig;
use hearth_node::hub::HubConfig;
use serde_json::{json, Value};

use super::{user, TestNode, MODEL_ID};

/// The hub token every test hub and worker uses.
pub const TOKEN: &str = "test-hub-token";

pub async fn start_hub(parallel: usize, serve_locally: bool) -> TestNode {
    TestNode::start_with(|c| {
        c.parallel = parallel;
        c.name = "hub".into();
        c.hub = Some(HubConfig {
            token: TOKEN.into(),
            serve_locally,
        });
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
