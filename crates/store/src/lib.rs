//! The node's SQLite database (`hearth.db` in the data dir, WAL mode): opening it (`open`: a
//! damaged file, or a log damaged in the middle (`wal`), is refused, never replaced; schema
//! migrations by `PRAGMA user_version`), and `/generate` feedback ([`feedback`]); the UI's conversations and messages
//! ([`conversations`]), API keys ([`keys`]), the images and audio clips of chat messages
//! ([`message_images`], [`message_audio`]), the signed-challenge door's clients ([`clients`]),
//! the cluster's known peers ([`peers`]), model files' digests ([`digests`]) and the Responses
//! door's stored answers ([`responses`]) each have a file. One connection behind a mutex;
//! every call runs on tokio's blocking pool. A clean stop empties the log into `hearth.db`
//! ([`Store::checkpoint`]).
//!
//! Architecture invariant: `hearth-store` is the only crate that names SQLite, and it knows
//! rows, not what they are for: no HTTP, no protocol, no model, no cluster, no keys (it
//! depends on no Hearth crate). A part that keeps something across restarts adds its table
//! and its file here.

pub mod clients;
pub mod conversations;
pub mod digests;
pub mod feedback;
pub mod keys;
pub mod message_audio;
pub mod message_images;
mod open;
pub mod peers;
pub mod responses;
mod wal;

pub use conversations::{
    Conversation, Message, MessageStatus, NewMessage, Settings, SettingsPatch, Stats,
};
pub use feedback::FeedbackRow;
pub use keys::{key_hash, ApiKey, KeyScope};
pub use message_audio::{AudioInfo, NewAudio, StoredAudio};
pub use message_images::{ImageInfo, NewImage, StoredImage};

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot create {0}: {1}")]
    Dir(String, std::io::Error),
    #[error("database task failed: {0}")]
    Task(String),
    #[error("the database {path} is damaged ({detail}). Hearth does not start on it, so nothing in it is lost: stop Hearth and keep a copy of the file; then recover it (sqlite3 {path} .recover | sqlite3 recovered.db, and put recovered.db in its place) or move it aside to start with an empty database")]
    Damaged { path: String, detail: String },
    #[error("the database's log {log} is damaged at frame {frame}: SQLite would drop the {lost} saved change(s) after it and start on older data. Hearth does not start on it, so nothing is lost: keep a copy of {db} and {log}; then, to go on with the changes before the damage only, run sqlite3 {db} 'PRAGMA wal_checkpoint(TRUNCATE)' and start Hearth again")]
    DamagedLog {
        db: String,
        log: String,
        frame: usize,
        lost: usize,
    },
}

#[derive(Debug, Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    pub async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn
                .lock()
                .map_err(|_| StoreError::Task("database mutex poisoned".into()))?;
            f(&conn).map_err(StoreError::from)
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Copy what the write-ahead log holds into `hearth.db` and empty the log, so that after
    /// a clean stop the database file alone is whole (what a user backs up or copies). SQLite
    /// does the same when the last connection closes; this does not wait for that.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        let (busy, frames, copied): (i64, i64, i64) = self
            .with(|c| {
                c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
            })
            .await?;
        if busy != 0 {
            tracing::warn!(
                frames,
                copied,
                "the database's log could not be emptied: it is in use"
            );
        }
        Ok(())
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}
