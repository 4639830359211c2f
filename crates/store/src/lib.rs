//! The node's SQLite database (`hearth.db` in the data dir, WAL mode): opening it (a damaged
//! file, or a log damaged in the middle (`wal`), is refused, never replaced), schema migrations
//! by `PRAGMA user_version`, and `/generate` feedback; the UI's conversations and messages
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
pub mod keys;
pub mod message_audio;
pub mod message_images;
pub mod peers;
pub mod responses;
mod wal;

pub use conversations::{
    Conversation, Message, MessageStatus, NewMessage, Settings, SettingsPatch, Stats,
};
pub use keys::{key_hash, ApiKey, KeyScope};
pub use message_audio::{AudioInfo, NewAudio, StoredAudio};
pub use message_images::{ImageInfo, NewImage, StoredImage};

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection};

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

/// SQLite's own verdict on a database file: `Ok` or what `PRAGMA quick_check` found (pages
/// corrupted in the middle of the file go unnoticed until read otherwise).
fn quick_check(conn: &Connection) -> Result<(), String> {
    let mut stmt = conn
        .prepare("PRAGMA quick_check")
        .map_err(|e| e.to_string())?;
    let found: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(0))
        .and_then(Iterator::collect)
        .map_err(|e| e.to_string())?;
    match found.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        [] => Err("quick_check gave no answer".into()),
        problems => Err(problems
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

/// Whether an error means the file is not a sound database.
fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Migrations in order; entry `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE feedback (
        id          INTEGER PRIMARY KEY,
        request_id  TEXT NOT NULL,
        rating      REAL NOT NULL,
        text        TEXT,
        position    INTEGER,
        created_at  INTEGER NOT NULL
    );
    CREATE INDEX feedback_request ON feedback(request_id);",
    "CREATE TABLE conversations (
        id            TEXT PRIMARY KEY,
        title         TEXT NOT NULL,
        created_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        temperature   REAL NOT NULL DEFAULT 0.8,
        top_p         REAL NOT NULL DEFAULT 0.95,
        max_tokens    INTEGER
    );
    CREATE TABLE messages (
        id              TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq             INTEGER NOT NULL,
        role            TEXT NOT NULL,
        content         TEXT NOT NULL,
        status          TEXT NOT NULL,
        model           TEXT,
        node            TEXT,
        error           TEXT,
        tokens          INTEGER,
        tokens_per_s    REAL,
        ttft_ms         REAL,
        created_at      INTEGER NOT NULL
    );
    CREATE INDEX messages_conversation ON messages(conversation_id, seq);",
    "CREATE TABLE api_keys (
        id           TEXT PRIMARY KEY,
        name         TEXT NOT NULL,
        hash         TEXT NOT NULL UNIQUE,
        prefix       TEXT NOT NULL,
        created_at   INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at   INTEGER
    );",
    clients::MIGRATION,
    peers::MIGRATION,
    digests::MIGRATION,
    keys::SCOPE_MIGRATION,
    responses::MIGRATION,
    message_images::MIGRATION,
    message_audio::MIGRATION,
];

/// Make `path` (and the WAL files next to it, when they exist) readable by this user only.
fn owner_only(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        for p in [
            path.to_path_buf(),
            path.with_extension("db-wal"),
            path.with_extension("db-shm"),
        ] {
            if p.exists() {
                if let Err(e) = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                {
                    tracing::warn!(file = %p.display(), error = %e, "could not make the database private");
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// A feedback row as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackRow {
    pub request_id: String,
    pub rating: f64,
    pub text: Option<String>,
    pub position: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| StoreError::Dir(data_dir.display().to_string(), e))?;
        let path = data_dir.join("hearth.db");
        let damaged = |detail: String| StoreError::Damaged {
            path: path.display().to_string(),
            detail,
        };
        // A log damaged in the middle would be replayed up to the damage, silently.
        let log = path.with_extension("db-wal");
        if let Some(d) = wal::damage(&log) {
            return Err(StoreError::DamagedLog {
                db: path.display().to_string(),
                log: log.display().to_string(),
                frame: d.frame,
                lost: d.commits_lost,
            });
        }
        let conn = Connection::open(&path)?;
        // It holds secrets (the cluster passcode, client keys): this user's only. SQLite gives
        // its -wal and -shm files the database's permissions.
        owner_only(&path);
        let setup = |conn: &Connection| -> Result<(), rusqlite::Error> {
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
        };
        match setup(&conn) {
            Err(e) if is_damage(&e) => return Err(damaged(e.to_string())),
            r => r?,
        }
        quick_check(&conn).map_err(damaged)?;
        match migrate(&conn) {
            Err(e) if is_damage(&e) => return Err(damaged(e.to_string())),
            r => r?,
        }
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

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

    pub async fn add_feedback(&self, row: FeedbackRow) -> Result<(), StoreError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        self.with(move |c| {
            c.execute(
                "INSERT INTO feedback (request_id, rating, text, position, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![row.request_id, row.rating, row.text, row.position, now],
            )
            .map(|_| ())
        })
        .await
    }

    pub async fn feedback_for(&self, request_id: &str) -> Result<Vec<FeedbackRow>, StoreError> {
        let request_id = request_id.to_owned();
        self.with(move |c| {
            let mut stmt = c.prepare(
                "SELECT request_id, rating, text, position FROM feedback WHERE request_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map([request_id], |r| {
                Ok(FeedbackRow {
                    request_id: r.get(0)?,
                    rating: r.get(1)?,
                    text: r.get(2)?,
                    position: r.get(3)?,
                })
            })?;
            rows.collect()
        })
        .await
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

fn migrate(conn: &Connection) -> Result<(), rusqlite::Error> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        conn.execute_batch(&format!(
            "BEGIN; {sql}; PRAGMA user_version = {}; COMMIT;",
            i + 1
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn feedback_round_trips_and_survives_reopen_in_wal_mode() {
        let dir = std::env::temp_dir().join(format!("hearth-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        let row = FeedbackRow {
            request_id: "gen_1".into(),
            rating: -1.0,
            text: Some("meh".into()),
            position: Some(3),
        };
        store.add_feedback(row.clone()).await.unwrap();
        drop(store);
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.feedback_for("gen_1").await.unwrap(), vec![row]);
        let mode: String = store
            .conn
            .lock()
            .unwrap()
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A node killed with the log full of changes (its files copied while it runs), then the
    /// log damaged in the middle: refused, naming the log, with both files left as they were;
    /// the undamaged copy opens with every conversation.
    #[tokio::test]
    async fn a_log_damaged_in_the_middle_is_refused_not_replayed_in_part() {
        let dir = std::env::temp_dir().join(format!("hearth-store-wal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let live = dir.join("live");
        let store = Store::open(&live).unwrap();
        for i in 0..40 {
            store
                .create_conversation(format!("chat {i}"))
                .await
                .unwrap();
        }
        let crashed = |name: &str| {
            let to = dir.join(name);
            std::fs::create_dir_all(&to).unwrap();
            for f in ["hearth.db", "hearth.db-wal"] {
                std::fs::copy(live.join(f), to.join(f)).unwrap();
            }
            to
        };
        let whole = crashed("whole");
        let damaged = crashed("damaged");
        let log = damaged.join("hearth.db-wal");
        let mut bytes = std::fs::read(&log).unwrap();
        let page = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let frames = (bytes.len() - 32) / (24 + page);
        assert!(frames >= 10, "the log holds the changes: {frames} frames");
        // A byte of a page a third of the way in.
        bytes[32 + (frames / 3) * (24 + page) + 24 + 100] ^= 0x40;
        std::fs::write(&log, &bytes).unwrap();

        let e = Store::open(&damaged).unwrap_err();
        assert!(matches!(e, StoreError::DamagedLog { .. }), "{e}");
        assert!(e.to_string().contains("hearth.db-wal"), "{e}");
        assert_eq!(
            std::fs::read(&log).unwrap(),
            bytes,
            "the log is left as it was"
        );
        let opened = Store::open(&whole).unwrap();
        assert_eq!(opened.list_conversations(None).await.unwrap().len(), 40);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
