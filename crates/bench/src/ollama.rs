//! The Ollama door and embeddings, each measured in the same run as what it is compared with:
//! one greedy stream through the Ollama door against one through the OpenAI door (alternating
//! on one node), embedding inputs per second through `/v1/embeddings` against llama.cpp's own
//! embedding decode in this process (the floor, alternating), and one stream's decode while
//! another client keeps embeddings busy against the same stream alone.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::client::{self, Trace};
use crate::floor::Floor;
use crate::node::NodeProc;
use crate::report::Figure;

const PROMPT: &str = "Write a short story about a robot learning to paint.";
/// Inputs per embeddings request, and per floor decode: the engine's batch of sequences.
const EMBED_BATCH: usize = 16;

/// Stream one Ollama chat (NDJSON), recording when each piece of text arrived.
pub(crate) async fn ollama_chat(
    http: &reqwest::Client,
    base: &str,
    model: &str,
    tokens: usize,
) -> Result<Trace> {
    let body = json!({"model": model, "stream": true,
        "messages": [{"role": "user", "content": PROMPT}],
        "options": {"temperature": 0, "num_predict": tokens, "ignore_eos": true}});
    let sent = Instant::now();
    let resp = http
        .post(format!("{base}/api/chat"))
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("HTTP {}: {}", resp.status(), resp.text().await?);
    }
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut arrivals = Vec::with_capacity(tokens);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let v: Value = serde_json::from_slice(&line)?;
            if let Some(e) = v.get("error") {
                bail!("stream error: {e}");
            }
            if v["message"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
            {
                arrivals.push(now);
            }
            if v["done"] == true {
                return Ok(Trace {
                    sent,
                    tokens: arrivals,
                    prefill_ms: v["prompt_eval_duration"].as_f64().unwrap_or(0.0) / 1e6,
                    prompt_tokens: v["prompt_eval_count"].as_u64().unwrap_or(0) as usize,
                });
            }
        }
    }
    bail!("the stream ended without its final line")
}

/// Tokens per second between the first and the last token the client saw.
fn decode_rate(t: &Trace) -> Result<f64> {
    let (Some(first), Some(last)) = (t.tokens.first(), t.tokens.last()) else {
        bail!("a stream without tokens");
    };
    let span = (*last - *first).as_secs_f64();
    anyhow::ensure!(t.tokens.len() > 2 && span > 0.0, "too few tokens to time");
    Ok((t.tokens.len() - 1) as f64 / span)
}

/// The model the node serves, as it names it.
async fn model_name(http: &reqwest::Client, base: &str) -> Result<String> {
    let tags: Value = http
        .get(format!("{base}/api/tags"))
        .send()
        .await?
        .json()
        .await?;
    Ok(tags["models"][0]["name"]
        .as_str()
        .context("the node lists no model")?
        .to_owned())
}

/// Ollama's decode against OpenAI's, on the node already running at `base`: OpenAI, Ollama,
/// OpenAI, ... each Ollama run divided by the mean of the OpenAI runs on either side.
pub(crate) async fn door_figures(
    http: &reqwest::Client,
    base: &str,
    tokens: usize,
    pairs: usize,
) -> Result<Vec<Figure>> {
    let model = model_name(http, base).await?;
    eprintln!("the Ollama door against the OpenAI door, {pairs} pairs");
    ollama_chat(http, base, &model, 4).await?;
    let mut before = decode_rate(&client::sse_chat(http, base, PROMPT, tokens).await?)?;
    let (mut rates, mut ratios) = (Vec::new(), Vec::new());
    for _ in 0..pairs {
        let rate = decode_rate(&ollama_chat(http, base, &model, tokens).await?)?;
        let after = decode_rate(&client::sse_chat(http, base, PROMPT, tokens).await?)?;
        rates.push(rate);
        ratios.push(rate / ((before + after) / 2.0));
        before = after;
    }
    Ok(vec![Figure::new(
        "node decode, 1 stream (Ollama NDJSON)",
        "tok/s",
        rates,
    )
    .against(
        "node decode, 1 stream (OpenAI SSE, around it)",
        ratios,
        Some(0.99),
    )])
}

/// Distinct short inputs, `EMBED_BATCH` of them.
fn inputs() -> Vec<String> {
    (0..EMBED_BATCH)
        .map(|i| format!("Note {i}: the quick brown fox jumps over the lazy dog near the river."))
        .collect()
}

/// `n` embedding requests of `EMBED_BATCH` inputs from two clients at once (so the engine
/// always has the next batch); inputs per second.
async fn embed_run(http: &reqwest::Client, base: &str, n: usize) -> Result<f64> {
    let body = json!({"input": inputs(), "encoding_format": "base64"});
    let started = Instant::now();
    let clients: Vec<_> = (0..2)
        .map(|c| {
            let (http, url, body) = (http.clone(), format!("{base}/v1/embeddings"), body.clone());
            tokio::spawn(async move {
                for _ in (c..n).step_by(2) {
                    let v: Value = http.post(&url).json(&body).send().await?.json().await?;
                    let got = v["data"].as_array().map_or(0, Vec::len);
                    anyhow::ensure!(got == EMBED_BATCH, "{got} vectors: {v}");
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .collect();
    for c in clients {
        c.await??;
    }
    Ok((n * EMBED_BATCH) as f64 / started.elapsed().as_secs_f64())
}

/// One stream's decode rate while a client keeps embedding requests coming (or not).
async fn stream_run(
    http: &reqwest::Client,
    base: &str,
    tokens: usize,
    with_embeddings: bool,
) -> Result<f64> {
    let busy = Arc::new(AtomicBool::new(false));
    let load = with_embeddings.then(|| {
        let (http, url, busy) = (http.clone(), format!("{base}/v1/embeddings"), busy.clone());
        tokio::spawn(async move {
            let body = json!({"input": inputs(), "encoding_format": "base64"});
            let mut done = 0usize;
            while !busy.load(Ordering::Relaxed) {
                let r = http.post(&url).json(&body).send().await?;
                anyhow::ensure!(r.status().is_success(), "HTTP {}", r.status());
                r.bytes().await?;
                done += 1;
            }
            Ok::<_, anyhow::Error>(done)
        })
    });
    // Let the embedding load start before the stream does.
    if with_embeddings {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rate = decode_rate(&client::sse_chat(http, base, PROMPT, tokens).await?);
    busy.store(true, Ordering::Relaxed);
    if let Some(load) = load {
        let batches = load.await??;
        anyhow::ensure!(batches > 0, "no embeddings were computed during the stream");
    }
    rate
}

/// Embedding throughput against the floor, and decoding beside embeddings.
pub(crate) async fn embed_figures(
    model: &Path,
    node_bin: &Path,
    threads: i32,
    tokens: usize,
    pairs: usize,
    quick: bool,
) -> Result<Vec<Figure>> {
    let floor = Floor::new(model, 1, 512, threads)?;
    let floor_inputs: Vec<_> = inputs().iter().map(|s| floor.tokenize(s)).collect();
    let node = NodeProc::start(
        node_bin,
        model,
        &[
            "--parallel".into(),
            "2".into(),
            "--threads".into(),
            threads.to_string(),
        ],
    )?;
    let base = node.base();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()?;
    // Warm up: the embedding context is made on first use.
    embed_run(&http, &base, 2).await?;
    floor.embed_rate(&floor_inputs, 2)?;

    eprintln!("embeddings against the floor, {pairs} pairs");
    // Requests of EMBED_BATCH inputs per run: about 8 s at each end here, 2 s in a quick run.
    let requests = if quick { 2 } else { 8 };
    let mut before = floor.embed_rate(&floor_inputs, requests)?;
    let (mut node_rates, mut floor_rates, mut ratios) = (Vec::new(), vec![before], Vec::new());
    for _ in 0..pairs {
        let rate = embed_run(&http, &base, requests).await?;
        let after = floor.embed_rate(&floor_inputs, requests)?;
        node_rates.push(rate);
        floor_rates.push(after);
        ratios.push(rate / ((before + after) / 2.0));
        before = after;
    }

    eprintln!("decoding beside embeddings, {pairs} pairs");
    let stream_tokens = tokens.max(48);
    let mut alone_before = stream_run(&http, &base, stream_tokens, false).await?;
    let (mut beside, mut beside_ratios) = (Vec::new(), Vec::new());
    for _ in 0..pairs {
        let rate = stream_run(&http, &base, stream_tokens, true).await?;
        let alone_after = stream_run(&http, &base, stream_tokens, false).await?;
        beside.push(rate);
        beside_ratios.push(rate / ((alone_before + alone_after) / 2.0));
        alone_before = alone_after;
    }
    let rss = node.rss_bytes()? as f64 / (1024.0 * 1024.0);
    drop(node);
    Ok(vec![
        Figure::new("node embeddings (/v1/embeddings)", "inputs/s", node_rates).against(
            "floor embeddings (llama.cpp, 16 inputs per decode)",
            ratios,
            Some(0.95),
        ),
        Figure::new(
            "floor embeddings (llama.cpp, 16 inputs per decode)",
            "inputs/s",
            floor_rates,
        ),
        Figure::new("node decode, 1 stream beside embeddings", "tok/s", beside).against(
            "node decode, 1 stream alone (around it)",
            beside_ratios,
            Some(0.8),
        ),
        Figure::new(
            "resident memory with the embedding context, 2 slots",
            "MiB",
            vec![rss],
        ),
    ])
}
