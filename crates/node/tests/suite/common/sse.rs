//! Server-sent events as tests read them: a stream's `data:` payloads on a channel as they
//! arrive, read to `[DONE]` or until some content has come.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{client, TestNode};

/// A streaming chat completion whose SSE `data:` payloads arrive on a channel as they come.
pub fn stream_chat(node: &TestNode, body: Value) -> mpsc::Receiver<String> {
    stream_chat_at(node.url("/v1/chat/completions"), body)
}

/// The same, to the chat completions URL `url` (a node process's).
pub fn stream_chat_at(url: String, mut body: Value) -> mpsc::Receiver<String> {
    body["stream"] = json!(true);
    stream_sse(url, body)
}

/// POST `body` to `url` and pass on the `data:` payloads of the SSE answer as they come.
pub fn stream_sse(url: String, body: Value) -> mpsc::Receiver<String> {
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

pub async fn next_data(rx: &mut mpsc::Receiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(120), rx.recv())
        .await
        .expect("an SSE event within 120 s")
        .expect("the stream ended without [DONE]")
}

/// Read a chat stream to `[DONE]`: the content, the finish reason, and any error object.
pub async fn finish_stream(
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
pub async fn read_deltas(rx: &mut mpsc::Receiver<String>, n: usize, content: &mut String) {
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
