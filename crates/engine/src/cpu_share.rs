//! How many llama.cpp threads the engine should use while other programs keep cores busy.
//! llama.cpp's threads meet at a barrier after every graph node: when one of them waits for a
//! core that another program holds, the others spin, and decoding collapses (one busy process
//! on a 2-core machine took a 2-thread decode from ~100 to ~15 tokens/s; one thread kept ~57).
//! The [`Governor`] gives a core up after two [`FAST_WINDOW`]s of work in which the kernel reports
//! tasks waiting for a CPU (`/proc/pressure/cpu`, microsecond totals), and sizes and restores
//! the limit from what other processes used of the CPUs (`/proc/stat` minus this process) over
//! each [`WINDOW`]; [`threads_for`] is the pure rule. A request after an idle spell starts with
//! every thread: what ran while the engine was idle says nothing about now.

use std::time::{Duration, Instant};

/// How long each measurement of the other programs' CPU use lasts (`/proc/stat` counts in
/// 10 ms ticks: shorter windows would be noise).
pub(crate) const WINDOW: Duration = Duration::from_millis(250);
/// How long each look at CPU pressure lasts while decoding with more than one thread.
pub(crate) const FAST_WINDOW: Duration = Duration::from_millis(50);
/// A pause between two decodes longer than this means the engine was idle.
const IDLE_GAP: Duration = Duration::from_millis(100);
/// Cores' worth of tasks waiting for a CPU through a fast window that means another program
/// competes with the engine's threads. The kernel's `some` share is averaged over the CPUs
/// (one task always waiting on a 2-CPU machine reads 0.5), so it is scaled by their number;
/// alone, the engine's own wake-ups read 0.02-0.1 here, one busy program beside it ~1.0.
const CONTENDED_AT: f64 = 0.4;

/// The share of a core that other programs must take beyond the free cores before the
/// engine gives that core up. Under a full llama.cpp team, a program that would keep one core
/// busy gets only ~2/3 of it (the kernel shares the cores fairly), so the threshold sits below.
pub const GIVE_UP_AT: f64 = 0.4;

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

/// `some ... total=` of `/proc/pressure/cpu`: microseconds in which at least one task waited
/// for a CPU.
pub(crate) fn parse_pressure_total(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

fn read_pressure() -> Option<u64> {
    parse_pressure_total(&std::fs::read_to_string("/proc/pressure/cpu").ok()?)
}

/// The engine thread's thread limit (see the module docs): lowered one core at once when a
/// fast window is contended, sized by the slow windows, raised only after two slow windows
/// agree, and back to every thread after an idle spell.
#[derive(Debug)]
pub(crate) struct Governor {
    configured: usize,
    current: usize,
    /// A higher limit seen in the last slow window, applied if the next one agrees.
    rising: Option<usize>,
    /// The last fast window was contended.
    contended: bool,
    /// Whether the counters can be read here (Linux, more than one thread, the OpenMP shim).
    enabled: bool,
    /// Logical CPUs, as `/proc/stat` counts them.
    cpus: usize,
    /// When the last decode ended.
    last_end: Option<Instant>,
    slow: Option<(Instant, Sample)>,
    fast: Option<(Instant, u64)>,
    /// Cores' worth of CPU other programs used over the last slow window.
    others: f64,
}

impl Governor {
    pub(crate) fn new(configured: usize) -> Self {
        let configured = configured.max(1);
        Self {
            configured,
            current: configured,
            rising: None,
            contended: false,
            enabled: configured > 1 && crate::omp::SUPPORTED && read().is_some(),
            cpus: read().map_or(1, |(_, cpus)| cpus),
            last_end: None,
            slow: None,
            fast: None,
            others: 0.0,
        }
    }

    /// Cores' worth of CPU other programs used over the last measured window: the governor's
    /// own account of why it runs fewer threads.
    pub(crate) fn others(&self) -> f64 {
        self.others
    }

    /// The number of threads the context was made with.
    pub(crate) fn configured(&self) -> usize {
        self.configured
    }

    /// The limit for the decode about to run.
    pub(crate) fn limit(&mut self, now: Instant) -> usize {
        if !self.enabled {
            return self.current;
        }
        // Idle is the time since the last decode ended: a decode itself can take longer than
        // the gap when the engine shares its cores.
        let resumed = self
            .last_end
            .is_none_or(|at| now.saturating_duration_since(at) > IDLE_GAP);
        self.last_end = Some(now);
        if resumed {
            self.restart(now);
            return self.current;
        }
        if self.current > 1 {
            if let Some((at, before)) = self.fast {
                let elapsed = now.duration_since(at);
                if elapsed >= FAST_WINDOW {
                    let total = read_pressure();
                    if let Some(total) = total {
                        let share =
                            total.saturating_sub(before) as f64 / 1e6 / elapsed.as_secs_f64();
                        let waiting = share * self.cpus as f64;
                        tracing::trace!(
                            waiting,
                            threads = self.current,
                            "CPU pressure while decoding"
                        );
                        self.observe_fast(waiting);
                    }
                    self.fast = total.map(|t| (now, t));
                }
            }
        }
        if let Some((at, before)) = self.slow {
            if now.duration_since(at) >= WINDOW {
                match read() {
                    Some((sample, cpus)) => {
                        self.cpus = cpus;
                        self.others = sample.others_since(&before, cpus);
                        self.observe_slow(cpus, sample.own_since(&before, cpus), self.others);
                        self.slow = Some((now, sample));
                    }
                    None => self.enabled = false,
                }
            }
        }
        self.current
    }

    /// The decode that [`Governor::limit`] was asked for has ended.
    pub(crate) fn decoded(&mut self, now: Instant) {
        self.last_end = Some(now);
    }

    /// After an idle spell: every thread, and windows that start now.
    fn restart(&mut self, now: Instant) {
        self.current = self.configured;
        self.rising = None;
        self.contended = false;
        self.slow = read().map(|(s, _)| (now, s));
        self.fast = read_pressure().map(|t| (now, t));
    }

    /// A fast window through which `waiting` cores' worth of tasks waited for a CPU. Two in
    /// a row give a core up (one alone can be another program's last burst).
    fn observe_fast(&mut self, waiting: f64) {
        if waiting < CONTENDED_AT {
            self.contended = false;
            return;
        }
        if !std::mem::replace(&mut self.contended, true) {
            return;
        }
        if self.current > 1 {
            self.contended = false;
            self.current -= 1;
            self.rising = None;
            tracing::info!(
                threads = self.current,
                configured = self.configured,
                waiting = format!("{waiting:.2}"),
                "other programs keep cores busy: decoding with fewer threads"
            );
        }
    }

    /// A slow window: this engine's process used `own` cores and other programs `others`.
    fn observe_slow(&mut self, cpus: usize, own: f64, others: f64) {
        if own < IDLE_BELOW {
            // The engine hardly ran (its readers were slow): nothing to learn.
            self.rising = None;
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

/// Below this many cores of its own use in a slow window, the engine counts as idle in it.
const IDLE_BELOW: f64 = 0.25;

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

    fn governor(configured: usize) -> Governor {
        Governor {
            configured,
            current: configured,
            rising: None,
            contended: false,
            enabled: false,
            cpus: 2,
            last_end: None,
            slow: None,
            fast: None,
            others: 0.0,
        }
    }

    #[test]
    fn pressure_gives_a_core_up_at_once_and_slow_windows_size_and_restore() {
        let mut g = governor(2);
        g.observe_fast(0.1);
        assert_eq!(g.current, 2, "the engine's own wake-ups are not contention");
        g.observe_fast(0.9);
        assert_eq!(g.current, 2, "one contended window can be a last burst");
        g.observe_fast(0.2);
        g.observe_fast(0.9);
        assert_eq!(g.current, 2, "not two in a row");
        g.observe_fast(0.9);
        assert_eq!(g.current, 1, "down after two contended windows in a row");
        g.observe_fast(1.0);
        g.observe_fast(1.0);
        assert_eq!(g.current, 1, "never below one thread");
        g.observe_slow(2, 1.0, 0.0);
        assert_eq!(g.current, 1, "one quiet window is not enough");
        g.observe_slow(2, 1.0, 1.0);
        g.observe_slow(2, 1.0, 0.0);
        assert_eq!(g.current, 1, "a busy window in between starts again");
        g.observe_slow(2, 1.0, 0.0);
        assert_eq!(g.current, 2, "two quiet windows in a row");
        // The slow windows size the limit on bigger machines.
        let mut big = governor(8);
        big.observe_slow(8, 6.0, 2.9);
        assert_eq!(big.current, 5);
        // A window in which the engine hardly ran decides nothing.
        big.observe_slow(8, 0.1, 0.0);
        big.observe_slow(8, 0.1, 0.0);
        assert_eq!(big.current, 5);
    }

    #[test]
    fn an_idle_spell_restarts_with_every_thread() {
        let mut g = governor(2);
        g.enabled = true;
        let t0 = Instant::now();
        g.limit(t0);
        g.observe_fast(0.9);
        g.observe_fast(0.9);
        // A decode that takes longer than the gap is not idleness.
        g.decoded(t0 + IDLE_GAP * 3);
        assert_eq!(g.limit(t0 + IDLE_GAP * 3), 1);
        let end = t0 + IDLE_GAP * 6;
        g.decoded(end);
        assert_eq!(g.limit(end + Duration::from_millis(10)), 1);
        g.decoded(end + Duration::from_millis(20));
        assert_eq!(g.limit(end + Duration::from_millis(20) + IDLE_GAP * 2), 2);
        // Without counters (not Linux, or one thread) the limit never moves.
        let mut off = governor(2);
        assert_eq!(off.limit(t0 + WINDOW * 4), 2);
    }

    #[test]
    fn pressure_totals_parse() {
        let text = "some avg10=0.07 avg60=5.25 avg300=6.85 total=517211081\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure_total(text), Some(517_211_081));
        assert_eq!(parse_pressure_total("full total=3"), None);
    }
}
