//! # hearth-node
//!
//! The node service behind the `hearth-node` binary: it loads a model into a
//! [`hearth_engine::Engine`] and serves it on one HTTP port through every door — the web UI
//! and its `/api`, the OpenAI API and the streaming WebSocket `/generate` — with its data in
//! SQLite.
//!
//! ## Layout
//! - [`config`]: [`NodeConfig`], default paths, `--model` resolution.
//! - [`server`]: the axum router (`server::router`), one file per door (`openai`, `generate`),
//!   OpenAI-format errors (`error`), `/api/status` (`status`).
//! - [`host`]: [`host::ModelHost`], the swappable engine every door submits through.
//! - [`store`]: `hearth.db` (WAL) and its migrations: feedback, conversations, messages.
//! - [`telemetry`]: the one sampler of CPU, memory, thermal level and engine load.
//! - [`Node`]: start everything, hand out the address, shut down gracefully.
//!
//! ## Invariants
//! - Doors only translate between their protocol and the engine's request/event stream.
//! - On shutdown every open stream gets a final message before the port closes.

pub mod config;
pub mod host;
pub mod server;
pub mod store;
pub mod telemetry;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::NodeConfig;
use host::{EngineSettings, ModelHost};
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
        let interrupted = store.interrupt_streaming().await?;
        if interrupted > 0 {
            tracing::info!(
                messages = interrupted,
                "answers cut off by the last shutdown are marked interrupted"
            );
        }
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
        let host = ModelHost::new(EngineSettings {
            slots: config.parallel.max(1),
            threads: config.threads.max(1),
            ctx_per_slot: config.ctx,
            queue_capacity: config.queue,
            min_load_time: config.min_load_time,
            script: config.script.clone(),
        });
        host.load(model_path).await;
        let shutdown = CancellationToken::new();
        let telemetry = telemetry::spawn(host.clone(), shutdown.child_token());
        let state = Arc::new(AppState {
            host,
            store,
            node_name: config.name.clone(),
            models_dir: config.models_dir.clone(),
            shutdown,
            chats: server::chat::Chats::default(),
            telemetry,
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
        tracing::info!(%addr, name = %config.name, "listening");
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

    /// The model host: the current engine, its state, load and unload.
    pub fn host(&self) -> &Arc<ModelHost> {
        &self.state.host
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
        if tokio::time::timeout(ENGINE_STOP_WAIT, self.state.host.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("the engine did not stop in time");
        }
    }
}
