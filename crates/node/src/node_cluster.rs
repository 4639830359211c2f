//! The node's cluster listener: where it listens (on the LAN only with a passcode, the
//! default port or a free one) and LAN discovery beside it. Moving it when the doors move or
//! the passcode changes in the UI is the node's (`node::cluster`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::NodeError;

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
