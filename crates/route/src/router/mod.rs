//! The [`Router`]: this node's engine host, its models folder and the hub, shared by every
//! door. Its work is split by concern: resolving a model name, submitting a generation, and
//! splitting a model too large for this machine.

mod auto_split;
mod resolve;
mod submit;

pub use auto_split::SplitModel;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hearth_hub::Hub;
use hearth_models::{ModelHost, Registry};
use hearth_protocol::ModelId;
use tokio_util::sync::CancellationToken;

use crate::affinity;
use auto_split::AutoSplit;

/// Places generations on this node's engine or on the hub's workers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Router {
    host: Arc<ModelHost>,
    registry: Registry,
    hub: Option<Hub>,
    shutdown: CancellationToken,
    next_id: Arc<AtomicU64>,
    /// Where each conversation's latest turn ran.
    affinity: Arc<affinity::Affinity>,
    /// Splits a model too large for this machine.
    auto_split: Arc<AutoSplit>,
}

impl Router {
    pub fn new(
        host: Arc<ModelHost>,
        registry: Registry,
        hub: Option<Hub>,
        shutdown: CancellationToken,
    ) -> Self {
        let base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self {
            host,
            registry,
            hub,
            shutdown,
            // Like the engine's ids (millisecond time in the high bits), with the top bit set
            // so a remote generation's id never equals a local one.
            next_id: Arc::new(AtomicU64::new((1 << 63) | (base << 20))),
            affinity: Arc::default(),
            auto_split: Arc::default(),
        }
    }

    /// This node's engine host.
    pub fn host(&self) -> &Arc<ModelHost> {
        &self.host
    }

    pub fn hub(&self) -> Option<&Hub> {
        self.hub.as_ref()
    }

    /// The models folder, whose models this node loads when a request names one.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every model this node answers for: those loaded here (the focus model first), then its
    /// workers' and peers', then the ones in its models folder (loaded when asked for).
    pub fn models(&self) -> Vec<ModelId> {
        let mut out = self.host.models_here();
        let mut seen: std::collections::HashSet<ModelId> = out.iter().cloned().collect();
        let mut add = |m: ModelId| {
            if seen.insert(m.clone()) {
                out.push(m);
            }
        };
        if let Some(hub) = &self.hub {
            hub.models().into_iter().for_each(&mut add);
        }
        self.registry.scan_ids().into_iter().for_each(&mut add);
        out
    }
}
