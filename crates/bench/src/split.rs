//! A model split across two nodes on loopback (llama.cpp's RPC backend through Hearth's
//! encrypted tunnel) against the same model whole on one node, in the same run: one stream's
//! decode rate and time to first token, pair by pair, and the bytes per generated token that
//! crossed between the two nodes (what decides whether a real LAN link can carry it). Each
//! machine is one core: the whole model's node and the split's owner (with its worker) share
//! core 0, the node holding the other half of the layers has core 1.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::client;
use crate::node::{cluster_addr, s, NodeProc};
use crate::report::Figure;

const PROMPT: &str = "Write a short story about a robot learning to paint.";

/// Bytes the node at `base` sent and received on cluster connections (tunnels included).
async fn cluster_bytes(http: &reqwest::Client, base: &str) -> Result<u64> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let read = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(
        (read("hearth_cluster_sent_bytes_total ") + read("hearth_cluster_received_bytes_total "))
            as u64,
    )
}

/// Split the owner's model, and wait until its worker serves it.
async fn split(http: &reqwest::Client, owner: &NodeProc, model: &str) -> Result<()> {
    let r = http
        .post(format!("{}/api/models/split", owner.base()))
        .json(&json!({"model": model}))
        .send()
        .await?;
    if r.status().as_u16() != 202 {
        bail!("splitting: {} {}", r.status(), r.text().await?);
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(300) {
        let all: Value = http
            .get(format!("{}/api/models/split", owner.base()))
            .send()
            .await?
            .json()
            .await?;
        let state = all["splits"][0]["state"].as_str().unwrap_or_default();
        match state {
            "ready" => return Ok(()),
            "failed" => bail!("the split failed: {all}"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    bail!("the split was not ready in 300 s")
}

pub(crate) async fn figures(
    http: &reqwest::Client,
    model: &Path,
    bin: &Path,
    tokens: usize,
    pairs: usize,
) -> Result<Vec<Figure>> {
    eprintln!("cluster: a model split across two nodes");
    let one = [s("--threads"), s("1"), s("--parallel"), s("1")];
    let whole = NodeProc::launch(bin, Some(model), &one, Some(0))?;
    let mut sharing = one.to_vec();
    sharing.extend([s("--share-memory"), s("1024")]);
    let half = NodeProc::launch(bin, None, &sharing, Some(1))?;
    let mut owning = one.to_vec();
    // Equal offers: half the layers each.
    owning.extend([s("--memory-limit"), s("1024")]);
    owning.extend([s("--peer"), cluster_addr(http, &half).await?]);
    let owner = NodeProc::launch(bin, Some(model), &owning, Some(0))?;
    let id = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .context("the model's name")?;
    split(http, &owner, &id).await?;
    client::sse_chat(http, &owner.base(), PROMPT, 4).await?;
    let (mut rates, mut ratios, mut ttft, mut ttft_whole, mut per_token) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs {
        let prompt = format!("{i}. {PROMPT}");
        let w = client::sse_chat(http, &whole.base(), &prompt, tokens).await?;
        let before = cluster_bytes(http, &half.base()).await?;
        let t = client::sse_chat(http, &owner.base(), &prompt, tokens).await?;
        let crossed = cluster_bytes(http, &half.base()).await? - before;
        let (rate_w, ttft_w) = crate::client::rate_and_ttft(&w)?;
        let (rate_s, ttft_s) = crate::client::rate_and_ttft(&t)?;
        rates.push(rate_s);
        ratios.push(rate_s / rate_w);
        ttft.push(ttft_s);
        ttft_whole.push(ttft_w);
        per_token.push(crossed as f64 / t.tokens.len().max(1) as f64);
    }
    Ok(vec![
        Figure::new(
            "split: one stream, half the layers on a peer, decode",
            "tok/s",
            rates,
        )
        .against("the same model whole on one node", ratios, None),
        Figure::new("split: time to first token", "ms", ttft),
        Figure::new(
            "split: the whole model's time to first token",
            "ms",
            ttft_whole,
        ),
        Figure::new(
            "split: bytes between the two nodes per token (prompt included)",
            "B",
            per_token,
        ),
    ])
}
