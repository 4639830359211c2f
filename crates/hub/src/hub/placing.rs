//! Placing tasks on workers: the candidates for a model, a reserved slot ([`Reservation`]),
//! a fresh task id there, and the bounded queue of requests waiting for a slot ([`QueueSlot`]).

use std::sync::atomic::{AtomicU32, Ordering};

use hearth_base::thermal::ThermalLevel;
use hearth_protocol::worker::{HubFrame, TaskId, MAX_HUB_TASK_ID};
use hearth_protocol::ModelId;
use tokio::sync::mpsc;

use super::Hub;
use crate::config::QUEUE_CAPACITY;
use crate::place::Candidate;
use crate::tasks::{Controls, TaskEvent};
use crate::workers::{same_model, Worker, WorkerId};

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

impl Hub {
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
