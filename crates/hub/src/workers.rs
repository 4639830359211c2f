//! The workers the hub knows: who each is ([`WorkerId`], [`WorkerJoin`], [`Health`]), what it
//! holds (its tasks, outbox and figures), and [`Workers`], the set of them behind the hub's lock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;

use hearth_base::thermal::ThermalLevel;
use hearth_protocol::worker::{HubFrame, TaskId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::tasks::{Controls, TaskEvent};

/// One worker connection, unique for the hub's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub u64);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

/// What a worker said about itself when it joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerJoin {
    pub model: String,
    pub name: String,
    pub max_concurrency: usize,
    /// It sent `hearth=1`: it understands Hearth's task extension.
    pub hearth: bool,
    /// It sent `vision=1`: its model's projector reads images.
    pub vision: bool,
    pub addr: SocketAddr,
    /// A LAN cluster peer rather than a worker of the `/node` door: never superseded by
    /// name (two machines may share one), and listed with the cluster's peers.
    pub peer: bool,
}

/// What a cluster peer's latest heartbeat said (hub workers send none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Health {
    pub queue_depth: usize,
    pub throttle: u8,
    pub thermal: ThermalLevel,
    /// Its own figure for one stream's decode speed (`ewmaTokensPerSecond`), which placement
    /// uses until this node has measured the peer itself.
    pub tokens_per_s: Option<f64>,
    /// Its copy of the worker's model sees images (the peer says so in its heartbeats).
    pub vision: bool,
}

#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) join: WorkerJoin,
    /// Seconds since the Unix epoch.
    pub(crate) connected_at: u64,
    pub(crate) outbox: mpsc::Sender<HubFrame>,
    pub(crate) controls: Option<Controls>,
    /// Cancelled to close the connection (superseded).
    pub(crate) kick: CancellationToken,
    pub(crate) tasks: HashMap<TaskId, mpsc::UnboundedSender<TaskEvent>>,
    pub(crate) retired: VecDeque<TaskId>,
    pub(crate) completed: u64,
    /// Decode speed of one stream, tokens/s: an average over the tasks this node measured
    /// there, or, before the first, what the peer says of itself (0: unknown).
    pub(crate) tokens_per_s: f64,
    /// Tasks whose speed this node measured there.
    pub(crate) measured_tasks: u64,
    pub(crate) health: Option<Health>,
}

#[derive(Debug, Default)]
pub(crate) struct Workers {
    pub(crate) workers: BTreeMap<WorkerId, Worker>,
    pub(crate) next_worker: u64,
}

/// Whether two names refer to the same model (with or without `.gguf`).
pub(crate) fn same_model(a: &str, b: &str) -> bool {
    let strip = |s: &str| s.strip_suffix(".gguf").unwrap_or(s).to_owned();
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_match_with_or_without_suffix() {
        assert!(same_model("a.gguf", "a"));
        assert!(same_model("a", "a"));
        assert!(!same_model("a", "b"));
    }
}
