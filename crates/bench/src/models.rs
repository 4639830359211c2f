//! Models loaded on demand: what a request naming a model that is not loaded adds to its first
//! token beyond loading itself — its first token, less the engine's own load time
//! (`hearth-engine` in this process, the node's settings, measured in the same run), less the
//! same request's first token once the model is loaded — and the node's resident memory with
//! two models loaded and idle; and a model fetched from a peer ([`crate::transfer`]).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use hearth_engine::{Engine, EngineConfig};
use serde_json::json;

use crate::node::NodeProc;
use crate::report::Figure;

const SLOTS: usize = 2;
const CTX: u32 = 512;

/// The time to the first streamed piece of text of a one-token chat naming `model`.
async fn first_token(http: &reqwest::Client, base: &str, model: &str) -> Result<Duration> {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 1, "ignore_eos": true, "stream": true, "temperature": 0});
    let sent = Instant::now();
    let resp = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("{model}: {} {}", resp.status(), resp.text().await?);
    }
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while let Some(chunk) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk?));
        if seen.contains("\"content\":\"") {
            let at = sent.elapsed();
            while body.next().await.is_some() {}
            return Ok(at);
        }
    }
    bail!("{model}: the stream ended without text: {seen}")
}

/// The engine's own load of `path` with the node's settings, to ready.
async fn engine_load(path: &Path, threads: usize) -> Result<Duration> {
    let config = EngineConfig {
        slots: SLOTS,
        threads,
        context: Some(CTX),
        ..EngineConfig::new(path)
    };
    let started = Instant::now();
    let engine = Engine::start(config);
    engine.ready().await.context("the engine loads")?;
    let took = started.elapsed();
    tokio::task::spawn_blocking(move || engine.unload()).await?;
    Ok(took)
}

pub(crate) async fn figures(
    model: &Path,
    node_bin: &Path,
    threads: i32,
    quick: bool,
) -> Result<Vec<Figure>> {
    let rounds = if quick { 2 } else { 5 };
    let dir = tempfile::tempdir()?;
    for name in ["alpha", "beta"] {
        let to = dir.path().join(format!("{name}.gguf"));
        if std::fs::hard_link(model, &to).is_err() {
            std::fs::copy(model, &to).context("copying the model")?;
        }
    }
    let threads = usize::try_from(threads.max(1)).unwrap_or(1);
    let extra: Vec<String> = [
        "--models-dir",
        &dir.path().to_string_lossy(),
        "--parallel",
        &SLOTS.to_string(),
        "--ctx",
        &CTX.to_string(),
        "--threads",
        &threads.to_string(),
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let node = NodeProc::start(node_bin, &dir.path().join("alpha.gguf"), &extra)?;
    let (http, base) = (reqwest::Client::new(), node.base());
    let beta = dir.path().join("beta.gguf");
    let (mut added, mut loads) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        eprintln!("round {round}/{rounds}: a request naming a model that is not loaded");
        let load = engine_load(&beta, threads).await?;
        let cold = first_token(&http, &base, "beta").await?;
        let warm = first_token(&http, &base, "beta").await?;
        let r = http
            .post(format!("{base}/api/models/unload"))
            .json(&json!({"id": "beta"}))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("unloading beta: {}", r.status());
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        added.push(ms(cold) - ms(load) - ms(warm));
        loads.push(ms(load));
    }
    first_token(&http, &base, "beta").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = node.rss_bytes()? as f64 / f64::from(1 << 20);
    drop(node);
    let mut transfers = crate::transfer::figures(model, node_bin, quick).await?;
    let mut out = vec![
        Figure::new("engine load of a model", "ms", loads),
        Figure::new("added to the first token by loading on demand", "ms", added).at_most(50.0),
        Figure::new(
            "resident memory with two models loaded, idle",
            "MiB",
            vec![rss],
        ),
    ];
    out.append(&mut transfers);
    Ok(out)
}
