//! The engine's public handle: start the engine thread, watch its model state, submit
//! requests (prompt preparation and admission happen here, on the caller's thread), and steer
//! running generations through a [`Controller`]. All talk with the engine thread goes over one
//! bounded command channel; events come back on a bounded channel per generation.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::admission::Admission;
use crate::cache_owner::CacheOwner;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hearth_protocol::{ModelId, RequestId, SamplingParams, SamplingPatch};
use llama_cpp_2::token::LlamaToken;
use tokio::sync::{mpsc, watch};

use crate::commands::{Command, ControlOp, Submission};
use crate::config::EngineConfig;
use crate::embedder::{EmbedError, EmbedJob, Embeddings};
use crate::engine_loop::{self, Shared};
use crate::events::Event;
use crate::model::{Chat, ModelInfo, ModelState, PromptError};
use crate::{scheduler, scripted};

/// Events buffered per generation before the engine holds that slot back (backpressure on a
/// slow reader instead of unbounded memory).
pub const EVENT_CAPACITY: usize = 64;
/// Control messages that may wait for the engine thread beyond the submissions it admits.
const CONTROL_CAPACITY: usize = 256;

/// What a caller asks the engine to generate.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Prompt,
    pub params: SamplingParams,
    /// Whose prompt cache it reads and adds to: set by the server from who is asking, never
    /// from the request's own fields.
    pub owner: CacheOwner,
}

#[derive(Debug, Clone)]
pub enum Prompt {
    /// A conversation, rendered with the model's chat template (and its tools).
    Chat(Chat),
    /// Text sent to the model as is.
    Text(String),
    /// Token ids sent as is: no template, no BOS added. A door that continues an earlier
    /// generation sends its prompt and generated tokens this way.
    Tokens(Vec<u32>),
}

/// Why a request was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("model {model} is still loading ({percent}%)")]
    ModelLoading { model: ModelId, percent: u8 },
    #[error("model {model} failed to load: {message}")]
    LoadFailed { model: ModelId, message: String },
    #[error(
        "the prompt is {}{prompt_tokens} tokens long but the model's context is {context} tokens",
        if *at_least { "at least " } else { "" }
    )]
    ContextLengthExceeded {
        prompt_tokens: usize,
        context: u32,
        /// `prompt_tokens` is a bound from the prompt's length: it was refused untokenized.
        at_least: bool,
    },
    #[error("all {slots} slots are busy and {queued} requests are waiting")]
    QueueFull {
        slots: usize,
        queued: usize,
        retry_after: Duration,
    },
    #[error(transparent)]
    Prompt(#[from] PromptError),
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("no model is loaded")]
    NoModel,
    /// The model cannot be served now, for a while (a split that lost a peer and does not fit
    /// here whole): try again after `retry_after`.
    #[error("{message}")]
    Unavailable {
        model: ModelId,
        message: String,
        retry_after: Duration,
    },
}

/// An input to embed.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    Text(String),
    /// Token ids of this model's vocabulary, used as they are.
    Tokens(Vec<u32>),
}

/// Why embeddings were not computed: the engine could not take the request, or the inputs or
/// the model do not allow it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbedFailure {
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

impl From<PromptError> for EmbedFailure {
    fn from(e: PromptError) -> Self {
        Self::Submit(e.into())
    }
}

/// Embedding requests that may wait for the engine thread at once.
const EMBED_QUEUE: usize = 32;

/// Why a control could not be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("too many controls are waiting; try again")]
    Busy,
    #[error("the engine has stopped")]
    Stopped,
}

/// A snapshot of the engine's load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineStats {
    pub slots: usize,
    pub active: usize,
    pub queued: usize,
    pub tokens_generated: u64,
    pub requests_finished: u64,
    /// llama.cpp threads in use: the configured count, or fewer while other programs keep
    /// cores busy.
    pub threads: usize,
    /// One stream's decode speed, tokens/s, averaged over finished generations (0: none yet).
    pub decode_tokens_per_s: f64,
    /// Cores' worth of CPU other programs used, as the thread governor last measured it: why
    /// `threads` is below the configured count (it gives a core up from
    /// [`crate::GIVE_UP_AT`] of one).
    pub cpu_others: f64,
    /// The KV pool and the prompt cache.
    pub pool: PoolStats,
    /// Speculation's guesses.
    pub spec: SpecStats,
}

/// Speculation: tokens guessed ahead and how many held.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct SpecStats {
    /// Tokens guessed, in total, and those that were what the sampler chose.
    pub guessed: u64,
    pub held: u64,
    /// How much faster steps with guesses ran than the same steps without, as measured here
    /// (recent steps weigh most; 0: none yet).
    pub speedup: f64,
}

/// The KV pool the slots share and the prompt cache that outlives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct PoolStats {
    /// Tokens the pool holds now: the requests' and idle sequences' kept for their prefix.
    pub kv_used: u64,
    /// Sequences saved in host memory (`--cache-ram`), and their bytes.
    pub cache_entries: u64,
    pub cache_bytes: u64,
    /// Prompt tokens restored from host memory instead of prefilled, in total.
    pub cache_restored_tokens: u64,
    /// Requests set aside while the pool was full (resumed later), in total.
    pub parked: u64,
}

/// A cheap, cloneable handle to one engine thread.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    commands: SyncSender<Command>,
    state: watch::Receiver<ModelState>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Embedding requests handed to the engine thread and not answered yet.
    embed_jobs: AtomicUsize,
    /// `--cache-scope node`: every request reads the one cache ([`CacheOwner::NODE`]).
    shared_cache: bool,
}

/// A generation's event stream. Dropping it cancels the generation.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::Receiver<Event>,
    stalled: Arc<AtomicBool>,
    commands: SyncSender<Command>,
}

impl Events {
    /// The next event; `None` once the stream has ended.
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.rx.recv().await;
        self.took_one();
        event
    }

    /// The next event if one is ready now.
    pub fn try_recv(&mut self) -> Option<Event> {
        let event = self.rx.try_recv().ok();
        if event.is_some() {
            self.took_one();
        }
        event
    }

    /// If the engine held this generation back because we were slow, tell it there is room
    /// once half the buffer is free: one wake-up per half buffer, not one per event, when the
    /// engine is faster than the reader. Free means neither queued nor taken by an event the
    /// engine has posted but not yet handed over (see `Courier`).
    fn took_one(&self) {
        // The flag first: it is almost always clear, and this runs for every token taken.
        if self.stalled.load(Ordering::Relaxed)
            && self.rx.capacity() >= EVENT_CAPACITY / 2
            && self.stalled.swap(false, Ordering::SeqCst)
        {
            let _ = self.commands.try_send(Command::Wake);
        }
    }
}

/// A submitted generation: its events, and how to steer it. Dropping `events` cancels it.
#[derive(Debug)]
pub struct Generation {
    pub id: RequestId,
    pub prompt_tokens: usize,
    pub model: Arc<ModelInfo>,
    pub events: Events,
    pub control: Controller,
}

/// Steers one generation. Each call takes effect at the engine's next step.
#[derive(Debug, Clone)]
pub struct Controller {
    id: RequestId,
    commands: SyncSender<Command>,
}

impl Controller {
    pub fn stop(&self) -> Result<(), ControlError> {
        self.send(ControlOp::Stop)
    }
    pub fn pause(&self) -> Result<(), ControlError> {
        self.send(ControlOp::Pause)
    }
    pub fn resume(&self) -> Result<(), ControlError> {
        self.send(ControlOp::Resume)
    }
    /// Restart from the prompt with the current parameters; the stream gets `Event::Restarted`.
    pub fn regenerate(&self) -> Result<(), ControlError> {
        self.send(ControlOp::Regenerate)
    }
    pub fn modify(&self, patch: SamplingPatch) -> Result<(), ControlError> {
        self.send(ControlOp::Modify(patch))
    }

    fn send(&self, op: ControlOp) -> Result<(), ControlError> {
        self.commands
            .try_send(Command::Control { id: self.id, op })
            .map_err(|e| match e {
                TrySendError::Full(_) => ControlError::Busy,
                TrySendError::Disconnected(_) => ControlError::Stopped,
            })
    }
}

impl Engine {
    /// Start an engine thread and begin loading the model; returns at once. Watch
    /// [`Engine::model_state`] or await [`Engine::ready`] for the outcome.
    ///
    /// Called inside a tokio runtime, the engine hands events to their readers through a task
    /// on that runtime (one wake-up per step), so the runtime must keep running while the
    /// engine does; called outside one, the engine thread hands them over itself.
    pub fn start(config: EngineConfig) -> Self {
        Self::start_after(config, Vec::new())
    }

    /// [`Engine::start`], unloading `before` first on the new engine's thread: the memory
    /// they hold (on the GPU above all) is free when this model is fitted to it.
    pub fn start_after(config: EngineConfig, before: Vec<Engine>) -> Self {
        let admission = Admission::new(config.slots, config.queue_capacity);
        let shared_cache = config.shared_cache;
        let (commands, rx) =
            sync_channel(config.slots + config.queue_capacity + CONTROL_CAPACITY + EMBED_QUEUE);
        let model = ModelId::from_file_name(
            &config
                .model_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let (state_tx, state) = watch::channel(ModelState::Loading {
            model,
            progress: 0.0,
            elapsed: Duration::ZERO,
        });
        let shared = Arc::new(Shared {
            admission,
            active: AtomicUsize::new(0),
            tokens_generated: AtomicU64::new(0),
            requests_finished: AtomicU64::new(0),
            decode_speed: AtomicU64::new(0),
            stopping: AtomicU8::new(0),
            throttle: AtomicU8::new(100),
            threads: AtomicUsize::new(config.threads.max(1)),
            cpu_others: AtomicU64::new(0),
            pool: crate::engine_loop::PoolCounters::default(),
            spec: crate::engine_loop::SpecCounters::default(),
        });
        let thread_shared = shared.clone();
        // Events are handed to readers through a task on the caller's runtime, if it has one.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let thread = std::thread::Builder::new()
            .name("hearth-engine".into())
            .spawn(move || {
                for e in before {
                    e.unload();
                }
                match config.script.clone() {
                    Some(script) => {
                        scripted::run(config, script, rx, state_tx, thread_shared, runtime)
                    }
                    None => scheduler::run(config, rx, state_tx, thread_shared, runtime),
                }
            })
            .expect("spawning the engine thread");
        let base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self {
            inner: Arc::new(Inner {
                commands,
                state,
                shared,
                // Millisecond time in the high bits keeps ids unique across restarts.
                next_id: AtomicU64::new(base << 20),
                thread: Mutex::new(Some(thread)),
                embed_jobs: AtomicUsize::new(0),
                shared_cache,
            }),
        }
    }

    pub fn model_state(&self) -> watch::Receiver<ModelState> {
        self.inner.state.clone()
    }

    /// The loaded model, if loading has finished.
    pub fn model(&self) -> Option<Arc<ModelInfo>> {
        match &*self.inner.state.borrow() {
            ModelState::Ready(info) => Some(info.clone()),
            _ => None,
        }
    }

    /// Wait until the model is loaded (or has failed to load).
    pub async fn ready(&self) -> Result<Arc<ModelInfo>, SubmitError> {
        let mut rx = self.inner.state.clone();
        loop {
            if let Some(result) = settled(&rx.borrow_and_update()) {
                return result;
            }
            if rx.changed().await.is_err() {
                return settled(&rx.borrow()).unwrap_or(Err(SubmitError::ShuttingDown));
            }
        }
    }

    /// Completes when a place in this engine is next given back (a request finished, failed or
    /// was abandoned): for callers that wait for room instead of being refused.
    pub fn room(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.inner.shared.admission.room()
    }

    pub fn stats(&self) -> EngineStats {
        let s = &self.inner.shared;
        let in_flight = s.admission.in_flight();
        let active = s.active.load(Ordering::Relaxed);
        EngineStats {
            slots: s.admission.slots(),
            active,
            queued: in_flight.saturating_sub(active),
            tokens_generated: s.tokens_generated.load(Ordering::Relaxed),
            requests_finished: s.requests_finished.load(Ordering::Relaxed),
            decode_tokens_per_s: s.decode_speed(),
            threads: s.threads.load(Ordering::Relaxed),
            cpu_others: f64::from_bits(s.cpu_others.load(Ordering::Relaxed)),
            pool: PoolStats {
                kv_used: s.pool.kv_used.load(Ordering::Relaxed),
                cache_entries: s.pool.cache_entries.load(Ordering::Relaxed),
                cache_bytes: s.pool.cache_bytes.load(Ordering::Relaxed),
                cache_restored_tokens: s.pool.cache_restored.load(Ordering::Relaxed),
                parked: s.pool.parked.load(Ordering::Relaxed),
            },
            spec: SpecStats {
                guessed: s.spec.guessed.load(Ordering::Relaxed),
                held: s.spec.held.load(Ordering::Relaxed),
                speedup: f64::from_bits(s.spec.speedup.load(Ordering::Relaxed)),
            },
        }
    }

    /// Set the throttle (0..=100, clamped): 0 pauses decoding (requests wait in the queue,
    /// controls still work), below 100 the engine works that share of the time.
    pub fn set_throttle(&self, level: u8) {
        self.inner
            .shared
            .throttle
            .store(level.min(100), Ordering::Release);
        let _ = self.inner.commands.try_send(Command::Wake);
    }

    pub fn throttle(&self) -> u8 {
        self.inner.shared.throttle.load(Ordering::Acquire)
    }

    /// Prepare and queue a request. Fails at once, before any token is generated, when the
    /// model is not ready, the prompt does not fit the context, or the queue is full.
    pub fn submit(&self, request: Request) -> Result<Generation, SubmitError> {
        let submitted = Instant::now();
        let model = self.serving()?;
        let Request {
            prompt,
            mut params,
            owner,
        } = request;
        // `--cache-scope node`: one cache for every caller.
        let owner = if self.inner.shared_cache {
            CacheOwner::NODE
        } else {
            owner
        };
        let prepared = match &prompt {
            Prompt::Chat(chat) => crate::prompt::chat_tokens(&model, chat, &mut params),
            Prompt::Text(text) => crate::prompt::text_tokens(&model, text).map(|t| (t, Vec::new())),
            Prompt::Tokens(ids) => Ok((model.prompter.tokens_from_ids(ids)?, Vec::new())),
        };
        let (tokens, media) = prepared.map_err(|e| match e {
            crate::prompt::Unfit::Prompt(e) => SubmitError::Prompt(e),
            crate::prompt::Unfit::TooLong(least) => SubmitError::ContextLengthExceeded {
                prompt_tokens: least,
                context: model.context,
                at_least: true,
            },
        })?;
        if tokens.is_empty() {
            return Err(PromptError::Empty.into());
        }
        if params.speculation == Some(hearth_protocol::Speculation::Draft) && model.draft.is_none()
        {
            return Err(PromptError::NoDraftModel {
                model: model.id.clone(),
                why: model.draft_refused.clone(),
            }
            .into());
        }
        if let Some(g) = &params.grammar {
            if params.ignore_eos {
                return Err(PromptError::GrammarWithoutEnd.into());
            }
            model.prompter.check_grammar(g, &params.grammar_triggers)?;
        }
        if tokens.len() >= model.context as usize {
            return Err(SubmitError::ContextLengthExceeded {
                prompt_tokens: tokens.len(),
                context: model.context,
                at_least: false,
            });
        }
        let shared = &self.inner.shared;
        if let Err(full) = shared.admission.try_admit() {
            return Err(SubmitError::QueueFull {
                slots: shared.admission.slots(),
                queued: full.queued,
                retry_after: full.retry_after,
            });
        }
        let id = RequestId(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = mpsc::channel(EVENT_CAPACITY);
        let stalled = Arc::new(AtomicBool::new(false));
        let prompt_tokens = tokens.len();
        let submission = Submission {
            id,
            tokens,
            params,
            events: tx,
            stalled: stalled.clone(),
            submitted,
            paused: false,
            media,
            owner,
        };
        if let Err(e) = self
            .inner
            .commands
            .try_send(Command::Submit(Box::new(submission)))
        {
            shared.admission.release(1);
            return Err(match e {
                TrySendError::Full(_) => SubmitError::QueueFull {
                    slots: shared.admission.slots(),
                    queued: shared.admission.in_flight(),
                    retry_after: Duration::from_secs(1),
                },
                TrySendError::Disconnected(_) => SubmitError::ShuttingDown,
            });
        }
        Ok(Generation {
            id,
            prompt_tokens,
            model,
            events: Events {
                rx,
                stalled,
                commands: self.inner.commands.clone(),
            },
            control: Controller {
                id,
                commands: self.inner.commands.clone(),
            },
        })
    }

    /// The model when it is ready to take requests; otherwise why not.
    pub(crate) fn serving(&self) -> Result<Arc<ModelInfo>, SubmitError> {
        match settled(&self.inner.state.borrow()) {
            Some(r) => r,
            None => {
                let (model, percent) = match &*self.inner.state.borrow() {
                    ModelState::Loading {
                        model, progress, ..
                    } => (model.clone(), (progress * 100.0) as u8),
                    _ => (ModelId(String::new()), 0),
                };
                Err(SubmitError::ModelLoading { model, percent })
            }
        }
    }

    /// Embeddings of `inputs`, one vector each (not normalized), computed beside the running
    /// generations (see `embedder`). With `truncate`, an input longer than
    /// [`EMBED_MAX_TOKENS`](crate::EMBED_MAX_TOKENS) keeps its beginning; without, it is refused.
    pub async fn embed(
        &self,
        inputs: Vec<EmbedInput>,
        truncate: bool,
    ) -> Result<Embeddings, EmbedFailure> {
        let submitted = Instant::now();
        let model = self.serving()?;
        if model.reranker {
            return Err(EmbedError::Unsupported(
                "it is a reranker (rank pooling): it scores documents against a query on /v1/rerank"
                    .into(),
            )
            .into());
        }
        if inputs.is_empty() {
            return Err(EmbedError::NoInput.into());
        }
        let max = model.embed_max_tokens as usize;
        let mut tokens = Vec::with_capacity(inputs.len());
        for (index, input) in inputs.into_iter().enumerate() {
            let mut t = match input {
                EmbedInput::Text(text) => model.prompter.tokenize(&text),
                EmbedInput::Tokens(ids) => model.prompter.tokens_from_ids(&ids)?,
            };
            if t.is_empty() {
                return Err(EmbedError::EmptyInput { index }.into());
            }
            if t.len() > max {
                if !truncate {
                    return Err(EmbedError::TooLong {
                        index,
                        tokens: t.len(),
                        max: model.embed_max_tokens,
                    }
                    .into());
                }
                t.truncate(max);
            }
            tokens.push(t);
        }
        self.embed_tokens(tokens, submitted).await
    }

    /// Inputs made into tokens already, one sequence each, to the embedding context: its
    /// pooled outputs (a vector, or a reranker's scores), once it had room for them.
    pub(crate) async fn embed_tokens(
        &self,
        tokens: Vec<Vec<LlamaToken>>,
        submitted: Instant,
    ) -> Result<Embeddings, EmbedFailure> {
        let waiting = &self.inner.embed_jobs;
        if waiting.fetch_add(1, Ordering::AcqRel) >= EMBED_QUEUE {
            waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::QueueFull {
                slots: self.inner.shared.admission.slots(),
                queued: EMBED_QUEUE,
                retry_after: Duration::from_secs(1),
            }
            .into());
        }
        // Counted out however this ends, a dropped caller included.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(waiting);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = EmbedJob {
            inputs: tokens,
            reply,
            submitted,
        };
        self.inner
            .commands
            .try_send(Command::Embed(Box::new(job)))
            .map_err(|e| match e {
                TrySendError::Full(_) => SubmitError::QueueFull {
                    slots: self.inner.shared.admission.slots(),
                    queued: self.inner.shared.admission.in_flight(),
                    retry_after: Duration::from_secs(1),
                },
                TrySendError::Disconnected(_) => SubmitError::ShuttingDown,
            })?;
        answer
            .await
            .map_err(|_| SubmitError::ShuttingDown)?
            .map_err(Into::into)
    }

    /// Stop the engine thread: running generations end with a `ShuttingDown` error. Blocks
    /// until the thread has exited (call from a blocking context).
    pub fn shutdown(&self) {
        self.stop(engine_loop::STOP_SHUTDOWN);
    }

    /// Drop every prompt cache entry `owner` made, in memory and on disk, and keep none of
    /// theirs from now on (an API key that is revoked: nothing can ask for its entries again,
    /// and they should not linger). Waits for room in the engine's command queue: call it
    /// from a blocking context.
    pub fn forget(&self, owner: CacheOwner) {
        // An engine that has stopped keeps nothing more.
        let _ = self.inner.commands.send(Command::Forget(owner));
    }

    /// Unload the model: running generations end with an `Unloaded` error and the state
    /// becomes [`ModelState::Unloaded`]. Blocks until the thread has exited.
    pub fn unload(&self) {
        self.stop(engine_loop::STOP_UNLOAD);
    }

    fn stop(&self, reason: u8) {
        let _ = self.inner.shared.stopping.compare_exchange(
            0,
            reason,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        // Wake the thread if it is idle; if the channel is full it is awake anyway.
        let _ = self.inner.commands.try_send(Command::Wake);
        let handle = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(handle) = handle {
            if handle.join().is_err() {
                tracing::error!("the engine thread panicked");
            }
        }
    }
}

fn settled(state: &ModelState) -> Option<Result<Arc<ModelInfo>, SubmitError>> {
    match state {
        ModelState::Ready(info) => Some(Ok(info.clone())),
        ModelState::Failed { model, message } => Some(Err(SubmitError::LoadFailed {
            model: model.clone(),
            message: message.clone(),
        })),
        ModelState::Stopped => Some(Err(SubmitError::ShuttingDown)),
        ModelState::Unloaded => Some(Err(SubmitError::NoModel)),
        ModelState::Loading { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;

    use super::*;
    use crate::events::{Done, Timing};
    use hearth_protocol::{FinishReason, Usage};

    fn done() -> Event {
        Event::Done(Done {
            reason: FinishReason::Length,
            usage: Usage::new(1, 1),
            timing: Timing::default(),
            stop_sequence: None,
        })
    }

    #[tokio::test]
    async fn a_reader_wakes_a_stalled_engine_once_half_its_buffer_is_free() {
        let (tx, rx) = mpsc::channel(EVENT_CAPACITY);
        let (commands, woken) = sync_channel(16);
        let stalled = Arc::new(AtomicBool::new(false));
        let mut events = Events {
            rx,
            stalled: stalled.clone(),
            commands,
        };
        for _ in 0..EVENT_CAPACITY {
            tx.try_send(done()).expect("room");
        }
        // The engine found the buffer full.
        stalled.store(true, Ordering::SeqCst);
        let mut wakes = Vec::new();
        for taken in 1..=EVENT_CAPACITY {
            let event = if taken % 2 == 0 {
                events.recv().await
            } else {
                events.try_recv()
            };
            assert!(event.is_some());
            if woken.try_recv().is_ok() {
                wakes.push(taken);
            }
        }
        assert_eq!(
            wakes,
            [EVENT_CAPACITY / 2],
            "one wake-up, when half the buffer is free"
        );
        assert!(!stalled.load(Ordering::SeqCst));
        // Not stalled: taking events wakes nobody.
        tx.try_send(done()).expect("room");
        assert!(events.recv().await.is_some());
        assert!(woken.try_recv().is_err());

        // Places the engine has taken for events still on their way count as used: with the
        // buffer full of queued and reserved events, half of it must be taken before a wake.
        let reserved: Vec<_> = (0..EVENT_CAPACITY / 2)
            .map(|_| tx.clone().try_reserve_owned().expect("room"))
            .collect();
        for _ in 0..EVENT_CAPACITY / 2 {
            tx.try_send(done()).expect("room");
        }
        stalled.store(true, Ordering::SeqCst);
        for taken in 1..=EVENT_CAPACITY / 2 {
            assert!(events.try_recv().is_some());
            assert_eq!(
                woken.try_recv().is_ok(),
                taken == EVENT_CAPACITY / 2,
                "woken after {taken} of {} taken",
                EVENT_CAPACITY / 2
            );
        }
        drop(reserved);
    }
}
