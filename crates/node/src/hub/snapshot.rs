//! What the hub shows of itself: its workers and counters as `/api/status` lists them, and as
//! Prometheus text for `/metrics`.

use std::fmt::Write as _;

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

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl HubSnapshot {
    /// The hub's metrics in Prometheus text format, appended to `out`.
    pub fn write_prometheus(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP hearth_hub_workers Workers connected to this hub."
        );
        let _ = writeln!(out, "# TYPE hearth_hub_workers gauge");
        let _ = writeln!(out, "hearth_hub_workers {}", self.workers.len());
        for (metric, kind, help) in [
            (
                "hearth_hub_worker_slots",
                "gauge",
                "Tasks the worker accepts at once (max_concurrency).",
            ),
            (
                "hearth_hub_worker_in_flight",
                "gauge",
                "Tasks the worker is running now.",
            ),
            (
                "hearth_hub_worker_completed_total",
                "counter",
                "Tasks the worker finished on this connection.",
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}");
            let _ = writeln!(out, "# TYPE {metric} {kind}");
            for w in &self.workers {
                let value = match metric {
                    "hearth_hub_worker_slots" => w.max_concurrency as u64,
                    "hearth_hub_worker_in_flight" => w.in_flight as u64,
                    _ => w.completed,
                };
                let _ = writeln!(
                    out,
                    "{metric}{{name=\"{}\",model=\"{}\"}} {value}",
                    label(&w.name),
                    label(&w.model)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP hearth_hub_waiting Requests waiting for a worker's slot."
        );
        let _ = writeln!(out, "# TYPE hearth_hub_waiting gauge");
        let _ = writeln!(out, "hearth_hub_waiting {}", self.waiting);
        let _ = writeln!(
            out,
            "# HELP hearth_hub_redispatched_total Tasks re-dispatched after their worker was lost."
        );
        let _ = writeln!(out, "# TYPE hearth_hub_redispatched_total counter");
        let _ = writeln!(out, "hearth_hub_redispatched_total {}", self.redispatched);
        let _ = writeln!(
            out,
            "# HELP hearth_hub_unserved_total Requests failed because no worker could take them."
        );
        let _ = writeln!(out, "# TYPE hearth_hub_unserved_total counter");
        let _ = writeln!(out, "hearth_hub_unserved_total {}", self.unserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_lists_workers_with_escaped_labels() {
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
        let mut out = String::new();
        snap.write_prometheus(&mut out);
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
