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
        self.pending.push_back(event);
        if self.pending.len() == 1 {
            self.flush();
        }
    }

    /// Push what the reader has room for; true when nothing is left.
    pub(crate) fn flush(&mut self) -> bool {
        while let Some(e) = self.pending.pop_front() {
            let sent = match self.tx.try_send(e) {
                // Ask the reader for a wake-up, then try once more: a reader that emptied the
                // channel before it could see the flag would otherwise leave this generation
                // waiting for the engine's stall poll.
                Err(mpsc::error::TrySendError::Full(e)) => {
                    self.stalled.store(true, Ordering::SeqCst);
                    self.tx.try_send(e)
                }
                other => other,
            };
            match sent {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(e)) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    fn texts(rx: &mut mpsc::Receiver<Event>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            match e {
                Event::Token(t) => out.push(t.text),
                other => panic!("unexpected event {other:?}"),
            }
        }
        out
    }

    fn token(i: usize) -> Event {
        Event::Token(crate::events::TokenEvent {
            text: i.to_string(),
            id: Some(i as i32),
            logprobs: None,
            elapsed: std::time::Duration::ZERO,
            since_prev: std::time::Duration::ZERO,
        })
    }

    #[test]
    fn an_outbox_keeps_what_a_full_reader_cannot_take_in_order_and_asks_for_a_wake_up() {
        let (tx, mut rx) = mpsc::channel(2);
        let stalled = Arc::new(AtomicBool::new(false));
        let mut out = Outbox::new(tx, stalled.clone());
        out.send(token(0));
        out.send(token(1));
        assert!(!stalled.load(Ordering::SeqCst), "room for both");
        for i in 2..5 {
            out.send(token(i));
        }
        assert!(
            stalled.load(Ordering::SeqCst),
            "a full channel asks for a wake-up"
        );
        assert_eq!(out.pending.len(), 3);
        assert_eq!(texts(&mut rx), ["0", "1"]);
        assert!(!out.flush(), "two of three fit");
        assert_eq!(texts(&mut rx), ["2", "3"]);
        assert!(out.flush());
        assert!(out.pending.is_empty());
        assert_eq!(texts(&mut rx), ["4"]);
        out.send(token(5));
        assert_eq!(
            texts(&mut rx),
            ["5"],
            "an empty outbox sends straight through"
        );
    }

    #[test]
    fn an_outbox_drops_what_it_holds_once_the_reader_is_gone() {
        let (tx, rx) = mpsc::channel(1);
        let mut out = Outbox::new(tx, Arc::new(AtomicBool::new(false)));
        out.send(token(0));
        out.send(token(1));
        assert!(!out.flush());
        drop(rx);
        assert!(out.closed());
        assert!(out.flush(), "nothing is left to deliver");
        assert!(out.pending.is_empty());
    }
}
