//! Shared helpers for the node's integration tests: start a real node on port 0 with a temp
//! data dir and the real default model, talk to it over HTTP, SSE and WebSocket, and stop it.
#![allow(dead_code, unreachable_pub)]

pub mod cluster_peer;
pub mod direct;
pub mod hub;
pub mod model_hub;
pub mod netns;
pub mod process;
pub mod signed;
pub mod split_gguf;
pub mod sse;
pub mod workspace;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hearth_node::{Node, NodeConfig};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

/// A loopback cluster for an in-process node: a free port, no passcode, no TealeNet
/// compatibility, no discovery, these peers kept connected.
pub fn cluster_config(peers: Vec<String>) -> Option<hearth_cluster::ClusterConfig> {
    Some(hearth_cluster::ClusterConfig {
        port: Some(0),
        passcode: None,
        tealenet_compat: false,
        peers,
        discovery: false,
    })
}

/// Two in-process nodes over loopback TCP: `peer-a` with the default model (one slot), and
/// `node-b` on an empty models folder (the third value, kept while they run) with `peer-a` as
/// its peer, returned once b sees a's model.
pub async fn model_on_a_peer() -> (TestNode, TestNode, tempfile::TempDir) {
    model_on_a_peer_with(|_| {}).await
}

/// [`model_on_a_peer`], with `peer-a`'s settings changed by `f` first (another model).
pub async fn model_on_a_peer_with(
    f: impl FnOnce(&mut NodeConfig),
) -> (TestNode, TestNode, tempfile::TempDir) {
    let a = TestNode::start_with(|c| {
        c.name = "peer-a".into();
        c.parallel = 1;
        c.cluster = cluster_config(Vec::new());
        f(c);
    })
    .await;
    let at = a.node().cluster_addr().unwrap().to_string();
    let empty = tempfile::tempdir().unwrap();
    let b = TestNode::start_with(|c| {
        c.name = "node-b".into();
        without_model(c, empty.path());
        c.cluster = cluster_config(vec![at]);
    })
    .await;
    wait_for(
        async || b.get_json("/api/cluster").await["peers"][0]["loaded_models"][0] == MODEL_ID,
        "b seeing a's model",
    )
    .await;
    (a, b, empty)
}

/// A node on an empty models folder (`dir`): no model of its own.
pub fn without_model(c: &mut NodeConfig, dir: &std::path::Path) {
    c.model = None;
    c.models_dir = dir.to_path_buf();
}

/// A short chat answer from `model` through the OpenAI door: 200, from that model.
pub async fn ask(t: &TestNode, model: &str) -> Value {
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": model, "max_tokens": 3, "messages": user("Hi")}),
        )
        .await;
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], model, "{body}");
    body
}

/// Model `id`'s row in `GET /api/models` (null when it is not listed).
pub async fn model_row(t: &TestNode, id: &str) -> Value {
    let models = t.get_json("/api/models").await;
    models["models"]
        .as_array()
        .and_then(|rows| rows.iter().find(|m| m["id"] == id))
        .cloned()
        .unwrap_or_default()
}

/// The default model's size in bytes.
pub fn model_size() -> u64 {
    std::fs::metadata(model_path()).unwrap().len()
}

/// A file's SHA-256, lowercase hex.
pub fn sha256_of(path: &std::path::Path) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut std::fs::File::open(path).unwrap(), &mut h).unwrap();
    hex::encode(h.finalize())
}

/// The long-context test model (Gemma 3 270M, 32k context), fetched by `scripts/setup.sh`
/// through `scripts/long-model.sh`.
pub fn long_model_path() -> PathBuf {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/long-model.sh");
    let out = std::process::Command::new(script)
        .arg("--path")
        .output()
        .expect("scripts/long-model.sh runs");
    let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(
        path.is_file(),
        "the long-context model is missing at {} — run `make test` (or scripts/setup.sh)",
        path.display()
    );
    path
}

/// The default model, fetched by `scripts/setup.sh` (HEARTH_TEST_MODEL overrides).
pub fn model_path() -> PathBuf {
    let path = std::env::var_os("HEARTH_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            dirs_data()
                .join("hearth/models")
                .join("SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        path.is_file(),
        "the default model is missing at {} — run `make test` (or scripts/setup.sh) to fetch it",
        path.display()
    );
    path
}

fn dirs_data() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".local/share")
        })
}

pub struct TestNode {
    pub node: Option<Node>,
    pub dir: tempfile::TempDir,
    pub base: String,
    pub ws_base: String,
}

impl TestNode {
    pub async fn start(parallel: usize) -> Self {
        Self::start_with(|c| c.parallel = parallel).await
    }

    pub async fn start_with(f: impl FnOnce(&mut NodeConfig)) -> Self {
        Self::try_start_with(f).await.expect("node starts")
    }

    /// Like [`TestNode::start_with`], with why the node did not start.
    pub async fn try_start_with(
        f: impl FnOnce(&mut NodeConfig),
    ) -> Result<Self, hearth_node::NodeError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = model_path();
        let mut config = NodeConfig::new(dir.path().join("data"));
        config.models_dir = model.parent().unwrap().to_path_buf();
        config.model = Some(model.to_string_lossy().into_owned());
        config.port = 0;
        config.ctx = Some(1024);
        // Never the developer's own keyring: the node's key goes to a file in the temp dir.
        config.key_storage = hearth_auth::identity::KeyStorage::File;
        // Documents are read in a child that is hearth-node (this program is the test's).
        config.document_reader = Some(env!("CARGO_BIN_EXE_hearth-node").into());
        f(&mut config);
        let wait_ready = config.min_load_time.is_none() && config.model.is_some();
        let node = Node::start(config).await?;
        if wait_ready {
            node.host().ready().await.expect("model loads");
        }
        let addr = node.addr();
        Ok(Self {
            node: Some(node),
            dir,
            base: format!("http://{addr}"),
            ws_base: format!("ws://{addr}"),
        })
    }

    pub fn node(&self) -> &Node {
        self.node.as_ref().expect("node running")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn stop(mut self) {
        if let Some(n) = self.node.take() {
            n.shutdown().await;
        }
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        client()
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        client()
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request sent")
    }

    /// Non-streaming chat completion; panics unless 200.
    pub async fn chat(&self, body: Value) -> Value {
        let r = self.post("/v1/chat/completions", &body).await;
        let status = r.status();
        let v: Value = r.json().await.expect("json body");
        assert_eq!(status, 200, "chat failed: {v}");
        v
    }

    /// Streaming chat completion: the concatenated content and every parsed chunk.
    pub async fn chat_stream(&self, mut body: Value) -> (String, Vec<Value>) {
        body["stream"] = json!(true);
        let r = self.post("/v1/chat/completions", &body).await;
        assert_eq!(r.status(), 200);
        assert!(r
            .headers()
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        let text = r.text().await.unwrap();
        parse_sse(&text)
    }

    /// GET `path` and parse the JSON answer.
    pub async fn get_json(&self, path: &str) -> Value {
        get_json_at(self.url(path)).await
    }

    /// Create a conversation through `/api` and return its id.
    pub async fn new_conversation(&self, title: &str) -> String {
        let r = self
            .post("/api/conversations", &json!({ "title": title }))
            .await;
        assert_eq!(r.status(), 201);
        r.json::<Value>().await.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Change a conversation's settings through `/api`; panics unless 200.
    pub async fn patch_settings(&self, conv: &str, settings: Value) {
        let r = client()
            .patch(self.url(&format!("/api/conversations/{conv}")))
            .json(&json!({ "settings": settings }))
            .send()
            .await
            .expect("request sent");
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }

    /// Wait (10 s at most) until no slot is busy: a slot is freed just after its last event.
    pub async fn wait_idle(&self, what: &str) {
        wait_for(async || self.status().await["active"] == 0, what).await;
    }

    pub async fn status(&self) -> Value {
        self.get_json("/api/status").await
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> String {
        client()
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("request sent")
            .text()
            .await
            .expect("metrics text")
    }

    pub async fn ws(&self, path: &str) -> Ws {
        let (ws, _) = tokio_tungstenite::connect_async(format!("{}{path}", self.ws_base))
            .await
            .expect("websocket connects");
        ws
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// Parse an SSE body: content deltas joined, and all JSON chunks; asserts `[DONE]` ends it.
pub fn parse_sse(body: &str) -> (String, Vec<Value>) {
    let mut chunks = Vec::new();
    let mut content = String::new();
    let mut done = false;
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        assert!(!done, "data after [DONE]");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).expect("chunk is JSON");
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            content.push_str(c);
        }
        if let Some(c) = v["choices"][0]["text"].as_str() {
            content.push_str(c);
        }
        chunks.push(v);
    }
    assert!(done, "stream did not end with [DONE]: {body}");
    (content, chunks)
}

pub fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

pub async fn ws_send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string()))
        .await
        .expect("ws send");
}

pub async fn ws_send_text(ws: &mut Ws, s: &str) {
    ws.send(Message::text(s.to_owned())).await.expect("ws send");
}

/// Next JSON text message within `within`; `None` on timeout. Panics on close or non-JSON.
pub async fn ws_recv_timeout(ws: &mut Ws, within: Duration) -> Option<Value> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = match tokio::time::timeout(left, ws.next()).await {
            Err(_) => return None,
            Ok(m) => m,
        };
        match msg {
            Some(Ok(Message::Text(t))) => {
                return Some(serde_json::from_str(t.as_str()).expect("json message"))
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => panic!("unexpected websocket message: {other:?}"),
        }
    }
}

pub async fn ws_recv(ws: &mut Ws) -> Value {
    ws_recv_timeout(ws, Duration::from_secs(60))
        .await
        .expect("a message within 60 s")
}

/// Read messages until one of type `ty`; returns it and everything before it.
pub async fn ws_until(ws: &mut Ws, ty: &str) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let m = ws_recv(ws).await;
        if m["type"] == ty {
            return (m, before);
        }
        before.push(m);
    }
}

/// Word-level similarity in [0, 1]: 1 - Levenshtein distance / longer length.
pub fn similarity(a: &str, b: &str) -> f64 {
    let a: Vec<&str> = a.split_whitespace().collect();
    let b: Vec<&str> = b.split_whitespace().collect();
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, wa) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, wb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(wa != wb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    1.0 - prev[b.len()] as f64 / a.len().max(b.len()) as f64
}

/// Poll `cond` every 20 ms until it holds; panic naming `what` after 10 s.
/// GET a full URL (a node this test started as a process) and parse the JSON answer.
pub async fn get_json_at(url: String) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub async fn wait_for(cond: impl AsyncFnMut() -> bool, what: &str) {
    wait_for_secs(10, cond, what).await;
}

/// [`wait_for`] with a limit of `secs` seconds.
pub async fn wait_for_secs(secs: u64, mut cond: impl AsyncFnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A chat completion from the node at `url`, as JSON (two minutes at most).
pub async fn chat_at(url: &str, body: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The node at `url`'s greedy answer to `prompt` (40 tokens at most).
pub async fn greedy_at(url: &str, prompt: &str) -> String {
    let r = chat_at(
        url,
        json!({
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0, "max_tokens": 40,
        }),
    )
    .await;
    r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {r}"))
        .to_owned()
}

/// A copy of the default model in `dir` whose chat template knows tools (Hermes style, as
/// Qwen 2.5's does), written by `tests/tools_model.py` with `args` (`--opens-thinking`).
pub fn tools_model_with(dir: &std::path::Path, args: &[&str]) -> PathBuf {
    let out = dir.join("SmolLM2-tools.gguf");
    let status = std::process::Command::new(process::venv_python())
        .arg(process::repo_root().join("tests/tools_model.py"))
        .arg(model_path())
        .arg(&out)
        .args(args)
        .status()
        .expect("python runs");
    assert!(status.success(), "tests/tools_model.py failed");
    out
}

/// A folder holding the default model (a link to it) and the projector that
/// `tests/fixtures/<script>` writes for it, as `mmproj-<name>` (LM Studio's layout); the link.
pub fn model_with_projector(script: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = model_path();
    let name = model.file_name().unwrap().to_str().unwrap().to_owned();
    let linked = dir.path().join(&name);
    std::os::unix::fs::symlink(&model, &linked).unwrap();
    let out = std::process::Command::new(process::venv_python())
        .arg(process::repo_root().join("tests/fixtures").join(script))
        .arg("--model")
        .arg(&model)
        .arg("--out")
        .arg(dir.path().join(format!("mmproj-{name}")))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, linked)
}

/// The UI's chat turn in conversation `conv`: the answer's text (the `done` event's message).
pub async fn ui_turn(t: &TestNode, conv: &str, body: Value) -> String {
    let r = t
        .post(&format!("/api/conversations/{conv}/chat"), &body)
        .await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let done = events
        .iter()
        .find(|e| e["type"] == "done")
        .unwrap_or_else(|| panic!("no done event: {text}"));
    done["message"]["content"].as_str().unwrap().to_owned()
}

/// A UI conversation that answers greedily, 16 tokens at most, as the doors above are asked.
pub async fn greedy_conversation(t: &TestNode, title: &str) -> String {
    let conv = t.new_conversation(title).await;
    let r = client()
        .patch(t.url(&format!("/api/conversations/{conv}")))
        .json(&json!({"settings": {"temperature": 0, "max_tokens": 16}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    conv
}

/// A PNG of `width` x `height` pixels, each from `pixel(x, y)`.
pub fn png(width: u32, height: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    let img = image::RgbImage::from_fn(width, height, |x, y| image::Rgb(pixel(x, y)));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// A 96x64 PNG of red and blue stripes: the tests' first image.
pub fn stripes() -> Vec<u8> {
    png(96, 64, |x, _| {
        if (x / 8) % 2 == 0 {
            [250, 20, 20]
        } else {
            [10, 10, 240]
        }
    })
}

/// A 64x64 PNG of dark gradients: the tests' other image.
pub fn dark() -> Vec<u8> {
    png(64, 64, |x, y| [(x * 2) as u8, (y * 2) as u8, 30])
}

/// A PNG as a data URI, the form the OpenAI and Responses doors take images in.
pub fn png_uri(png: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(png);
    format!("data:image/png;base64,{b64}")
}

/// An OpenAI Chat Completions `image_url` part holding a PNG.
pub fn image_url_part(png: &[u8]) -> Value {
    json!({"type": "image_url", "image_url": {"url": png_uri(png)}})
}

/// The layout folders of prompt cache `root` (`--cache-disk`: `{model}/{layout}/`).
pub fn cache_layout_folders(root: &Path) -> Vec<PathBuf> {
    let inside = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect()
    };
    inside(root)
        .iter()
        .flat_map(|model| inside(model))
        .collect()
}
