//! The supervisor of one generation placed away from this node's engine (on a hub's worker or
//! a LAN peer), which may end up here: it sends the task, turns the provider's frames into
//! `Event::Token`s (this node's engine runs it through `local`), ends the stream
//! with `Done` (the counts the provider reports: this node's engine, or a Hearth worker's
//! `tokens` and `done` frames; a reference worker reports none, so its text is counted with this
//! node's tokenizer when it holds the model, else one token per frame), and when the provider
//! is lost places the request again from the text already delivered.
//!
//! ## A provider lost mid-answer
//! - nothing delivered yet: it simply starts over elsewhere;
//! - text delivered, and the new place can continue (this node, or a Hearth worker): it
//!   generates from the prompt plus the text already sent, so the client loses nothing and sees
//!   nothing twice (DESIGN.md §5); `usage` is the sum of the providers' counts, and the new
//!   place is given what is left of `max_tokens` by them;
//! - text delivered to a greedy request, new place a reference worker: the task restarts and
//!   the text already delivered is skipped; if the new worker's text differs, the stream ends
//!   with an error rather than contradict what was sent;
//! - text delivered to a sampled request and no place that can continue it, or no place at
//!   all: the stream ends with a clear error.
//!
//! A worker that stops (shutdown, quit) says `worker_stopping` before its task's end frame and
//! is treated as lost, and so is a task that brings no frame for the hub's `task_silence` (a
//! worker whose connection is alive but whose task is stuck: the task is stopped there and
//! this answer is not given to that worker again). At most [`MAX_REDISPATCHES`]
//! losses per request. `stop` sends the stop frame and ends the stream with `finish_reason:
//! cancelled`; `regenerate` stops the task and places it again (the stream gets `Restarted`);
//! `pause` and `resume` go to this node's engine or a Hearth peer (and a paused answer stays
//! paused wherever it is placed next), and are refused for a worker of the `/node` door, as
//! `modify` always is. A reader that drops its events stops the task.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hearth_engine::{CacheOwner, Chat, Event, Failure, FailureKind, Prompt, TokenEvent};
use hearth_protocol::cluster::ControlAction;
use hearth_protocol::worker::{self as wp, HearthTask, Task, TaskDone, TaskFailure, STATE_PENDING};
use hearth_protocol::{ChatMessage, ModelId, RequestId, SamplingParams};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

mod accounting;
mod local;

use crate::generation::{Generation, RemoteOp};
use crate::placement::Destination;
use hearth_hub::{Hub, Reservation, TaskEvent, WorkerId};
use hearth_models::ModelHost;

/// How long a request waits for a worker's slot before it fails.
pub const DISPATCH_WAIT: Duration = Duration::from_secs(60);
/// Providers that may be lost under one request before it fails.
pub const MAX_REDISPATCHES: u32 = 3;
/// `max_new_tokens` sent to a non-Hearth worker when the request sets no limit (that field is
/// always present in the reference server's tasks).
const DEFAULT_MAX_NEW_TOKENS: i64 = 4096;
/// Controls waiting for a remote generation's supervisor.
const CONTROL_CAPACITY: usize = 8;
/// How long the supervisor waits to hand a frame to a worker's connection.
const SEND_WAIT: Duration = Duration::from_secs(5);
/// What a failure of a remote generation is reported as. `Decode` is the engine's "retrying
/// can work"; a dedicated `Unavailable` kind would say it better.
const UNAVAILABLE: FailureKind = FailureKind::Decode;

/// What a supervised generation needs to start.
#[derive(Debug)]
pub(super) struct Start {
    pub(super) id: RequestId,
    pub(super) hub: Hub,
    pub(super) host: Arc<ModelHost>,
    pub(super) model: ModelId,
    pub(super) prompt: RemotePrompt,
    pub(super) params: SamplingParams,
    /// Whose prompt cache it reads, here or (as the task says) on a Hearth worker.
    pub(super) owner: CacheOwner,
    /// Whether this node's engine may take the request when it is lost elsewhere.
    pub(super) serve_local: bool,
    pub(super) shutdown: CancellationToken,
    pub(super) first: Destination,
}

/// Spawn the supervisor for `start` and hand back the door's side of the generation.
pub(super) fn spawn(start: Start) -> Generation {
    let (events_tx, events_rx) = mpsc::channel(hearth_engine::handle::EVENT_CAPACITY);
    let (ops_tx, ops_rx) = mpsc::channel(CONTROL_CAPACITY);
    let first_worker = match &start.first {
        Destination::Worker(r) => Some(r.worker_name.clone()),
        _ => None,
    };
    let (answerer_tx, answerer_rx) = watch::channel(first_worker);
    let pausable = Arc::new(AtomicBool::new(match &start.first {
        Destination::Local => true,
        Destination::Worker(r) => r.controls.is_some(),
        Destination::Wait | Destination::Nobody => false,
    }));
    let now = Instant::now();
    let job = Job {
        hub: start.hub,
        host: start.host,
        model: start.model.clone(),
        prompt: start.prompt,
        params: start.params,
        owner: start.owner,
        serve_local: start.serve_local,
        events: events_tx,
        answerer: answerer_tx,
        ops: ops_rx,
        ops_open: true,
        shutdown: start.shutdown,
        submitted: now,
        last_token: now,
        first_token: None,
        delivered: String::new(),
        counted: 0,
        counted_len: 0,
        frames: 0,
        losses: 0,
        avoid: Vec::new(),
        pausable: pausable.clone(),
        paused: false,
    };
    tokio::spawn(job.run(start.first));
    Generation::remote(
        start.id,
        start.model,
        answerer_rx,
        events_rx,
        ops_tx,
        pausable,
    )
}

/// How one placement of a remote job ended.
#[derive(Debug)]
enum Outcome {
    /// The stream has ended (or its reader is gone).
    Finished,
    /// Place it here next.
    Place(Destination),
    /// `regenerate`: start over from the prompt.
    Restart,
    /// The named worker was lost mid-task (disconnected, or stopping).
    Lost(String),
    /// The named worker's task brought nothing for the hub's `task_silence`.
    Stuck(String),
}

/// A prompt a worker can take. Token ids are this node's tokenizer's, so such prompts never
/// leave it and have no remote form.
#[derive(Debug, Clone)]
pub(super) enum RemotePrompt {
    Chat(Chat),
    Text(String),
}

impl RemotePrompt {
    /// Whether the conversation offers tools: the engine constrains a call with a grammar of
    /// its own, so such answers are never continued from part of them.
    pub(super) fn has_tools(&self) -> bool {
        matches!(self, Self::Chat(c) if c.tools.is_some())
    }

    /// Whether it shows the model images.
    pub(crate) fn has_images(&self) -> bool {
        matches!(self, Self::Chat(c) if c.messages.iter().any(|m| !m.images.is_empty()))
    }

    /// Whether it lets the model hear audio.
    pub(crate) fn has_audio(&self) -> bool {
        matches!(self, Self::Chat(c) if c.messages.iter().any(|m| !m.audio.is_empty()))
    }

    /// Whether it shows the model images or lets it hear audio.
    pub(crate) fn has_media(&self) -> bool {
        self.has_images() || self.has_audio()
    }

    /// What in it only Hearth's task extension carries (with `grammar`, a required format),
    /// as a user reads it; `None` when nothing does and any worker or peer can take it.
    pub(crate) fn hearth_only(&self, grammar: bool) -> Option<&'static str> {
        Some(match self {
            Self::Text(_) => "a raw prompt",
            _ if self.has_images() => "images",
            _ if self.has_audio() => "audio",
            _ if self.has_tools() => "tools",
            _ if grammar => "a required format",
            Self::Chat(c) if c.think.is_some() => "a say on thinking",
            Self::Chat(_) => return None,
        })
    }

    pub(super) fn of(prompt: &Prompt) -> Option<Self> {
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

/// The supervisor of one remote generation (see the module docs).
#[derive(Debug)]
struct Job {
    hub: Hub,
    host: Arc<ModelHost>,
    model: ModelId,
    prompt: RemotePrompt,
    params: SamplingParams,
    owner: CacheOwner,
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
    /// Tokens behind `delivered[..counted_len]`, as their providers counted them (this node's
    /// engine, or a Hearth worker's `tokens` frames).
    counted: u32,
    counted_len: usize,
    /// Non-empty text frames delivered after `counted_len`: a lower bound of their tokens,
    /// used when no provider counted them and the hub cannot count them with the model's
    /// tokenizer.
    frames: u32,
    losses: u32,
    /// Workers this answer is not placed on again (a task of it went silent there).
    avoid: Vec<WorkerId>,
    /// Whether the place running it now takes pause and resume (this node, a Hearth peer),
    /// shared with the door's `Control`.
    pausable: Arc<AtomicBool>,
    /// Paused by the reader: kept wherever the answer goes next.
    paused: bool,
}

impl Job {
    /// Why no place takes this answer, in words the user can act on.
    fn why_nobody(&self) -> String {
        if self.prompt.has_audio() {
            return format!("{} is not loaded on this node, and audio is heard only by the node it is sent to (peers do not say whether their copy hears)", self.model);
        }
        let serving: Vec<_> = self
            .hub
            .candidates(&self.model)
            .into_iter()
            .filter(|c| !self.avoid.contains(&c.id))
            .collect();
        let what = self.prompt.hearth_only(self.params.grammar.is_some());
        if let Some(what) =
            what.filter(|_| !serving.is_empty() && serving.iter().all(|c| !c.continues))
        {
            return format!(
                "the workers serving {} take plain chat only (TealeNet peers, without Hearth's task extension), and this request has {what}: it needs a Hearth node serving the model",
                self.model
            );
        }
        format!("no worker serving {} is connected", self.model)
    }

    async fn run(mut self, first: Destination) {
        let mut next = first;
        loop {
            let outcome = match next {
                Destination::Worker(r) => self.on_worker(r).await,
                Destination::Local => self.on_local().await,
                Destination::Wait => self.wait().await,
                Destination::Nobody => {
                    self.hub.count_unserved();
                    let msg = self.why_nobody();
                    self.fail(msg).await;
                    Outcome::Finished
                }
            };
            next = match outcome {
                Outcome::Finished => return,
                Outcome::Place(p) => p,
                Outcome::Restart => {
                    self.delivered.clear();
                    self.counted = 0;
                    self.counted_len = 0;
                    self.frames = 0;
                    if !self.emit(Event::Restarted).await {
                        return;
                    }
                    self.place()
                }
                Outcome::Lost(worker) => {
                    match self
                        .re_place(format!("the node {worker} was lost mid-answer"))
                        .await
                    {
                        Some(p) => p,
                        None => return,
                    }
                }
                Outcome::Stuck(worker) => {
                    let what = format!(
                        "the node {worker} produced nothing for this answer in {} s",
                        self.hub.task_silence().as_secs()
                    );
                    match self.re_place(what).await {
                        Some(p) => p,
                        None => return,
                    }
                }
            };
        }
    }

    /// Where an answer whose provider was lost (`what` says how) goes next; `None` once it has
    /// failed (too many losses, or nowhere left).
    async fn re_place(&mut self, what: String) -> Option<Destination> {
        self.losses += 1;
        // A grammar starts from its first symbol: text cut mid-way through cannot be carried on.
        if (self.params.grammar.is_some() || self.prompt.has_tools()) && !self.delivered.is_empty()
        {
            let msg = format!("{what}; an answer in a required format (JSON) cannot be continued from part of it elsewhere");
            self.fail(msg).await;
            return None;
        }
        // The continuation is text: the images and clips would not be in it.
        if self.prompt.has_media() && !self.delivered.is_empty() {
            let msg = format!(
                "{what}; an answer about images or audio cannot be continued from part of it elsewhere"
            );
            self.fail(msg).await;
            return None;
        }
        if self.losses > MAX_REDISPATCHES {
            self.hub.count_unserved();
            let msg =
                format!("gave up after {MAX_REDISPATCHES} nodes were lost during this answer");
            self.fail(msg).await;
            return None;
        }
        match self.place() {
            Destination::Nobody => {
                self.hub.count_unserved();
                let msg = if self.need_hearth() && !self.delivered.is_empty() {
                    format!(
                        "{what}; the answer was sampled (temperature > 0), so only this node or a Hearth worker could continue it, and none serving {} has room",
                        self.model
                    )
                } else {
                    format!("{what}, and no other node serves {}", self.model)
                };
                self.fail(msg).await;
                None
            }
            p => {
                self.hub.count_redispatch();
                tracing::info!(
                    delivered = self.delivered.len(),
                    "re-dispatching an answer: {what}"
                );
                Some(p)
            }
        }
    }

    /// Raw prompts, grammars, tools, and sampled answers with text already delivered, need a
    /// place that understands Hearth's extension (or this node).
    fn need_hearth(&self) -> bool {
        self.prompt
            .hearth_only(self.params.grammar.is_some())
            .is_some()
            || (!self.delivered.is_empty() && !self.params.is_greedy())
    }

    fn local_candidate(&self) -> bool {
        self.serve_local && self.host.model_info(&self.model).is_some()
    }

    fn place(&self) -> Destination {
        crate::placement::placement(
            &self.avoid,
            &self.hub,
            &self.host,
            &self.model,
            crate::placement::Needs {
                continuation: self.need_hearth(),
                vision: self.prompt.has_images(),
                audio: self.prompt.has_audio(),
            },
            self.local_candidate(),
            None,
        )
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

    /// The request was refused as it was given where it ran: the client's to fix.
    async fn refused(&self, message: String) {
        let _ = self
            .emit(Event::Error(Failure {
                kind: FailureKind::Invalid,
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

    /// The task frame for a placement, and the text to skip from its output (a greedy restart
    /// on a worker that cannot continue).
    fn task_for(&self, r: &Reservation, continuing: bool, prior: u32) -> (Task, String) {
        let params = &self.params;
        let (system, messages, raw, tools, think) = match &self.prompt {
            RemotePrompt::Chat(c) => {
                let (system, rest) = split_system(&c.messages);
                (system, rest, None, c.tools.clone(), c.think)
            }
            RemotePrompt::Text(t) => (
                None,
                vec![ChatMessage::new("user", t.clone())],
                Some(t.clone()),
                None,
                None,
            ),
        };
        let max_new_tokens = match params.max_tokens {
            Some(m) if continuing && r.hearth => Some(i64::from(m.saturating_sub(prior).max(1))),
            Some(m) => Some(i64::from(m)),
            None if r.hearth => None,
            None => Some(
                self.host
                    .model_info(&self.model)
                    .map_or(DEFAULT_MAX_NEW_TOKENS, |i| i64::from(i.context)),
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
            grammar: params.grammar.clone(),
            tools,
            think,
            speculative: params.speculation.map(|s| s.as_str().to_owned()),
            cache_owner: Some(self.owner.to_hex()),
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

    /// Give the task back: drop our end of its channel (its late frames are dropped), free the
    /// slot, send the stop frame.
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
        let _ = tokio::time::timeout(SEND_WAIT, outbox.send(wp::HubFrame::Stop(task))).await;
    }

    async fn on_worker(&mut self, mut r: Reservation) -> Outcome {
        self.answerer.send_replace(Some(r.worker_name.clone()));
        self.pausable.store(r.controls.is_some(), Ordering::Release);
        // Paused, and placed where no pause can reach: it runs, and the reader is told.
        if self.paused && r.controls.is_none() {
            self.paused = false;
            let _ = self.emit(Event::Resumed).await;
        }
        let continuing = !self.delivered.is_empty();
        let prior = self.settle();
        if let Some(done) = self.complete_already(prior) {
            // The task was never sent: give the slot back.
            self.hub.retire(r.worker, r.task);
            let _ = self.emit(Event::Done(done)).await;
            return Outcome::Finished;
        }
        let (task, mut skip) = self.task_for(&r, continuing, prior);
        let sent =
            tokio::time::timeout(SEND_WAIT, r.outbox.send(wp::HubFrame::Task(Box::new(task))))
                .await;
        if !matches!(sent, Ok(Ok(()))) {
            let name = r.worker_name.clone();
            self.hub.retire(r.worker, r.task);
            return Outcome::Lost(name);
        }
        if self.paused {
            control(&r, ControlAction::Pause);
        }
        let mut done_ext: Option<TaskDone> = None;
        let mut failure: Option<TaskFailure> = None;
        let silence_limit = self.hub.task_silence();
        let silence = tokio::time::sleep(silence_limit);
        tokio::pin!(silence);
        loop {
            tokio::select! {
                // Shutdown and controls before frames (a backlog must not hold them back);
                // silence last (frames that waited behind a slow emit are not silence).
                biased;
                () = self.shutdown.cancelled() => {
                    self.stop_remote(r).await;
                    self.shutting_down().await;
                    return Outcome::Finished;
                }
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
                    Some(op @ (RemoteOp::Pause | RemoteOp::Resume)) if r.controls.is_some() => {
                        let pause = op == RemoteOp::Pause;
                        self.paused = pause;
                        control(&r, if pause { ControlAction::Pause } else { ControlAction::Resume });
                        // A paused task brings nothing, which is no sign of a stuck one.
                        silence.as_mut().reset(tokio::time::Instant::now() + silence_limit);
                        let _ = self.emit(if pause { Event::Paused } else { Event::Resumed }).await;
                    }
                    // The door refuses them for a worker that cannot take them.
                    Some(RemoteOp::Pause | RemoteOp::Resume) => {}
                    None => self.ops_open = false,
                },
                () = self.events.closed() => {
                    self.stop_remote(r).await;
                    return Outcome::Finished;
                }
                ev = r.events.recv() => {
                    silence.as_mut().reset(tokio::time::Instant::now() + silence_limit);
                    match ev {
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
                    Some(TaskEvent::Tokens(n)) => self.counted(n),
                    Some(TaskEvent::Done(d)) => done_ext = Some(d),
                    Some(TaskEvent::Failed(f)) => failure = Some(f),
                    Some(TaskEvent::End) => {
                        if failure.as_ref().is_some_and(|f| f.code == hearth_hub::PROVIDER_REFUSED) {
                            // A peer that would not take it: placed again, elsewhere.
                            let name = r.worker_name.clone();
                            self.avoid.push(r.worker);
                            self.hub.retire(r.worker, r.task);
                            return Outcome::Lost(name);
                        }
                        if failure.as_ref().is_some_and(|f| f.code == wp::WORKER_STOPPING) {
                            // The worker is stopping: like a lost worker, place it again.
                            let name = r.worker_name.clone();
                            self.hub.retire(r.worker, r.task);
                            return Outcome::Lost(name);
                        }
                        if let Some(f) = failure {
                            if f.is_the_requests() {
                                // Bad input, judged where it ran: the client's to fix.
                                self.refused(format!("{} (judged on {})", f.message, r.worker_name)).await;
                                return Outcome::Finished;
                            }
                            let msg = format!("worker {}: {} ({})", r.worker_name, f.message, f.code);
                            self.fail(msg).await;
                        } else if !skip.is_empty() {
                            let msg = format!("the worker {} that took over this answer ended before reaching the text already sent", r.worker_name);
                            self.fail(msg).await;
                        } else {
                            let done = self.done(done_ext, continuing, prior);
                            if !continuing {
                                if let Some(tps) = done.decode_speed() {
                                    self.hub.record_speed(r.worker, tps);
                                }
                            }
                            let _ = self.emit(Event::Done(done)).await;
                        }
                        return Outcome::Finished;
                    }
                    // The worker left: its routes were dropped.
                    None => return Outcome::Lost(r.worker_name),
                    }
                }
                () = &mut silence, if !self.paused => {
                    // Alive (its connection keeps up) but this task brings nothing: stuck. It is
                    // stopped there, and this answer goes elsewhere.
                    let name = r.worker_name.clone();
                    tracing::warn!(worker = %name, "a task brought nothing for {silence_limit:?}; stopping it there and placing it elsewhere");
                    self.avoid.push(r.worker);
                    self.stop_remote(r).await;
                    return Outcome::Stuck(name);
                }
            }
        }
    }
}

/// Hand a pause or resume to the provider of `r` (a Hearth peer); a full queue drops it (the
/// reader may send it again).
fn control(r: &Reservation, action: ControlAction) {
    if let Some(c) = &r.controls {
        let _ = c.try_send((r.task, action));
    }
}

/// Leading system messages become the task's `system` (joined by blank lines); the rest are
/// its messages. A system message showing images stays a message: `system` is text only.
fn split_system(messages: &[ChatMessage]) -> (Option<String>, Vec<ChatMessage>) {
    let n = messages
        .iter()
        .take_while(|m| m.role == "system" && m.images.is_empty() && m.audio.is_empty())
        .count();
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
}
