//! Every bad-input case of the node issue, on both doors: each gets the door's own error
//! format, and a good request right after it still succeeds.

use crate::common;

use common::{user, ws_recv, ws_send, ws_send_text, ws_until, TestNode, MODEL_ID};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

fn long_prompt() -> String {
    // Well over the test node's 1024-token context.
    "the quick brown fox jumps over the lazy dog ".repeat(400)
}

async fn expect_openai_error(
    t: &TestNode,
    path: &str,
    body: &str,
    status: u16,
    param: Option<&str>,
) -> Value {
    let r = t.post_raw(path, body.to_owned()).await;
    assert_eq!(r.status().as_u16(), status, "{body}");
    let v: Value = r.json().await.expect("error body is JSON");
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
    v
}

async fn expect_chat_works(t: &TestNode) {
    let v = t
        .chat(json!({"messages": user("Hello"), "max_tokens": 3, "ignore_eos": true}))
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_door_rejects_bad_input_in_openai_format() {
    let t = TestNode::start(2).await;
    let chat = "/v1/chat/completions";
    let ok_msgs = r#"[{"role":"user","content":"hi"}]"#;
    let cases: Vec<(String, u16, Option<&str>)> = vec![
        ("this is not json".into(), 400, None),
        (
            format!(r#"{{"messages":{ok_msgs},"temperature":NaN}}"#),
            400,
            None,
        ),
        (r#"{"messages":"hi"}"#.into(), 400, None),
        (
            format!(r#"{{"messages":{ok_msgs},"max_tokens":"ten"}}"#),
            400,
            None,
        ),
        (
            format!(r#"{{"messages":{ok_msgs},"max_tokens":0}}"#),
            400,
            Some("max_tokens"),
        ),
        (
            format!(r#"{{"messages":{ok_msgs},"max_tokens":-4}}"#),
            400,
            Some("max_tokens"),
        ),
        (
            format!(r#"{{"messages":{ok_msgs},"temperature":-0.5}}"#),
            400,
            Some("temperature"),
        ),
        (
            format!(r#"{{"messages":{ok_msgs},"top_p":0}}"#),
            400,
            Some("top_p"),
        ),
        (
            format!(r#"{{"messages":{ok_msgs},"top_p":1.5}}"#),
            400,
            Some("top_p"),
        ),
        (
            format!(r#"{{"messages":{ok_msgs},"top_k":-1}}"#),
            400,
            Some("top_k"),
        ),
        (
            format!(r#"{{"model":"no-such-model","messages":{ok_msgs}}}"#),
            404,
            Some("model"),
        ),
    ];
    for (body, status, param) in cases {
        expect_openai_error(&t, chat, &body, status, param).await;
        expect_chat_works(&t).await;
    }
    let v = expect_openai_error(
        &t,
        chat,
        &json!({"messages": user(&long_prompt())}).to_string(),
        400,
        Some("messages"),
    )
    .await;
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    expect_chat_works(&t).await;
    // The UI's chat refuses it too, and keeps nothing of it: the UI gives it back to the user
    // to shorten, so it is never there twice.
    let conv = t.new_conversation("long").await;
    let r = t
        .post(
            &format!("/api/conversations/{conv}/chat"),
            &json!({"content": long_prompt()}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
    let detail = t.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(detail["messages"], json!([]), "{detail}");
    let v = expect_openai_error(
        &t,
        "/v1/completions",
        &json!({"prompt": long_prompt(), "max_tokens": 3}).to_string(),
        400,
        None,
    )
    .await;
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let v = expect_openai_error(
        &t,
        chat,
        &format!(r#"{{"model":"nope","messages":{ok_msgs}}}"#),
        404,
        None,
    )
    .await;
    assert_eq!(v["error"]["code"], "model_not_found");
    // Over the body limit.
    let big = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "a".repeat(hearth_protocol::limits::MAX_HTTP_BODY_BYTES + 1)
    );
    let v = expect_openai_error(&t, chat, &big, 413, None).await;
    assert_eq!(v["error"]["code"], "request_too_large");
    let says = v["error"]["message"].as_str().unwrap();
    assert!(says.contains("limit of 12 MiB"), "{says}");
    // Unknown paths and methods answer in the same format.
    expect_openai_error(&t, "/v1/nothing", "{}", 404, None).await;
    let r = common::client().get(t.url(chat)).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].is_string());
    expect_chat_works(&t).await;
    t.stop().await;
}

async fn expect_ws_error(ws: &mut common::Ws, needle: &str) -> Value {
    let m = ws_recv(ws).await;
    assert_eq!(m["type"], "error", "{m}");
    assert!(m["error"].is_string() && m["message"].is_string(), "{m}");
    assert!(
        m["recoverable"].is_boolean() && m["recovery_action"].is_string(),
        "{m}"
    );
    assert!(
        m["message"].as_str().unwrap().contains(needle),
        "error message {:?} does not mention {needle:?}",
        m["message"]
    );
    m
}

async fn expect_ws_generation_works(ws: &mut common::Ws) {
    ws_send(
        ws,
        json!({"type": "config", "prompt": "Hello", "parameters": {"max_tokens": 3, "ignore_eos": true}}),
    )
    .await;
    let (done, before) = ws_until(ws, "completion").await;
    assert_eq!(before[0]["type"], "init", "{before:?}");
    assert_eq!(done["usage"]["completion_tokens"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_door_rejects_bad_input_and_keeps_the_session() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/generate").await;
    // The first message is not a config.
    ws_send(&mut ws, json!({"type": "control", "action": "stop"})).await;
    expect_ws_error(&mut ws, "no generation").await;
    ws_send_text(&mut ws, "definitely not json").await;
    let e = expect_ws_error(&mut ws, "not valid JSON").await;
    assert_eq!(e["error"], "invalid_request");
    expect_ws_generation_works(&mut ws).await;

    let cases: Vec<(Value, &str)> = vec![
        (json!({"type": "bogus"}), "bogus"),
        (json!({"type": "control", "action": "explode"}), "explode"),
        (json!({"type": "config", "prompt": 42}), "invalid type"),
        (
            json!({"type": "config", "prompt": "x", "parameters": {"max_tokens": "ten"}}),
            "invalid type",
        ),
        (
            json!({"type": "config", "prompt": "x", "parameters": {"max_tokens": 0}}),
            "max_tokens",
        ),
        (
            json!({"type": "config", "prompt": "x", "parameters": {"max_tokens": -3}}),
            "max_tokens",
        ),
        (
            json!({"type": "config", "prompt": "x", "parameters": {"temperature": -1}}),
            "temperature",
        ),
        (
            json!({"type": "config", "prompt": "x", "parameters": {"top_p": 0}}),
            "top_p",
        ),
        (
            json!({"type": "config", "prompt": "x", "parameters": {"top_p": 1.1}}),
            "top_p",
        ),
        (
            json!({"type": "config", "prompt": "x", "parameters": {"top_k": -2}}),
            "top_k",
        ),
        (
            json!({"type": "config", "model": "no-such-model", "prompt": "x"}),
            "no-such-model",
        ),
        (
            json!({"type": "feedback", "rating": "good"}),
            "invalid type",
        ),
    ];
    for (msg, needle) in cases {
        ws_send(&mut ws, msg).await;
        expect_ws_error(&mut ws, needle).await;
        expect_ws_generation_works(&mut ws).await;
    }
    ws_send_text(
        &mut ws,
        r#"{"type":"config","prompt":"x","parameters":{"temperature":NaN}}"#,
    )
    .await;
    expect_ws_error(&mut ws, "JSON").await;
    ws_send(&mut ws, json!({"type": "config", "prompt": long_prompt()})).await;
    let e = expect_ws_error(&mut ws, "context").await;
    assert_eq!(e["error"], "context_length_exceeded");
    assert_eq!(e["recovery_action"], "reduce_prompt");
    ws_send(&mut ws, Value::Null).await;
    expect_ws_error(&mut ws, "invalid").await;
    ws.send_binary().await;
    expect_ws_error(&mut ws, "binary").await;
    expect_ws_generation_works(&mut ws).await;

    // A config while one is running is refused; the running one is unaffected.
    ws_send(&mut ws, json!({"type": "config", "prompt": "Write a short story about a robot learning to paint.", "parameters": {"max_tokens": 30, "temperature": 0}})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "init");
    ws_send(&mut ws, json!({"type": "config", "prompt": "again"})).await;
    let (done, before) = ws_until(&mut ws, "completion").await;
    assert!(before.iter().any(
        |m| m["type"] == "error" && m["message"].as_str().unwrap().contains("already running")
    ));
    assert_eq!(done["usage"]["completion_tokens"], 30);

    // Over 4 MiB: an error in the protocol's format, then the socket closes with 1009.
    let huge = json!({"type": "config", "prompt": "a".repeat(5 << 20)}).to_string();
    ws_send_text(&mut ws, &huge).await;
    let e = expect_ws_error(&mut ws, "MiB").await;
    assert_eq!(e["error"], "invalid_request");
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 1009),
        other => panic!("expected a close frame, got {other:?}"),
    }
    // Everyone else is still served.
    let mut ws2 = t.ws("/generate").await;
    expect_ws_generation_works(&mut ws2).await;
    assert_eq!(MODEL_ID, t.node().host().model().unwrap().id.as_str());
    t.stop().await;
}

trait SendBinary {
    async fn send_binary(&mut self);
}

impl SendBinary for common::Ws {
    async fn send_binary(&mut self) {
        use futures_util::SinkExt;
        self.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    }
}

/// Six prompts of 4 MB at once, on three doors: each is refused by its length alone (never
/// tokenized, which would hold a core for seconds), while the node's status answers meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_too_long_by_their_length_are_refused_untokenized() {
    let t = TestNode::start(2).await;
    let big = "the quick brown fox jumps over the lazy dog ".repeat(95_000);
    let bodies = [
        ("/v1/chat/completions", json!({"messages": user(&big)})),
        ("/v1/chat/completions", json!({"messages": user(&big)})),
        ("/v1/chat/completions", json!({"messages": user(&big)})),
        ("/v1/chat/completions", json!({"messages": user(&big)})),
        ("/v1/completions", json!({"prompt": big})),
        (
            "/api/generate",
            json!({"model": MODEL_ID, "prompt": big, "stream": false}),
        ),
    ];
    let sent: Vec<_> = bodies
        .into_iter()
        .map(|(path, body)| {
            let url = t.url(path);
            tokio::spawn(async move {
                let r = common::client().post(url).json(&body).send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            })
        })
        .collect();
    for _ in 0..5 {
        assert_eq!(t.status().await["model"]["state"], "ready");
    }
    for s in sent {
        let (status, v) = s.await.unwrap();
        assert_eq!(status, 400, "{v}");
        let message = v["error"]["message"]
            .as_str()
            .or(v["error"].as_str())
            .unwrap_or_default();
        assert!(
            message.contains("at least") && message.contains("context is 1024"),
            "{v}"
        );
    }
    t.stop().await;
}
