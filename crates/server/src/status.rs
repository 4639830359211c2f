//! `GET /api/status`: the node's model state (and where its layers are), engine load and the
//! devices that compute, as JSON, for scripts, tests and the UI. Read-only and cheap: it
//! copies counters and asks the drivers for free memory, never the engine thread.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use hearth_engine::ModelState;
use serde::Serialize;

use crate::state::AppState;

#[derive(Debug, Serialize)]
pub(crate) struct Status {
    model: ModelStatus,
    node: String,
    slots: usize,
    active: usize,
    queued: usize,
    tokens_generated: u64,
    requests_finished: u64,
    /// llama.cpp threads in use: `--threads`, or fewer while other programs keep cores busy.
    threads: usize,
    /// Cores' worth of CPU other programs used, as the engine last measured it (why `threads`
    /// is fewer).
    cpu_others: f64,
    /// The loaded models' KV pools and prompt caches together: tokens held, sequences saved
    /// in host memory and their bytes, tokens restored from them, requests parked for room.
    pool: hearth_engine::PoolStats,
    /// Speculation's guesses, those that held, and its measured speed-up.
    spec: hearth_engine::SpecStats,
    /// The throttle in force (0..=100) and whether serving is paused by the user.
    throttle: u8,
    paused: bool,
    /// The user's cap on the throttle (Settings), 0-100.
    throttle_cap: u8,
    /// Whether the node is shared on the LAN.
    exposed: bool,
    /// Hub mode: the workers and what they are doing.
    #[serde(skip_serializing_if = "Option::is_none")]
    hub: Option<hearth_hub::HubSnapshot>,
    /// The LAN cluster, when its port is open: the port and the peers connected now.
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ClusterStatus>,
    /// What computes: the CPU variant llama.cpp picked and the devices it found.
    compute: Compute,
}

/// What computes here.
#[derive(Debug, Serialize)]
pub(crate) struct Compute {
    /// The CPU variant llama.cpp picked at start (`icelake`, `haswell`...), and its features.
    cpu_variant: Option<String>,
    cpu_features: Vec<String>,
    /// Every device found (the CPU, GPUs, a split model's remote devices), memory free now.
    devices: Vec<hearth_engine::Device>,
}

impl Compute {
    pub(crate) fn now() -> Self {
        let backends = hearth_engine::backends();
        Self {
            cpu_variant: backends.cpu_variant,
            cpu_features: backends.cpu_features,
            devices: hearth_engine::devices::devices(),
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct ClusterStatus {
    port: u16,
    /// This node's device id, as its peers know it.
    device_id: String,
    /// The addresses this node keeps connections to (`--peer`, discovery, added by hand).
    dialing: Vec<String>,
    peers: Vec<hearth_cluster::PeerView>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ModelStatus {
    pub(crate) id: Option<String>,
    /// `loading`, `ready`, `failed`, `stopped` or `empty`.
    pub(crate) state: &'static str,
    pub(crate) progress: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// Ready: its context in tokens (one KV pool its slots share), the KV cache's type, the
    /// pool's memory, and the host memory its prompt cache may take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) context: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kv_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kv_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache_ram: Option<u64>,
    /// Ready: where its layers are (the GPU, how many, its video memory; or the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) placement: Option<hearth_engine::Placement>,
    /// Ready: the draft model guessing for it (`--draft-model`), or why the one set does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) draft: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) draft_refused: Option<String>,
    /// Ready: whether it sees images (its projector file), or why the one found does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vision: Option<bool>,
    /// It hears audio (its projector reads it); loaded models only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) audio: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) projector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) projector_refused: Option<String>,
}

impl ModelStatus {
    pub(crate) fn of(state: &ModelState) -> Self {
        let (id, name, progress, error, ctx) = match state {
            ModelState::Loading {
                model, progress, ..
            } => (Some(model.to_string()), "loading", *progress, None, None),
            ModelState::Ready(info) => (
                Some(info.id.to_string()),
                "ready",
                1.0,
                None,
                Some(info.context),
            ),
            ModelState::Failed { model, message } => (
                Some(model.to_string()),
                "failed",
                0.0,
                Some(message.clone()),
                None,
            ),
            ModelState::Stopped => (None, "stopped", 0.0, None, None),
            ModelState::Unloaded => (None, "empty", 0.0, None, None),
        };
        let ready = match state {
            ModelState::Ready(info) => Some(info),
            _ => None,
        };
        Self {
            id,
            state: name,
            progress,
            error,
            context: ctx,
            kv_type: ready.map(|i| i.kv_type.name()),
            kv_bytes: ready.map(|i| i.kv_bytes),
            cache_ram: ready.map(|i| i.cache_ram),
            placement: match state {
                ModelState::Ready(info) => Some(info.placement.clone()),
                _ => None,
            },
            draft: ready.and_then(|i| i.draft.as_ref().map(ToString::to_string)),
            draft_refused: ready.and_then(|i| i.draft_refused.clone()),
            vision: ready.map(|i| i.vision),
            audio: ready.map(|i| i.audio),
            projector: ready.and_then(|i| i.projector.as_ref().map(|p| p.display().to_string())),
            projector_refused: ready.and_then(|i| i.projector_refused.clone()),
        }
    }
}

pub(crate) async fn status(State(state): State<Arc<AppState>>) -> Json<Status> {
    let stats = state.host.stats();
    let model = ModelStatus::of(&state.host.state().borrow());
    Json(Status {
        model,
        node: state.node_name.clone(),
        slots: stats.slots,
        active: stats.active,
        queued: stats.queued,
        tokens_generated: stats.tokens_generated,
        requests_finished: stats.requests_finished,
        threads: stats.threads,
        cpu_others: (stats.cpu_others * 100.0).round() / 100.0,
        pool: stats.pool,
        spec: stats.spec,
        throttle: state.host.throttle(),
        paused: state.host.is_paused(),
        throttle_cap: state.host.throttle_cap(),
        exposed: state.exposure.is_exposed(),
        hub: state
            .router
            .hub()
            .filter(|h| h.accepts_workers())
            .map(|h| h.snapshot()),
        cluster: state.cluster.port.map(|port| ClusterStatus {
            port,
            device_id: state.identity.device_id(),
            dialing: state.dialer().map(|d| d.addresses()).unwrap_or_default(),
            peers: state.cluster.peers.list(),
        }),
        compute: Compute::now(),
    })
}
