//! Where a request runs when the cluster has a faster place: a node whose own decode speed is
//! measured (it has answered before) and a TealeNet peer with the same model whose heartbeat
//! reports it decodes far faster (`ewmaTokensPerSecond`, as the Rust node sends it). A free
//! slot here no longer wins by itself: the request goes to the peer, which is expected to
//! finish first. The same peer when hot is passed over, and the node answers itself.

use crate::common;

use common::cluster_peer::{bye, compat_node, PythonPeer, PASSCODE};
use common::{TestNode, MODEL_ID};
use serde_json::{json, Value};

/// What the Python peer answers with (tests/tealenet_peer.py's PROVIDED_TEXT).
const PEER_TEXT: &str = "Hello from a TealeNet peer.";

/// A TealeNet peer offering this node's own model, reporting `speed` tokens/s and `thermal`;
/// returned once the node lists it, with its stdin (a line ends it).
async fn fast_peer(t: &TestNode, speed: &str, thermal: &str) -> tokio::process::Child {
    let port = t.node().cluster_addr().unwrap().port();
    let mut python = PythonPeer::spawn(&[
        "127.0.0.1",
        &port.to_string(),
        "provide",
        PASSCODE,
        MODEL_ID,
        speed,
        thermal,
    ]);
    let first = python.next_line().await;
    assert!(first.contains("providing"), "{first}");
    // Listed with its heartbeat's figures: its thermal level and the speed it reports.
    common::wait_for(
        async || {
            t.get_json("/api/cluster").await["peers"]
                .as_array()
                .is_some_and(|p| {
                    p.iter().any(|p| {
                        p["thermal_level"] == thermal
                            && p["tokens_per_s"].as_f64().is_some_and(|s| s > 0.0)
                    })
                })
        },
        "the peer listed with its heartbeat",
    )
    .await;
    python.drain()
}

async fn answer(t: &TestNode) -> String {
    let v: Value = t
        .chat(json!({"model": MODEL_ID, "messages": common::user("Hi"), "max_tokens": 12}))
        .await;
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {v}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_much_faster_takes_the_request_over_a_free_slot_here_unless_it_is_hot() {
    let (t, _zone) = compat_node().await;
    // This node's decode speed, measured by an answer of its own.
    let v = t
        .chat(json!({"messages": common::user("Count to twenty."), "max_tokens": 24, "ignore_eos": true}))
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 24, "{v}");
    // A hot peer, however fast, is passed over: this node answers.
    let mut hot = fast_peer(&t, "1000000", "serious").await;
    assert_ne!(answer(&t).await, PEER_TEXT);
    // Gone at once (it waits for a request it never gets, and reads nothing else).
    hot.kill().await.unwrap();
    common::wait_for(
        async || t.status().await["cluster"]["peers"] == json!([]),
        "the hot peer gone",
    )
    .await;
    // A cool one that decodes ten thousand times faster: it is expected to finish first, and
    // takes the request though a slot is free here.
    let fast = fast_peer(&t, "1000000", "nominal").await;
    assert_eq!(t.status().await["active"], 0);
    assert_eq!(answer(&t).await, PEER_TEXT);
    let mut fast = fast;
    bye(&mut fast).await;
    t.stop().await;
}
