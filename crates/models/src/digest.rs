//! The SHA-256 of model files, computed once per file (by path, size and modification time,
//! so a replaced file is hashed again) off the runtime's threads and kept in the database
//! across restarts, for `/api/tags` and for peers that fetch a model from this node. An
//! Ollama blob (imported models link to one) is named by its SHA-256 and is not read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use sha2::{Digest as _, Sha256};
use tokio::sync::OnceCell;

use hearth_store::digests::FileKey;
use hearth_store::Store;

/// The file's SHA-256 (lowercase hex). Callers asking while it is computed wait for the same
/// result, up to `wait` when given (the hash goes on, so a later call has it). `""` when it is
/// not known (yet) or the file cannot be read.
pub async fn sha256(store: &Store, path: &Path, wait: Option<Duration>) -> String {
    type Key = (PathBuf, u64, Option<SystemTime>);
    static DIGESTS: OnceLock<Mutex<HashMap<Key, Arc<OnceCell<String>>>>> = OnceLock::new();
    if let Some(hex) = ollama_blob_digest(path) {
        return hex;
    }
    let Ok(meta) = std::fs::metadata(path) else {
        return String::new();
    };
    let key = (path.to_owned(), meta.len(), meta.modified().ok());
    let cell = match DIGESTS.get_or_init(Mutex::default).lock() {
        Ok(mut known) => known.entry(key).or_default().clone(),
        Err(_) => return String::new(),
    };
    if let Some(d) = cell.get() {
        return d.clone();
    }
    let file = FileKey {
        path: path.to_string_lossy().into_owned(),
        size: meta.len(),
        modified_ns: meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_nanos()).ok()),
    };
    let (path, store) = (path.to_owned(), store.clone());
    let hashing = tokio::spawn(async move {
        cell.get_or_try_init(|| async move {
            // Computed by an earlier run: not read again.
            match store.known_digest(file.clone()).await {
                Ok(Some(known)) => return Ok(known),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "reading the kept model digests"),
            }
            let hex = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
                let mut file = std::fs::File::open(&path)?;
                let mut hasher = Sha256::new();
                std::io::copy(&mut file, &mut hasher)?;
                Ok(hex::encode(hasher.finalize()))
            })
            .await
            .map_err(std::io::Error::other)??;
            if let Err(e) = store.remember_digest(file, hex.clone()).await {
                tracing::warn!(error = %e, "keeping a model digest");
            }
            Ok::<_, std::io::Error>(hex)
        })
        .await
        .cloned()
    });
    let result = match wait {
        Some(w) => match tokio::time::timeout(w, hashing).await {
            Ok(r) => r,
            // Still hashing; it goes on.
            Err(_) => return String::new(),
        },
        None => hashing.await,
    };
    match result {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "model digest failed");
            String::new()
        }
        Err(_) => String::new(),
    }
}

/// The SHA-256 an Ollama blob's name gives (`sha256-<hex>`), for a file that is (or links
/// to) one.
fn ollama_blob_digest(path: &Path) -> Option<String> {
    let target = std::fs::canonicalize(path).ok()?;
    let hex = target.file_name()?.to_str()?.strip_prefix("sha256-")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}
