//! What can go wrong with a download, from the hub or from peers, as the doors and the CLI
//! report it.

use super::model_hub::ModelHubError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DownloadError {
    #[error(transparent)]
    Hub(#[from] ModelHubError),
    #[error("{0} is already in the models folder")]
    Exists(String),
    #[error("the downloaded file's SHA-256 is {got}, the hub says {expected}: the file arrived damaged, and the partial download was deleted")]
    Mismatch { expected: String, got: String },
    #[error("the hub sent more than the {0} bytes it announced")]
    TooLong(u64),
    #[error("the download failed {attempts} times in a row (last: {last}); the partial file is kept: download it again to resume")]
    GaveUp { attempts: u32, last: String },
    #[error("cannot write the download: {0}")]
    Io(String),
    #[error("cancelled")]
    Cancelled,
    #[error("the node stopped; the download resumes when it starts again")]
    Stopped,
    #[error("{file} is being downloaded from {model} already; cancel that first")]
    Busy { file: String, model: String },
    #[error("no peer of this cluster has {0} to share")]
    NoPeerHas(String),
    #[error("a peer sent {0}: refused")]
    BadPeer(String),
    #[error("{0} is being downloaded into this folder by another Hearth process (the node, or `hearth-node models pull`); wait for it or cancel it there")]
    Elsewhere(String),
    /// Names no folder: the error reaches clients on other machines.
    #[error("not enough disk space: the model needs {need_mib} MiB more and the models folder's disk has {free_mib} MiB free (and 100 MiB is kept free)")]
    NoSpace { need_mib: u64, free_mib: u64 },
}

pub(super) fn io(e: std::io::Error) -> DownloadError {
    DownloadError::Io(e.to_string())
}
