//! A model fetched from a peer: two `hearth-node` processes on loopback, the receiver asking
//! for the model by name (`POST /api/models/downloads`, answered once it is verified and in its
//! folder) — the query, 1 MiB binary chunks over the encrypted cluster connection, the writes,
//! the SHA-256 — against the floor measured in the same round: a plain TCP copy of the same
//! file on loopback, read from the page cache and written to a file. And the same model fetched
//! by a TealeNet peer over a compatibility connection (`tealenet`) against the same floor.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::node::NodeProc;
use crate::report::Figure;

/// How long one transfer may take before the bench gives up.
const TRANSFER_LIMIT: Duration = Duration::from_secs(600);

/// A plain TCP copy of `file` to `to` on loopback, as fast as the kernel does it (the standard
/// library's copies, which use `sendfile` and `splice` on Linux): its time.
async fn tcp_copy(file: &Path, to: &Path) -> Result<Duration> {
    let (file, to) = (file.to_path_buf(), to.to_path_buf());
    tokio::task::spawn_blocking(move || -> Result<Duration> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let started = Instant::now();
        let receiver = std::thread::spawn(move || -> std::io::Result<()> {
            let (mut socket, _) = listener.accept()?;
            let mut out = std::fs::File::create(&to)?;
            std::io::copy(&mut socket, &mut out)?;
            Ok(())
        });
        let mut socket = std::net::TcpStream::connect(addr)?;
        let mut input = std::fs::File::open(&file)?;
        std::io::copy(&mut input, &mut socket)?;
        socket.shutdown(std::net::Shutdown::Write)?;
        drop(socket);
        receiver
            .join()
            .map_err(|_| anyhow::anyhow!("the receiving thread panicked"))??;
        Ok(started.elapsed())
    })
    .await?
}

/// Read `file` whole, so that its pages are in the page cache.
fn warm(file: &Path) -> Result<()> {
    std::io::copy(&mut std::fs::File::open(file)?, &mut std::io::sink())?;
    Ok(())
}

async fn cluster_port(http: &reqwest::Client, base: &str) -> Result<u64> {
    let status: Value = http
        .get(format!("{base}/api/status"))
        .send()
        .await?
        .json()
        .await?;
    status["cluster"]["port"]
        .as_u64()
        .context("the source's cluster port")
}

/// One transfer of `name` to the node at `base`: from the request to the verified file (the
/// node answers once it is over, so nothing polls it meanwhile).
async fn fetch(http: &reqwest::Client, base: &str, name: &str) -> Result<Duration> {
    let started = Instant::now();
    let r = http
        .post(format!("{base}/api/models/downloads"))
        .json(&json!({"model": name, "wait": true}))
        .timeout(TRANSFER_LIMIT)
        .send()
        .await?;
    if r.status().as_u16() != 200 {
        bail!("the transfer: {} {}", r.status(), r.text().await?);
    }
    let took = started.elapsed();
    let end: Value = r.json().await?;
    if end["state"] != "done" {
        bail!("the transfer ended: {end}");
    }
    Ok(took)
}

pub(crate) async fn figures(model: &Path, node_bin: &Path, quick: bool) -> Result<Vec<Figure>> {
    let rounds = if quick { 2 } else { 9 };
    let source_dir = tempfile::tempdir()?;
    let shared = source_dir.path().join("tiny.gguf");
    if std::fs::hard_link(model, &shared).is_err() {
        std::fs::copy(model, &shared).context("copying the model")?;
    }
    let folder = |d: &Path| vec!["--models-dir".to_owned(), d.to_string_lossy().into_owned()];
    let source = NodeProc::launch(node_bin, None, &folder(source_dir.path()), None)?;
    // The same folder served to TealeNet peers (plain text, on loopback).
    let mut compat_args = folder(source_dir.path());
    compat_args.push("--tealenet-compat".to_owned());
    let compat = NodeProc::launch(node_bin, None, &compat_args, None)?;
    let http = reqwest::Client::new();
    let port = cluster_port(&http, &source.base()).await?;
    let target_dir = tempfile::tempdir()?;
    let mut extra = folder(target_dir.path());
    extra.extend(["--peer".to_owned(), format!("127.0.0.1:{port}")]);
    let target = NodeProc::launch(node_bin, None, &extra, None)?;
    let base = target.base();
    // Connected, and the source's hash cached, before anything is timed.
    let landed = target_dir.path().join("tiny.gguf");
    fetch(&http, &base, "tiny").await?;
    let (mut hearth, mut floor, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut teale, mut teale_ratios) = (Vec::new(), Vec::new());
    let copy = target_dir.path().join("copy.bin");
    let teale_port = u16::try_from(cluster_port(&http, &compat.base()).await?)?;
    let teale_file = target_dir.path().join("teale.bin");
    // The compatibility connection's first transfer too.
    let to = teale_file.clone();
    tokio::task::spawn_blocking(move || crate::tealenet::fetch(teale_port, "tiny", &to)).await??;
    std::fs::remove_file(&teale_file)?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for round in 1..=rounds {
        eprintln!(
            "round {round}/{rounds}: a model from a peer, by a TealeNet peer, and a plain TCP copy"
        );
        std::fs::remove_file(&landed)?;
        // Each reads the file from the page cache (this machine may page out what it has not
        // used for a while): the first would pay the disk for the others.
        warm(model)?;
        let plain = tcp_copy(model, &copy).await?;
        std::fs::remove_file(&copy)?;
        warm(model)?;
        let took = fetch(&http, &base, "tiny").await?;
        hearth.push(ms(took));
        floor.push(ms(plain));
        ratios.push(plain.as_secs_f64() / took.as_secs_f64());
        warm(model)?;
        let to = teale_file.clone();
        let by_teale =
            tokio::task::spawn_blocking(move || crate::tealenet::fetch(teale_port, "tiny", &to))
                .await??;
        std::fs::remove_file(&teale_file)?;
        eprintln!(
            "  copy {:.0} ms, from a peer {:.0} ms, by a TealeNet peer {:.0} ms",
            ms(plain),
            ms(took),
            ms(by_teale)
        );
        teale.push(ms(by_teale));
        teale_ratios.push(plain.as_secs_f64() / by_teale.as_secs_f64());
    }
    let mib = std::fs::metadata(model)?.len() as f64 / f64::from(1 << 20);
    let rate = |v: &[f64]| v.iter().map(|ms| mib / (ms / 1000.0)).collect::<Vec<_>>();
    Ok(vec![
        Figure::new(
            "a model from a peer (query, transfer, SHA-256)",
            "MiB/s",
            rate(&hearth),
        )
        .against("plain TCP copy of the same file (floor)", ratios, Some(0.9)),
        Figure::new(
            "a model fetched by a TealeNet peer (base64 in plain JSON)",
            "MiB/s",
            rate(&teale),
        )
        .against(
            "plain TCP copy of the same file (floor)",
            teale_ratios,
            Some(0.7),
        ),
        Figure::new(
            "plain TCP copy of the same file (floor)",
            "MiB/s",
            rate(&floor),
        ),
    ])
}
