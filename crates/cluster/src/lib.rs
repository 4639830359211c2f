//! The LAN cluster (DESIGN.md §5, `protocols/cluster-messages.md`): a TCP listener on
//! `--cluster-port` and connections this node opens to peers (`--peer`, discovery), whose
//! frames are a 4-byte big-endian length and then one cluster message's JSON (tokio-util's
//! length-delimited codec; a frame announced over [`MAX_CLUSTER_FRAME_BYTES`] closes its
//! connection before anything is allocated for it).
//!
//! Each connection is admitted by [`handshake`]: Hearth nodes go on encrypted
//! ([`secure`], Noise XXpsk3 keyed by the passcode and signed by the device identities);
//! TealeNet peers in plain text only while `--tealenet-compat` is on. Then [`connection`]
//! runs it: heartbeats and liveness, the peer's requests served by this node's engine
//! ([`serve`]), and the peer as a provider of this node's route ([`provider`]). [`dial`]
//! keeps the connections this node opens, with backoff. Listener connections count against
//! the doors' per-address cap.
//!
//! Architecture invariant: `hearth-cluster` knows this node only through its [`Context`]: no
//! HTTP door, no `AppState`, no split. What a higher part adds to a connection (a split's
//! tunnels) it registers here ([`Context::serve_tunnels`]), as the split does.

mod connection;
pub mod context;
pub mod dial;
mod discovery;
mod handshake;
mod link;
pub mod metrics;
pub mod peers;
mod provider;
mod secure;
mod serve;
pub(crate) mod sharing;
pub mod tunnel;

pub use context::{Context, Core, TunnelServer};
pub use discovery::Discovery;
pub use discovery::DiscoveryError;
pub use peers::{PeerView, Peers};

use std::net::SocketAddr;
use std::sync::Arc;

use std::collections::HashSet;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use hearth_protocol::cluster::{
    DeviceInfo, Hardware, HearthHello, Hello, PeerUuid, HEARTH_NOISE, PROTOCOL_VERSION,
};
use hearth_protocol::limits::MAX_CLUSTER_FRAME_BYTES;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;

use hearth_base::connections::{Held, PerAddress};
use hearth_hub::Hub;

/// A connection's frames before its transport is chosen.
pub(crate) type Frames = Framed<Held, LengthDelimitedCodec>;

/// How long a new connection has for its `hello` (and each handshake step).
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(10);

/// The stored settings (`hearth.db`) the UI sets.
pub const SETTING_PASSCODE: &str = "passcode";
pub const SETTING_COMPAT: &str = "tealenet_compat";

/// The cluster port when `--cluster-port` is not given.
pub const DEFAULT_CLUSTER_PORT: u16 = 8421;

/// `--cluster-port`, `--passcode`, `--tealenet-compat`, `--peer`.
#[derive(Clone)]
pub struct ClusterConfig {
    /// 0 picks a free port; None: [`DEFAULT_CLUSTER_PORT`], or a free one when that is taken.
    pub port: Option<u16>,
    /// Peers must have the same passcode (or both none). Never logged or sent in the clear;
    /// TealeNet peers get its hash, as their protocol has it.
    pub passcode: Option<String>,
    /// Take plain-text TealeNet peers.
    pub tealenet_compat: bool,
    /// Peers to connect to (`HOST:PORT`), kept connected with backoff.
    pub peers: Vec<String>,
    /// Advertise and browse `_teale._tcp` while the cluster listens on the LAN.
    pub discovery: bool,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("port", &self.port)
            .field("passcode", &self.passcode.as_ref().map(|_| "<redacted>"))
            .field("tealenet_compat", &self.tealenet_compat)
            .field("peers", &self.peers)
            .field("discovery", &self.discovery)
            .finish()
    }
}

/// `clusterPasscodeHash`: lowercase hex SHA-256 of the passcode's UTF-8 bytes, unsalted (what
/// TealeNet peers compare).
pub fn passcode_hash(passcode: &str) -> String {
    hex::encode(Sha256::digest(passcode.as_bytes()))
}

/// Largest frame before a peer is admitted: a `hello` is well under 64 KiB, and the codec
/// sets aside room for a frame as soon as it reads the frame's length.
pub(crate) const MAX_HELLO_FRAME_BYTES: usize = 64 * 1024;

/// The frame codec: a 4-byte big-endian length, then at most [`MAX_HELLO_FRAME_BYTES`] until
/// the peer is admitted, [`MAX_CLUSTER_FRAME_BYTES`] after.
pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(MAX_HELLO_FRAME_BYTES)
        .new_codec()
}

/// The limit on an admitted peer's frames.
pub(crate) const ADMITTED_FRAME_BYTES: usize = MAX_CLUSTER_FRAME_BYTES;

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
    hardware: Hardware,
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

/// What a connection is admitted by: the passcode (its hash for TealeNet peers, its key for
/// Hearth peers) and whether plain-text TealeNet peers are taken.
#[derive(Debug)]
pub struct Rules {
    pub passcode_hash: Option<String>,
    pub(crate) keys: Arc<secure::Keys>,
    pub compat: bool,
}

impl Rules {
    /// Slow: the passcode's key derivation.
    fn new(
        passcode: Option<&str>,
        compat: bool,
        identity: &Arc<hearth_auth::identity::Identity>,
    ) -> Self {
        Self {
            passcode_hash: passcode.map(passcode_hash),
            keys: Arc::new(secure::Keys::new(passcode, identity.clone())),
            compat,
        }
    }
}

/// A rough figure for CPU memory bandwidth (dual-channel DDR4), not a measurement: peers
/// that rank by it should not rank a CPU node at zero.
const CPU_MEMORY_BANDWIDTH_GBS: f64 = 25.0;

/// This machine as `hello` describes it: its GPU (the first llama.cpp uses: its backend, name
/// and video memory, all GPUs' together) where it has one, else its CPU. ggml reports no core
/// count, so `gpuCoreCount` stays 0.
fn hardware(cpu_name: String, total_ram_gb: f64, gpus: &[hearth_engine::Device]) -> Hardware {
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let cpu_family = chip_family(std::env::consts::ARCH, &cpu_name);
    let (chip_family, chip_name, gpu_backend, gpu_vram_gb) = match gpus.first() {
        Some(gpu) => (
            gpu_family(&gpu.description).unwrap_or(cpu_family),
            gpu.description.clone(),
            gpu.backend_id(),
            Some(gib(gpus.iter().map(|g| g.memory_total).sum())),
        ),
        None => (cpu_family, cpu_name, "cpu".to_owned(), None),
    };
    Hardware {
        chip_family: chip_family.into(),
        chip_name,
        total_ram_gb,
        gpu_core_count: 0,
        memory_bandwidth_gbs: CPU_MEMORY_BANDWIDTH_GBS,
        tier: Some(match (gpu_vram_gb, total_ram_gb >= 16.0) {
            (Some(_), _) => 1,
            (None, true) => 2,
            (None, false) => 3,
        }),
        gpu_backend: Some(gpu_backend),
        platform: Some(platform(std::env::consts::OS).into()),
        gpu_vram_gb,
    }
}

/// `chipFamily` of a GPU, in the values the document and the Swift app know (others: none).
fn gpu_family(description: &str) -> Option<&'static str> {
    let d = description.to_ascii_lowercase();
    if ["nvidia", "geforce", "quadro", "tesla", "rtx"]
        .iter()
        .any(|n| d.contains(n))
    {
        Some("nvidiaGPU")
    } else if ["amd", "radeon"].iter().any(|n| d.contains(n)) {
        Some("amdGPU")
    } else {
        None
    }
}

/// `chipFamily` in the values the Swift app knows for machines like this one (an unknown one
/// broke discovery in the reference app).
fn chip_family(arch: &str, brand: &str) -> &'static str {
    match arch {
        "x86_64" | "x86" if brand.to_ascii_lowercase().contains("amd") => "amdCPU",
        "x86_64" | "x86" => "intelCPU",
        "aarch64" | "arm" => "armGeneric",
        _ => "unknown",
    }
}

/// `platform` as the Swift app spells it.
fn platform(os: &str) -> &str {
    match os {
        "macos" => "macOS",
        "ios" => "iOS",
        other => other,
    }
}

/// Accept cluster connections on `listener` until `stop` is cancelled; each address may hold
/// as many connections, counted with the doors', as `--connections-per-address` allows.
pub fn listen(listener: TcpListener, me: Arc<Me>, stop: CancellationToken) -> JoinHandle<()> {
    let limits = me.state.limits;
    tokio::spawn(async move {
        let connections = tokio_util::task::TaskTracker::new();
        loop {
            let (tcp, peer): (_, SocketAddr) = tokio::select! {
                () = stop.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "cluster accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Without a passcode the transport's key is anyone's: LAN peers need one (the
            // listener may still be on the LAN after the passcode was cleared in the UI).
            if !peer.ip().to_canonical().is_loopback() && me.rules().passcode_hash.is_none() {
                tracing::warn!(%peer, "refused a LAN peer: the cluster has no passcode");
                continue;
            }
            let Some(place) = me.table.admit(peer.ip(), limits.per_address) else {
                tracing::debug!(%peer, "refused a cluster connection: too many open from this address");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            // The stream holds its place, and fails writes the peer takes nothing of for the
            // write timeout, as the doors' connections do.
            let frames = Framed::new(Held::new(tcp, place, limits.write_timeout), codec());
            let (me, stop) = (me.clone(), stop.clone());
            connections.spawn(async move {
                let admitted = tokio::select! {
                    a = handshake::accept(frames, &me) => a,
                    () = stop.cancelled() => return,
                };
                let why = match admitted {
                    Ok(a) => match tunnel::asked(&a).map(str::to_owned) {
                        Some(kind) => match tunnel::Tunnel::accepted(a, peer) {
                            Ok(t) => tokio::select! {
                                why = me.state.serve_tunnel(kind, t) => why,
                                () = stop.cancelled() => "the node is stopping".into(),
                            },
                            Err(why) => why,
                        },
                        None => connection::run(a, peer, false, me, stop).await.0,
                    },
                    Err(why) => {
                        tracing::warn!(%peer, "cluster peer refused: {why}");
                        return;
                    }
                };
                tracing::info!(%peer, "cluster peer left: {why}");
            });
        }
        connections.close();
        connections.wait().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_described_as_the_document_does() {
        let gpu = |description: &str, backend: &str, gib: u64| hearth_engine::Device {
            name: format!("{backend}0"),
            description: description.into(),
            backend: backend.into(),
            kind: hearth_engine::DeviceKind::Gpu,
            memory_total: gib << 30,
            memory_free: gib << 30,
            index: 1,
            device_id: None,
        };
        let h = hardware(
            "AMD Ryzen 9".into(),
            64.0,
            &[gpu("NVIDIA GeForce RTX 4090", "CUDA", 24)],
        );
        assert_eq!(
            (h.chip_family.as_str(), h.chip_name.as_str()),
            ("nvidiaGPU", "NVIDIA GeForce RTX 4090")
        );
        assert_eq!(h.gpu_backend.as_deref(), Some("cuda"));
        assert_eq!(h.gpu_vram_gb, Some(24.0));
        let v = hardware(
            "x".into(),
            8.0,
            &[
                gpu("AMD Radeon RX 7900 XTX (RADV NAVI31)", "Vulkan", 24),
                gpu("Intel(R) Arc(tm) A770", "Vulkan", 16),
            ],
        );
        assert_eq!(v.chip_family, "amdGPU");
        assert_eq!(v.gpu_backend.as_deref(), Some("vulkan"));
        assert_eq!(v.gpu_vram_gb, Some(40.0));
        let cpu = hardware("Intel(R) Xeon(R)".into(), 8.0, &[]);
        assert_eq!(
            (cpu.chip_family.as_str(), cpu.gpu_backend.as_deref()),
            ("intelCPU", Some("cpu"))
        );
        assert_eq!(cpu.gpu_vram_gb, None);
    }

    #[test]
    fn hardware_is_described_in_the_swift_apps_words() {
        assert_eq!(chip_family("x86_64", "AMD Ryzen 7 5800X"), "amdCPU");
        assert_eq!(
            chip_family("x86_64", "Intel(R) Xeon(R) Processor"),
            "intelCPU"
        );
        assert_eq!(chip_family("aarch64", "Cortex-A76"), "armGeneric");
        assert_eq!(chip_family("riscv64", ""), "unknown");
        assert_eq!(platform("macos"), "macOS");
        assert_eq!(platform("linux"), "linux");
    }

    #[test]
    fn the_passcode_hash_is_lowercase_hex_sha256() {
        // FIPS 180-2's test vectors.
        assert_eq!(
            passcode_hash(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            passcode_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
