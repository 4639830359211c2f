//! Stopping a node gracefully: split models' workers first (their tunnels still open), then
//! open streams get their final message while worker mode says goodbye to its hub and the
//! engine stops, downloads write what they have, MCP servers stop, and the database's log is
//! emptied.

use std::time::Duration;

use super::Node;

/// The least time shutdown gives the engine thread to finish its current step (it gets the
/// whole grace period when that is longer).
const ENGINE_STOP_WAIT: Duration = Duration::from_secs(2);
/// How long shutdown waits for worker mode to tell its hub goodbye.
const WORKER_STOP_WAIT: Duration = Duration::from_secs(2);
/// How long shutdown waits for downloads to write what they have.
const DOWNLOADS_STOP_WAIT: Duration = Duration::from_secs(5);

impl Node {
    /// Graceful shutdown: split models' workers stop first (saving their idle sequences
    /// through tunnels still open; each killed after `hearth_split`'s 10 s), then open streams
    /// get a final message, the port closes, the engine stops. The connections drain while
    /// worker mode says goodbye and the engine then stops, all bounded by the configured grace
    /// period (the engine gets at least [`ENGINE_STOP_WAIT`]): a decode step in progress, such
    /// as a long prefill on a loaded machine, overlaps the drain instead of following it.
    pub async fn shutdown(&self) {
        tracing::info!("shutting down");
        // Split models' workers first, while their tunnels to the peers are still open.
        self.inner.state.splits.stop_workers().await;
        self.inner.state.shutdown.cancel();
        let now = tokio::time::Instant::now();
        let deadline = now + self.inner.grace;
        let tasks = std::mem::take(&mut self.inner.listening.lock().await.tasks);
        let connections = async {
            for mut task in tasks {
                if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                    tracing::warn!("connections still open after the grace period; closing them");
                    task.abort();
                }
            }
        };
        let worker = self.inner.worker.lock().expect("worker lock").take();
        // Worker mode says goodbye to its hub before the engine stops, so that the hub
        // re-sends the worker's tasks elsewhere instead of receiving their shutdown errors.
        let worker_then_engine = async {
            if let Some(mut w) = worker {
                if tokio::time::timeout(WORKER_STOP_WAIT, &mut w)
                    .await
                    .is_err()
                {
                    w.abort();
                }
            }
            let until = deadline.max(now + ENGINE_STOP_WAIT);
            if tokio::time::timeout_at(until, self.inner.state.host.shutdown())
                .await
                .is_err()
            {
                tracing::warn!("the engine did not stop in time");
            }
        };
        // Downloads keep their partial files; each stops after its last write.
        let downloads =
            tokio::time::timeout(DOWNLOADS_STOP_WAIT, self.inner.state.downloads.stopped());
        // Answers, downloads and the engine have written their last: hearth.db alone is whole.
        let store = async {
            let (_, _, stopped) = tokio::join!(connections, worker_then_engine, downloads);
            if stopped.is_err() {
                tracing::warn!("a download did not stop in time");
            }
            if let Err(e) = self.inner.state.store.checkpoint().await {
                tracing::warn!(error = %e, "the database's log was not emptied into hearth.db");
            }
        };
        // MCP servers started for the chat (each stdio server's whole process group), beside:
        // they write nothing to the database.
        let mcp = self.inner.state.mcp.shutdown();
        tokio::join!(store, mcp);
    }
}
