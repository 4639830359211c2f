//! What travels between the engine handle and an engine thread: commands (submit, control,
//! wake), the queued submission, and the per-generation outbox that holds events a slow reader
//! has not taken yet. Shared by the llama.cpp scheduler and the scripted engine.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hearth_protocol::{RequestId, SamplingParams, SamplingPatch};
use llama_cpp_2::token::LlamaToken;
use tokio::sync::mpsc;

use crate::events::Event;

/// A message to the engine thread.
pub(crate) enum Command {
    Submit(Box<Submission>),
    Control {
        id: RequestId,
        op: ControlOp,
    },
    /// Look at the shared flags (shutdown).
    Wake,
}

#[derive(Debug, Clone)]
pub(crate) enum ControlOp {
    Stop,
    Pause,
    Resume,
    Regenerate,
    Modify(SamplingPatch),
}

pub(crate) struct Submission {
    pub(crate) id: RequestId,
    pub(crate) tokens: Vec<LlamaToken>,
    pub(crate) params: SamplingParams,
    pub(crate) events: mpsc::Sender<Event>,
    /// Set by the engine when this generation's reader fell behind; the reader then wakes the
    /// engine after taking an event (see `Events::recv`).
    pub(crate) stalled: Arc<AtomicBool>,
    pub(crate) submitted: Instant,
    /// Paused while still queued: it takes its slot paused.
    pub(crate) paused: bool,
}

/// Events not yet accepted by a slow reader.
pub(crate) struct Outbox {
    tx: mpsc::Sender<Event>,
    pub(crate) pending: VecDeque<Event>,
    stalled: Arc<AtomicBool>,
}

impl Outbox {
    pub(crate) fn new(tx: mpsc::Sender<Event>, stalled: Arc<AtomicBool>) -> Self {
        Self {
            tx,
            pending: VecDeque::new(),
            stalled,
        }
    }

    pub(crate) fn send(&mut self, event: Event) {
        if self.pending.is_empty() {
            if let Err(mpsc::error::TrySendError::Full(e)) = self.tx.try_send(event) {
                self.stalled.store(true, Ordering::Release);
                self.pending.push_back(e);
            }
        } else {
            self.pending.push_back(event);
        }
    }

    /// Push what the reader has room for; true when nothing is left.
    pub(crate) fn flush(&mut self) -> bool {
        while let Some(e) = self.pending.pop_front() {
            match self.tx.try_send(e) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(e)) => {
                    self.stalled.store(true, Ordering::Release);
                    self.pending.push_front(e);
                    return false;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.pending.clear();
                    return true;
                }
            }
        }
        true
    }

    pub(crate) fn closed(&self) -> bool {
        self.tx.is_closed()
    }
}
