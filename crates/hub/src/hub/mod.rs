//! The hub itself: one shared handle on the workers, the token workers join with, and the
//! counters it reports. Its work is split by concern: workers joining and leaving, placing
//! tasks on them, and the frames of tasks under way.

mod events;
mod joining;
mod placing;
#[cfg(test)]
mod tests;

pub use placing::{QueueSlot, Reservation};

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::config::HubConfig;
use crate::snapshot::{HubSnapshot, WorkerSnapshot};
use crate::workers::Workers;

/// The hub: cheap to clone, shared by the `/node` door and the router.
#[derive(Debug, Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    token_digest: Option<[u8; 32]>,
    /// The token of this node's own workers (a split model's), set when the first starts,
    /// and the address besides loopback they connect from.
    own_digest: std::sync::OnceLock<([u8; 32], std::net::IpAddr)>,
    serve_locally: bool,
    task_silence: Duration,
    workers: Mutex<Workers>,
    /// Woken whenever a slot may have become free or the set of workers changed.
    capacity: Notify,
    next_task: AtomicU32,
    waiting: AtomicUsize,
    redispatched: AtomicU64,
    unserved: AtomicU64,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Hub {
    pub fn new(config: HubConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                token_digest: config.token.as_deref().map(digest),
                own_digest: std::sync::OnceLock::new(),
                serve_locally: config.serve_locally,
                task_silence: config.task_silence,
                workers: Mutex::new(Workers::default()),
                capacity: Notify::new(),
                next_task: AtomicU32::new(0),
                waiting: AtomicUsize::new(0),
                redispatched: AtomicU64::new(0),
                unserved: AtomicU64::new(0),
            }),
        }
    }

    pub fn serves_locally(&self) -> bool {
        self.inner.serve_locally
    }

    /// See [`HubConfig::task_silence`].
    pub fn task_silence(&self) -> Duration {
        self.inner.task_silence
    }

    fn lock(&self) -> MutexGuard<'_, Workers> {
        // The registry stays consistent between statements, so a panic elsewhere cannot leave
        // it half-updated: keep serving.
        self.inner
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Compares digests in constant time, so the comparison's timing says nothing about the
    /// token (nor about its length).
    /// Whether a worker connecting from `peer` may join with `token`: the hub's token from
    /// anywhere, this node's own workers' token only from this machine.
    pub fn token_matches(&self, token: &str, peer: std::net::IpAddr) -> bool {
        use subtle::ConstantTimeEq as _;
        let given = digest(token);
        let hubs = self
            .inner
            .token_digest
            .as_ref()
            .is_some_and(|d| bool::from(given.ct_eq(d)));
        let own = self.inner.own_digest.get().is_some_and(|(d, ip)| {
            let here = peer.to_canonical().is_loopback() || peer.to_canonical() == *ip;
            here && bool::from(given.ct_eq(d))
        });
        hubs || own
    }

    /// Whether the `/node` door takes workers (`--hub-token`, or this node's own).
    pub fn accepts_workers(&self) -> bool {
        self.inner.token_digest.is_some() || self.inner.own_digest.get().is_some()
    }

    /// Take this node's own workers (the processes of its split models), which present
    /// `token`: set once, for the node's life.
    pub fn admit_own_workers(&self, token: &str, from: std::net::IpAddr) {
        let _ = self.inner.own_digest.set((digest(token), from));
    }

    pub fn count_redispatch(&self) {
        self.inner.redispatched.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_unserved(&self) {
        self.inner.unserved.fetch_add(1, Ordering::Relaxed);
    }

    /// The workers and counters, for `/api/status` and `/metrics`.
    pub fn snapshot(&self) -> HubSnapshot {
        let workers = self
            .lock()
            .workers
            .values()
            .filter(|w| !w.join.peer)
            .map(|w| WorkerSnapshot {
                name: w.join.name.clone(),
                model: w.join.model.clone(),
                max_concurrency: w.join.max_concurrency,
                in_flight: w.tasks.len(),
                completed: w.completed,
                hearth: w.join.hearth,
                addr: w.join.addr.to_string(),
                connected_at: w.connected_at,
            })
            .collect();
        HubSnapshot {
            workers,
            serve_locally: self.inner.serve_locally,
            waiting: self.inner.waiting.load(Ordering::Acquire),
            redispatched: self.inner.redispatched.load(Ordering::Relaxed),
            unserved: self.inner.unserved.load(Ordering::Relaxed),
        }
    }
}
