//! # The route
//! One path for every request (DESIGN.md §2). Every door asks [`Router::resolve`] what the
//! model name a client gave means here (this node's model, one only remote providers serve, or
//! the door's "unknown model" error) and starts the generation with [`Router::submit`], or
//! [`Router::submit_waiting`] for doors whose protocol waits for room instead of refusing (the
//! batch door). Whatever runs it, the door gets the same [`Generation`].
//!
//! Where a request runs is decided by [`place::place`], a pure function over one record per
//! candidate (this node's engine, each hub worker, each LAN peer, and which of them ran the
//! conversation's previous turn: `affinity`); a generation placed elsewhere is driven by a
//! supervisor (`supervisor`) that continues it on another candidate when its provider is lost.
//!
//! Requests given as token ids (the batch door's continuations) are this node's tokenizer's
//! and always run here.
//!
//! Worker mode (`join`, `--join`) serves a hub's tasks (`task`) through the same route.
//!
//! Architecture invariant: every generation a door starts goes through `hearth-route`, and the
//! route knows no door's format and no HTTP: doors translate to and from its [`Generation`].
//! It reaches other machines only through the hub's reservations, never a socket of its own
//! (worker mode's one connection to its hub aside).
//!
//! [`place::place`]: hearth_hub::place::place

mod affinity;
mod continuation;
pub mod generation;
pub mod join;
mod placement;
mod router;
mod supervisor;
mod target;
pub mod task;

pub use continuation::continuation;
pub use generation::{Answerer, Control, ControlError, Events, Generation};
pub use placement::Provider;
pub use router::{Router, SplitModel};
pub use supervisor::{DISPATCH_WAIT, MAX_REDISPATCHES};
pub use target::{ResolveError, Target};
