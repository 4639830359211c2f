//! A connected peer as a provider of the route: registered in the registry of remote
//! providers ([`hearth_hub::Hub`], which the route's placement and supervisor already use for
//! hub workers) once per model it has loaded, with its heartbeat figures. The supervisor's
//! task frames become `inferenceRequest`s (the OpenAI body inside; for a Hearth peer also the
//! task itself, so it can take a raw prompt and continue from text already sent), and the
//! peer's chunks, completion and errors become the task's events. When the connection ends
//! the registrations go, and each task's supervisor continues its answer elsewhere.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use hearth_protocol::cluster::{
    self as cm, ControlAction, ErrorCode, Heartbeat, HearthControl, InferenceChunk,
    InferenceComplete, InferenceError, InferenceRequest, Message, PeerUuid,
};
use hearth_protocol::worker::{HubFrame, Task, TaskFailure, TaskId};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::peers::Kind;
use hearth_base::thermal::ThermalLevel;
use hearth_hub::{
    Health, Hub, Route, TaskEvent, WorkerId, WorkerJoin, PROVIDER_REFUSED, WORKER_OUTBOX_CAPACITY,
};

/// The body key that carries a Hearth task between Hearth nodes (TealeNet peers never see it).
pub(crate) const HEARTH_TASK_KEY: &str = "hearth_task";

/// One registration: a model the peer serves.
#[derive(Debug)]
struct Registered {
    model: String,
    worker: WorkerId,
    forward: JoinHandle<()>,
}

/// What the route asks of the peer for one of its tasks.
#[derive(Debug)]
pub(crate) enum Ask {
    /// A task frame (a new task, or a stop).
    Frame(HubFrame),
    /// Pause or resume a task (Hearth peers only).
    Control(TaskId, ControlAction),
}

/// The peer's side of the route, owned by its connection.
#[derive(Debug)]
pub(crate) struct Provider {
    hub: Hub,
    kind: Kind,
    name: String,
    addr: SocketAddr,
    slots: usize,
    registered: Vec<Registered>,
    /// Task frames and controls from every registration, to the connection.
    frames: mpsc::Sender<(WorkerId, Ask)>,
    requests: HashMap<PeerUuid, (WorkerId, TaskId)>,
    by_task: HashMap<(WorkerId, TaskId), PeerUuid>,
}

impl Provider {
    /// A provider with nothing registered yet, and where its task frames arrive.
    pub(crate) fn new(
        hub: Hub,
        kind: Kind,
        name: String,
        addr: SocketAddr,
        slots: usize,
    ) -> (Self, mpsc::Receiver<(WorkerId, Ask)>) {
        let (frames, rx) = mpsc::channel(WORKER_OUTBOX_CAPACITY);
        let me = Self {
            hub,
            kind,
            name,
            addr,
            slots,
            registered: Vec::new(),
            frames,
            requests: HashMap::new(),
            by_task: HashMap::new(),
        };
        (me, rx)
    }

    /// The peer's loaded models now: register new ones, drop the ones it unloaded (their
    /// requests there are cancelled, and continued elsewhere by their supervisors). The
    /// cancellations to send.
    pub(crate) fn models(&mut self, loaded: &[String]) -> Vec<Message> {
        // Sets, not searches in lists: linear in what the peer sent (bounded when it was read,
        // `hearth_protocol::limits::MAX_PEER_MODELS`).
        let wanted: HashSet<&str> = loaded.iter().map(String::as_str).collect();
        let mut dropped = HashSet::new();
        self.registered.retain(|r| {
            let keep = wanted.contains(r.model.as_str());
            if !keep {
                self.hub.unregister(r.worker);
                r.forward.abort();
                dropped.insert(r.worker);
            }
            keep
        });
        let mut cancels = Vec::new();
        if !dropped.is_empty() {
            let ids: Vec<PeerUuid> = self
                .requests
                .iter()
                .filter(|(_, (w, _))| dropped.contains(w))
                .map(|(id, _)| id.clone())
                .collect();
            for id in ids {
                if let Some((w, t)) = self.requests.remove(&id) {
                    self.by_task.remove(&(w, t));
                }
                cancels.push(cancelled(id));
            }
        }
        let mut have: HashSet<String> = self.registered.iter().map(|r| r.model.clone()).collect();
        for model in loaded {
            if model.is_empty() || !have.insert(model.clone()) {
                continue;
            }
            let (outbox, mut rx) = mpsc::channel::<HubFrame>(WORKER_OUTBOX_CAPACITY);
            let (controls, mut controls_rx) = mpsc::channel(WORKER_OUTBOX_CAPACITY);
            let hearth = self.kind == Kind::Hearth;
            let worker = self.hub.register(
                WorkerJoin {
                    model: model.clone(),
                    name: self.name.clone(),
                    max_concurrency: self.slots,
                    hearth,
                    // Said by its heartbeats instead.
                    vision: false,
                    addr: self.addr,
                    peer: true,
                },
                outbox,
                CancellationToken::new(),
                hearth.then_some(controls),
            );
            let to_session = self.frames.clone();
            let forward = tokio::spawn(async move {
                loop {
                    // A task's frame before any control of it (a pause right after a
                    // takeover must reach the peer after the task it pauses).
                    let ask = tokio::select! {
                        biased;
                        f = rx.recv() => match f {
                            Some(f) => Ask::Frame(f),
                            None => break,
                        },
                        Some((task, action)) = controls_rx.recv() => Ask::Control(task, action),
                    };
                    if to_session.send((worker, ask)).await.is_err() {
                        break;
                    }
                }
            });
            self.registered.push(Registered {
                model: model.clone(),
                worker,
                forward,
            });
        }
        cancels
    }

    /// The peer's heartbeat: its figures for placement, and its models; the cancellations to
    /// send (see [`Provider::models`]).
    pub(crate) fn health(&mut self, hb: &Heartbeat) -> Vec<Message> {
        let cancels = self.models(&hb.loaded_models);
        let health = Health {
            queue_depth: usize::try_from(hb.queue_depth).unwrap_or(usize::MAX),
            throttle: hb.throttle_level,
            thermal: match hb.thermal_level {
                cm::ThermalLevel::Nominal => ThermalLevel::Nominal,
                cm::ThermalLevel::Fair => ThermalLevel::Fair,
                cm::ThermalLevel::Serious => ThermalLevel::Serious,
                cm::ThermalLevel::Critical => ThermalLevel::Critical,
            },
            tokens_per_s: hb.ewma_tokens_per_second,
            vision: false,
        };
        for r in &self.registered {
            let vision = hb.vision_models.contains(&r.model);
            self.hub.set_health(r.worker, Health { vision, ..health });
        }
        cancels
    }

    /// What the route asks, as the message for the peer.
    pub(crate) fn message_for(&mut self, worker: WorkerId, ask: Ask) -> Option<Message> {
        let frame = match ask {
            Ask::Frame(f) => f,
            Ask::Control(task, action) => {
                let id = self.by_task.get(&(worker, task))?.clone();
                return Some(Message::HearthControl(HearthControl {
                    request_id: id,
                    action,
                }));
            }
        };
        match frame {
            HubFrame::Task(task) => {
                let model = self
                    .registered
                    .iter()
                    .find(|r| r.worker == worker)
                    .map(|r| r.model.clone())?;
                let id = PeerUuid::from_bytes(*uuid::Uuid::new_v4().as_bytes());
                self.requests.insert(id.clone(), (worker, task.id));
                self.by_task.insert((worker, task.id), id.clone());
                Some(Message::InferenceRequest(InferenceRequest {
                    request_id: id,
                    request: openai_body(&model, &task, self.kind == Kind::Hearth),
                    streaming: true,
                }))
            }
            HubFrame::Stop(task) => {
                let id = self.by_task.remove(&(worker, task))?;
                self.requests.remove(&id);
                Some(cancelled(id))
            }
        }
    }

    fn live(&self, id: &PeerUuid) -> Option<(WorkerId, TaskId, mpsc::UnboundedSender<TaskEvent>)> {
        let (worker, task) = *self.requests.get(id)?;
        match self.hub.route(worker, task) {
            Route::Live(tx) => Some((worker, task, tx)),
            Route::Retired | Route::Unknown => None,
        }
    }

    /// Whether `id` is one of this node's requests (else the message is for the server side).
    pub(crate) fn owns(&self, id: &PeerUuid) -> bool {
        self.requests.contains_key(id)
    }

    pub(crate) fn on_chunk(&mut self, c: &InferenceChunk) {
        let Some((_, _, tx)) = self.live(&c.request_id) else {
            return;
        };
        let text = c.chunk.text();
        if !text.is_empty() {
            let _ = tx.send(TaskEvent::Text(text));
        }
        if let Some(n) = c.hearth_tokens.filter(|_| self.kind == Kind::Hearth) {
            let _ = tx.send(TaskEvent::Tokens(n));
        }
    }

    pub(crate) fn on_complete(&mut self, c: InferenceComplete) {
        if let Some((_, _, tx)) = self.live(&c.request_id) {
            if let Some(done) = c.hearth_done.filter(|_| self.kind == Kind::Hearth) {
                let _ = tx.send(TaskEvent::Done(done));
            }
        }
        self.end(&c.request_id);
    }

    pub(crate) fn on_error(&mut self, e: InferenceError) {
        if let Some((_, _, tx)) = self.live(&e.request_id) {
            // A peer that cannot take it now (busy, stopping, without the model): the answer
            // goes on elsewhere, not on this peer. Anything else is the answer's error.
            let code = match e.code {
                // A Hearth peer says when the request itself was at fault.
                _ if self.kind == Kind::Hearth && e.hearth_code.is_some() => {
                    e.hearth_code.clone().unwrap_or_default()
                }
                Some(
                    ErrorCode::Unavailable
                    | ErrorCode::QueueFull
                    | ErrorCode::ModelNotLoaded
                    | ErrorCode::Timeout,
                ) => PROVIDER_REFUSED.to_owned(),
                Some(c) => c.as_str().to_owned(),
                None => "internal_error".to_owned(),
            };
            let _ = tx.send(TaskEvent::Failed(TaskFailure {
                code,
                message: e.error_message,
            }));
        }
        self.end(&e.request_id);
    }

    /// The request ended: free its slot and tell its supervisor.
    fn end(&mut self, id: &PeerUuid) {
        let Some((worker, task)) = self.requests.remove(id) else {
            return;
        };
        self.by_task.remove(&(worker, task));
        if let Route::Live(tx) = self.hub.finish(worker, task) {
            let _ = tx.send(TaskEvent::End);
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        // Unregistering drops the tasks' routes: their supervisors place them again.
        for r in self.registered.drain(..) {
            self.hub.unregister(r.worker);
            r.forward.abort();
        }
    }
}

/// This node's cancellation of its request `id` on the peer.
fn cancelled(id: PeerUuid) -> Message {
    Message::InferenceError(InferenceError {
        request_id: id,
        error_message: "cancelled by the requester".into(),
        code: Some(ErrorCode::Cancelled),
        hearth_code: None,
    })
}

/// The OpenAI body of a task, as every peer reads it; a Hearth peer also gets the task.
fn openai_body(model: &str, task: &Task, hearth: bool) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model));
    let messages: Vec<Value> = task
        .conversation()
        .into_iter()
        .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), Value::Bool(true));
    if let Some(t) = task.temperature {
        body.insert("temperature".into(), Value::from(t));
    }
    if let Some(n) = task.max_new_tokens {
        body.insert("max_tokens".into(), Value::from(n));
    }
    if let Some(ext) = &task.hearth {
        if let Some(p) = ext.top_p {
            body.insert("top_p".into(), Value::from(p));
        }
        if let Some(s) = ext.seed {
            body.insert("seed".into(), Value::from(s));
        }
        if let Some(stop) = &ext.stop {
            body.insert("stop".into(), Value::from(stop.clone()));
        }
    }
    if hearth {
        body.insert(HEARTH_TASK_KEY.into(), Value::from(task.to_json()));
    }
    body
}
