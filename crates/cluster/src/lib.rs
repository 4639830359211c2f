//! The LAN cluster (DESIGN.md §5, `protocols/cluster-messages.md`): a TCP listener on
//! `--cluster-port` ([`listen`]) and connections this node opens to peers (`--peer`,
//! discovery), whose frames are a 4-byte big-endian length and then one cluster message's JSON
//! ([`frames`]: tokio-util's length-delimited codec; a frame announced over the limit closes
//! its connection before anything is allocated for it). Its settings are [`config`]'s; this
//! node as its peers know it is [`Me`] (`me`).
//!
//! Each connection is admitted by [`handshake`]: Hearth nodes go on encrypted
//! ([`secure`], Noise XXpsk3 keyed by the passcode and signed by the device identities);
//! TealeNet peers in plain text only while `--tealenet-compat` is on. Then [`connection`]
//! runs it: heartbeats and liveness, the peer's requests served by this node's engine
//! ([`serve`]), and the peer as a provider of this node's route ([`provider`]); a rerank
//! asked of a Hearth peer that has the reranker loaded goes beside the route (`rerank`). [`dial`]
//! keeps the connections this node opens, with backoff. Listener connections count against
//! the doors' per-address cap.
//!
//! Architecture invariant: `hearth-cluster` knows this node only through its [`Context`]: no
//! HTTP door, no `AppState`, no split. What a higher part adds to a connection (a split's
//! tunnels) it registers here ([`Context::serve_tunnels`]), as the split does.

mod asks;
mod config;
mod connection;
pub mod context;
pub mod dial;
mod discovery;
mod frames;
mod handshake;
mod hardware;
mod link;
mod listen;
mod me;
pub mod metrics;
pub mod peers;
mod provider;
mod rerank;
mod rules;
mod secure;
mod serve;
pub(crate) mod sharing;
pub mod tunnel;

pub use config::{
    passcode_hash, ClusterConfig, DEFAULT_CLUSTER_PORT, SETTING_COMPAT, SETTING_PASSCODE,
};
pub use context::{Context, Core};
pub use discovery::Discovery;
pub use discovery::DiscoveryError;
pub use listen::listen;
pub use me::Me;
pub use peers::{PeerView, Peers};
pub use rerank::{PeerRanking, PeerRerankError};
pub use rules::Rules;
pub use tunnel::TunnelServer;
