//! Load, limits and lifecycle: a full queue is refused (429 + Retry-After, `rate_limited`), a
//! client that goes away frees its slot, generation ends with `length` at the context's end,
//! SIGTERM gives every open stream a final message and exits within 5 seconds, and
//! `/metrics` counts what the engine did; a node on an empty models folder starts, every door
//! says "no model is loaded" in its own shape, and it serves once a model is loaded; an SSE
//! stream waiting in the queue sends comments (`--sse-keep-alive`; a proxy's idle timeout
//! cut it).

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::process::NodeProcess;
use common::{user, wait_for, ws_recv, ws_send, TestNode};
use futures_util::StreamExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

const PROMPT: &str = "Write a long story about a robot learning to paint.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_refused_with_retry_after_on_both_doors() {
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.queue = 1;
    })
    .await;
    let long =
        json!({"messages": user(PROMPT), "max_tokens": 400, "temperature": 0, "stream": true});
    let a = t.post("/v1/chat/completions", &long).await;
    let b = t.post("/v1/chat/completions", &long).await;
    assert_eq!(a.status(), 200);
    assert_eq!(b.status(), 200);
    wait_for(
        async || {
            let s = t.status().await;
            s["active"] == 1 && s["queued"] == 1
        },
        "one running and one queued request",
    )
    .await;
    let r = t
        .post("/v1/chat/completions", &json!({"messages": user("hi")}))
        .await;
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");

    let mut ws = t.ws("/generate").await;
    ws_send(&mut ws, json!({"type": "config", "prompt": "hi"})).await;
    let e = ws_recv(&mut ws).await;
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"], "rate_limited");
    assert_eq!(e["recovery_action"], "retry_later");

    // Dropping the two streams frees the slot and the queue; the node serves again.
    drop(a);
    drop(b);
    wait_for(
        async || t.status().await["active"] == 0,
        "the slot to be freed",
    )
    .await;
    let v = t
        .chat(json!({"messages": user("hi"), "max_tokens": 2, "ignore_eos": true}))
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 2);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_cancels_its_generation() {
    let t = TestNode::start(2).await;
    let mut r = t
        .post(
            "/v1/chat/completions",
            &json!({"messages": user(PROMPT), "max_tokens": 1000, "temperature": 0, "stream": true}),
        )
        .await;
    // The role chunk goes out before the engine takes the request into a slot: wait for the
    // chunk after it, a token, and the slot is surely busy.
    let mut sse = String::new();
    while sse.matches("data: ").count() < 2 {
        let chunk = r
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended before a token");
        sse.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(t.status().await["active"], 1, "{sse}");
    drop(r);
    t.wait_idle("the SSE client's slot to be freed").await;
    let generated = t.status().await["tokens_generated"].as_u64().unwrap();
    assert!(generated < 1000, "generation ran on after the client left");

    let mut ws = t.ws("/generate").await;
    ws_send(
        &mut ws,
        json!({"type": "config", "prompt": PROMPT, "parameters": {"max_tokens": 1000}}),
    )
    .await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    assert_eq!(ws_recv(&mut ws).await["type"], "token");
    drop(ws);
    t.wait_idle("the WebSocket client's slot to be freed").await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_ends_with_length_at_the_end_of_the_context() {
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.ctx = Some(96);
    })
    .await;
    let ctx = t.node().host().model().unwrap().context as u64;
    let v = t
        .chat(json!({"messages": user(PROMPT), "temperature": 0}))
        .await;
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let u = &v["usage"];
    let used = u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap();
    // The last sampled token is reported but never needs a place in the context.
    assert_eq!(used, ctx + 1, "{v} with a context of {ctx}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_gives_open_streams_a_final_message_and_exits_within_5_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = NodeProcess::start(
        &dir.path().join("data"),
        &["--parallel", "2", "--ctx", "2048"],
        None,
    );
    let (url, addr) = (child.url.clone(), child.addr.clone());

    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/generate"))
        .await
        .unwrap();
    ws_send(
        &mut ws,
        json!({"type": "config", "prompt": PROMPT, "parameters": {"max_tokens": 1500}}),
    )
    .await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    let mut sse = common::client()
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"messages": user(PROMPT), "max_tokens": 1500, "stream": true}))
        .send()
        .await
        .unwrap();
    let _ = sse.chunk().await.unwrap();

    let sent = Instant::now();
    let ok = Command::new("kill")
        .args(["-TERM", &child.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());

    // The WebSocket gets a server_shutdown error, then a close.
    let mut got_error = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("ws final message")
        {
            Some(Ok(Message::Text(t))) => {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if v["type"] == "error" {
                    assert_eq!(v["error"], "server_shutdown");
                    assert_eq!(v["recovery_action"], "reconnect");
                    got_error = true;
                }
            }
            Some(Ok(Message::Close(frame))) => {
                assert_eq!(u16::from(frame.unwrap().code), 1001);
                break;
            }
            Some(Ok(_)) => {}
            None | Some(Err(_)) => break,
        }
    }
    assert!(got_error, "no final error message on the WebSocket");
    // The SSE stream ends with an error object and [DONE].
    let mut rest = String::new();
    while let Ok(Some(c)) = tokio::time::timeout(Duration::from_secs(5), sse.chunk())
        .await
        .unwrap()
    {
        rest.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(rest.contains("server_shutdown"), "{rest}");
    assert!(rest.trim_end().ends_with("data: [DONE]"), "{rest}");

    let status = loop {
        if let Some(s) = child.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "still running 5 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "the port is still open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_engine_did_in_prometheus_text() {
    let t = TestNode::start(2).await;
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
            .parse()
            .unwrap()
    };
    let get = || async {
        let r = common::client()
            .get(t.url("/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
        r.text().await.unwrap()
    };
    let before = get().await;
    assert_eq!(metric(&before, "hearth_model_ready"), 1.0);
    assert_eq!(metric(&before, "hearth_slots"), 2.0);
    assert!(before.contains("# TYPE hearth_tokens_generated counter"));
    let answer = t
        .chat(json!({"messages": user("Hi"), "max_tokens": 5, "temperature": 0}))
        .await;
    let made = answer["usage"]["completion_tokens"].as_f64().unwrap();
    let after = get().await;
    assert_eq!(
        metric(&after, "hearth_tokens_generated_total")
            - metric(&before, "hearth_tokens_generated_total"),
        made
    );
    assert_eq!(
        metric(&after, "hearth_requests_finished_total")
            - metric(&before, "hearth_requests_finished_total"),
        1.0
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_no_model_starts_and_every_door_says_so() {
    let empty = tempfile::tempdir().unwrap();
    let t = TestNode::start_with(|c| {
        c.models_dir = empty.path().to_path_buf();
        c.model = None;
    })
    .await;
    assert_eq!(t.status().await["model"]["state"], "empty");
    assert_eq!(t.get_json("/v1/models").await["data"], json!([]));
    let r = t
        .post("/v1/chat/completions", &json!({"messages": user("hi")}))
        .await;
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], "no model is loaded", "{v}");
    assert_eq!(v["error"]["type"], "server_error", "{v}");

    let mut ws = t.ws("/generate").await;
    ws_send(&mut ws, json!({"type": "config", "prompt": "hi"})).await;
    let e = ws_recv(&mut ws).await;
    assert_eq!(
        (&e["type"], &e["message"]),
        (&json!("error"), &json!("no model is loaded")),
        "{e}"
    );

    let mut ws = t.ws("/ws").await;
    ws_send(
        &mut ws,
        json!({"prompts": [{"request_id": "a", "prompt": "hi"}]}),
    )
    .await;
    let Some(Ok(Message::Text(text))) = ws.next().await else {
        panic!("no batch answer");
    };
    let v: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
    assert_eq!(v[0]["type"], "ERROR", "{v}");
    assert_eq!(v[0]["error"], "no model is loaded", "{v}");

    // A model put in the folder and loaded through the API serves without a restart.
    let model = common::model_path();
    std::fs::copy(&model, empty.path().join(model.file_name().unwrap())).unwrap();
    let r = t
        .post("/api/models/load", &json!({"id": common::MODEL_ID}))
        .await;
    assert_eq!(r.status(), 202);
    t.node().host().ready().await.expect("the model loads");
    let v = t
        .chat(json!({"messages": user("hi"), "max_tokens": 3, "ignore_eos": true}))
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 3);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_asked_for_by_name_must_exist() {
    let empty = tempfile::tempdir().unwrap();
    let mut config = hearth_node::NodeConfig::new(empty.path().join("data"));
    config.models_dir = empty.path().to_path_buf();
    config.model = Some("nowhere".into());
    config.port = 0;
    config.key_storage = hearth_auth::identity::KeyStorage::File;
    let e = hearth_node::Node::start(config)
        .await
        .expect_err("no such model");
    assert!(e.to_string().contains("model nowhere not found"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_waiting_in_the_queue_send_comments() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(
        &dir.path().join("data"),
        &["--parallel", "1", "--ctx", "4096", "--sse-keep-alive", "1"],
        None,
    );
    let http = common::client();
    // The one slot, busy for seconds even on a fast machine.
    let mut busy = http
        .post(format!("{}/v1/chat/completions", node.url))
        .json(&json!({"messages": user(PROMPT), "max_tokens": 4000, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    let _ = busy.chunk().await.unwrap();
    let openai = http
        .post(format!("{}/v1/chat/completions", node.url))
        .json(&json!({"messages": user("Say hi."), "max_tokens": 5, "stream": true}))
        .send()
        .await
        .unwrap();
    let conversation: serde_json::Value = http
        .post(format!("{}/api/conversations", node.url))
        .json(&json!({"title": "waiting"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let chat = http
        .post(format!(
            "{}/api/conversations/{}/chat",
            node.url,
            conversation["id"].as_str().unwrap()
        ))
        .json(&json!({"content": "Say hi."}))
        .send()
        .await
        .unwrap();
    // A token of the OpenAI door's (`"content":"x"`, not the role chunk's empty one) or of
    // the chat's.
    let token = |line: &str| {
        line.strip_prefix("data: ")
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .is_some_and(|v| {
                v["type"] == "token"
                    || v["choices"][0]["delta"]["content"]
                        .as_str()
                        .is_some_and(|c| !c.is_empty())
            })
    };
    for (door, mut r) in [("OpenAI", openai), ("the UI's chat", chat)] {
        let started = Instant::now();
        let mut text = String::new();
        while !text.lines().any(|l| l.starts_with(':')) {
            let left = Duration::from_secs(10).saturating_sub(started.elapsed());
            match tokio::time::timeout(left, r.chunk()).await {
                Ok(Ok(Some(c))) => text.push_str(&String::from_utf8_lossy(&c)),
                other => panic!("{door}: no comment while waiting ({other:?}): {text}"),
            }
        }
        // It came while the stream waited, before any token.
        assert!(!text.lines().any(token), "{door}: {text}");
    }
    // The first answer still holds the slot, and nothing has finished.
    let status = common::get_json_at(format!("{}/api/status", node.url)).await;
    assert_eq!(
        (&status["active"], &status["requests_finished"]),
        (&json!(1), &json!(0)),
        "{status}"
    );
}
