//! Workers joining and leaving the hub, superseding one another, and what the hub learns of
//! each while it stays: a peer's heartbeat figures and the decode speed measured there.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use hearth_protocol::worker::HubFrame;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Hub;
use crate::tasks::Controls;
use crate::workers::{same_model, Health, Worker, WorkerId, WorkerJoin};

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Hub {
    /// Add a worker. One with the same model and name is superseded: removed at once (its
    /// tasks re-dispatch) and its connection told to close with 4003.
    pub fn register(
        &self,
        join: WorkerJoin,
        outbox: mpsc::Sender<HubFrame>,
        kick: CancellationToken,
        controls: Option<Controls>,
    ) -> WorkerId {
        let mut reg = self.lock();
        let old: Vec<WorkerId> = reg
            .workers
            .iter()
            .filter(|(_, w)| {
                !join.peer
                    && !w.join.peer
                    && w.join.name == join.name
                    && same_model(&w.join.model, &join.model)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in old {
            if let Some(w) = reg.workers.remove(&id) {
                tracing::info!(worker = %w.join.name, model = %w.join.model, "a new connection supersedes this worker");
                w.kick.cancel();
            }
        }
        reg.next_worker += 1;
        let id = WorkerId(reg.next_worker);
        reg.workers.insert(
            id,
            Worker {
                join,
                connected_at: now_secs(),
                outbox,
                controls,
                kick,
                tasks: HashMap::new(),
                retired: VecDeque::new(),
                completed: 0,
                tokens_per_s: 0.0,
                measured_tasks: 0,
                health: None,
            },
        );
        drop(reg);
        self.inner.capacity.notify_waiters();
        id
    }

    /// Remove a worker (its connection ended). Dropping its routes tells each of its tasks'
    /// supervisors that the worker is gone. Does nothing if it was already superseded.
    pub fn unregister(&self, id: WorkerId) {
        let removed = self.lock().workers.remove(&id);
        if let Some(w) = removed {
            if !w.tasks.is_empty() {
                tracing::warn!(worker = %w.join.name, tasks = w.tasks.len(), "a worker left with tasks in flight; re-dispatching them");
            }
        }
        self.inner.capacity.notify_waiters();
    }

    /// A cluster peer's latest figures.
    pub fn set_health(&self, worker: WorkerId, health: Health) {
        if let Some(w) = self.lock().workers.get_mut(&worker) {
            w.health = Some(health);
            if w.measured_tasks == 0 {
                if let Some(s) = health.tokens_per_s.filter(|s| s.is_finite() && *s > 0.0) {
                    w.tokens_per_s = s;
                }
            }
        }
        self.inner.capacity.notify_waiters();
    }

    /// A task on `worker` decoded at `tokens_per_s`: fold it into the worker's speed.
    pub fn record_speed(&self, worker: WorkerId, tokens_per_s: f64) {
        if !tokens_per_s.is_finite() || tokens_per_s <= 0.0 {
            return;
        }
        if let Some(w) = self.lock().workers.get_mut(&worker) {
            // The peer's own figure is replaced by this node's first measurement.
            w.tokens_per_s = if w.measured_tasks > 0 {
                0.7 * w.tokens_per_s + 0.3 * tokens_per_s
            } else {
                tokens_per_s
            };
            w.measured_tasks += 1;
        }
    }

    /// The measured decode speed of each LAN peer's models, tokens/s, by the peer's address.
    pub fn peer_speeds(&self) -> HashMap<SocketAddr, f64> {
        let mut out = HashMap::new();
        for w in self.lock().workers.values().filter(|w| w.join.peer) {
            let best = out.entry(w.join.addr).or_insert(0.0_f64);
            *best = best.max(w.tokens_per_s);
        }
        out
    }
}
