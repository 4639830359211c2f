//! The hub's limits (task bytes, outboxes, the queue, worker slots) and its configuration,
//! [`HubConfig`]: the token workers present and how the hub uses its own engine.

use std::fmt;
use std::time::Duration;

/// The most one task may bring, counting each frame's text and [`FRAME_OVERHEAD`]: a worker
/// that sends more for one task is misbehaving, and the task fails. At one token a frame (a
/// data frame and its count, ~130 B) that is some 250,000 tokens, beyond any context a home
/// machine runs. Frames reach
/// each task's supervisor without waiting (one slow reader must not hold back the worker's
/// other tasks), so this bounds what one task's frames can hold in memory while its reader is
/// slow.
pub const MAX_TASK_BYTES: usize = 32 << 20;
/// What one relayed frame costs besides its text (the event and its allocation).
pub const FRAME_OVERHEAD: usize = 64;
/// Frames (tasks, stops) waiting to be written to one worker.
pub const WORKER_OUTBOX_CAPACITY: usize = 64;
/// Requests that may wait for a worker's slot; beyond this, submissions are refused.
pub const QUEUE_CAPACITY: usize = 64;
/// Ids of tasks the hub stopped, remembered per worker so that frames still on their way are
/// dropped quietly instead of being reported as unknown.
pub(crate) const RETIRED_MEMORY: usize = 256;
/// The failure code of a task its provider would not take (a LAN peer that is busy, stopping
/// or without the model): the supervisor places it again, avoiding that provider.
pub const PROVIDER_REFUSED: &str = "provider_refused";
/// A worker may not claim more slots than this (a bad value must not attract every request).
pub const MAX_WORKER_CONCURRENCY: usize = 256;

/// `--hub-token` and how the hub uses its own engine.
#[derive(Clone)]
pub struct HubConfig {
    /// Workers must present it as `?token=`. Never logged. None: the `/node` door is closed
    /// and the registry holds only the LAN cluster's peers.
    pub token: Option<String>,
    /// Whether this node's own engine takes requests too (`--hub-local`, default true); when
    /// false the hub only routes to workers, except the batch door's token-id prompts, which
    /// only this node's tokenizer can read.
    pub serve_locally: bool,
    /// A task on a worker that brings no frame for this long is treated as lost: stopped
    /// there and placed again (a worker alive but stuck). Long enough for any prefill.
    pub task_silence: Duration,
}

/// Ten minutes: a long prompt's prefill on a slow machine takes minutes, never ten.
pub const DEFAULT_TASK_SILENCE: Duration = Duration::from_secs(600);

impl HubConfig {
    pub fn new(token: String, serve_locally: bool) -> Self {
        Self {
            token: Some(token),
            serve_locally,
            task_silence: DEFAULT_TASK_SILENCE,
        }
    }

    /// The registry of a node that is no hub: its LAN peers only, its own engine first.
    pub fn peers_only() -> Self {
        Self {
            token: None,
            serve_locally: true,
            task_silence: DEFAULT_TASK_SILENCE,
        }
    }
}

impl fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubConfig")
            .field("token", &"<redacted>")
            .field("serve_locally", &self.serve_locally)
            .field("task_silence", &self.task_silence)
            .finish()
    }
}
