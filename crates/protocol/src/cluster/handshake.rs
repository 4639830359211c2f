//! `hello` / `helloAck`: who a peer is (device id, name, hardware), what it has loaded, and
//! the hash of its cluster passcode. The strictest peer (the Swift app) needs every field of
//! `deviceInfo` and `hardware` that Hearth writes here; from peers, only the id and name are
//! required, and an unknown `chipFamily` is kept as text (it broke discovery in the reference
//! app).

use serde::{Deserialize, Serialize};

use super::ids::{AppleTime, PeerUuid};

/// The only `protocolVersion` there is.
pub const PROTOCOL_VERSION: u32 = 1;

/// `hello` and `helloAck` (the same schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    pub device_info: DeviceInfo,
    #[serde(default = "protocol_version")]
    pub protocol_version: u32,
    /// Lowercase hex SHA-256 of the passcode's UTF-8 bytes; none without a passcode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_passcode_hash: Option<String>,
    #[serde(default)]
    pub loaded_models: Vec<String>,
    #[serde(
        default,
        rename = "ownerUserID",
        skip_serializing_if = "Option::is_none"
    )]
    pub owner_user_id: Option<String>,
    /// Hearth's extension, which TealeNet peers ignore: the sender is a Hearth node and the
    /// connection continues in the encrypted transport named here. A Hearth node sends no
    /// passcode hash beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hearth: Option<HearthHello>,
}

/// The encrypted transport a Hearth node offers (in `hello`) or takes (in `helloAck`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HearthHello {
    /// The Noise protocol name, e.g. [`HEARTH_NOISE`].
    pub noise: String,
    /// In a `hello`: this connection carries one tunnel of this kind (e.g. [`RPC_TUNNEL`])
    /// instead of the cluster's messages. Bound into the handshake like the rest of `hello`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<String>,
    /// The port the sender's cluster listens on, so a peer it connected to can open a
    /// connection back to it (a split model's tunnel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// In a `hello`: other Noise protocols the sender speaks, preferred to `noise` (e.g.
    /// [`HEARTH_NOISE_AES`] on a machine with AES instructions); the `helloAck`'s `noise`
    /// names the one taken. Nodes that do not know the field take `noise`.
    #[serde(default, rename = "noiseAlso", skip_serializing_if = "Vec::is_empty")]
    pub noise_also: Vec<String>,
}

/// The tunnel of a split model: ggml's RPC protocol, raw, to a `hearth-node rpc-serve` that the
/// listening node starts for it.
pub const RPC_TUNNEL: &str = "rpc";

/// The transport every Hearth node speaks to another.
pub const HEARTH_NOISE: &str = "Noise_XXpsk3_25519_ChaChaPoly_BLAKE2s";
/// The same with AES-256-GCM, taken when both machines have AES instructions (about three
/// times ChaCha20-Poly1305's speed there; far slower than it without them).
pub const HEARTH_NOISE_AES: &str = "Noise_XXpsk3_25519_AESGCM_BLAKE2s";

fn protocol_version() -> u32 {
    PROTOCOL_VERSION
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    pub id: PeerUuid,
    pub name: String,
    #[serde(default)]
    pub hardware: Hardware,
    #[serde(default)]
    pub registered_at: AppleTime,
    #[serde(default)]
    pub last_seen_at: AppleTime,
    #[serde(default)]
    pub is_current_device: bool,
    #[serde(default)]
    pub loaded_models: Vec<String>,
}

/// A device's hardware. `chipFamily` is text: the document's values (`appleSilicon`,
/// `nvidiaGPU`, `amdGPU`, `intelCPU`, ...) and any a newer peer invents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hardware {
    #[serde(default)]
    pub chip_family: String,
    #[serde(default)]
    pub chip_name: String,
    #[serde(default, rename = "totalRAMGB")]
    pub total_ram_gb: f64,
    /// An integer on the wire (the Swift app will not read `16384.0`).
    #[serde(default)]
    pub gpu_core_count: u32,
    #[serde(default, rename = "memoryBandwidthGBs")]
    pub memory_bandwidth_gbs: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    #[serde(default, rename = "gpuVRAMGB", skip_serializing_if = "Option::is_none")]
    pub gpu_vram_gb: Option<f64>,
}
