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
//!   address, shut down gracefully; its cluster listener, which follows the doors on and off
//!   the LAN, is `node_cluster`.
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
pub mod logging;
mod node_cluster;
mod start;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
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

/// The least time shutdown gives the engine thread to finish its current step (it gets the
/// whole grace period when that is longer).
const ENGINE_STOP_WAIT: Duration = Duration::from_secs(2);

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

/// How long shutdown waits for worker mode to tell its hub goodbye.
const WORKER_STOP_WAIT: Duration = Duration::from_secs(2);

/// How long a rebind waits for the previous listener's port to be free.
const REBIND_WAIT: Duration = Duration::from_secs(2);
/// How long shutdown waits for downloads to write what they have.
const DOWNLOADS_STOP_WAIT: Duration = Duration::from_secs(5);

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

    /// Expose the node to the LAN (listen on all interfaces, API keys required from other
    /// machines) or take it back to loopback, keeping the port. Connections already open stay
    /// open; new ones go to the new listener.
    pub async fn set_exposed(&self, exposed: bool) -> Result<SocketAddr, NodeError> {
        let mut listening = self.inner.listening.lock().await;
        if self.is_exposed() == exposed {
            return Ok(self.addr());
        }
        let host = if exposed {
            self.inner.lan_host
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        let old_addr = self.addr();
        let addr = SocketAddr::new(host, self.inner.port);
        listening.stop.cancel();
        let listener = match bind_retrying(addr).await {
            Ok(l) => l,
            Err(source) => {
                // Put the old listener back so the node stays reachable.
                let old = bind_retrying(old_addr)
                    .await
                    .map_err(|source| NodeError::Bind {
                        addr: old_addr,
                        source,
                    })?;
                listening.stop = self.inner.state.shutdown.child_token();
                let task = hearth_server::listen::serve(
                    old,
                    self.inner.app.clone(),
                    listening.stop.clone(),
                    self.inner.state.limits,
                    self.inner.connections.clone(),
                );
                listening.tasks.push(task);
                self.follow_with_ollama_port(&mut listening, old_addr.ip())
                    .await;
                return Err(NodeError::Bind { addr, source });
            }
        };
        self.inner.state.exposure.set_exposed(exposed);
        listening.stop = self.inner.state.shutdown.child_token();
        let task = hearth_server::listen::serve(
            listener,
            self.inner.app.clone(),
            listening.stop.clone(),
            self.inner.state.limits,
            self.inner.connections.clone(),
        );
        listening.tasks.retain(|t| !t.is_finished());
        listening.tasks.push(task);
        *self.inner.addr.lock().expect("addr lock") = addr;
        self.follow_with_ollama_port(&mut listening, host).await;
        tracing::info!(%addr, exposed, "rebound");
        if let Some(task) = self.rebind_cluster(host).await {
            listening.tasks.push(task);
        }
        Ok(addr)
    }

    /// Listen on the second port (`--ollama-port`) at `host`, under the doors' current stop
    /// token (its previous listener stopped with the previous token).
    async fn follow_with_ollama_port(&self, listening: &mut Listening, host: IpAddr) {
        // The configured port, not the current address: after one failed move there is none,
        // and the next move must still bring the port back.
        let Some(port) = self.inner.ollama_port else {
            return;
        };
        let at = SocketAddr::new(host, port);
        let bound = match bind_retrying(at).await {
            Ok(l) => {
                let task = hearth_server::listen::serve(
                    l,
                    self.inner.app.clone(),
                    listening.stop.clone(),
                    self.inner.state.limits,
                    self.inner.connections.clone(),
                );
                listening.tasks.push(task);
                Some(at)
            }
            Err(e) => {
                tracing::warn!(addr = %at, error = %e, "the Ollama port could not follow the main one; it is closed");
                None
            }
        };
        *self.inner.ollama_addr.lock().expect("ollama addr lock") = bound;
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

    /// Graceful shutdown: split models' workers stop first (saving their idle sequences
    /// through tunnels still open), then open streams get a final message, the port closes, the
    /// engine stops. The connections drain while worker mode says goodbye and the engine then stops,
    /// all bounded by the configured grace period (the engine gets at least
    /// [`ENGINE_STOP_WAIT`]): a decode step in progress, such as a long prefill on a loaded
    /// machine, overlaps the drain instead of following it.
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
        let (_, _, stopped) = tokio::join!(connections, worker_then_engine, downloads);
        if stopped.is_err() {
            tracing::warn!("a download did not stop in time");
        }
        // Answers, downloads and the engine have written their last: hearth.db alone is whole.
        if let Err(e) = self.inner.state.store.checkpoint().await {
            tracing::warn!(error = %e, "the database's log was not emptied into hearth.db");
        }
    }
}

/// Bind, retrying briefly while a just-closed listener still holds the port.
pub(crate) async fn bind_retrying(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let deadline = tokio::time::Instant::now() + REBIND_WAIT;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
