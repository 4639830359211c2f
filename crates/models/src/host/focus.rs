//! The focus model: the one the host's state channel follows, which the UI, the tray,
//! `/generate` and worker mode show. It is the last model the user loaded (or a request's when
//! none is); one that fails to load while another is ready gives the focus back to the model
//! before it, else to the most recently used, as LM Studio keeps the model that works.

use std::sync::Arc;

use hearth_engine::{Engine, ModelState};
use hearth_protocol::ModelId;

use super::{Inner, ModelHost};

impl Inner {
    pub(super) fn is_ready(&self, id: &ModelId) -> bool {
        self.get(id)
            .is_some_and(|e| matches!(*e.engine.model_state().borrow(), ModelState::Ready(_)))
    }

    /// A ready model other than `id` for the focus: the focus now (when `id` failed before it
    /// became the focus), else the focus before, else the most recently used one.
    pub(super) fn ready_other_than(&self, id: &ModelId) -> Option<ModelId> {
        let usable = |m: &&ModelId| *m != id && self.is_ready(m);
        if let Some(m) = self.focus.as_ref().filter(usable) {
            return Some(m.clone());
        }
        if let Some(m) = self.focus_before.as_ref().filter(usable) {
            return Some(m.clone());
        }
        self.entries
            .iter()
            .filter(|e| &e.id != id && self.is_ready(&e.id))
            .max_by_key(|e| e.last_used)
            .map(|e| e.id.clone())
    }
}

impl ModelHost {
    /// Follow an engine's state: into the host's state while it is the focus model, and into
    /// the list of loaded models.
    pub(super) fn forward(self: &Arc<Self>, id: ModelId, engine: Engine, serial: u64) {
        let host = self.clone();
        tokio::spawn(async move {
            let mut rx = engine.model_state();
            loop {
                let s = rx.borrow_and_update().clone();
                let (current, focused) = {
                    let inner = host.lock();
                    let current = inner.entries.iter().any(|e| e.serial == serial);
                    (current, inner.focus.as_ref() == Some(&id))
                };
                if !current {
                    return;
                }
                // The list first: whoever waits for the host's state to be ready finds the
                // model among the loaded ones then (the models page lists it at once).
                host.publish_loaded();
                if focused {
                    match s {
                        // Set again: a model that works becomes the focus instead (see
                        // [`ModelHost::set_focus`]).
                        ModelState::Failed { .. } => host.set_focus(Some(id.clone())),
                        s => {
                            host.state.send_replace(s);
                        }
                    }
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Make `id` the model the host's state follows (`None`: the most recently used one left).
    /// A model that failed to load is not the focus while another is ready: the one before
    /// it is, else the most recently used (its failure shows on its own row, as LM Studio
    /// keeps the model that works).
    pub(super) fn set_focus(&self, id: Option<ModelId>) {
        let state = {
            let mut inner = self.lock();
            let mut id = id.or_else(|| {
                inner
                    .entries
                    .iter()
                    .max_by_key(|e| e.last_used)
                    .map(|e| e.id.clone())
            });
            let failed = id.as_ref().and_then(|f| inner.get(f)).is_some_and(|e| {
                matches!(*e.engine.model_state().borrow(), ModelState::Failed { .. })
            });
            if let Some(other) = id
                .as_ref()
                .filter(|_| failed)
                .and_then(|f| inner.ready_other_than(f))
            {
                id = Some(other);
            }
            if inner.focus != id {
                inner.focus_before = inner.focus.take();
            }
            inner.focus = id.clone();
            id.and_then(|id| {
                inner
                    .get(&id)
                    .map(|e| e.engine.model_state().borrow().clone())
            })
        };
        self.state
            .send_replace(state.unwrap_or(ModelState::Unloaded));
    }

    pub(super) fn publish_loaded(&self) {
        let ready: Vec<ModelId> = {
            let inner = self.lock();
            inner
                .entries
                .iter()
                .filter(|e| matches!(*e.engine.model_state().borrow(), ModelState::Ready(_)))
                .map(|e| e.id.clone())
                .collect()
        };
        self.loaded.send_if_modified(|old| {
            if *old == ready {
                false
            } else {
                *old = ready;
                true
            }
        });
    }
}
