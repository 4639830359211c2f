//! How long an idle model stays loaded: a client's keep-alive (Ollama's `keep_alive`), the
//! node's `--keep-alive` for a model loaded for a request, and the once-a-second reaper that
//! unloads the models idle past theirs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_protocol::ModelId;
use tokio_util::sync::CancellationToken;

use super::{Entry, ModelHost};

/// The shortest idle time before a model unloads by time, even with a keep-alive of zero: a
/// request that has just seen its model ready has time to submit to it.
const MIN_IDLE: Duration = Duration::from_secs(2);

impl ModelHost {
    /// A client's keep-alive for `model` (Ollama's `keep_alive`): how long it stays loaded
    /// after its last request; zero unloads it once idle; `None` (a request without one)
    /// goes back to the node's, as Ollama does. The model the user chose ignores any but
    /// zero: clients send their default ("5m") with every request, and the user's choice
    /// outlasts it.
    pub fn set_keep_alive(&self, model: &ModelId, keep_alive: Option<Duration>) {
        if let Some(e) = self.lock().get_mut(model) {
            e.keep_alive = match keep_alive {
                Some(k) if k.is_zero() => Some(k),
                _ if e.pinned => None,
                k => k,
            };
        }
    }

    /// Whether `model` is loading or has requests running or waiting.
    pub fn is_busy(&self, model: &ModelId) -> bool {
        self.lock().get(model).is_some_and(Entry::busy)
    }

    /// When `model` unloads unless asked for again (`None`: not by time).
    pub fn expires_in(&self, model: &ModelId) -> Option<Duration> {
        let inner = self.lock();
        let e = inner.get(model)?;
        let keep = e
            .keep_alive
            .or((!e.pinned).then_some(self.settings.keep_alive))?;
        Some(keep.saturating_sub(e.last_used.elapsed()))
    }

    /// Unload the models idle for longer than their keep-alive, every second until `stop`.
    pub fn spawn_keep_alive(self: &Arc<Self>, stop: CancellationToken) {
        let host = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(host) = host.upgrade() else { return };
                host.unload_idle();
            }
        });
    }

    fn unload_idle(&self) {
        let (expired, focus_gone) = {
            let mut inner = self.lock();
            let now = Instant::now();
            for e in inner.entries.iter_mut().filter(|e| e.busy()) {
                e.last_used = now;
            }
            let keep_alive = self.settings.keep_alive;
            let mut expired = Vec::new();
            let mut i = 0;
            while i < inner.entries.len() {
                let e = &inner.entries[i];
                let keep = e.keep_alive.or((!e.pinned).then_some(keep_alive));
                if keep.is_some_and(|k| e.last_used.elapsed() >= k.max(MIN_IDLE)) {
                    let e = inner.entries.remove(i);
                    tracing::info!(model = %e.id, "unloading a model idle past its keep-alive");
                    expired.push(e.engine);
                } else {
                    i += 1;
                }
            }
            let focus_gone = inner.focus.as_ref().is_some_and(|f| inner.get(f).is_none());
            (expired, focus_gone)
        };
        if expired.is_empty() {
            return;
        }
        self.retire(expired);
        if focus_gone {
            self.set_focus(None);
        }
        self.publish_loaded();
    }
}
