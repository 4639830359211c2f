//! The running node ([`Node`]): its listeners, its cluster and hub worker, and the shared
//! state the doors read; [`Node::start`] strings `start`'s steps together. Going on and off the
//! LAN is `exposure`'s, moving the cluster's listener `cluster`'s, stopping `shutdown`'s.

mod cluster;
mod exposure;
mod shutdown;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hearth_models::ModelHost;
use hearth_server::AppState;
use hearth_store::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::node_cluster::ClusterRun;
use crate::start;

/// A running node. Cheap to clone; every clone drives the same node.
#[derive(Debug, Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Arc<AppState>,
    app: axum::Router,
    /// The port every listener of this node binds (fixed at start, so rebinding keeps it).
    port: u16,
    /// Where the node listens when exposed to the LAN.
    lan_host: IpAddr,
    listening: tokio::sync::Mutex<Listening>,
    /// Open connections per LAN address, across every listener of this node.
    connections: Arc<hearth_base::connections::PerAddress>,
    /// The cluster's listener, when it runs: it follows the doors on and off the LAN.
    cluster: std::sync::Mutex<Option<ClusterRun>>,
    /// The cluster's dialer for the node's life (the cluster's `Context` holds it weakly), also while its
    /// listener is closed.
    dialer: Option<Arc<hearth_cluster::dial::Dialer>>,
    addr: std::sync::Mutex<SocketAddr>,
    /// The second port (`--ollama-port`), which follows the main one on and off the LAN:
    /// where it listens now (none after a failed move), and the port it keeps.
    ollama_addr: std::sync::Mutex<Option<SocketAddr>>,
    ollama_port: Option<u16>,
    grace: Duration,
    /// Worker mode's connection to its hub (`--join`).
    worker: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// This node's hold on its data dir, released when the last handle is dropped.
    _lock: hearth_base::data_dir::DataDirLock,
}

#[derive(Debug)]
struct Listening {
    /// Cancelled to stop accepting on the current listener.
    stop: CancellationToken,
    /// Serving tasks: the current one, and earlier ones still finishing their connections.
    tasks: Vec<JoinHandle<()>>,
}

impl Node {
    /// Open the database, start loading the model and listen. Returns once the port is bound;
    /// the model may still be loading (doors report that).
    pub async fn start(config: NodeConfig) -> Result<Self, NodeError> {
        let files = start::model_files(&config)?;
        if let Some(j) = &config.join {
            j.validate()?;
        }
        start::raise_open_files();
        let start::DataDir {
            mut lock,
            store,
            identity,
        } = start::open_data_dir(&config).await?;
        let reach = start::reach(&config)?;
        let mut config = config;
        start::stored_cluster_settings(&mut config, &store, reach.exposed).await?;
        let listeners = start::bind(&config, reach).await?;
        let addr = listeners.addr;
        start::record_port(&mut lock, addr.port());
        let host = start::model_host(&config, files, &store).await?;
        let secrets = hearth_auth::secrets::Secrets::new(&config.data_dir, config.key_storage);
        let mcp = crate::mcp::load(&store, &secrets, config.mcp_backoff_first).await?;
        let state = start::shared_state(
            &config,
            host,
            (store, identity),
            reach.exposed,
            &listeners,
            (mcp, secrets),
        )?;
        let worker = start::join_hub(&config, &state);
        let mut doors = start::serve_doors(&state, listeners.doors, listeners.ollama);
        tracing::info!(%addr, name = %config.name, exposed = reach.exposed, "listening");
        let (cluster, dialer) = match listeners.cluster {
            Some(c) => start::start_cluster(&state, c, &mut doors, reach.bind_host).await?,
            None => (None, None),
        };
        if reach.exposed {
            tracing::info!("exposed to the LAN: requests from other machines need an API key (hearth-node keys create)");
        }
        let node = Self {
            inner: Arc::new(Inner {
                state,
                app: doors.app,
                port: addr.port(),
                lan_host: reach.lan_host,
                listening: tokio::sync::Mutex::new(Listening {
                    stop: doors.stop,
                    tasks: doors.tasks,
                }),
                connections: doors.connections,
                cluster: std::sync::Mutex::new(cluster),
                dialer,
                addr: std::sync::Mutex::new(addr),
                ollama_addr: std::sync::Mutex::new(doors.ollama_addr),
                ollama_port: doors.ollama_addr.map(|a| a.port()),
                grace: config.shutdown_grace,
                worker: std::sync::Mutex::new(worker),
                _lock: lock,
            }),
        };
        node.follow_cluster_rules();
        Ok(node)
    }

    /// Where the node listens now.
    pub fn addr(&self) -> SocketAddr {
        *self.inner.addr.lock().expect("addr lock")
    }

    /// Where the second port (`--ollama-port`) listens now, when there is one.
    pub fn ollama_addr(&self) -> Option<SocketAddr> {
        *self.inner.ollama_addr.lock().expect("ollama addr lock")
    }

    /// Cluster peers connected now.
    pub fn cluster_peer_count(&self) -> usize {
        self.inner.state.cluster.peers.list().len()
    }

    /// Where the cluster listens (`--cluster-port`), when it does.
    pub fn cluster_addr(&self) -> Option<SocketAddr> {
        self.inner
            .cluster
            .lock()
            .expect("cluster lock")
            .as_ref()
            .map(|c| c.addr)
    }

    /// A URL for this machine's own clients (loopback even when exposed).
    pub fn local_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.inner.port)
    }

    pub fn is_exposed(&self) -> bool {
        self.inner.state.exposure.is_exposed()
    }

    /// The model host: the current engine, its state, load and unload.
    pub fn host(&self) -> &Arc<ModelHost> {
        &self.inner.state.host
    }

    pub fn store(&self) -> &Store {
        &self.inner.state.store
    }

    /// The telemetry sampler's latest snapshots.
    pub fn telemetry(&self) -> tokio::sync::watch::Receiver<hearth_models::telemetry::Telemetry> {
        self.inner.state.telemetry.clone()
    }
}
