//! What every door shares: [`AppState`], the handles the node gives the doors (the cluster's
//! [`hearth_cluster::Context`] with the node's [`hearth_cluster::Core`], the models folder and
//! import roots, downloads, splits, image fetching), each listed once, and the doors' own
//! state, made here from [`DoorSettings`]. That state's types live in this module's children
//! ([`chats`], [`exposure`], [`batch`], [`auth`]), not in the doors that use them: every door
//! imports `AppState`, so a door defining a part of it and this module would import each other
//! in a circle.

pub(crate) mod auth;
pub(crate) mod batch;
pub(crate) mod chats;
pub(crate) mod exposure;

use std::sync::Arc;

use crate::image_urls::ImageUrls;

/// What every door shares.
#[derive(Debug)]
pub struct AppState {
    /// The cluster's side of this node (its port when it listens, the peers connected to it,
    /// the dialer), and the node's [`hearth_cluster::Core`] that the doors read through this
    /// state as if its own fields: the model host, store, route, identity, samples, limits and
    /// shutdown token.
    pub cluster: Arc<hearth_cluster::Context>,
    /// Where GGUF files live.
    pub models_dir: std::path::PathBuf,
    /// Where other apps keep models that can be imported.
    pub import_roots: hearth_models::import::Roots,
    /// Downloads from the hub or from peers into the models folder (`--hub-url`).
    pub downloads: Arc<hearth_models::Downloads>,
    /// Answers streaming into conversations right now.
    pub chats: chats::Chats,
    /// Whether the node is shared on the LAN, and the Host names it answers to.
    pub exposure: exposure::Exposure,
    /// The batch door's defaults and continuation cache.
    pub batch: batch::BatchDoor,
    /// The signed-challenge door's timeout and failure counters.
    pub auth: auth::AuthState,
    /// Notified when the cluster's passcode changed: the node moves its listener.
    pub cluster_rebind: Arc<tokio::sync::Notify>,
    /// Split models: this node's, and whether it shares its memory with peers' ones.
    pub splits: Arc<hearth_split::Splits>,
    /// Fetches images named by http(s) URL (`--image-urls`); `None`: only data URIs are read.
    pub image_urls: Option<ImageUrls>,
    /// The chat's MCP servers (their specs kept in `hearth.db` by the node and `mcp_api`).
    pub mcp: hearth_tools::McpServers,
    /// Their env and header values, kept apart from `hearth.db` (`crate::mcp_secrets`).
    pub secrets: hearth_auth::secrets::Secrets,
    /// How documents attached to a chat are read: in a child process with ceilings.
    pub documents: hearth_docs::Reader,
}

impl std::ops::Deref for AppState {
    type Target = hearth_cluster::Core;

    fn deref(&self) -> &hearth_cluster::Core {
        &self.cluster.core
    }
}

/// The settings the doors' own state is made from (the handles the node gives go to
/// [`AppState::new`] as they are).
#[derive(Debug)]
pub struct DoorSettings {
    /// Start shared on the LAN.
    pub exposed: bool,
    /// Host names the node answers to besides loopback and its addresses.
    pub allowed_hosts: Vec<String>,
    /// The batch door's generation defaults.
    pub batch_defaults: hearth_protocol::batch::BatchDefaults,
    /// How long the signed-challenge door waits for a client's answer.
    pub auth_timeout: std::time::Duration,
    /// The chat's MCP servers, as the node read them from `hearth.db`.
    pub mcp: hearth_tools::McpServers,
    /// Where their env and header values are kept (`mcp_secrets`).
    pub secrets: hearth_auth::secrets::Secrets,
    /// How documents attached to a chat are read (`hearth_docs::Reader`).
    pub documents: hearth_docs::Reader,
}

impl AppState {
    /// The doors' state around the handles the node gives: the doors' own parts (answers
    /// streaming into conversations, exposure, the batch door's cache, the signed-challenge
    /// door's counters) are made here from `settings`.
    pub fn new(
        cluster: Arc<hearth_cluster::Context>,
        models_dir: std::path::PathBuf,
        import_roots: hearth_models::import::Roots,
        downloads: Arc<hearth_models::Downloads>,
        splits: Arc<hearth_split::Splits>,
        image_urls: Option<ImageUrls>,
        settings: DoorSettings,
    ) -> Self {
        Self {
            cluster,
            models_dir,
            import_roots,
            downloads,
            chats: chats::Chats::default(),
            exposure: exposure::Exposure::new(settings.exposed, settings.allowed_hosts),
            batch: batch::BatchDoor::new(settings.batch_defaults),
            auth: auth::AuthState::new(settings.auth_timeout),
            cluster_rebind: Arc::new(tokio::sync::Notify::new()),
            splits,
            image_urls,
            mcp: settings.mcp,
            secrets: settings.secrets,
            documents: settings.documents,
        }
    }

    /// The cluster's dialer, while the cluster runs.
    pub fn dialer(&self) -> Option<Arc<hearth_cluster::dial::Dialer>> {
        self.cluster.dialer()
    }
}
