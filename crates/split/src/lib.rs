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
//!
//! Architecture invariant: `hearth-split` sits on the cluster and knows this node through the
//! cluster's `Context` only: no HTTP door, no `AppState`. It joins the rest with [`attach`]
//! (the route's auto-split and the cluster's tunnels); the doors call [`Splits`].

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

use hearth_cluster::tunnel::Offer;
use hearth_cluster::Context;

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
    #[error("not enough memory to split {model}: {why}")]
    NoRoom { model: String, why: String },
    #[error("starting the worker process: {0}")]
    Worker(#[from] std::io::Error),
    #[error("the split of {0} was ended while it started")]
    Stopped(String),
}

/// Where a split model's layers are.
#[derive(Debug, Clone, Serialize)]
pub struct SplitLayout {
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
    /// Whether it also holds the model's output layer (the last peer that has layers).
    pub output: bool,
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
    placement: SplitLayout,
    /// The model's file.
    path: PathBuf,
    stop: CancellationToken,
    /// The worker process now, whose connections alone the tunnels' local ends take.
    worker_pid: Option<u32>,
    /// Why each tunnel that ended did (which peer was lost).
    lost: Vec<String>,
}

/// This node's split models, and whether it shares its own memory with peers' ones.
pub struct Splits {
    /// The most memory peers' split models may have here (`u64::MAX`: what is free); `None`
    /// when this node does not share its memory.
    share_memory: Option<u64>,
    /// Where this node's doors listen (its workers join it there).
    node_addr: SocketAddr,
    data_dir: PathBuf,
    /// What this node's workers present to its `/node` door (random, never leaves the machine).
    token: String,
    running: Mutex<HashMap<ModelId, Running>>,
    /// Peers' split models served here.
    hosted: host::Hosted,
    /// The tasks that run this node's workers, and the signal that stops them as a node
    /// stops ([`Splits::stop_workers`]).
    workers: tokio_util::task::TaskTracker,
    closing: CancellationToken,
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

/// Where a split model's layers go: this machine's, each peer's, and which peer also holds
/// the output layer (llama.cpp offloads the last layers and then the output, as one more
/// unit of `n_gpu_layers`: `remote_units`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shares {
    local: u32,
    peers: Vec<u32>,
    output_on: usize,
    remote_units: u32,
}

/// `n` layers of a model that needs `need` bytes, between this machine (offering
/// `local_offer` bytes) and its peers.
///
/// llama.cpp counts `n + 1` units (the layers and the output layer) and offloads the last
/// ones; the units this machine gives away are in proportion to what the peers offer against
/// what all offer. Among the peers they are divided in proportion to each one's offer too,
/// as llama.cpp divides units by a tensor split (which the worker is given: each peer's count,
/// so llama.cpp places exactly these), and the output goes with the last unit (the owner lists
/// the peers by offer, the largest last, so it holds the output). Then the count
/// nearest the proportion (more given away on a tie) with which no machine holds more than it
/// offers is taken (each unit, the output too, taken as `need / n`), or none when there is no
/// such count. This machine keeps a layer, and each split gives away at least one.
fn place(n: u32, need: u64, local_offer: u64, peers: &[Offer]) -> Result<Shares, String> {
    let offered: u64 = peers.iter().map(|p| p.memory).fold(0, u64::saturating_add);
    let all = offered.saturating_add(local_offer);
    let mib = |b: u64| b >> 20;
    if peers.is_empty() || n < 2 || all < need {
        return Err(format!(
            "it needs about {} MiB; this machine gives {} MiB and its peers {} MiB",
            mib(need),
            mib(local_offer),
            mib(offered)
        ));
    }
    let units = n + 1;
    let per_unit = need.div_ceil(u64::from(n));
    let fits = |count: u32, offer: u64| u64::from(count).saturating_mul(per_unit) <= offer;
    let offers: Vec<u64> = peers.iter().map(|p| p.memory).collect();
    let proportion = f64::from(units) * offered as f64 / all.max(1) as f64;
    (2..units)
        .map(|remote| (remote, divide(remote, &offers)))
        .filter(|(remote, each)| {
            fits(units - remote, local_offer)
                && each.iter().zip(peers).all(|(&u, p)| fits(u, p.memory))
        })
        .min_by(|(a, _), (b, _)| {
            let off = |r: &u32| (f64::from(*r) - proportion).abs();
            off(a).total_cmp(&off(b)).then(b.cmp(a))
        })
        .map(|(remote, mut each)| {
            // The last unit, the output layer, is on the last device that got any.
            let output_on = each.iter().rposition(|&u| u > 0).unwrap_or(0);
            each[output_on] -= 1;
            Shares {
                local: units - remote,
                peers: each,
                output_on,
                remote_units: remote,
            }
        })
        .ok_or_else(|| {
            format!(
                "no placement keeps each machine within its offer (about {} MiB a layer; this machine gives {} MiB, its peers {})",
                mib(per_unit),
                mib(local_offer),
                peers
                    .iter()
                    .map(|p| format!("{} MiB", mib(p.memory)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// How llama.cpp divides `layers` offloaded units among devices by a tensor split of
/// `memory` (each device's weight: here what each peer offers): unit `k` goes to the first
/// device whose running share passes `k / layers`. (In `f32`, as llama.cpp computes it, so a
/// count on a boundary lands where it does there; weights that are all zero count as equal.)
/// Given the counts it returns as the split, llama.cpp places exactly those counts.
fn divide(layers: u32, memory: &[u64]) -> Vec<u32> {
    let equal = memory.iter().all(|&m| m == 0);
    let mut running = 0f32;
    let mut bounds: Vec<f32> = memory
        .iter()
        .map(|&m| {
            running += if equal { 1.0 } else { m as f32 };
            running
        })
        .collect();
    for b in &mut bounds {
        *b /= running;
    }
    let mut counts = vec![0u32; memory.len()];
    if memory.is_empty() {
        return counts;
    }
    for k in 0..layers {
        let at = k as f32 / layers as f32;
        let device = bounds.partition_point(|&b| b <= at).min(memory.len() - 1);
        counts[device] += 1;
    }
    counts
}

/// A model no longer split, served whole here again: loaded now when this node has no model
/// loaded and it fits (a request naming no model finds it, as before the split).
/// Loaded as a request would load it: it unloads when idle, as before the split.
fn serve_whole(state: &Context, id: &ModelId, path: &std::path::Path) {
    if !state.shutdown.is_cancelled()
        && state.host.engine().is_none()
        && state.host.too_large(path).is_none()
    {
        if let Err(e) = state.host.ensure(id, path.to_owned()) {
            tracing::warn!(model = %id, error = %e, "the model no longer split cannot be loaded whole");
        }
    }
}

/// Join the split to the rest of this node: the route splits a model too large for this
/// machine over the peers that share their memory when a request names it, and the cluster
/// hands the tunnels peers open to `host`.
pub fn attach(state: &Arc<Context>, splits: &Arc<Splits>) {
    let weak = Arc::downgrade(state);
    let own = splits.clone();
    state.router.set_auto_split(Box::new(move |id| {
        let (weak, splits) = (weak.clone(), own.clone());
        Box::pin(async move {
            let state = weak.upgrade().ok_or("the node is stopping")?;
            // A task of its own: a request that goes away does not leave a split half made.
            let started =
                tokio::spawn(async move { splits.start(&state, &id.0).await.map(|_| ()) });
            match started.await {
                Ok(Ok(())) | Ok(Err(SplitError::Already(_))) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(format!("the split stopped: {e}")),
            }
        })
    }));
    let own = splits.clone();
    state.serve_tunnels(Box::new(move |state, kind, tunnel| {
        let splits = own.clone();
        Box::pin(async move { host::serve(&splits, &state, &kind, tunnel).await })
    }));
}

impl Splits {
    pub fn new(share_memory: Option<u64>, node_addr: SocketAddr, data_dir: PathBuf) -> Self {
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
            workers: tokio_util::task::TaskTracker::new(),
            closing: CancellationToken::new(),
        }
    }

    /// Stop this node's workers as a node stops, before its connections close: each worker's
    /// standard input closes, so it stops as a node does (its idle sequences go to
    /// `--cache-disk`, their KV read through the tunnels still open), and one that has not
    /// ended within [`owner::WORKER_STOP_WAIT`] is killed. Returns when all have ended.
    pub async fn stop_workers(&self) {
        self.closing.cancel();
        self.workers.close();
        // Each is killed at its wait; the margin covers the kill itself.
        let bound = owner::WORKER_STOP_WAIT + std::time::Duration::from_secs(2);
        let _ = tokio::time::timeout(bound, self.workers.wait()).await;
    }

    /// The `rpc-serve` processes this node runs for peers.
    pub(crate) fn hosted(&self) -> &host::Hosted {
        &self.hosted
    }

    /// Whether peers may place layers of their split models on this machine.
    pub fn shares_memory(&self) -> bool {
        self.share_memory.is_some()
    }

    /// The most memory peers' split models may have here, when this node shares its memory.
    pub fn share_limit(&self) -> Option<u64> {
        self.share_memory
    }

    /// Whether `model` is split (its worker, not this node's engine, serves it).
    pub fn is_split(&self, model: &ModelId) -> bool {
        lock(&self.running).contains_key(model)
    }

    /// The name this node's workers join it under.
    fn worker_name(state: &Context) -> String {
        format!("{} (split)", state.node_name)
    }

    /// Every split model's placement (ready once its worker has joined this node).
    pub fn placements(&self, state: &Context) -> Vec<SplitLayout> {
        let workers = state
            .router
            .hub()
            .map(|h| h.snapshot().workers)
            .unwrap_or_default();
        let name = Self::worker_name(state);
        let serves = |m: &str| workers.iter().any(|w| w.name == name && w.model == m);
        let mut all: Vec<SplitLayout> = lock(&self.running)
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

    /// Stop serving `model` split: its worker and tunnels end, and it loads here again, at
    /// once when no other model is here and it fits, else when asked for. Whether it was
    /// split.
    pub fn stop(&self, state: &Context, model: &ModelId) -> bool {
        let r = {
            // Removed and cancelled under the lock: a start that checks its token under it
            // knows whether the entry there is its own.
            let mut running = lock(&self.running);
            let Some(r) = running.remove(model) else {
                return false;
            };
            r.stop.cancel();
            r
        };
        state.host.set_elsewhere(model, None);
        serve_whole(state, model, &r.path);
        true
    }

    /// Split `name` over the peers that share their memory: a tunnel to each, and a worker
    /// process that loads it with their share of the layers and joins this node.
    pub async fn start(
        self: &Arc<Self>,
        state: &Arc<Context>,
        name: &str,
    ) -> Result<SplitLayout, SplitError> {
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
            let placement = SplitLayout {
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
                    path: path.clone(),
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
                // Ours unless it was ended meanwhile (then the entry, if any, is a newer one).
                let mut running = lock(&self.running);
                if !stop.is_cancelled() {
                    running.remove(&split.id);
                }
                return Err(e);
            }
        };
        // Ended (DELETE) while it started: nothing more starts. The check and the mark that
        // the model is served elsewhere (the whole model here would take the requests the
        // worker is for) happen under `stop`'s lock, so each of the two sees the other.
        {
            let mut running = lock(&self.running);
            match running.get_mut(&split.id) {
                Some(r) if !stop.is_cancelled() => r.placement = placement.clone(),
                _ => {
                    attempt.cancel();
                    return Err(SplitError::Stopped(split.id.0));
                }
            }
            state.host.set_elsewhere(&split.id, Some(&split.path));
        }
        if let Some(hub) = state.router.hub() {
            hub.admit_own_workers(&self.token, self.own_ip());
        }
        state.host.unload(Some(&split.id)).await;
        // Ended while the whole model was unloading: served whole again.
        if stop.is_cancelled() {
            attempt.cancel();
            serve_whole(state, &split.id, &split.path);
            return Err(SplitError::Stopped(split.id.0));
        }
        self.workers.spawn(
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

    const MIB: u64 = 1 << 20;

    fn peer(memory_mib: u64, device_gib: u64) -> Offer {
        Offer {
            memory: memory_mib * MIB,
            device_memory: device_gib << 30,
        }
    }

    /// `place`'s shares as (this machine's layers, each peer's, which peer has the output).
    fn placed(
        n: u32,
        need: u64,
        local: u64,
        peers: &[Offer],
    ) -> Result<(u32, Vec<u32>, usize), String> {
        place(n, need, local, peers).map(|s| {
            // Every unit is somewhere: the layers, and the output once.
            assert_eq!(s.local + s.peers.iter().sum::<u32>(), n);
            assert_eq!(s.remote_units, s.peers.iter().sum::<u32>() + 1);
            (s.local, s.peers, s.output_on)
        })
    }

    #[test]
    fn layers_follow_what_each_machine_offers() {
        // Equal offers: 31 units (30 layers and the output) halved, more given away on a tie.
        assert_eq!(
            placed(30, 300 * MIB, 1024 * MIB, &[peer(1024, 24)]),
            Ok((15, vec![15], 0))
        );
        // Three machines: 31 * 2/3 = 20.7 units away, which llama.cpp divides 11 and 10, the
        // output with the second peer.
        assert_eq!(
            placed(30, 300 * MIB, 1024 * MIB, &[peer(1024, 24), peer(1024, 24)]),
            Ok((10, vec![11, 9], 1))
        );
        // A peer offering twice as much takes twice the layers.
        assert_eq!(
            placed(30, 300 * MIB, 1024 * MIB, &[peer(2048, 24)]),
            Ok((10, vec![20], 0))
        );
        // A machine too small for the model keeps what it offers room for.
        assert_eq!(
            placed(30, 300 * MIB, 50 * MIB, &[peer(1024, 24)]),
            Ok((1, vec![29], 0))
        );
        // Too little memory in all, or no peer: no placement, and the figures say why.
        let short = place(30, 3000 * MIB, 1024 * MIB, &[peer(1024, 24)]).unwrap_err();
        assert!(
            short.contains("3000 MiB") && short.contains("1024 MiB"),
            "{short}"
        );
        assert!(place(30, 300 * MIB, 1024 * MIB, &[]).is_err());
        // Offers a peer makes up cannot overflow the sum.
        let huge = Offer {
            memory: u64::MAX,
            device_memory: u64::MAX,
        };
        assert!(place(30, 300 * MIB, 1024 * MIB, &[huge, huge]).is_ok());
    }

    #[test]
    fn counts_given_as_the_tensor_split_are_placed_exactly() {
        for counts in [
            vec![11u64, 10],
            vec![3, 17, 1],
            vec![0, 5],
            vec![1, 1, 1, 28],
            vec![20, 11],
        ] {
            let n = u32::try_from(counts.iter().sum::<u64>()).unwrap();
            let want: Vec<u32> = counts.iter().map(|&c| c as u32).collect();
            assert_eq!(divide(n, &counts), want, "{counts:?}");
        }
    }

    #[test]
    fn peers_get_layers_as_llama_cpp_divides_them_and_never_past_their_offer() {
        // llama.cpp divides by a tensor split's weights: a peer with twice the weight gets
        // twice the units.
        assert_eq!(divide(30, &[8 << 30, 16 << 30]), vec![10, 20]);
        assert_eq!(divide(31, &[1, 1]), vec![16, 15]);
        assert_eq!(divide(3, &[1, 1, 1, 1]), vec![1, 1, 1, 0]);
        // Devices that report nothing are taken as equal.
        assert_eq!(divide(4, &[0, 0]), vec![2, 2]);
        // Peers take units in proportion to their offers whatever their devices' memory (about
        // 10 MiB a unit): the one offering 40 MiB one, the one offering 2 GiB 14 and the
        // output; this machine, offering as much as the latter, 15.
        let (local, peers, output_on) =
            placed(30, 300 * MIB, 2048 * MIB, &[peer(40, 24), peer(2048, 24)]).unwrap();
        assert_eq!((local, peers, output_on), (15, vec![1, 14], 1));
        // The last layers fit nowhere: refused with each machine's offer.
        assert!(place(30, 300 * MIB, 10 * MIB, &[peer(10, 24)]).is_err());
    }
}
