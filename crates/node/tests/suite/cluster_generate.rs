//! The `/generate` door on a node without the model, whose answers run on a Hearth peer: the
//! client's pause holds the peer's generation (no tokens are made there while paused), resume
//! brings them back, stop ends the answer; in-process nodes over real TCP on loopback.

use crate::common;

use std::time::Duration;

use common::{ws_recv_timeout, ws_send, ws_until, TestNode, MODEL_ID};
use serde_json::{json, Value};

const STORY: &str = "Write a long story about a robot learning to paint.";

async fn tokens_made(t: &TestNode) -> u64 {
    t.status().await["tokens_generated"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_stop_reach_an_answer_on_a_hearth_peer() {
    let (a, b, _empty) = common::model_on_a_peer().await;

    let mut ws = b.ws("/generate").await;
    ws_send(
        &mut ws,
        json!({"type": "config", "model": MODEL_ID, "prompt": STORY,
               "parameters": {"max_tokens": 1000, "temperature": 0, "ignore_eos": true}}),
    )
    .await;
    let (init, _) = ws_until(&mut ws, "init").await;
    assert_eq!(init["model"], MODEL_ID, "{init}");
    for _ in 0..3 {
        ws_until(&mut ws, "token").await;
    }
    ws_send(&mut ws, json!({"type": "control", "action": "pause"})).await;
    let (paused, _) = ws_until(&mut ws, "status").await;
    assert_eq!(paused["operation"], "pause", "{paused}");
    // Tokens already on their way may still come; then a's engine makes none.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Some(m) = ws_recv_timeout(&mut ws, Duration::from_millis(100)).await {
        assert_eq!(m["type"], "token", "{m}");
    }
    let held = tokens_made(&a).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        tokens_made(&a).await,
        held,
        "the peer generated while paused"
    );
    assert!(
        ws_recv_timeout(&mut ws, Duration::from_millis(200))
            .await
            .is_none(),
        "a token while paused"
    );
    assert_eq!(a.status().await["active"], 1, "the peer holds its slot");

    ws_send(&mut ws, json!({"type": "control", "action": "resume"})).await;
    let (resumed, _) = ws_until(&mut ws, "status").await;
    assert_eq!(resumed["operation"], "resume", "{resumed}");
    ws_until(&mut ws, "token").await;
    ws_until(&mut ws, "token").await;
    assert!(tokens_made(&a).await > held);

    ws_send(&mut ws, json!({"type": "control", "action": "stop"})).await;
    let (done, _): (Value, _) = ws_until(&mut ws, "completion").await;
    assert!(
        done["generated_text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{done}"
    );
    // The peer's slot is free again.
    common::wait_for(
        async || a.status().await["active"] == 0,
        "the stopped answer leaving the peer",
    )
    .await;
    b.stop().await;
    a.stop().await;
}
