//! This node as its cluster sees it: the node's [`Core`], the handles every part shares (the
//! model host, the route, the store, the identity, the samples), held here once; the cluster's
//! own state that the doors read (its port, the peers connected, the dialer); and who serves
//! the tunnels peers open. The cluster knows this and nothing of the doors' state; the split
//! registers itself as the tunnels' server ([`Context::serve_tunnels`]).

use std::any::Any;
use std::fmt;
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

use super::peers::Peers;
use super::sharing::Files;

/// The handles every part of the node shares, held here once: the model host, the store, the
/// node's name and identity, the route, model sharing, the telemetry samples, the connection
/// limits and the shutdown token. The cluster's [`Context`] owns it; the doors reach it through
/// that context.
pub struct Core {
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
    /// Timeouts and connection caps, for the doors' connections and the cluster's.
    pub limits: Limits,
    /// Cancelled when the node begins shutting down.
    pub shutdown: CancellationToken,
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// What the cluster needs of this node: the [`Core`] (read through this context as if its
/// own fields) and the cluster's own state. One per node, shared with the doors.
pub struct Context {
    pub core: Core,
    /// The cluster's port when it listens.
    pub port: Option<u16>,
    /// The peers connected now.
    pub peers: Peers,
    /// The peer addresses this node keeps connections to, once the cluster runs: the
    /// `dial::Dialer`, read through `Context::dialer` (in `dial`). Weak: the node owns the
    /// dialer, which reaches this context through the cluster's `Me`, so a strong one here would
    /// keep the context (and its database) alive after the node is gone. Held as `Any`, as is
    /// the next field, so that this module names nothing that names it back (the dialer dials
    /// as `Me`, a tunnel opens as `Me`, and `Me` holds this context).
    pub(crate) dialer: OnceLock<Weak<dyn Any + Send + Sync>>,
    /// Who serves the tunnels peers open: a `tunnel::TunnelServer`, set through
    /// `Context::serve_tunnels` (in `tunnel`).
    pub(crate) tunnels: OnceLock<Box<dyn Any + Send + Sync>>,
    /// Reranks asked of peers, waiting for their answers (`asks`, `rerank`).
    pub(crate) reranks: super::asks::Pending,
}

impl std::ops::Deref for Context {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
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

impl Context {
    /// The cluster's context around the node's `core`, listening on `port` if it does.
    pub fn new(core: Core, port: Option<u16>) -> Self {
        Self {
            core,
            port,
            peers: Peers::default(),
            dialer: OnceLock::new(),
            tunnels: OnceLock::new(),
            reranks: super::asks::Pending::default(),
        }
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
}
