//! The registry of remote providers: the workers of hub mode connected on the WebSocket
//! `/node` (`serve --hub-token T`, `hearth_server::hub_door`) and the LAN cluster's peers
//! (`hearth_cluster::provider`, with their heartbeat figures and, for Hearth peers, pause and
//! resume): what model and how many slots each offers, and which tasks each is running. The
//! route (`hearth_route::Router`) places requests here; the connections feed the providers'
//! frames back to the tasks' supervisors.
//!
//! ## Invariants
//! - A worker's in-flight count is the number of routes it holds: a route is added when a task
//!   is placed on it and removed when its end frame arrives, when the hub stops the task (its
//!   late frames are then dropped quietly), or when the worker leaves. So a worker never gets
//!   more than `max_concurrency` tasks at once.
//! - A worker that leaves (closed, failed, silent, superseded) has its routes dropped; each
//!   task's supervisor sees its channel close and re-dispatches (see `hearth_route::supervisor`).
//! - At most one worker per (model, name): a new connection supersedes the old one, which is
//!   closed with 4003.
//! - The registry lock is a `std` mutex held only for bookkeeping, never across an `.await`.
//!
//! Architecture invariant: `hearth-hub` keeps the registry and decides where a request runs
//! ([`place`], a pure function: no I/O, no clock); it opens no connection and runs no model.
//! The server's `/node` door and the cluster feed it, the route acts on what it decides.

mod config;
mod hub;
pub mod place;
mod snapshot;
mod tasks;
mod workers;

pub use config::{
    HubConfig, DEFAULT_TASK_SILENCE, FRAME_OVERHEAD, MAX_TASK_BYTES, MAX_WORKER_CONCURRENCY,
    PROVIDER_REFUSED, QUEUE_CAPACITY, WORKER_OUTBOX_CAPACITY,
};
pub use hub::{Hub, QueueSlot, Reservation};
pub use snapshot::{HubSnapshot, WorkerSnapshot};
pub use tasks::{Controls, Route, TaskEvent};
pub use workers::{Health, WorkerId, WorkerJoin};
