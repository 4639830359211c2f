//! Images named by http(s) URL (`--image-urls`), fetched from a web server the test runs in a
//! network namespace of its own at a documentation address (198.51.100.0/24: public, never
//! routed anywhere), reached through a router so that it is on none of this host's networks. With the default model and a projector the test writes, an image by URL
//! gives the answer the same image gives as a data URI, on the OpenAI, Anthropic and Responses
//! doors; loopback, a name for it, a redirect to it, redirect loops, big, slow, missing and
//! non-image files are refused with a clear 400, more at once than the node fetches with a 503;
//! nothing is fetched for a model that cannot see; off (the default) a URL is refused naming
//! the flag. Needs root (it runs `ip netns`), as CI does.

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use common::netns::Netns;
use common::{dark, stripes, TestNode, MODEL_ID};
use serde_json::{json, Value};

/// The test's web server: `/img/NAME` serves a file of `root`; `/hop` redirects to
/// `/img/stripes.png`, `/to-loopback` to this machine's loopback, `/loop` to itself; `/unsized`
/// sends 9 MiB without a length, `/slow` answers after 20 s. It exits by itself after 300 s.
const SERVER: &str = r#"
import http.server, os, sys, threading, time
root, host, port, loopback = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
threading.Timer(300, os._exit, [0]).start()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def go(self, where):
        self.send_response(302); self.send_header("Location", where)
        self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        p = self.path
        if p.startswith("/img/"):
            path = os.path.join(root, os.path.basename(p))
            if not os.path.isfile(path):
                self.send_error(404); return
            data = open(path, "rb").read()
            self.send_response(200); self.send_header("Content-Length", str(len(data)))
            self.end_headers(); self.wfile.write(data)
        elif p == "/hop": self.go("/img/stripes.png")
        elif p == "/to-loopback": self.go(loopback)
        elif p == "/loop": self.go("/loop")
        elif p == "/unsized":
            self.send_response(200); self.end_headers()
            for _ in range(9 * 16): self.wfile.write(b"\x89PNG" + b"\0" * 65532)
        elif p == "/slow":
            time.sleep(20); self.send_error(404)
        else: self.send_error(404)
class S(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # The node hangs up on a body past its limit: expected, not worth a traceback.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)
S((host, port), H).serve_forever()
"#;

/// The web server in its namespace, stopped when dropped.
struct Web {
    ns: Netns,
    port: u16,
    child: std::process::Child,
    _root: tempfile::TempDir,
}

impl Web {
    async fn start(loopback: &str) -> Self {
        let ns = Netns::create_public();
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("stripes.png"), stripes()).unwrap();
        std::fs::write(root.path().join("dark.png"), dark()).unwrap();
        std::fs::write(root.path().join("big.png"), vec![0u8; 9 << 20]).unwrap();
        // A real PNG of about 6 MiB (noise does not compress): each of two is a sound image
        // within its own limit, whichever arrives first.
        let noise = common::png(1450, 1450, |px, py| {
            let mut x = (px * 1451 + py + 1).wrapping_mul(0x9e37_79b9);
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            [x as u8, (x >> 8) as u8, (x >> 16) as u8]
        });
        assert!((6 << 20..8 << 20).contains(&noise.len()), "{}", noise.len());
        std::fs::write(root.path().join("six.png"), noise).unwrap();
        std::fs::write(
            root.path().join("doc.pdf"),
            b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n",
        )
        .unwrap();
        let port = 8080;
        let child = ns.spawn(&[
            "python3",
            "-c",
            SERVER,
            root.path().to_str().unwrap(),
            &ns.ns_ip,
            &port.to_string(),
            loopback,
        ]);
        let web = Self {
            ns,
            port,
            child,
            _root: root,
        };
        let at = format!("{}:{}", web.ns.ns_ip, web.port);
        common::wait_for(
            async || tokio::net::TcpStream::connect(&at).await.is_ok(),
            "the web server in its namespace",
        )
        .await;
        web
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}:{}{path}", self.ns.ns_ip, self.port)
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        // The child is `timeout`, which passes a TERM on to the server (a KILL it could not).
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn data_uri(bytes: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The request for `door` with one image, `image` a URL or a data URI.
fn request(door: &str, image: &str) -> (&'static str, Value) {
    let question = "Describe the picture.";
    match door {
        "openai" => (
            "/v1/chat/completions",
            json!({"model": MODEL_ID, "max_tokens": 16, "temperature": 0, "messages": [
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": image}},
                    {"type": "text", "text": question}]}]}),
        ),
        "anthropic" => (
            "/v1/messages",
            json!({"model": MODEL_ID, "max_tokens": 16, "temperature": 0, "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "url", "url": image}},
                    {"type": "text", "text": question}]}]}),
        ),
        _ => (
            "/v1/responses",
            json!({"model": MODEL_ID, "max_output_tokens": 16, "temperature": 0, "store": false,
                "input": [{"role": "user", "content": [
                    {"type": "input_image", "image_url": image},
                    {"type": "input_text", "text": question}]}]}),
        ),
    }
}

/// The door's status and JSON answer for one image.
async fn ask(t: &TestNode, door: &str, image: &str) -> (u16, Value) {
    let (path, body) = request(door, image);
    let r = t.post(path, &body).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The answer's text, which must come.
async fn answer(t: &TestNode, door: &str, image: &str) -> String {
    let (status, v) = ask(t, door, image).await;
    assert_eq!(status, 200, "{door} {image:.80}: {v}");
    match door {
        "openai" => v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned(),
        "anthropic" => v["content"][0]["text"].as_str().unwrap().to_owned(),
        _ => v["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["type"] == "message")
            .flat_map(|item| item["content"].as_array().unwrap().iter())
            .map(|part| part["text"].as_str().unwrap())
            .collect(),
    }
}

/// The answer `r` has `status` and an OpenAI error whose message says `says`.
async fn refused_as(r: reqwest::Response, status: u16, says: &str) {
    assert_eq!(r.status().as_u16(), status);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "wanted '{says}' in {v}");
}

/// A 400 on `door` whose message says `says`, in the door's own error shape.
async fn refused(t: &TestNode, door: &str, image: &str, says: &str) {
    let (status, v) = ask(t, door, image).await;
    assert_eq!(status, 400, "{door} {image}: {v}");
    if door == "anthropic" {
        assert_eq!(v["type"], "error", "{v}");
    }
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(says),
        "{door} {image}: wanted '{says}' in {v}"
    );
}

async fn vision_node(image_urls: bool) -> (TestNode, tempfile::TempDir) {
    let (dir, model) = common::model_with_projector("make_projector.py");
    let t = TestNode::start_with(|c| {
        c.models_dir = dir.path().to_path_buf();
        c.model = Some(model.to_string_lossy().into_owned());
        c.parallel = 2;
        // One llama.cpp thread: a cached answer is then the cold one to the bit (audio.rs's
        // `exact_audio_node` says why).
        c.threads = 1;
        c.image_urls = image_urls;
    })
    .await;
    (t, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_by_url_reaches_the_model_from_public_addresses_only() {
    let (t, _dir) = vision_node(true).await;
    let loopback = t.url("/api/status");
    let web = Web::start(&loopback).await;

    // By URL, the answer the same image gives inline; another image, another answer.
    for door in ["openai", "anthropic", "responses"] {
        let by_url = answer(&t, door, &web.url("/img/stripes.png")).await;
        let inline = answer(&t, door, &data_uri(&stripes())).await;
        assert_eq!(by_url, inline, "{door}");
        let other = answer(&t, door, &web.url("/img/dark.png")).await;
        assert_ne!(by_url, other, "{door}: two different images, one answer");
    }
    // A redirect within the public web is followed.
    let hop = answer(&t, "openai", &web.url("/hop")).await;
    assert_eq!(hop, answer(&t, "openai", &data_uri(&stripes())).await);

    // Never this machine or its networks, by address, by name or by redirect.
    let port = t.url("").rsplit(':').next().unwrap().to_owned();
    let not_public = "is not a public address";
    refused(&t, "openai", &loopback, not_public).await;
    refused(
        &t,
        "openai",
        &format!("http://localhost:{port}/api/status"),
        not_public,
    )
    .await;
    refused(
        &t,
        "openai",
        &format!("http://[::1]:{port}/api/status"),
        not_public,
    )
    .await;
    refused(&t, "openai", &web.url("/to-loopback"), not_public).await;
    refused(&t, "anthropic", &loopback, not_public).await;
    refused(&t, "responses", &loopback, not_public).await;
    // The limits, each named.
    refused(&t, "openai", &web.url("/loop"), "more than 3 redirects").await;
    refused(
        &t,
        "openai",
        &web.url("/img/big.png"),
        "over the limit of 8 MiB",
    )
    .await;
    refused(
        &t,
        "openai",
        &web.url("/unsized"),
        "over the limit of 8 MiB",
    )
    .await;
    // Two of 6 MiB: each within its limit, together (in base64) over the request's.
    let two = json!({"model": MODEL_ID, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": web.url("/img/six.png")}},
        {"type": "image_url", "image_url": {"url": web.url("/img/six.png")}},
        {"type": "text", "text": "Compare."}]}]});
    let r = t.post("/v1/chat/completions", &two).await;
    refused_as(r, 400, "would pass its limit of 12 MiB").await;
    refused(
        &t,
        "openai",
        &web.url("/img/doc.pdf"),
        "not an image this node reads",
    )
    .await;
    refused(
        &t,
        "openai",
        &web.url("/img/missing.png"),
        "answered HTTP 404",
    )
    .await;
    let started = std::time::Instant::now();
    refused(
        &t,
        "anthropic",
        &web.url("/slow"),
        "no answer within the time limit",
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(19));
    // Too many are refused before any is fetched.
    let parts: Vec<Value> = (0..17)
        .map(|_| json!({"type": "image_url", "image_url": {"url": web.url("/slow")}}))
        .collect();
    let started = std::time::Instant::now();
    let r = t
        .post(
            "/v1/chat/completions",
            &json!({"model": MODEL_ID, "messages": [{"role": "user", "content": parts}]}),
        )
        .await;
    refused_as(r, 400, "17 images in one request").await;
    assert!(started.elapsed() < Duration::from_secs(5));

    // The node fetches at most 16 images at once, all requests together: while one request's
    // 16 wait on a slow server, another's image waits a while, then is refused (503, retry).
    let slow: Vec<Value> = (0..16)
        .map(|_| json!({"type": "image_url", "image_url": {"url": web.url("/slow")}}))
        .collect();
    let body = json!({"model": MODEL_ID, "messages": [{"role": "user", "content": slow}]});
    let all_taken = {
        let url = t.url("/v1/chat/completions");
        tokio::spawn(async move { common::client().post(url).json(&body).send().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (path, body) = request("openai", &web.url("/img/dark.png"));
    let r = t.post(path, &body).await;
    refused_as(r, 503, "fetching 16 images by URL already").await;
    refused_as(
        all_taken.await.unwrap(),
        400,
        "no answer within the time limit",
    )
    .await;

    // The node keeps serving.
    let after = answer(&t, "openai", &web.url("/img/dark.png")).await;
    assert!(!after.is_empty());
    t.stop().await;
}

/// Off by default: a URL is refused, naming the flag that turns fetching on.
#[tokio::test]
async fn image_urls_are_not_fetched_unless_the_node_allows_it() {
    let (t, _dir) = vision_node(false).await;
    for door in ["openai", "anthropic", "responses"] {
        refused(&t, door, "https://198.51.100.2/stripes.png", "--image-urls").await;
    }
    t.stop().await;
}

/// A model sure not to see images (this node alone serves it, without a projector) is refused
/// before anything is fetched: the door's answer is that, at once, and never what a fetch of
/// the URL (a documentation address, served by nobody) would have said.
#[tokio::test]
async fn nothing_is_fetched_for_a_model_that_cannot_see() {
    let t = TestNode::start_with(|c| c.image_urls = true).await;
    for door in ["openai", "anthropic", "responses"] {
        let started = std::time::Instant::now();
        refused(
            &t,
            door,
            "http://198.51.100.2/stripes.png",
            "cannot see images",
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(4), "{door}");
    }
    t.stop().await;
}
