//! # hearth-node
//!
//! The node service behind the `hearth-node` binary: it loads a model into a
//! [`hearth_engine::Engine`] and serves it on one HTTP port through every door — the OpenAI
//! API and the streaming WebSocket `/generate` — with its data in SQLite.
//!
//! ## Layout
//! - [`config`]: [`NodeConfig`], default paths, `--model` resolution.
//! - [`server`]: the axum router (`server::router`), one file per door (`openai`, `generate`),
//!   OpenAI-format errors (`error`), `/api/status` (`status`).
//! - [`store`]: `hearth.db` (WAL) and its migrations.
//! - [`Node`]: start everything, hand out the address, shut down gracefully.
//!
//! ## Invariants
//! - Doors only translate between their protocol and the engine's request/event stream.
//! - On shutdown every open stream gets a final message before the port closes.

pub mod config;
pub mod server;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use hearth_engine::{Engine, EngineConfig};
use hearth_protocol::ModelId;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::NodeConfig;
use server::AppState;
use store::Store;

/// How long shutdown waits for the engine thread to finish its current step.
const ENGINE_STOP_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Model(#[from] config::ModelPathError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running node.
#[derive(Debug)]
pub struct Node {
    addr: SocketAddr,
    state: Arc<AppState>,
    server: JoinHandle<()>,
    grace: Duration,
}

impl Node {
    /// Open the database, start loading the model and listen. Returns once the port is bound;
    /// the model may still be loading (doors report that).
    pub async fn start(config: NodeConfig) -> Result<Self, NodeError> {
        let model_path = config::resolve_model(&config.models_dir, config.model.as_deref())?;
        let store = Store::open(&config.data_dir)?;
        let listener =
            TcpListener::bind(config.addr())
                .await
                .map_err(|source| NodeError::Bind {
                    addr: config.addr(),
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| NodeError::Bind {
            addr: config.addr(),
            source,
        })?;
        let model_id = ModelId::from_file_name(
            &model_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        let engine = Engine::start(EngineConfig {
            slots: config.parallel.max(1),
            threads: config.threads.max(1),
            ctx_per_slot: config.ctx,
            queue_capacity: config.queue,
            min_load_time: config.min_load_time,
            script: config.script.clone(),
            ..EngineConfig::new(model_path)
        });
        let state = Arc::new(AppState {
            engine,
            store,
            model_id,
            shutdown: CancellationToken::new(),
        });
        let app = server::router(state.clone());
        let token = state.shutdown.clone();
        let server = tokio::spawn(async move {
            // Token messages are small and latency matters more than packet count.
            let listener = listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY not set");
                }
            });
            let result = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
            if let Err(e) = result {
                tracing::error!(error = %e, "server stopped with an error");
            }
        });
        tracing::info!(%addr, "listening");
        Ok(Self {
            addr,
            state,
            server,
            grace: config.shutdown_grace,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn engine(&self) -> &Engine {
        &self.state.engine
    }

    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// Graceful shutdown: open streams get a final message, the port closes, the engine
    /// stops. Bounded by the configured grace period plus the engine's current step.
    pub async fn shutdown(self) {
        tracing::info!("shutting down");
        self.state.shutdown.cancel();
        let mut server = self.server;
        if tokio::time::timeout(self.grace, &mut server).await.is_err() {
            tracing::warn!("connections still open after the grace period; closing them");
            server.abort();
        }
        let engine = self.state.engine.clone();
        let stop = tokio::task::spawn_blocking(move || engine.shutdown());
        if tokio::time::timeout(ENGINE_STOP_WAIT, stop).await.is_err() {
            tracing::warn!("the engine did not stop in time");
        }
    }
}
