//! The cluster's settings: the command line's (`--cluster-port`, `--passcode`,
//! `--tealenet-compat`, `--peer`), the ones the UI stores, and the passcode's hash as TealeNet
//! peers compare it.

use sha2::{Digest, Sha256};

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
