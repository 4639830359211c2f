//! The connections the node opens: it greets as a Hearth node (its transport offered, no
//! passcode hash, no models), and a peer that answers in plain text is a TealeNet peer only
//! with `--tealenet-compat`, and never a device that proved to be a Hearth node. The
//! independent TealeNet peer (`tests/tealenet_peer.py`, written from the documents) as the
//! listener, with a passcode: it closes the Hearth hello (no hash in it), the node greets it
//! the TealeNet way next, and then uses its model for a streamed chat.

use crate::common;

use std::time::Duration;

use common::cluster_peer::{
    aes_here, compat_node, hello, read_frame, until_listed, write_frame, PythonPeer, PASSCODE,
};
use common::TestNode;
use hearth_cluster::ClusterConfig;
use hearth_protocol::cluster::HEARTH_NOISE_AES;
use serde_json::Value;

/// A node with a passcode that keeps a connection to `peers`, compatibility as given.
async fn dialler(compat: bool, peers: Vec<String>) -> TestNode {
    TestNode::start_with(|c| {
        c.cluster = Some(ClusterConfig {
            port: Some(0),
            passcode: Some(PASSCODE.into()),
            tealenet_compat: compat,
            peers,
            discovery: false,
        });
    })
    .await
}

/// The next connection to `listener` (15 s at most) and the hello on it.
async fn next_hello(listener: &tokio::net::TcpListener) -> (tokio::net::TcpStream, Value) {
    let (mut tcp, _) = tokio::time::timeout(Duration::from_secs(15), listener.accept())
        .await
        .expect("the node connects within 15 s")
        .unwrap();
    let hello = read_frame(&mut tcp).await.expect("its hello");
    (tcp, hello)
}

/// A plain `helloAck` with the right passcode hash, from device `id`.
fn plain_ack(id: &str) -> Value {
    let h = hello(id, Some(PASSCODE), false);
    serde_json::json!({"helloAck": h["hello"].clone()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_opens_as_a_hearth_node_and_takes_a_plain_answer_only_with_compatibility() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap().to_string();
    let t = dialler(false, vec![at]).await;
    let (mut tcp, hello) = next_hello(&listener).await;
    let h = &hello["hello"]["_0"];
    assert_eq!(
        h["hearth"]["noise"],
        hearth_protocol::cluster::HEARTH_NOISE,
        "{hello}"
    );
    let also = if aes_here() {
        serde_json::json!([HEARTH_NOISE_AES])
    } else {
        Value::Null
    };
    assert_eq!(h["hearth"]["noiseAlso"], also, "{hello}");
    assert!(h.get("clusterPasscodeHash").is_none(), "{hello}");
    assert_eq!(
        h["loadedModels"],
        serde_json::json!([]),
        "models go encrypted: {hello}"
    );
    let id = h["deviceInfo"]["id"].as_str().unwrap();
    assert_eq!(id, id.to_uppercase());
    assert!(!hello
        .to_string()
        .contains(&hearth_cluster::passcode_hash(PASSCODE)));
    // Without TealeNet compatibility a plain helloAck, even with the right passcode hash, is
    // refused: the node hangs up and lists nobody.
    write_frame(&mut tcp, &plain_ack("8D2C54A1-1B7E-4F0A-A5C3-77E1D9B0C2F4")).await;
    assert_eq!(read_frame(&mut tcp).await, None);
    assert_eq!(t.status().await["cluster"]["peers"], serde_json::json!([]));
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_answer_from_a_device_that_proved_to_be_a_hearth_node_is_refused() {
    // Node b joins node a (compatibility on) encrypted: b's device id is a Hearth node's to a.
    let (a, _zone) = compat_node().await;
    let a_at = a.node().cluster_addr().unwrap().to_string();
    let b = dialler(false, vec![a_at]).await;
    common::wait_for(
        async || a.status().await["cluster"]["peers"][0]["kind"] == "hearth",
        "b joining a, encrypted",
    )
    .await;
    let b_id = b.status().await["cluster"]["device_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // a dials a listener that answers in plain text in b's name: refused, however often.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap().to_string();
    let added = common::client()
        .post(a.url("/api/cluster/peers"))
        .json(&serde_json::json!({"address": at}))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201);
    for _ in 0..2 {
        let (mut tcp, hello) = next_hello(&listener).await;
        assert!(hello["hello"]["_0"]["hearth"].is_object(), "{hello}");
        write_frame(&mut tcp, &plain_ack(&b_id)).await;
        assert_eq!(read_frame(&mut tcp).await, None);
    }
    let peers = a.status().await["cluster"]["peers"].clone();
    assert_eq!(peers.as_array().map(Vec::len), Some(1), "{peers}");
    assert_eq!(peers[0]["kind"], "hearth", "{peers}");
    // A plain answer from a device never seen as a Hearth node is a TealeNet peer's: taken.
    let (mut tcp, _) = next_hello(&listener).await;
    write_frame(&mut tcp, &plain_ack("8D2C54A1-1B7E-4F0A-A5C3-77E1D9B0C2F4")).await;
    common::wait_for(
        async || {
            a.status().await["cluster"]["peers"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["kind"] == "tealenet"))
        },
        "the plain listener taken as a TealeNet peer",
    )
    .await;
    drop(tcp);
    b.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tealenet_listener_the_node_dials_serves_it_a_streamed_chat() {
    let mut python = PythonPeer::spawn(&["127.0.0.1", "0", "listen", PASSCODE, "teale/listener"]);
    let port = python.next_json().await["listening"]
        .as_u64()
        .expect("its port");
    let (t, _zone) = compat_node().await;
    let added = common::client()
        .post(t.url("/api/cluster/peers"))
        .json(&serde_json::json!({"address": format!("127.0.0.1:{port}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), 201);
    // The Hearth hello first, which a TealeNet listener with a passcode closes (no hash in
    // it); then the TealeNet one, with the hash, which it answers.
    assert_eq!(
        python.next_json().await["hello"],
        serde_json::json!({"hearth": true, "hash": false})
    );
    assert_eq!(
        python.next_json().await["hello"],
        serde_json::json!({"hearth": false, "hash": true})
    );
    until_listed(&t, "teale/listener").await;
    let peers = t.status().await["cluster"]["peers"].clone();
    assert_eq!(peers[0]["kind"], "tealenet", "{peers}");
    // A streamed chat for its model goes to it, and every piece comes back in order.
    let (text, chunks) = t
        .chat_stream(serde_json::json!({"model": "teale/listener",
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}))
        .await;
    assert_eq!(text, "Hello from a TealeNet peer.");
    assert!(chunks.len() >= 5, "{chunks:?}");
    let seen = python.next_json().await;
    assert_eq!(seen["messages"][0]["content"], "Hi", "{seen}");
    assert_eq!(seen["hearth_fields"], serde_json::json!([]), "{seen}");
    python.bye().await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_closes_the_hearth_hello_is_greeted_so_only_with_compatibility() {
    // Without compatibility the node keeps greeting as a Hearth node, never with its hash.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap().to_string();
    let t = dialler(false, vec![at]).await;
    for _ in 0..3 {
        let (tcp, hello) = next_hello(&listener).await;
        let h = &hello["hello"]["_0"];
        assert!(h["hearth"].is_object(), "{hello}");
        assert!(h.get("clusterPasscodeHash").is_none(), "{hello}");
        drop(tcp);
    }
    t.stop().await;
}
