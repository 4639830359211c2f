//! The signed-challenge WebSocket on `/` and `POST /api/auth/register` against a real node and
//! the real default model: registration, challenge, signature, generation with Ed25519 and
//! RSA-2048 keys; every refusal (wrong or replayed signature, second attempt, timeout, requests
//! before authentication, revoked client, rate limit); stop; batch; the example Node.js client;
//! bad input in the door's own error shape while the node keeps serving.
//!
//! The auth timeout is shortened through `NodeConfig::auth_timeout` (the hidden
//! `--auth-timeout-ms` / `HEARTH_AUTH_TIMEOUT_MS`); keys stay out of the OS keyring
//! (`KeyStorage::File`).

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::process::{repo_root, run_peer};
use common::signed::{authenticate, connect, login, register, Key};
use common::{ws_recv, ws_recv_timeout, ws_send, ws_send_text, ws_until, TestNode, Ws, MODEL_ID};
use futures_util::{SinkExt, StreamExt};
use hearth_auth::identity::KeyStorage;
use hearth_node::NodeConfig;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const AUTH_TIMEOUT: Duration = Duration::from_secs(2);
const PROMPT: &str = "Say hello to the world.";

async fn start() -> TestNode {
    TestNode::start_with(|c| {
        c.parallel = 2;
        c.auth_timeout = AUTH_TIMEOUT;
        c.key_storage = KeyStorage::File;
    })
    .await
}

/// Generate and read the whole stream: the text and the `stream_end`.
async fn generate_and_stream(ws: &mut Ws, id: &str, max_tokens: u32) -> (String, Value) {
    ws_send(
        ws,
        json!({"type": "generate", "id": id, "model": MODEL_ID, "prompt": PROMPT,
            "options": {"temperature": 0, "top_p": 0.9, "top_k": 40, "max_tokens": max_tokens, "seed": 7}}),
    )
    .await;
    let start = ws_recv(ws).await;
    assert_eq!(start["type"], "stream_start", "{start}");
    assert_eq!(start["id"], id);
    assert_eq!(start["model"], MODEL_ID);
    let (end, tokens) = ws_until(ws, "stream_end").await;
    assert!(!tokens.is_empty(), "tokens were streamed");
    let mut text = String::new();
    for m in &tokens {
        assert_eq!(m["type"], "stream_token", "{m}");
        assert_eq!(m["id"], id);
        assert!(m["timestamp"].is_u64());
        text.push_str(m["token"].as_str().unwrap());
    }
    assert_eq!(end["id"], id);
    let total = end["totalTokens"].as_u64().unwrap();
    assert!((1..=u64::from(max_tokens)).contains(&total), "{end}");
    assert!(
        total >= tokens.len() as u64,
        "one message per token at most: {end}"
    );
    assert!(end["elapsedTime"].is_u64(), "{end}");
    assert!(
        ["stop", "length"].contains(&end["finishReason"].as_str().unwrap()),
        "{end}"
    );
    (text, end)
}

/// The next frame is a close with `code`.
async fn expect_close(ws: &mut Ws, code: u16) {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Close(Some(f))))) => {
                assert_eq!(u16::from(f.code), code, "{f:?}");
                return;
            }
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {}
            other => panic!("expected a close with {code}, got {other:?}"),
        }
    }
}

async fn expect_error(ws: &mut Ws, code: &str) -> Value {
    let e = ws_recv(ws).await;
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["code"], code, "{e}");
    assert!(e["error"].as_str().is_some_and(|s| !s.is_empty()), "{e}");
    assert!(e["timestamp"].is_u64(), "{e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed25519_client_registers_authenticates_and_streams() {
    let t = start().await;
    let key = Key::ed25519();
    let (mut ws, id) = login(&t, &key).await;
    // The same key again, as PEM or as base64 of its 32 raw bytes, keeps its clientId.
    assert_eq!(register(&t, &key).await, id);
    let Key::Ed25519(sk) = &key else {
        unreachable!()
    };
    let raw = base64::engine::general_purpose::STANDARD.encode(sk.verifying_key().to_bytes());
    let r = t
        .post(
            "/api/auth/register",
            &json!({"name": "raw", "publicKey": raw}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["clientId"], id.as_str());

    let (text, end) = generate_and_stream(&mut ws, "req-1", 12).await;
    // Real counts: the same greedy request on the OpenAI door gives the same tokens.
    let v = t
        .chat(json!({"messages": common::user(PROMPT), "max_tokens": 12, "temperature": 0}))
        .await;
    assert_eq!(end["totalTokens"], v["usage"]["completion_tokens"]);
    assert_eq!(
        text,
        v["choices"][0]["message"]["content"].as_str().unwrap()
    );

    ws_send(&mut ws, json!({"type": "models", "id": "m1"})).await;
    let m = ws_recv(&mut ws).await;
    assert_eq!(m["type"], "models_result");
    assert_eq!(m["id"], "m1");
    // Ollama's entries, as the reference client library reads them (`m.name`).
    let entry = &m["models"][0];
    assert_eq!(m["models"].as_array().map(Vec::len), Some(1), "{m}");
    assert_eq!(
        (&entry["name"], &entry["model"]),
        (&json!(MODEL_ID), &json!(MODEL_ID))
    );
    assert!(entry["size"].as_u64().unwrap() > 1_000_000, "{entry}");
    assert!(
        entry["modified_at"].as_str().unwrap().ends_with('Z'),
        "{entry}"
    );
    assert_eq!(entry["details"]["format"], "gguf");
    assert_eq!(entry["details"]["quantization_level"], "Q4_1");
    // The client library's spelling of the token limit.
    ws_send(
        &mut ws,
        json!({"type": "generate", "id": "mt", "prompt": "Count", "options": {"maxTokens": 3, "temperature": 0}}),
    )
    .await;
    let (end, _) = ws_until(&mut ws, "stream_end").await;
    assert_eq!(
        (&end["id"], &end["totalTokens"]),
        (&json!("mt"), &json!(3)),
        "{end}"
    );
    ws_send(&mut ws, json!({"type": "ping", "id": 42})).await;
    let p = ws_recv(&mut ws).await;
    assert_eq!(
        (p["type"].as_str(), p["id"].as_i64()),
        (Some("pong"), Some(42))
    );
    // Authenticating again on an authenticated connection is refused.
    ws_send(
        &mut ws,
        json!({"type": "authenticate", "clientId": id, "signature": "AAAA"}),
    )
    .await;
    expect_error(&mut ws, "invalid_request").await;
    let listed = t.node().store().list_clients().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].last_seen_at.is_some());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_2048_client_like_the_reference_library_works() {
    let t = start().await;
    let key = Key::rsa2048();
    let (mut ws, _) = login(&t, &key).await;
    generate_and_stream(&mut ws, "rsa-1", 8).await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_generations_share_a_socket_and_stop_works_by_request_id_and_by_id() {
    let t = start().await;
    let key = Key::ed25519();
    let (mut ws, _) = login(&t, &key).await;
    for id in ["a", "b"] {
        ws_send(
            &mut ws,
            json!({"type": "generate", "id": id, "prompt": PROMPT, "options": {"max_tokens": 6}}),
        )
        .await;
    }
    let mut ended = Vec::new();
    while ended.len() < 2 {
        let m = ws_recv(&mut ws).await;
        if m["type"] == "stream_end" {
            ended.push(m["id"].as_str().unwrap().to_owned());
        }
    }
    ended.sort();
    assert_eq!(ended, ["a", "b"]);

    // The reference client's form: requestId.
    ws_send(&mut ws, json!({"type": "generate", "id": "long", "prompt": "Write a long story about a robot.", "options": {"max_tokens": 400, "temperature": 0}})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "stream_start");
    for _ in 0..2 {
        assert_eq!(ws_recv(&mut ws).await["type"], "stream_token");
    }
    let sent = Instant::now();
    ws_send(&mut ws, json!({"type": "stop", "requestId": "long"})).await;
    let (end, before) = ws_until(&mut ws, "stream_end").await;
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        sent.elapsed()
    );
    assert!(
        before
            .iter()
            .any(|m| m["type"] == "ack" && m["requestId"] == "long"),
        "{before:?}"
    );
    assert_eq!(end["isCancelled"], true, "{end}");
    assert_eq!(end["finishReason"], "cancelled");
    assert!(end["totalTokens"].as_u64().unwrap() < 400);

    // The document's form: the id itself (a number here, echoed as a number).
    ws_send(&mut ws, json!({"type": "generate", "id": 9, "prompt": "Write a long story about a robot.", "options": {"max_tokens": 400}})).await;
    assert_eq!(ws_recv(&mut ws).await["id"], 9);
    ws_send(&mut ws, json!({"type": "stop", "id": 9})).await;
    let (end, _) = ws_until(&mut ws, "stream_end").await;
    assert_eq!(end["id"], 9);
    assert_eq!(end["isCancelled"], true);

    // batch: each message handled in order.
    ws_send(&mut ws, json!({"type": "batch", "messages": [{"type": "ping", "id": 1}, {"type": "models", "id": "m"}]})).await;
    let p = ws_recv(&mut ws).await;
    assert_eq!(
        (p["type"].as_str(), p["id"].as_i64()),
        (Some("pong"), Some(1))
    );
    let m = ws_recv(&mut ws).await;
    assert_eq!(m["type"], "models_result");
    assert_eq!(m["id"], "m");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_signature_is_refused() {
    let t = start().await;
    let key = Key::ed25519();
    let id = register(&t, &key).await;
    let (mut ws, challenge) = connect(&t).await;
    // Signed by another key.
    let r = authenticate(&mut ws, &id, &Key::ed25519().sign(challenge.as_bytes())).await;
    assert_eq!(r["success"], false);
    assert_eq!(r["remainingAttempts"], 4, "{r}");
    expect_error(&mut ws, "auth_failed").await;
    ws_send(
        &mut ws,
        json!({"type": "generate", "id": "g", "prompt": "hi"}),
    )
    .await;
    let e = expect_error(&mut ws, "auth_failed").await;
    assert_eq!(e["id"], "g");
    // Not base64, and an unknown client id.
    let (mut ws, _) = connect(&t).await;
    assert_eq!(authenticate(&mut ws, &id, "%%%").await["success"], false);
    let (mut ws, challenge) = connect(&t).await;
    let r = authenticate(
        &mut ws,
        "00000000000000000000",
        &key.sign(challenge.as_bytes()),
    )
    .await;
    assert_eq!(r["success"], false);
    assert!(r["error"].as_str().unwrap().contains("register"), "{r}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_signature_fails_on_a_new_connection() {
    let t = start().await;
    let key = Key::ed25519();
    let id = register(&t, &key).await;
    let (mut first, challenge) = connect(&t).await;
    let signature = key.sign(challenge.as_bytes());
    assert_eq!(
        authenticate(&mut first, &id, &signature).await["success"],
        true
    );
    let (mut second, other) = connect(&t).await;
    assert_ne!(challenge, other, "every connection gets a fresh challenge");
    let r = authenticate(&mut second, &id, &signature).await;
    assert_eq!(r["success"], false, "{r}");
    expect_error(&mut second, "auth_failed").await;
    ws_send(&mut second, json!({"type": "models"})).await;
    expect_error(&mut second, "auth_failed").await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_attempt_per_connection() {
    let t = start().await;
    let key = Key::ed25519();
    let id = register(&t, &key).await;
    let (mut ws, challenge) = connect(&t).await;
    assert_eq!(
        authenticate(&mut ws, &id, &key.sign(b"not the challenge")).await["success"],
        false
    );
    expect_error(&mut ws, "auth_failed").await;
    // The right signature after a failure: the challenge is spent.
    let r = authenticate(&mut ws, &id, &key.sign(challenge.as_bytes())).await;
    assert_eq!(r["success"], false, "{r}");
    assert!(r["error"].as_str().unwrap().contains("already used"), "{r}");
    expect_error(&mut ws, "auth_failed").await;
    // A malformed attempt spends it too.
    let (mut ws, challenge) = connect(&t).await;
    ws_send(&mut ws, json!({"type": "authenticate", "clientId": id})).await;
    assert_eq!(ws_recv(&mut ws).await["success"], false);
    expect_error(&mut ws, "auth_failed").await;
    assert_eq!(
        authenticate(&mut ws, &id, &key.sign(challenge.as_bytes())).await["success"],
        false
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_timeout_closes_an_idle_unauthenticated_connection() {
    assert_eq!(
        NodeConfig::new("unused").auth_timeout,
        Duration::from_secs(30),
        "the default"
    );
    let t = start().await;
    let (mut ws, _) = connect(&t).await;
    let started = Instant::now();
    let e = ws_recv_timeout(&mut ws, AUTH_TIMEOUT * 4)
        .await
        .expect("auth_timeout arrives");
    assert_eq!(e["type"], "error");
    assert_eq!(e["code"], "auth_timeout", "{e}");
    let waited = started.elapsed();
    assert!(
        waited >= AUTH_TIMEOUT - Duration::from_millis(500) && waited < AUTH_TIMEOUT * 3,
        "{waited:?}"
    );
    expect_close(&mut ws, 1008).await;
    // Pings do not count as authentication; an authenticated connection never times out.
    let key = Key::ed25519();
    let (mut ws, _) = login(&t, &key).await;
    tokio::time::sleep(AUTH_TIMEOUT + Duration::from_secs(1)).await;
    ws_send(&mut ws, json!({"type": "ping"})).await;
    assert_eq!(ws_recv(&mut ws).await["type"], "pong");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_but_authenticate_and_ping_before_authentication() {
    let t = start().await;
    let key = Key::ed25519();
    let id = register(&t, &key).await;
    let (mut ws, challenge) = connect(&t).await;
    for m in [
        json!({"type": "generate", "id": "early", "prompt": "hi"}),
        json!({"type": "models"}),
        json!({"type": "stop", "requestId": "early"}),
        json!({"type": "batch", "messages": [{"type": "ping"}]}),
    ] {
        ws_send(&mut ws, m.clone()).await;
        let e = expect_error(&mut ws, "auth_failed").await;
        assert!(
            e["error"].as_str().unwrap().contains("authenticat"),
            "{m}: {e}"
        );
    }
    ws_send(&mut ws, json!({"type": "ping", "id": "p"})).await;
    let p = ws_recv(&mut ws).await;
    assert_eq!(
        (p["type"].as_str(), p["id"].as_str()),
        (Some("pong"), Some("p"))
    );
    // Refusals do not spend the challenge.
    assert_eq!(
        authenticate(&mut ws, &id, &key.sign(challenge.as_bytes())).await["success"],
        true
    );
    generate_and_stream(&mut ws, "late", 4).await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_failures_give_rate_limited_with_a_cooldown() {
    let t = start().await;
    let key = Key::ed25519();
    let id = register(&t, &key).await;
    for attempt in 1..=5u64 {
        let (mut ws, _) = connect(&t).await;
        let r = authenticate(&mut ws, &id, &key.sign(b"wrong")).await;
        assert_eq!(r["success"], false);
        if attempt < 5 {
            assert_eq!(r["remainingAttempts"], 5 - attempt, "{r}");
            expect_error(&mut ws, "auth_failed").await;
        } else {
            assert_eq!(r["retryAfter"], 16, "2^(5-1) s: {r}");
            expect_error(&mut ws, "rate_limited").await;
        }
    }
    // The sixth attempt is refused even with the right signature, and says how long to wait.
    let (mut ws, challenge) = connect(&t).await;
    let r = authenticate(&mut ws, &id, &key.sign(challenge.as_bytes())).await;
    assert_eq!(r["success"], false, "{r}");
    let wait = r["retryAfter"].as_u64().expect("retryAfter");
    assert!((1..=16).contains(&wait), "{r}");
    let e = expect_error(&mut ws, "rate_limited").await;
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains(&format!("{wait} seconds")),
        "{e}"
    );
    assert_eq!(e["retryAfter"], wait);
    // The block is per address and client id: another client from here still gets in.
    let other = Key::ed25519();
    let (mut ws, _) = login(&t, &other).await;
    generate_and_stream(&mut ws, "other", 4).await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_client_is_refused_and_cannot_register_again() {
    let t = start().await;
    let key = Key::ed25519();
    let id = register(&t, &key).await;
    assert!(t.node().store().revoke_client(id.clone()).await.unwrap());
    let (mut ws, challenge) = connect(&t).await;
    let r = authenticate(&mut ws, &id, &key.sign(challenge.as_bytes())).await;
    assert_eq!(r["success"], false);
    assert!(r["error"].as_str().unwrap().contains("revoked"), "{r}");
    let r = t
        .post(
            "/api/auth/register",
            &json!({"name": "again", "publicKey": key.public_pem()}),
        )
        .await;
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["success"].as_bool(), v["code"].as_str()),
        (Some(false), Some("client_revoked"))
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_node_client_streams_an_answer() {
    let t = start().await;
    let mut cmd = Command::new("node");
    cmd.arg(repo_root().join("examples/auth-client.mjs")).args([
        "--server",
        &t.base,
        "--max-tokens",
        "12",
        "Say hello.",
    ]);
    let (stdout, stderr) = run_peer(cmd, "the example client (node)").await;
    assert!(!stdout.trim().is_empty(), "an answer was printed: {stderr}");
    assert!(
        stderr.contains("registered as") && stderr.contains("tokens in"),
        "{stderr}"
    );
    assert_eq!(t.node().store().list_clients().await.unwrap().len(), 1);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_door_error_shape_and_the_node_keeps_serving() {
    let t = start().await;
    let key = Key::ed25519();
    let (mut ws, _) = login(&t, &key).await;
    for (raw, needle) in [
        ("not json", "invalid JSON"),
        ("[1, 2]", "JSON object"),
        ("{}", "type"),
        (r#"{"type": 5}"#, "type"),
        (r#"{"type": "dance"}"#, "unknown message type"),
        (r#"{"type": "generate", "id": "g", "prompt": 5}"#, "prompt"),
        (r#"{"type": "generate", "id": "g"}"#, "prompt"),
        (r#"{"type": "generate", "id": {}, "prompt": "hi"}"#, "id"),
        (
            r#"{"type": "generate", "id": "g", "prompt": "hi", "options": {"temperature": "hot"}}"#,
            "temperature",
        ),
        (
            r#"{"type": "generate", "id": "g", "prompt": "hi", "options": {"max_tokens": -3}}"#,
            "max_tokens",
        ),
        (
            r#"{"type": "generate", "id": "g", "prompt": "hi", "options": {"stop": [1]}}"#,
            "stop",
        ),
        (
            r#"{"type": "generate", "id": "g", "prompt": "hi", "options": "fast"}"#,
            "options",
        ),
        (
            r#"{"type": "generate", "id": "g", "prompt": "hi", "model": 3}"#,
            "model",
        ),
        (
            r#"{"type": "stop", "requestId": "nothing-running"}"#,
            "no generation",
        ),
        (r#"{"type": "batch", "messages": "x"}"#, "messages"),
        (
            r#"{"type": "batch", "messages": [{"type": "batch", "messages": []}]}"#,
            "batch",
        ),
    ] {
        ws_send_text(&mut ws, raw).await;
        let e = expect_error(&mut ws, "invalid_request").await;
        assert!(e["error"].as_str().unwrap().contains(needle), "{raw}: {e}");
    }
    ws_send(
        &mut ws,
        json!({"type": "generate", "id": "x", "model": "no-such-model", "prompt": "hi"}),
    )
    .await;
    let e = expect_error(&mut ws, "invalid_model").await;
    assert_eq!(e["id"], "x");
    ws_send(
        &mut ws,
        json!({"type": "generate", "id": "long", "prompt": "word ".repeat(3000)}),
    )
    .await;
    expect_error(&mut ws, "invalid_request").await; // longer than the context
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    expect_error(&mut ws, "invalid_request").await;
    // The same connection still serves.
    generate_and_stream(&mut ws, "after-bad-input", 5).await;

    // Over 4 MiB: an error, then a close with 1009.
    let big = format!(
        r#"{{"type": "generate", "id": "big", "prompt": "{}"}}"#,
        "x".repeat(5 << 20)
    );
    ws_send_text(&mut ws, &big).await;
    let e = expect_error(&mut ws, "invalid_request").await;
    assert!(e["error"].as_str().unwrap().contains("4 MiB"), "{e}");
    expect_close(&mut ws, 1009).await;
    // The node keeps serving new connections, and GET / is still the web UI.
    let (mut ws, _) = login(&t, &key).await;
    generate_and_stream(&mut ws, "after-big", 5).await;
    let r = common::client().get(t.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));

    // Registration: the document's 400 body.
    for (body, status, code) in [
        ("not json".to_owned(), 400, "invalid_request"),
        (json!({"publicKey": key.public_pem()}).to_string(), 400, "invalid_request"),
        (json!({"name": 5, "publicKey": key.public_pem()}).to_string(), 400, "invalid_request"),
        (json!({"name": "x"}).to_string(), 400, "invalid_key"),
        (json!({"name": "x", "publicKey": 5}).to_string(), 400, "invalid_key"),
        (json!({"name": "x", "publicKey": "garbage"}).to_string(), 400, "invalid_key"),
        (json!({"name": "x", "publicKey": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"}).to_string(), 400, "invalid_key"),
        (json!({"name": "x", "publicKey": key.public_pem(), "signatureAlgorithm": "MD5"}).to_string(), 400, "invalid_key"),
    ] {
        let r = t.post_raw("/api/auth/register", body.clone()).await;
        assert_eq!(r.status().as_u16(), status, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["success"], false, "{body}: {v}");
        assert_eq!(v["code"], code, "{body}: {v}");
        assert!(v["error"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
        if code == "invalid_key" && body.contains("garbage") {
            assert!(v["error"].as_str().unwrap().starts_with("Invalid public key format"), "{v}");
        }
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_identity_is_made_once_and_kept_across_restarts() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let dir = data_dir.clone();
    let t = TestNode::start_with(move |c| {
        c.data_dir = dir;
        c.key_storage = KeyStorage::File;
    })
    .await;
    let file = data_dir.join("identity.pem");
    assert!(
        file.is_file(),
        "the identity is a 0600 file when the keyring is not used"
    );
    let first = std::fs::read_to_string(&file).unwrap();
    let id = hearth_auth::identity::Identity::load_or_create(&data_dir, KeyStorage::File)
        .unwrap()
        .device_id();
    t.stop().await;
    let dir = data_dir.clone();
    let t = TestNode::start_with(move |c| {
        c.data_dir = dir;
        c.key_storage = KeyStorage::File;
    })
    .await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), first);
    assert_eq!(
        hearth_auth::identity::Identity::load_or_create(&data_dir, KeyStorage::File)
            .unwrap()
            .device_id(),
        id
    );
    t.stop().await;
}

/// In hub mode with `--hub-local false` only a worker can answer: a stream through this door
/// proves that its generations go through the route, and the worker counts the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_hub_mode_this_door_generates_on_a_worker() {
    let hub = TestNode::start_with(|c| {
        c.parallel = 2;
        c.auth_timeout = AUTH_TIMEOUT;
        c.hub = Some(hearth_hub::HubConfig::new("hub-token".into(), false));
    })
    .await;
    let url = format!("{}/node", hub.ws_base);
    let worker = TestNode::start_with(move |c| {
        c.parallel = 2;
        c.name = "w1".into();
        c.join = Some(hearth_route::join::JoinConfig {
            url,
            token: "hub-token".into(),
            name: "w1".into(),
            max_concurrency: None,
        });
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while hub.status().await["hub"]["workers"]
        .as_array()
        .map_or(0, Vec::len)
        != 1
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never joined"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let key = Key::ed25519();
    let (mut ws, _) = login(&hub, &key).await;
    let (text, end) = generate_and_stream(&mut ws, "on-worker", 8).await;
    assert!(!text.is_empty(), "{end}");
    let w = &hub.status().await["hub"]["workers"][0];
    assert_eq!(w["name"], "w1");
    assert_eq!(w["completed"], 1, "{w}");
    worker.stop().await;
    hub.stop().await;
}

/// On a node without a model of its own, this door's generations run on a LAN peer that has
/// it (the route at work across the cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_this_door_generates_on_a_lan_peer() {
    let peer = TestNode::start_with(|c| {
        c.name = "peer-a".into();
        c.cluster = common::cluster_config(Vec::new());
    })
    .await;
    let at = peer.node().cluster_addr().unwrap().to_string();
    let empty = tempfile::tempdir().unwrap();
    let t = TestNode::start_with(|c| {
        c.auth_timeout = AUTH_TIMEOUT;
        c.key_storage = KeyStorage::File;
        common::without_model(c, empty.path());
        c.cluster = common::cluster_config(vec![at]);
    })
    .await;
    common::wait_for(
        async || t.get_json("/v1/models").await["data"][0]["id"] == MODEL_ID,
        "the peer's model offered here",
    )
    .await;
    let key = Key::ed25519();
    let (mut ws, _) = login(&t, &key).await;
    let (text, end) = generate_and_stream(&mut ws, "on-peer", 8).await;
    assert!(!text.is_empty(), "{end}");
    assert_eq!(peer.status().await["requests_finished"], 1);
    t.stop().await;
    peer.stop().await;
}
