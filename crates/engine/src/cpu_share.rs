//! How many llama.cpp threads the engine should use while other programs keep cores busy.
//! llama.cpp's threads meet at a barrier after every graph node: when one of them waits for a
//! core that another program holds, the others spin, and decoding collapses (one busy process
//! on a 2-core machine took a 2-thread decode from ~100 to ~15 tokens/s; one thread kept ~57).
//! The [`Governor`] reads what other processes used of the CPUs (`/proc/stat` minus this
//! process's own time) over each quarter-second of work and lowers the thread limit by the cores
//! they take; [`threads_for`] is the pure rule.

use std::time::{Duration, Instant};

/// How long each measurement of the other programs' CPU use lasts.
pub(crate) const WINDOW: Duration = Duration::from_millis(250);

/// The share of a core that other programs must take beyond the free cores before the
/// engine gives that core up. Under a full llama.cpp team, a program that would keep one core
/// busy gets only ~2/3 of it (the kernel shares the cores fairly), so the threshold sits below.
const GIVE_UP_AT: f64 = 0.4;

/// Threads to run with when `others` cores' worth of CPU time went to other programs on a
/// machine with `logical` CPUs, with `configured` threads wanted (always at least one).
pub(crate) fn threads_for(configured: usize, logical: usize, others: f64) -> usize {
    let excess = others + configured as f64 - logical as f64;
    let taken = (excess + (1.0 - GIVE_UP_AT)).floor().max(0.0) as usize;
    configured.saturating_sub(taken).max(1)
}

/// CPU time counters, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Every CPU's time since boot, idle included.
    pub(crate) total: u64,
    /// Time the CPUs ran programs that compete with this one at its own priority.
    pub(crate) busy: u64,
    /// This process's own user and system time.
    pub(crate) own: u64,
}

impl Sample {
    /// Cores' worth of CPU that other processes used between `earlier` and `self`.
    pub(crate) fn others_since(&self, earlier: &Sample, logical: usize) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        let busy = self.busy.saturating_sub(earlier.busy);
        let own = self.own.saturating_sub(earlier.own);
        busy.saturating_sub(own) as f64 / total as f64 * logical as f64
    }

    /// Cores' worth of CPU that this process used between `earlier` and `self`.
    pub(crate) fn own_since(&self, earlier: &Sample, logical: usize) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        self.own.saturating_sub(earlier.own) as f64 / total as f64 * logical as f64
    }
}

/// `/proc/stat`'s aggregate line and CPU count: (total, busy, busy including niced time).
/// Niced programs yield to the engine, so they count only when this process is niced too.
pub(crate) fn parse_proc_stat(text: &str) -> Option<(u64, u64, u64, usize)> {
    let mut lines = text.lines();
    let first = lines.next()?;
    let mut fields = first.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    let v: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = v[..] else {
        return None;
    };
    let cpus = lines
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    let busy = user + system + irq + softirq + steal;
    let total = busy + nice + idle + iowait;
    Some((total, busy, busy + nice, cpus.max(1)))
}

/// `/proc/self/stat`: (user + system ticks, nice value).
pub(crate) fn parse_self_stat(text: &str) -> Option<(u64, i64)> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of proc(5), so field N is f[N - 3].
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    let nice: i64 = f.get(19 - 3)?.parse().ok()?;
    Some((utime + stime, nice))
}

/// Read the counters now (`None` where `/proc` is not there to read).
fn read() -> Option<(Sample, usize)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let me = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (total, busy, busy_with_nice, cpus) = parse_proc_stat(&stat)?;
    let (own, nice) = parse_self_stat(&me)?;
    let busy = if nice > 0 { busy_with_nice } else { busy };
    Some((Sample { total, busy, own }, cpus))
}

/// The engine thread's thread limit: measured at most once per [`WINDOW`], lowered at once
/// when other programs take cores, raised only after two windows agree (a short burst of
/// another program should not make the limit flap). A window in which the engine itself
/// hardly ran (it was idle, or its readers were slow) says nothing about now: the next
/// request starts with every thread, and the first window of work lowers it if it must.
#[derive(Debug)]
pub(crate) struct Governor {
    configured: usize,
    current: usize,
    /// A higher limit seen in the last window, applied if the next window agrees.
    rising: Option<usize>,
    last: Option<(Instant, Sample)>,
}

/// Below this many cores of its own use in a window, the engine counts as idle in it.
const IDLE_BELOW: f64 = 0.25;

impl Governor {
    pub(crate) fn new(configured: usize) -> Self {
        let configured = configured.max(1);
        // With one thread there is nothing to give up; without the shim nothing to change.
        let last = if configured > 1 && crate::omp::SUPPORTED {
            read().map(|(s, _)| (Instant::now(), s))
        } else {
            None
        };
        Self {
            configured,
            current: configured,
            rising: None,
            last,
        }
    }

    /// The number of threads the context was made with.
    pub(crate) fn configured(&self) -> usize {
        self.configured
    }

    /// The limit for the next decode.
    pub(crate) fn limit(&mut self, now: Instant) -> usize {
        let Some((at, before)) = self.last else {
            return self.current;
        };
        if now.duration_since(at) < WINDOW {
            return self.current;
        }
        let Some((sample, cpus)) = read() else {
            self.last = None;
            return self.current;
        };
        self.last = Some((now, sample));
        let own = sample.own_since(&before, cpus);
        let others = sample.others_since(&before, cpus);
        self.observe(cpus, own, others);
        self.current
    }

    /// One window: this engine's process used `own` cores and other programs `others`.
    fn observe(&mut self, cpus: usize, own: f64, others: f64) {
        if own < IDLE_BELOW {
            self.rising = None;
            self.current = self.configured;
            return;
        }
        let wanted = threads_for(self.configured, cpus, others);
        if wanted < self.current {
            self.rising = None;
            tracing::info!(
                threads = wanted,
                configured = self.configured,
                others_cores = format!("{others:.2}"),
                "other programs keep cores busy: decoding with fewer threads"
            );
            self.current = wanted;
        } else if wanted > self.current {
            if self.rising.is_some_and(|r| r <= wanted) {
                let up = self.rising.take().unwrap_or(wanted);
                tracing::info!(
                    threads = up,
                    configured = self.configured,
                    "cores free again: decoding with more threads"
                );
                self.current = up;
            } else {
                self.rising = Some(wanted);
            }
        } else {
            self.rising = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_follow_the_cores_other_programs_take() {
        // (configured, logical CPUs, other programs' cores) -> threads
        let table = [
            (2, 2, 0.0, 2),
            (2, 2, 0.3, 2),
            (2, 2, 0.45, 1),
            // One busy loop beside a full team gets ~2/3 of a core; beside one thread, all.
            (2, 2, 0.67, 1),
            (2, 2, 1.0, 1),
            (2, 2, 2.0, 1),
            (8, 8, 1.0, 7),
            (8, 8, 2.9, 5),
            // Hyperthreads: 4 threads on 8 logical CPUs leave room for 4 busy ones.
            (4, 8, 3.0, 4),
            (4, 8, 4.5, 3),
            (1, 2, 2.0, 1),
        ];
        for (configured, logical, others, want) in table {
            assert_eq!(
                threads_for(configured, logical, others),
                want,
                "{configured} threads, {logical} CPUs, others {others}"
            );
        }
    }

    #[test]
    fn others_exclude_this_process_and_count_cores() {
        let a = Sample {
            total: 1000,
            busy: 400,
            own: 100,
        };
        // 200 ticks on 2 CPUs pass: 150 busy, 50 of them ours -> 100 of 200 = 1 core of 2.
        let b = Sample {
            total: 1200,
            busy: 550,
            own: 150,
        };
        assert!((b.others_since(&a, 2) - 1.0).abs() < 1e-9);
        assert!((b.own_since(&a, 2) - 0.5).abs() < 1e-9);
        assert_eq!(a.others_since(&a, 2), 0.0);
        // Counters that went backwards never give a negative share.
        assert_eq!(a.others_since(&b, 2), 0.0);
    }

    #[test]
    fn proc_files_parse() {
        let stat = "cpu  100 5 50 800 10 1 2 3 0 0\ncpu0 50 2 25 400 5 0 1 1 0 0\ncpu1 50 3 25 400 5 1 1 2 0 0\nintr 1 2\n";
        assert_eq!(parse_proc_stat(stat), Some((971, 156, 161, 2)));
        assert_eq!(parse_proc_stat("intr 1\n"), None);
        let me = "4242 (hearth node) (x)) S 1 2 3 4 5 6 7 8 9 10 120 30 0 0 20 5 3 0 7 8";
        assert_eq!(parse_self_stat(me), Some((150, 5)));
        assert_eq!(parse_self_stat("4242 (x) S 1"), None);
        // This machine's own files read.
        let (sample, cpus) = read().expect("/proc is readable here");
        assert!(cpus >= 1 && sample.total > 0);
    }

    #[test]
    fn the_limit_drops_at_once_and_rises_after_two_windows() {
        let mut g = Governor {
            configured: 2,
            current: 2,
            rising: None,
            last: None,
        };
        g.observe(2, 1.3, 0.7);
        assert_eq!(g.current, 1, "down at once");
        g.observe(2, 1.0, 0.0);
        assert_eq!(g.current, 1, "one quiet window is not enough");
        g.observe(2, 1.0, 1.0);
        g.observe(2, 1.0, 0.0);
        assert_eq!(g.current, 1, "a busy window in between starts again");
        g.observe(2, 1.0, 0.0);
        assert_eq!(g.current, 2, "two quiet windows in a row");
        // An idle window (the engine hardly ran) restarts with every thread, whatever the
        // other programs did while it was idle.
        g.observe(2, 1.3, 0.7);
        assert_eq!(g.current, 1);
        g.observe(2, 0.1, 1.8);
        assert_eq!(g.current, 2);
        // Without counters (not Linux, or one thread) the limit never moves.
        assert_eq!(g.limit(Instant::now() + WINDOW * 4), 2);
    }
}
