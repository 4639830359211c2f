//! A download's partial file and its note, in `.downloads/`: the file held (an advisory lock)
//! by the one process writing it, the note saved whole or not at all, and the hash of what is
//! already there (a resumed download, a transfer's verification).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::download_error::{io, DownloadError};

/// What a partial file must become, kept beside it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Note {
    pub(super) model: String,
    pub(super) sha256: String,
    pub(super) size: u64,
    /// From peers: the ranges of the file and how much of each has arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) segments: Option<Vec<Segment>>,
    /// A split model's record (`NAME.shards.json`): the shards its download moved into the
    /// folder so far (a cancel takes them away, a restart resumes the download).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) placed: Vec<String>,
}

impl Note {
    /// The note at `path`, when there is one it can read.
    pub(super) fn load(path: &Path) -> Option<Note> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Write the note at `path` whole or not at all (a crash mid-write leaves the old one):
    /// written beside it, then renamed over it.
    pub(super) fn save(&self, path: &Path) -> Result<(), DownloadError> {
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(self).map_err(|e| DownloadError::Io(e.to_string()))?;
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

/// The partial file at `part`, opened to be written and held for this process alone (an
/// advisory lock the other Hearth processes respect: the node and `hearth-node models pull`
/// never write one partial at once). It goes with the file.
pub(super) fn open_partial(part: &Path) -> Result<std::fs::File, DownloadError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(part)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(DownloadError::Elsewhere(
            part.file_name()
                .map(|n| n.to_string_lossy().trim_end_matches(".part").to_owned())
                .unwrap_or_default(),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
    }
}

/// The partial at `part`, locked by this process, when it exists and no other process holds
/// it (dropping it lets go).
pub(super) fn held_here(part: &Path) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new().write(true).open(part).ok()?;
    file.try_lock().ok()?;
    Some(file)
}

/// The hash of the first `len` bytes of `path` (a partial file resumed).
pub(super) async fn hash_prefix(path: PathBuf, len: u64) -> Result<Sha256, DownloadError> {
    hash_on(path, Sha256::new(), 0, len).await
}

/// `hasher` fed the bytes of the file at `path` from `from` to `to`.
pub(super) async fn hash_on(
    path: PathBuf,
    mut hasher: Sha256,
    from: u64,
    to: u64,
) -> Result<Sha256, DownloadError> {
    tokio::task::spawn_blocking(move || -> std::io::Result<Sha256> {
        let len = to.saturating_sub(from);
        if len > 0 {
            let mut file = std::fs::File::open(&path)?;
            std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(from))?;
            let copied = std::io::copy(&mut std::io::Read::take(file, len), &mut hasher)?;
            if copied != len {
                return Err(std::io::Error::other(
                    "the partial file is shorter than it was",
                ));
            }
        }
        Ok(hasher)
    })
    .await
    .map_err(|e| DownloadError::Io(e.to_string()))?
    .map_err(io)
}

/// A range of a file fetched from one peer at a time: `done` bytes from `start` are written.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Segment {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) done: u64,
}
