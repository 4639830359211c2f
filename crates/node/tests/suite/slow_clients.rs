//! Slow and silent clients cannot hold the node: request headers and idle keep-alive
//! connections time out (`--header-timeout`), a stalled request body fails, and a node out of
//! file descriptors goes on accepting once some are free; streams and WebSockets that outlast
//! the timeouts (header and write) are not cut while they are read; a client that stops
//! reading its stream is closed after the write timeout and its slot serves the next request.
//! (The per-address cap is tested from a network namespace in `lan.rs`.)

use crate::common;

use std::time::{Duration, Instant};

use common::process::NodeProcess;
use common::{user, ws_recv, ws_send, TestNode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TIMEOUT: Duration = Duration::from_secs(1);

/// Seconds until the server closes `s` (reading and dropping whatever it sends), or None
/// if it is still open after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(start.elapsed())?;
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_half_sent_and_idle_connections_are_closed_but_streams_are_not() {
    // Scripted tokens, one each 20 ms: the 300-token stream below lasts at least 6 s, longer
    // than the timeouts it must outlive.
    let t = TestNode::start_with(|c| {
        c.parallel = 2;
        c.limits.header_timeout = TIMEOUT;
        c.limits.write_timeout = TIMEOUT;
        c.script = Some(hearth_engine::Script {
            token_delay: Duration::from_millis(20),
            ..Default::default()
        });
    })
    .await;
    let addr = t.node().addr();

    // Connected, nothing sent.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Half the headers.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // A complete request, then idle on keep-alive.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // A body that stops after 10 of 100 bytes.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"messages")
        .await
        .unwrap();

    // Meanwhile a stream that lasts longer than the timeout, and a WebSocket quiet for longer.
    let long = {
        let base = t.base.clone();
        tokio::spawn(async move {
            let r = common::client()
                .post(format!("{base}/v1/chat/completions"))
                .json(
                    &json!({"messages": user("Tell a long story."), "max_tokens": 300,
                              "ignore_eos": true, "stream": true}),
                )
                .send()
                .await
                .unwrap();
            r.text().await.unwrap()
        })
    };
    let mut ws = t.ws("/generate").await;

    let limit = TIMEOUT * 4;
    for (name, s) in [
        ("silent", &mut silent),
        ("half-sent headers", &mut half),
        ("idle keep-alive", &mut idle),
        ("stalled body", &mut stalled),
    ] {
        let closed = closed_within(s, limit).await;
        assert!(
            closed.is_some(),
            "the {name} connection is still open after {limit:?}"
        );
    }

    tokio::time::sleep(TIMEOUT).await;
    ws_send(
        &mut ws,
        json!({"type": "config", "prompt": "Hi", "parameters": {"max_tokens": 3}}),
    )
    .await;
    assert_eq!(
        ws_recv(&mut ws).await["type"],
        "init",
        "the quiet WebSocket still works"
    );
    let body = long.await.unwrap();
    let (_, chunks) = common::parse_sse(&body);
    let usage = chunks.iter().rev().find_map(|c| c.get("usage")).cloned();
    assert!(
        body.contains("\"finish_reason\":\"length\""),
        "the stream ran to its end: {usage:?}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_out_of_file_descriptors_serves_again_once_slow_clients_time_out() {
    let dir = tempfile::tempdir().unwrap();
    // 128 descriptors (the model, the database and the runtime take some), 2 s to send headers.
    let node = NodeProcess::start(
        &dir.path().join("data"),
        &["--parallel", "1", "--ctx", "512", "--header-timeout", "2"],
        Some(128),
    );
    let addr = node.addr.clone();
    // Many more half-sent requests than the node has descriptors.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"GET /api/status HTTP/1.1\r\n").await.unwrap();
        slow.push(s);
    }
    // A normal client is served within a few header timeouts, while the slow ones stay.
    let started = Instant::now();
    let r = common::client()
        .get(format!("{}/api/status", node.url))
        .timeout(Duration::from_secs(15))
        .send()
        .await
        .expect("a normal client is served");
    assert_eq!(r.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(15));
    let v = common::client()
        .post(format!("{}/v1/chat/completions", node.url))
        .json(&json!({"messages": user("Hi"), "max_tokens": 2, "ignore_eos": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(v.status(), 200);
    drop(slow);
    // Said once per episode, not once per refused accept.
    let log = node.stderr();
    let said = log.matches("cannot accept connections for now").count();
    assert!((1..=3).contains(&said), "logged {said} times:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_gives_its_slot_back_after_the_write_timeout() {
    // One slot and scripted tokens, as fast as they are taken: a long answer fills any socket.
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.ctx = Some(8192);
        c.script = Some(hearth_engine::Script::default());
        c.limits.write_timeout = Duration::from_secs(3);
    })
    .await;
    // A client with a small receive buffer asks for eight long streams on one connection
    // (pipelined, so they are answered one after another: together more than the kernel's
    // socket buffers hold) and never reads them.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(t.node().addr()).await.unwrap();
    let body = json!({"messages": user("Tell a long story."), "max_tokens": 8000, "stream": true})
        .to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stuck.write_all(request.repeat(8).as_bytes()).await.unwrap();
    // Until its answer is stuck: the slot busy, and no token generated for 200 ms.
    common::wait_for(
        async || {
            let before = t.get_json("/api/status").await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            let after = t.get_json("/api/status").await;
            after["active"] == 1 && after["tokens_generated"] == before["tokens_generated"]
        },
        "the unread answer to hold its slot",
    )
    .await;
    // The next request gets the slot once the stuck one's writes time out (without the timeout
    // it would wait for an answer no one reads).
    let r = common::client()
        .post(t.url("/v1/chat/completions"))
        .json(&json!({"messages": user("Hi"), "max_tokens": 3}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("served once the stuck client's slot is back");
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 3, "{v}");
    // The stuck client's connection was closed.
    let mut buf = vec![0u8; 1 << 16];
    let mut ended = false;
    for _ in 0..10_000 {
        match stuck.read(&mut buf).await {
            Ok(0) | Err(_) => {
                ended = true;
                break;
            }
            Ok(_) => {}
        }
    }
    assert!(ended, "the stuck client's connection is still open");
    t.stop().await;
}
