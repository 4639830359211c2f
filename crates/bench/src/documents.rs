//! Documents in the chat: a 300-page PDF manual (written by reportlab through
//! `tests/fixtures/make_documents.py`) attached to a conversation of the real default model,
//! read in the node's child process and indexed (words only); then a turn asking about one of
//! its pages, whose retrieval the node times and keeps with the answer's sources; then, with
//! the model named as the documents' embedding model after the manual is attached, the first
//! turn, which embeds the passages it needs (256 of the 300; a smoke run's 32 of a short
//! document) before it retrieves.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::client::{json_ok, new_conversation, repo_root};
use crate::node::NodeProc;
use crate::report::Figure;

/// The sources the first answer of a turn asking `question` was given.
async fn sources_of(
    http: &reqwest::Client,
    base: &str,
    conv: &str,
    question: &str,
) -> Result<Value> {
    let r = http
        .post(format!("{base}/api/conversations/{conv}/chat"))
        .json(&json!({ "content": question }))
        .send()
        .await?
        .error_for_status()?;
    let mut sources = Value::Null;
    crate::client::each_sse_object(r, |v| {
        if v["type"] == "start" {
            sources = v["message"]["sources"].clone();
        }
    })
    .await?;
    Ok(sources)
}

/// Attach `file` (as `name`) to the conversation: the document kept.
async fn attach(
    http: &reqwest::Client,
    base: &str,
    conv: &str,
    name: &str,
    file: &[u8],
) -> Result<Value> {
    Ok(json_ok(
        http.post(format!("{base}/api/conversations/{conv}/documents"))
            .query(&[("name", name)])
            .body(file.to_vec()),
    )
    .await?["document"]
        .clone())
}

/// Passages embedded per second by the first turn after the model is named as the documents'
/// embedding model (the document attached before, so none were embedded in the background).
async fn embedding_turn(
    http: &reqwest::Client,
    base: &str,
    name: &str,
    file: &[u8],
) -> Result<f64> {
    /// The passages a turn embeds at most (the node's `vectors::PER_TURN`).
    const PER_TURN: u64 = 256;
    let conv = new_conversation(http, base, json!({"max_tokens": 1})).await?;
    let added = attach(http, base, &conv, name, file).await?;
    let passages = added["passages"]
        .as_u64()
        .context("no passage count")?
        .min(PER_TURN);
    let model = json_ok(http.get(format!("{base}/api/status"))).await?["model"]["id"]
        .as_str()
        .context("no model id")?
        .to_owned();
    json_ok(
        http.patch(format!("{base}/api/node"))
            .json(&json!({"documents_embedding_model": model})),
    )
    .await?;
    let sources = sources_of(http, base, &conv, "What is the code word of page 40?").await?;
    json_ok(
        http.patch(format!("{base}/api/node"))
            .json(&json!({"documents_embedding_model": null})),
    )
    .await?;
    if sources["embedder"].as_str() != Some(model.as_str()) {
        bail!("the turn did not use the embedding model: {sources}");
    }
    let ms = sources["ms"].as_f64().context("no retrieval time")?;
    Ok(passages as f64 / (ms / 1000.0))
}

/// The rows (`make bench` runs setup, which makes the Python venv the fixtures need).
pub(crate) async fn figures(
    model: &Path,
    node_bin: &Path,
    threads: i32,
    quick: bool,
) -> Result<Vec<Figure>> {
    let python = repo_root().join(".venv/bin/python");
    if !python.exists() {
        bail!("the Python venv is not set up: run scripts/setup.sh (make bench runs it)");
    }
    let dir = tempfile::tempdir()?;
    let status = Command::new(python)
        .arg(repo_root().join("tests/fixtures/make_documents.py"))
        .arg("--out")
        .arg(dir.path())
        .status()
        .context("running make_documents.py")?;
    if !status.success() {
        bail!("make_documents.py failed");
    }
    let manual = std::fs::read(dir.path().join("manual.pdf"))?;
    // A 2,048-token context, as a small machine's chat has: neither document goes whole.
    let node = NodeProc::start(
        node_bin,
        model,
        &[
            "--threads".into(),
            threads.to_string(),
            "--ctx".into(),
            "2048".into(),
        ],
    )?;
    let base = node.base();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()?;
    let (mut read_ms, mut retrieval_ms) = (Vec::new(), Vec::new());
    for _ in 0..if quick { 1 } else { 5 } {
        let conv = new_conversation(&http, &base, json!({"max_tokens": 1})).await?;
        let sent = Instant::now();
        let added = attach(&http, &base, &conv, "manual.pdf", &manual).await?;
        read_ms.push(sent.elapsed().as_secs_f64() * 1000.0);
        if added["pages"] != 300 {
            bail!("the manual was read as {added}");
        }
        let sources = sources_of(&http, &base, &conv, "What is the code word of page 40?").await?;
        if sources["path"] != "passages" {
            bail!("the turn was not given passages: {sources}");
        }
        retrieval_ms.push(sources["ms"].as_f64().context("no retrieval time")?);
    }
    // A smoke run embeds a shorter document's 32 passages (too long to go whole), not 256 of
    // the manual's.
    let words = "the kettle sits by the stove and boils water for tea ".repeat(12);
    let short: String = (1..=32)
        .map(|n| format!("# Part {n}\n\nPart {n} of the notes: {words}\n\n"))
        .collect();
    let (name, file) = if quick {
        ("notes.md", short.into_bytes())
    } else {
        ("manual.pdf", manual.clone())
    };
    let embedded = embedding_turn(&http, &base, name, &file).await?;
    Ok(vec![
        Figure::new(
            "documents: passages embedded per second in a turn (the chat's model)",
            "passages/s",
            vec![embedded],
        ),
        Figure::new(
            "documents: read and index a 300-page PDF (words)",
            "ms",
            read_ms,
        ),
        Figure::new("documents: a turn's retrieval over it", "ms", retrieval_ms),
    ])
}
