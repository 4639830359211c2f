//! What the hub shows of itself: its workers and counters as `/api/status` lists them, and as
//! metrics `/metrics` encodes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use serde::Serialize;

/// The hub as `/api/status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct HubSnapshot {
    pub workers: Vec<WorkerSnapshot>,
    pub serve_locally: bool,
    /// Requests waiting for a worker's slot.
    pub waiting: usize,
    /// Tasks moved to another worker (or this node) after their worker was lost.
    pub redispatched: u64,
    /// Requests failed because no worker could take them.
    pub unserved: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkerSnapshot {
    pub name: String,
    pub model: String,
    pub max_concurrency: usize,
    pub in_flight: usize,
    pub completed: u64,
    /// A Hearth worker (understands the task extension).
    pub hearth: bool,
    pub addr: String,
    /// Seconds since the Unix epoch.
    pub connected_at: u64,
}

/// A worker's labels on its metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    name: String,
    model: String,
}

impl HubSnapshot {
    /// Registers the hub's metrics (workers, waiting, re-dispatched, unserved) in `registry`.
    /// Two workers with the same name and model show as one series holding their sum.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        registry.register(
            "hearth_hub_workers",
            "Workers connected to this hub",
            ConstGauge::new(count(self.workers.len())),
        );
        let slots = Family::<WorkerLabels, Gauge>::default();
        let in_flight = Family::<WorkerLabels, Gauge>::default();
        let completed = Family::<WorkerLabels, Counter>::default();
        for w in &self.workers {
            let labels = WorkerLabels {
                name: w.name.clone(),
                model: w.model.clone(),
            };
            slots
                .get_or_create(&labels)
                .inc_by(count(w.max_concurrency));
            in_flight.get_or_create(&labels).inc_by(count(w.in_flight));
            completed.get_or_create(&labels).inc_by(w.completed);
        }
        registry.register(
            "hearth_hub_worker_slots",
            "Tasks the worker accepts at once (max_concurrency)",
            slots,
        );
        registry.register(
            "hearth_hub_worker_in_flight",
            "Tasks the worker is running now",
            in_flight,
        );
        registry.register(
            "hearth_hub_worker_completed",
            "Tasks the worker finished on this connection",
            completed,
        );
        registry.register(
            "hearth_hub_waiting",
            "Requests waiting for a worker's slot",
            ConstGauge::new(count(self.waiting)),
        );
        registry.register(
            "hearth_hub_redispatched",
            "Tasks re-dispatched after their worker was lost",
            ConstCounter::new(self.redispatched),
        );
        registry.register(
            "hearth_hub_unserved",
            "Requests failed because no worker could take them",
            ConstCounter::new(self.unserved),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_list_workers_with_escaped_labels() {
        let snap = HubSnapshot {
            workers: vec![WorkerSnapshot {
                name: "desk \"pc\"".into(),
                model: "m".into(),
                max_concurrency: 2,
                in_flight: 1,
                completed: 7,
                hearth: true,
                addr: "10.0.0.2:5000".into(),
                connected_at: 0,
            }],
            serve_locally: true,
            waiting: 0,
            redispatched: 3,
            unserved: 0,
        };
        let mut registry = Registry::default();
        snap.register_metrics(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(out.contains("hearth_hub_workers 1\n"));
        assert!(
            out.contains("hearth_hub_worker_slots{name=\"desk \\\"pc\\\"\",model=\"m\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("hearth_hub_worker_in_flight{name=\"desk \\\"pc\\\"\",model=\"m\"} 1\n")
        );
        assert!(out.contains(
            "hearth_hub_worker_completed_total{name=\"desk \\\"pc\\\"\",model=\"m\"} 7\n"
        ));
        assert!(out.contains("hearth_hub_redispatched_total 3\n"));
    }
}
