//! What this node asked of its Hearth peers outside the route (a rerank), waiting for their
//! answers by request id: the answer, read by the peer's connection, goes to whoever waits.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use hearth_protocol::cluster::HearthRerankResult;
use tokio::sync::oneshot;

/// Reranks this node asked of peers, waiting for their answers.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    waiting: Mutex<HashMap<String, oneshot::Sender<HearthRerankResult>>>,
}

impl Pending {
    /// Wait for the answer to request `key` (its id in uppercase).
    pub(crate) fn wait(&self, key: String, tx: oneshot::Sender<HearthRerankResult>) {
        self.lock().insert(key, tx);
    }

    /// No longer wait for request `key`.
    pub(crate) fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<HearthRerankResult>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A peer's answer: to the request waiting for it (one no longer waiting is dropped).
    pub(crate) fn answered(&self, result: HearthRerankResult) {
        let key = result.request_id.as_str().to_ascii_uppercase();
        if let Some(tx) = self.lock().remove(&key) {
            let _ = tx.send(result);
        }
    }
}
