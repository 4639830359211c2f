//! The registry of remote providers: the workers of hub mode connected on the WebSocket
//! `/node` (`serve --hub-token T`, `hearth_server::hub_door`) and the LAN cluster's peers
//! (`hearth_cluster::provider`, with their heartbeat figures and, for Hearth peers, pause and
//! resume): what model and how many slots each offers, and which tasks each is running. The
//! route (`hearth_route::Router`) places requests here; the connections feed the providers'
//! frames back to the tasks' supervisors.
//!
//! ## Invariants
//! - A worker's in-flight count is the number of routes it holds: a route is added when a task
//!   is placed on it and removed when its end frame arrives, when the hub stops the task (its
//!   late frames are then dropped quietly), or when the worker leaves. So a worker never gets
//!   more than `max_concurrency` tasks at once.
//! - A worker that leaves (closed, failed, silent, superseded) has its routes dropped; each
//!   task's supervisor sees its channel close and re-dispatches (see `hearth_route::supervisor`).
//! - At most one worker per (model, name): a new connection supersedes the old one, which is
//!   closed with 4003.
//! - The registry lock is a `std` mutex held only for bookkeeping, never across an `.await`.
//!
//! Architecture invariant: `hearth-hub` keeps the registry and decides where a request runs
//! ([`place`], a pure function: no I/O, no clock); it opens no connection and runs no model.
//! The server's `/node` door and the cluster feed it, the route acts on what it decides.

pub mod place;
mod snapshot;

pub use snapshot::{HubSnapshot, WorkerSnapshot};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hearth_protocol::worker::{HubFrame, TaskDone, TaskFailure, TaskId, MAX_HUB_TASK_ID};
use hearth_protocol::ModelId;
use sha2::{Digest, Sha256};
use tokio::sync::futures::Notified;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::place::Candidate;
use hearth_base::thermal::ThermalLevel;

/// The most one task may bring, counting each frame's text and [`FRAME_OVERHEAD`]: a worker
/// that sends more for one task is misbehaving, and the task fails. At one token a frame (a
/// data frame and its count, ~130 B) that is some 250,000 tokens, beyond any context a home
/// machine runs. Frames reach
/// each task's supervisor without waiting (one slow reader must not hold back the worker's
/// other tasks), so this bounds what one task's frames can hold in memory while its reader is
/// slow.
pub const MAX_TASK_BYTES: usize = 32 << 20;
/// What one relayed frame costs besides its text (the event and its allocation).
pub const FRAME_OVERHEAD: usize = 64;
/// Frames (tasks, stops) waiting to be written to one worker.
pub const WORKER_OUTBOX_CAPACITY: usize = 64;
/// Requests that may wait for a worker's slot; beyond this, submissions are refused.
pub const QUEUE_CAPACITY: usize = 64;
/// Ids of tasks the hub stopped, remembered per worker so that frames still on their way are
/// dropped quietly instead of being reported as unknown.
const RETIRED_MEMORY: usize = 256;
/// The failure code of a task its provider would not take (a LAN peer that is busy, stopping
/// or without the model): the supervisor places it again, avoiding that provider.
pub const PROVIDER_REFUSED: &str = "provider_refused";
/// A worker may not claim more slots than this (a bad value must not attract every request).
pub const MAX_WORKER_CONCURRENCY: usize = 256;

/// `--hub-token` and how the hub uses its own engine.
#[derive(Clone)]
pub struct HubConfig {
    /// Workers must present it as `?token=`. Never logged. None: the `/node` door is closed
    /// and the registry holds only the LAN cluster's peers.
    pub token: Option<String>,
    /// Whether this node's own engine takes requests too (`--hub-local`, default true); when
    /// false the hub only routes to workers, except the batch door's token-id prompts, which
    /// only this node's tokenizer can read.
    pub serve_locally: bool,
    /// A task on a worker that brings no frame for this long is treated as lost: stopped
    /// there and placed again (a worker alive but stuck). Long enough for any prefill.
    pub task_silence: Duration,
}

/// Ten minutes: a long prompt's prefill on a slow machine takes minutes, never ten.
pub const DEFAULT_TASK_SILENCE: Duration = Duration::from_secs(600);

impl HubConfig {
    pub fn new(token: String, serve_locally: bool) -> Self {
        Self {
            token: Some(token),
            serve_locally,
            task_silence: DEFAULT_TASK_SILENCE,
        }
    }

    /// The registry of a node that is no hub: its LAN peers only, its own engine first.
    pub fn peers_only() -> Self {
        Self {
            token: None,
            serve_locally: true,
            task_silence: DEFAULT_TASK_SILENCE,
        }
    }
}

impl fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubConfig")
            .field("token", &"<redacted>")
            .field("serve_locally", &self.serve_locally)
            .field("task_silence", &self.task_silence)
            .finish()
    }
}

/// One worker connection, unique for the hub's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub u64);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

/// What a worker said about itself when it joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerJoin {
    pub model: String,
    pub name: String,
    pub max_concurrency: usize,
    /// It sent `hearth=1`: it understands Hearth's task extension.
    pub hearth: bool,
    /// It sent `vision=1`: its model's projector reads images.
    pub vision: bool,
    pub addr: SocketAddr,
    /// A LAN cluster peer rather than a worker of the `/node` door: never superseded by
    /// name (two machines may share one), and listed with the cluster's peers.
    pub peer: bool,
}

/// What a cluster peer's latest heartbeat said (hub workers send none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Health {
    pub queue_depth: usize,
    pub throttle: u8,
    pub thermal: ThermalLevel,
    /// Its own figure for one stream's decode speed (`ewmaTokensPerSecond`), which placement
    /// uses until this node has measured the peer itself.
    pub tokens_per_s: Option<f64>,
    /// Its copy of the worker's model sees images (the peer says so in its heartbeats).
    pub vision: bool,
}

/// What a worker's connection hands to the supervisor of one task.
#[derive(Debug)]
pub enum TaskEvent {
    Text(String),
    /// Hearth workers: the tokens behind the text since the last count.
    Tokens(u32),
    Done(TaskDone),
    Failed(TaskFailure),
    /// The end frame.
    End,
}

/// Where a worker's frame for a task goes.
#[derive(Debug)]
pub enum Route {
    Live(mpsc::UnboundedSender<TaskEvent>),
    /// The hub stopped it; late frames are expected.
    Retired,
    Unknown,
}

/// A task placed on a worker: its id there, the channel its frames arrive on, and the
/// worker's outbox for the task frame and a possible stop.
#[derive(Debug)]
pub struct Reservation {
    pub worker: WorkerId,
    pub worker_name: String,
    pub task: TaskId,
    pub hearth: bool,
    pub outbox: mpsc::Sender<HubFrame>,
    pub events: mpsc::UnboundedReceiver<TaskEvent>,
    /// Pause and resume, where the provider takes them (a Hearth peer).
    pub controls: Option<Controls>,
}

/// Where a provider that can pause and resume its tasks takes those controls.
pub type Controls = mpsc::Sender<(TaskId, hearth_protocol::cluster::ControlAction)>;

#[derive(Debug)]
struct Worker {
    join: WorkerJoin,
    /// Seconds since the Unix epoch.
    connected_at: u64,
    outbox: mpsc::Sender<HubFrame>,
    controls: Option<Controls>,
    /// Cancelled to close the connection (superseded).
    kick: CancellationToken,
    tasks: HashMap<TaskId, mpsc::UnboundedSender<TaskEvent>>,
    retired: VecDeque<TaskId>,
    completed: u64,
    /// Decode speed of one stream, tokens/s: an average over the tasks this node measured
    /// there, or, before the first, what the peer says of itself (0: unknown).
    tokens_per_s: f64,
    /// Tasks whose speed this node measured there.
    measured_tasks: u64,
    health: Option<Health>,
}

#[derive(Debug, Default)]
struct Registry {
    workers: BTreeMap<WorkerId, Worker>,
    next_worker: u64,
}

/// The hub: cheap to clone, shared by the `/node` door and the router.
#[derive(Debug, Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    token_digest: Option<[u8; 32]>,
    /// The token of this node's own workers (a split model's), set when the first starts,
    /// and the address besides loopback they connect from.
    own_digest: std::sync::OnceLock<([u8; 32], std::net::IpAddr)>,
    serve_locally: bool,
    task_silence: Duration,
    registry: Mutex<Registry>,
    /// Woken whenever a slot may have become free or the set of workers changed.
    capacity: Notify,
    next_task: AtomicU32,
    waiting: AtomicUsize,
    redispatched: AtomicU64,
    unserved: AtomicU64,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Whether two names refer to the same model (with or without `.gguf`).
pub(crate) fn same_model(a: &str, b: &str) -> bool {
    let strip = |s: &str| s.strip_suffix(".gguf").unwrap_or(s).to_owned();
    strip(a) == strip(b)
}

impl Hub {
    pub fn new(config: HubConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                token_digest: config.token.as_deref().map(digest),
                own_digest: std::sync::OnceLock::new(),
                serve_locally: config.serve_locally,
                task_silence: config.task_silence,
                registry: Mutex::new(Registry::default()),
                capacity: Notify::new(),
                next_task: AtomicU32::new(0),
                waiting: AtomicUsize::new(0),
                redispatched: AtomicU64::new(0),
                unserved: AtomicU64::new(0),
            }),
        }
    }

    pub fn serves_locally(&self) -> bool {
        self.inner.serve_locally
    }

    /// See [`HubConfig::task_silence`].
    pub fn task_silence(&self) -> Duration {
        self.inner.task_silence
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // The registry stays consistent between statements, so a panic elsewhere cannot leave
        // it half-updated: keep serving.
        self.inner
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Compares digests in constant time, so the comparison's timing says nothing about the
    /// token (nor about its length).
    /// Whether a worker connecting from `peer` may join with `token`: the hub's token from
    /// anywhere, this node's own workers' token only from this machine.
    pub fn token_matches(&self, token: &str, peer: std::net::IpAddr) -> bool {
        use subtle::ConstantTimeEq as _;
        let given = digest(token);
        let hubs = self
            .inner
            .token_digest
            .as_ref()
            .is_some_and(|d| bool::from(given.ct_eq(d)));
        let own = self.inner.own_digest.get().is_some_and(|(d, ip)| {
            let here = peer.to_canonical().is_loopback() || peer.to_canonical() == *ip;
            here && bool::from(given.ct_eq(d))
        });
        hubs || own
    }

    /// Whether the `/node` door takes workers (`--hub-token`, or this node's own).
    pub fn accepts_workers(&self) -> bool {
        self.inner.token_digest.is_some() || self.inner.own_digest.get().is_some()
    }

    /// Take this node's own workers (the processes of its split models), which present
    /// `token`: set once, for the node's life.
    pub fn admit_own_workers(&self, token: &str, from: std::net::IpAddr) {
        let _ = self.inner.own_digest.set((digest(token), from));
    }

    /// Add a worker. One with the same model and name is superseded: removed at once (its
    /// tasks re-dispatch) and its connection told to close with 4003.
    pub fn register(
        &self,
        join: WorkerJoin,
        outbox: mpsc::Sender<HubFrame>,
        kick: CancellationToken,
        controls: Option<Controls>,
    ) -> WorkerId {
        let mut reg = self.lock();
        let old: Vec<WorkerId> = reg
            .workers
            .iter()
            .filter(|(_, w)| {
                !join.peer
                    && !w.join.peer
                    && w.join.name == join.name
                    && same_model(&w.join.model, &join.model)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in old {
            if let Some(w) = reg.workers.remove(&id) {
                tracing::info!(worker = %w.join.name, model = %w.join.model, "a new connection supersedes this worker");
                w.kick.cancel();
            }
        }
        reg.next_worker += 1;
        let id = WorkerId(reg.next_worker);
        reg.workers.insert(
            id,
            Worker {
                join,
                connected_at: now_secs(),
                outbox,
                controls,
                kick,
                tasks: HashMap::new(),
                retired: VecDeque::new(),
                completed: 0,
                tokens_per_s: 0.0,
                measured_tasks: 0,
                health: None,
            },
        );
        drop(reg);
        self.inner.capacity.notify_waiters();
        id
    }

    /// Remove a worker (its connection ended). Dropping its routes tells each of its tasks'
    /// supervisors that the worker is gone. Does nothing if it was already superseded.
    pub fn unregister(&self, id: WorkerId) {
        let removed = self.lock().workers.remove(&id);
        if let Some(w) = removed {
            if !w.tasks.is_empty() {
                tracing::warn!(worker = %w.join.name, tasks = w.tasks.len(), "a worker left with tasks in flight; re-dispatching them");
            }
        }
        self.inner.capacity.notify_waiters();
    }

    /// Where a data frame for `task` from `worker` goes.
    pub fn route(&self, worker: WorkerId, task: TaskId) -> Route {
        let reg = self.lock();
        let Some(w) = reg.workers.get(&worker) else {
            return Route::Unknown;
        };
        match w.tasks.get(&task) {
            Some(tx) => Route::Live(tx.clone()),
            None if w.retired.contains(&task) => Route::Retired,
            None => Route::Unknown,
        }
    }

    /// The end frame for `task` arrived: free the slot and return where to say so.
    pub fn finish(&self, worker: WorkerId, task: TaskId) -> Route {
        let route = {
            let mut reg = self.lock();
            let Some(w) = reg.workers.get_mut(&worker) else {
                return Route::Unknown;
            };
            match w.tasks.remove(&task) {
                Some(tx) => {
                    w.completed += 1;
                    Route::Live(tx)
                }
                None => match w.retired.iter().position(|t| *t == task) {
                    Some(i) => {
                        w.retired.remove(i);
                        Route::Retired
                    }
                    None => Route::Unknown,
                },
            }
        };
        if matches!(route, Route::Live(_)) {
            self.inner.capacity.notify_waiters();
        }
        route
    }

    /// The hub gave up on `task` (stopped, or its reader went away): free the slot and expect
    /// late frames.
    pub fn retire(&self, worker: WorkerId, task: TaskId) {
        {
            let mut reg = self.lock();
            if let Some(w) = reg.workers.get_mut(&worker) {
                if w.tasks.remove(&task).is_some() {
                    if w.retired.len() >= RETIRED_MEMORY {
                        w.retired.pop_front();
                    }
                    w.retired.push_back(task);
                }
            }
        }
        self.inner.capacity.notify_waiters();
    }

    /// A future that completes at the next capacity change. Create it (and `enable` it)
    /// before checking, so a change in between is not missed.
    pub fn capacity_changed(&self) -> Notified<'_> {
        self.inner.capacity.notified()
    }

    /// The workers serving `model`, as placement candidates (the worker protocol carries no
    /// throttle, thermal level or queue: a hub never gives a worker more than its slots).
    pub fn candidates(&self, model: &ModelId) -> Vec<Candidate<WorkerId>> {
        self.lock()
            .workers
            .iter()
            .filter(|(_, w)| same_model(&w.join.model, model.as_str()))
            .map(|(id, w)| Candidate {
                id: *id,
                models: vec![model.clone()],
                free_slots: w.join.max_concurrency.saturating_sub(w.tasks.len()),
                queue_depth: w.health.map_or(0, |h| h.queue_depth),
                throttle: w.health.map_or(100, |h| h.throttle),
                thermal: w.health.map_or(ThermalLevel::Nominal, |h| h.thermal),
                tokens_per_s: w.tokens_per_s,
                local: false,
                continues: w.join.hearth,
                preferred: false,
                vision: w.join.vision || w.health.is_some_and(|h| h.vision),
            })
            .collect()
    }

    /// A slot on `worker` for a new task, if it is still there and has one.
    pub fn reserve(&self, worker: WorkerId) -> Option<Reservation> {
        let mut reg = self.lock();
        let w = reg.workers.get_mut(&worker)?;
        if w.tasks.len() >= w.join.max_concurrency {
            return None;
        }
        let task = fresh_task_id(&self.inner.next_task, w);
        let (tx, rx) = mpsc::unbounded_channel();
        w.tasks.insert(task, tx);
        Some(Reservation {
            worker,
            worker_name: w.join.name.clone(),
            task,
            hearth: w.join.hearth,
            outbox: w.outbox.clone(),
            events: rx,
            controls: w.controls.clone(),
        })
    }

    /// A cluster peer's latest figures.
    pub fn set_health(&self, worker: WorkerId, health: Health) {
        if let Some(w) = self.lock().workers.get_mut(&worker) {
            w.health = Some(health);
            if w.measured_tasks == 0 {
                if let Some(s) = health.tokens_per_s.filter(|s| s.is_finite() && *s > 0.0) {
                    w.tokens_per_s = s;
                }
            }
        }
        self.inner.capacity.notify_waiters();
    }

    /// A task on `worker` decoded at `tokens_per_s`: fold it into the worker's speed.
    pub fn record_speed(&self, worker: WorkerId, tokens_per_s: f64) {
        if !tokens_per_s.is_finite() || tokens_per_s <= 0.0 {
            return;
        }
        if let Some(w) = self.lock().workers.get_mut(&worker) {
            // The peer's own figure is replaced by this node's first measurement.
            w.tokens_per_s = if w.measured_tasks > 0 {
                0.7 * w.tokens_per_s + 0.3 * tokens_per_s
            } else {
                tokens_per_s
            };
            w.measured_tasks += 1;
        }
    }

    /// The measured decode speed of each LAN peer's models, tokens/s, by the peer's address.
    pub fn peer_speeds(&self) -> HashMap<SocketAddr, f64> {
        let mut out = HashMap::new();
        for w in self.lock().workers.values().filter(|w| w.join.peer) {
            let best = out.entry(w.join.addr).or_insert(0.0_f64);
            *best = best.max(w.tokens_per_s);
        }
        out
    }

    /// Whether a worker serves `model` (a client's name for it).
    pub fn serves(&self, requested: &str) -> Option<ModelId> {
        self.lock()
            .workers
            .values()
            .find(|w| same_model(&w.join.model, requested))
            .map(|w| ModelId::from_file_name(&w.join.model))
    }

    /// Models the workers serve, each once.
    pub fn models(&self) -> Vec<ModelId> {
        let mut out: Vec<ModelId> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for w in self.lock().workers.values() {
            let id = ModelId::from_file_name(&w.join.model);
            if seen.insert(id.clone()) {
                out.push(id);
            }
        }
        out
    }

    /// A place in the queue of requests waiting for a worker's slot, if there is room.
    pub fn enter_queue(&self) -> Option<QueueSlot> {
        let prev = self.inner.waiting.fetch_add(1, Ordering::AcqRel);
        if prev >= QUEUE_CAPACITY {
            self.inner.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(QueueSlot { hub: self.clone() })
    }

    /// Requests waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Acquire)
    }

    pub fn queue_has_room(&self) -> bool {
        self.inner.waiting.load(Ordering::Acquire) < QUEUE_CAPACITY
    }

    pub fn count_redispatch(&self) {
        self.inner.redispatched.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_unserved(&self) {
        self.inner.unserved.fetch_add(1, Ordering::Relaxed);
    }

    /// The workers and counters, for `/api/status` and `/metrics`.
    pub fn snapshot(&self) -> HubSnapshot {
        let workers = self
            .lock()
            .workers
            .values()
            .filter(|w| !w.join.peer)
            .map(|w| WorkerSnapshot {
                name: w.join.name.clone(),
                model: w.join.model.clone(),
                max_concurrency: w.join.max_concurrency,
                in_flight: w.tasks.len(),
                completed: w.completed,
                hearth: w.join.hearth,
                addr: w.join.addr.to_string(),
                connected_at: w.connected_at,
            })
            .collect();
        HubSnapshot {
            workers,
            serve_locally: self.inner.serve_locally,
            waiting: self.inner.waiting.load(Ordering::Acquire),
            redispatched: self.inner.redispatched.load(Ordering::Relaxed),
            unserved: self.inner.unserved.load(Ordering::Relaxed),
        }
    }
}

/// A new id for a task on `w`: 1..=2^31-1 (NOTES.md), not in use or recently retired there.
fn fresh_task_id(next: &AtomicU32, w: &Worker) -> TaskId {
    let mut id = TaskId(1);
    for _ in 0..16 {
        let n = next.fetch_add(1, Ordering::Relaxed);
        id = TaskId(n % MAX_HUB_TASK_ID + 1);
        if !w.tasks.contains_key(&id) && !w.retired.contains(&id) {
            break;
        }
    }
    id
}

/// A request waiting for a worker's slot; leaves the queue when dropped.
#[derive(Debug)]
pub struct QueueSlot {
    hub: Hub,
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.hub.inner.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(name: &str, slots: usize, hearth: bool) -> WorkerJoin {
        WorkerJoin {
            model: "SmolLM2-135M-Instruct.Q4_1".into(),
            name: name.into(),
            max_concurrency: slots,
            hearth,
            vision: false,
            addr: "127.0.0.1:9".parse().unwrap(),
            peer: false,
        }
    }

    fn hub() -> Hub {
        Hub::new(HubConfig::new("t".into(), false))
    }

    #[tokio::test]
    async fn placement_reserves_slots_and_routes_frames() {
        let hub = hub();
        let lan: std::net::IpAddr = "192.168.1.20".parse().unwrap();
        let here: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        assert!(hub.token_matches("t", lan));
        assert!(!hub.token_matches("T", lan));
        // This node's own workers' token: from this machine only.
        hub.admit_own_workers("own", "192.168.1.5".parse().unwrap());
        assert!(hub.token_matches("own", here));
        assert!(hub.token_matches("own", "192.168.1.5".parse().unwrap()));
        assert!(!hub.token_matches("own", lan));
        assert!(hub.token_matches("t", lan));
        let (out, mut out_rx) = mpsc::channel(8);
        let w = hub.register(join("a", 1, true), out, CancellationToken::new(), None);
        let model = ModelId("SmolLM2-135M-Instruct.Q4_1".into());
        assert_eq!(
            hub.serves("SmolLM2-135M-Instruct.Q4_1.gguf"),
            Some(model.clone())
        );
        assert_eq!(hub.serves("other"), None);
        let c = hub.candidates(&model);
        assert_eq!((c.len(), c[0].free_slots, c[0].continues), (1, 1, true));
        let r = hub.reserve(w).expect("a free slot");
        assert_eq!(r.worker, w);
        assert!(r.task.0 >= 1 && r.task.0 <= MAX_HUB_TASK_ID);
        assert!(hub.reserve(w).is_none(), "one slot only");
        assert_eq!(hub.candidates(&model)[0].free_slots, 0);
        assert_eq!(hub.snapshot().workers[0].in_flight, 1);
        let Route::Live(tx) = hub.route(w, r.task) else {
            panic!("live")
        };
        tx.send(TaskEvent::Text("hi".into())).unwrap();
        drop(tx);
        assert!(matches!(hub.finish(w, r.task), Route::Live(_)));
        assert!(matches!(hub.route(w, r.task), Route::Unknown));
        let mut events = r.events;
        assert!(matches!(events.recv().await, Some(TaskEvent::Text(t)) if t == "hi"));
        assert!(events.recv().await.is_none(), "route dropped after the end");
        assert_eq!(hub.snapshot().workers[0].completed, 1);
        // A stopped task's late frames are expected.
        let r2 = hub.reserve(w).expect("the slot is free again");
        hub.retire(w, r2.task);
        assert!(matches!(hub.route(w, r2.task), Route::Retired));
        assert!(matches!(hub.finish(w, r2.task), Route::Retired));
        assert!(
            out_rx.try_recv().is_err(),
            "the hub itself sends nothing here"
        );
    }

    #[tokio::test]
    async fn superseding_and_leaving_drop_routes() {
        let hub = hub();
        let (out, _keep) = mpsc::channel(8);
        let kick = CancellationToken::new();
        let first = hub.register(join("a", 2, false), out.clone(), kick.clone(), None);
        let model = ModelId("SmolLM2-135M-Instruct.Q4_1".into());
        let r = hub.reserve(first).expect("placed");
        assert!(!hub.candidates(&model)[0].continues, "not a Hearth worker");
        let second = hub.register(
            join("a", 2, false),
            out.clone(),
            CancellationToken::new(),
            None,
        );
        assert_ne!(first, second);
        assert!(kick.is_cancelled(), "the old connection is told to close");
        let mut events = r.events;
        assert!(events.recv().await.is_none(), "its task is lost");
        assert_eq!(hub.snapshot().workers.len(), 1);
        hub.unregister(first); // already gone: nothing happens
        assert_eq!(hub.snapshot().workers.len(), 1);
        hub.unregister(second);
        assert!(hub.snapshot().workers.is_empty());
        assert!(hub.candidates(&model).is_empty());
    }

    #[test]
    fn queue_is_bounded() {
        let hub = hub();
        let slots: Vec<_> = (0..QUEUE_CAPACITY)
            .map(|_| hub.enter_queue().unwrap())
            .collect();
        assert!(hub.enter_queue().is_none());
        assert!(!hub.queue_has_room());
        drop(slots);
        assert!(hub.queue_has_room());
        assert_eq!(hub.snapshot().waiting, 0);
    }

    #[test]
    fn model_names_match_with_or_without_suffix() {
        assert!(same_model("a.gguf", "a"));
        assert!(same_model("a", "a"));
        assert!(!same_model("a", "b"));
    }
}
