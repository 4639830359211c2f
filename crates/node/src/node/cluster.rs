//! Moving the node's cluster listener: to where the doors listen when they move on or off
//! the LAN, and to where the rules allow when the passcode changes in the UI (onto the LAN
//! only with a passcode).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::exposure::bind_retrying;
use super::Node;
use crate::node_cluster::{cluster_host, discover, ClusterRun};

impl Node {
    /// When the cluster's passcode changes in the UI, move its listener to where the rules
    /// now allow (onto the LAN once there is a passcode, back to loopback without one).
    pub(crate) fn follow_cluster_rules(&self) {
        let weak = Arc::downgrade(&self.inner);
        let (notify, stop) = (
            self.inner.state.cluster_rebind.clone(),
            self.inner.state.shutdown.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = notify.notified() => {}
                    () = stop.cancelled() => return,
                }
                let Some(inner) = weak.upgrade() else { return };
                let node = Node { inner };
                let mut listening = node.inner.listening.lock().await;
                let host = node.addr().ip();
                if let Some(task) = node.rebind_cluster(host).await {
                    listening.tasks.push(task);
                }
            }
        });
    }

    /// Move the cluster's listener (and close its connections) to where the doors now listen;
    /// it stays on loopback when the LAN would need a passcode it does not have. Also when
    /// the passcode changes in the UI (`AppState::cluster_rebind`).
    pub(crate) async fn rebind_cluster(&self, host: IpAddr) -> Option<JoinHandle<()>> {
        let (config, me, port) = {
            let run = self.inner.cluster.lock().expect("cluster lock");
            let run = run.as_ref()?;
            (run.config.clone(), run.me.clone(), run.addr.port())
        };
        let dialer = self.inner.dialer.clone()?;
        // The passcode in force now (it may have been set or cleared in the UI).
        let host = cluster_host(host, me.rules().passcode_hash.is_some());
        let at = SocketAddr::new(host, port);
        if self.cluster_addr() == Some(at) {
            return None;
        }
        if let Some(run) = self.inner.cluster.lock().expect("cluster lock").take() {
            // Discovery stops with it (its advertisement names the old address).
            run.stop.cancel();
        }
        let listener = match bind_retrying(at).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(%at, error = %e, "the cluster cannot listen there; it is closed until the node restarts");
                *self.inner.cluster.lock().expect("cluster lock") = None;
                return None;
            }
        };
        let stop = self.inner.state.shutdown.child_token();
        let task = hearth_cluster::listen(listener, me.clone(), stop.clone());
        tracing::info!(%at, "cluster rebound");
        let discovery = discover(&config, &me, &dialer, at);
        *self.inner.cluster.lock().expect("cluster lock") = Some(ClusterRun {
            config,
            me,
            stop,
            addr: at,
            _discovery: discovery,
        });
        Some(task)
    }
}
