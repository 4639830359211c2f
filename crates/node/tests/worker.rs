//! Worker mode, both sides, with real nodes and the real default model: a Hearth worker
//! against a Hearth hub; two workers with two slots each take four concurrent requests; a
//! worker killed mid-answer has its task re-dispatched (to another worker, or to the hub's own
//! engine), or failed with a clear error when nothing is left; a scripted worker checks the
//! hub's task frames and UTF-8 handling; bad input on the hub door and on the worker side is
//! survived; and the independent Python hub (`tests/worker_hub.py`) drives a Hearth worker.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client, model_path, similarity, user, TestNode, MODEL_ID};
use futures_util::{SinkExt, StreamExt};
use hearth_node::hub::join::JoinConfig;
use hearth_node::hub::HubConfig;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

const TOKEN: &str = "test-hub-token";
const STORY: &str = "Write a long story about a robot learning to paint.";

async fn start_hub(parallel: usize, serve_locally: bool) -> TestNode {
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

async fn start_worker_at(url: String, name: &str, parallel: usize) -> TestNode {
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

async fn start_worker(hub: &TestNode, name: &str, parallel: usize) -> TestNode {
    start_worker_at(format!("{}/node", hub.ws_base), name, parallel).await
}

async fn hub_status(hub: &TestNode) -> Value {
    hub.status().await["hub"].clone()
}

async fn workers(hub: &TestNode) -> Vec<Value> {
    hub_status(hub).await["workers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Wait until the hub lists exactly `n` workers.
async fn wait_workers(hub: &TestNode, n: usize) -> Vec<Value> {
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

fn greedy(prompt: &str, max_tokens: u32) -> Value {
    json!({"model": MODEL_ID, "messages": user(prompt), "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": true})
}

/// A streaming chat completion whose SSE `data:` payloads arrive on a channel as they come.
fn stream_chat(node: &TestNode, mut body: Value) -> mpsc::Receiver<String> {
    body["stream"] = json!(true);
    stream_sse(node.url("/v1/chat/completions"), body)
}

/// POST `body` to `url` and pass on the `data:` payloads of the SSE answer as they come.
fn stream_sse(url: String, body: Value) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(4096);
    tokio::spawn(async move {
        let resp = client().post(url).json(&body).send().await.expect("sent");
        assert_eq!(resp.status(), 200);
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = body.next().await {
            buf.extend_from_slice(&chunk.expect("body chunk"));
            while let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = buf.drain(..i + 2).collect();
                let event = String::from_utf8(event).expect("an SSE event is UTF-8");
                for line in event.lines() {
                    if let Some(d) = line.strip_prefix("data: ") {
                        if tx.send(d.to_owned()).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    rx
}

async fn next_data(rx: &mut mpsc::Receiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(120), rx.recv())
        .await
        .expect("an SSE event within 120 s")
        .expect("the stream ended without [DONE]")
}

/// Read a chat stream to `[DONE]`: the content, the finish reason, and any error object.
async fn finish_stream(
    rx: &mut mpsc::Receiver<String>,
    content: &mut String,
) -> (Option<String>, Option<Value>) {
    let mut finish = None;
    let mut error = None;
    loop {
        let d = next_data(rx).await;
        if d == "[DONE]" {
            return (finish, error);
        }
        let v: Value = serde_json::from_str(&d).expect("chunk is JSON");
        if v.get("error").is_some() {
            error = Some(v);
            continue;
        }
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            content.push_str(c);
        }
        if let Some(r) = v["choices"][0]["finish_reason"].as_str() {
            finish = Some(r.to_owned());
        }
    }
}

/// Read a chat stream until `n` non-empty content deltas have arrived.
async fn read_deltas(rx: &mut mpsc::Receiver<String>, n: usize, content: &mut String) {
    let mut seen = 0;
    while seen < n {
        let d = next_data(rx).await;
        assert_ne!(
            d, "[DONE]",
            "the answer ended before the worker could be stopped"
        );
        let v: Value = serde_json::from_str(&d).expect("chunk is JSON");
        assert!(v.get("error").is_none(), "{v}");
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            if !c.is_empty() {
                content.push_str(c);
                seen += 1;
            }
        }
    }
}

/// The name of the worker running a task now.
async fn busy_worker(hub: &TestNode) -> String {
    let w = workers(hub).await;
    let busy: Vec<&Value> = w
        .iter()
        .filter(|w| w["in_flight"].as_u64() > Some(0))
        .collect();
    assert_eq!(busy.len(), 1, "exactly one worker is busy: {w:?}");
    busy[0]["name"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hearth_worker_serves_a_hearth_hub() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    let listed = wait_workers(&hub, 1).await;
    assert_eq!(listed[0]["name"], "w1");
    assert_eq!(listed[0]["model"], MODEL_ID);
    assert_eq!(listed[0]["max_concurrency"], 2);
    assert_eq!(listed[0]["hearth"], true);

    // Through the hub, then straight from the worker: the same greedy answer and real counts.
    let body = json!({"model": MODEL_ID, "max_tokens": 24, "temperature": 0,
        "messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Name three fruits."}]});
    let via_hub = hub.chat(body.clone()).await;
    let direct = worker.chat(body).await;
    assert_eq!(
        via_hub["choices"][0]["message"]["content"], direct["choices"][0]["message"]["content"],
        "the worker renders the same conversation the hub received"
    );
    assert_eq!(
        via_hub["usage"], direct["usage"],
        "usage is the worker's real count"
    );
    assert_eq!(
        via_hub["choices"][0]["finish_reason"],
        direct["choices"][0]["finish_reason"]
    );

    // Streaming through the hub.
    let (content, chunks) = hub.chat_stream(greedy("Count to five.", 16)).await;
    assert!(!content.is_empty());
    assert_eq!(
        chunks
            .iter()
            .rev()
            .find_map(|c| c["choices"][0]["finish_reason"].as_str()),
        Some("length")
    );

    // The hub's own engine took nothing (--hub-local false); the worker finished both.
    let status = hub.status().await;
    assert_eq!(status["requests_finished"], 0, "{status}");
    assert_eq!(workers(&hub).await[0]["completed"], 2);
    let metrics = client()
        .get(hub.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("hearth_hub_workers 1"), "{metrics}");
    assert!(
        metrics.contains("hearth_hub_worker_slots{name=\"w1\""),
        "{metrics}"
    );

    worker.stop().await;
    wait_workers(&hub, 0).await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_with_two_slots_take_four_concurrent_requests() {
    let hub = start_hub(1, false).await;
    let w1 = start_worker(&hub, "w1", 2).await;
    let w2 = start_worker(&hub, "w2", 2).await;
    wait_workers(&hub, 2).await;

    let prompts = [
        "Name a colour.",
        "Name an animal.",
        "Name a city.",
        "Name a tool.",
    ];
    let requests = prompts.iter().map(|p| hub.chat(greedy(p, 32)));
    let watch = async {
        // While they run, no worker ever holds more than its two slots.
        let mut peak = 0;
        for _ in 0..50 {
            for w in workers(&hub).await {
                let n = w["in_flight"].as_u64().unwrap();
                assert!(n <= 2, "{w}");
                peak = peak.max(n);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        peak
    };
    let (answers, peak) = tokio::join!(futures_util::future::join_all(requests), watch);
    for a in &answers {
        assert_eq!(a["choices"][0]["finish_reason"], "length", "{a}");
        assert_eq!(a["usage"]["completion_tokens"], 32, "{a}");
    }
    assert_eq!(peak, 2, "both slots of a worker were in use at once");
    let done: Vec<u64> = workers(&hub)
        .await
        .iter()
        .map(|w| w["completed"].as_u64().unwrap())
        .collect();
    assert_eq!(
        done,
        [2, 2],
        "four requests spread over two workers with two slots each"
    );
    assert_eq!(hub.status().await["requests_finished"], 0);

    w1.stop().await;
    w2.stop().await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_mid_task_redispatches_to_another_worker() {
    let hub = start_hub(1, false).await;
    let mut w1 = Some(start_worker(&hub, "w1", 1).await);
    let mut w2 = Some(start_worker(&hub, "w2", 1).await);
    wait_workers(&hub, 2).await;

    let mut rx = stream_chat(&hub, greedy(STORY, 120));
    let mut content = String::new();
    read_deltas(&mut rx, 5, &mut content).await;
    let before = content.clone();
    // Take the busy worker away mid-answer.
    let victim = if busy_worker(&hub).await == "w1" {
        w1.take()
    } else {
        w2.take()
    };
    victim.expect("worker").stop().await;

    let (finish, error) = finish_stream(&mut rx, &mut content).await;
    assert!(
        error.is_none(),
        "the answer survived the lost worker: {error:?}"
    );
    assert_eq!(finish.as_deref(), Some("length"));
    assert!(content.starts_with(&before) && content.len() > before.len());
    assert!(hub_status(&hub).await["redispatched"].as_u64().unwrap() >= 1);

    // The answer matches what the remaining worker gives from scratch (greedy; continuing
    // from text can tokenize differently, so this is a similarity, not equality).
    let reference = hub.chat(greedy(STORY, 120)).await;
    let reference = reference["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        similarity(&content, &reference) > 0.6,
        "re-dispatched: {content:?}\nfrom scratch: {reference:?}"
    );

    for w in [w1, w2].into_iter().flatten() {
        w.stop().await;
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_worker_falls_back_to_the_hubs_own_engine() {
    // The hub serves too, with one slot: a first request fills it, so the second goes to the
    // worker; when the worker is lost, the second continues on the hub (queued behind the first).
    let hub = start_hub(1, true).await;
    let worker = start_worker(&hub, "w1", 1).await;
    wait_workers(&hub, 1).await;

    // Long answers, so that neither can end before the worker is stopped.
    let mut first = stream_chat(&hub, greedy(STORY, 200));
    let mut first_text = String::new();
    read_deltas(&mut first, 1, &mut first_text).await;
    let mut second = stream_chat(&hub, greedy("Describe the sea in detail.", 200));
    let mut content = String::new();
    read_deltas(&mut second, 3, &mut content).await;
    assert_eq!(busy_worker(&hub).await, "w1");
    worker.stop().await;

    let (finish, error) = finish_stream(&mut second, &mut content).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(finish.as_deref(), Some("length"));
    let (finish, error) = finish_stream(&mut first, &mut first_text).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(finish.as_deref(), Some("length"));
    assert!(hub.status().await["requests_finished"].as_u64().unwrap() >= 2);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_worker_lost_mid_answer_is_a_clear_error() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 1).await;
    wait_workers(&hub, 1).await;
    let mut rx = stream_chat(&hub, greedy(STORY, 200));
    let mut content = String::new();
    read_deltas(&mut rx, 3, &mut content).await;
    worker.stop().await;
    let (_, error) = finish_stream(&mut rx, &mut content).await;
    let error = error.expect("an error object before [DONE]");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("disconnected") && message.contains(MODEL_ID),
        "{message}"
    );
    // The hub still answers, with a clear error while no worker serves the model.
    let r = hub.post("/v1/chat/completions", &greedy("Hi", 4)).await;
    assert_eq!(r.status(), 500);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("no worker"), "{message}");
    hub.stop().await;
}

/// A raw worker connection to a hub.
async fn raw_worker(hub: &TestNode, query: &str) -> (common::Ws, Option<HeaderValue>) {
    let (ws, resp) = tokio_tungstenite::connect_async(format!("{}/node?{query}", hub.ws_base))
        .await
        .expect("upgrade");
    let header = resp.headers().get("x-hearth-hub").cloned();
    (ws, header)
}

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

fn frame(id: u32, bytes: &[u8]) -> Message {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(bytes);
    Message::binary(v)
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

    let request = {
        let url = hub.url("/v1/chat/completions");
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&json!({"model": "scripted", "temperature": 0, "max_tokens": 10,
                    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
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
            }
            Message::Text(t) if t.is_empty() => {} // keepalive
            Message::Text(t) => done = Some(serde_json::from_str::<Value>(t.as_str()).unwrap()),
            _ => {}
        }
    }
    assert!(!text.is_empty());
    let done = done.expect("a Hearth hub gets the done report");
    assert_eq!(done["id"], 5);
    assert_eq!(done["done"]["finish_reason"], "length");
    assert_eq!(done["done"]["usage"]["completion_tokens"], 8);

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
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing — run `make test` (or scripts/setup.sh) to create it",
        python.display()
    );
    let model = model_path();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(root.join("tests/worker_hub.py"))
            .env("HEARTH_NODE_BIN", env!("CARGO_BIN_EXE_hearth-node"))
            .env("HEARTH_TEST_MODEL", model)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python hub failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("worker hub OK"), "{stdout}");
}

/// The streaming door dispatches too: with `--hub-local false` only the worker can answer a
/// `/generate` config; pause, which a remote generation cannot do, is refused in the door's
/// own error shape and the stream still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generate_door_runs_on_a_worker_in_hub_mode() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    wait_workers(&hub, 1).await;
    let mut ws = hub.ws("/generate").await;
    common::ws_send(
        &mut ws,
        json!({"type": "config", "model": MODEL_ID, "prompt": STORY,
               "parameters": {"max_tokens": 48, "temperature": 0}}),
    )
    .await;
    let init = common::ws_recv(&mut ws).await;
    assert_eq!(init["type"], "init", "{init}");
    assert_eq!(init["model"], MODEL_ID);
    common::ws_send(&mut ws, json!({"type": "control", "action": "pause"})).await;
    let (completion, seen) = common::ws_until(&mut ws, "completion").await;
    let refusal = seen
        .iter()
        .find(|m| m["type"] == "error")
        .unwrap_or_else(|| panic!("pause on a worker was not refused: {seen:?}"));
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("worker")
            || refusal.to_string().contains("worker"),
        "{refusal}"
    );
    assert!(seen.iter().any(|m| m["type"] == "token"), "{seen:?}");
    assert!(
        completion["generated_text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{completion}"
    );
    let w = &workers(&hub).await[0];
    assert_eq!(w["completed"], 1, "{w}");
    worker.stop().await;
    hub.stop().await;
}

/// The UI's chat dispatches too: in hub mode with `--hub-local false` the answer comes from
/// the worker, is saved as it streams, and names the worker as the node that answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uis_chat_is_answered_by_a_worker_and_says_which() {
    let hub = start_hub(1, false).await;
    let worker = start_worker(&hub, "w1", 2).await;
    wait_workers(&hub, 1).await;
    let conv = hub.new_conversation("via a worker").await;
    let r = hub
        .post(
            &format!("/api/conversations/{conv}/chat"),
            &json!({"content": "Name three fruits."}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let sse = r.text().await.unwrap();
    assert!(sse.contains("\"type\":\"done\""), "{sse}");
    let c = hub.get_json(&format!("/api/conversations/{conv}")).await;
    let answer = &c["messages"][1];
    assert_eq!(answer["status"], "complete", "{answer}");
    assert!(!answer["content"].as_str().unwrap().is_empty(), "{answer}");
    assert_eq!(answer["node"], "w1", "{answer}");
    assert_eq!(workers(&hub).await[0]["completed"], 1);
    worker.stop().await;
    hub.stop().await;
}

/// A UI answer that moves from a lost worker to the hub's own engine names the hub under it
/// (the node that finished it), not the worker it started on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ui_answer_re_dispatched_from_a_lost_worker_names_the_node_that_finished_it() {
    let hub = start_hub(1, true).await;
    let worker = start_worker(&hub, "w1", 1).await;
    wait_workers(&hub, 1).await;
    let hub_name = hub.status().await["node"].as_str().unwrap().to_owned();
    assert_ne!(hub_name, "w1");

    // Fill the hub's own slot, so the UI's answer goes to the worker.
    let mut first = stream_chat(&hub, greedy(STORY, 200));
    let mut first_text = String::new();
    read_deltas(&mut first, 1, &mut first_text).await;

    let conv = hub.new_conversation("moves").await;
    let r = client()
        .patch(hub.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"temperature": 0, "max_tokens": 200}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut ui = stream_sse(
        hub.url(&format!("/api/conversations/{conv}/chat")),
        json!({"content": STORY}),
    );
    let mut started_on = None;
    let mut tokens = 0;
    while tokens < 3 {
        let v: Value = serde_json::from_str(&next_data(&mut ui).await).unwrap();
        match v["type"].as_str() {
            Some("start") => started_on = v["message"]["node"].as_str().map(str::to_owned),
            Some("token") => tokens += 1,
            Some("user") => {}
            _ => panic!("the answer ended before the worker could be stopped: {v}"),
        }
    }
    assert_eq!(started_on.as_deref(), Some("w1"));
    assert_eq!(busy_worker(&hub).await, "w1");
    worker.stop().await;

    let done = loop {
        let v: Value = serde_json::from_str(&next_data(&mut ui).await).unwrap();
        match v["type"].as_str() {
            Some("done") => break v,
            Some("error") => panic!("the answer did not survive the lost worker: {v}"),
            _ => {}
        }
    };
    assert_eq!(done["message"]["node"], hub_name.as_str(), "{done}");
    assert_eq!(done["message"]["status"], "complete", "{done}");
    let c = hub.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(c["messages"][1]["node"], hub_name.as_str(), "{c}");
    let (_, error) = finish_stream(&mut first, &mut first_text).await;
    assert!(error.is_none(), "{error:?}");
    hub.stop().await;
}
