//! Worker mode's wire protocol, each side against a peer of our own: a scripted worker checks
//! the hub's task frames, stop frames and UTF-8 handling; bad input on the hub door and on the
//! worker side is survived; and the independent Python hub (`tests/worker_hub.py`) drives a
//! Hearth worker.

use crate::common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::hub::{
    frame, greedy, raw_worker, spawn_chat, start_hub, start_worker, start_worker_at, wait_workers,
    workers, TOKEN,
};
use common::process::{repo_root, run_peer, venv_python};
use common::{client, model_path, MODEL_ID};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

/// The close code a hub sends next (skipping anything else).
async fn close_code(ws: &mut common::Ws) -> u16 {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Close(Some(f))))) => return u16::from(f.code),
            Ok(Some(Ok(Message::Close(None)))) | Ok(None) => return 1005,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => panic!("connection failed before a close frame: {e}"),
            Err(_) => panic!("no close frame within 10 s"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_worker_sees_the_documents_task_and_its_frames_become_the_answer() {
    let hub = start_hub(1, false).await;
    let (mut ws, header) = raw_worker(
        &hub,
        &format!("token={TOKEN}&model=scripted&max_concurrency=1&name=fake"),
    )
    .await;
    assert_eq!(header.as_ref().map(|h| h.to_str().unwrap()), Some("1"));
    wait_workers(&hub, 1).await;

    let request = spawn_chat(
        &hub,
        json!({"model": "scripted", "temperature": 0, "max_tokens": 10,
                    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]}),
    );
    let task: Value = loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Text(t))) => break serde_json::from_str(t.as_str()).unwrap(),
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(task["state"], 0);
    let id = task["id"].as_u64().unwrap();
    assert!((1..1 << 31).contains(&id), "{task}");
    assert_eq!(task["system"], "sys");
    assert_eq!(task["messages"], json!([{"role": "user", "content": "hi"}]));
    assert_eq!(task["max_new_tokens"], 10);
    assert_eq!(task["temperature"].as_f64(), Some(0.0));
    assert!(task["created_at"].is_number());
    assert!(
        task.get("hearth").is_none(),
        "no extension for a worker that did not ask"
    );
    let id = u32::try_from(id).unwrap();
    // "é" split across two frames, garbage in between, then the end frame.
    ws.send(frame(id, b"h\xC3")).await.unwrap();
    ws.send(Message::text("not json")).await.unwrap();
    ws.send(frame(id + 1, b"unknown task")).await.unwrap();
    ws.send(Message::binary(vec![1u8, 2])).await.unwrap();
    ws.send(frame(id, b"\xA9llo")).await.unwrap();
    ws.send(Message::text("")).await.unwrap(); // keepalive
    ws.send(frame(id, b"")).await.unwrap();
    let answer = request.await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"], "héllo",
        "{answer}"
    );
    assert_eq!(answer["model"], "scripted");
    // Stop: a second request whose client goes away gets a stop frame.
    let url = hub.url("/v1/chat/completions");
    let gone = tokio::spawn(async move {
        let _ = client()
            .post(url)
            .json(&json!({"model": "scripted", "stream": true, "messages": [{"role": "user", "content": "x"}]}))
            .send()
            .await;
    });
    let task: Value = loop {
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Text(t))) => break serde_json::from_str(t.as_str()).unwrap(),
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    };
    let id = u32::try_from(task["id"].as_u64().unwrap()).unwrap();
    gone.abort();
    let _ = gone.await;
    // The hub notices the client is gone when it next writes to it: keep sending text.
    let deadline = Instant::now() + Duration::from_secs(30);
    let stop: Value = loop {
        assert!(Instant::now() < deadline, "no stop frame within 30 s");
        ws.send(frame(id, b"x")).await.unwrap();
        match tokio::time::timeout(Duration::from_millis(200), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) if !t.is_empty() => {
                break serde_json::from_str(t.as_str()).unwrap()
            }
            Ok(Some(Ok(_))) | Err(_) => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(stop, json!({"id": id, "stop": true}));
    ws.send(frame(id, b"late, ignored")).await.unwrap();
    ws.send(frame(id, b"")).await.unwrap();
    assert_eq!(workers(&hub).await[0]["in_flight"], 0);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_on_the_hub_door_keeps_serving() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    wait_workers(&hub, 1).await;

    let (mut ws, _) = raw_worker(&hub, "model=m&name=n").await;
    assert_eq!(close_code(&mut ws).await, 4001);
    let (mut ws, _) = raw_worker(&hub, "token=t&model=m&max_concurrency=zero&name=n").await;
    assert_eq!(close_code(&mut ws).await, 4001);
    let (mut ws, _) = raw_worker(&hub, "token=wrong&model=m&max_concurrency=1&name=n").await;
    assert_eq!(close_code(&mut ws).await, 4002);
    // The same model and name twice: the first connection is superseded.
    let q = format!("token={TOKEN}&model=other&max_concurrency=1&name=dup");
    let (mut first, _) = raw_worker(&hub, &q).await;
    let (mut second, _) = raw_worker(&hub, &q).await;
    assert_eq!(close_code(&mut first).await, 4003);
    // Garbage from a registered worker is ignored...
    for m in [
        Message::text("not json"),
        Message::text(r#"{"id":1}"#),
        Message::text(r#"{"id":4294967296,"done":{}}"#),
        Message::binary(vec![0u8]),
        frame(77, b"for a task never given"),
        frame(77, b""),
    ] {
        second.send(m).await.unwrap();
    }
    // ...and a message over 4 MiB closes it with 1009.
    second
        .send(Message::binary(vec![0u8; 5 * 1024 * 1024]))
        .await
        .unwrap();
    assert_eq!(close_code(&mut second).await, 1009);

    // The hub and its real worker still serve; only the real worker is listed.
    let answer = hub.chat(greedy("Say hi.", 8)).await;
    assert_eq!(answer["usage"]["completion_tokens"], 8);
    let listed = wait_workers(&hub, 1).await;
    assert_eq!(listed[0]["name"], "w1");
    worker.stop().await;
    hub.stop().await;
}

/// Accept one worker on our own hub socket, announcing a Hearth hub; returns the socket and
/// the request's path and query.
async fn accept_hub(
    listener: &tokio::net::TcpListener,
) -> (
    tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    String,
) {
    let (tcp, _) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
        .await
        .expect("the worker connects")
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let seen2 = seen.clone();
    // tungstenite's callback signature fixes this Result's error type.
    #[allow(clippy::result_large_err)]
    let callback = move |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
        *seen2.lock().unwrap() = req.uri().to_string();
        resp.headers_mut()
            .insert("x-hearth-hub", HeaderValue::from_static("1"));
        Ok(resp)
    };
    let ws = tokio_tungstenite::accept_hdr_async(tcp, callback)
        .await
        .unwrap();
    let uri = seen.lock().unwrap().clone();
    (ws, uri)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_on_the_worker_side_keeps_serving() {
    // A hub of our own (tokio-tungstenite) that announces itself as a Hearth hub.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let worker = start_worker_at(format!("ws://127.0.0.1:{port}/node"), "solo", 2).await;
    let (mut ws, uri) = accept_hub(&listener).await;
    assert!(uri.starts_with("/node?"), "{uri}");
    for part in [
        format!("token={TOKEN}"),
        format!("model={MODEL_ID}"),
        "max_concurrency=2".to_owned(),
        "name=solo".to_owned(),
        "hearth=1".to_owned(),
    ] {
        assert!(uri.contains(&part), "{uri} lacks {part}");
    }

    // Refused, each with a warning: not JSON, an id beyond 32 bits, a task not pending,
    // messages of the wrong type, a stop for an unknown task, a binary message.
    for m in [
        Message::text("not json"),
        Message::text(r#"{"state":0,"id":4294967296,"messages":["x"],"max_new_tokens":4}"#),
        Message::text(r#"{"state":1,"id":8,"messages":["x"],"max_new_tokens":4}"#),
        Message::text(r#"{"state":0,"id":9,"messages":"x"}"#),
        Message::text(r#"{"id":12345,"stop":true}"#),
        Message::binary(vec![1u8, 2, 3, 4, 5]),
    ] {
        ws.send(m).await.unwrap();
    }
    // A valid task still runs: frames, then (Hearth hub) the done report, then the end frame.
    ws.send(Message::text(
        r#"{"state":0,"id":5,"system":"","messages":[{"role":"user","content":"Count."}],
            "max_new_tokens":8,"temperature":0,"created_at":1,"hearth":{"ignore_eos":true}}"#,
    ))
    .await
    .unwrap();
    let mut text = Vec::new();
    let mut done = None;
    // The tokens each data frame carries, told after it (Hearth hub).
    let mut counted = 0;
    let mut uncounted_frame = false;
    loop {
        let m = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("the task's frames")
            .unwrap()
            .unwrap();
        match m {
            Message::Binary(b) => {
                let id = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                assert_eq!(id, 5, "only task 5 is answered");
                if b.len() == 4 {
                    break;
                }
                assert!(
                    std::str::from_utf8(&b[4..]).is_ok(),
                    "each frame is UTF-8 on its own"
                );
                text.extend_from_slice(&b[4..]);
                uncounted_frame = true;
            }
            Message::Text(t) if t.is_empty() => {} // keepalive
            Message::Text(t) => {
                let v = serde_json::from_str::<Value>(t.as_str()).unwrap();
                if let Some(n) = v.get("tokens") {
                    assert_eq!(v["id"], 5, "{v}");
                    assert!(uncounted_frame, "a count follows the frames it counts: {v}");
                    counted += n.as_u64().unwrap();
                    uncounted_frame = false;
                } else {
                    done = Some(v);
                }
            }
            _ => {}
        }
    }
    assert!(!text.is_empty());
    let done = done.expect("a Hearth hub gets the done report");
    assert_eq!(done["id"], 5);
    assert_eq!(done["done"]["finish_reason"], "length");
    assert_eq!(done["done"]["usage"]["completion_tokens"], 8);
    assert!(!uncounted_frame, "every data frame is counted");
    assert_eq!(counted, 8, "the counts add up to the tokens generated");

    // The hub closes with 4002; the worker comes back after its backoff.
    ws.send(Message::Close(Some(CloseFrame {
        code: CloseCode::from(4002),
        reason: "bad token".into(),
    })))
    .await
    .unwrap();
    drop(ws);
    let _again = tokio::time::timeout(Duration::from_secs(15), accept_hub(&listener))
        .await
        .expect("the worker reconnects within its first backoff");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_independent_python_hub_drives_a_hearth_worker() {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo_root().join("tests/worker_hub.py"))
        .env("HEARTH_NODE_BIN", env!("CARGO_BIN_EXE_hearth-node"))
        .env("HEARTH_TEST_MODEL", model_path());
    let (stdout, _) = run_peer(cmd, "the python hub").await;
    assert!(stdout.contains("worker hub OK"), "{stdout}");
}
