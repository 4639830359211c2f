//! Streaming clients as a user's program would be: the OpenAI door over SSE and `/generate`
//! over a WebSocket, recording when each token message arrived, and counting-only variants
//! for the door-capacity runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// The repository's root, where its fixtures and its Python venv are.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A request's JSON answer; its status and answer as the error when it did not succeed.
pub(crate) async fn json_ok(r: reqwest::RequestBuilder) -> Result<Value> {
    let r = r.send().await?;
    let status = r.status();
    let v: Value = r.json().await?;
    if !status.is_success() {
        bail!("{status}: {v}");
    }
    Ok(v)
}

/// A conversation made through the UI's API with these `settings`: its id.
pub(crate) async fn new_conversation(
    http: &reqwest::Client,
    base: &str,
    settings: Value,
) -> Result<String> {
    let conv = json_ok(
        http.post(format!("{base}/api/conversations"))
            .json(&json!({"title": "bench"})),
    )
    .await?["id"]
        .as_str()
        .context("no conversation id")?
        .to_owned();
    json_ok(
        http.patch(format!("{base}/api/conversations/{conv}"))
            .json(&json!({ "settings": settings })),
    )
    .await?;
    Ok(conv)
}

/// What the decode figures ask every stream to write.
pub(crate) const PROMPT: &str = "Write a short story about a robot learning to paint.";

/// One streamed generation as the client saw it.
#[derive(Debug, Clone)]
pub(crate) struct Trace {
    pub(crate) sent: Instant,
    /// Arrival of each message that carried generated text.
    pub(crate) tokens: Vec<Instant>,
    /// The engine's own prefill time, as the node reported it (SSE only).
    pub(crate) prefill_ms: f64,
    /// Prompt tokens, as the node reported them in its usage.
    pub(crate) prompt_tokens: usize,
}

impl Trace {
    pub(crate) fn ttft(&self) -> Duration {
        self.tokens
            .first()
            .map_or(Duration::ZERO, |t| *t - self.sent)
    }
}

pub(crate) fn chat_body(prompt: &str, max_tokens: usize) -> Value {
    json!({"messages": [{"role": "user", "content": prompt}], "temperature": 0,
        "max_tokens": max_tokens, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true}})
}

/// Stream one chat completion over SSE.
pub(crate) async fn sse_chat(
    client: &reqwest::Client,
    base: &str,
    prompt: &str,
    max_tokens: usize,
) -> Result<Trace> {
    sse_chat_with(client, base, prompt, max_tokens, None).await
}

/// [`sse_chat`], telling `each` when every token arrives.
pub(crate) async fn sse_chat_each(
    client: &reqwest::Client,
    base: &str,
    prompt: &str,
    max_tokens: usize,
    each: tokio::sync::mpsc::UnboundedSender<Instant>,
) -> Result<Trace> {
    sse_chat_with(client, base, prompt, max_tokens, Some(each)).await
}

async fn sse_chat_with(
    client: &reqwest::Client,
    base: &str,
    prompt: &str,
    max_tokens: usize,
    each: Option<tokio::sync::mpsc::UnboundedSender<Instant>>,
) -> Result<Trace> {
    let sent = Instant::now();
    let resp = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat_body(prompt, max_tokens))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!(
            "HTTP {}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
    }
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::<u8>::new();
    let mut tokens = Vec::with_capacity(max_tokens);
    let mut prefill_ms = 0.0;
    let mut prompt_tokens = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..pos + 2).collect();
            let Some(data) = event.strip_prefix(b"data: ") else {
                continue;
            };
            let data = &data[..data.len() - 2];
            if data == b"[DONE]" {
                return Ok(Trace {
                    sent,
                    tokens,
                    prefill_ms,
                    prompt_tokens,
                });
            }
            let v: Value = serde_json::from_slice(data)?;
            if let Some(e) = v.get("error") {
                bail!("stream error: {e}");
            }
            if v["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
            {
                tokens.push(now);
                if let Some(each) = &each {
                    let _ = each.send(now);
                }
            }
            if let Some(ms) = v["timings"]["prompt_ms"].as_f64() {
                prefill_ms = ms;
            }
            if let Some(n) = v["usage"]["prompt_tokens"].as_u64() {
                prompt_tokens = n as usize;
            }
        }
    }
    bail!("the stream ended without [DONE]")
}

/// Stream one generation over `/generate`.
/// Read a streamed answer (server-sent events) to its end, handing each `data:` JSON object to
/// `on` as it arrives: the speculation, first-token and long-prompt rows read the stream so.
pub(crate) async fn each_sse_object(
    resp: reqwest::Response,
    mut on: impl FnMut(&Value),
) -> Result<()> {
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    while let Some(chunk) = stream.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk?));
        while let Some(end) = buf.find('\n') {
            let line: String = buf.drain(..=end).collect();
            if let Some(v) = line
                .trim()
                .strip_prefix("data: ")
                .and_then(|d| serde_json::from_str::<Value>(d).ok())
            {
                on(&v);
            }
        }
    }
    Ok(())
}

pub(crate) async fn ws_generate(addr: &str, prompt: &str, max_tokens: usize) -> Result<Trace> {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/generate")).await?;
    let sent = Instant::now();
    ws.send(Message::text(
        json!({"type": "config", "prompt": prompt,
            "parameters": {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": true},
            "options": {"include_timing": true}})
        .to_string(),
    ))
    .await?;
    let mut tokens = Vec::with_capacity(max_tokens);
    while let Some(msg) = ws.next().await {
        let now = Instant::now();
        let Message::Text(text) = msg? else { continue };
        let v: Value = serde_json::from_str(text.as_str())?;
        match v["type"].as_str() {
            Some("token") => tokens.push(now),
            Some("completion") => {
                let _ = ws.close(None).await;
                // This door does not report the engine's prefill on its own.
                return Ok(Trace {
                    sent,
                    tokens,
                    prefill_ms: f64::NAN,
                    prompt_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as usize,
                });
            }
            Some("error") => bail!("generate error: {v}"),
            _ => {}
        }
    }
    bail!("the socket closed before the completion")
}

/// Door capacity: token messages received by one client running back-to-back requests of
/// `tokens` tokens for `duration`.
pub(crate) async fn count_sse(
    client: reqwest::Client,
    base: String,
    tokens: usize,
    duration: Duration,
) -> Result<u64> {
    let start = Instant::now();
    let mut count = 0u64;
    while start.elapsed() < duration {
        let resp = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": tokens, "stream": true}))
            .send()
            .await?;
        let mut stream = resp.bytes_stream();
        let mut tail = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            tail.extend_from_slice(&chunk);
            // Count complete events that carry content.
            let mut consumed = 0;
            while let Some(pos) = tail[consumed..].windows(2).position(|w| w == b"\n\n") {
                let event = &tail[consumed..consumed + pos];
                if event.windows(10).any(|w| w == b"\"content\":")
                    && !event.windows(12).any(|w| w == b"\"content\":\"\"")
                {
                    count += 1;
                }
                consumed += pos + 2;
            }
            tail.drain(..consumed);
        }
    }
    Ok(count)
}

pub(crate) async fn count_ws(addr: String, tokens: usize, duration: Duration) -> Result<u64> {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/generate"))
        .await
        .context("connecting to /generate")?;
    let start = Instant::now();
    let mut count = 0u64;
    let config =
        json!({"type": "config", "prompt": "Hi", "parameters": {"max_tokens": tokens}}).to_string();
    while start.elapsed() < duration {
        ws.send(Message::text(config.clone())).await?;
        loop {
            let Some(msg) = ws.next().await else {
                bail!("socket closed")
            };
            let Message::Text(text) = msg? else { continue };
            let t = text.as_str();
            if t.starts_with(r#"{"type":"token""#) {
                count += 1;
            } else if t.starts_with(r#"{"type":"completion""#) {
                break;
            } else if t.starts_with(r#"{"type":"error""#) {
                bail!("generate error: {t}");
            }
        }
    }
    Ok(count)
}

/// One stream's decode rate (tokens after the first over their time) and time to first token.
pub(crate) fn rate_and_ttft(t: &Trace) -> Result<(f64, f64)> {
    let (a, b) = (t.tokens.first(), t.tokens.last());
    let (Some(a), Some(b)) = (a, b) else {
        bail!("no tokens")
    };
    let rate = (t.tokens.len() - 1) as f64 / (*b - *a).as_secs_f64();
    Ok((rate, t.ttft().as_secs_f64() * 1000.0))
}
