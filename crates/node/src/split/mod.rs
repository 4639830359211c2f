//! A model split across machines with llama.cpp's RPC backend (DESIGN.md §5).
//! - This node's split models ([`Splits::start`]): an encrypted tunnel to each peer that
//!   shares its memory, and a worker process (`hearth-node serve` with the model's last layers
//!   on those tunnels) that joins this node as a provider of the route, like a hub's worker.
//!   A lost peer kills only that process (ggml aborts it); the node and its other models go on.
//! - Peers' split models ([`host`]): a tunnel a peer opens starts `hearth-node rpc-serve`
//!   ([`rpc_serve`]) for it, when this node shares its memory (`--share-memory`).
//!
//! ggml's RPC server has no authentication, so it never listens where anything but its own
//! tunnel can reach it: see [`rpc_serve`].

pub mod host;
pub mod rpc_serve;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hearth_protocol::ModelId;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cluster::tunnel::Tunnel;
use crate::server::AppState;

/// How long a worker's ggml may take to connect to a tunnel's local end.
const WORKER_CONNECT_WAIT: Duration = Duration::from_secs(120);
/// The first pause before a lost split loads again, and the longest.
const RELOAD_FIRST: Duration = Duration::from_secs(1);
const RELOAD_MOST: Duration = Duration::from_secs(10);

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
}

/// Where a split model's layers are.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    pub model: String,
    /// Layers on this machine.
    pub local_layers: u32,
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
        }
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
        if self.is_split(&id) {
            return Err(SplitError::Already(id.0));
        }
        let layers = hearth_engine::gguf::read(&path)
            .ok()
            .and_then(|g| g.block_count)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 1)
            .ok_or_else(|| SplitError::NoLayers(id.0.clone()))?;
        let stop = state.shutdown.child_token();
        let attempt = stop.child_token();
        let (placement, endpoints) = self.launch(state, &id, layers, &attempt).await?;
        if let Some(hub) = state.router.hub() {
            hub.admit_own_workers(&self.token);
        }
        // The whole model here would take the requests the worker is for.
        state.host.set_elsewhere(&id, true);
        state.host.unload(Some(&id)).await;
        lock(&self.running).insert(
            id.clone(),
            Running {
                placement: placement.clone(),
                stop: stop.clone(),
                lost: Vec::new(),
            },
        );
        let split = Split { id, path, layers };
        tokio::spawn(
            self.clone()
                .run(state.clone(), split, (endpoints, attempt), stop),
        );
        tracing::info!(?placement, "splitting a model across peers");
        Ok(placement)
    }

    /// A tunnel to each peer that shares its memory, each carried to a local port for the
    /// worker until `attempt` is cancelled: the placement, and the ports as endpoints.
    async fn launch(
        self: &Arc<Self>,
        state: &Arc<AppState>,
        id: &ModelId,
        layers: u32,
        attempt: &CancellationToken,
    ) -> Result<(Placement, Vec<String>), SplitError> {
        let dialer = state.cluster_dialer.get().ok_or(SplitError::NoCluster)?;
        let me = dialer.me().clone();
        let mut tunnels = Vec::new();
        let mut refused = Vec::new();
        // The Hearth peers connected now, once each, where their clusters listen.
        let peers: Vec<String> = state
            .cluster_peers
            .list()
            .into_iter()
            .filter(|p| p.kind == "hearth")
            .filter_map(|p| p.listens_at)
            .collect();
        for addr in peers {
            match Tunnel::open(&me, &addr, hearth_protocol::cluster::RPC_TUNNEL).await {
                Ok(t) => tunnels.push((addr, t)),
                Err(why) => refused.push(format!("{addr}: {why}")),
            }
        }
        if tunnels.is_empty() {
            let why = if refused.is_empty() {
                "this node has no peers".to_owned()
            } else {
                refused.join("; ")
            };
            return Err(SplitError::NoPeer(why));
        }
        let (local_layers, remote) = share(layers, tunnels.len());
        let mut endpoints = Vec::new();
        let mut peers = Vec::new();
        for ((addr, tunnel), n) in tunnels.into_iter().zip(&remote) {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            endpoints.push(listener.local_addr()?.to_string());
            peers.push(PeerShare {
                name: tunnel.peer_name.clone(),
                addr,
                layers: *n,
            });
            tokio::spawn(
                self.clone()
                    .carry(id.clone(), listener, tunnel, attempt.clone()),
            );
        }
        let placement = Placement {
            model: id.0.clone(),
            local_layers,
            peers,
            state: "loading".into(),
            error: None,
        };
        Ok((placement, endpoints))
    }

    /// `hearth-node serve` for split model `id`, joining this node as a worker.
    fn worker(
        &self,
        id: &ModelId,
        path: &std::path::Path,
        endpoints: &[String],
        remote_layers: u32,
        state: &AppState,
    ) -> std::io::Result<tokio::process::Child> {
        let dir = self.data_dir.join("split").join(&id.0);
        std::fs::create_dir_all(&dir)?;
        let settings = state.host.settings();
        let hub = SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), self.node_addr.port());
        let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
        cmd.arg("serve")
            .args(["--host", "127.0.0.1", "--port", "0", "--cluster-port", "0"])
            .args(["--no-discovery", "--key-storage", "file"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--models-dir")
            .arg(dir.join("models"))
            .arg("--model")
            .arg(path)
            .args(["--parallel", &settings.slots.to_string()])
            .args(["--threads", &settings.threads.to_string()])
            .args(["--split-remote", &endpoints.join(",")])
            .args(["--split-layers", &remote_layers.to_string()])
            .args(["--join", &format!("ws://{hub}/node")])
            .args(["--name", &Self::worker_name(state)])
            .env("HEARTH_JOIN_TOKEN", &self.token)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        cmd.spawn()
    }

    /// Run the split's worker until the split stops; when the worker ends (a peer was lost:
    /// ggml aborts it), say why, and load the split again on the peers there are, once some
    /// share their memory.
    async fn run(
        self: Arc<Self>,
        state: Arc<AppState>,
        split: Split,
        first: (Vec<String>, CancellationToken),
        stop: CancellationToken,
    ) {
        let Split { id, path, layers } = split;
        let (mut endpoints, mut attempt) = first;
        loop {
            let remote = lock(&self.running)
                .get(&id)
                .map_or(0, |r| r.placement.peers.iter().map(|p| p.layers).sum());
            let why = match self.worker(&id, &path, &endpoints, remote, &state) {
                Ok(mut worker) => tokio::select! {
                    status = worker.wait() => match status {
                        Ok(s) => format!("its worker process ended ({s})"),
                        Err(e) => format!("its worker process was lost: {e}"),
                    },
                    () = stop.cancelled() => {
                        let _ = worker.kill().await;
                        return;
                    }
                },
                Err(e) => format!("its worker process could not start: {e}"),
            };
            attempt.cancel();
            // The tunnel whose end killed it, when one did, has said so by now.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let lost = lock(&self.running)
                .get_mut(&id)
                .map(|r| std::mem::take(&mut r.lost))
                .unwrap_or_default();
            let why = if lost.is_empty() {
                why
            } else {
                format!("{why}: lost {}", lost.join("; "))
            };
            tracing::warn!(model = %id, %why, "a split model stopped; loading it again when peers share memory");
            self.set_state(&id, "failed", Some(why.clone()));
            let mut delays = crate::backoff::jittered(RELOAD_FIRST, RELOAD_MOST);
            loop {
                tokio::select! {
                    () = tokio::time::sleep(delays.next().unwrap_or(RELOAD_MOST)) => {}
                    () = stop.cancelled() => return,
                }
                attempt = stop.child_token();
                match self.launch(&state, &id, layers, &attempt).await {
                    Ok((placement, e)) => {
                        endpoints = e;
                        if let Some(r) = lock(&self.running).get_mut(&id) {
                            r.placement = placement;
                        }
                        tracing::info!(model = %id, "loading a split model again");
                        break;
                    }
                    Err(e) => self.set_state(&id, "failed", Some(format!("{why}; {e}"))),
                }
            }
        }
    }
}

impl Splits {
    /// One tunnel's local end: the worker's ggml connects once, and its bytes go to the peer.
    async fn carry(
        self: Arc<Self>,
        model: ModelId,
        listener: TcpListener,
        tunnel: Tunnel,
        stop: CancellationToken,
    ) {
        let peer = format!("{} ({})", tunnel.peer_name, tunnel.peer_addr);
        let accepted = tokio::select! {
            a = tokio::time::timeout(WORKER_CONNECT_WAIT, listener.accept()) => a,
            () = stop.cancelled() => return,
        };
        drop(listener);
        let why = match accepted {
            Ok(Ok((conn, _))) => {
                let _ = conn.set_nodelay(true);
                let (from, to) = conn.into_split();
                tokio::select! {
                    why = tunnel.pump(from, to) => why,
                    () = stop.cancelled() => return,
                }
            }
            Ok(Err(e)) => format!("no local connection: {e}"),
            Err(_) => "the worker never connected".into(),
        };
        tracing::warn!(model = %model, %peer, %why, "a split model's tunnel ended");
        if let Some(r) = lock(&self.running).get_mut(&model) {
            r.lost.push(format!("{peer}: {why}"));
        }
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
