//! Time to first token, node against llama-server built from the same era of llama.cpp, each
//! with four slots as a user starts it: 1, 4 and 8 streams asking at once, each a short new
//! question (its opening shared with the others, as a chat template's is), the first token's
//! time read from the stream.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use crate::llama_server::{llama_server_bin, LlamaServer};
use crate::node::NodeProc;
use crate::report::{median, Figure};

const STREAMS: [usize; 3] = [1, 4, 8];

/// Seconds until the first piece of text of a streamed answer to `prompt`.
pub(crate) async fn first_token(http: &reqwest::Client, base: &str, prompt: &str) -> Result<f64> {
    let body = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 4,
        "temperature": 0, "stream": true});
    let sent = Instant::now();
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    let mut first = None;
    crate::client::each_sse_object(r, |v| {
        let text = v["choices"][0]["delta"]["content"].as_str().unwrap_or("");
        if !text.is_empty() && first.is_none() {
            first = Some(sent.elapsed().as_secs_f64());
        }
    })
    .await?;
    first.context("no text came")
}

/// The median first-token time of `streams` clients asking `each` questions one after another.
async fn at(http: &reqwest::Client, base: &str, streams: usize, each: usize) -> Result<f64> {
    let ask = |s: usize| async move {
        let mut v = Vec::with_capacity(each);
        for k in 0..each {
            let q = format!("Say hello to visitor number {} in one word.", s * 100 + k);
            v.push(first_token(http, base, &q).await?);
        }
        anyhow::Ok(v)
    };
    // One to warm the server up.
    first_token(http, base, "Say hello in one word.").await?;
    let all = futures_util::future::try_join_all((0..streams).map(ask)).await?;
    Ok(median(&all.concat()))
}

/// The node's first-token time at 1, 4 and 8 streams, and against llama-server's.
pub(crate) async fn figures(
    model: &Path,
    node_bin: &Path,
    threads: i32,
    quick: bool,
) -> Result<Vec<Figure>> {
    // A connection per request: llama-server closes a kept-alive one now and then.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .pool_max_idle_per_host(0)
        .build()?;
    let each = if quick { 3 } else { 12 };
    let node = NodeProc::start(node_bin, model, &["--threads".into(), threads.to_string()])?;
    let mut mine = Vec::new();
    for n in STREAMS {
        mine.push(at(&http, &node.base(), n, each).await?);
    }
    drop(node);
    let mut figures: Vec<Figure> = STREAMS
        .iter()
        .zip(&mine)
        .map(|(n, s)| {
            Figure::new(
                format!("first token at {n} streams, node"),
                "ms",
                vec![s * 1000.0],
            )
        })
        .collect();
    let Some(bin) = llama_server_bin(!quick) else {
        eprintln!("llama-server is not built: its first-token rows are left out");
        return Ok(figures);
    };
    let server = LlamaServer::start(&bin, model, threads, &[]).await?;
    for (n, node_s) in STREAMS.iter().zip(&mine) {
        let s = at(&http, &server.base, *n, each)
            .await
            .with_context(|| format!("llama-server at {n} streams"))?;
        figures.push(Figure::new(
            format!("first token at {n} streams, llama-server"),
            "ms",
            vec![s * 1000.0],
        ));
        figures.push(
            Figure::new(
                format!("first token at {n} streams: node / llama-server"),
                "ratio",
                vec![node_s / s],
            )
            .at_most(1.0),
        );
    }
    Ok(figures)
}
