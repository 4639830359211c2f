//! What travels between the engine handle and an engine thread: commands (submit, control,
//! wake), the queued submission, the per-generation outbox that holds events a slow reader
//! has not taken yet, and the courier that hands a step's events over at once. Shared by the
//! llama.cpp scheduler and the scripted engine.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Compute embeddings beside the generations.
    Embed(Box<crate::embedder::EmbedJob>),
    /// Drop every prompt cache entry of this owner, on every tier (its API key was revoked).
    Forget(crate::CacheOwner),
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
    /// The prompt's images, in order (their places in `tokens` hold stand-in ids).
    pub(crate) media: Vec<crate::media::MediaChunk>,
    /// Whose prompt cache it reads and adds to.
    pub(crate) owner: crate::CacheOwner,
}

/// An event with its room in the reader's channel already taken.
type Parcel = (mpsc::OwnedPermit<Event>, Event);

/// Collects the events of one engine step and hands them over together. Waking a reader's
/// task from the engine thread wakes a runtime worker, which preempts a decoding thread; one
/// wake per stream per step cost the engine a context switch per token. The courier instead
/// gives each step's events to one task on the runtime that started the engine (one
/// cross-thread wake per step), and that task wakes the readers from inside the runtime.
/// Without a runtime (or once it is gone) it hands the events over itself.
#[derive(Clone)]
pub(crate) struct Courier(Rc<RefCell<Post>>);

struct Post {
    pump: Option<Pump>,
    parcels: Vec<Parcel>,
}

/// The runtime task's queue, and a line that goes dead when the task has ended.
struct Pump {
    tx: mpsc::UnboundedSender<Vec<Parcel>>,
    ended: std::sync::mpsc::Receiver<()>,
}

/// How long [`Courier::close`] waits for the runtime's task to hand over what it holds.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

impl Courier {
    pub(crate) fn new(runtime: Option<&tokio::runtime::Handle>) -> Self {
        let pump = runtime.map(|rt| {
            let (tx, mut rx) = mpsc::unbounded_channel::<Vec<Parcel>>();
            let (alive, ended) = std::sync::mpsc::channel::<()>();
            rt.spawn(async move {
                let _alive = alive;
                while let Some(parcels) = rx.recv().await {
                    hand_over(parcels);
                }
            });
            Pump { tx, ended }
        });
        Self(Rc::new(RefCell::new(Post {
            pump,
            parcels: Vec::new(),
        })))
    }

    fn post(&self, parcel: Parcel) {
        self.0.borrow_mut().parcels.push(parcel);
    }

    /// Hand over everything posted since the last delivery. The engine calls this after
    /// each step's sampling on the CPU (on a GPU while the next decode runs), before a decode
    /// of prompt tokens, and before it waits for commands or pauses.
    pub(crate) fn deliver(&self) {
        self.0.borrow_mut().deliver();
    }

    /// Deliver what is left and wait (at most [`CLOSE_WAIT`]) until the runtime's task has
    /// handed everything over, so that every event is in its channel when the engine reports
    /// its final state. Later posts are handed over directly.
    pub(crate) fn close(&self) {
        let mut post = self.0.borrow_mut();
        post.deliver();
        if let Some(Pump { tx, ended }) = post.pump.take() {
            drop(tx);
            // Disconnected once the task has ended; a timeout if the runtime is stuck.
            let _ = ended.recv_timeout(CLOSE_WAIT);
        }
    }
}

impl Post {
    fn deliver(&mut self) {
        if self.parcels.is_empty() {
            return;
        }
        let parcels = std::mem::take(&mut self.parcels);
        let parcels = match &self.pump {
            Some(pump) => match pump.tx.send(parcels) {
                Ok(()) => return,
                Err(mpsc::error::SendError(parcels)) => {
                    self.pump = None;
                    parcels
                }
            },
            None => parcels,
        };
        hand_over(parcels);
    }
}

impl Drop for Post {
    /// What is posted after the last delivery still goes out when the engine stops. (A runtime
    /// that shuts down drops what its task had not handed over, together with the readers
    /// that ran on it.)
    fn drop(&mut self) {
        self.deliver();
    }
}

fn hand_over(parcels: Vec<Parcel>) {
    for (permit, event) in parcels {
        permit.send(event);
    }
}

/// Events not yet accepted by a slow reader.
pub(crate) struct Outbox {
    tx: mpsc::Sender<Event>,
    pub(crate) pending: VecDeque<Event>,
    stalled: Arc<AtomicBool>,
    courier: Courier,
}

impl Outbox {
    pub(crate) fn new(
        tx: mpsc::Sender<Event>,
        stalled: Arc<AtomicBool>,
        courier: &Courier,
    ) -> Self {
        Self {
            tx,
            pending: VecDeque::new(),
            stalled,
            courier: courier.clone(),
        }
    }

    pub(crate) fn send(&mut self, event: Event) {
        self.pending.push_back(event);
        if self.pending.len() == 1 {
            self.flush();
        }
    }

    /// Post what the reader has room for to the courier; true when nothing is left.
    pub(crate) fn flush(&mut self) -> bool {
        while let Some(e) = self.pending.pop_front() {
            let room = match self.tx.clone().try_reserve_owned() {
                // Ask the reader for a wake-up, then try once more: a reader that emptied the
                // channel before it could see the flag would otherwise leave this generation
                // waiting for the engine's stall poll.
                Err(mpsc::error::TrySendError::Full(tx)) => {
                    self.stalled.store(true, Ordering::SeqCst);
                    tx.try_reserve_owned()
                }
                other => other,
            };
            match room {
                Ok(permit) => self.courier.post((permit, e)),
                Err(mpsc::error::TrySendError::Full(_)) => {
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
        let courier = Courier::new(None);
        let mut out = Outbox::new(tx, stalled.clone(), &courier);
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
        assert!(texts(&mut rx).is_empty(), "nothing before the delivery");
        courier.deliver();
        assert_eq!(texts(&mut rx), ["0", "1"]);
        assert!(!out.flush(), "two of three fit");
        courier.deliver();
        assert_eq!(texts(&mut rx), ["2", "3"]);
        assert!(out.flush());
        assert!(out.pending.is_empty());
        courier.deliver();
        assert_eq!(texts(&mut rx), ["4"]);
        out.send(token(5));
        courier.deliver();
        assert_eq!(texts(&mut rx), ["5"], "an empty outbox posts straight away");
    }

    #[test]
    fn a_courier_hands_a_steps_events_to_every_reader_through_one_task_on_the_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let courier = Courier::new(Some(rt.handle()));
        let mut readers = Vec::new();
        let mut outboxes = Vec::new();
        for _ in 0..3 {
            let (tx, rx) = mpsc::channel(8);
            readers.push(rx);
            outboxes.push(Outbox::new(tx, Arc::new(AtomicBool::new(false)), &courier));
        }
        for step in 0..2 {
            for out in &mut outboxes {
                out.send(token(step));
            }
            courier.deliver();
        }
        // The runtime has not run yet: the events wait in its task's queue, in order.
        for rx in &mut readers {
            assert!(texts(rx).is_empty(), "delivered by the runtime's task only");
        }
        let got = rt.block_on(async {
            let mut got = Vec::new();
            for rx in &mut readers {
                let mut one = Vec::new();
                for _ in 0..2 {
                    match rx.recv().await {
                        Some(Event::Token(t)) => one.push(t.text),
                        other => panic!("unexpected {other:?}"),
                    }
                }
                got.push(one);
            }
            got
        });
        assert_eq!(got, vec![vec!["0", "1"]; 3]);
        // Once the runtime is gone, the courier hands events over itself.
        drop(rt);
        outboxes[0].send(token(2));
        courier.deliver();
        assert_eq!(texts(&mut readers[0]), ["2"]);
    }

    #[test]
    fn closing_a_courier_waits_until_the_runtime_has_handed_everything_over() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .expect("runtime");
        // The runtime's only worker is busy for a moment: the hand-over has to wait for it.
        rt.spawn(async { std::thread::sleep(Duration::from_millis(200)) });
        let courier = Courier::new(Some(rt.handle()));
        let (tx, mut rx) = mpsc::channel(8);
        let mut out = Outbox::new(tx, Arc::new(AtomicBool::new(false)), &courier);
        for i in 0..3 {
            out.send(token(i));
            courier.deliver();
        }
        courier.close();
        assert_eq!(texts(&mut rx), ["0", "1", "2"], "all in the channel");
        // Once closed, the courier hands events over itself.
        out.send(token(3));
        courier.deliver();
        assert_eq!(texts(&mut rx), ["3"]);
    }

    #[test]
    fn an_outbox_drops_what_it_holds_once_the_reader_is_gone() {
        let (tx, rx) = mpsc::channel(1);
        let mut out = Outbox::new(tx, Arc::new(AtomicBool::new(false)), &Courier::new(None));
        out.send(token(0));
        out.send(token(1));
        assert!(!out.flush());
        drop(rx);
        assert!(out.closed());
        assert!(out.flush(), "nothing is left to deliver");
        assert!(out.pending.is_empty());
    }
}
