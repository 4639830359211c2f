//! `heartbeat` / `heartbeatAck`: a node's health every 5 s (thermal level, throttle, queue
//! depth, whether it is generating, loaded models). The reference nodes always send
//! nominal/100; Hearth sends real values.

use serde::{Deserialize, Serialize};

use super::ids::{AppleTime, PeerUuid};

/// `heartbeat` and `heartbeatAck` (the same schema). A peer's `heartbeatAck.deviceID` may
/// differ from its `helloAck` id (the Rust node makes a fresh one): liveness is kept per
/// connection, not per id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    #[serde(rename = "deviceID")]
    pub device_id: PeerUuid,
    #[serde(default)]
    pub timestamp: AppleTime,
    #[serde(default)]
    pub thermal_level: ThermalLevel,
    /// 0 (paused) to 100 (full speed); an integer on the wire.
    #[serde(default = "full_speed", deserialize_with = "throttle")]
    pub throttle_level: u8,
    #[serde(default)]
    pub loaded_models: Vec<String>,
    #[serde(default)]
    pub is_generating: bool,
    #[serde(default)]
    pub queue_depth: u32,
    /// The passcode hash again, in the reference nodes.
    #[serde(
        default,
        rename = "organizationID",
        skip_serializing_if = "Option::is_none"
    )]
    pub organization_id: Option<String>,
    #[serde(
        default,
        rename = "ownerUserID",
        skip_serializing_if = "Option::is_none"
    )]
    pub owner_user_id: Option<String>,
    /// The sender's decode speed for one stream, tokens/s, an average (the Rust node's
    /// extension, which Hearth sends too once it has measured one).
    #[serde(
        default,
        rename = "ewmaTokensPerSecond",
        skip_serializing_if = "Option::is_none"
    )]
    pub ewma_tokens_per_second: Option<f64>,
    /// Hearth's extension: which of `loadedModels` see images (their projector is loaded),
    /// so that a request with images goes only there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vision_models: Vec<String>,
}

fn full_speed() -> u8 {
    100
}

/// A throttle level: a whole number from 0 to 100.
fn throttle<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let v = u64::deserialize(d)?;
    u8::try_from(v)
        .ok()
        .filter(|t| *t <= 100)
        .ok_or_else(|| serde::de::Error::custom(format!("throttleLevel {v} is not 0 to 100")))
}

/// The document's four thermal levels, in order of heat.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ThermalLevel {
    #[default]
    Nominal,
    Fair,
    Serious,
    Critical,
}
