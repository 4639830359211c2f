//! The agent's most common request: a long prompt sent again after other long prompts took
//! the slots. The node (its prompt cache in host memory) against llama-server built from the
//! same era of llama.cpp (`scripts/llama-server.sh`, its `--cache-ram`), each as a user starts
//! it on the model: the time to answer the prompt cold, then again after four others.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value};

use crate::llama_server::{llama_server_bin, LlamaServer};
use crate::node::NodeProc;
use crate::report::Figure;

/// Words in each long prompt: about 2,500 tokens of the default model (a tenth of that in a
/// quick run).
const PROMPT_WORDS: usize = 860;

/// Prompts sent between the first and the repeat: as many as the slots, so that each slot is
/// taken by another prompt (and the pool holds none of the first one's idle cache).
const OTHERS: usize = 4;

/// About `words` tokens of text that does not repeat, different for each `seed`.
fn long_text(seed: usize, words: usize) -> String {
    const W: [&str; 12] = [
        "river", "stone", "lamp", "orchard", "copper", "meadow", "harbor", "violet", "engine",
        "canyon", "thread", "bakery",
    ];
    (0..words)
        .map(|i| format!("{}{}", W[(i * seed + seed) % W.len()], i % 89))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One chat answer of one token: its wall time and the prompt tokens it reported.
async fn ask(http: &reqwest::Client, base: &str, text: &str) -> Result<(Duration, u64)> {
    let body = json!({"messages": [{"role": "user", "content": text}], "max_tokens": 1,
        "temperature": 0});
    let sent = Instant::now();
    let v: Value = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let took = sent.elapsed();
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    Ok((took, prompt))
}

/// Cold, then again after [`OTHERS`] other prompts: the two times and the prompt's tokens.
async fn cold_and_resent(
    http: &reqwest::Client,
    base: &str,
    words: usize,
) -> Result<(f64, f64, u64)> {
    let first = long_text(5, words);
    let (cold, tokens) = ask(http, base, &first).await?;
    for k in 0..OTHERS {
        ask(http, base, &long_text(7 + k, words)).await?;
    }
    let (resent, _) = ask(http, base, &first).await?;
    Ok((cold.as_secs_f64(), resent.as_secs_f64(), tokens))
}

/// The resent-prefix figures: each server's resent / cold time, and the node's resent time
/// against llama-server's (when it could be built).
pub(crate) async fn figures(
    model: &Path,
    node_bin: &Path,
    threads: i32,
    quick: bool,
) -> Result<Vec<Figure>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let words = if quick {
        PROMPT_WORDS / 10
    } else {
        PROMPT_WORDS
    };
    let node = NodeProc::start(node_bin, model, &["--threads".into(), threads.to_string()])?;
    let (cold, resent, tokens) =
        cold_and_resent(&http, &format!("http://{}", node.addr), words).await?;
    drop(node);
    eprintln!("a {tokens}-token prompt resent after {OTHERS} others took the slots");
    let name = "a long prompt resent after its slot was reused, node";
    let mut figures = vec![
        Figure::new(format!("{name}: cold"), "s", vec![cold]),
        Figure::new(
            format!("{name}: resent / cold"),
            "ratio",
            vec![resent / cold],
        )
        .at_most(0.25),
    ];
    let Some(bin) = llama_server_bin(!quick) else {
        eprintln!(
            "llama-server could not be built (scripts/llama-server.sh): its rows are left out"
        );
        return Ok(figures);
    };
    let server = LlamaServer::start(&bin, model, threads, &[]).await?;
    let (ls_cold, ls_resent, _) = cold_and_resent(&http, &server.base, words).await?;
    drop(server);
    figures.push(Figure::new(
        "the same, llama-server: cold",
        "s",
        vec![ls_cold],
    ));
    figures.push(Figure::new(
        "the same, llama-server --cache-ram: resent / cold",
        "ratio",
        vec![ls_resent / ls_cold],
    ));
    figures.push(
        Figure::new(
            "the same, resent: node / llama-server",
            "ratio",
            vec![resent / ls_resent],
        )
        .at_most(1.0),
    );
    Ok(figures)
}
