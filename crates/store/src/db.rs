//! The database handle: one connection behind a mutex, every call on tokio's blocking pool
//! ([`Store::with`]), the log emptied at a clean stop ([`Store::checkpoint`]), and what every
//! table's rows share: their ids and times.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

use crate::error::StoreError;

/// The database: cheap to clone, one connection shared by the clones.
#[derive(Debug, Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    /// The store over an opened, migrated connection (`open`).
    pub(crate) fn from_connection(conn: Connection) -> Self {
        Self {
            conn: Arc::new(Mutex::new(conn)),
        }
    }

    /// Run `f` on the connection, on tokio's blocking pool.
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

/// Now, in milliseconds since the Unix epoch: the rows' times.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A new row id: `prefix`, then a random UUID's hex.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}
