//! "Sharing the machine": one stream's decode while another program keeps a core busy, as a
//! share of the quiet rate measured in the same round, for the node and for the llama.cpp
//! floor driven the same way. The node must keep at least the floor's share and never less
//! than 0.3 of its quiet rate (llama.cpp's threads wait for the busy core at every barrier;
//! the node gives that core up, `hearth-engine`'s `cpu_share`).

use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::client::{self, PROMPT};
use crate::floor::Session;
use crate::report::Figure;
use crate::window::Window;

/// Rounds of (floor quiet, floor busy, node quiet, node busy); a quick run measures one.
const ROUNDS: usize = 3;
/// How long the busy program runs before a measurement starts, as a user's compile would
/// already be running when they ask something.
const SETTLE: Duration = Duration::from_millis(1000);

/// A shell loop that keeps one core busy until dropped.
struct BusyCore(Child);

impl BusyCore {
    fn start() -> Result<Self> {
        Ok(Self(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .context("starting the busy program")?,
        ))
    }
}

impl Drop for BusyCore {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One SSE stream's decode rate, tokens/s.
async fn node_rate(http: &reqwest::Client, base: &str, tokens: usize) -> Result<f64> {
    let trace = client::sse_chat(http, base, PROMPT, tokens).await?;
    Ok(Window::overlap(&[trace])?.wall_rate())
}

pub(crate) async fn figures(
    session: &mut Session<'_>,
    http: &reqwest::Client,
    base: &str,
    tokens: usize,
    quick: bool,
) -> Result<Vec<Figure>> {
    let rounds = if quick { 1 } else { ROUNDS };
    let (mut floor, mut node) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        eprintln!("round {round}/{rounds}: one stream beside a busy core");
        let quiet = session.decode(1, tokens)?.wall;
        let busy = BusyCore::start()?;
        tokio::time::sleep(SETTLE).await;
        let shared = session.decode(1, tokens)?.wall;
        drop(busy);
        floor.push(shared / quiet);

        tokio::time::sleep(SETTLE).await;
        let quiet = node_rate(http, base, tokens).await?;
        let busy = BusyCore::start()?;
        tokio::time::sleep(SETTLE).await;
        let shared = node_rate(http, base, tokens).await?;
        drop(busy);
        node.push(shared / quiet);
        // Let the node take its cores back before the next quiet run.
        tokio::time::sleep(SETTLE * 2).await;
    }
    let against_floor = node.iter().zip(&floor).map(|(n, f)| n / f).collect();
    Ok(vec![
        Figure::new(
            "floor decode beside a busy core, share of quiet",
            "ratio",
            floor,
        ),
        Figure::new(
            "node decode beside a busy core, share of quiet",
            "ratio",
            node.clone(),
        )
        .at_least(0.3),
        Figure::new(
            "node share beside a busy core over the floor's",
            "ratio",
            node,
        )
        .against(
            "floor decode beside a busy core, share of quiet",
            against_floor,
            Some(1.0),
        ),
    ])
}
