//! Why a node could not start or move its listeners ([`NodeError`]): the model files, the
//! data dir, the database and identity, `--join`, the command line's combinations, and binding
//! a port.

use std::net::SocketAddr;

use crate::config;

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
    #[error("the kept MCP servers could not be set up: {0}")]
    Mcp(String),
    #[error("cannot find this program, which reads a chat's documents: {0}")]
    DocumentReader(std::io::Error),
    #[error("--image-urls: the HTTP client could not start: {0}")]
    ImageUrls(String),
    #[error("draft model {0} not found (looked for {1}): --draft-model takes a path or a name in the models folder")]
    DraftModel(String, std::path::PathBuf),
    #[error("--projector {0}: {1}")]
    Projector(std::path::PathBuf, String),
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
