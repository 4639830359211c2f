//! The node's cluster listener: where it listens (on the LAN only with a passcode, the
//! default port or a free one), LAN discovery beside it, and moving it when the doors move or
//! the passcode changes in the UI.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::exposure::bind_retrying;
use crate::{Node, NodeError};

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

/// The cluster's running listener.
#[derive(Debug)]
pub(crate) struct ClusterRun {
    pub(crate) config: hearth_cluster::ClusterConfig,
    pub(crate) me: Arc<hearth_cluster::Me>,
    pub(crate) stop: CancellationToken,
    pub(crate) addr: SocketAddr,
    /// LAN discovery while the cluster listens on the LAN; stops when dropped.
    pub(crate) _discovery: Option<hearth_cluster::Discovery>,
}

/// Discovery for a cluster listening at `at`: on the LAN only (a loopback listener is no use
/// to other machines), unless `--no-discovery`. A failure leaves `--peer` working.
pub(crate) fn discover(
    config: &hearth_cluster::ClusterConfig,
    me: &hearth_cluster::Me,
    dialer: &Arc<hearth_cluster::dial::Dialer>,
    at: SocketAddr,
) -> Option<hearth_cluster::Discovery> {
    if !config.discovery || at.ip().is_loopback() {
        return None;
    }
    hearth_cluster::Discovery::start(me, dialer.clone(), at.port())
        .inspect_err(|e| tracing::warn!("{e}; peers can still be added by address"))
        .ok()
}

/// Where the cluster listens when the doors listen on `host`: there, except on the LAN
/// without a passcode (then loopback: any machine there could use this node otherwise).
pub(crate) fn cluster_host(host: IpAddr, has_passcode: bool) -> IpAddr {
    if host.is_loopback() || has_passcode {
        host
    } else {
        tracing::warn!(
            "the cluster stays on loopback: on the LAN it needs a passcode (--passcode)"
        );
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    }
}

/// The default cluster port, or a free one when another program holds it (two nodes on one
/// machine); discovery announces whichever it is.
pub(crate) async fn bind_cluster_default(host: IpAddr) -> Result<TcpListener, NodeError> {
    let at = SocketAddr::new(host, hearth_cluster::DEFAULT_CLUSTER_PORT);
    match TcpListener::bind(at).await {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(
                port = hearth_cluster::DEFAULT_CLUSTER_PORT,
                "the default cluster port is taken; the cluster listens on a free one"
            );
            let any = SocketAddr::new(host, 0);
            TcpListener::bind(any)
                .await
                .map_err(|source| NodeError::Bind { addr: any, source })
        }
        Err(source) => Err(NodeError::Bind { addr: at, source }),
    }
}
