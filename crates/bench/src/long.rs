//! Long prompts on the long-context test model (Gemma 3 270M, 32k context,
//! `scripts/long-model.sh`): a 6k and a 30k-token prompt's prefill (the time to the first token)
//! and the decode that follows, on the node with an f16 and a q8_0 KV cache and on llama-server
//! built from the same era of llama.cpp (f16, and q8_0: ggml's flash attention unpatched), each
//! started with its defaults but the thread count and the cache type. Without speculation: the
//! text repeats, and the node's n-gram guesses would measure how well they guess it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use crate::llama_server::{llama_server_bin, LlamaServer};
use crate::node::NodeProc;
use crate::report::Figure;

/// Tokens decoded after each prompt.
const DECODE: usize = 64;

/// About `words` × 2.9 tokens of Gemma's of text that does not repeat.
fn long_text(words: usize) -> String {
    const W: [&str; 12] = [
        "river", "stone", "lamp", "orchard", "copper", "meadow", "harbor", "violet", "engine",
        "canyon", "thread", "bakery",
    ];
    (0..words)
        .map(|i| format!("{}{}", W[(i * 5 + 5) % W.len()], i % 89))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The model `scripts/long-model.sh` fetched, if it did.
fn long_model() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/long-model.sh");
    let out = Command::new(script).arg("--path").output().ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    path.is_file().then_some(path)
}

/// A streamed completion of `prompt`: the prompt's tokens, seconds to the first text, and the
/// decode speed after it.
async fn prefill_and_decode(
    http: &reqwest::Client,
    base: &str,
    prompt: &str,
) -> Result<(u64, f64, f64)> {
    // `speculative` is the node's per-request switch; llama-server has none by default.
    let body = json!({"prompt": prompt, "max_tokens": DECODE, "temperature": 0,
        "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true},
        "speculative": "none"});
    let sent = Instant::now();
    let r = http
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    let (mut first, mut prompt_tokens, mut completion) = (None, 0, 0);
    crate::client::each_sse_object(r, |v| {
        if first.is_none() && !v["choices"][0]["text"].as_str().unwrap_or("").is_empty() {
            first = Some(Instant::now());
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            completion = n;
            prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        }
    })
    .await?;
    let first = first.context("no text came")?;
    anyhow::ensure!(completion > 8, "only {completion} tokens came");
    let decode = (completion - 1) as f64 / first.elapsed().as_secs_f64().max(1e-6);
    Ok((prompt_tokens, (first - sent).as_secs_f64(), decode))
}

/// Each prompt length's prefill seconds and decode tokens/s on one server.
async fn measure(http: &reqwest::Client, base: &str, lengths: &[usize]) -> Result<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    for &words in lengths {
        let (tokens, prefill, decode) = prefill_and_decode(http, base, &long_text(words)).await?;
        eprintln!("{tokens}-token prompt: prefill {prefill:.1} s, decode {decode:.1} tokens/s");
        out.push((prefill, decode));
    }
    Ok(out)
}

pub(crate) async fn figures(node_bin: &Path, threads: i32, quick: bool) -> Result<Vec<Figure>> {
    let Some(model) = long_model() else {
        eprintln!("the long-context model is not fetched (scripts/long-model.sh): no long rows");
        return Ok(Vec::new());
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1200))
        .pool_max_idle_per_host(0)
        .build()?;
    // About 6k and 30k tokens; a quick run only a tenth of the first.
    let (lengths, names): (&[usize], &[&str]) = if quick {
        (&[210], &["600-token"])
    } else {
        (&[2080, 10300], &["6k-token", "30k-token"])
    };
    let mut figures = Vec::new();
    let mut node_f16 = Vec::new();
    for kv in ["f16", "q8_0"] {
        let args = [
            "--threads".into(),
            threads.to_string(),
            "--kv-type".into(),
            kv.into(),
        ];
        let node = NodeProc::start(node_bin, &model, &args)?;
        let m = measure(&http, &node.base(), lengths).await?;
        drop(node);
        for (name, (prefill, decode)) in names.iter().zip(&m) {
            figures.push(Figure::new(
                format!("Gemma 3 270M, {name} prompt, node {kv}: prefill"),
                "s",
                vec![*prefill],
            ));
            figures.push(Figure::new(
                format!("Gemma 3 270M, {name} prompt, node {kv}: decode"),
                "tokens/s",
                vec![*decode],
            ));
        }
        if kv == "f16" {
            node_f16 = m;
        } else {
            for ((name, q8), f16) in names.iter().zip(&m).zip(&node_f16) {
                figures.push(
                    Figure::new(
                        format!("Gemma 3 270M, {name} prompt: decode q8_0 / f16"),
                        "ratio",
                        vec![q8.1 / f16.1],
                    )
                    .at_least(0.95),
                );
            }
        }
    }
    let Some(bin) = llama_server_bin(!quick) else {
        eprintln!("llama-server is not built: its long rows are left out");
        return Ok(figures);
    };
    let server = LlamaServer::start(&bin, &model, threads, &[]).await?;
    let theirs = measure(&http, &server.base, lengths).await?;
    drop(server);
    let q8_0 = ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"];
    let server = LlamaServer::start(&bin, &model, threads, &q8_0).await?;
    let theirs_q8 = measure(&http, &server.base, lengths).await?;
    drop(server);
    for (name, t) in names.iter().zip(&theirs_q8) {
        figures.push(Figure::new(
            format!("Gemma 3 270M, {name} prompt, llama-server q8_0: prefill"),
            "s",
            vec![t.0],
        ));
        figures.push(Figure::new(
            format!("Gemma 3 270M, {name} prompt, llama-server q8_0: decode"),
            "tokens/s",
            vec![t.1],
        ));
    }
    for ((name, t), n) in names.iter().zip(&theirs).zip(&node_f16) {
        figures.push(Figure::new(
            format!("Gemma 3 270M, {name} prompt, llama-server: prefill"),
            "s",
            vec![t.0],
        ));
        figures.push(
            Figure::new(
                format!("Gemma 3 270M, {name} prompt: prefill node / llama-server"),
                "ratio",
                vec![n.0 / t.0],
            )
            .at_most(1.05),
        );
        figures.push(
            Figure::new(
                format!("Gemma 3 270M, {name} prompt: decode node / llama-server"),
                "ratio",
                vec![n.1 / t.1],
            )
            .at_least(0.95),
        );
    }
    Ok(figures)
}
