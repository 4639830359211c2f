//! The cluster's figures, with real node processes on loopback: two nodes pinned to one core
//! each against one node on one core (independent requests, aggregate), one stream through a
//! node served by its peer against the same stream straight to the peer (decode and the time
//! to first token the hop adds), the second turn of a long conversation through a peer, the
//! time from a provider's kill to the client's next token, how fast a dead or silent peer is
//! noticed, and sixteen scripted nodes fully connected (heartbeat bytes per node, time to
//! first token against two nodes: nothing may grow faster than the peer count), and a model
//! split across two nodes ([`crate::split`]).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::client::{self, rate_and_ttft};
use crate::node::{cluster_addr, s, NodeProc};
use crate::report::{median, percentile, Figure};

const PROMPT: &str = "Write a short story about a robot learning to paint.";

async fn get(http: &reqwest::Client, url: String) -> Result<Value> {
    Ok(http.get(url).send().await?.json().await?)
}

async fn peer_names(http: &reqwest::Client, node: &NodeProc) -> Result<Vec<String>> {
    let v = get(http, format!("{}/api/cluster", node.base())).await?;
    Ok(v["peers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|p| p["loaded_models"].as_array().is_some_and(|m| !m.is_empty()))
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// Wait (60 s at most) until `node` has `n` peers with a model.
async fn wait_peers(http: &reqwest::Client, node: &NodeProc, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if peer_names(http, node).await?.len() >= n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("{} never had {n} peers", node.base())
}

/// A free loopback port (bound and released: a node started right after takes it).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `n` independent requests of `tokens` tokens at once: tokens per second over all of them.
async fn aggregate(http: &reqwest::Client, base: &str, n: usize, tokens: usize) -> Result<f64> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (http, base) = (http.clone(), base.to_owned());
            tokio::spawn(async move {
                client::sse_chat(&http, &base, &format!("{i}. {PROMPT}"), tokens).await
            })
        })
        .collect();
    let mut last = start;
    let mut total = 0;
    for t in tasks {
        let trace = t.await??;
        total += trace.tokens.len();
        last = last.max(*trace.tokens.last().context("no tokens")?);
    }
    Ok(total as f64 / (last - start).as_secs_f64())
}

/// How many times each figure is measured: a full run, or a smoke run (`--quick`).
#[derive(Debug, Clone, Copy)]
struct Runs {
    rounds: usize,
    pairs: usize,
    /// The nodes of the fully connected cluster, and how long its traffic is counted.
    mesh: usize,
    window: Duration,
    /// A smoke run (`--quick`): shorter prompts too.
    quick: bool,
}

pub(crate) async fn figures(
    model: &Path,
    bin: &Path,
    tokens: usize,
    quick: bool,
) -> Result<Vec<Figure>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()?;
    let runs = if quick {
        Runs {
            rounds: 1,
            pairs: 2,
            mesh: 4,
            window: Duration::from_secs(3),
            quick,
        }
    } else {
        Runs {
            rounds: 5,
            pairs: 12,
            mesh: 16,
            window: Duration::from_secs(10),
            quick,
        }
    };
    let mut out = Vec::new();
    out.extend(pinned(&http, model, bin, tokens, runs).await?);
    out.extend(through_a_peer(&http, model, bin, tokens, runs).await?);
    out.extend(takeover(&http, model, bin, runs).await?);
    out.extend(detection(&http, model, bin, runs).await?);
    out.extend(mesh(&http, model, bin, runs).await?);
    out.extend(crate::split::figures(&http, model, bin, tokens, runs.pairs).await?);
    Ok(out)
}

/// Two nodes on a core each against one node on one core, four independent requests.
async fn pinned(
    http: &reqwest::Client,
    model: &Path,
    bin: &Path,
    tokens: usize,
    runs: Runs,
) -> Result<Vec<Figure>> {
    eprintln!("cluster: two nodes on one core each against one");
    let one_core = [s("--threads"), s("1"), s("--parallel"), s("1")];
    let single = NodeProc::launch(bin, Some(model), &one_core, Some(0))?;
    let b = NodeProc::launch(bin, Some(model), &one_core, Some(1))?;
    let mut with_peer = one_core.to_vec();
    with_peer.extend([s("--peer"), cluster_addr(http, &b).await?]);
    let a = NodeProc::launch(bin, Some(model), &with_peer, Some(0))?;
    wait_peers(http, &a, 1).await?;
    // Warm-up: a first full round on each (first-use allocations, the model's pages).
    aggregate(http, &single.base(), 4, tokens * 2).await?;
    aggregate(http, &a.base(), 4, tokens * 2).await?;
    let (mut one, mut two, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs.rounds {
        let r1 = aggregate(http, &single.base(), 4, tokens * 2).await?;
        let r2 = aggregate(http, &a.base(), 4, tokens * 2).await?;
        one.push(r1);
        two.push(r2);
        ratios.push(r2 / r1);
    }
    Ok(vec![
        Figure::new("cluster: 1 node on 1 core, 4 requests", "tok/s", one),
        Figure::new("cluster: 2 nodes on 1 core each, 4 requests", "tok/s", two).against(
            "cluster: 1 node on 1 core, 4 requests",
            ratios,
            Some(1.9),
        ),
    ])
}

/// One stream through a node without the model, served by its peer, against the same stream
/// straight to the peer; and the second turn of a long conversation the same two ways.
async fn through_a_peer(
    http: &reqwest::Client,
    model: &Path,
    bin: &Path,
    tokens: usize,
    runs: Runs,
) -> Result<Vec<Figure>> {
    eprintln!("cluster: one stream through a peer");
    // Two machines on one: the peer decodes on one core, the node that relays (and this
    // client) use the other, as they would on their own machines.
    let b = NodeProc::launch(
        bin,
        Some(model),
        &[s("--ctx"), s("2048"), s("--threads"), s("1")],
        Some(1),
    )?;
    let a = NodeProc::launch(
        bin,
        None,
        &[s("--peer"), cluster_addr(http, &b).await?],
        Some(0),
    )?;
    wait_peers(http, &a, 1).await?;
    client::sse_chat(http, &a.base(), PROMPT, 4).await?;
    let (mut ratios, mut added, mut rates) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs.pairs {
        // A new prompt each time, so neither run finds it cached.
        let straight =
            client::sse_chat(http, &b.base(), &format!("{i}a. {PROMPT}"), tokens).await?;
        let via = client::sse_chat(http, &a.base(), &format!("{i}b. {PROMPT}"), tokens).await?;
        let (r1, t1) = rate_and_ttft(&straight)?;
        let (r2, t2) = rate_and_ttft(&via)?;
        rates.push(r2);
        ratios.push(r2 / r1);
        added.push(t2 - t1);
    }
    // The second turn of a 1,500-token conversation (300 in a quick run): the peer's prompt
    // cache holds the first.
    let (repeats, size) = if runs.quick {
        (30, "300")
    } else {
        (150, "1,500")
    };
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(repeats);
    let straight_name = format!("cluster: 2nd turn of {size} tokens straight to its node, TTFT");
    let (mut second_via, mut second_straight, mut turn_ratios) =
        (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs.pairs.div_ceil(3) {
        let mut ttft = [0.0; 2];
        for (j, base) in [b.base(), a.base()].iter().enumerate() {
            let first = format!("{i}{j} {long}");
            let turn1 = json!([{"role": "user", "content": first}]);
            let reply = second_turn(http, base, &turn1).await?.1;
            let turn2 = json!([{"role": "user", "content": first},
                {"role": "assistant", "content": reply}, {"role": "user", "content": "Go on."}]);
            ttft[j] = second_turn(http, base, &turn2).await?.0;
        }
        second_straight.push(ttft[0]);
        second_via.push(ttft[1]);
        turn_ratios.push(ttft[1] / ttft[0]);
    }
    Ok(vec![
        Figure::new("cluster: one stream through a peer, decode", "tok/s", rates).against(
            "the same stream straight to the peer",
            ratios,
            Some(0.95),
        ),
        Figure::new("cluster: time to first token the hop adds", "ms", added).at_most(3.0),
        Figure::new(&straight_name, "ms", second_straight),
        Figure::new(
            "cluster: the same 2nd turn through a peer, TTFT",
            "ms",
            second_via,
        )
        .against(
            &straight_name,
            turn_ratios.iter().map(|r| 1.0 / r).collect(),
            Some(1.0 / 1.1),
        ),
    ])
}

/// A streamed chat turn of 8 tokens: the time to its first token as the client sees it (ms),
/// and its text.
async fn second_turn(
    http: &reqwest::Client,
    base: &str,
    messages: &Value,
) -> Result<(f64, String)> {
    use futures_util::StreamExt as _;
    let sent = Instant::now();
    let resp = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": messages, "max_tokens": 8, "temperature": 0, "stream": true}))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("HTTP {}", resp.status());
    }
    let mut body = resp.bytes_stream();
    let (mut buf, mut text, mut first) = (Vec::<u8>::new(), String::new(), None);
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk?);
        while let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..i + 2).collect();
            let Some(data) = event.strip_prefix(b"data: ") else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(data) else {
                continue;
            };
            if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                if !t.is_empty() && first.is_none() {
                    first = Some(sent.elapsed());
                }
                text.push_str(t);
            }
        }
    }
    let first = first.context("no token")?;
    Ok((first.as_secs_f64() * 1000.0, text))
}

/// From a provider's kill (SIGKILL) to the client's next token, three times.
async fn takeover(
    http: &reqwest::Client,
    model: &Path,
    bin: &Path,
    runs: Runs,
) -> Result<Vec<Figure>> {
    eprintln!("cluster: takeover after a provider is killed");
    let ports = [free_port()?, free_port()?];
    let provider = |port: u16| {
        NodeProc::launch(
            bin,
            Some(model),
            &[
                s("--parallel"),
                s("1"),
                s("--cluster-port"),
                port.to_string(),
            ],
            None,
        )
    };
    let mut nodes = [Some(provider(ports[0])?), Some(provider(ports[1])?)];
    let peers: Vec<String> = ports
        .iter()
        .flat_map(|p| [s("--peer"), format!("127.0.0.1:{p}")])
        .collect();
    let a = NodeProc::launch(bin, None, &peers, None)?;
    let mut gaps = Vec::new();
    for round in 0..runs.rounds.min(3) {
        wait_peers(http, &a, 2).await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (h, base) = (http.clone(), a.base());
        let stream = tokio::spawn(async move {
            client::sse_chat_each(&h, &base, &format!("{round}. {PROMPT}"), 300, tx).await
        });
        for _ in 0..10 {
            rx.recv().await.context("the stream ended early")?;
        }
        let mut victim = None;
        for (i, n) in nodes.iter().enumerate() {
            let n = n.as_ref().context("a node")?;
            if get(http, format!("{}/api/status", n.base())).await?["active"] == 1 {
                victim = Some(i);
            }
        }
        let i = victim.context("no provider busy")?;
        let mut node = nodes[i].take().context("the provider")?;
        let killed = Instant::now();
        node.kill();
        rx.recv().await.context("no token after the kill")?;
        gaps.push(killed.elapsed().as_secs_f64());
        stream.await??;
        nodes[i] = Some(provider(ports[i])?);
    }
    Ok(vec![Figure::new(
        "cluster: a provider's kill to the client's next token",
        "s",
        gaps,
    )
    .at_most(3.0)])
}

/// A dead peer (SIGKILL: its connection closes) and a silent one (SIGSTOP: it stays open),
/// three times each: from the signal to its leaving the other node's peers.
async fn detection(
    http: &reqwest::Client,
    model: &Path,
    bin: &Path,
    runs: Runs,
) -> Result<Vec<Figure>> {
    eprintln!("cluster: noticing a dead and a silent peer");
    let port = free_port()?;
    let peer = || {
        NodeProc::launch(
            bin,
            Some(model),
            &[s("--cluster-port"), port.to_string()],
            None,
        )
    };
    let mut b = peer()?;
    let a = NodeProc::launch(bin, None, &[s("--peer"), format!("127.0.0.1:{port}")], None)?;
    let gone = async |a: &NodeProc| -> Result<f64> {
        let since = Instant::now();
        while since.elapsed() < Duration::from_secs(40) {
            if peer_names(http, a).await?.is_empty() {
                return Ok(since.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        bail!("the peer never left")
    };
    let (mut killed, mut stopped) = (Vec::new(), Vec::new());
    for _ in 0..runs.rounds.min(3) {
        wait_peers(http, &a, 1).await?;
        b.kill();
        killed.push(gone(&a).await?);
        b = peer()?;
        wait_peers(http, &a, 1).await?;
        let pid = b.pid().to_string();
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()?;
        let t = gone(&a).await;
        std::process::Command::new("kill")
            .args(["-CONT", &pid])
            .status()?;
        stopped.push(t?);
    }
    Ok(vec![
        Figure::new("cluster: a killed peer noticed", "s", killed).at_most(0.5),
        Figure::new("cluster: a silent peer (link cut) noticed", "s", stopped).at_most(3.0),
    ])
}

/// Sixteen scripted nodes (four in a smoke run), each connected to every other, against two:
/// heartbeat bytes per node per second while idle, and a request's time to first token on a
/// node with all the others as peers.
async fn mesh(http: &reqwest::Client, model: &Path, bin: &Path, runs: Runs) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let mut per_node = Vec::new();
    for n in [2usize, runs.mesh] {
        eprintln!("cluster: {n} scripted nodes, fully connected");
        let mut nodes: Vec<NodeProc> = Vec::new();
        for _ in 0..n {
            let mut args = vec![s("--scripted")];
            for earlier in &nodes {
                args.extend([s("--peer"), cluster_addr(http, earlier).await?]);
            }
            nodes.push(NodeProc::launch(bin, Some(model), &args, None)?);
        }
        for node in &nodes {
            wait_peers(http, node, n - 1).await?;
        }
        let sent = async |nodes: &[NodeProc]| -> Result<u64> {
            let mut total = 0;
            for node in nodes {
                let m = http
                    .get(format!("{}/metrics", node.base()))
                    .send()
                    .await?
                    .text()
                    .await?;
                total += m
                    .lines()
                    .find_map(|l| l.strip_prefix("hearth_cluster_sent_bytes_total "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
            Ok(total)
        };
        let window = runs.window;
        let before = sent(&nodes).await?;
        tokio::time::sleep(window).await;
        let bytes = (sent(&nodes).await? - before) as f64 / window.as_secs_f64() / n as f64;
        per_node.push(bytes);
        figures.push(Figure::new(
            format!("cluster: {n} nodes, bytes sent per node per second (idle)"),
            "B/s",
            vec![bytes],
        ));
        let mut ttft = Vec::new();
        for i in 0..20 {
            let t = client::sse_chat(http, &nodes[0].base(), &format!("{i}. {PROMPT}"), 2).await?;
            ttft.push(t.ttft().as_secs_f64() * 1000.0);
        }
        figures.push(Figure::new(
            format!("cluster: {n} nodes, time to first token (scripted)"),
            "ms",
            vec![median(&ttft), percentile(&ttft, 90.0)],
        ));
    }
    // Per node, traffic grows with its peers (a heartbeat and pings to each): per peer it
    // must not grow at all, 15 peers against 1.
    let peers = (runs.mesh - 1) as f64;
    let growth = (per_node[1] / peers) / per_node[0].max(1.0);
    figures.push(
        Figure::new(
            format!(
                "cluster: bytes per node per peer, {} nodes over 2",
                runs.mesh
            ),
            "ratio",
            vec![growth],
        )
        .at_most(1.1),
    );
    Ok(figures)
}
