//! Door capacity: how many token messages per second each door (SSE and the `/generate`
//! WebSocket) carries with the scripted engine, which does no model work, to one client and
//! to many.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::client;
use crate::node::NodeProc;
use crate::report::Figure;

const DOOR_CLIENTS: usize = 32;
/// Rounds of door-capacity runs (each round measures every door once).
const DOOR_RUNS: usize = 5;
/// Tokens per request in the door-capacity runs: `/generate` repeats the cumulative text in
/// every token message, so long requests would measure JSON size rather than the door.
const DOOR_REQUEST_TOKENS: usize = 256;

/// Door capacity: token messages per second each door sustains with the scripted engine
/// (no model work), to one client and to many.
pub(crate) async fn figures(
    door_seconds: f64,
    model: &Path,
    node_bin: &Path,
) -> Result<Vec<Figure>> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(300))
        .build()?;
    eprintln!("door capacity with the scripted engine");
    let scripted = NodeProc::start(
        node_bin,
        model,
        &[
            "--scripted".into(),
            "--parallel".into(),
            DOOR_CLIENTS.to_string(),
            "--queue".into(),
            DOOR_CLIENTS.to_string(),
        ],
    )?;
    let door = Duration::from_secs_f64(door_seconds);
    let setups = [
        ("SSE", 1),
        ("SSE", DOOR_CLIENTS),
        ("/generate", 1),
        ("/generate", DOOR_CLIENTS),
    ];
    let mut samples = vec![Vec::new(); setups.len()];
    // Round after round of every setup, so that a burst of load on the host lowers one sample
    // of several figures rather than every sample of one.
    for _ in 0..DOOR_RUNS {
        for ((name, clients), samples) in setups.iter().zip(&mut samples) {
            let start = Instant::now();
            let tasks: Vec<_> = (0..*clients)
                .map(|_| {
                    let http = http.clone();
                    let base = scripted.base();
                    let addr = scripted.addr.clone();
                    let is_sse = *name == "SSE";
                    tokio::spawn(async move {
                        if is_sse {
                            client::count_sse(http, base, DOOR_REQUEST_TOKENS, door).await
                        } else {
                            client::count_ws(addr, DOOR_REQUEST_TOKENS, door).await
                        }
                    })
                })
                .collect();
            let mut total = 0;
            for t in tasks {
                total += t.await??;
            }
            samples.push(total as f64 / start.elapsed().as_secs_f64());
        }
    }
    let doors = setups
        .iter()
        .zip(samples)
        .map(|((name, clients), samples)| {
            (
                format!("{name} token messages, {clients} client(s)"),
                samples,
            )
        });
    drop(scripted);
    Ok(doors
        .map(|(name, samples)| {
            let one_client = name.ends_with(" 1 client(s)");
            let f = Figure::new(name, "msg/s", samples);
            if one_client {
                f.at_least(50_000.0)
            } else {
                f
            }
        })
        .collect())
}
