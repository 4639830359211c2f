//! `hearth-bench`: Hearth's speed as ratios against a llama.cpp floor measured in the same
//! run. The floor runs in this process through llama-cpp-2; the node runs as a real
//! `hearth-node serve` process on loopback and is measured by clients in this process.
//! Prints one table and writes `bench/results.json`, `bench/throughput.svg` and (when asked)
//! the table in `docs/PERFORMANCE.md`. `make bench` runs it in release mode.

mod client;
mod cluster;
mod cpu;
mod documents;
mod doors;
mod floor;
mod llama_server;
mod long;
mod models;
mod node;
mod ollama;
mod prefix;
mod report;
mod sharing;
mod spec;
mod split;
mod tealenet;
mod tool_loop;
mod transfer;
mod ttft;
mod window;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use hearth_engine::template::ChatTemplate;
use hearth_protocol::ChatMessage;
use serde_json::json;

use client::{Trace, PROMPT};
use cpu::CpuSampler;
use floor::{Floor, Rate};
use node::NodeProc;
use report::{percentile, Figure};
use window::Window;

const CONCURRENCY: [usize; 4] = [1, 2, 4, 8];

#[derive(Debug, Parser)]
#[command(about = "Hearth benchmarks: ratios against the llama.cpp floor, measured in one run")]
struct Args {
    /// GGUF model [default: the default model in ~/.local/share/hearth/models].
    #[arg(long)]
    model: Option<PathBuf>,
    /// The hearth-node binary [default: next to this one].
    #[arg(long)]
    node_bin: Option<PathBuf>,
    #[arg(long, default_value_t = 2)]
    threads: i32,
    /// Node runs per one-stream decode figure, each between two floor runs (the median of the
    /// per-pair ratios and their spread are reported); the figures of several streams take
    /// fewer (see `Kind::pairs`).
    #[arg(long, default_value_t = 24)]
    pairs: usize,
    /// Rounds over every decode figure, each taking its share of the pairs.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Tokens generated per stream in each decode measurement: short, so that a node run and
    /// the floor runs around it see the machine in one state.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Requests for the time-to-first-token percentiles.
    #[arg(long, default_value_t = 24)]
    ttft_requests: usize,
    /// Seconds per door-capacity measurement.
    #[arg(long, default_value_t = 0.5)]
    door_seconds: f64,
    #[arg(long, default_value = "bench/results.json")]
    out: PathBuf,
    #[arg(long, default_value = "bench/throughput.svg")]
    svg: PathBuf,
    /// Rewrite the table between the bench markers of this file (docs/PERFORMANCE.md).
    #[arg(long)]
    update_docs: Option<PathBuf>,
    /// A smoke run: a few tokens, two pairs in two rounds, short door runs.
    #[arg(long)]
    quick: bool,
    /// Measure one part only (to look again at its figures); the docs table needs both.
    #[arg(long, value_enum, conflicts_with = "update_docs")]
    only: Option<Part>,
}

/// The two halves of a run, measured with different engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Part {
    /// The llama.cpp floor and the node on the real model.
    Decode,
    /// The doors with the scripted engine.
    Doors,
    /// The LAN cluster: several node processes on loopback.
    Cluster,
    /// Models loaded on demand: the time added to a first token, memory with two loaded.
    Models,
    /// A long prompt resent after others took the slots: the prompt cache, against
    /// llama-server's.
    Prefix,
    /// Speculation on a code edit and free chat, against llama-server's `ngram-mod`.
    Spec,
    /// Time to first token at 1, 4 and 8 streams, against llama-server.
    Ttft,
    /// 6k and 30k-token prompts on Gemma 3 270M: f16, q8_0 and llama-server.
    Long,
    /// The chat's MCP tool loop: 5 steps against server-everything's `echo`.
    Tools,
    /// Documents in the chat: a 300-page PDF read and indexed, a turn's retrieval.
    Documents,
}

fn default_model() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/share")
        });
    data.join("hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn main() -> Result<()> {
    let mut args = Args::parse();
    if args.quick {
        args.pairs = 2;
        args.rounds = 2;
        args.tokens = 8;
        args.ttft_requests = 3;
        args.door_seconds = 0.3;
    }
    let model = args.model.clone().unwrap_or_else(default_model);
    if !model.is_file() {
        bail!(
            "model {} not found (make bench runs the setup that fetches it)",
            model.display()
        );
    }
    let node_bin = match &args.node_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("exe dir")?
            .join("hearth-node"),
    };
    if !node_bin.is_file() {
        bail!("{} not found: build hearth-node first", node_bin.display());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = Instant::now();
    let figures = rt.block_on(run(&args, &model, &node_bin))?;
    let table = report::table(&figures);
    println!("\n{table}");
    let machine = machine();
    println!(
        "{machine}; {} of {} tokens per stream, {:.0} s",
        pairs_text(&args),
        args.tokens,
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(
        &args.out,
        serde_json::to_string_pretty(&json!({
            "machine": machine,
            "threads": args.threads,
            "pairs": args.pairs,
            "tokens": args.tokens,
            "only": args.only.map(|p| format!("{p:?}").to_lowercase()),
            "figures": figures,
        }))?,
    )?;
    if matches!(
        args.only,
        Some(Part::Doors | Part::Cluster | Part::Models | Part::Prefix)
    ) {
        println!("wrote {}", args.out.display());
    } else {
        let series = |prefix: &str| -> Vec<(usize, f64)> {
            CONCURRENCY
                .iter()
                .filter_map(|c| {
                    figures
                        .iter()
                        .find(|f| f.name == format!("{prefix} {c}"))
                        .map(|f| (*c, f.median))
                })
                .collect()
        };
        let svg = report::throughput_svg(
            &series("floor aggregate decode x"),
            &series("node aggregate decode x"),
        );
        if let Some(dir) = args.svg.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&args.svg, svg)?;
        println!("wrote {} and {}", args.out.display(), args.svg.display());
    }
    if let Some(doc) = &args.update_docs {
        let block = format!(
            "Measured on {machine}, `--threads {}`, {} of {} tokens per stream.\n\n{table}",
            args.threads,
            pairs_text(&args),
            args.tokens
        );
        report::update_doc(doc, &block)?;
        println!("updated {}", doc.display());
    }
    Ok(())
}

/// "24 pairs (16 for 4 and 8 streams, 4 for 2) in 4 rounds".
fn pairs_text(args: &Args) -> String {
    let total = |k: Kind| k.pairs_per_round(args.pairs, args.rounds) * args.rounds;
    format!(
        "{} pairs ({} for 4 and 8 streams, {} for 2) in {} rounds",
        total(Kind::Sse),
        total(Kind::Streams(4)),
        total(Kind::Streams(2)),
        args.rounds
    )
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!("{cpu}, {cores} cores, {mem_gib:.0} GiB")
}

/// What the node is asked to do in one measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One stream through the OpenAI door (SSE).
    Sse,
    /// One stream through `/generate`.
    Generate,
    /// This many concurrent SSE streams.
    Streams(usize),
}

impl Kind {
    fn concurrency(self) -> usize {
        match self {
            Kind::Sse | Kind::Generate => 1,
            Kind::Streams(c) => c,
        }
    }

    /// Pairs for this figure in each of `rounds` rounds, out of `pairs` for one stream in
    /// all. One-stream pairs are the cheapest and their target the tightest (3%), so they get
    /// all of them; 4 and 8 streams (5%, a pair two to four times as long) two thirds; 2
    /// streams, which has no target and only draws the chart, one pair per round. A pair's
    /// ratio varies by ~5% on this host: 12 pairs missed a target in about one run in five.
    fn pairs_per_round(self, pairs: usize, rounds: usize) -> usize {
        match self {
            Kind::Sse | Kind::Generate => pairs.div_ceil(rounds),
            Kind::Streams(c) if c >= 4 => (pairs * 2 / 3).div_ceil(rounds),
            Kind::Streams(_) => 1,
        }
        .max(1)
    }

    fn name(self) -> String {
        match self {
            Kind::Sse => "one SSE stream".into(),
            Kind::Generate => "one /generate stream".into(),
            Kind::Streams(c) => format!("{c} SSE streams"),
        }
    }
}

/// A node figure's runs, each with the floor runs right before and after it.
struct Series {
    kind: Kind,
    /// Every floor run (within a round, the run after one node run is the run before the next).
    floor: Vec<Rate>,
    /// (floor before, node, floor after).
    node: Vec<(Rate, Rate, Rate)>,
}

impl Series {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            floor: Vec::new(),
            node: Vec::new(),
        }
    }
}

/// One node run of `kind`, as the clients saw it.
async fn node_run(
    kind: Kind,
    http: &reqwest::Client,
    base: &str,
    addr: &str,
    tokens: usize,
) -> Result<Vec<Trace>> {
    Ok(match kind {
        Kind::Sse => vec![client::sse_chat(http, base, PROMPT, tokens).await?],
        Kind::Generate => vec![client::ws_generate(addr, PROMPT, tokens).await?],
        Kind::Streams(c) => {
            let tasks: Vec<_> = (0..c)
                .map(|_| {
                    let (http, base) = (http.clone(), base.to_owned());
                    tokio::spawn(
                        async move { client::sse_chat(&http, &base, PROMPT, tokens).await },
                    )
                })
                .collect();
            let mut traces = Vec::new();
            for t in tasks {
                traces.push(t.await??);
            }
            traces
        }
    })
}

/// "node decode, 1 stream (x)" -> "node decode per CPU-s, 1 stream (x)"; "... decode x 4" ->
/// "... decode per CPU-s x 4".
fn per_cpu(name: &str, per: &str) -> String {
    match name.find(", ").or_else(|| name.find(" x ")) {
        Some(i) if !per.is_empty() => format!("{}{per}{}", &name[..i], &name[i..]),
        _ => name.to_owned(),
    }
}

async fn run(args: &Args, model: &Path, node_bin: &Path) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    if args.only.is_none() || args.only == Some(Part::Decode) {
        figures.extend(node_figures(args, model, node_bin).await?);
        // The decode part's floor is gone (one llama.cpp backend per process at a time).
        let pairs = args.pairs.div_ceil(2);
        figures.extend(
            ollama::embed_figures(
                model,
                node_bin,
                args.threads,
                args.tokens,
                pairs,
                args.quick,
            )
            .await?,
        );
    }
    if args.only.is_none() || args.only == Some(Part::Doors) {
        figures.extend(doors::figures(args.door_seconds, model, node_bin).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Cluster) {
        figures.extend(cluster::figures(model, node_bin, args.tokens * 2, args.quick).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Models) {
        figures.extend(models::figures(model, node_bin, args.threads, args.quick).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Prefix) {
        figures.extend(prefix::figures(model, node_bin, args.threads, args.quick).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Spec) {
        figures.extend(spec::figures(model, node_bin, args.threads, args.quick).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Ttft) {
        figures.extend(ttft::figures(model, node_bin, args.threads, args.quick).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Long) {
        figures.extend(long::figures(node_bin, args.threads, args.quick).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Tools) {
        figures.extend(tool_loop::figures(model, node_bin, args.threads, args.quick).await?);
    }
    if args.only.is_none() || args.only == Some(Part::Documents) {
        figures.extend(documents::figures(model, node_bin, args.threads, args.quick).await?);
    }
    Ok(figures)
}

/// The node against the floor: decode pairs, time to first token, resident memory.
async fn node_figures(args: &Args, model: &Path, node_bin: &Path) -> Result<Vec<Figure>> {
    let threads = args.threads.to_string();
    let slots = *CONCURRENCY.iter().max().unwrap_or(&8);
    let ctx_per_slot: u32 = 512;
    let floor = Floor::new(model, slots as u32, ctx_per_slot, args.threads)?;
    let (src, bos, eos) = floor.template().context("the model has no chat template")?;
    let rendered =
        ChatTemplate::new(&src, &bos, &eos)?.render(&[ChatMessage::new("user", PROMPT)], true)?;
    let prompt = floor.tokenize(&rendered);
    let long_prompt = floor.tokenize(&"The quick brown fox jumps over the lazy dog. ".repeat(25));
    if prompt.len() + args.tokens > ctx_per_slot as usize {
        bail!(
            "--tokens {} does not fit the {ctx_per_slot}-token slots",
            args.tokens
        );
    }

    eprintln!(
        "starting hearth-node ({} slots, {ctx_per_slot} tokens each)",
        slots
    );
    let node = NodeProc::start(
        node_bin,
        model,
        &[
            "--parallel".into(),
            slots.to_string(),
            // The pool the slots share: as much as the floor's slots have together.
            "--ctx".into(),
            (slots as u32 * ctx_per_slot).to_string(),
            "--threads".into(),
            threads.clone(),
        ],
    )?;
    let rss_loaded = node.rss_bytes()? as f64;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(300))
        .build()?;
    let base = node.base();
    // Warm up both doors (first-use allocations, page faults in the model).
    client::sse_chat(&http, &base, PROMPT, 4).await?;
    client::ws_generate(&node.addr, PROMPT, 4).await?;

    // Every node figure is measured in pairs: floor, node, floor, node, ..., floor. Each node
    // run is compared with the mean of the floor runs right before and right after it, a
    // fraction of a second away, so both sides of a ratio see the machine in the same state.
    let node_cpu = CpuSampler::start(node.pid(), Duration::from_millis(20));
    let floor_prefill = (0..3)
        .map(|_| floor.prefill(&long_prompt))
        .collect::<Result<Vec<_>>>()?;
    // Both doors render the prompt with the chat template (`/generate` unless `options.raw`),
    // so every floor run decodes from the same templated prompt; each node run checks that the
    // node's prompt had as many tokens.
    let mut session = floor.session(&prompt)?;
    let mut series: Vec<Series> = [Kind::Sse, Kind::Generate]
        .into_iter()
        .chain(
            CONCURRENCY
                .iter()
                .filter(|c| **c > 1)
                .map(|c| Kind::Streams(*c)),
        )
        .map(Series::new)
        .collect();
    // Round after round of every figure: a figure's pairs are spread over the whole run, so a
    // stretch of the host running slow or fast lands on every figure alike.
    for round in 1..=args.rounds {
        for s in &mut series {
            let pairs = s.kind.pairs_per_round(args.pairs, args.rounds);
            eprintln!(
                "round {round}/{}: {}, {pairs} pairs",
                args.rounds,
                s.kind.name()
            );
            let c = s.kind.concurrency();
            let mut before = session.decode(c, args.tokens)?;
            s.floor.push(before);
            for _ in 0..pairs {
                let traces = node_run(s.kind, &http, &base, &node.addr, args.tokens).await?;
                if let Some(t) = traces.iter().find(|t| t.prompt_tokens != prompt.len()) {
                    bail!(
                        "{}: the node's prompt had {} tokens, the floor's {}",
                        s.kind.name(),
                        t.prompt_tokens,
                        prompt.len()
                    );
                }
                let rate = Window::overlap(&traces)?.rate(&node_cpu);
                let after = session.decode(c, args.tokens)?;
                s.floor.push(after);
                s.node.push((before, rate, after));
                before = after;
            }
        }
    }
    drop(node_cpu);

    eprintln!("time to first token over {} requests", args.ttft_requests);
    let mut ttft = Vec::new();
    let mut prefill = Vec::new();
    let mut added = Vec::new();
    for i in 0..args.ttft_requests {
        // A different user message each time: the node reuses a cached prompt prefix, and
        // the same prompt again would measure almost no prefill.
        let prompt = format!("Request {i}. {PROMPT}");
        let t = client::sse_chat(&http, &base, &prompt, 2).await?;
        let ms = t.ttft().as_secs_f64() * 1000.0;
        ttft.push(ms);
        prefill.push(t.prefill_ms);
        added.push(ms - t.prefill_ms);
    }
    // Twice the decode runs' tokens: the floor beside a busy core decodes a few tokens/s.
    let sharing = sharing::figures(&mut session, &http, &base, args.tokens * 2, args.quick).await?;
    let ollama = ollama::door_figures(&http, &base, args.tokens, args.pairs).await?;
    drop(node);

    eprintln!("memory with one slot");
    let one = NodeProc::start(
        node_bin,
        model,
        &[
            "--parallel".into(),
            "1".into(),
            "--ctx".into(),
            ctx_per_slot.to_string(),
            "--threads".into(),
            threads.clone(),
        ],
    )?;
    let rss_one = one.rss_bytes()? as f64;
    drop(one);

    let mut figures = Vec::new();
    figures.push(Figure::new("floor prefill", "tok/s", floor_prefill));
    let mut floor_figures = Vec::new();
    let mut drift = Vec::new();
    for s in &series {
        drift.extend(
            s.node
                .iter()
                .map(|(before, _, after)| after.wall / before.wall),
        );
        // The single SSE stream is also the aggregate with one stream.
        let names: &[(String, String)] = &match s.kind {
            Kind::Sse => vec![
                (
                    "node decode, 1 stream (OpenAI SSE)".into(),
                    "floor decode, 1 sequence (around OpenAI SSE)".into(),
                ),
                (
                    "node aggregate decode x 1".into(),
                    "floor aggregate decode x 1".into(),
                ),
            ],
            Kind::Generate => vec![(
                "node decode, 1 stream (/generate)".into(),
                "floor decode, 1 sequence (around /generate)".into(),
            )],
            Kind::Streams(c) => vec![(
                format!("node aggregate decode x {c}"),
                format!("floor aggregate decode x {c}"),
            )],
        };
        let target = match s.kind {
            Kind::Sse | Kind::Generate => Some(0.97),
            Kind::Streams(c) if c >= 4 => Some(0.95),
            Kind::Streams(_) => None,
        };
        for (i, (node_name, floor_name)) in names.iter().enumerate() {
            // The one-stream aggregate repeats the SSE figure: its target is the SSE one's.
            let target = target.filter(|_| i == 0);
            for (per, unit, pick) in [
                ("", "tok/s", (|r: &Rate| r.wall) as fn(&Rate) -> f64),
                (" per CPU-s", "tok/CPU-s", |r: &Rate| r.cpu),
            ] {
                let node_name = per_cpu(node_name, per);
                let floor_name = per_cpu(floor_name, per);
                let floor: Vec<f64> = s.floor.iter().map(pick).collect();
                let node: Vec<f64> = s.node.iter().map(|(_, n, _)| pick(n)).collect();
                let ratios = s
                    .node
                    .iter()
                    .map(|(before, n, after)| pick(n) / ((pick(before) + pick(after)) / 2.0))
                    .collect();
                figures.push(Figure::new(node_name, unit, node).against(
                    &floor_name,
                    ratios,
                    target,
                ));
                floor_figures.push(Figure::new(floor_name, unit, floor));
            }
        }
    }
    figures.extend(sharing);
    figures.extend(ollama);
    figures.push(Figure::new(
        "floor drift between consecutive floor runs (next / previous)",
        "ratio",
        drift,
    ));
    figures.extend(floor_figures);
    figures.push(Figure::new(
        "time to first token, p50",
        "ms",
        vec![percentile(&ttft, 50.0)],
    ));
    figures.push(Figure::new(
        "time to first token, p95",
        "ms",
        vec![percentile(&ttft, 95.0)],
    ));
    figures.push(Figure::new(
        "engine prefill, p50",
        "ms",
        vec![percentile(&prefill, 50.0)],
    ));
    figures.push(
        Figure::new(
            "added by the node, p50",
            "ms",
            vec![percentile(&added, 50.0)],
        )
        .at_most(3.0),
    );
    figures.push(Figure::new(
        "added by the node, p95",
        "ms",
        vec![percentile(&added, 95.0)],
    ));
    let mib = 1024.0 * 1024.0;
    figures.push(Figure::new(
        format!("resident memory, {slots} slots loaded"),
        "MiB",
        vec![rss_loaded / mib],
    ));
    figures.push(Figure::new(
        "resident memory, 1 slot loaded",
        "MiB",
        vec![rss_one / mib],
    ));
    figures.push(Figure::new(
        "resident memory per extra slot",
        "MiB",
        vec![(rss_loaded - rss_one) / (slots as f64 - 1.0) / mib],
    ));
    Ok(figures)
}
