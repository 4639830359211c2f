//! A model split across machines with llama.cpp's RPC backend (DESIGN.md §5).
//! - This node's split models ([`Splits::start`], the rest in `owner`): an encrypted tunnel to
//!   each peer that shares its memory, and a worker process (`hearth-node serve` with the
//!   model's last layers on those tunnels) that joins this node as a provider of the route,
//!   like a hub's worker. A lost peer (its tunnel ends) stops only that process; the node and
//!   its other models go on, and the split is set up again when peers share memory.
//! - Peers' split models ([`host`]): a tunnel a peer opens starts `hearth-node rpc-serve`
//!   ([`rpc_serve`]) for it, when this node shares its memory (`--share-memory`).
//!
//! ggml's RPC server has no authentication, so it never listens where anything but its own
//! tunnel can reach it: see [`rpc_serve`].
//!
//! Architecture invariant: `hearth-split` sits on the cluster and knows this node through the
//! cluster's `Context` only: no HTTP door, no `AppState`. It joins the rest with [`attach`]
//! (the route's auto-split and the cluster's tunnels); the doors call [`Splits`].

mod attach;
mod error;
mod layout;
pub mod rpc_serve;
mod socket_owner;
mod splits;

pub use attach::attach;
pub use error::SplitError;
pub use layout::{PeerShare, SplitLayout};
pub use splits::{host, Splits};
