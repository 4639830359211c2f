//! The frames of tasks under way: where a worker's frame for a task goes, the end of a task,
//! the hub giving up on one, and the signal that a slot may have come free.

use hearth_protocol::worker::TaskId;
use tokio::sync::futures::Notified;

use super::Hub;
use crate::config::RETIRED_MEMORY;
use crate::tasks::Route;
use crate::workers::WorkerId;

impl Hub {
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
}
