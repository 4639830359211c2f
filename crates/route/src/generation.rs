//! What a door holds of a running generation, wherever it runs: its [`Events`] (the engine's
//! `Event`s, ending in exactly one `Done` or `Error`), its [`Control`] (stop, pause, resume,
//! modify, regenerate) and the [`Answerer`] that names the node answering. Local generations
//! wrap the engine's own handles; remote ones talk to their supervisor (`supervisor`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hearth_engine::{Controller, Event};
use hearth_protocol::{ModelId, RequestId, SamplingPatch};
use tokio::sync::{mpsc, watch};

/// A generation wherever it runs: its events and how to steer it. Dropping `events` cancels
/// it.
#[derive(Debug)]
pub struct Generation {
    pub id: RequestId,
    pub model: ModelId,
    /// Which node is answering; a re-dispatched answer moves, so read it again at the end.
    pub node: Answerer,
    pub events: Events,
    pub control: Control,
    /// The prompt's tokens, known at once when this node's engine runs it (a supervised
    /// answer's count comes with its `Done`).
    pub prompt_tokens: Option<u32>,
}

impl Generation {
    /// Running on this node's engine directly (its tokens carry this model's ids).
    pub fn is_local(&self) -> bool {
        matches!(self.events.0, EventsInner::Local(_))
    }

    pub fn local(g: hearth_engine::Generation) -> Self {
        Self {
            id: g.id,
            model: g.model.id.clone(),
            node: Answerer::this_node(),
            events: Events(EventsInner::Local(g.events)),
            control: Control(ControlInner::Local(g.control)),
            prompt_tokens: u32::try_from(g.prompt_tokens).ok(),
        }
    }
}

/// Which node a generation is running on: a worker's name, or `None` for this node (also
/// while it waits for a slot). Its job updates it when the answer is placed again.
#[derive(Debug, Clone)]
pub struct Answerer(watch::Receiver<Option<String>>);

impl Answerer {
    pub(super) fn this_node() -> Self {
        Self(watch::channel(None).1)
    }

    /// The worker answering now, `None` when it is this node.
    pub fn current(&self) -> Option<String> {
        self.0.borrow().clone()
    }
}

/// A generation's event stream (same methods as `hearth_engine::Events`).
#[derive(Debug)]
pub struct Events(EventsInner);

#[derive(Debug)]
enum EventsInner {
    Local(hearth_engine::Events),
    Remote(mpsc::Receiver<Event>),
}

impl Events {
    /// The next event; `None` once the stream has ended.
    pub async fn recv(&mut self) -> Option<Event> {
        match &mut self.0 {
            EventsInner::Local(e) => e.recv().await,
            EventsInner::Remote(rx) => rx.recv().await,
        }
    }

    /// The next event if one is ready now.
    pub fn try_recv(&mut self) -> Option<Event> {
        match &mut self.0 {
            EventsInner::Local(e) => e.try_recv(),
            EventsInner::Remote(rx) => rx.try_recv().ok(),
        }
    }
}

/// Why a control could not be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("too many controls are waiting; try again")]
    Busy,
    #[error("the generation has ended")]
    Stopped,
    #[error("{0} is not available for a generation running on a worker node")]
    Unsupported(&'static str),
}

impl From<hearth_engine::ControlError> for ControlError {
    fn from(e: hearth_engine::ControlError) -> Self {
        match e {
            hearth_engine::ControlError::Busy => Self::Busy,
            hearth_engine::ControlError::Stopped => Self::Stopped,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RemoteOp {
    Stop,
    Regenerate,
    Pause,
    Resume,
}

/// Steers one generation (same methods as `hearth_engine::Controller`).
#[derive(Debug, Clone)]
pub struct Control(ControlInner);

#[derive(Debug, Clone)]
enum ControlInner {
    Local(Controller),
    /// The supervisor's controls, and whether the place running it now can pause (this node's
    /// engine, a Hearth peer; not a worker of the `/node` door, whose protocol cannot).
    Remote(mpsc::Sender<RemoteOp>, Arc<AtomicBool>),
}

impl Control {
    pub fn stop(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.stop().map_err(Into::into),
            ControlInner::Remote(tx, _) => remote(tx, RemoteOp::Stop),
        }
    }

    pub fn pause(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.pause().map_err(Into::into),
            ControlInner::Remote(tx, pausable) if pausable.load(Ordering::Acquire) => {
                remote(tx, RemoteOp::Pause)
            }
            ControlInner::Remote(..) => Err(ControlError::Unsupported("pause")),
        }
    }

    pub fn resume(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.resume().map_err(Into::into),
            ControlInner::Remote(tx, pausable) if pausable.load(Ordering::Acquire) => {
                remote(tx, RemoteOp::Resume)
            }
            ControlInner::Remote(..) => Err(ControlError::Unsupported("resume")),
        }
    }

    /// Restart from the prompt; the stream gets `Event::Restarted`.
    pub fn regenerate(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.regenerate().map_err(Into::into),
            ControlInner::Remote(tx, _) => remote(tx, RemoteOp::Regenerate),
        }
    }

    pub fn modify(&self, patch: SamplingPatch) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.modify(patch).map_err(Into::into),
            ControlInner::Remote(..) => Err(ControlError::Unsupported("modify")),
        }
    }
}

fn remote(tx: &mpsc::Sender<RemoteOp>, op: RemoteOp) -> Result<(), ControlError> {
    tx.try_send(op).map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => ControlError::Busy,
        mpsc::error::TrySendError::Closed(_) => ControlError::Stopped,
    })
}

impl Generation {
    /// A generation that a supervisor drives: its events arrive on `events`, its controls
    /// leave on `ops`, and `answerer` names the node answering now.
    pub(super) fn remote(
        id: RequestId,
        model: ModelId,
        answerer: watch::Receiver<Option<String>>,
        events: mpsc::Receiver<Event>,
        ops: mpsc::Sender<RemoteOp>,
        pausable: Arc<AtomicBool>,
    ) -> Self {
        Self {
            id,
            model,
            node: Answerer(answerer),
            events: Events(EventsInner::Remote(events)),
            control: Control(ControlInner::Remote(ops, pausable)),
            prompt_tokens: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn remote_controls_reach_the_supervisor_or_are_refused() {
        let (tx, mut rx) = mpsc::channel(1);
        let pausable = Arc::new(AtomicBool::new(false));
        let c = Control(ControlInner::Remote(tx, pausable.clone()));
        assert_eq!(c.stop(), Ok(()));
        assert_eq!(c.regenerate(), Err(ControlError::Busy));
        assert_eq!(rx.recv().await, Some(RemoteOp::Stop));
        assert_eq!(c.pause(), Err(ControlError::Unsupported("pause")));
        assert_eq!(c.resume(), Err(ControlError::Unsupported("resume")));
        // Placed where it can pause: the supervisor gets them.
        pausable.store(true, Ordering::Release);
        assert_eq!(c.pause(), Ok(()));
        assert_eq!(rx.recv().await, Some(RemoteOp::Pause));
        assert_eq!(c.resume(), Ok(()));
        assert_eq!(rx.recv().await, Some(RemoteOp::Resume));
        assert_eq!(
            c.modify(SamplingPatch::default()),
            Err(ControlError::Unsupported("modify"))
        );
        drop(rx);
        assert_eq!(c.stop(), Err(ControlError::Stopped));
    }
}
