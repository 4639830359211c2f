//! The LAN cluster (DESIGN.md §5, `protocols/cluster-messages.md`): a TCP listener on
//! `--cluster-port` whose frames are a 4-byte big-endian length and then one cluster message's
//! JSON (tokio-util's length-delimited codec; a frame announced over
//! [`MAX_CLUSTER_FRAME_BYTES`] closes its connection before anything is allocated for it).
//!
//! So far the listener takes TealeNet peers, in plain text, and only while
//! `--tealenet-compat` is on (the switch exists because such traffic is not encrypted). The
//! encrypted Hearth-to-Hearth transport, discovery, and peers as the route's candidates are
//! the next parts of the cluster issue. Each connection ([`connection`]) is answered as NOTES.md
//! says the real peers expect, and a peer's `inferenceRequest` is served by this node's engine
//! ([`serve`]).

mod connection;
mod serve;

use std::net::SocketAddr;
use std::sync::Arc;

use hearth_protocol::cluster::{DeviceInfo, Hardware, PeerUuid};
use hearth_protocol::limits::MAX_CLUSTER_FRAME_BYTES;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::codec::LengthDelimitedCodec;
use tokio_util::sync::CancellationToken;

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

/// The frame codec: a 4-byte big-endian length, then at most [`MAX_CLUSTER_FRAME_BYTES`].
pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(MAX_CLUSTER_FRAME_BYTES)
        .new_codec()
}

/// What this node tells peers about itself.
#[derive(Debug)]
pub(crate) struct Me {
    pub(crate) state: Arc<AppState>,
    pub(crate) id: PeerUuid,
    pub(crate) passcode_hash: Option<String>,
    pub(crate) tealenet_compat: bool,
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
        let hardware = Hardware {
            chip_family: "cpu".into(),
            chip_name,
            total_ram_gb: ram as f64 / f64::from(1u32 << 30),
            gpu_core_count: 0,
            memory_bandwidth_gbs: 0.0,
            tier: None,
            gpu_backend: Some("cpu".into()),
            platform: Some(std::env::consts::OS.into()),
            gpu_vram_gb: None,
        };
        Self {
            id,
            passcode_hash: config.passcode.as_deref().map(passcode_hash),
            tealenet_compat: config.tealenet_compat,
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

/// Accept cluster connections on `listener` until `stop` is cancelled.
pub(crate) fn spawn(
    listener: TcpListener,
    state: Arc<AppState>,
    config: &ClusterConfig,
    stop: CancellationToken,
) -> JoinHandle<()> {
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
            let _ = tcp.set_nodelay(true);
            connections.spawn(connection::run(tcp, peer, me.clone(), stop.clone()));
        }
        connections.close();
        connections.wait().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
