//! Load against a real node process: 200 clients at once across the doors against
//! `--parallel 4 --queue 32` are each answered or clearly refused (none hangs), the node's
//! memory stays bounded and it serves normally afterwards; 50 clients that vanish after their
//! first token free their slots (the engine generates nothing more for them).

use crate::common;

use std::time::Duration;

use common::process::NodeProcess;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// How a client fared.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Answered,
    /// Refused with the door's own "busy" answer (429, `rate_limited`).
    Refused,
    /// Anything else: a failure of the test.
    Other(String),
}

/// Every client gives up after this: a client still waiting then has hung.
const CLIENT_LIMIT: Duration = Duration::from_secs(120);

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

async fn openai(http: reqwest::Client, url: String, path: &str, body: Value) -> Outcome {
    let r = match http.post(format!("{url}{path}")).json(&body).send().await {
        Ok(r) => r,
        Err(e) => return Outcome::Other(e.to_string()),
    };
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    match status {
        200 if text.contains("[DONE]") || text.contains("\"usage\"") => Outcome::Answered,
        429 if text.contains("rate_limit") => Outcome::Refused,
        s => Outcome::Other(format!("{s}: {text}")),
    }
}

async fn generate_ws(addr: String) -> Outcome {
    let (mut ws, _) = match tokio_tungstenite::connect_async(format!("ws://{addr}/generate")).await
    {
        Ok(w) => w,
        Err(e) => return Outcome::Other(e.to_string()),
    };
    let config = json!({"type": "config", "prompt": "Hi", "parameters": {"max_tokens": 6, "ignore_eos": true}});
    if ws.send(Message::text(config.to_string())).await.is_err() {
        return Outcome::Other("send failed".into());
    }
    while let Some(Ok(m)) = ws.next().await {
        let Message::Text(t) = m else { continue };
        let v: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
        match v["type"].as_str() {
            Some("completion") => return Outcome::Answered,
            Some("error") if v["error"] == "rate_limited" => return Outcome::Refused,
            Some("error") => return Outcome::Other(v.to_string()),
            _ => {}
        }
    }
    Outcome::Other("the socket ended".into())
}

async fn batch_ws(addr: String, n: usize) -> Outcome {
    let (mut ws, _) = match tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await {
        Ok(w) => w,
        Err(e) => return Outcome::Other(e.to_string()),
    };
    let msg = json!({"prompts": [{"request_id": format!("p{n}"), "prompt": "Hi"}],
                     "generation_config": {"max_new_tokens": 6, "do_sample": false}});
    if ws.send(Message::text(msg.to_string())).await.is_err() {
        return Outcome::Other("send failed".into());
    }
    while let Some(Ok(m)) = ws.next().await {
        let Message::Text(t) = m else { continue };
        let events: Vec<Value> = serde_json::from_str(t.as_str()).unwrap_or_default();
        for e in events {
            match e["type"].as_str() {
                Some("COMPLETE") => return Outcome::Answered,
                Some("ERROR") => return Outcome::Other(e.to_string()),
                _ => {}
            }
        }
    }
    Outcome::Other("the socket ended".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_across_the_doors_are_answered_or_refused_and_none_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(
        &dir.path().join("data"),
        &["--parallel", "4", "--queue", "32", "--ctx", "512"],
        None,
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let rss_before = rss_kib(node.child.id());
    let chat = |stream: bool| json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "ignore_eos": true, "stream": stream});
    let mut clients = Vec::new();
    for i in 0..200 {
        let (http, url, addr) = (http.clone(), node.url.clone(), node.addr.clone());
        let (sse, plain) = (chat(true), chat(false));
        clients.push(tokio::spawn(async move {
            let work = async move {
                match i % 5 {
                    0 => openai(http, url, "/v1/chat/completions", sse).await,
                    1 => openai(http, url, "/v1/chat/completions", plain).await,
                    2 => {
                        let body = json!({"prompt": "Once", "max_tokens": 6, "ignore_eos": true});
                        openai(http, url, "/v1/completions", body).await
                    }
                    3 => generate_ws(addr).await,
                    _ => batch_ws(addr, i).await,
                }
            };
            tokio::time::timeout(CLIENT_LIMIT, work)
                .await
                .unwrap_or(Outcome::Other("hung".into()))
        }));
    }
    let mut outcomes = Vec::new();
    for c in clients {
        outcomes.push(c.await.unwrap());
    }
    let answered = outcomes.iter().filter(|o| **o == Outcome::Answered).count();
    let refused = outcomes.iter().filter(|o| **o == Outcome::Refused).count();
    let other: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Other(_)))
        .collect();
    assert!(
        other.is_empty(),
        "{} clients failed: {:?}",
        other.len(),
        &other[..other.len().min(5)]
    );
    // Every slot and queue place was used: 4 + 32 at least, and every batch client waits.
    assert!(
        answered >= 36,
        "only {answered} answered ({refused} refused)"
    );
    eprintln!("answered {answered}, refused {refused}");
    assert_eq!(answered + refused, 200);

    // Bounded memory, and normal service afterwards.
    let rss_after = rss_kib(node.child.id());
    assert!(
        rss_after < rss_before + 200 * 1024,
        "resident memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    common::wait_for(
        async || {
            let s = common::get_json_at(format!("{}/api/status", node.url)).await;
            s["active"] == 0 && s["queued"] == 0
        },
        "the node to be idle",
    )
    .await;
    let again = openai(http, node.url.clone(), "/v1/chat/completions", chat(false)).await;
    assert_eq!(again, Outcome::Answered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_that_vanish_after_one_token_free_their_slots_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(
        &dir.path().join("data"),
        &["--parallel", "4", "--queue", "64", "--ctx", "1024"],
        None,
    );
    let http = common::client();
    let mut clients = Vec::new();
    for _ in 0..50 {
        let (http, url) = (http.clone(), node.url.clone());
        clients.push(tokio::spawn(async move {
            let body = json!({"messages": [{"role": "user", "content": "Write a long story."}],
                              "max_tokens": 500, "ignore_eos": true, "stream": true});
            let mut r = http
                .post(format!("{url}/v1/chat/completions"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            // The role chunk, then the first token: then the client is gone.
            let mut seen = String::new();
            while seen.matches("\"content\"").count() < 2 {
                let chunk = tokio::time::timeout(CLIENT_LIMIT, r.chunk())
                    .await
                    .expect("a token within the limit")
                    .unwrap()
                    .expect("the stream ended before a token");
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    common::wait_for(
        async || {
            let s = common::get_json_at(format!("{}/api/status", node.url)).await;
            s["active"] == 0 && s["queued"] == 0
        },
        "every slot to be freed",
    )
    .await;
    let status = common::get_json_at(format!("{}/api/status", node.url)).await;
    let generated = status["tokens_generated"].as_u64().unwrap();
    // Far fewer than the 50 x 500 tokens asked for: nothing ran on for a client that left.
    assert!(generated < 50 * 40, "{generated} tokens generated");
}
