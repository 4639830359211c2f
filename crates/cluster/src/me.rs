//! This node as its peers know it ([`Me`]): its hello and device info, the models it serves,
//! the rules its connections are admitted by, and the devices known to be Hearth nodes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};

use hearth_base::connections::PerAddress;
use hearth_hub::Hub;
use hearth_protocol::cluster::{
    DeviceInfo, Hardware, HearthHello, Hello, PeerUuid, HEARTH_NOISE, PROTOCOL_VERSION,
};

use crate::config::ClusterConfig;
use crate::context::Context;
use crate::hardware::hardware;
use crate::rules::Rules;
use crate::secure;

/// What this node is to its peers: who it is, its keys and rules, and the route's registry of
/// remote providers its peers join. One per node, shared by every connection.
#[derive(Debug)]
pub struct Me {
    pub(crate) state: Arc<Context>,
    pub(crate) id: PeerUuid,
    /// The passcode's rules now (settable from the UI while the node runs).
    rules: RwLock<Arc<Rules>>,
    pub(crate) hub: Hub,
    /// Devices that proved to be Hearth nodes: never taken in plain text.
    hearth_devices: Mutex<HashSet<PeerUuid>>,
    /// Open connections per LAN address, shared with the doors.
    pub(crate) table: Arc<PerAddress>,
    pub(crate) hardware: Hardware,
}

impl Me {
    /// Slow (the passcode's key derivation): call it from a blocking task.
    pub fn new(
        state: Arc<Context>,
        config: &ClusterConfig,
        table: Arc<PerAddress>,
    ) -> Option<Self> {
        let hub = state.router.hub()?.clone();
        let id = PeerUuid::parse(&state.identity.device_id())
            .unwrap_or_else(|| PeerUuid::from_bytes([0; 16]));
        let ram = state.telemetry.borrow().memory.total_bytes;
        let chip_name = sysinfo::System::new()
            .ok()
            .and_then(|mut sys| {
                sys.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
                sys.cpus().first().map(|c| c.brand().trim().to_owned())
            })
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
        let total_ram_gb = ram as f64 / f64::from(1u32 << 30);
        let hardware = hardware(chip_name, total_ram_gb, &hearth_engine::devices::gpus());
        Some(Self {
            id,
            rules: RwLock::new(Arc::new(Rules::new(
                config.passcode.as_deref(),
                config.tealenet_compat,
                &state.identity,
            ))),
            hub,
            hearth_devices: Mutex::new(HashSet::new()),
            table,
            hardware,
            state,
        })
    }

    /// Requests this node takes at once (what a Hearth peer is told).
    pub(crate) fn slots(&self) -> usize {
        self.state.host.stats().slots.max(1)
    }

    /// This node's `hello` (or `helloAck`): as a Hearth node (the transport offered, no
    /// passcode hash, no models: those go in the first heartbeat, encrypted) or to a TealeNet
    /// peer (the hash, as its protocol has it).
    pub(crate) fn hello(&self, hearth: bool) -> Hello {
        let mut device_info = self.device_info();
        if hearth {
            device_info.loaded_models.clear();
        }
        Hello {
            device_info,
            protocol_version: PROTOCOL_VERSION,
            cluster_passcode_hash: if hearth {
                None
            } else {
                self.rules().passcode_hash.clone()
            },
            loaded_models: if hearth {
                Vec::new()
            } else {
                self.loaded_models()
            },
            owner_user_id: None,
            hearth: hearth.then(|| HearthHello {
                noise: HEARTH_NOISE.into(),
                tunnel: None,
                port: self.state.port,
                noise_also: secure::also_offered(secure::aes_instructions()),
            }),
        }
    }

    /// The rules connections are admitted by, now.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// New rules (a passcode or compatibility set in the UI): slow (the key derivation), so it
    /// runs on the blocking pool. Every open connection closes, to be admitted again under
    /// them (the connections this node keeps reconnect by themselves).
    pub async fn set_rules(&self, passcode: Option<String>, compat: bool) {
        let identity = self.state.identity.clone();
        let rules =
            tokio::task::spawn_blocking(move || Rules::new(passcode.as_deref(), compat, &identity))
                .await
                .expect("deriving the cluster's keys does not panic");
        *self
            .rules
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(rules);
        self.state
            .peers
            .kick_all("the cluster's passcode changed: admitted again under the new one");
    }

    /// TealeNet compatibility on or off (the passcode unchanged); turned off, the TealeNet
    /// peers' connections close.
    pub fn set_compat(&self, compat: bool) {
        let now = self.rules();
        let rules = Rules {
            passcode_hash: now.passcode_hash.clone(),
            keys: now.keys.clone(),
            compat,
        };
        *self
            .rules
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(rules);
        if now.compat && !compat {
            self.state
                .peers
                .kick_tealenet("TealeNet compatibility was turned off");
        }
    }

    fn hearth_lock(&self) -> std::sync::MutexGuard<'_, HashSet<PeerUuid>> {
        self.hearth_devices
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `id` is a Hearth node's (it proved so, or announced itself as one on the LAN): it is
    /// never taken in plain text. At most [`MAX_KNOWN_HEARTH`] are kept (announcements are
    /// unauthenticated).
    pub(crate) fn remember_hearth(&self, id: &PeerUuid) {
        let mut known = self.hearth_lock();
        if known.len() < MAX_KNOWN_HEARTH {
            known.insert(id.clone());
        }
    }

    pub(crate) fn is_known_hearth(&self, id: &PeerUuid) -> bool {
        self.hearth_lock().contains(id)
    }

    /// The models this node serves now (its loaded model).
    pub(crate) fn loaded_models(&self) -> Vec<String> {
        self.state
            .host
            .loaded_models()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Those of [`Me::loaded_models`] that see images (their projector is loaded).
    pub(crate) fn vision_models(&self) -> Vec<String> {
        let host = &self.state.host;
        host.loaded_models()
            .iter()
            .filter(|m| host.model_info(m).is_some_and(|i| i.vision))
            .map(ToString::to_string)
            .collect()
    }

    pub(crate) fn device_info(&self) -> DeviceInfo {
        let now = hearth_protocol::cluster::AppleTime::now();
        DeviceInfo {
            id: self.id.clone(),
            name: self.state.node_name.clone(),
            hardware: self.hardware.clone(),
            registered_at: now,
            last_seen_at: now,
            is_current_device: true,
            loaded_models: self.loaded_models(),
        }
    }
}

/// Device ids kept as Hearth nodes', at most: far more than a LAN has.
const MAX_KNOWN_HEARTH: usize = 4096;
