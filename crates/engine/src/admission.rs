//! Admission: how many requests may be inside the engine at once (running in a slot or
//! waiting in the queue). One atomic counter, checked before a request is sent to the engine
//! thread, so a full engine refuses at once instead of queueing without bound.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// Refused: every slot is busy and the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full {
    pub(crate) queued: usize,
    pub(crate) retry_after: Duration,
}

#[derive(Debug)]
pub(crate) struct Admission {
    in_flight: AtomicUsize,
    slots: usize,
    capacity: usize,
    /// Bumped whenever places are given back, for callers waiting for room.
    released: watch::Sender<u64>,
}

impl Admission {
    pub(crate) fn new(slots: usize, queue_capacity: usize) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            slots: slots.max(1),
            capacity: slots.max(1) + queue_capacity,
            released: watch::channel(0).0,
        }
    }

    /// Take a place, or say how long to wait: about one second per queue's worth of requests
    /// ahead (a place frees when any slot finishes).
    pub(crate) fn try_admit(&self) -> Result<(), Full> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if before < self.capacity {
            return Ok(());
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        let queued = before.saturating_sub(self.slots);
        Err(Full {
            queued,
            retry_after: Duration::from_secs(1 + (queued / self.slots) as u64),
        })
    }

    /// Give places back (a request finished, failed, or was abandoned).
    pub(crate) fn release(&self, n: usize) {
        self.in_flight.fetch_sub(n, Ordering::AcqRel);
        if n > 0 {
            self.released.send_modify(|c| *c = c.wrapping_add(1));
        }
    }

    /// Completes at the next [`Admission::release`] after this call (not at one before it, so
    /// a caller asks for this before it tries and misses nothing).
    pub(crate) fn room(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.released.subscribe();
        async move {
            // Every sender is gone with the engine: there will be no room here, so do not wait.
            let _ = rx.changed().await;
        }
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn slots(&self) -> usize {
        self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn admits_slots_plus_queue_then_refuses_until_released() {
        let a = Admission::new(2, 3);
        for _ in 0..5 {
            a.try_admit().unwrap();
        }
        let full = a.try_admit().unwrap_err();
        assert_eq!(full.queued, 3);
        assert!(full.retry_after >= Duration::from_secs(1));
        assert_eq!(a.in_flight(), 5, "a refusal leaves the count unchanged");
        a.release(1);
        a.try_admit().unwrap();
        assert!(a.try_admit().is_err());
    }

    #[tokio::test]
    async fn room_completes_at_the_next_release_not_an_earlier_one() {
        let a = Admission::new(1, 0);
        a.try_admit().unwrap();
        a.release(1);
        let room = a.room();
        tokio::pin!(room);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut room)
                .await
                .is_err(),
            "a release before asking does not count"
        );
        a.try_admit().unwrap();
        a.release(1);
        tokio::time::timeout(Duration::from_secs(1), room)
            .await
            .expect("woken by the release");
    }

    #[test]
    fn zero_queue_admits_exactly_the_slots() {
        let a = Admission::new(1, 0);
        a.try_admit().unwrap();
        assert!(a.try_admit().is_err());
    }

    #[test]
    fn concurrent_admission_never_exceeds_capacity() {
        let a = Arc::new(Admission::new(4, 4));
        let admitted = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let a = a.clone();
                let admitted = admitted.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        if a.try_admit().is_ok() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 8);
        assert_eq!(a.in_flight(), 8);
    }
}
