//! Sharing the machine: while another program keeps a core busy, the engine decodes with one
//! thread fewer (llama.cpp's threads would otherwise wait at every barrier for the core the
//! other program holds), and it takes the core back once the program stops, unless other
//! programs still keep as much busy (a build beside the tests): then the engine's own account
//! of them (`cpu_others` in `/api/status`) must say so. The figure that shows it is `threads`
//! in `/api/status` and `hearth_engine_threads` in `/metrics`; the speed itself is measured by
//! `make bench` ("sharing the machine"), not here.

use crate::common;

use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestNode;
use serde_json::json;

/// A shell loop that keeps one core busy until dropped.
struct BusyCore(Child);

impl BusyCore {
    fn start() -> Self {
        Self(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("starting sh"),
        )
    }
}

impl Drop for BusyCore {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Poll `/api/status` until its `threads` is one that `want` accepts (an error with the last
/// value after 15 s).
async fn wait_for_threads(t: &TestNode, want: impl Fn(u64) -> bool) -> Result<u64, u64> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let threads = t.get_json("/api/status").await["threads"]
            .as_u64()
            .unwrap_or(0);
        if want(threads) {
            return Ok(threads);
        }
        if Instant::now() > deadline {
            return Err(threads);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_gives_a_core_to_a_busy_program_and_takes_it_back() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert!(cpus >= 2, "this test needs at least 2 CPUs, found {cpus}");
    // As many threads as CPUs, so one busy program leaves exactly one core short.
    let t = TestNode::start_with(|c| {
        c.parallel = 1;
        c.threads = cpus;
    })
    .await;
    assert_eq!(
        t.get_json("/api/status").await["threads"],
        cpus,
        "a quiet machine: every thread"
    );

    // Keep the engine decoding for the whole test.
    let done = Arc::new(AtomicBool::new(false));
    let worker = {
        let done = done.clone();
        let base = t.base.clone();
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let r = common::client()
                    .post(format!("{base}/v1/chat/completions"))
                    .json(
                        &json!({"messages": [{"role": "user", "content": "Tell a story."}],
                                  "max_tokens": 200, "ignore_eos": true}),
                    )
                    .send()
                    .await
                    .expect("request sent");
                assert_eq!(r.status(), 200);
                r.bytes().await.expect("answer");
            }
        })
    };

    let busy = BusyCore::start();
    // One core short, or more if something else on the machine is busy too.
    let gave_up = wait_for_threads(&t, |n| (1..cpus as u64).contains(&n)).await;
    let metrics = t.metrics().await;
    drop(busy);
    // At least one core back (all of them on a quiet machine).
    let fewer_now = gave_up.unwrap_or(0);
    let took_back = wait_for_threads(&t, |n| n > fewer_now).await;
    // Kept short: other programs (not the loop, stopped) took a core's share, by the engine's
    // own measure, which the test reads while the engine still decodes.
    let others_after = t.get_json("/api/status").await["cpu_others"]
        .as_f64()
        .unwrap_or(0.0);
    done.store(true, Ordering::Relaxed);
    worker.await.expect("the requests all succeeded");

    let Ok(fewer) = gave_up else {
        panic!("with a busy program beside it the engine still uses {gave_up:?} threads of {cpus}");
    };
    let in_metrics: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hearth_engine_threads "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no hearth_engine_threads in {metrics}"));
    assert!(
        in_metrics < cpus as u64,
        "{in_metrics} ({fewer} in the status)"
    );
    assert!(
        took_back.is_ok() || others_after >= hearth_engine::GIVE_UP_AT,
        "the core is taken back once it is free: still {took_back:?} threads, while other \
         programs used only {others_after} cores' worth"
    );
    t.stop().await;
}
