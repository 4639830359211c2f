//! The smaller defects found by probing the node, one test each: an invalid UTF-8 text frame
//! gets close code 1007 on every JSON WebSocket door; a batch id given twice is one ERROR and
//! nothing else; temperature is bounded at 2; conversation settings and `--batch-defaults`
//! are checked when set; `/v1/completions` errors name `prompt`; an unsupported client key
//! type says which types are supported. (A wrong LAN key is tested in `lan.rs`, the page of
//! a binary built without the UI in `hearth_server::ui`'s unit test.)

use crate::common;

use common::process::NodeProcess;
use common::{ws_send, ws_until, TestNode};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

/// Open a WebSocket on `path` by hand, send one masked text frame holding `payload` (not
/// UTF-8), and return the close code the server answers with (None if it just hung up).
async fn close_code_for_raw_text(
    addr: std::net::SocketAddr,
    path: &str,
    payload: &[u8],
) -> Option<u16> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "the handshake was cut");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    s.write_all(&frame).await.unwrap();
    // Skip whatever the door sent first (the signed-challenge door's challenge) up to a close.
    let read = async {
        loop {
            let mut h = [0u8; 2];
            s.read_exact(&mut h).await.ok()?;
            let len = match h[1] & 0x7F {
                126 => {
                    let mut l = [0u8; 2];
                    s.read_exact(&mut l).await.ok()?;
                    u64::from(u16::from_be_bytes(l))
                }
                127 => {
                    let mut l = [0u8; 8];
                    s.read_exact(&mut l).await.ok()?;
                    u64::from_be_bytes(l)
                }
                n => u64::from(n),
            };
            let mut body = vec![0u8; len as usize];
            s.read_exact(&mut body).await.ok()?;
            if h[0] & 0x0F == 0x8 {
                return body.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]));
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .ok()
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_utf8_text_frame_gets_close_code_1007() {
    let t = TestNode::start(1).await;
    let addr = t.node().addr();
    for path in ["/generate", "/ws", "/api/ws", "/"] {
        assert_eq!(
            close_code_for_raw_text(addr, path, &[b'{', 0xC3, 0x28, b'}']).await,
            Some(1007),
            "{path}"
        );
    }
    // The node goes on serving.
    let v = t
        .chat(json!({"messages": common::user("Hi"), "max_tokens": 2, "ignore_eos": true}))
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 2);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_given_twice_is_one_error_and_nothing_else() {
    let t = TestNode::start(2).await;
    let mut ws = t.ws("/ws").await;
    let greedy = json!({"do_sample": false, "max_new_tokens": 3});
    ws_send(
        &mut ws,
        json!({"prompts": [
            {"request_id": "a", "prompt": "Hi"},
            {"request_id": "b", "prompt": "Hello"},
            {"request_id": "a", "prompt": "Again"}
        ], "generation_config": greedy}),
    )
    .await;
    let mut events: Vec<Value> = Vec::new();
    while !events
        .iter()
        .any(|e| e["request_id"] == "b" && e["type"] == "COMPLETE")
    {
        let Some(Ok(Message::Text(text))) = ws.next().await else {
            panic!("the socket ended: {events:?}");
        };
        let array: Vec<Value> = serde_json::from_str(text.as_str()).unwrap();
        events.extend(array);
    }
    let for_a: Vec<&Value> = events.iter().filter(|e| e["request_id"] == "a").collect();
    assert_eq!(for_a.len(), 1, "{for_a:?}");
    assert_eq!(for_a[0]["type"], "ERROR");
    assert!(
        for_a[0]["error"]
            .as_str()
            .unwrap()
            .contains("prompts[0], prompts[2]"),
        "{for_a:?}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temperature_is_bounded_and_settings_are_checked_when_set() {
    let t = TestNode::start(1).await;
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"messages": common::user("Hi"), "temperature": 2.5}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "temperature", "{v}");
    let v = t
        .chat(json!({"messages": common::user("Hi"), "temperature": 2.0, "max_tokens": 2}))
        .await;
    assert_eq!(v["object"], "chat.completion");
    let mut ws = t.ws("/generate").await;
    ws_send(
        &mut ws,
        json!({"type": "config", "prompt": "Hi", "parameters": {"temperature": 9}}),
    )
    .await;
    let (e, _) = ws_until(&mut ws, "error").await;
    assert!(
        e["message"].as_str().unwrap().contains("temperature"),
        "{e}"
    );

    // A conversation setting the next message could not use is refused now.
    let id = t.new_conversation("settings").await;
    let r = common::client()
        .patch(t.url(&format!("/api/conversations/{id}")))
        .json(&json!({"settings": {"temperature": 5}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("settings.temperature"),
        "{v}"
    );
    let c = t.get_json(&format!("/api/conversations/{id}")).await;
    assert_eq!(c["conversation"]["settings"]["temperature"], 0.8, "{c}");
    t.stop().await;
}

#[test]
fn bad_batch_defaults_stop_the_node_at_start() {
    for (defaults, needle) in [
        (r#"{"temperature": -1}"#, "temperature"),
        (r#"{"max_new_tokens": 0}"#, "max_new_tokens"),
        (r#"{"temprature": 0.7}"#, "unknown field `temprature`"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (refused, err) = NodeProcess::refused(&[
            "--batch-defaults".as_ref(),
            defaults.as_ref(),
            "--data-dir".as_ref(),
            dir.path().as_os_str(),
        ]);
        assert!(refused, "{defaults} was accepted: {err}");
        assert!(err.contains(needle), "{defaults}: {err}");
    }
}

#[test]
fn timeouts_that_are_not_a_number_of_seconds_stop_the_node_at_start() {
    for (flag, value) in [
        ("--header-timeout", "nan"),
        ("--header-timeout", "0"),
        ("--write-timeout", "inf"),
        ("--write-timeout", "soon"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (refused, err) = NodeProcess::refused(&[
            flag.as_ref(),
            value.as_ref(),
            "--data-dir".as_ref(),
            dir.path().as_os_str(),
        ]);
        assert!(refused, "{flag} {value} was accepted: {err}");
        assert!(
            err.contains("not a number of seconds from 0.1 to 3600") && !err.contains("panicked"),
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn a_thermal_zone_that_is_not_a_temperature_stops_the_node_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let words = dir.path().join("words");
    std::fs::write(&words, "hot\n").unwrap();
    for (zone, needle) in [
        (dir.path().join("missing"), "cannot be read"),
        (words, "does not hold a temperature in millidegrees"),
    ] {
        let (refused, err) = NodeProcess::refused(&[
            "--thermal-zone".as_ref(),
            zone.as_os_str(),
            "--data-dir".as_ref(),
            dir.path().join("data").as_os_str(),
        ]);
        assert!(refused, "{} was accepted: {err}", zone.display());
        assert!(err.contains(needle), "{}: {err}", zone.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_completion_errors_name_prompt() {
    let t = TestNode::start(1).await;
    for body in [
        json!({"prompt": ""}),
        json!({"prompt": "the quick brown fox ".repeat(400)}),
    ] {
        let r = t.post("/v1/completions", &body).await;
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["param"], "prompt", "{v}");
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_key_type_says_which_types_are() {
    let t = TestNode::start(1).await;
    // An ECDSA P-256 public key (SPKI PEM).
    let ec = "-----BEGIN PUBLIC KEY-----\n\
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEMhdtNSG+YWgKw86KFDJ27PLc7g7L\n\
qT6yturE1tQrVHnnDAfhI391aXRC8om3LI5KTFaQBHZjwsOq9qAxGWPy5Q==\n\
-----END PUBLIC KEY-----\n";
    let r = t
        .post(
            "/api/auth/register",
            &json!({"name": "ec", "publicKey": ec}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    let message = v["error"].as_str().unwrap();
    assert_eq!(v["code"], "invalid_key");
    for needle in ["EC (ECDSA)", "Ed25519", "RSA"] {
        assert!(message.contains(needle), "{message}");
    }
    t.stop().await;
}
