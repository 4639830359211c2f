//! The one call every door makes to start a generation: [`Dispatcher::submit`]. Without hub
//! mode it is `ModelHost::submit` and nothing more. In hub mode it places the request on the
//! local engine or on a worker (`hub::pick`) and returns the same kind of stream either way: a
//! [`Generation`] whose [`Events`] yield `hearth_engine::Event`s ending in exactly one `Done` or
//! `Error`, and whose [`Control`] has the engine controller's methods.
//!
//! ## Remote generations
//! A request placed on a worker is driven by a supervisor task (`Job`): it sends the task frame,
//! turns the worker's frames into `Event::Token`s (text only: no token ids or logprobs cross
//! the worker protocol), and ends the stream with `Done` when the end frame arrives. A Hearth
//! worker reports the real finish reason and token counts first; for other workers the hub
//! counts tokens with its own tokenizer when it holds the same model, and reports zero counts
//! and `stop` otherwise. `stop` sends the stop frame and ends the stream with
//! `finish_reason: cancelled`; `regenerate` stops the task and places it again (the stream gets
//! `Restarted`); `pause`, `resume` and `modify` are refused with [`ControlError::Unsupported`].
//! A reader that drops its events stops the task.
//!
//! ## A worker lost mid-answer
//! The task is placed again (another worker, or this node's engine when it serves the model):
//! - nothing delivered yet: it simply starts over elsewhere;
//! - text delivered, and the new place can continue (this node, or a Hearth worker): it
//!   generates from the prompt plus the text already sent, so the client loses nothing and sees
//!   nothing twice (DESIGN.md §5);
//! - text delivered to a greedy request, new place a reference worker: the task restarts and
//!   the text already delivered is skipped; if the new worker's text differs, the stream ends
//!   with an error rather than contradict what was sent;
//! - text delivered to a sampled request and no place that can continue it, or no place at
//!   all: the stream ends with a clear error.
//!
//! At most [`MAX_REDISPATCHES`] losses per request. The generation's [`Answerer`] follows the
//! answer to its new place, so a door can name the node that finished it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hearth_engine::handle::EVENT_CAPACITY;
use hearth_engine::{
    Controller, Done, Event, Failure, FailureKind, Prompt, Request, SubmitError, Timing, TokenEvent,
};
use hearth_protocol::worker::{self as wp, HearthTask, Task, TaskDone, TaskFailure, STATE_PENDING};
use hearth_protocol::{
    ChatMessage, FinishReason, ModelId, RequestId, SamplingParams, SamplingPatch, Usage,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::host::ModelHost;
use crate::hub::{Hub, Placement, Reservation, TaskEvent};

/// How long a request waits for a worker's slot before it fails.
pub const DISPATCH_WAIT: Duration = Duration::from_secs(60);
/// Workers that may be lost under one request before it fails.
pub const MAX_REDISPATCHES: u32 = 3;
/// `max_new_tokens` sent to a non-Hearth worker when the request sets no limit (that field is
/// always present in the reference server's tasks).
const DEFAULT_MAX_NEW_TOKENS: i64 = 4096;
/// Controls waiting for a remote generation's supervisor.
const CONTROL_CAPACITY: usize = 8;
/// How long the supervisor waits to hand a frame to a worker's connection.
const SEND_WAIT: Duration = Duration::from_secs(5);
/// What a failure of a remote generation is reported as. `Decode` is the engine's "retrying
/// can work"; a dedicated `Unavailable` kind would say it better (see the module's notes).
const UNAVAILABLE: FailureKind = FailureKind::Decode;

/// Places generations on the local engine or on the hub's workers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    host: Arc<ModelHost>,
    hub: Option<Hub>,
    shutdown: CancellationToken,
    next_id: Arc<AtomicU64>,
}

impl Dispatcher {
    pub fn new(host: Arc<ModelHost>, hub: Option<Hub>, shutdown: CancellationToken) -> Self {
        let base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self {
            host,
            hub,
            shutdown,
            // Like the engine's ids (millisecond time in the high bits), with the top bit set
            // so a remote generation's id never equals a local one.
            next_id: Arc::new(AtomicU64::new((1 << 63) | (base << 20))),
        }
    }

    pub fn hub(&self) -> Option<&Hub> {
        self.hub.as_ref()
    }

    /// Every model this node answers for: its own (when loaded), then its workers'.
    pub fn models(&self) -> Vec<ModelId> {
        let mut out: Vec<ModelId> = self.host.model_id().into_iter().collect();
        if let Some(hub) = &self.hub {
            for m in hub.models() {
                if !out.contains(&m) {
                    out.push(m);
                }
            }
        }
        out
    }

    /// The model a client's name refers to when only workers serve it (not this node's own
    /// model): the doors accept such a request without a local `ModelInfo`.
    pub fn remote_model(&self, requested: &str) -> Option<ModelId> {
        if self.host.model().is_some_and(|i| i.id.matches(requested)) {
            return None;
        }
        self.hub.as_ref()?.serves(requested)
    }

    /// Start a generation of `model` (`None`: this node's model). Fails at once like
    /// `ModelHost::submit` for local work; a remote generation's problems arrive as an
    /// `Event::Error` on its stream.
    pub fn submit(&self, model: Option<&str>, request: Request) -> Result<Generation, SubmitError> {
        let Some(hub) = &self.hub else {
            return self.host.submit(request).map(Generation::local);
        };
        let Some(prompt) = RemotePrompt::of(&request.prompt) else {
            // Token ids mean this node's tokenizer: such requests (continuations) stay here.
            return self.host.submit(request).map(Generation::local);
        };
        let requested = model.filter(|m| !m.is_empty());
        let local = self.host.model();
        let local_match = match (&local, requested) {
            (Some(info), Some(m)) => info.id.matches(m),
            (Some(_), None) => true,
            (None, _) => false,
        };
        let target = if local_match {
            local.as_ref().map(|i| i.id.clone())
        } else {
            requested.and_then(|m| hub.serves(m))
        };
        let Some(target) = target else {
            // Neither this node nor a worker has it ready: the engine says why (loading, no
            // model); a wrong name is the door's to report.
            return self.host.submit(request).map(Generation::local);
        };
        let serve_local = local_match && hub.serves_locally();
        let need_hearth = matches!(prompt, RemotePrompt::Text(_));
        let local_free = serve_local.then(|| local_free_slots(&self.host));
        let placement = hub.place(&target, need_hearth, local_free);
        match placement {
            Placement::Local => return self.host.submit(request).map(Generation::local),
            Placement::Wait if !hub.queue_has_room() => {
                return Err(SubmitError::QueueFull {
                    slots: hub
                        .snapshot()
                        .workers
                        .iter()
                        .map(|w| w.max_concurrency)
                        .sum(),
                    queued: crate::hub::QUEUE_CAPACITY,
                    retry_after: Duration::from_secs(1),
                })
            }
            _ => {}
        }
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (events_tx, events_rx) = mpsc::channel(EVENT_CAPACITY);
        let (ops_tx, ops_rx) = mpsc::channel(CONTROL_CAPACITY);
        let first_worker = match &placement {
            Placement::Worker(r) => Some(r.worker_name.clone()),
            _ => None,
        };
        let (answerer_tx, answerer_rx) = watch::channel(first_worker);
        let now = Instant::now();
        let job = Job {
            hub: hub.clone(),
            host: self.host.clone(),
            model: target.clone(),
            prompt,
            params: request.params,
            serve_local,
            events: events_tx,
            answerer: answerer_tx,
            ops: ops_rx,
            ops_open: true,
            shutdown: self.shutdown.clone(),
            submitted: now,
            last_token: now,
            first_token: None,
            delivered: String::new(),
            frames: 0,
            losses: 0,
        };
        tokio::spawn(job.run(placement));
        Ok(Generation {
            id,
            model: target,
            node: Answerer(answerer_rx),
            events: Events(EventsInner::Remote(events_rx)),
            control: Control(ControlInner::Remote(ops_tx)),
        })
    }
}

fn local_free_slots(host: &ModelHost) -> usize {
    let s = host.stats();
    s.slots.saturating_sub(s.active + s.queued)
}

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
}

impl Generation {
    fn local(g: hearth_engine::Generation) -> Self {
        Self {
            id: g.id,
            model: g.model.id.clone(),
            node: Answerer::this_node(),
            events: Events(EventsInner::Local(g.events)),
            control: Control(ControlInner::Local(g.control)),
        }
    }
}

/// Which node a generation is running on: a worker's name, or `None` for this node (also
/// while it waits for a slot). Its job updates it when the answer is placed again.
#[derive(Debug, Clone)]
pub struct Answerer(watch::Receiver<Option<String>>);

impl Answerer {
    fn this_node() -> Self {
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
enum RemoteOp {
    Stop,
    Regenerate,
}

/// Steers one generation (same methods as `hearth_engine::Controller`).
#[derive(Debug, Clone)]
pub struct Control(ControlInner);

#[derive(Debug, Clone)]
enum ControlInner {
    Local(Controller),
    Remote(mpsc::Sender<RemoteOp>),
}

impl Control {
    pub fn stop(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.stop().map_err(Into::into),
            ControlInner::Remote(tx) => remote(tx, RemoteOp::Stop),
        }
    }

    pub fn pause(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.pause().map_err(Into::into),
            ControlInner::Remote(_) => Err(ControlError::Unsupported("pause")),
        }
    }

    pub fn resume(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.resume().map_err(Into::into),
            ControlInner::Remote(_) => Err(ControlError::Unsupported("resume")),
        }
    }

    /// Restart from the prompt; the stream gets `Event::Restarted`.
    pub fn regenerate(&self) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.regenerate().map_err(Into::into),
            ControlInner::Remote(tx) => remote(tx, RemoteOp::Regenerate),
        }
    }

    pub fn modify(&self, patch: SamplingPatch) -> Result<(), ControlError> {
        match &self.0 {
            ControlInner::Local(c) => c.modify(patch).map_err(Into::into),
            ControlInner::Remote(_) => Err(ControlError::Unsupported("modify")),
        }
    }
}

fn remote(tx: &mpsc::Sender<RemoteOp>, op: RemoteOp) -> Result<(), ControlError> {
    tx.try_send(op).map_err(|e| match e {
        mpsc::error::TrySendError::Full(_) => ControlError::Busy,
        mpsc::error::TrySendError::Closed(_) => ControlError::Stopped,
    })
}

/// How one placement of a remote job ended.
#[derive(Debug)]
enum Outcome {
    /// The stream has ended (or its reader is gone).
    Finished,
    /// Place it here next.
    Place(Placement),
    /// `regenerate`: start over from the prompt.
    Restart,
    /// The named worker disconnected mid-task.
    Lost(String),
}

/// The supervisor of one remote generation (see the module docs).
/// A prompt a worker can take. Token ids are this node's tokenizer's, so such prompts never
/// leave it and have no remote form.
#[derive(Debug, Clone)]
enum RemotePrompt {
    Chat(Vec<ChatMessage>),
    Text(String),
}

impl RemotePrompt {
    fn of(prompt: &Prompt) -> Option<Self> {
        match prompt {
            Prompt::Chat(m) => Some(Self::Chat(m.clone())),
            Prompt::Text(t) => Some(Self::Text(t.clone())),
            Prompt::Tokens(_) => None,
        }
    }

    fn to_prompt(&self) -> Prompt {
        match self {
            Self::Chat(m) => Prompt::Chat(m.clone()),
            Self::Text(t) => Prompt::Text(t.clone()),
        }
    }
}

#[derive(Debug)]
struct Job {
    hub: Hub,
    host: Arc<ModelHost>,
    model: ModelId,
    prompt: RemotePrompt,
    params: SamplingParams,
    serve_local: bool,
    events: mpsc::Sender<Event>,
    /// Who is answering now, for the door (the UI names it under the answer).
    answerer: watch::Sender<Option<String>>,
    ops: mpsc::Receiver<RemoteOp>,
    /// False once every `Control` is dropped (the reader may still be reading events).
    ops_open: bool,
    shutdown: CancellationToken,
    submitted: Instant,
    last_token: Instant,
    first_token: Option<Duration>,
    /// Text the reader has received since the start (or the last regenerate).
    delivered: String,
    /// Non-empty text frames behind `delivered`: a lower bound of its tokens, used when the
    /// hub cannot count them with the model's tokenizer.
    frames: u32,
    losses: u32,
}

impl Job {
    async fn run(mut self, first: Placement) {
        let mut next = first;
        loop {
            let outcome = match next {
                Placement::Worker(r) => self.on_worker(r).await,
                Placement::Local => self.on_local().await,
                Placement::Wait => self.wait().await,
                Placement::Nobody => {
                    self.hub.count_unserved();
                    let msg = format!("no worker serving {} is connected", self.model);
                    self.fail(msg).await;
                    Outcome::Finished
                }
            };
            next = match outcome {
                Outcome::Finished => return,
                Outcome::Place(p) => p,
                Outcome::Restart => {
                    self.delivered.clear();
                    self.frames = 0;
                    if !self.emit(Event::Restarted).await {
                        return;
                    }
                    self.place()
                }
                Outcome::Lost(worker) => {
                    self.losses += 1;
                    if self.losses > MAX_REDISPATCHES {
                        self.hub.count_unserved();
                        let msg = format!(
                            "gave up after {MAX_REDISPATCHES} workers were lost during this answer"
                        );
                        self.fail(msg).await;
                        return;
                    }
                    match self.place() {
                        Placement::Nobody => {
                            self.hub.count_unserved();
                            let msg = if self.need_hearth() && !self.delivered.is_empty() {
                                format!(
                                    "the worker {worker} disconnected mid-answer; the answer was sampled (temperature > 0), so only this node or a Hearth worker could continue it, and none serving {} has room",
                                    self.model
                                )
                            } else {
                                format!(
                                    "the worker {worker} disconnected mid-answer and no other worker serves {}",
                                    self.model
                                )
                            };
                            self.fail(msg).await;
                            return;
                        }
                        p => {
                            self.hub.count_redispatch();
                            tracing::info!(%worker, delivered = self.delivered.len(), "re-dispatching an answer whose worker was lost");
                            p
                        }
                    }
                }
            };
        }
    }

    /// Raw prompts, and sampled answers with text already delivered, need a place that
    /// understands Hearth's extension (or this node).
    fn need_hearth(&self) -> bool {
        matches!(self.prompt, RemotePrompt::Text(_))
            || (!self.delivered.is_empty() && !self.params.is_greedy())
    }

    fn local_candidate(&self) -> bool {
        self.serve_local && self.host.model().is_some_and(|i| i.id == self.model)
    }

    fn place(&self) -> Placement {
        let local_free = self.local_candidate().then(|| local_free_slots(&self.host));
        self.hub.place(&self.model, self.need_hearth(), local_free)
    }

    async fn emit(&self, event: Event) -> bool {
        self.events.send(event).await.is_ok()
    }

    async fn emit_text(&mut self, text: String) -> bool {
        let now = Instant::now();
        if self.first_token.is_none() {
            self.first_token = Some(now.duration_since(self.submitted));
        }
        self.delivered.push_str(&text);
        self.frames += 1;
        let event = Event::Token(TokenEvent {
            text,
            id: None,
            logprobs: None,
            elapsed: now.duration_since(self.submitted),
            since_prev: now.duration_since(self.last_token),
        });
        self.last_token = now;
        self.emit(event).await
    }

    async fn fail(&self, message: String) {
        tracing::warn!(model = %self.model, "remote generation failed: {message}");
        let _ = self
            .emit(Event::Error(Failure {
                kind: UNAVAILABLE,
                message,
            }))
            .await;
    }

    async fn shutting_down(&self) {
        let _ = self
            .emit(Event::Error(Failure {
                kind: FailureKind::ShuttingDown,
                message: "the server is shutting down".into(),
            }))
            .await;
    }

    /// Tokens of `text` by this node's tokenizer when it holds the same model, else the frame
    /// count (a lower bound).
    fn count_tokens(&self, text: &str) -> u32 {
        match self.host.model() {
            Some(info) if info.id == self.model => {
                u32::try_from(info.count_tokens(text)).unwrap_or(u32::MAX)
            }
            _ => self.frames,
        }
    }

    /// The prompt's tokens by this node's tokenizer, when it holds the same model.
    fn local_prompt_tokens(&self) -> Option<u32> {
        let info = self.host.model().filter(|i| i.id == self.model)?;
        let text = match &self.prompt {
            RemotePrompt::Chat(m) => info.render_chat(m).ok()?,
            RemotePrompt::Text(t) => t.clone(),
        };
        u32::try_from(info.count_tokens(&text)).ok()
    }

    fn timing(&self, ext: Option<&TaskDone>) -> Timing {
        let ms = |v: f64| Duration::try_from_secs_f64(v / 1000.0).unwrap_or_default();
        Timing {
            queued: ext.map(|d| ms(d.queued_ms)).unwrap_or_default(),
            prefill: ext.map(|d| ms(d.prefill_ms)).unwrap_or_default(),
            first_token: self.first_token,
            total: self.submitted.elapsed(),
            cached_tokens: 0,
        }
    }

    /// The `Done` of a task that ended on a worker. `prior` is the tokens delivered before this
    /// placement (a continuation).
    fn done(&self, ext: Option<TaskDone>, continuing: bool, prior: u32) -> Done {
        let timing = self.timing(ext.as_ref());
        let usage = match &ext {
            Some(d) if !continuing => d.usage,
            Some(d) => Usage::new(
                self.local_prompt_tokens().unwrap_or(d.usage.prompt_tokens),
                prior.saturating_add(d.usage.completion_tokens),
            ),
            None => Usage::new(
                self.local_prompt_tokens().unwrap_or(0),
                self.count_tokens(&self.delivered),
            ),
        };
        let reason = match &ext {
            Some(d) => d.finish_reason,
            None if self
                .params
                .max_tokens
                .is_some_and(|m| usage.completion_tokens >= m) =>
            {
                FinishReason::Length
            }
            None => FinishReason::Stop,
        };
        Done {
            reason,
            usage,
            timing,
        }
    }

    /// The task frame for a placement, and the text to skip from its output (a greedy restart
    /// on a worker that cannot continue).
    fn task_for(&self, r: &Reservation, continuing: bool, prior: u32) -> (Task, String) {
        let params = &self.params;
        let (system, messages, raw) = match &self.prompt {
            RemotePrompt::Chat(m) => {
                let (system, rest) = split_system(m);
                (system, rest, None)
            }
            RemotePrompt::Text(t) => (
                None,
                vec![ChatMessage::new("user", t.clone())],
                Some(t.clone()),
            ),
        };
        let max_new_tokens = match params.max_tokens {
            Some(m) if continuing && r.hearth => Some(i64::from(m.saturating_sub(prior).max(1))),
            Some(m) => Some(i64::from(m)),
            None if r.hearth => None,
            None => Some(
                self.host
                    .model()
                    .filter(|i| i.id == self.model)
                    .map_or(DEFAULT_MAX_NEW_TOKENS, |i| i64::from(i.ctx_per_slot)),
            ),
        };
        let hearth = r.hearth.then(|| HearthTask {
            prompt: raw,
            continue_from: continuing.then(|| self.delivered.clone()),
            top_p: Some(f64::from(params.top_p)),
            top_k: Some(i64::from(params.top_k)),
            repetition_penalty: Some(f64::from(params.repetition_penalty)),
            frequency_penalty: Some(f64::from(params.frequency_penalty)),
            presence_penalty: Some(f64::from(params.presence_penalty)),
            seed: params.seed.map(i64::from),
            stop: (!params.stop.is_empty()).then(|| params.stop.clone()),
            ignore_eos: params.ignore_eos.then_some(true),
        });
        let skip = if continuing && !r.hearth {
            self.delivered.clone()
        } else {
            String::new()
        };
        let task = Task {
            id: r.task,
            state: STATE_PENDING,
            system,
            messages,
            max_new_tokens,
            temperature: Some(f64::from(params.temperature)),
            created_at: Some(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64().floor())
                    .unwrap_or(0.0),
            ),
            hearth,
        };
        (task, skip)
    }

    /// Give the task back: drop our end of its channel first (so the worker's connection is
    /// never left waiting on us), free the slot, send the stop frame.
    async fn stop_remote(&self, r: Reservation) {
        let Reservation {
            worker,
            task,
            outbox,
            events,
            ..
        } = r;
        drop(events);
        self.hub.retire(worker, task);
        let _ = tokio::time::timeout(SEND_WAIT, outbox.send(wp::stop_frame(task))).await;
    }

    async fn on_worker(&mut self, mut r: Reservation) -> Outcome {
        self.answerer.send_replace(Some(r.worker_name.clone()));
        let continuing = !self.delivered.is_empty();
        let prior = if continuing {
            self.count_tokens(&self.delivered)
        } else {
            0
        };
        let (task, mut skip) = self.task_for(&r, continuing, prior);
        let sent = tokio::time::timeout(SEND_WAIT, r.outbox.send(task.to_json())).await;
        if !matches!(sent, Ok(Ok(()))) {
            let name = r.worker_name.clone();
            self.hub.retire(r.worker, r.task);
            return Outcome::Lost(name);
        }
        let mut done_ext: Option<TaskDone> = None;
        let mut failure: Option<TaskFailure> = None;
        loop {
            tokio::select! {
                ev = r.events.recv() => match ev {
                    Some(TaskEvent::Text(text)) => {
                        let Some(fresh) = after_skip(&mut skip, &text) else {
                            let name = r.worker_name.clone();
                            self.stop_remote(r).await;
                            let msg = format!("the worker {name} that took over this answer produced different text than the lost one; it cannot continue without contradicting what was sent");
                            self.fail(msg).await;
                            return Outcome::Finished;
                        };
                        if !fresh.is_empty() && !self.emit_text(fresh).await {
                            self.stop_remote(r).await;
                            return Outcome::Finished;
                        }
                    }
                    Some(TaskEvent::Done(d)) => done_ext = Some(d),
                    Some(TaskEvent::Failed(f)) => failure = Some(f),
                    Some(TaskEvent::End) => {
                        if failure.as_ref().is_some_and(|f| f.code == wp::WORKER_STOPPING) {
                            // The worker is stopping: like a lost worker, place it again.
                            let name = r.worker_name.clone();
                            self.hub.retire(r.worker, r.task);
                            return Outcome::Lost(name);
                        }
                        if let Some(f) = failure {
                            let msg = format!("worker {}: {} ({})", r.worker_name, f.message, f.code);
                            self.fail(msg).await;
                        } else if !skip.is_empty() {
                            let msg = format!("the worker {} that took over this answer ended before reaching the text already sent", r.worker_name);
                            self.fail(msg).await;
                        } else {
                            let done = self.done(done_ext, continuing, prior);
                            let _ = self.emit(Event::Done(done)).await;
                        }
                        return Outcome::Finished;
                    }
                    // The worker left: its routes were dropped.
                    None => return Outcome::Lost(r.worker_name),
                },
                op = self.ops.recv(), if self.ops_open => match op {
                    Some(RemoteOp::Stop) => {
                        self.stop_remote(r).await;
                        let done = self.cancelled();
                        let _ = self.emit(Event::Done(done)).await;
                        return Outcome::Finished;
                    }
                    Some(RemoteOp::Regenerate) => {
                        self.stop_remote(r).await;
                        return Outcome::Restart;
                    }
                    None => self.ops_open = false,
                },
                () = self.events.closed() => {
                    self.stop_remote(r).await;
                    return Outcome::Finished;
                }
                () = self.shutdown.cancelled() => {
                    self.stop_remote(r).await;
                    self.shutting_down().await;
                    return Outcome::Finished;
                }
            }
        }
    }

    /// `Done` for a stopped remote generation.
    fn cancelled(&self) -> Done {
        Done {
            reason: FinishReason::Cancelled,
            usage: Usage::new(
                self.local_prompt_tokens().unwrap_or(0),
                self.count_tokens(&self.delivered),
            ),
            timing: self.timing(None),
        }
    }

    /// Run (or continue) the job on this node's engine and forward its events.
    async fn on_local(&mut self) -> Outcome {
        self.answerer.send_replace(None);
        let continuing = !self.delivered.is_empty();
        let prior = if continuing {
            self.count_tokens(&self.delivered)
        } else {
            0
        };
        let request = match self.local_request(continuing, prior) {
            Ok(r) => r,
            Err(msg) => {
                self.fail(msg).await;
                return Outcome::Finished;
            }
        };
        let mut gen = match self.host.submit(request) {
            Ok(g) => g,
            Err(e) => {
                self.fail(e.to_string()).await;
                return Outcome::Finished;
            }
        };
        loop {
            tokio::select! {
                ev = gen.events.recv() => match ev {
                    Some(Event::Token(t)) => {
                        let now = Instant::now();
                        if self.first_token.is_none() && !t.text.is_empty() {
                            self.first_token = Some(now.duration_since(self.submitted));
                        }
                        self.delivered.push_str(&t.text);
                        self.last_token = now;
                        let event = Event::Token(TokenEvent {
                            elapsed: now.duration_since(self.submitted),
                            ..t
                        });
                        // On failure `gen` is dropped, which cancels the generation.
                        if !self.emit(event).await {
                            return Outcome::Finished;
                        }
                    }
                    Some(Event::Done(mut d)) => {
                        if continuing {
                            d.usage = Usage::new(
                                self.local_prompt_tokens().unwrap_or(d.usage.prompt_tokens),
                                prior.saturating_add(d.usage.completion_tokens),
                            );
                        }
                        d.timing.first_token = self.first_token;
                        d.timing.total = self.submitted.elapsed();
                        let _ = self.emit(Event::Done(d)).await;
                        return Outcome::Finished;
                    }
                    Some(Event::Error(f)) => {
                        let _ = self.emit(Event::Error(f)).await;
                        return Outcome::Finished;
                    }
                    Some(other) => {
                        if !self.emit(other).await {
                            return Outcome::Finished;
                        }
                    }
                    None => {
                        self.shutting_down().await;
                        return Outcome::Finished;
                    }
                },
                op = self.ops.recv(), if self.ops_open => match op {
                    // The engine answers with `Done { reason: Cancelled }`.
                    Some(RemoteOp::Stop) => {
                        let _ = gen.control.stop();
                    }
                    // From the original prompt, not from a continuation: place it again.
                    Some(RemoteOp::Regenerate) => return Outcome::Restart,
                    None => self.ops_open = false,
                },
                () = self.events.closed() => return Outcome::Finished,
            }
        }
    }

    /// The request for this node's engine; a continuation renders the prompt and appends the
    /// text already delivered.
    fn local_request(&self, continuing: bool, prior: u32) -> Result<Request, String> {
        let mut params = self.params.clone();
        if !continuing {
            return Ok(Request {
                prompt: self.prompt.to_prompt(),
                params,
            });
        }
        params.max_tokens = params.max_tokens.map(|m| m.saturating_sub(prior).max(1));
        let info = self
            .host
            .model()
            .ok_or_else(|| "this node's model is not loaded".to_owned())?;
        let prompt = match &self.prompt {
            RemotePrompt::Chat(m) => {
                let rendered = info.render_chat(m).map_err(|e| e.to_string())?;
                Prompt::Text(rendered + &self.delivered)
            }
            RemotePrompt::Text(t) => Prompt::Text(format!("{t}{}", self.delivered)),
        };
        Ok(Request { prompt, params })
    }

    /// Wait (bounded) until a slot frees up, then place the job there.
    async fn wait(&mut self) -> Outcome {
        let Some(_slot) = self.hub.enter_queue() else {
            self.hub.count_unserved();
            let msg = format!(
                "every worker serving {} is busy and the hub's queue is full",
                self.model
            );
            self.fail(msg).await;
            return Outcome::Finished;
        };
        let deadline = tokio::time::Instant::now() + DISPATCH_WAIT;
        let hub = self.hub.clone();
        loop {
            let notified = hub.capacity_changed();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.place() {
                Placement::Wait => {}
                p => return Outcome::Place(p),
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => {
                    self.hub.count_unserved();
                    let msg = format!(
                        "no worker serving {} had a free slot within {} s",
                        self.model,
                        DISPATCH_WAIT.as_secs()
                    );
                    self.fail(msg).await;
                    return Outcome::Finished;
                }
                op = self.ops.recv(), if self.ops_open => match op {
                    Some(RemoteOp::Stop) => {
                        let done = self.cancelled();
                        let _ = self.emit(Event::Done(done)).await;
                        return Outcome::Finished;
                    }
                    Some(RemoteOp::Regenerate) => {} // nothing generated yet
                    None => self.ops_open = false,
                },
                () = self.events.closed() => return Outcome::Finished,
                () = self.shutdown.cancelled() => {
                    self.shutting_down().await;
                    return Outcome::Finished;
                }
            }
        }
    }
}

/// Leading system messages become the task's `system` (joined by blank lines); the rest are
/// its messages.
fn split_system(messages: &[ChatMessage]) -> (Option<String>, Vec<ChatMessage>) {
    let n = messages.iter().take_while(|m| m.role == "system").count();
    let system = (n > 0).then(|| {
        messages[..n]
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    });
    (system, messages[n..].to_vec())
}

/// What of `text` is new once `skip` (text already delivered) is used up; `None` when they
/// disagree.
fn after_skip(skip: &mut String, text: &str) -> Option<String> {
    if skip.is_empty() {
        return Some(text.to_owned());
    }
    if text.len() <= skip.len() {
        if skip.starts_with(text) {
            skip.drain(..text.len());
            return Some(String::new());
        }
        return None;
    }
    if text.starts_with(skip.as_str()) {
        let fresh = text[skip.len()..].to_owned();
        skip.clear();
        return Some(fresh);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipping_delivered_text_across_frames() {
        let mut skip = "Hello, wor".to_owned();
        assert_eq!(after_skip(&mut skip, "Hel").as_deref(), Some(""));
        assert_eq!(after_skip(&mut skip, "lo, ").as_deref(), Some(""));
        assert_eq!(after_skip(&mut skip, "world!").as_deref(), Some("ld!"));
        assert!(skip.is_empty());
        assert_eq!(after_skip(&mut skip, "more").as_deref(), Some("more"));
        let mut skip = "abc".to_owned();
        assert_eq!(after_skip(&mut skip, "abX"), None);
        let mut skip = "abc".to_owned();
        assert_eq!(after_skip(&mut skip, "abcd").as_deref(), Some("d"));
        let mut skip = "é".to_owned();
        assert_eq!(after_skip(&mut skip, "é€").as_deref(), Some("€"));
    }

    #[test]
    fn leading_system_messages_become_the_tasks_system() {
        let m = vec![
            ChatMessage::new("system", "a"),
            ChatMessage::new("system", "b"),
            ChatMessage::new("user", "hi"),
            ChatMessage::new("system", "late"),
        ];
        let (system, rest) = split_system(&m);
        assert_eq!(system.as_deref(), Some("a\n\nb"));
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[1].role, "system");
        let (system, rest) = split_system(&m[2..]);
        assert_eq!(system, None);
        assert_eq!(rest.len(), 2);
    }

    #[tokio::test]
    async fn remote_controls_reach_the_supervisor_or_are_refused() {
        let (tx, mut rx) = mpsc::channel(1);
        let c = Control(ControlInner::Remote(tx));
        assert_eq!(c.stop(), Ok(()));
        assert_eq!(c.regenerate(), Err(ControlError::Busy));
        assert_eq!(rx.recv().await, Some(RemoteOp::Stop));
        assert_eq!(c.pause(), Err(ControlError::Unsupported("pause")));
        assert_eq!(c.resume(), Err(ControlError::Unsupported("resume")));
        assert_eq!(
            c.modify(SamplingPatch::default()),
            Err(ControlError::Unsupported("modify"))
        );
        drop(rx);
        assert_eq!(c.stop(), Err(ControlError::Stopped));
    }
}
