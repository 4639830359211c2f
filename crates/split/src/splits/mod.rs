//! [`Splits`]: this node's split models (started, stopped, their placements; the tunnels and
//! worker process of each in `owner`) and the peers' split models it hosts (`host`).

pub mod host;
mod owner;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use hearth_cluster::Context;
use hearth_protocol::ModelId;
use tokio_util::sync::CancellationToken;

use crate::error::SplitError;
use crate::layout::SplitLayout;

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
