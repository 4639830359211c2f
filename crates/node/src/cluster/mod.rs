//! The LAN cluster (DESIGN.md §5, `protocols/cluster-messages.md`): a TCP listener on
//! `--cluster-port` whose frames are a 4-byte big-endian length and then one cluster message's
//! JSON (tokio-util's length-delimited codec; a frame announced over
//! [`MAX_CLUSTER_FRAME_BYTES`] closes its connection before anything is allocated for it).
//!
//! So far the listener takes TealeNet peers, in plain text, and only while
//! `--tealenet-compat` is on (the switch exists because such traffic is not encrypted; on the
//! LAN it also needs `--passcode`). Connections count against the doors' per-address cap. The
//! encrypted Hearth-to-Hearth transport, discovery, and peers as the route's candidates are
//! the next parts of the cluster issue. Each connection ([`connection`]) is answered as NOTES.md
//! says the real peers expect, and a peer's `inferenceRequest` is served by this node's engine
//! ([`serve`]).

mod connection;
pub mod peers;
mod serve;

pub use peers::{PeerView, Peers};

use std::net::SocketAddr;
use std::sync::Arc;

use hearth_protocol::cluster::{DeviceInfo, Hardware, PeerUuid};
use hearth_protocol::limits::MAX_CLUSTER_FRAME_BYTES;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::codec::LengthDelimitedCodec;
use tokio_util::sync::CancellationToken;

use crate::server::listen::Held;
use crate::server::AppState;

/// The cluster port when `--cluster-port` is not given.
pub const DEFAULT_CLUSTER_PORT: u16 = 8421;

/// `--cluster-port`, `--passcode`, `--tealenet-compat`.
#[derive(Clone)]
pub struct ClusterConfig {
    /// 0 picks a free port.
    pub port: u16,
    /// Peers must have the same passcode (or both none). Never logged or sent in the clear;
    /// TealeNet peers get its hash, as their protocol has it.
    pub passcode: Option<String>,
    /// Take plain-text TealeNet peers.
    pub tealenet_compat: bool,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("port", &self.port)
            .field("passcode", &self.passcode.as_ref().map(|_| "<redacted>"))
            .field("tealenet_compat", &self.tealenet_compat)
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

/// What this node tells peers about itself.
#[derive(Debug)]
pub(crate) struct Me {
    pub(crate) state: Arc<AppState>,
    pub(crate) id: PeerUuid,
    pub(crate) passcode_hash: Option<String>,
    hardware: Hardware,
}

impl Me {
    fn new(state: Arc<AppState>, config: &ClusterConfig) -> Self {
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
        let hardware = Hardware {
            chip_family: chip_family(std::env::consts::ARCH, &chip_name).into(),
            chip_name,
            total_ram_gb,
            gpu_core_count: 0,
            memory_bandwidth_gbs: CPU_MEMORY_BANDWIDTH_GBS,
            tier: Some(if total_ram_gb >= 16.0 { 2 } else { 3 }),
            gpu_backend: Some("cpu".into()),
            platform: Some(platform(std::env::consts::OS).into()),
            gpu_vram_gb: None,
        };
        Self {
            id,
            passcode_hash: config.passcode.as_deref().map(passcode_hash),
            hardware,
            state,
        }
    }

    /// The models this node serves now (its loaded model).
    pub(crate) fn loaded_models(&self) -> Vec<String> {
        self.state
            .host
            .model()
            .map(|m| vec![m.id.to_string()])
            .unwrap_or_default()
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

/// A rough figure for CPU memory bandwidth (dual-channel DDR4), not a measurement: peers
/// that rank by it should not rank a CPU node at zero.
const CPU_MEMORY_BANDWIDTH_GBS: f64 = 25.0;

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
pub(crate) fn spawn(
    listener: TcpListener,
    state: Arc<AppState>,
    config: &ClusterConfig,
    table: Arc<crate::server::listen::PerAddress>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    let (per_address, write_timeout) = (state.limits.per_address, state.limits.write_timeout);
    let me = Arc::new(Me::new(state, config));
    tokio::spawn(async move {
        let connections = tokio_util::task::TaskTracker::new();
        loop {
            let (tcp, peer): (_, SocketAddr) = tokio::select! {
                () = stop.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "cluster accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let Some(place) = table.admit(peer.ip(), per_address) else {
                tracing::debug!(%peer, "refused a cluster connection: too many open from this address");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            // The stream holds its place, and fails writes the peer takes nothing of for the
            // write timeout, as the doors' connections do.
            let stream = Held::new(tcp, place, write_timeout);
            connections.spawn(connection::run(stream, peer, me.clone(), stop.clone()));
        }
        connections.close();
        connections.wait().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
