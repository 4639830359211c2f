//! # The route
//! One path for every request (DESIGN.md §2). Every door asks [`Router::resolve`] what the
//! model name a client gave means here (this node's model, one only remote providers serve, or
//! the door's "unknown model" error) and starts the generation with [`Router::submit`], or
//! [`Router::submit_waiting`] for doors whose protocol waits for room instead of refusing (the
//! batch door). Whatever runs it, the door gets the same [`Generation`].
//!
//! Where a request runs is decided by [`place::place`], a pure function over one record per
//! candidate (this node's engine, each hub worker, each LAN peer, and which of them ran the
//! conversation's previous turn: `affinity`); a generation placed elsewhere is driven by a
//! supervisor (`supervisor`) that continues it on another candidate when its provider is lost.
//!
//! Requests given as token ids (the batch door's continuations) are this node's tokenizer's
//! and always run here.
//!
//! Worker mode (`join`, `--join`) serves a hub's tasks (`task`) through the same route.
//!
//! Architecture invariant: every generation a door starts goes through `hearth-route`, and the
//! route knows no door's format and no HTTP: doors translate to and from its [`Generation`].
//! It reaches other machines only through the hub's reservations, never a socket of its own
//! (worker mode's one connection to its hub aside).

mod affinity;
pub mod generation;
pub mod join;
mod supervisor;
pub mod task;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hearth_engine::{ModelInfo, ModelState, Prompt, Request, SubmitError};
use hearth_protocol::{ModelId, RequestId};
use tokio_util::sync::CancellationToken;

pub use generation::{Answerer, Control, ControlError, Events, Generation};
pub use supervisor::{DISPATCH_WAIT, MAX_REDISPATCHES};

use hearth_hub::place::{self, Ask, Candidate, Choice};
use hearth_hub::{Hub, Reservation, WorkerId};
use hearth_models::{ModelHost, Registry};
use supervisor::RemotePrompt;

/// What a model name means on this node.
#[derive(Debug, Clone)]
pub struct Target {
    /// The model as this node names it.
    pub model: ModelId,
    /// This node's model, when it is the one named (its context, template and tokenizer).
    pub local: Option<Arc<ModelInfo>>,
}

impl Target {
    /// This node's model, loaded.
    pub fn local(info: Arc<ModelInfo>) -> Self {
        Self {
            model: info.id.clone(),
            local: Some(info),
        }
    }

    /// Tokens of context per request, when this node knows it (its own model).
    pub fn ctx(&self) -> Option<u32> {
        self.local.as_ref().map(|i| i.context)
    }
}

/// Why a model name cannot be served now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    /// Nothing here serves that name: each door reports it in its own shape.
    #[error("model '{requested}' is not available on this node; it serves {}", served_list(.served))]
    Unknown {
        requested: String,
        served: Vec<ModelId>,
    },
    /// No model, one still loading, one that failed, or shutting down.
    #[error(transparent)]
    Engine(#[from] SubmitError),
}

fn served_list(served: &[ModelId]) -> String {
    if served.is_empty() {
        return "no model".into();
    }
    served
        .iter()
        .map(|m| format!("'{m}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Splits a model over the peers that share their memory (see `hearth_split::Splits::start`); a
/// model split already is fine. Why it could not be split otherwise.
pub type SplitModel = Box<
    dyn Fn(ModelId) -> futures_util::future::BoxFuture<'static, Result<(), String>> + Send + Sync,
>;

/// How this node splits a model too large for it, once the node is up.
#[derive(Default)]
struct AutoSplit(std::sync::OnceLock<SplitModel>);

impl std::fmt::Debug for AutoSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AutoSplit")
            .field(&self.0.get().is_some())
            .finish()
    }
}

/// How often a request waiting for a split model looks for its worker.
const SPLIT_POLL: Duration = Duration::from_millis(100);

/// When a client of a split model that is down and too large for this machine may try again
/// (the split is tried again within about this long at first).
const SPLIT_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Places generations on this node's engine or on the hub's workers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Router {
    host: Arc<ModelHost>,
    registry: Registry,
    hub: Option<Hub>,
    shutdown: CancellationToken,
    next_id: Arc<AtomicU64>,
    /// Where each conversation's latest turn ran.
    affinity: Arc<affinity::Affinity>,
    /// Splits a model too large for this machine.
    auto_split: Arc<AutoSplit>,
}

impl Router {
    pub fn new(
        host: Arc<ModelHost>,
        registry: Registry,
        hub: Option<Hub>,
        shutdown: CancellationToken,
    ) -> Self {
        let base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self {
            host,
            registry,
            hub,
            shutdown,
            // Like the engine's ids (millisecond time in the high bits), with the top bit set
            // so a remote generation's id never equals a local one.
            next_id: Arc::new(AtomicU64::new((1 << 63) | (base << 20))),
            affinity: Arc::default(),
            auto_split: Arc::default(),
        }
    }

    /// This node's engine host.
    pub fn host(&self) -> &Arc<ModelHost> {
        &self.host
    }

    pub fn hub(&self) -> Option<&Hub> {
        self.hub.as_ref()
    }

    /// The models folder, whose models this node loads when a request names one.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every model this node answers for: those loaded here (the focus model first), then its
    /// workers' and peers', then the ones in its models folder (loaded when asked for).
    pub fn models(&self) -> Vec<ModelId> {
        let mut out = self.host.models_here();
        let mut seen: std::collections::HashSet<ModelId> = out.iter().cloned().collect();
        let mut add = |m: ModelId| {
            if seen.insert(m.clone()) {
                out.push(m);
            }
        };
        if let Some(hub) = &self.hub {
            hub.models().into_iter().for_each(&mut add);
        }
        self.registry.scan_ids().into_iter().for_each(&mut add);
        out
    }

    /// What `requested` (None or empty: this node's focus model) means here: a model loaded
    /// here, else one a worker or peer has loaded, else one in the models folder, which starts
    /// loading now. A model that is loading is waited for up to `wait` (zero: not at all),
    /// then reported as loading.
    pub async fn resolve(
        &self,
        requested: Option<&str>,
        wait: Duration,
    ) -> Result<Target, ResolveError> {
        let requested = requested.filter(|m| !m.is_empty());
        let unknown = |m: &str| ResolveError::Unknown {
            requested: m.chars().take(200).collect(),
            served: self.models(),
        };
        let engine = match requested {
            // No name: the focus model; with none here, the first one a peer or worker serves,
            // as a client of this node would expect.
            None => match self.host.engine() {
                Some(engine) => engine,
                None => {
                    if let Some(model) = self
                        .hub
                        .as_ref()
                        .and_then(|h| h.models().into_iter().next())
                    {
                        return Ok(Target { model, local: None });
                    }
                    return Err(self
                        .host
                        .ready()
                        .await
                        .err()
                        .unwrap_or(SubmitError::NoModel)
                        .into());
                }
            },
            Some(m) => {
                let here = self.host.models_here().into_iter().find(|id| id.matches(m));
                let healthy = here
                    .as_ref()
                    .and_then(|id| self.host.engine_of(id))
                    .filter(|e| !matches!(*e.model_state().borrow(), ModelState::Failed { .. }));
                match healthy {
                    Some(engine) => engine,
                    None => {
                        if let Some(model) = self.hub.as_ref().and_then(|h| h.serves(m)) {
                            return Ok(Target { model, local: None });
                        }
                        // A split model's file may be outside the folder (`--model PATH`).
                        match self.registry.find(m).or_else(|| self.host.split_file(m)) {
                            Some((id, path)) => {
                                if let Some(model) = self.split(m, &id, &path, wait).await? {
                                    return Ok(Target { model, local: None });
                                }
                                self.host.ensure(&id, path)?
                            }
                            None => match here.and_then(|id| self.host.engine_of(&id)) {
                                Some(failed) => failed,
                                None => return Err(unknown(m)),
                            },
                        }
                    }
                }
            }
        };
        let ready = tokio::select! {
            r = tokio::time::timeout(wait, engine.ready()) => r,
            () = self.shutdown.cancelled() => return Err(SubmitError::ShuttingDown.into()),
        };
        match ready {
            Ok(r) => {
                let target = Target::local(r?);
                self.host.touch(&target.model);
                Ok(target)
            }
            Err(_) => Err(loading(&engine).into()),
        }
    }

    /// Split models too large for this machine with `split` from now on.
    pub fn set_auto_split(&self, split: SplitModel) {
        let _ = self.auto_split.0.set(split);
    }

    /// `id` (file `path`, asked for as `m`) served split: when it is too large for this
    /// machine it is split over the peers that share memory (unless it is already), and its
    /// worker is waited for up to `wait`. `None`: it is not split and fits here.
    async fn split(
        &self,
        m: &str,
        id: &ModelId,
        path: &std::path::Path,
        wait: Duration,
    ) -> Result<Option<ModelId>, ResolveError> {
        if let Some(why) = self.host.split_lost(id) {
            return self.split_down(id, path, why);
        }
        if !self.host.is_elsewhere(id) {
            let (Some((need, budget)), Some(split)) =
                (self.host.too_large(path), self.auto_split.0.get())
            else {
                return Ok(None);
            };
            tracing::info!(model = %id, need_mib = need >> 20, budget_mib = budget >> 20, "too large for this machine: splitting it over the peers that share memory");
            if let Err(why) = split(id.clone()).await {
                return Err(SubmitError::LoadFailed {
                    model: id.clone(),
                    message: format!(
                        "not enough memory: it needs about {} MiB and models here may use {} MiB, and it cannot be split: {why}",
                        need >> 20,
                        budget >> 20
                    ),
                }
                .into());
            }
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(model) = self.hub.as_ref().and_then(|h| h.serves(m)) {
                return Ok(Some(model));
            }
            // Its split lost a peer while this request waited: answered now, not at the
            // deadline.
            if let Some(why) = self.host.split_lost(id) {
                return self.split_down(id, path, why);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(SubmitError::ModelLoading {
                    model: id.clone(),
                    percent: 0,
                }
                .into());
            }
            tokio::select! {
                () = tokio::time::sleep(SPLIT_POLL.min(wait)) => {}
                () = self.shutdown.cancelled() => return Err(SubmitError::ShuttingDown.into()),
            }
        }
    }

    /// A split model whose split lost a peer (`why`) and is not set up again yet: served whole
    /// here when it fits (`None`: load it here), else unavailable for now, naming the peer.
    fn split_down(
        &self,
        id: &ModelId,
        path: &std::path::Path,
        why: String,
    ) -> Result<Option<ModelId>, ResolveError> {
        match self.host.too_large(path) {
            None => Ok(None),
            Some((need, budget)) => Err(SubmitError::Unavailable {
                model: id.clone(),
                message: format!(
                    "{id} is split across machines and its split is down ({why}); it needs about {} MiB and models here may use {} MiB, so it cannot be served whole here. It is set up again when its peers share memory",
                    need >> 20,
                    budget >> 20
                ),
                retry_after: SPLIT_RETRY_AFTER,
            }
            .into()),
        }
    }

    /// Start a generation of `target` wherever it should run. Fails at once like the engine
    /// when this node is full; a remote generation's problems arrive as an `Event::Error` on
    /// its stream.
    pub fn submit(&self, target: &Target, request: Request) -> Result<Generation, SubmitError> {
        let Some(hub) = &self.hub else {
            return self
                .host
                .submit(&target.model, request)
                .map(Generation::local);
        };
        let Some(prompt) = RemotePrompt::of(&request.prompt) else {
            // Token ids mean this node's tokenizer: such requests (continuations) stay here.
            return self
                .host
                .submit(&target.model, request)
                .map(Generation::local);
        };
        let serve_local = target.local.is_some() && hub.serves_locally();
        // Raw text prompts, grammars, tools and `think` travel only in Hearth's task extension.
        let need_hearth = matches!(prompt, RemotePrompt::Text(_))
            || request.params.grammar.is_some()
            || prompt.needs_hearth_task();
        // A conversation's next turn prefers the place that ran its last one.
        let conversation = match &prompt {
            RemotePrompt::Chat(c) => Some(c.messages.as_slice()),
            RemotePrompt::Text(_) => None,
        };
        let preferred = conversation.and_then(|m| self.affinity.preferred(m));
        let mut placement = placement(
            &[],
            hub,
            &self.host,
            &target.model,
            Needs {
                continuation: need_hearth,
                vision: prompt.has_images(),
                audio: prompt.has_audio(),
            },
            serve_local,
            preferred,
        );
        // Queued here while older requests wait for the first slot anywhere: it waits with
        // them instead of going ahead of them.
        if matches!(placement, Destination::Local) && hub.waiting() > 0 {
            let s = self.host.stats_of(&target.model);
            if s.active + s.queued >= s.slots {
                placement = Destination::Wait;
            }
        }
        if let Some(m) = conversation {
            match &placement {
                Destination::Local => self.affinity.remember(m, Provider::Local),
                Destination::Worker(r) => self.affinity.remember(m, Provider::Worker(r.worker)),
                Destination::Wait | Destination::Nobody => {}
            }
        }
        match placement {
            Destination::Local => {
                return self
                    .host
                    .submit(&target.model, request)
                    .map(Generation::local)
            }
            Destination::Wait if !hub.queue_has_room() => {
                return Err(SubmitError::QueueFull {
                    slots: hub
                        .snapshot()
                        .workers
                        .iter()
                        .map(|w| w.max_concurrency)
                        .sum(),
                    queued: hearth_hub::QUEUE_CAPACITY,
                    retry_after: Duration::from_secs(1),
                })
            }
            _ => {}
        }
        Ok(supervisor::spawn(supervisor::Start {
            id: RequestId(self.next_id.fetch_add(1, Ordering::Relaxed)),
            hub: hub.clone(),
            host: self.host.clone(),
            model: target.model.clone(),
            prompt,
            params: request.params,
            serve_local,
            shutdown: self.shutdown.clone(),
            first: placement,
        }))
    }

    /// Like [`Router::submit`], but when this node's engine has no room, wait for it (until
    /// `deadline`) instead of refusing: for protocols whose clients expect their work to queue
    /// (the batch door, whose token-id prompts always run here). One caller's requests,
    /// submitted one after another, keep their order; requests of different callers are not
    /// ordered among themselves.
    pub async fn submit_waiting(
        &self,
        target: &Target,
        request: Request,
        deadline: tokio::time::Instant,
    ) -> Result<Generation, SubmitError> {
        loop {
            // Ask to be woken before trying, so a place freed in between is not missed
            // (without an engine here, the route's own queue was full: look again shortly).
            let engine = self.host.engine_of(&target.model).is_some();
            let room = self.host.room(&target.model);
            let room = async move {
                if engine {
                    room.await;
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            match self.submit(target, request.clone()) {
                Err(SubmitError::QueueFull { .. }) if tokio::time::Instant::now() < deadline => {}
                other => return other,
            }
            tokio::select! {
                () = room => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = self.shutdown.cancelled() => return Err(SubmitError::ShuttingDown),
            }
        }
    }
}

/// The engine's "still loading" for a model.
fn loading(engine: &hearth_engine::Engine) -> SubmitError {
    match engine.model_state().borrow().clone() {
        ModelState::Loading {
            model, progress, ..
        } => SubmitError::ModelLoading {
            model,
            percent: (progress * 100.0).floor().clamp(0.0, 99.0) as u8,
        },
        _ => SubmitError::ModelLoading {
            model: ModelId::default(),
            percent: 0,
        },
    }
}

/// The prompt that continues an answer from `delivered`, the text already sent: the
/// conversation rendered by the model's chat template (or the raw prompt) followed by that
/// text. With nothing delivered, the prompt itself. The one place continuations are made: the
/// supervisor continuing here an answer lost elsewhere, and worker mode continuing one for a
/// Hearth hub.
pub fn continuation(info: &ModelInfo, prompt: Prompt, delivered: &str) -> Result<Prompt, String> {
    if delivered.is_empty() {
        return Ok(prompt);
    }
    Ok(match prompt {
        Prompt::Chat(chat) => {
            if chat.tools.is_some() {
                return Err("an answer with tools cannot be continued from part of it".into());
            }
            // Its rendered text would hold the images' places, not the images.
            if chat
                .messages
                .iter()
                .any(|m| !m.images.is_empty() || !m.audio.is_empty())
            {
                return Err(
                    "an answer about images or audio cannot be continued from part of it".into(),
                );
            }
            let rendered = info.render_chat(&chat).map_err(|e| e.to_string())?;
            Prompt::Text(rendered + delivered)
        }
        Prompt::Text(text) => Prompt::Text(text + delivered),
        // Token ids never leave this node, so they are never continued from text.
        Prompt::Tokens(tokens) => Prompt::Tokens(tokens),
    })
}

/// Where a request goes now.
#[derive(Debug)]
pub(crate) enum Destination {
    Local,
    Worker(Reservation),
    /// Workers serve the model but none has a free slot.
    Wait,
    Nobody,
}

/// A place that can run requests, as placement names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Local,
    Worker(WorkerId),
}

/// This node's engine as a placement candidate: its real load, throttle, (sensor) thermal
/// level and measured decode speed, which placement compares with the other places'.
fn local_candidate(host: &ModelHost, model: &ModelId) -> Candidate<Provider> {
    let s = host.stats_of(model);
    Candidate {
        id: Provider::Local,
        models: host
            .model_info(model)
            .map(|i| i.id.clone())
            .into_iter()
            .collect(),
        free_slots: s.slots.saturating_sub(s.active + s.queued),
        queue_depth: s.queued,
        throttle: host.throttle(),
        thermal: host.thermal(),
        tokens_per_s: s.decode_tokens_per_s,
        local: true,
        continues: true,
        preferred: false,
        vision: host.model_info(model).is_some_and(|i| i.vision),
    }
}

/// What a request needs of the place it runs at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Needs {
    /// Hearth's extension: a raw prompt, a grammar, tools, text to continue.
    pub(crate) continuation: bool,
    /// Images: a copy of the model that sees them.
    pub(crate) vision: bool,
    /// Audio: this node's copy only. Peers and workers do not say whether theirs hears, and
    /// one older than audio would drop the clips unseen.
    pub(crate) audio: bool,
}

/// Decide where `model` runs now ([`place::place`] over this node's engine, when it may serve,
/// and the hub's workers and LAN peers but those in `avoid`; `preferred` ran the conversation's
/// previous turn) and reserve the worker's slot it picks. Images go where the model is said to
/// see them; when no place says so, where the model is after all: a hub worker (whose
/// protocol does not say) or an older peer may see them, and this node's engine answers that
/// it cannot.
pub(crate) fn placement(
    avoid: &[WorkerId],
    hub: &Hub,
    host: &ModelHost,
    model: &ModelId,
    needs: Needs,
    serve_local: bool,
    preferred: Option<Provider>,
) -> Destination {
    // A worker's slot can be taken between reading the candidates and reserving it: look again.
    for _ in 0..3 {
        let mut candidates: Vec<Candidate<Provider>> = Vec::new();
        if serve_local {
            candidates.push(local_candidate(host, model));
        }
        candidates.extend(
            hub.candidates(model)
                .into_iter()
                .filter(|c| !avoid.contains(&c.id) && !needs.audio)
                .map(|c| {
                    let id = c.id;
                    c.with_id(Provider::Worker(id))
                }),
        );
        for c in &mut candidates {
            c.preferred = preferred == Some(c.id);
        }
        let ask = Ask {
            model,
            needs_continuation: needs.continuation,
            needs_vision: needs.vision,
        };
        let mut choice = place::place(ask, &candidates);
        if choice == Choice::Nobody && ask.needs_vision {
            choice = place::place(
                Ask {
                    needs_vision: false,
                    ..ask
                },
                &candidates,
            );
        }
        match choice {
            Choice::Run(Provider::Local) => return Destination::Local,
            Choice::Run(Provider::Worker(w)) => {
                if let Some(r) = hub.reserve(w) {
                    return Destination::Worker(r);
                }
            }
            Choice::Wait => return Destination::Wait,
            Choice::Nobody => return Destination::Nobody,
        }
    }
    Destination::Wait
}
