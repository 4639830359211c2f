//! Reconnect delays shared by the connections this node keeps (worker mode's to its hub, the
//! cluster's to its peers): exponential with equal jitter through `backon`.

use std::time::Duration;

/// Delays each between half and all of `first * 2^attempt`, capped at `max` (backon adds up
/// to 100% jitter above its base, so its base is half of that), without end.
pub fn jittered(first: Duration, max: Duration) -> backon::ExponentialBackoff {
    use backon::BackoffBuilder as _;
    backon::ExponentialBuilder::new()
        .with_min_delay(first / 2)
        .with_max_delay(max / 2)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_within_half_and_all_of_their_step_and_stop_at_the_cap() {
        let first = Duration::from_millis(100);
        let max = Duration::from_millis(800);
        let delays: Vec<Duration> = jittered(first, max).take(8).collect();
        assert_eq!(delays.len(), 8, "without end");
        for (i, d) in delays.iter().enumerate() {
            let step = (first * 2u32.pow(i as u32)).min(max);
            assert!(
                *d >= step / 2 && *d <= step,
                "attempt {i}: {d:?} for a step of {step:?}"
            );
        }
    }
}
