//! The one route every request takes, seen from the doors: with one slot, prompts of a batch
//! and OpenAI requests submitted together wait in the same queue and are served in the order
//! they arrived, none refused while the queue has room (the batch door keeps no queue of its
//! own). Which door reaches a hub's workers through the route is tested in `worker.rs` and
//! `auth_ws.rs`.

use crate::common;

use std::time::{Duration, Instant};

use common::{user, ws_recv, ws_send, TestNode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// A raw prompt that goes on: its first token is never the end of text, on whichever CPU
/// variant llama.cpp picks.
const STORY: &str = "Once upon a time, a robot who had never seen colour learned to paint. One day";
const TOKENS: u32 = 12;

/// Requests the engine has taken since `base` finished: finished, running and queued.
async fn admitted(t: &TestNode, base: u64) -> u64 {
    let s = t.status().await;
    let n = |k: &str| s[k].as_u64().unwrap();
    n("requests_finished") - base + n("active") + n("queued")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_prompts_and_openai_requests_are_served_in_arrival_order() {
    let t = TestNode::start(1).await;
    let base = t.status().await["requests_finished"].as_u64().unwrap();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Instant)>();

    // Three batch prompts, in one message.
    let mut ws = t.ws("/ws").await;
    let prompts: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|id| json!({"request_id": id, "prompt": STORY}))
        .collect();
    ws_send(
        &mut ws,
        json!({"prompts": prompts,
               "generation_config": {"do_sample": false, "max_new_tokens": TOKENS}}),
    )
    .await;
    let tx = done_tx.clone();
    let batch = tokio::spawn(async move {
        let mut open = 3;
        while open > 0 {
            let Value::Array(events) = ws_recv(&mut ws).await else {
                panic!("batch messages are arrays");
            };
            for e in events {
                match e["type"].as_str() {
                    Some("COMPLETE") => {
                        open -= 1;
                        tx.send((e["request_id"].as_str().unwrap().to_owned(), Instant::now()))
                            .unwrap();
                    }
                    Some("ERROR") => panic!("a batch prompt was refused: {e}"),
                    _ => {}
                }
            }
        }
    });
    // The batch has arrived once its first prompt is admitted (the door hands all three to the
    // route at once; a door that held prompts back until a slot frees would let the OpenAI
    // requests overtake them).
    common::wait_for(
        async || admitted(&t, base).await >= 1,
        "the batch's first prompt",
    )
    .await;

    // Then two OpenAI requests, one after the other.
    let mut openai = Vec::new();
    for label in ["A", "B"] {
        let before = admitted(&t, base).await;
        let url = t.url("/v1/chat/completions");
        let tx = done_tx.clone();
        openai.push(tokio::spawn(async move {
            let r = common::client()
                .post(url)
                .json(&json!({"messages": user("Hello"), "max_tokens": TOKENS,
                              "ignore_eos": true, "temperature": 0}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{label} was refused");
            let v: Value = r.json().await.unwrap();
            tx.send((label.to_owned(), Instant::now())).unwrap();
            v["usage"]["completion_tokens"].as_u64().unwrap()
        }));
        common::wait_for(
            async || admitted(&t, base).await > before,
            "the OpenAI request",
        )
        .await;
    }
    drop(done_tx);

    for h in openai {
        assert_eq!(h.await.unwrap(), u64::from(TOKENS));
    }
    tokio::time::timeout(Duration::from_secs(60), batch)
        .await
        .expect("the batch finishes")
        .unwrap();
    let mut done = Vec::new();
    while let Some(d) = done_rx.recv().await {
        done.push(d);
    }
    done.sort_by_key(|(_, at)| *at);
    let order: Vec<&str> = done.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(order, ["a", "b", "c", "A", "B"]);
    t.stop().await;
}
