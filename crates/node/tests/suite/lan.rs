//! Exposing the node to the LAN, across a real network boundary: the test makes its own
//! network namespace joined to this host by a veth pair with addresses it assigns, and a
//! client inside that namespace sees that with the node exposed it answers there only with an
//! API key (HTTP 401 / WebSocket close 1008 without one; a key of scope `use` reaches the model
//! doors only, 403 elsewhere; a key continues only its own batches on the batch door and reads,
//! continues and deletes only its own stored responses; `x-api-key` carries a key too), and
//! taken back to loopback nothing listens there. Needs root (it runs `ip netns`), as CI does. Never aims at any other address.

use crate::common;

use std::time::Duration;

use common::netns::{free_port, Netns};
use common::TestNode;
use hearth_store::KeyScope;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lan_toggle_needs_a_key_there_and_closes_the_door_when_off() {
    let ns = Netns::create();
    // A fixed free port: the node keeps its port across rebinds.
    let port = free_port();
    let ollama_port = free_port();
    // The model is a link in the models folder, as an imported one is.
    let models = tempfile::tempdir().unwrap();
    let model = common::model_path();
    let linked = models.path().join(model.file_name().unwrap());
    std::os::unix::fs::symlink(&model, &linked).unwrap();
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.port = port;
        c.ollama_port = Some(ollama_port);
        c.models_dir = models.path().to_path_buf();
        c.model = Some(linked.to_string_lossy().into_owned());
    })
    .await;
    let node = t.node().clone();
    let lan_url = |path: &str| format!("http://{}:{port}{path}", ns.host_ip);
    let ollama_lan = format!("http://{}:{ollama_port}/api/tags", ns.host_ip);
    let ollama_here = format!("http://127.0.0.1:{ollama_port}/api/tags");
    let status_here = |url: String| async move {
        common::client()
            .get(url)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };

    // Loopback only: nothing listens on the LAN address, on either port.
    assert!(!node.is_exposed());
    assert_eq!(ns.http_status(&lan_url("/api/status"), None), None);
    assert_eq!(ns.http_status(&ollama_lan, None), None);
    assert_eq!(status_here(ollama_here.clone()).await, 200);

    // Exposed: the LAN side needs a key; loopback does not.
    let (_, secret) = node
        .store()
        .create_key("lan test".into(), KeyScope::Manage)
        .await
        .unwrap();
    node.set_exposed(true).await.unwrap();
    assert!(node.is_exposed());
    assert_eq!(ns.http_status(&lan_url("/api/status"), None), Some(401));
    assert_eq!(
        ns.http_status(&lan_url("/api/status"), Some("hearth_not_a_key")),
        Some(401)
    );
    assert_eq!(
        ns.http_status(&lan_url("/api/status"), Some(&secret)),
        Some(200)
    );
    assert_eq!(
        ns.http_status(&lan_url(&format!("/api/status?token={secret}")), None),
        Some(200)
    );
    assert_eq!(ns.http_status(&lan_url("/v1/models"), None), Some(401));
    // The Ollama port follows, with the same rule.
    assert_eq!(ns.http_status(&ollama_lan, None), Some(401));
    assert_eq!(ns.http_status(&ollama_lan, Some(&secret)), Some(200));
    // In Ollama's own error shape, which its clients read.
    let (status, body) = ns.get(&ollama_lan, None);
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|m| m.contains("API key")),
        "{body}"
    );
    assert_eq!(status_here(ollama_here.clone()).await, 200);
    // The web UI's own files stay reachable, so a browser there can be given a key.
    assert_eq!(ns.http_status(&lan_url("/"), None), Some(200));
    // WebSockets without a key are closed with 1008, the signed-challenge socket on `/` too
    // (its challenge proves the client's key on top of the API key).
    assert_eq!(ns.websocket_close_code(port, "/generate"), "close 1008");
    assert_eq!(ns.websocket_close_code(port, "/api/events"), "close 1008");
    assert_eq!(ns.websocket_close_code(port, "/"), "close 1008");
    assert_eq!(
        ns.websocket_close_code(port, "/?token=hearth_not_a_key"),
        "close 1008"
    );
    assert_eq!(
        ns.websocket_close_code(port, &format!("/?token={secret}")),
        "opcode 1",
        "with the key the challenge comes"
    );
    // A wrong key is called that, not a missing one.
    let (status, body) = ns.get(&lan_url("/v1/models"), Some("hearth_not_a_key"));
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["message"], "invalid API key", "{body}");
    // Registering a client key from the LAN needs an API key too, answered in the
    // registration's own shape.
    // The base64 of an Ed25519 public key's 32 raw bytes (RFC 8032's first test vector).
    let register =
        json!({"name": "laptop", "publicKey": "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="})
            .to_string();
    let (status, body) = ns.post(&lan_url("/api/auth/register"), None, &register);
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        (&body["success"], &body["code"]),
        (&json!(false), &json!("unauthorized")),
        "{body}"
    );
    let (status, body) = ns.post(&lan_url("/api/auth/register"), Some(&secret), &register);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    let r = common::client()
        .get(t.url("/api/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "loopback needs no key");
    // Keys are managed only from this machine.
    let out = ns.exec(&[
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-m",
        "3",
        "-H",
        &format!("Authorization: Bearer {secret}"),
        &lan_url("/api/keys"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "403");
    // A key of scope `use` reaches the model doors and nothing of the owner's: no
    // conversations, status, models page, downloads or event stream.
    let (_, user) = node
        .store()
        .create_key("model user".into(), KeyScope::Use)
        .await
        .unwrap();
    assert_eq!(
        ns.http_status(&lan_url("/v1/models"), Some(&user)),
        Some(200)
    );
    assert_eq!(ns.http_status(&ollama_lan, Some(&user)), Some(200));
    for owners in [
        "/api/conversations",
        "/api/status",
        "/api/models",
        "/metrics",
    ] {
        let (status, body) = ns.get(&lan_url(owners), Some(&user));
        assert_eq!(status, 403, "{owners}: {body}");
        assert_eq!(body["error"]["code"], "forbidden_scope", "{owners}: {body}");
    }
    let (status, body) = ns.post(
        &lan_url("/api/pull"),
        Some(&user),
        r#"{"model":"a/b/c.gguf"}"#,
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|m| m.contains("scope")),
        "{body}"
    );
    let (status, body) = ns.post(
        &lan_url("/api/conversations"),
        Some(&user),
        r#"{"title":"x"}"#,
    );
    assert_eq!(status, 403, "{body}");
    // MCP servers (issue 51): a `use` key and a LAN host without a key never reach them; a
    // `manage` key lists them, and only this machine adds one (a command it would run).
    let server = r#"{"name": "lan", "transport": {"type": "stdio", "command": "true"}}"#;
    let (status, body) = ns.get(&lan_url("/api/mcp/servers"), Some(&user));
    assert_eq!(
        (status, &body["error"]["code"]),
        (403, &json!("forbidden_scope")),
        "{body}"
    );
    let (status, body) = ns.post(&lan_url("/api/mcp/servers"), Some(&user), server);
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        ns.http_status(&lan_url("/api/mcp/servers"), None),
        Some(401)
    );
    let (status, body) = ns.get(&lan_url("/api/mcp/servers"), Some(&secret));
    assert_eq!(status, 200, "{body}");
    for (path, body) in [
        ("/api/mcp/servers", server),
        (
            "/api/mcp/import",
            r#"{"json": "{\"mcpServers\": {\"lan\": {\"command\": \"true\"}}}"}"#,
        ),
    ] {
        let (status, answer) = ns.post(&lan_url(path), Some(&secret), body);
        assert_eq!(
            (status, &answer["error"]["code"]),
            (403, &json!("local_only")),
            "{path}: {answer}"
        );
    }
    let (status, body) = ns.get(&lan_url("/api/mcp/servers"), Some(&secret));
    assert_eq!(
        body["servers"],
        json!([]),
        "{status}: nothing was added: {body}"
    );
    // Added here, a server's env values (tokens) are this machine's: a `manage` key sees names.
    let r = t
        .post(
            "/api/mcp/servers",
            &json!({"name": "here", "transport": {"type": "stdio", "command": "true",
                "env": {"TOKEN": "s3cret-value"}}}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let (status, body) = ns.get(&lan_url("/api/mcp/servers"), Some(&secret));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["servers"][0]["spec"]["transport"]["env"],
        json!({"TOKEN": ""}),
        "{body}"
    );
    let here = t.get_json("/api/mcp/servers").await;
    assert_eq!(
        here["servers"][0]["spec"]["transport"]["env"]["TOKEN"],
        "s3cret-value"
    );
    // A call waiting for consent: a `manage` key may not allow it for good (this machine alone
    // can take that back); a `use` key decides nothing.
    let store = node.store();
    let conv = store.create_conversation("lan".into()).await.unwrap();
    let answer = store
        .add_message(hearth_store::NewMessage {
            conversation_id: &conv.id,
            role: "assistant",
            content: "",
            status: hearth_store::MessageStatus::Complete,
            model: None,
            node: None,
            images: Vec::new(),
            audio: Vec::new(),
        })
        .await
        .unwrap();
    let pending = json!([{"id": "call_1", "name": "here__echo", "server": "here",
        "tool": "echo", "arguments": {}, "state": "pending", "consent": null, "reason": null,
        "outcome": null, "error": null}]);
    store
        .set_tool_calls(answer.id.clone(), Some(pending))
        .await
        .unwrap();
    let decide = lan_url(&format!("/api/conversations/{}/tool_calls/call_1", conv.id));
    let (status, body) = ns.post(&decide, Some(&secret), r#"{"decision": "always"}"#);
    assert_eq!(
        (status, &body["error"]["code"]),
        (403, &json!("local_only")),
        "{body}"
    );
    let (status, body) = ns.post(&decide, Some(&user), r#"{"decision": "once"}"#);
    assert_eq!(status, 403, "{body}");
    let kept = store.message(answer.id.clone()).await.unwrap().unwrap();
    assert_eq!(
        kept.tool_calls.unwrap()[0]["state"],
        "pending",
        "nothing was decided"
    );
    assert!(
        store.mcp_always_allowed().await.unwrap().is_empty(),
        "nothing is always allowed"
    );
    assert_eq!(
        ns.websocket_close_code(port, &format!("/api/events?token={user}")),
        "close 1008"
    );
    assert_eq!(
        ns.websocket_close_code(port, &format!("/?token={user}")),
        "opcode 1",
        "the signed-challenge door is a model door"
    );
    // A real request from the LAN with the key.
    let out = ns.exec(&[
        "curl",
        "-s",
        "-m",
        "60",
        "-H",
        &format!("Authorization: Bearer {user}"),
        "-H",
        "content-type: application/json",
        "-d",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": true}).to_string(),
        &lan_url("/v1/chat/completions"),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON answer");
    assert_eq!(v["usage"]["completion_tokens"], 3, "{v}");
    // Paths on this machine are shown to this machine only: the models folder, where an
    // imported model's file is, the file in Ollama's Modelfile.
    let (status, lan) = ns.get(&lan_url("/api/models"), Some(&secret));
    assert_eq!(status, 200, "{lan}");
    let here = t.get_json("/api/models").await;
    let dir = models.path().to_string_lossy().into_owned();
    assert_eq!(here["models_dir"], dir.as_str(), "{here}");
    let real = |list: &serde_json::Value| {
        list["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["file"] == model.file_name().unwrap().to_str().unwrap())
            .cloned()
            .unwrap()
    };
    assert_eq!(real(&here)["linked_to"], model.to_string_lossy().as_ref());
    assert_eq!(real(&lan)["imported"], true, "{lan}");
    assert_eq!(real(&here)["imported"], true, "{here}");
    let lan_text = lan.to_string();
    assert!(real(&lan).get("linked_to").is_none(), "{lan}");
    assert!(
        !lan_text.contains(&dir) && !lan_text.contains("/root"),
        "{lan}"
    );
    let show = json!({"model": real(&here)["id"]}).to_string();
    let (status, lan_show) = ns.post(&lan_url("/api/show"), Some(&secret), &show);
    assert_eq!(status, 200, "{lan_show}");
    let from = |show: &serde_json::Value| {
        let file = show["modelfile"].as_str().unwrap_or_default();
        file.lines()
            .find_map(|l| l.strip_prefix("FROM "))
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(from(&lan_show), real(&here)["id"].as_str().unwrap());
    let here_show = common::client()
        .post(t.url("/api/show"))
        .body(show)
        .send()
        .await
        .unwrap();
    let here_show: serde_json::Value = here_show.json().await.unwrap();
    assert!(from(&here_show).starts_with(&dir), "{here_show}");

    // Back to loopback: nothing listens there again; this machine is still served.
    node.set_exposed(false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ns.http_status(&lan_url("/api/status"), Some(&secret)), None);
    assert_eq!(ns.http_status(&ollama_lan, Some(&secret)), None);
    assert_eq!(status_here(ollama_here).await, 200);
    let r = common::client()
        .get(t.url("/api/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ollama_port_comes_back_after_a_move_that_failed() {
    let ns = Netns::create();
    // A free port, taken again by the node: another test may take it in between, so a few
    // tries.
    let mut tries = 0;
    let (t, ollama_port) = loop {
        let port = free_port();
        let started = TestNode::try_start_with(|c| {
            c.parallel = 1;
            c.ollama_port = Some(port);
        })
        .await;
        match started {
            Ok(t) => break (t, port),
            Err(e) if tries < 5 => {
                tries += 1;
                eprintln!("port {port} was taken meanwhile ({e}); another");
            }
            Err(e) => panic!("node starts: {e}"),
        }
    };
    let node = t.node().clone();
    // Another program holds the port on the LAN address: the main port moves, Ollama's cannot.
    let squatter = std::net::TcpListener::bind(format!("{}:{ollama_port}", ns.host_ip)).unwrap();
    node.set_exposed(true).await.unwrap();
    assert_eq!(node.ollama_addr(), None, "the Ollama port could not move");
    drop(squatter);
    // Back on loopback, the port listens again.
    node.set_exposed(false).await.unwrap();
    let here = format!("127.0.0.1:{ollama_port}");
    assert_eq!(
        node.ollama_addr().map(|a| a.to_string()),
        Some(here.clone())
    );
    let r = common::client()
        .get(format!("http://{here}/api/tags"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_origin_checks_apply_even_on_loopback() {
    let t = TestNode::start(1).await;
    let addr = t.node().addr();
    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends Host: evil.example.
    let r = common::client()
        .get(t.url("/api/status"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A WebSocket from a foreign origin is refused; the desktop app's origin is accepted.
    for (origin, ok) in [
        ("https://evil.example", false),
        ("tauri://localhost", true),
        ("http://localhost:5173", true),
    ] {
        let req = tokio_tungstenite::tungstenite::http::Request::builder()
            .uri(format!("ws://{addr}/api/events"))
            .header("host", addr.to_string())
            .header("origin", origin)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header(
                "sec-websocket-key",
                tokio_tungstenite::tungstenite::handshake::client::generate_key(),
            )
            .body(())
            .unwrap();
        let result = tokio_tungstenite::connect_async(req).await;
        assert_eq!(result.is_ok(), ok, "origin {origin}");
    }
    // CORS for the desktop app's fetch().
    let r = common::client()
        .request(reqwest::Method::OPTIONS, t.url("/api/conversations"))
        .header("origin", "tauri://localhost")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "tauri://localhost"
    );
    let methods = r.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap();
    assert!(methods.contains("POST"), "{methods}");
    let r = common::client()
        .get(t.url("/api/status"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_machine_may_hold_only_so_many_connections_and_loopback_any_number() {
    let ns = Netns::create();
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.lan = true;
        c.limits.per_address = 3;
    })
    .await;
    let port = t.node().addr().port();
    // Five connections from the other machine, nothing sent: which are closed at once?
    let script = format!(
        r#"
import socket, time
socks = [socket.create_connection(("{ip}", {port}), timeout=5) for _ in range(5)]
time.sleep(0.5)
state = []
for s in socks:
    s.setblocking(False)
    try:
        state.append("closed" if s.recv(1) == b"" else "data")
    except BlockingIOError:
        state.append("open")
    except ConnectionResetError:
        state.append("closed")
print(" ".join(state))
"#,
        ip = ns.host_ip,
    );
    let out = ns.exec(&["python3", "-c", &script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "open open open closed closed",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // WebSockets count too, after their upgrade, and across a rebind of the listener: three
    // open event streams fill the address's places, the node is taken off the LAN and exposed
    // again (the streams stay open), and a fourth connection is closed at once.
    let (_, secret) = t
        .node()
        .store()
        .create_key("lan cap".into(), KeyScope::Manage)
        .await
        .unwrap();
    let script = format!(
        r#"
import socket, base64, os, sys, time
def upgrade():
    s = socket.create_connection(("{ip}", {port}), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    data = b""
    try:
        s.sendall(("GET /api/events?token={secret} HTTP/1.1\r\nHost: {ip}:{port}\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return s, "closed"
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        return s, "closed"
    return s, data.split(b" ")[1].decode()
def upgrade_when_free():
    # The node may take a moment to see the connections above closed.
    for _ in range(100):
        s, status = upgrade()
        if status != "closed":
            return s, status
        time.sleep(0.1)
    return s, status
sockets = [upgrade_when_free() for _ in range(3)]
print(" ".join(status for _, status in sockets), flush=True)
sys.stdin.readline()
fourth = socket.create_connection(("{ip}", {port}), timeout=5)
try:
    # Closed at once, or still open after 5 s.
    state = "closed" if fourth.recv(1) == b"" else "data"
except socket.timeout:
    state = "open"
except ConnectionResetError:
    state = "closed"
print(state, flush=True)
"#,
        ip = ns.host_ip,
    );
    let mut python = tokio::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "timeout", "60", "python3", "-c"])
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = python.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(python.stdout.take().unwrap()).lines();
    assert_eq!(
        lines.next_line().await.unwrap().as_deref(),
        Some("101 101 101")
    );
    t.node().set_exposed(false).await.unwrap();
    t.node().set_exposed(true).await.unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("closed"));
    drop(stdin);
    let _ = python.wait().await;
    // Loopback is never limited.
    let mut local = Vec::new();
    for _ in 0..10 {
        local.push(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for s in &local {
        let mut buf = [0u8; 1];
        assert!(
            matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a loopback connection was closed"
        );
    }
    t.stop().await;
}

/// A node on `port` (one slot) shared on the LAN, with two keys of scope `use`.
async fn exposed_with_two_keys(port: u16) -> (TestNode, Vec<String>) {
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.port = port;
    })
    .await;
    let node = t.node().clone();
    let mut secrets = Vec::new();
    for name in ["a", "b"] {
        let (_, secret) = node
            .store()
            .create_key(name.into(), KeyScope::Use)
            .await
            .unwrap();
        secrets.push(secret);
    }
    node.set_exposed(true).await.unwrap();
    (t, secrets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_key_continues_only_its_own_batches() {
    let ns = Netns::create();
    let port = free_port();
    let (t, secrets) = exposed_with_two_keys(port).await;
    let url = |secret: &str| format!("ws://{}:{port}/ws?token={secret}", ns.host_ip);
    let event = |events: &[serde_json::Value], ty: &str| {
        events
            .iter()
            .find(|e| e["type"] == ty)
            .unwrap_or_else(|| panic!("no {ty}: {events:?}"))
            .clone()
    };
    // A story that goes on, cut after 8 tokens: unfinished, so kept for key a.
    let story = "Once upon a time, a robot who had never seen colour learned to paint. One day";
    let greedy = |n: u32| json!({"do_sample": false, "max_new_tokens": n});
    let first = ns.batch(
        &url(&secrets[0]),
        &json!({"prompts": [{"request_id": "0", "prompt": story}], "generation_config": greedy(8)}),
    );
    let made = event(&first, "COMPLETE")["text"]
        .as_str()
        .unwrap()
        .to_owned();
    // Key b, on another socket of the same machine, with the same small id: nothing to continue.
    let again = json!({"prompts": [{"request_id": "0"}], "only_new_tokens": false,
        "generation_config": greedy(4)});
    let theirs = ns.batch(&url(&secrets[1]), &again);
    let error = event(&theirs, "ERROR");
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|m| m.contains("prompt is required")),
        "{theirs:?}"
    );
    // Key a continues it.
    let mine = ns.batch(&url(&secrets[0]), &again);
    assert_eq!(
        event(&mine, "INITIALIZED")["text"],
        json!(format!("{story}{made}")),
        "{mine:?}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lan_key_reads_and_continues_only_its_own_stored_responses() {
    let ns = Netns::create();
    let port = free_port();
    let (t, secrets) = exposed_with_two_keys(port).await;
    let base = format!("http://{}:{port}/v1", ns.host_ip);
    let (a, b) = (Some(secrets[0].as_str()), Some(secrets[1].as_str()));
    let (status, made) = ns.post(
        &format!("{base}/responses"),
        a,
        r#"{"input": "Hi", "max_output_tokens": 4}"#,
    );
    assert_eq!(status, 200, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let one = format!("{base}/responses/{id}");
    assert_eq!(ns.get(&one, a).0, 200);
    assert_eq!(ns.get(&one, b).0, 404, "another key does not see it");
    let next =
        format!(r#"{{"input": "More", "max_output_tokens": 4, "previous_response_id": "{id}"}}"#);
    assert_eq!(ns.post(&format!("{base}/responses"), b, &next).0, 404);
    assert_eq!(ns.post(&format!("{base}/responses"), a, &next).0, 200);
    // Nor does loopback's owner, and b cannot delete it.
    let here = common::client()
        .get(t.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(here.status(), 404);
    let out = ns.exec(&[
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-m",
        "10",
        "-X",
        "DELETE",
        "-H",
        &format!("Authorization: Bearer {}", secrets[1]),
        &one,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "404");
    assert_eq!(ns.get(&one, a).0, 200);
    // Anthropic's clients send the key as x-api-key; without one, Anthropic's error shape.
    let messages = format!("{base}/messages");
    let body = r#"{"model": "SmolLM2-135M-Instruct.Q4_1", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}"#;
    let out = ns.exec(&[
        "curl",
        "-s",
        "-m",
        "20",
        "-H",
        &format!("x-api-key: {}", secrets[0]),
        "-H",
        "content-type: application/json",
        "-d",
        body,
        &messages,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "message", "{v}");
    let (status, v) = ns.post(&messages, None, body);
    assert_eq!(status, 401);
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    t.stop().await;
}
