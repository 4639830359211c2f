//! A model split across machines with llama.cpp's RPC backend (DESIGN.md §5).
//! - This node's split models ([`Splits::start`], the rest in `owner`): an encrypted tunnel to
//!   each peer that shares its memory, and a worker process (`hearth-node serve` with the
//!   model's last layers on those tunnels) that joins this node as a provider of the route,
//!   like a hub's worker. A lost peer (its tunnel ends) stops only that process; the node and
//!   its other models go on, and the split is set up again when peers share memory.
//! - Peers' split models ([`host`]): a tunnel a peer opens starts `hearth-node rpc-serve`
//!   ([`rpc_serve`]) for it, when this node shares its memory (`--share-memory`).
//!
//! ggml's RPC server has no authentication, so it never listens where anything but its own
//! tunnel can reach it: see [`rpc_serve`].

pub mod host;
mod owner;
pub mod rpc_serve;
mod socket_owner;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use hearth_protocol::ModelId;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::server::AppState;

/// Why a model could not be split.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("no model named {0} in the models folder")]
    Unknown(String),
    #[error("{0} is split already")]
    Already(String),
    #[error("{0} has no layer count in its header, so it cannot be split")]
    NoLayers(String),
    #[error("the cluster is off, so there are no peers to split over")]
    NoCluster,
    #[error("no peer shares its memory: {0}")]
    NoPeer(String),
    #[error("starting the worker process: {0}")]
    Worker(#[from] std::io::Error),
    #[error("the split of {0} was ended while it started")]
    Stopped(String),
}

/// Where a split model's layers are.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    pub model: String,
    /// Layers on this machine, and about the bytes of weights they take.
    pub local_layers: u32,
    pub local_bytes: u64,
    /// Each peer's name, address and layers.
    pub peers: Vec<PeerShare>,
    /// `loading`, `ready`, or `failed` with why.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeerShare {
    pub name: String,
    pub addr: String,
    pub layers: u32,
    /// About the bytes of weights its layers take there.
    pub bytes: u64,
}

/// About the bytes of weights `layers` of a model's `n` take: its file's share.
fn weight_bytes(size: u64, layers: u32, n: u32) -> u64 {
    size.saturating_mul(u64::from(layers)) / u64::from(n.max(1))
}

/// What a split model is: its file and layer count.
struct Split {
    id: ModelId,
    path: PathBuf,
    layers: u32,
}

struct Running {
    placement: Placement,
    stop: CancellationToken,
    /// The worker process now, whose connections alone the tunnels' local ends take.
    worker_pid: Option<u32>,
    /// Why each tunnel that ended did (which peer was lost).
    lost: Vec<String>,
}

/// This node's split models, and whether it shares its own memory with peers' ones.
pub struct Splits {
    share_memory: bool,
    /// Where this node's doors listen (its workers join it there).
    node_addr: SocketAddr,
    data_dir: PathBuf,
    /// What this node's workers present to its `/node` door (random, never leaves the machine).
    token: String,
    running: Mutex<HashMap<ModelId, Running>>,
    /// Peers' split models served here.
    hosted: host::Hosted,
}

impl std::fmt::Debug for Splits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Splits")
            .field("share_memory", &self.share_memory)
            .field("node_addr", &self.node_addr)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `n` layers between this machine and `peers` peers, evenly (this machine keeps the rest).
fn share(n: u32, peers: usize) -> (u32, Vec<u32>) {
    let machines = peers as u32 + 1;
    let each = n / machines;
    let remote = vec![each; peers];
    (n - each * peers as u32, remote)
}

impl Splits {
    pub fn new(share_memory: bool, node_addr: SocketAddr, data_dir: PathBuf) -> Self {
        use rand_core::RngCore as _;
        let mut bytes = [0u8; 32];
        rand_core::OsRng.fill_bytes(&mut bytes);
        Self {
            share_memory,
            node_addr,
            data_dir,
            token: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            running: Mutex::new(HashMap::new()),
            hosted: host::Hosted::default(),
        }
    }

    /// The `rpc-serve` processes this node runs for peers.
    pub(crate) fn hosted(&self) -> &host::Hosted {
        &self.hosted
    }

    /// Whether peers may place layers of their split models on this machine.
    pub fn shares_memory(&self) -> bool {
        self.share_memory
    }

    /// Whether `model` is split (its worker, not this node's engine, serves it).
    pub fn is_split(&self, model: &ModelId) -> bool {
        lock(&self.running).contains_key(model)
    }

    /// The name this node's workers join it under.
    fn worker_name(state: &AppState) -> String {
        format!("{} (split)", state.node_name)
    }

    /// Every split model's placement (ready once its worker has joined this node).
    pub fn placements(&self, state: &AppState) -> Vec<Placement> {
        let workers = state
            .router
            .hub()
            .map(|h| h.snapshot().workers)
            .unwrap_or_default();
        let name = Self::worker_name(state);
        let serves = |m: &str| workers.iter().any(|w| w.name == name && w.model == m);
        let mut all: Vec<Placement> = lock(&self.running)
            .values()
            .map(|r| {
                let mut p = r.placement.clone();
                if p.state == "loading" && serves(&p.model) {
                    p.state = "ready".into();
                }
                p
            })
            .collect();
        all.sort_by(|a, b| a.model.cmp(&b.model));
        all
    }

    fn set_state(&self, model: &ModelId, state: &str, error: Option<String>) {
        if let Some(r) = lock(&self.running).get_mut(model) {
            r.placement.state = state.into();
            r.placement.error = error;
        }
    }

    /// Stop serving `model` split: its worker and tunnels end, and it loads here again when
    /// asked for. Whether it was split.
    pub fn stop(&self, state: &AppState, model: &ModelId) -> bool {
        let Some(r) = lock(&self.running).remove(model) else {
            return false;
        };
        r.stop.cancel();
        state.host.set_elsewhere(model, false);
        true
    }

    /// Split `name` over the peers that share their memory: a tunnel to each, and a worker
    /// process that loads it with their share of the layers and joins this node.
    pub async fn start(
        self: &Arc<Self>,
        state: &Arc<AppState>,
        name: &str,
    ) -> Result<Placement, SplitError> {
        // A model of the folder, or one loaded here from elsewhere (`--model PATH`).
        let (id, path) = state
            .router
            .registry()
            .find(name)
            .or_else(|| {
                let id = state
                    .host
                    .models_here()
                    .into_iter()
                    .find(|id| id.matches(name))?;
                let info = state.host.model_info(&id)?;
                Some((id, info.path.clone()))
            })
            .ok_or_else(|| SplitError::Unknown(name.chars().take(200).collect()))?;
        let layers = hearth_engine::gguf::read(&path)
            .ok()
            .and_then(|g| g.block_count)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 1)
            .ok_or_else(|| SplitError::NoLayers(id.0.clone()))?;
        let stop = state.shutdown.child_token();
        // Held under this model's name from here: a second request finds it split already.
        {
            let mut running = lock(&self.running);
            if running.contains_key(&id) {
                return Err(SplitError::Already(id.0));
            }
            let placement = Placement {
                model: id.0.clone(),
                local_layers: layers,
                local_bytes: 0,
                peers: Vec::new(),
                state: "loading".into(),
                error: None,
            };
            running.insert(
                id.clone(),
                Running {
                    placement,
                    stop: stop.clone(),
                    worker_pid: None,
                    lost: Vec::new(),
                },
            );
        }
        let split = Split { id, path, layers };
        let attempt = stop.child_token();
        let (placement, endpoints) = match self.launch(state, &split, &attempt).await {
            Ok(l) => l,
            Err(e) => {
                lock(&self.running).remove(&split.id);
                return Err(e);
            }
        };
        // Ended (DELETE) while it started: nothing more starts.
        match lock(&self.running).get_mut(&split.id) {
            Some(r) if !stop.is_cancelled() => r.placement = placement.clone(),
            _ => {
                attempt.cancel();
                return Err(SplitError::Stopped(split.id.0));
            }
        }
        if let Some(hub) = state.router.hub() {
            hub.admit_own_workers(&self.token, self.own_ip());
        }
        // The whole model here would take the requests the worker is for.
        state.host.set_elsewhere(&split.id, true);
        state.host.unload(Some(&split.id)).await;
        tokio::spawn(
            self.clone()
                .run(state.clone(), split, (endpoints, attempt), stop),
        );
        tracing::info!(?placement, "splitting a model across peers");
        Ok(placement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_shared_evenly_and_this_machine_keeps_the_rest() {
        assert_eq!(share(30, 1), (15, vec![15]));
        assert_eq!(share(30, 2), (10, vec![10, 10]));
        assert_eq!(share(31, 2), (11, vec![10, 10]));
        assert_eq!(share(2, 3), (2, vec![0, 0, 0]));
    }
}
