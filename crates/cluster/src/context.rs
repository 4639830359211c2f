//! This node as its cluster sees it: the handles the cluster's listener, connections and
//! dialer use (the model host, the route, the store, the identity, the samples), the cluster's
//! own state that the doors read (its port, the peers connected, the dialer), and who serves
//! the tunnels peers open. The cluster knows this and nothing of the doors' state; the split
//! registers itself as the tunnels' server ([`Context::serve_tunnels`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};

use hearth_auth::identity::Identity;
use hearth_base::connections::Limits;
use hearth_models::sharing::Sharing;
use hearth_models::telemetry::Telemetry;
use hearth_models::ModelHost;
use hearth_route::Router;
use hearth_store::Store;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::dial::Dialer;
use super::sharing::Files;
use super::tunnel::Tunnel;
use super::Peers;

/// Serves one tunnel a peer opened, of the kind it names; says why it ended.
pub type TunnelServer = Box<
    dyn Fn(Arc<Context>, String, Tunnel) -> Pin<Box<dyn Future<Output = String> + Send>>
        + Send
        + Sync,
>;

/// What the cluster needs of this node. One per node, shared with the doors.
pub struct Context {
    pub host: Arc<ModelHost>,
    pub store: Store,
    /// This node's name, shown with every answer it gives.
    pub node_name: String,
    pub identity: Arc<Identity>,
    /// Where each request runs; its hub is the registry the cluster's peers join.
    pub router: Router,
    /// Model sharing over the cluster's connections.
    pub sharing: Arc<Sharing>,
    /// The telemetry sampler's latest snapshot.
    pub telemetry: watch::Receiver<Telemetry>,
    /// Timeouts and connection caps, as for the doors' connections.
    pub limits: Limits,
    /// Cancelled when the node begins shutting down.
    pub shutdown: CancellationToken,
    /// The cluster's port when it listens.
    pub port: Option<u16>,
    /// The peers connected now.
    pub peers: Peers,
    /// The peer addresses this node keeps connections to (set once the cluster runs). Weak:
    /// the node owns the dialer, which reaches this context through the cluster's `Me`, so a
    /// strong one here would keep the context (and its database) alive after the node is gone.
    dialer: OnceLock<Weak<Dialer>>,
    tunnels: OnceLock<TunnelServer>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("node_name", &self.node_name)
            .field("port", &self.port)
            .field("serves_tunnels", &self.tunnels.get().is_some())
            .finish_non_exhaustive()
    }
}

/// The parts of a [`Context`] the node gives it.
#[derive(Debug)]
pub struct Parts {
    pub host: Arc<ModelHost>,
    pub store: Store,
    pub node_name: String,
    pub identity: Arc<Identity>,
    pub router: Router,
    pub sharing: Arc<Sharing>,
    pub telemetry: watch::Receiver<Telemetry>,
    pub limits: Limits,
    pub shutdown: CancellationToken,
    pub port: Option<u16>,
}

impl Context {
    pub fn new(p: Parts) -> Self {
        Self {
            host: p.host,
            store: p.store,
            node_name: p.node_name,
            identity: p.identity,
            router: p.router,
            sharing: p.sharing,
            telemetry: p.telemetry,
            limits: p.limits,
            shutdown: p.shutdown,
            port: p.port,
            peers: Peers::default(),
            dialer: OnceLock::new(),
            tunnels: OnceLock::new(),
        }
    }

    /// The cluster's dialer, while the cluster runs.
    pub fn dialer(&self) -> Option<Arc<Dialer>> {
        self.dialer.get()?.upgrade()
    }

    /// The cluster runs with `dialer` (once; a later one is ignored).
    pub fn set_dialer(&self, dialer: &Arc<Dialer>) {
        let _ = self.dialer.set(Arc::downgrade(dialer));
    }

    /// Tunnels peers open are served by `server` (once; a later one is ignored).
    pub fn serve_tunnels(&self, server: TunnelServer) {
        let _ = self.tunnels.set(server);
    }

    /// What serving model files to peers needs.
    pub(crate) fn files(&self) -> Files {
        Files {
            router: self.router.clone(),
            store: self.store.clone(),
            host: self.host.clone(),
            sharing: self.sharing.clone(),
        }
    }

    /// Serve a tunnel of kind `kind`: why it ended.
    pub(crate) async fn serve_tunnel(self: &Arc<Self>, kind: String, mut tunnel: Tunnel) -> String {
        match self.tunnels.get() {
            Some(serve) => serve(self.clone(), kind, tunnel).await,
            None => {
                let why = "this node serves no tunnels".to_owned();
                let _ = tunnel.answer(Err(&why)).await;
                why
            }
        }
    }
}
