//! Speculation's figures: one stream's decode speed on a code edit (an answer that copies much
//! of its prompt) and on free chat, with the node's guesses off (`none`), as it decides
//! (`auto`) and always (`ngram`), and with the model as its own draft model (`auto`,
//! `draft`), against llama-server without and with its `ngram-mod` speculation and draft
//! model. Speeds are taken from the stream: tokens after the first over the time since
//! the first.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use crate::llama_server::{llama_server_bin, LlamaServer};
use crate::node::NodeProc;
use crate::report::{median, Figure};

/// The code edit: a function to give back with one name changed.
const CODE: &str = "fn parse_header(line: &str) -> Option<(String, String)> {
    let mut parts = line.splitn(2, ':');
    let name = parts.next()?.trim().to_ascii_lowercase();
    let value = parts.next()?.trim().to_string();
    if name.is_empty() || name.contains(' ') {
        return None;
    }
    Some((name, value))
}

fn parse_headers(text: &str) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if let Some(header) = parse_header(line) {
            headers.push(header);
        }
    }
    headers
}
";

/// Names that make each run's request new, so that no server answers from a memory of the
/// same request (llama-server's `ngram-mod` keeps n-grams across requests).
const NAMES: [&str; 8] = [
    "read_header",
    "split_header",
    "header_of",
    "take_header",
    "decode_header",
    "header_pair",
    "scan_header",
    "one_header",
];

fn code_edit(run: usize) -> String {
    let name = NAMES[run % NAMES.len()];
    format!(
        "Here is some Rust code:\n\n```rust\n{CODE}```\n\nRename the function parse_header to \
         {name} everywhere and write out the whole code again.\n"
    )
}

fn free_chat(run: usize) -> String {
    const WHO: [&str; 8] = [
        "a lighthouse keeper",
        "a baker",
        "a ferry pilot",
        "a beekeeper",
        "a clockmaker",
        "a night nurse",
        "a mapmaker",
        "a glassblower",
    ];
    format!(
        "Tell me a short story about {} who finds a message in a bottle.",
        WHO[run % WHO.len()]
    )
}

/// One streamed chat answer at temperature 0: decode tokens/s after the first token.
async fn decode_speed(
    http: &reqwest::Client,
    base: &str,
    prompt: &str,
    tokens: usize,
    spec: Option<&str>,
) -> Result<f64> {
    let mut body = json!({"messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true}});
    if let Some(s) = spec {
        body["speculative"] = json!(s);
    }
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    let mut first: Option<Instant> = None;
    let mut completion = 0u64;
    crate::client::each_sse_object(r, |v| {
        let text = v["choices"][0]["delta"]["content"].as_str().unwrap_or("");
        if !text.is_empty() && first.is_none() {
            first = Some(Instant::now());
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            completion = n;
        }
    })
    .await?;
    let first = first.context("no token came")?;
    let took = first.elapsed().as_secs_f64();
    anyhow::ensure!(completion > 8, "only {completion} tokens came");
    Ok((completion - 1) as f64 / took.max(1e-6))
}

/// The median decode speed of `runs` answers to `prompt(run)` (after one that warms the
/// server up), each request a new one.
async fn speed(
    http: &reqwest::Client,
    base: &str,
    prompt: Prompt,
    tokens: usize,
    spec: Option<&str>,
    runs: usize,
) -> Result<f64> {
    decode_speed(http, base, &prompt(NAMES.len() - 1), tokens, spec).await?;
    let mut v = Vec::with_capacity(runs);
    for run in 0..runs {
        v.push(decode_speed(http, base, &prompt(run), tokens, spec).await?);
    }
    Ok(median(&v))
}

/// A request's prompt for each run.
type Prompt = fn(usize) -> String;

const WORKLOADS: [(Prompt, &str); 2] = [(code_edit, "code edit"), (free_chat, "free chat")];

/// How each answer is measured.
struct Measure {
    http: reqwest::Client,
    tokens: usize,
    runs: usize,
}

/// llama-server started with `extra`: one stream's speed on each workload.
async fn peer_rows(
    m: &Measure,
    server: (&Path, &Path, i32),
    extra: &[&str],
    label: &str,
) -> Result<Vec<Figure>> {
    let (bin, model, threads) = server;
    let (http, tokens, runs) = (&m.http, m.tokens, m.runs);
    let server = LlamaServer::start(bin, model, threads, extra).await?;
    let mut rows = Vec::new();
    for (prompt, what) in WORKLOADS {
        let s = speed(http, &server.base, prompt, tokens, None, runs)
            .await
            .with_context(|| format!("{what}, {label}"))?;
        eprintln!("{what}, {label}: {s:.1} tokens/s");
        rows.push(Figure::new(
            format!("{what}, one stream, {label}"),
            "tokens/s",
            vec![s],
        ));
    }
    Ok(rows)
}

/// Code edit and free chat, node and llama-server, guesses off and on.
pub(crate) async fn figures(
    model: &Path,
    node_bin: &Path,
    threads: i32,
    quick: bool,
) -> Result<Vec<Figure>> {
    // A connection per request: llama-server closes a kept-alive one now and then, and a
    // request sent on it as it closes fails.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .pool_max_idle_per_host(0)
        .build()?;
    let (tokens, runs) = if quick { (48, 1) } else { (256, 3) };
    let node = NodeProc::start(node_bin, model, &["--threads".into(), threads.to_string()])?;
    let base = format!("http://{}", node.addr);
    let mut node_speed = Vec::new();
    for (prompt, what) in WORKLOADS {
        let mut by = Vec::new();
        for spec in ["none", "auto", "ngram"] {
            let s = speed(&http, &base, prompt, tokens, Some(spec), runs)
                .await
                .with_context(|| format!("{what}, node, --spec {spec}"))?;
            eprintln!("{what}, node --spec {spec}: {s:.1} tokens/s");
            by.push(s);
        }
        node_speed.push((what, by));
    }
    drop(node);
    // The model drafting for itself: a draft as slow as the model never pays, so `auto` must
    // leave it off, and `draft` shows what it costs to draft anyway.
    let drafted = NodeProc::start(
        node_bin,
        model,
        &[
            "--threads".into(),
            threads.to_string(),
            "--draft-model".into(),
            model.display().to_string(),
        ],
    )?;
    let draft_base = format!("http://{}", drafted.addr);
    // (workload, spec) and tokens/s; forced drafting only on the code edit.
    let mut with_draft = Vec::new();
    for (prompt, what) in WORKLOADS {
        for spec in ["none", "auto", "draft"] {
            if spec == "draft" && what != "code edit" {
                continue;
            }
            let s = speed(&http, &draft_base, prompt, tokens, Some(spec), runs)
                .await
                .with_context(|| format!("{what}, node with a draft model, --spec {spec}"))?;
            eprintln!("{what}, node with a draft model, --spec {spec}: {s:.1} tokens/s");
            with_draft.push(((what, spec), s));
        }
    }
    drop(drafted);
    let drafted = |what: &str, spec: &str| {
        with_draft
            .iter()
            .find(|((w, s), _)| *w == what && *s == spec)
            .map_or(0.0, |(_, v)| *v)
    };
    let mut figures = Vec::new();
    for (what, by) in &node_speed {
        figures.push(Figure::new(
            format!("{what}, one stream, node without guesses"),
            "tokens/s",
            vec![by[0]],
        ));
        let auto = Figure::new(
            format!("{what}: node --spec auto / none"),
            "ratio",
            vec![by[1] / by[0]],
        );
        figures.push(if *what == "code edit" {
            auto.at_least(1.0)
        } else {
            auto.at_least(0.98)
        });
        figures.push(Figure::new(
            format!("{what}: node --spec ngram / none"),
            "ratio",
            vec![by[2] / by[0]],
        ));
    }
    for (_, what) in WORKLOADS {
        let auto = Figure::new(
            format!("{what}: node with itself as draft model, --spec auto / none"),
            "ratio",
            vec![drafted(what, "auto") / drafted(what, "none")],
        );
        figures.push(if what == "code edit" {
            auto.at_least(1.0)
        } else {
            auto.at_least(0.98)
        });
    }
    figures.push(Figure::new(
        "code edit: node with itself as draft model, --spec draft / none",
        "ratio",
        vec![drafted("code edit", "draft") / drafted("code edit", "none")],
    ));
    let Some(bin) = llama_server_bin(!quick) else {
        eprintln!(
            "llama-server could not be built (scripts/llama-server.sh): its rows are left out"
        );
        return Ok(figures);
    };
    let model_arg = model.display().to_string();
    for (extra, label) in [
        (&[][..], "llama-server"),
        (&["--spec-type", "ngram-mod"][..], "llama-server ngram-mod"),
        (
            &["--model-draft", model_arg.as_str()][..],
            "llama-server with itself as draft model",
        ),
    ] {
        // A peer that fails is said, and its rows left out: the node's stand.
        let m = Measure {
            http: http.clone(),
            tokens,
            runs,
        };
        if let Err(e) = peer_rows(&m, (&bin, model, threads), extra, label)
            .await
            .map(|rows| figures.extend(rows))
        {
            eprintln!("{label} failed, its rows are left out: {e:#}");
        }
    }
    Ok(figures)
}
