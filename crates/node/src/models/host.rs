//! The model host: which engine (and so which model) serves this node right now. Loading
//! another model or unloading swaps the engine; the host's state channel follows whichever
//! engine is current, so doors and the UI watch one thing. Doors never submit here: the
//! route (`crate::route`) does, for requests it places on this node.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use hearth_engine::{
    Engine, EngineConfig, EngineStats, Generation, ModelInfo, ModelState, Request, SubmitError,
};
use hearth_protocol::ModelId;
use tokio::sync::watch;

use crate::telemetry::ThermalLevel;

/// How every engine this host starts is configured (all but the model path).
#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub slots: usize,
    pub threads: usize,
    pub ctx_per_slot: Option<u32>,
    pub queue_capacity: usize,
    pub min_load_time: Option<std::time::Duration>,
    pub script: Option<hearth_engine::Script>,
}

impl EngineSettings {
    fn config(&self, path: PathBuf) -> EngineConfig {
        EngineConfig {
            slots: self.slots.max(1),
            threads: self.threads.max(1),
            ctx_per_slot: self.ctx_per_slot,
            queue_capacity: self.queue_capacity,
            min_load_time: self.min_load_time,
            script: self.script.clone(),
            ..EngineConfig::new(path)
        }
    }
}

#[derive(Debug)]
struct Current {
    engine: Option<Engine>,
    /// Bumped on every swap, so a forwarder of an old engine's state stops.
    generation: u64,
}

#[derive(Debug)]
pub struct ModelHost {
    settings: EngineSettings,
    current: Mutex<Current>,
    state: watch::Sender<ModelState>,
    /// The user's cap on the throttle (Settings), kept across model swaps.
    user_cap: AtomicU8,
    /// "Pause serving": throttle 0 whatever the cap.
    paused: std::sync::atomic::AtomicBool,
    /// What the machine's temperature allows (100 without sensors).
    thermal_throttle: AtomicU8,
    /// The thermal level sensors report (nominal without sensors: an estimate from CPU
    /// pressure is never a reason to send work elsewhere).
    thermal: AtomicU8,
}

impl ModelHost {
    pub fn new(settings: EngineSettings) -> Arc<Self> {
        let (state, _) = watch::channel(ModelState::Unloaded);
        Arc::new(Self {
            settings,
            current: Mutex::new(Current {
                engine: None,
                generation: 0,
            }),
            state,
            user_cap: AtomicU8::new(100),
            paused: std::sync::atomic::AtomicBool::new(false),
            thermal_throttle: AtomicU8::new(100),
            thermal: AtomicU8::new(ThermalLevel::Nominal as u8),
        })
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
        if let Some(e) = self.engine() {
            e.set_throttle(self.throttle());
        }
    }

    /// The current engine, if a model is loaded or loading.
    pub fn engine(&self) -> Option<Engine> {
        self.current.lock().ok().and_then(|c| c.engine.clone())
    }

    pub fn state(&self) -> watch::Receiver<ModelState> {
        self.state.subscribe()
    }

    /// The loaded model, when it is ready.
    pub fn model(&self) -> Option<Arc<ModelInfo>> {
        match &*self.state.borrow() {
            ModelState::Ready(info) => Some(info.clone()),
            _ => None,
        }
    }

    /// The model being served or loaded, as clients name it.
    pub fn model_id(&self) -> Option<ModelId> {
        match &*self.state.borrow() {
            ModelState::Ready(info) => Some(info.id.clone()),
            ModelState::Loading { model, .. } | ModelState::Failed { model, .. } => {
                Some(model.clone())
            }
            ModelState::Stopped | ModelState::Unloaded => None,
        }
    }

    pub fn stats(&self) -> EngineStats {
        self.engine().map_or(
            EngineStats {
                slots: self.settings.slots,
                active: 0,
                queued: 0,
                tokens_generated: 0,
                requests_finished: 0,
                threads: self.settings.threads.max(1),
            },
            |e| e.stats(),
        )
    }

    /// Wait until the current model is ready (or failed, or there is none).
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

    /// Completes when the current engine next gives a place back (at once when there is no
    /// engine: submitting says why).
    pub fn room(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        // Subscribed now, not when first polled: a slot freed in between is not missed.
        let room = self.engine().map(|e| e.room());
        async move {
            if let Some(room) = room {
                room.await;
            }
        }
    }

    pub fn submit(&self, request: Request) -> Result<Generation, SubmitError> {
        match self.engine() {
            Some(e) => e.submit(request),
            None => Err(SubmitError::NoModel),
        }
    }

    /// Start loading `path`, replacing (and unloading) the current model. Returns at once;
    /// progress shows on [`ModelHost::state`].
    pub async fn load(self: &Arc<Self>, path: PathBuf) {
        let old = self.swap(None);
        if let Some(old) = old {
            let _ = tokio::task::spawn_blocking(move || old.unload()).await;
        }
        let engine = Engine::start(self.settings.config(path));
        engine.set_throttle(self.throttle());
        // Publish "loading" before returning, so nobody sees the old "unloaded" in between.
        self.state
            .send_replace(engine.model_state().borrow().clone());
        let generation = {
            let mut c = self.current.lock().expect("host lock");
            c.generation += 1;
            c.engine = Some(engine.clone());
            c.generation
        };
        let host = self.clone();
        tokio::spawn(async move {
            let mut rx = engine.model_state();
            loop {
                let s = rx.borrow_and_update().clone();
                if host.current_generation() != generation {
                    return;
                }
                host.state.send_replace(s);
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Unload the current model; running generations are told it was unloaded.
    pub async fn unload(&self) {
        if let Some(old) = self.swap(None) {
            let _ = tokio::task::spawn_blocking(move || old.unload()).await;
        }
        self.state.send_replace(ModelState::Unloaded);
    }

    /// Stop the current engine for good (node shutdown).
    pub async fn shutdown(&self) {
        if let Some(old) = self.swap(None) {
            let _ = tokio::task::spawn_blocking(move || old.shutdown()).await;
        }
        self.state.send_replace(ModelState::Stopped);
    }

    fn swap(&self, engine: Option<Engine>) -> Option<Engine> {
        let mut c = self.current.lock().expect("host lock");
        c.generation += 1;
        std::mem::replace(&mut c.engine, engine)
    }

    fn current_generation(&self) -> u64 {
        self.current.lock().map(|c| c.generation).unwrap_or(0)
    }
}
