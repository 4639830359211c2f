//! The signed-challenge door's rate limit: failed authentications per IP address + client id,
//! as the reference server counts them (NOTES.md "auth-ws"). A failure after a quiet spell of
//! the window starts the count again; the threshold-th failure in a row blocks the pair for
//! 2^(n-1) seconds up to the maximum; a success clears the pair. No I/O, no clock of its own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failed authentications per IP address + client id (see the module docs).
#[derive(Debug)]
pub struct RateLimiter {
    threshold: u32,
    window: Duration,
    max_block: Duration,
    entries: HashMap<(IpAddr, String), Attempts>,
}

#[derive(Debug, Clone, Copy)]
struct Attempts {
    failures: u32,
    last_failure: Instant,
    blocked_until: Option<Instant>,
}

/// What a failure leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Attempts left before the pair is blocked.
    Remaining(u32),
    /// Blocked for this long.
    Blocked(Duration),
}

/// Entries kept before stale ones are dropped.
const MAX_LIMITER_ENTRIES: usize = 10_000;

impl Default for RateLimiter {
    /// The reference's numbers: 5 failures, 10 minutes, at most 30 minutes blocked.
    fn default() -> Self {
        Self::new(5, Duration::from_secs(600), Duration::from_secs(1800))
    }
}

impl RateLimiter {
    pub fn new(threshold: u32, window: Duration, max_block: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            window,
            max_block,
            entries: HashMap::new(),
        }
    }

    /// How much longer the pair is blocked, if it is.
    pub fn blocked(&self, ip: IpAddr, client_id: &str, now: Instant) -> Option<Duration> {
        let until = self
            .entries
            .get(&(ip, client_id.to_owned()))?
            .blocked_until?;
        until.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// Record a failed attempt.
    pub fn failure(&mut self, ip: IpAddr, client_id: &str, now: Instant) -> FailureOutcome {
        if self.entries.len() >= MAX_LIMITER_ENTRIES {
            self.prune(now);
        }
        let window = self.window;
        let e = self
            .entries
            .entry((ip, client_id.to_owned()))
            .or_insert(Attempts {
                failures: 0,
                last_failure: now,
                blocked_until: None,
            });
        // The quiet spell counts from the end of the last block, so a client that comes back
        // right after a block keeps its count (and its backoff keeps growing).
        let quiet_since = e
            .blocked_until
            .map_or(e.last_failure, |b| b.max(e.last_failure));
        if now.saturating_duration_since(quiet_since) > window {
            e.failures = 0;
            e.blocked_until = None;
        }
        e.failures = e.failures.saturating_add(1);
        e.last_failure = now;
        if e.failures >= self.threshold {
            let secs = 2u64
                .saturating_pow(e.failures - 1)
                .min(self.max_block.as_secs().max(1));
            let block = Duration::from_secs(secs);
            e.blocked_until = Some(now + block);
            FailureOutcome::Blocked(block)
        } else {
            FailureOutcome::Remaining(self.threshold - e.failures)
        }
    }

    /// A successful authentication clears the pair.
    pub fn success(&mut self, ip: IpAddr, client_id: &str) {
        self.entries.remove(&(ip, client_id.to_owned()));
    }

    /// Drop entries that neither block nor count any more.
    fn prune(&mut self, now: Instant) {
        let window = self.window;
        self.entries.retain(|_, e| {
            e.blocked_until.is_some_and(|b| b > now)
                || now.saturating_duration_since(e.last_failure) <= window
        });
        if self.entries.len() >= MAX_LIMITER_ENTRIES {
            // Under a flood of made-up client ids keep only the pairs that are blocked.
            self.entries
                .retain(|_, e| e.blocked_until.is_some_and(|b| b > now));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Whole seconds to wait, rounded up (what `retryAfter` carries).
pub fn retry_after_secs(d: Duration) -> u64 {
    let s = d.as_secs();
    if d.subsec_nanos() > 0 {
        s + 1
    } else {
        s.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 7));
    const OTHER_IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 8));

    #[test]
    fn five_failures_block_with_exponential_backoff() {
        let mut l = RateLimiter::default();
        let t0 = Instant::now();
        for (i, left) in [4, 3, 2, 1].into_iter().enumerate() {
            let t = t0 + Duration::from_secs(i as u64);
            assert_eq!(l.blocked(IP, "abc", t), None);
            assert_eq!(l.failure(IP, "abc", t), FailureOutcome::Remaining(left));
        }
        let t5 = t0 + Duration::from_secs(10);
        assert_eq!(
            l.failure(IP, "abc", t5),
            FailureOutcome::Blocked(Duration::from_secs(16))
        );
        assert_eq!(
            l.blocked(IP, "abc", t5 + Duration::from_secs(1)),
            Some(Duration::from_secs(15))
        );
        // Another client id from the same address, or the same id from elsewhere, is not blocked.
        assert_eq!(l.blocked(IP, "other", t5), None);
        assert_eq!(l.blocked(OTHER_IP, "abc", t5), None);
        // After the block, the next failure doubles it.
        let t6 = t5 + Duration::from_secs(17);
        assert_eq!(l.blocked(IP, "abc", t6), None);
        assert_eq!(
            l.failure(IP, "abc", t6),
            FailureOutcome::Blocked(Duration::from_secs(32))
        );
        let t7 = t6 + Duration::from_secs(33);
        assert_eq!(
            l.failure(IP, "abc", t7),
            FailureOutcome::Blocked(Duration::from_secs(64))
        );
    }

    #[test]
    fn blocks_are_capped_at_thirty_minutes() {
        let mut l = RateLimiter::default();
        let mut t = Instant::now();
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            if let FailureOutcome::Blocked(d) = l.failure(IP, "abc", t) {
                last = d;
                t += d;
            }
            t += Duration::from_secs(1);
        }
        assert_eq!(last, Duration::from_secs(1800));
    }

    #[test]
    fn quiet_spells_and_successes_reset_the_count() {
        let mut l = RateLimiter::default();
        let t0 = Instant::now();
        for i in 0..4 {
            l.failure(IP, "abc", t0 + Duration::from_secs(i));
        }
        // Eleven quiet minutes: the count starts again.
        let later = t0 + Duration::from_secs(3 + 660);
        assert_eq!(l.failure(IP, "abc", later), FailureOutcome::Remaining(4));
        for i in 1..4 {
            l.failure(IP, "abc", later + Duration::from_secs(i));
        }
        l.success(IP, "abc");
        assert_eq!(
            l.failure(IP, "abc", later + Duration::from_secs(5)),
            FailureOutcome::Remaining(4)
        );
    }

    #[test]
    fn a_flood_of_client_ids_is_pruned() {
        let mut l = RateLimiter::default();
        let t0 = Instant::now();
        for i in 0..MAX_LIMITER_ENTRIES {
            l.failure(IP, &format!("id{i}"), t0);
        }
        let later = t0 + Duration::from_secs(3600);
        l.failure(IP, "fresh", later);
        assert_eq!(l.len(), 1, "stale entries are dropped");
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(15_001)), 16);
        assert_eq!(retry_after_secs(Duration::from_secs(16)), 16);
        assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
    }
}
