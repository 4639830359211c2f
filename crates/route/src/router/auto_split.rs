//! Splitting a model too large for this machine over the peers that share their memory, and
//! waiting for its worker; a split that lost a peer is served whole here when it fits.

use std::time::Duration;

use hearth_engine::SubmitError;
use hearth_protocol::ModelId;

use super::Router;
use crate::target::ResolveError;

/// Splits a model over the peers that share their memory (see `hearth_split::Splits::start`); a
/// model split already is fine. Why it could not be split otherwise.
pub type SplitModel = Box<
    dyn Fn(ModelId) -> futures_util::future::BoxFuture<'static, Result<(), String>> + Send + Sync,
>;

/// How this node splits a model too large for it, once the node is up.
#[derive(Default)]
pub(super) struct AutoSplit(std::sync::OnceLock<SplitModel>);

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

impl Router {
    /// Split models too large for this machine with `split` from now on.
    pub fn set_auto_split(&self, split: SplitModel) {
        let _ = self.auto_split.0.set(split);
    }

    /// `id` (file `path`, asked for as `m`) served split: when it is too large for this
    /// machine it is split over the peers that share memory (unless it is already), and its
    /// worker is waited for up to `wait`. `None`: it is not split and fits here.
    pub(super) async fn split(
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
}
