//! Mends found by running the real reference programs against Hearth (NOTES.md): a
//! generation of the signed-challenge door cut by the node shutting down ends, after its
//! `error`, with a `stream_end` marked cancelled, so the reference client library's request
//! does not stay open; the same for a generation cut by unloading the model.

use crate::common;

use common::signed::{login, Key};
use common::{ws_recv, ws_send, TestNode};
use futures_util::StreamExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_challenge_generation_cut_by_shutdown_ends_with_stream_end() {
    let t = TestNode::start(1).await;
    let (mut ws, _) = login(&t, &Key::ed25519()).await;
    ws_send(
        &mut ws,
        json!({"type": "generate", "id": "long", "prompt": "Write a long story.",
               "options": {"max_tokens": 1000}}),
    )
    .await;
    assert_eq!(ws_recv(&mut ws).await["type"], "stream_start");
    assert_eq!(ws_recv(&mut ws).await["type"], "stream_token");
    let node = t.node().clone();
    let stopping = tokio::spawn(async move { node.shutdown().await });

    // Tokens may still come; then the error, then the end, then the close.
    let mut seen = Vec::new();
    let close = loop {
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), ws.next()).await;
        match next.expect("the socket answers within 10 s") {
            Some(Ok(Message::Text(text))) => {
                let v: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
                if v["type"] != "stream_token" {
                    seen.push(v);
                }
            }
            Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
            other => panic!("{other:?} after {seen:?}"),
        }
    };
    stopping.await.unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (&seen[0]["type"], &seen[0]["id"]),
        (&json!("error"), &json!("long"))
    );
    assert_eq!(
        (&seen[1]["type"], &seen[1]["id"], &seen[1]["isCancelled"]),
        (&json!("stream_end"), &json!("long"), &json!(true)),
        "{seen:?}"
    );
    assert_eq!(close, Some(1001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_challenge_generation_cut_by_unloading_ends_with_stream_end() {
    let t = TestNode::start(1).await;
    let (mut ws, _) = login(&t, &Key::ed25519()).await;
    ws_send(
        &mut ws,
        json!({"type": "generate", "id": 7, "prompt": "Write a long story.",
               "options": {"max_tokens": 1000}}),
    )
    .await;
    assert_eq!(ws_recv(&mut ws).await["type"], "stream_start");
    assert_eq!(ws_recv(&mut ws).await["type"], "stream_token");
    let r = t.post("/api/models/unload", &json!({})).await;
    assert!(r.status().is_success(), "{}", r.status());
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let v = ws_recv(&mut ws).await;
        if v["type"] != "stream_token" {
            seen.push(v);
        }
    }
    assert_eq!(
        (&seen[0]["type"], &seen[0]["id"], &seen[0]["code"]),
        (&json!("error"), &json!(7), &json!("generation_failed")),
        "{seen:?}"
    );
    assert_eq!(
        (&seen[1]["type"], &seen[1]["id"], &seen[1]["isCancelled"]),
        (&json!("stream_end"), &json!(7), &json!(true)),
        "{seen:?}"
    );
    // The socket still answers.
    ws_send(&mut ws, json!({"type": "ping", "id": "p"})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "pong");
    t.stop().await;
}
