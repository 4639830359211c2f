//! Cross-site request forgery: a web page the user opens may send "simple" requests
//! (`text/plain`, form-encoded, no preflight) to the node on 127.0.0.1. Every request that
//! changes state or generates is refused with 403 in its door's error shape when it comes
//! from a foreign `Origin`, whatever its content type; programs (no `Origin`), the node's own
//! pages, loopback pages and the desktop app are served. No page of the node may be framed.

use crate::common;

use common::TestNode;
use reqwest::Method;
use serde_json::{json, Value};

const EVIL: &str = "http://evil.example";

/// Send `body` as `content_type` with `origin` (if any); the status and the JSON answer.
async fn send(
    t: &TestNode,
    method: Method,
    path: &str,
    origin: Option<&str>,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    let mut req = common::client()
        .request(method, t.url(path))
        .header("content-type", content_type)
        .body(body.to_owned());
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    let r = req.send().await.expect("request sent");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_page_can_change_nothing_and_generate_nothing() {
    let t = TestNode::start(1).await;
    let conv = t.new_conversation("mine").await;
    let chat =
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).to_string();
    let cases: Vec<(Method, String, &str, String)> = vec![
        (
            Method::POST,
            "/api/models/unload".into(),
            "text/plain",
            "{}".into(),
        ),
        (
            Method::POST,
            "/api/models/load".into(),
            "text/plain",
            "{}".into(),
        ),
        (
            Method::POST,
            "/api/keys".into(),
            "application/x-www-form-urlencoded",
            "name=evil".into(),
        ),
        (
            Method::POST,
            "/api/auth/register".into(),
            "text/plain",
            json!({"name": "evil", "publicKey": "AAAA"}).to_string(),
        ),
        (
            Method::POST,
            "/v1/chat/completions".into(),
            "text/plain",
            chat.clone(),
        ),
        (
            Method::POST,
            "/v1/completions".into(),
            "text/plain",
            json!({"prompt": "Hi", "max_tokens": 2}).to_string(),
        ),
        (
            Method::POST,
            "/api/conversations".into(),
            "text/plain",
            "{}".into(),
        ),
        (
            Method::PATCH,
            format!("/api/conversations/{conv}"),
            "text/plain",
            json!({"title": "pwned"}).to_string(),
        ),
        (
            Method::POST,
            format!("/api/conversations/{conv}/chat"),
            "text/plain",
            json!({"content": "Hi"}).to_string(),
        ),
        (
            Method::DELETE,
            format!("/api/conversations/{conv}"),
            "text/plain",
            String::new(),
        ),
        (
            Method::DELETE,
            "/api/keys/k_1".into(),
            "text/plain",
            String::new(),
        ),
    ];
    for (method, path, ct, body) in &cases {
        for origin in [EVIL, "null", "http://192.168.1.9:8420"] {
            let (status, v) = send(&t, method.clone(), path, Some(origin), ct, body).await;
            assert_eq!(status, 403, "{method} {path} from {origin}: {v}");
            // The door's own error shape.
            if path.starts_with("/v1/") {
                assert_eq!(v["error"]["code"], "forbidden_origin", "{v}");
                assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            } else if path == "/api/auth/register" {
                assert_eq!(
                    (&v["success"], &v["code"]),
                    (&json!(false), &json!("forbidden_origin"))
                );
            } else {
                assert_eq!(v["error"]["code"], "forbidden_origin", "{v}");
            }
        }
    }
    // Nothing happened: the model is loaded, no key, no client, the conversation untouched.
    let status = t.status().await;
    assert_eq!(status["model"]["state"], "ready", "{status}");
    assert_eq!(t.get_json("/api/keys").await["keys"], json!([]));
    let c = t.get_json(&format!("/api/conversations/{conv}")).await;
    assert_eq!(c["conversation"]["title"], "mine", "{c}");
    assert_eq!(c["messages"], json!([]), "{c}");
    assert_eq!(status["requests_finished"], 0, "nothing was generated");

    // Programs (no Origin, even curl -d's form content type), the node's own pages, loopback
    // pages and the desktop app are served.
    let own = format!("http://{}", t.node().addr());
    for origin in [
        None,
        Some(own.as_str()),
        Some("http://localhost:5173"),
        Some("tauri://localhost"),
    ] {
        let (status, v) = send(
            &t,
            Method::POST,
            "/v1/chat/completions",
            origin,
            "application/x-www-form-urlencoded",
            &chat,
        )
        .await;
        assert_eq!(status, 200, "origin {origin:?}: {v}");
        assert_eq!(v["object"], "chat.completion");
    }
    let (status, _) = send(
        &t,
        Method::POST,
        "/api/keys",
        None,
        "application/json",
        r#"{"name":"cli"}"#,
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = send(
        &t,
        Method::POST,
        "/api/models/unload",
        Some("tauri://localhost"),
        "application/json",
        "{}",
    )
    .await;
    assert_eq!(status, 200, "the desktop app unloads");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_of_the_node_can_be_framed_by_another_site() {
    let t = TestNode::start(1).await;
    for path in ["/", "/api/status", "/v1/models"] {
        let r = common::client().get(t.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let h = r.headers();
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
        assert_eq!(
            h["content-security-policy"], "frame-ancestors 'self'",
            "{path}"
        );
    }
    t.stop().await;
}
