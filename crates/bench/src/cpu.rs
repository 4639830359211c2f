//! Process CPU time, from /proc: the floor's own and the node's. Throughput per CPU-second
//! is not disturbed by time the machine gives to others, which on a shared 2-core host moves
//! wall-clock figures by tens of percent between rounds; it does count every cycle the node
//! spends beyond llama.cpp.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Linux's USER_HZ: /proc reports CPU time in 1/100 s.
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU seconds of every thread of a process.
pub(crate) fn process_cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start at ')'.
    let rest = &stat[stat.rfind(')').context("malformed stat")? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok((utime + stime) / TICKS_PER_SECOND)
}

/// Samples a process's CPU time in the background so that the CPU used between two instants
/// (for example a stream's first and last token) can be read afterwards.
pub(crate) struct CpuSampler {
    samples: Arc<Mutex<Vec<(Instant, f64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CpuSampler {
    pub(crate) fn start(pid: u32, every: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if let Ok(cpu) = process_cpu_seconds(pid) {
                    if let Ok(mut v) = s.lock() {
                        v.push((Instant::now(), cpu));
                    }
                }
                std::thread::sleep(every);
            }
        });
        Self {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// CPU seconds used between two instants, interpolating between samples.
    pub(crate) fn between(&self, from: Instant, to: Instant) -> f64 {
        let v = self.samples.lock().map(|v| v.clone()).unwrap_or_default();
        interpolate(&v, to) - interpolate(&v, from)
    }
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn interpolate(v: &[(Instant, f64)], t: Instant) -> f64 {
    let after = v.partition_point(|(at, _)| *at <= t);
    match (after.checked_sub(1).map(|i| v[i]), v.get(after).copied()) {
        (Some((t0, c0)), Some((t1, c1))) => {
            let span = (t1 - t0).as_secs_f64();
            if span <= 0.0 {
                c0
            } else {
                c0 + (c1 - c0) * (t - t0).as_secs_f64() / span
            }
        }
        (Some((_, c)), None) | (None, Some((_, c))) => c,
        (None, None) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_samples_and_reads_our_own_cpu() {
        let t0 = Instant::now();
        let v = vec![(t0, 1.0), (t0 + Duration::from_secs(2), 3.0)];
        assert_eq!(interpolate(&v, t0 + Duration::from_secs(1)), 2.0);
        assert_eq!(interpolate(&v, t0 + Duration::from_secs(5)), 3.0);
        // Spin until the reading shows 0.1 CPU-s (a loaded host may give us a small share
        // of the wall clock): it must get there, and never exceed what the cores could do.
        let before = process_cpu_seconds(std::process::id()).unwrap();
        let spin = Instant::now();
        let mut x = 0u64;
        let used = loop {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
            let used = process_cpu_seconds(std::process::id()).unwrap() - before;
            if used >= 0.1 || spin.elapsed() > Duration::from_secs(20) {
                break used;
            }
        };
        assert!(x != 1);
        assert!(used >= 0.1, "{used} CPU-s after {:?}", spin.elapsed());
        let cores = std::thread::available_parallelism().unwrap().get() as f64;
        let most = spin.elapsed().as_secs_f64() * cores + 0.02;
        assert!(used <= most, "{used} CPU-s in {:?}", spin.elapsed());
    }
}
