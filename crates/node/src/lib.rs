//! # hearth-node
//!
//! The node service behind the `hearth-node` binary: it loads a model into a
//! [`hearth_engine::Engine`] and serves it on one HTTP port through every door — the web UI
//! and its `/api`, the OpenAI API, the streaming WebSocket `/generate`, the batch WebSocket
//! `/ws`, the signed-challenge WebSocket on `/` and, in hub mode, the workers' `/node` — with
//! its data in SQLite.
//!
//! ## Layout
//! The parts are crates of their own, each depending only on those below it (ARCHITECTURE.md,
//! "Crates"): `hearth_server` (the doors and `AppState`), `hearth_split`, `hearth_cluster`,
//! `hearth_route` (the one route, worker mode), `hearth_hub` (remote providers, placement),
//! `hearth_models` (model files, downloads, the engines loaded here, telemetry),
//! `hearth_store`, `hearth_auth`, `hearth_base`. This crate puts them together:
//! - [`Node`]: start everything (its steps, one function each, are `start`), hand out the
//!   address, go on and off the LAN (`exposure`), shut down gracefully (`shutdown`); its
//!   cluster listener, which follows the doors on and off the LAN, is `node_cluster`.
//! - [`cli`], [`config`]: the `serve` flags and their `HEARTH_*` variables (shared with the
//!   desktop app); [`NodeConfig`], default paths, `--model` resolution.
//! - [`telemetry`]: the samples the desktop app's tray shows (`hearth_models::telemetry`),
//!   with [`ModelState`] and [`Placement`]; [`logging`]: the log setup both programs share.
//!
//! Architecture invariant: `hearth-node` is the top of the node's crates and the only one the
//! desktop app knows, and no other crate depends on it.
//!
//! ## Invariants
//! - Doors only translate between their protocol and the engine's request/event stream.
//! - On shutdown every open stream gets a final message before the port closes.

pub mod cli;
pub mod config;
mod exposure;
pub mod logging;
mod node_cluster;
mod shutdown;
mod start;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::NodeConfig;
/// What the desktop app's tray shows of the model, so that it needs no crate below this one.
pub use hearth_engine::{ModelState, Placement};
/// The machine's samples, which the desktop app's tray shows (it knows this crate only).
pub use hearth_models::telemetry;
use hearth_models::ModelHost;
use hearth_server::AppState;
use hearth_store::Store;
use node_cluster::ClusterRun;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Model(#[from] config::ModelPathError),
    #[error(transparent)]
    DataDir(#[from] hearth_base::data_dir::LockError),
    #[error(transparent)]
    Store(#[from] hearth_store::StoreError),
    #[error(transparent)]
    Identity(#[from] hearth_auth::identity::IdentityError),
    #[error(transparent)]
    Join(#[from] hearth_route::join::JoinError),
    #[error("loading the node's identity: {0}")]
    IdentityTask(String),
    #[error("--image-urls: the HTTP client could not start: {0}")]
    ImageUrls(String),
    #[error("draft model {0} not found (looked for {1}): --draft-model takes a path or a name in the models folder")]
    DraftModel(String, std::path::PathBuf),
    #[error("--spec draft needs a draft model (--draft-model NAME|PATH)")]
    DraftSpecWithoutModel,
    #[error("TealeNet compatibility on the LAN needs a cluster passcode (--passcode): its traffic is plain text, and without one any machine on the LAN could use this node")]
    ClusterWithoutPasscode,
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

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
        if let Err(e) = lock.record(Some(addr.port())) {
            tracing::warn!(error = %e, "could not write the port into the data dir's lock file");
        }
        let host = start::model_host(&config, files, &store).await?;
        let state =
            start::shared_state(&config, host, (store, identity), reach.exposed, &listeners)?;
        let worker = start::join_hub(&config, &state);
        let start::Listeners {
            doors,
            ollama,
            cluster,
            ..
        } = listeners;
        let mut doors = start::serve_doors(&state, doors, ollama);
        tracing::info!(%addr, name = %config.name, exposed = reach.exposed, "listening");
        let (cluster, dialer) = match cluster {
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
