//! The model host: the engines (one per loaded model) that serve this node. A request for a
//! model that is not loaded starts its load (one load per model however many requests wait);
//! models stay loaded while the memory budget allows, the least recently used idle one is
//! unloaded to make room, and one loaded on demand unloads after `keep_alive` idle. The host's
//! state channel follows the focus model ([`focus`]), which the UI and worker mode show; the
//! route submits here for requests it places on this node.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_engine::{Engine, EngineStats, Generation, ModelInfo, ModelState, Request, SubmitError};
use hearth_protocol::ModelId;
use tokio::sync::watch;

mod focus;
mod keep_alive;
mod room;
mod settings;

pub use settings::EngineSettings;

use super::memory;
use hearth_base::thermal::ThermalLevel;

/// How long a model a request found ready is kept from eviction while that request submits.
const RESERVE: Duration = Duration::from_secs(1);

/// Ollama's default, which `--keep-alive` follows.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(300);

/// A loaded (or loading) model.
#[derive(Debug)]
struct Entry {
    id: ModelId,
    engine: Engine,
    /// Told when it was last asked for, or last seen busy.
    last_used: Instant,
    /// Its expected memory (see [`memory::estimate`]).
    estimate: u64,
    /// The part of `estimate` that is its mapped file (the page cache holds it).
    weights: u64,
    /// The part of `estimate` expected in video memory (on this node's GPUs): the rest is in
    /// system memory.
    vram: u64,
    /// Loaded by the user (at start or in the UI): only memory or the user unloads it.
    pinned: bool,
    /// A client's keep-alive for it (Ollama's `keep_alive`), over the host's.
    keep_alive: Option<Duration>,
    /// Unique over the host's life, so a forwarder of an unloaded entry stops.
    serial: u64,
    /// Embedding requests running on it (the engine's stats count generations only).
    embedding: Arc<AtomicUsize>,
    /// Until when a request that found it ready may still be on its way to submit.
    reserved_until: Option<Instant>,
}

impl Entry {
    fn busy(&self) -> bool {
        let s = self.engine.stats();
        s.active + s.queued > 0
            || self.embedding.load(Ordering::Relaxed) > 0
            || matches!(
                *self.engine.model_state().borrow(),
                ModelState::Loading { .. }
            )
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: Vec<Entry>,
    /// The model the host's state channel follows.
    focus: Option<ModelId>,
    /// The focus before it: the model the focus goes back to when the new one fails to load.
    focus_before: Option<ModelId>,
    next_serial: u64,
    /// How many times each model was loaded.
    loads: std::collections::HashMap<ModelId, u64>,
}

impl Inner {
    fn get(&self, id: &ModelId) -> Option<&Entry> {
        self.entries.iter().find(|e| &e.id == id)
    }

    fn get_mut(&mut self, id: &ModelId) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| &e.id == id)
    }
}

#[derive(Debug)]
pub struct ModelHost {
    settings: EngineSettings,
    inner: Mutex<Inner>,
    /// The focus model's state.
    state: watch::Sender<ModelState>,
    /// The models loaded and ready here, for heartbeats and listings.
    loaded: watch::Sender<Vec<ModelId>>,
    /// The user's cap on the throttle (Settings), kept across model swaps.
    user_cap: AtomicU8,
    /// "Pause serving": throttle 0 whatever the cap.
    paused: std::sync::atomic::AtomicBool,
    /// What the machine's temperature allows (100 without sensors).
    thermal_throttle: AtomicU8,
    /// The thermal level sensors report (nominal without sensors: an estimate from CPU
    /// pressure is never a reason to send work elsewhere).
    thermal: AtomicU8,
    /// Models served by another process of this node (split ones): never loaded here while
    /// their worker serves them.
    elsewhere: Mutex<std::collections::HashMap<ModelId, (PathBuf, Elsewhere)>>,
}

/// A split model's state as this node's engines see it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Elsewhere {
    /// Its worker process serves it, or is starting to: never loaded here.
    Worker,
    /// Its split lost a peer and waits to be set up again (why, naming the peer): meanwhile
    /// it may be loaded whole here, when it fits.
    Lost(String),
}

/// An embedding request at work on a model (see [`ModelHost::embedding`]).
#[derive(Debug)]
pub struct InUse(Arc<AtomicUsize>);

impl Drop for InUse {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ModelHost {
    pub fn new(settings: EngineSettings) -> Arc<Self> {
        let (state, _) = watch::channel(ModelState::Unloaded);
        let (loaded, _) = watch::channel(Vec::new());
        Arc::new(Self {
            settings,
            inner: Mutex::new(Inner::default()),
            state,
            loaded,
            user_cap: AtomicU8::new(100),
            paused: std::sync::atomic::AtomicBool::new(false),
            thermal_throttle: AtomicU8::new(100),
            thermal: AtomicU8::new(ThermalLevel::Nominal as u8),
            elsewhere: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// How engines are configured here.
    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// Whether `model` (file `path`) is served by another process of this node (a split
    /// model's worker; `None`: no longer): then it is never loaded here (a load is refused; a
    /// request for it is told it is loading until that process serves it).
    pub fn set_elsewhere(&self, model: &ModelId, path: Option<&std::path::Path>) {
        let mut map = self.elsewhere_lock();
        match path {
            Some(path) => {
                map.insert(model.clone(), (path.to_owned(), Elsewhere::Worker));
            }
            None => {
                map.remove(model);
            }
        }
    }

    /// `model`'s split lost a peer (`why` names it) and is not served by its worker until it
    /// is set up again: meanwhile it may load whole here.
    pub fn set_split_lost(&self, model: &ModelId, why: String) {
        if let Some((_, state)) = self.elsewhere_lock().get_mut(model) {
            *state = Elsewhere::Lost(why);
        }
    }

    /// Why `model`'s split is down, while it is.
    pub fn split_lost(&self, model: &ModelId) -> Option<String> {
        match self.elsewhere_lock().get(model) {
            Some((_, Elsewhere::Lost(why))) => Some(why.clone()),
            _ => None,
        }
    }

    /// The split model a client calls `name`, and its file (which need not be in the models
    /// folder: one loaded with `--model PATH`).
    pub fn split_file(&self, name: &str) -> Option<(ModelId, PathBuf)> {
        self.elsewhere_lock()
            .iter()
            .find(|(id, _)| id.matches(name))
            .map(|(id, (path, _))| (id.clone(), path.clone()))
    }

    /// Whether `model` is served by another process of this node (a split model's worker).
    pub fn is_elsewhere(&self, model: &ModelId) -> bool {
        matches!(
            self.elsewhere_lock().get(model),
            Some((_, Elsewhere::Worker))
        )
    }

    fn elsewhere_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<ModelId, (PathBuf, Elsewhere)>> {
        self.elsewhere.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The throttle in force: the lower of the user's and the machine's (DESIGN.md §4-5).
    pub fn throttle(&self) -> u8 {
        if self.is_paused() {
            return 0;
        }
        self.user_cap
            .load(Ordering::Acquire)
            .min(self.thermal_throttle.load(Ordering::Acquire))
    }

    /// Pause serving (throttle 0: requests wait, nothing decodes) or resume.
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        self.apply_throttle();
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// The user's cap on the throttle, 0-100 (Settings: how much of this machine to give).
    pub fn set_throttle_cap(&self, cap: u8) {
        self.user_cap.store(cap.min(100), Ordering::Release);
        self.apply_throttle();
    }

    pub fn throttle_cap(&self) -> u8 {
        self.user_cap.load(Ordering::Acquire)
    }

    /// The machine's thermal level from sensors, and what it allows (`None`: no sensors, so
    /// nominal and no limit); the telemetry sampler sets it.
    pub fn set_thermal(&self, sensed: Option<ThermalLevel>) {
        let level = sensed.unwrap_or(ThermalLevel::Nominal);
        self.thermal.store(level as u8, Ordering::Release);
        self.set_thermal_throttle(level.throttle());
    }

    /// The thermal level placement sees (see [`ModelHost::set_thermal`]).
    pub fn thermal(&self) -> ThermalLevel {
        ThermalLevel::from_u8(self.thermal.load(Ordering::Acquire))
    }

    /// What the thermal level allows.
    fn set_thermal_throttle(&self, level: u8) {
        if self.thermal_throttle.swap(level.min(100), Ordering::AcqRel) != level.min(100) {
            self.apply_throttle();
        }
    }

    fn apply_throttle(&self) {
        let level = self.throttle();
        for e in &self.lock().entries {
            e.engine.set_throttle(level);
        }
    }

    /// The focus model's engine, if it is loaded or loading.
    pub fn engine(&self) -> Option<Engine> {
        let inner = self.lock();
        let focus = inner.focus.as_ref()?;
        inner.get(focus).map(|e| e.engine.clone())
    }

    /// The engine of `model`, if it is loaded or loading.
    pub fn engine_of(&self, model: &ModelId) -> Option<Engine> {
        self.lock().get(model).map(|e| e.engine.clone())
    }

    /// The engine of `model` for an embedding request, and a mark that keeps the model busy
    /// (neither reaped by its keep-alive nor evicted for another) until it is dropped.
    pub fn embedding(&self, model: &ModelId) -> Option<(Engine, InUse)> {
        let mut inner = self.lock();
        let e = inner.get_mut(model)?;
        e.last_used = Instant::now();
        e.reserved_until = None;
        e.embedding.fetch_add(1, Ordering::Relaxed);
        Some((e.engine.clone(), InUse(e.embedding.clone())))
    }

    /// The focus model's state.
    pub fn state(&self) -> watch::Receiver<ModelState> {
        self.state.subscribe()
    }

    /// The models loaded and ready here, as they change.
    pub fn loaded(&self) -> watch::Receiver<Vec<ModelId>> {
        self.loaded.subscribe()
    }

    /// The models loaded and ready here.
    pub fn loaded_models(&self) -> Vec<ModelId> {
        self.loaded.borrow().clone()
    }

    /// Every model loaded or loading here, the focus model first.
    pub fn models_here(&self) -> Vec<ModelId> {
        let inner = self.lock();
        let mut out: Vec<ModelId> = inner.focus.iter().cloned().collect();
        for e in &inner.entries {
            if !out.contains(&e.id) {
                out.push(e.id.clone());
            }
        }
        out
    }

    /// The model `name` names when it is loaded or loading here, as a delete must know. One
    /// whose load failed holds nothing: it is dropped, and `None` is the answer.
    pub async fn holds(&self, name: &str) -> Option<ModelId> {
        let (id, failed) = {
            let inner = self.lock();
            let e = inner.entries.iter().find(|e| e.id.matches(name))?;
            let failed = matches!(*e.engine.model_state().borrow(), ModelState::Failed { .. });
            (e.id.clone(), failed)
        };
        if failed {
            self.unload(Some(&id)).await;
            return None;
        }
        Some(id)
    }

    /// The focus model, when it is ready.
    pub fn model(&self) -> Option<Arc<ModelInfo>> {
        match &*self.state.borrow() {
            ModelState::Ready(info) => Some(info.clone()),
            _ => None,
        }
    }

    /// `model`, when it is loaded here and ready.
    pub fn model_info(&self, model: &ModelId) -> Option<Arc<ModelInfo>> {
        self.engine_of(model)?.model()
    }

    /// The loaded model a client's name refers to (`None`: the focus model), when ready.
    pub fn ready_model(&self, requested: Option<&str>) -> Option<Arc<ModelInfo>> {
        match requested {
            None => self.model(),
            Some(r) => {
                let id = self.models_here().into_iter().find(|m| m.matches(r))?;
                self.model_info(&id)
            }
        }
    }

    /// The focus model, as clients name it, while it is loaded, loading or failed.
    pub fn model_id(&self) -> Option<ModelId> {
        match &*self.state.borrow() {
            ModelState::Ready(info) => Some(info.id.clone()),
            ModelState::Loading { model, .. } | ModelState::Failed { model, .. } => {
                Some(model.clone())
            }
            ModelState::Stopped | ModelState::Unloaded => None,
        }
    }

    /// How many times `model` was loaded since the node started.
    pub fn loads(&self, model: &ModelId) -> u64 {
        self.lock().loads.get(model).copied().unwrap_or(0)
    }

    /// Every engine's load together (the configured slots when none is loaded).
    pub fn stats(&self) -> EngineStats {
        let engines: Vec<Engine> = self
            .lock()
            .entries
            .iter()
            .map(|e| e.engine.clone())
            .collect();
        let mut total = EngineStats {
            slots: if engines.is_empty() {
                self.settings.slots
            } else {
                0
            },
            active: 0,
            queued: 0,
            tokens_generated: 0,
            requests_finished: 0,
            threads: self.settings.threads.max(1),
            decode_tokens_per_s: 0.0,
            cpu_others: 0.0,
            pool: hearth_engine::PoolStats::default(),
            spec: hearth_engine::SpecStats::default(),
        };
        // The speed-up of the engine that guessed most.
        let mut most_guessed = 0;
        if !engines.is_empty() {
            // The threads engines use now (fewer while another program keeps a core busy).
            total.threads = 0;
        }
        for s in engines.iter().map(Engine::stats) {
            total.threads = total.threads.max(s.threads);
            total.slots += s.slots;
            total.active += s.active;
            total.queued += s.queued;
            total.tokens_generated += s.tokens_generated;
            total.requests_finished += s.requests_finished;
            total.decode_tokens_per_s = total.decode_tokens_per_s.max(s.decode_tokens_per_s);
            total.cpu_others = total.cpu_others.max(s.cpu_others);
            total.pool.kv_used += s.pool.kv_used;
            total.pool.cache_entries += s.pool.cache_entries;
            total.pool.cache_bytes += s.pool.cache_bytes;
            total.pool.cache_restored_tokens += s.pool.cache_restored_tokens;
            total.pool.parked += s.pool.parked;
            if s.spec.guessed > most_guessed {
                most_guessed = s.spec.guessed;
                total.spec.speedup = s.spec.speedup;
            }
            total.spec.guessed += s.spec.guessed;
            total.spec.held += s.spec.held;
        }
        total
    }

    /// The load of `model`'s engine (no slots when it is not loaded).
    pub fn stats_of(&self, model: &ModelId) -> EngineStats {
        self.engine_of(model).map_or(
            EngineStats {
                slots: 0,
                active: 0,
                queued: 0,
                tokens_generated: 0,
                requests_finished: 0,
                threads: self.settings.threads.max(1),
                decode_tokens_per_s: 0.0,
                cpu_others: 0.0,
                pool: hearth_engine::PoolStats::default(),
                spec: hearth_engine::SpecStats::default(),
            },
            |e| e.stats(),
        )
    }

    /// Wait until the focus model is ready (or failed, or there is none).
    pub async fn ready(&self) -> Result<Arc<ModelInfo>, SubmitError> {
        let mut rx = self.state.subscribe();
        loop {
            let settled = match &*rx.borrow_and_update() {
                ModelState::Ready(info) => Some(Ok(info.clone())),
                ModelState::Failed { model, message } => Some(Err(SubmitError::LoadFailed {
                    model: model.clone(),
                    message: message.clone(),
                })),
                ModelState::Unloaded => Some(Err(SubmitError::NoModel)),
                ModelState::Stopped => Some(Err(SubmitError::ShuttingDown)),
                ModelState::Loading { .. } => None,
            };
            if let Some(s) = settled {
                return s;
            }
            if rx.changed().await.is_err() {
                return Err(SubmitError::ShuttingDown);
            }
        }
    }

    /// Completes when `model`'s engine next gives a place back (at once when it is not loaded:
    /// submitting says why).
    pub fn room(&self, model: &ModelId) -> impl std::future::Future<Output = ()> + Send + 'static {
        // Subscribed now, not when first polled: a slot freed in between is not missed.
        let room = self.engine_of(model).map(|e| e.room());
        async move {
            if let Some(room) = room {
                room.await;
            }
        }
    }

    /// Drop every prompt cache entry of `owner` (a revoked API key's): in each loaded model's
    /// engine, and the files of every model in `--cache-disk`.
    pub fn forget_cache_owner(&self, owner: hearth_engine::CacheOwner) {
        let engines: Vec<Engine> = self
            .lock()
            .entries
            .iter()
            .map(|e| e.engine.clone())
            .collect();
        for e in engines {
            e.forget(owner);
        }
        if let Some(root) = &self.settings.cache_disk {
            hearth_engine::forget_on_disk(root, owner);
        }
    }

    /// Submit to `model`'s engine; it counts as used now.
    pub fn submit(&self, model: &ModelId, request: Request) -> Result<Generation, SubmitError> {
        let engine = {
            let mut inner = self.lock();
            match inner.entries.iter_mut().find(|e| &e.id == model) {
                Some(e) => {
                    e.last_used = Instant::now();
                    e.engine.clone()
                }
                None => return Err(SubmitError::NoModel),
            }
        };
        let generation = engine.submit(request)?;
        // Busy from here on (and idle again once this answer ends).
        if let Some(e) = self.lock().get_mut(model) {
            e.reserved_until = None;
        }
        Ok(generation)
    }

    /// Load the model at `path` for the user (at start, or from the UI): it becomes the focus
    /// model and stays loaded until the user unloads it or memory is needed. Returns at once;
    /// progress shows on [`ModelHost::state`].
    ///
    /// A load that cannot start (no room) is the caller's error; it marks the host's state
    /// failed only when no model is ready, so a model already serving stays the focus.
    pub async fn load(self: &Arc<Self>, path: PathBuf) -> Result<(), SubmitError> {
        let id = model_id_of(&path);
        let started = self.start(&id, path, true, true);
        if let Err(e) = &started {
            tracing::warn!(model = %id, error = %e, "the model cannot be loaded");
            if self.lock().ready_other_than(&id).is_none() {
                self.state.send_replace(ModelState::Failed {
                    model: id,
                    message: e.to_string(),
                });
            }
        }
        started.map(drop)
    }

    /// The engine of `id` (file `path`), loading it if it is not loaded: a request's model.
    /// However many callers ask at once, the model is loaded once. A model whose last load
    /// failed is loaded again.
    pub fn ensure(self: &Arc<Self>, id: &ModelId, path: PathBuf) -> Result<Engine, SubmitError> {
        self.start(id, path, false, false)
    }

    /// Start (or find) `id`'s engine. Makes room first: the least recently used idle models
    /// are unloaded until the estimate fits the budget.
    fn start(
        self: &Arc<Self>,
        id: &ModelId,
        path: PathBuf,
        pinned: bool,
        focus: bool,
    ) -> Result<Engine, SubmitError> {
        if self.is_elsewhere(id) {
            // Its worker process loads it (a split model): not ready until that one joins.
            return Err(SubmitError::ModelLoading {
                model: id.clone(),
                percent: 0,
            });
        }
        let room::Need {
            estimate,
            weights,
            context,
            ..
        } = self.need_of(&path);
        let (engine, evicted) = {
            let mut inner = self.lock();
            if let Some(e) = inner.entries.iter_mut().find(|e| &e.id == id) {
                let failed = matches!(*e.engine.model_state().borrow(), ModelState::Failed { .. });
                if !failed {
                    e.last_used = Instant::now();
                    e.pinned |= pinned;
                    let engine = e.engine.clone();
                    drop(inner);
                    if focus {
                        self.set_focus(Some(id.clone()));
                    }
                    return Ok(engine);
                }
            }
            let mut evicted: Vec<Engine> = Vec::new();
            if let Some(i) = inner.entries.iter().position(|e| &e.id == id) {
                evicted.push(inner.entries.remove(i).engine);
            }
            // The idle models that may be unloaded, least recently used first. One that a
            // request found ready and is about to submit to is kept (see [`ModelHost::touch`]).
            let mut idle: Vec<usize> = (0..inner.entries.len())
                .filter(|&i| {
                    let e = &inner.entries[i];
                    !e.busy() && e.reserved_until.is_none_or(|t| t <= Instant::now())
                })
                .collect();
            idle.sort_by_key(|&i| inner.entries[i].last_used);
            // Video memory first: the model goes to the GPU whole when the room there, with
            // idle models unloaded from it if need be, holds it; else what fits does (llama.cpp's
            // fitting) and none is unloaded for it.
            let (mut victims, vram) = room::on_gpu(
                &inner.entries,
                &idle,
                estimate,
                self.gpu_room(inner.entries.iter().map(|e| e.vram).sum()),
            );
            // Then system memory, for the rest of it: idle models are unloaded until it fits,
            // chosen before any is unloaded (when even all of them would not make room, none is).
            let ram = estimate - vram;
            let kept = || {
                inner
                    .entries
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !victims.contains(i))
                    .map(|(_, e)| e)
            };
            let (used, held) = room::held(kept());
            let budget = memory::budget(self.settings.memory_limit, used, held);
            let mut left = used;
            for &i in &idle {
                if left.saturating_add(ram) <= budget {
                    break;
                }
                if !victims.contains(&i) {
                    left -= room::in_ram(&inner.entries[i]);
                    victims.push(i);
                }
            }
            if left.saturating_add(ram) > budget {
                drop(inner);
                self.retire(evicted);
                return Err(room::no_room(id, estimate, budget));
            }
            victims.sort_unstable_by(|a, b| b.cmp(a));
            let mut before = Vec::new();
            for i in victims {
                let e = inner.entries.remove(i);
                tracing::info!(model = %e.id, for_model = %id, "unloading the least recently used model to make room");
                before.push(e.engine);
            }
            // Unloaded on the new engine's thread before it loads: their memory is free when it
            // is fitted.
            let cache_ram = self.cache_ram_of(budget.saturating_sub(left.saturating_add(ram)));
            let engine =
                Engine::start_after(self.settings.config(path, context, cache_ram), before);
            engine.set_throttle(self.throttle());
            inner.next_serial += 1;
            let serial = inner.next_serial;
            inner.entries.push(Entry {
                id: id.clone(),
                engine: engine.clone(),
                last_used: Instant::now(),
                estimate,
                weights,
                vram,
                pinned,
                keep_alive: None,
                serial,
                embedding: Arc::default(),
                reserved_until: None,
            });
            *inner.loads.entry(id.clone()).or_default() += 1;
            tracing::info!(model = %id, estimate_mib = estimate >> 20, vram_mib = vram >> 20, budget_mib = budget >> 20, "loading");
            self.forward(id.clone(), engine.clone(), serial);
            (engine, evicted)
        };
        self.retire(evicted);
        let focus_gone = {
            let inner = self.lock();
            inner.focus.as_ref().is_none_or(|f| inner.get(f).is_none())
        };
        if focus || focus_gone {
            self.set_focus(Some(id.clone()));
        }
        self.publish_loaded();
        Ok(engine)
    }

    /// Unload engines (their running generations are told) off the runtime's threads.
    fn retire(&self, engines: Vec<Engine>) {
        if engines.is_empty() {
            return;
        }
        let join = tokio::task::spawn_blocking(move || {
            for e in engines {
                e.unload();
            }
        });
        drop(join);
    }

    /// A request found `model` ready and is about to submit: it counts as used now, and is
    /// not unloaded to make room for [`RESERVE`] or until that submit.
    pub fn touch(&self, model: &ModelId) {
        if let Some(e) = self.lock().get_mut(model) {
            e.last_used = Instant::now();
            e.reserved_until = Some(e.last_used + RESERVE);
        }
    }

    /// Unload `model` (`None`: the focus model); running generations are told it was unloaded.
    /// Returns whether it was loaded.
    pub async fn unload(&self, model: Option<&ModelId>) -> bool {
        let removed = {
            let mut inner = self.lock();
            let id = model.cloned().or_else(|| inner.focus.clone());
            let i = id.and_then(|id| inner.entries.iter().position(|e| e.id == id));
            i.map(|i| inner.entries.remove(i))
        };
        let Some(removed) = removed else {
            return false;
        };
        let engine = removed.engine;
        let _ = tokio::task::spawn_blocking(move || engine.unload()).await;
        let focus_gone = {
            let inner = self.lock();
            inner.focus.as_ref().is_some_and(|f| inner.get(f).is_none())
        };
        if focus_gone {
            self.set_focus(None);
        }
        self.publish_loaded();
        true
    }

    /// Stop every engine for good (node shutdown).
    pub async fn shutdown(&self) {
        let engines: Vec<Engine> = {
            let mut inner = self.lock();
            inner.focus = None;
            inner.entries.drain(..).map(|e| e.engine).collect()
        };
        let _ = tokio::task::spawn_blocking(move || {
            for e in engines {
                e.shutdown();
            }
        })
        .await;
        self.state.send_replace(ModelState::Stopped);
        self.publish_loaded();
    }
}

/// The id clients use for the model at `path`.
pub fn model_id_of(path: &std::path::Path) -> ModelId {
    ModelId::from_file_name(
        &path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
}
