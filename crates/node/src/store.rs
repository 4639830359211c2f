//! The node's SQLite database (`hearth.db` in the data dir, WAL mode): schema migrations
//! by `PRAGMA user_version`, and the queries doors need — `/generate` feedback, and the UI's
//! conversations and messages (an answer is saved while it streams). One connection behind a
//! mutex; every call runs on tokio's blocking pool so no async task waits on disk.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

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
    crate::clients::MIGRATION,
];

/// A conversation's generation settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    pub system_prompt: String,
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: Option<i64>,
}

/// A change to settings: only the fields that are present change (`max_tokens: null` clears
/// the limit).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SettingsPatch {
    pub system_prompt: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    #[serde(default, deserialize_with = "double_option")]
    pub max_tokens: Option<Option<i64>>,
}

fn double_option<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    pub id: String,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub settings: Settings,
}

/// Where an answer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Complete,
    Streaming,
    Stopped,
    Interrupted,
    Error,
}

impl MessageStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Streaming => "streaming",
            Self::Stopped => "stopped",
            Self::Interrupted => "interrupted",
            Self::Error => "error",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "streaming" => Self::Streaming,
            "stopped" => Self::Stopped,
            "interrupted" => Self::Interrupted,
            "error" => Self::Error,
            _ => Self::Complete,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    pub tokens: i64,
    pub tokens_per_s: f64,
    pub ttft_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: String,
    pub conversation_id: String,
    pub role: String,
    pub content: String,
    pub status: MessageStatus,
    pub model: Option<String>,
    pub node: Option<String>,
    pub error: Option<String>,
    pub stats: Option<Stats>,
    pub created_at: i64,
    #[serde(skip)]
    pub seq: i64,
}

/// A new message to append.
#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    pub conversation_id: &'a str,
    pub role: &'a str,
    pub content: &'a str,
    pub status: MessageStatus,
    pub model: Option<&'a str>,
    pub node: Option<&'a str>,
}

/// An API key as stored: only a SHA-256 of the secret is kept, and its first characters so a
/// user can tell keys apart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiKey {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked: bool,
}

/// Lowercase hex SHA-256: how key secrets are stored and looked up. Keys are 256-bit random
/// values, so a fast hash is enough (no password stretching needed).
pub fn key_hash(secret: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn key_row(r: &Row<'_>) -> rusqlite::Result<ApiKey> {
    let revoked_at: Option<i64> = r.get(5)?;
    Ok(ApiKey {
        id: r.get(0)?,
        name: r.get(1)?,
        prefix: r.get(2)?,
        created_at: r.get(3)?,
        last_used_at: r.get(4)?,
        revoked: revoked_at.is_some(),
    })
}

const KEY_COLUMNS: &str = "id, name, prefix, created_at, last_used_at, revoked_at";

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
        let conn = Connection::open(&path)?;
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

    pub(crate) async fn with<T: Send + 'static>(
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

const CONVERSATION_COLUMNS: &str =
    "id, title, created_at, updated_at, system_prompt, temperature, top_p, max_tokens";
const MESSAGE_COLUMNS: &str = "id, conversation_id, seq, role, content, status, model, node, error, tokens, tokens_per_s, ttft_ms, created_at";

fn conversation_row(r: &Row<'_>) -> rusqlite::Result<Conversation> {
    Ok(Conversation {
        id: r.get(0)?,
        title: r.get(1)?,
        created_at: r.get(2)?,
        updated_at: r.get(3)?,
        settings: Settings {
            system_prompt: r.get(4)?,
            temperature: r.get(5)?,
            top_p: r.get(6)?,
            max_tokens: r.get(7)?,
        },
    })
}

fn message_row(r: &Row<'_>) -> rusqlite::Result<Message> {
    let tokens: Option<i64> = r.get(9)?;
    let tokens_per_s: Option<f64> = r.get(10)?;
    let ttft_ms: Option<f64> = r.get(11)?;
    let status: String = r.get(5)?;
    Ok(Message {
        id: r.get(0)?,
        conversation_id: r.get(1)?,
        seq: r.get(2)?,
        role: r.get(3)?,
        content: r.get(4)?,
        status: MessageStatus::parse(&status),
        model: r.get(6)?,
        node: r.get(7)?,
        error: r.get(8)?,
        stats: tokens.map(|tokens| Stats {
            tokens,
            tokens_per_s: tokens_per_s.unwrap_or(0.0),
            ttft_ms: ttft_ms.unwrap_or(0.0),
        }),
        created_at: r.get(12)?,
    })
}

fn get_conversation(c: &Connection, id: &str) -> rusqlite::Result<Option<Conversation>> {
    c.query_row(
        &format!("SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = ?1"),
        [id],
        conversation_row,
    )
    .optional()
}

fn get_message(c: &Connection, id: &str) -> rusqlite::Result<Option<Message>> {
    c.query_row(
        &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"),
        [id],
        message_row,
    )
    .optional()
}

impl Store {
    /// Conversations, newest activity first; `q` matches titles and message text.
    pub async fn list_conversations(
        &self,
        q: Option<String>,
    ) -> Result<Vec<Conversation>, StoreError> {
        self.with(move |c| {
            let q = q.map(|q| q.trim().to_lowercase()).filter(|q| !q.is_empty());
            let rows = match q {
                None => {
                    let mut stmt = c.prepare(&format!(
                        "SELECT {CONVERSATION_COLUMNS} FROM conversations ORDER BY updated_at DESC, id"
                    ))?;
                    let rows = stmt.query_map([], conversation_row)?;
                    rows.collect::<Result<Vec<_>, _>>()?
                }
                Some(q) => {
                    let like = format!("%{}%", q.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
                    let mut stmt = c.prepare(&format!(
                        "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE lower(title) LIKE ?1 ESCAPE '\\'
                         OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND lower(m.content) LIKE ?1 ESCAPE '\\')
                         ORDER BY updated_at DESC, id"
                    ))?;
                    let rows = stmt.query_map([like], conversation_row)?;
                    rows.collect::<Result<Vec<_>, _>>()?
                }
            };
            Ok(rows)
        })
        .await
    }

    pub async fn create_conversation(&self, title: String) -> Result<Conversation, StoreError> {
        self.with(move |c| {
            let id = new_id("c");
            let now = now_ms();
            c.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)",
                params![id, title, now],
            )?;
            get_conversation(c, &id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)
        })
        .await
    }

    /// The conversation and its messages, oldest first.
    pub async fn conversation(
        &self,
        id: String,
    ) -> Result<Option<(Conversation, Vec<Message>)>, StoreError> {
        self.with(move |c| {
            let Some(conv) = get_conversation(c, &id)? else {
                return Ok(None);
            };
            let mut stmt = c.prepare(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ?1 ORDER BY seq"
            ))?;
            let messages = stmt
                .query_map([&id], message_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some((conv, messages)))
        })
        .await
    }

    pub async fn update_conversation(
        &self,
        id: String,
        title: Option<String>,
        settings: Option<SettingsPatch>,
    ) -> Result<Option<Conversation>, StoreError> {
        self.with(move |c| {
            let Some(mut conv) = get_conversation(c, &id)? else {
                return Ok(None);
            };
            if let Some(t) = title {
                conv.title = t;
            }
            if let Some(p) = settings {
                let s = &mut conv.settings;
                if let Some(v) = p.system_prompt {
                    s.system_prompt = v;
                }
                if let Some(v) = p.temperature {
                    s.temperature = v;
                }
                if let Some(v) = p.top_p {
                    s.top_p = v;
                }
                if let Some(v) = p.max_tokens {
                    s.max_tokens = v;
                }
            }
            let s = &conv.settings;
            c.execute(
                "UPDATE conversations SET title = ?2, system_prompt = ?3, temperature = ?4, top_p = ?5, max_tokens = ?6, updated_at = ?7 WHERE id = ?1",
                params![id, conv.title, s.system_prompt, s.temperature, s.top_p, s.max_tokens, now_ms()],
            )?;
            get_conversation(c, &id)
        })
        .await
    }

    pub async fn delete_conversation(&self, id: String) -> Result<bool, StoreError> {
        self.with(move |c| Ok(c.execute("DELETE FROM conversations WHERE id = ?1", [id])? > 0))
            .await
    }

    /// Append a message at the end of its conversation.
    pub async fn add_message(&self, m: NewMessage<'_>) -> Result<Message, StoreError> {
        let (conv, role, content, status) = (
            m.conversation_id.to_owned(),
            m.role.to_owned(),
            m.content.to_owned(),
            m.status,
        );
        let (model, node) = (m.model.map(str::to_owned), m.node.map(str::to_owned));
        self.with(move |c| {
            let id = new_id("m");
            let now = now_ms();
            c.execute(
                "INSERT INTO messages (id, conversation_id, seq, role, content, status, model, node, created_at)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?2), ?3, ?4, ?5, ?6, ?7, ?8)",
                params![id, conv, role, content, status.as_str(), model, node, now],
            )?;
            c.execute("UPDATE conversations SET updated_at = ?2 WHERE id = ?1", params![conv, now])?;
            get_message(c, &id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)
        })
        .await
    }

    pub async fn message(&self, id: String) -> Result<Option<Message>, StoreError> {
        self.with(move |c| get_message(c, &id)).await
    }

    /// Save an answer's text so far (it keeps streaming).
    pub async fn save_partial(&self, id: String, content: String) -> Result<(), StoreError> {
        self.with(move |c| {
            c.execute(
                "UPDATE messages SET content = ?2 WHERE id = ?1",
                params![id, content],
            )
            .map(|_| ())
        })
        .await
    }

    /// Record how an answer ended, and which node ended it (a re-dispatched answer moves).
    pub async fn finish_message(
        &self,
        id: String,
        content: String,
        status: MessageStatus,
        stats: Option<Stats>,
        node: String,
        error: Option<String>,
    ) -> Result<Option<Message>, StoreError> {
        self.with(move |c| {
            c.execute(
                "UPDATE messages SET content = ?2, status = ?3, tokens = ?4, tokens_per_s = ?5, ttft_ms = ?6, error = ?7, node = ?8 WHERE id = ?1",
                params![
                    id,
                    content,
                    status.as_str(),
                    stats.map(|s| s.tokens),
                    stats.map(|s| s.tokens_per_s),
                    stats.map(|s| s.ttft_ms),
                    error,
                    node
                ],
            )?;
            get_message(c, &id)
        })
        .await
    }

    /// Replace a user message's text and delete everything after it (edit and resend).
    pub async fn edit_and_truncate(
        &self,
        id: String,
        content: String,
    ) -> Result<Option<Message>, StoreError> {
        self.with(move |c| {
            let Some(m) = get_message(c, &id)? else {
                return Ok(None);
            };
            c.execute(
                "UPDATE messages SET content = ?2 WHERE id = ?1",
                params![id, content],
            )?;
            c.execute(
                "DELETE FROM messages WHERE conversation_id = ?1 AND seq > ?2",
                params![m.conversation_id, m.seq],
            )?;
            get_message(c, &id)
        })
        .await
    }

    /// Delete one message (the answer being regenerated).
    pub async fn delete_message(&self, id: String) -> Result<bool, StoreError> {
        self.with(move |c| Ok(c.execute("DELETE FROM messages WHERE id = ?1", [id])? > 0))
            .await
    }

    /// A new API key: the stored record and the secret, which is shown once and never stored.
    pub async fn create_key(&self, name: String) -> Result<(ApiKey, String), StoreError> {
        self.with(move |c| {
            let secret = format!(
                "hearth_{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            let id = new_id("k");
            let prefix: String = secret.chars().take(14).collect();
            c.execute(
                "INSERT INTO api_keys (id, name, hash, prefix, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, name, key_hash(&secret), prefix, now_ms()],
            )?;
            let key = c.query_row(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1"),
                [&id],
                key_row,
            )?;
            Ok((key, secret))
        })
        .await
    }

    pub async fn list_keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, id"
            ))?;
            let rows = stmt.query_map([], key_row)?;
            rows.collect()
        })
        .await
    }

    /// Revoke by id or by the secret's visible prefix. False when no live key matched.
    pub async fn revoke_key(&self, id_or_prefix: String) -> Result<bool, StoreError> {
        self.with(move |c| {
            Ok(c.execute(
                "UPDATE api_keys SET revoked_at = ?2 WHERE (id = ?1 OR prefix = ?1) AND revoked_at IS NULL",
                params![id_or_prefix, now_ms()],
            )? > 0)
        })
        .await
    }

    /// The live key with this secret, noting its use.
    pub async fn verify_key(&self, secret: String) -> Result<Option<ApiKey>, StoreError> {
        self.with(move |c| {
            let hash = key_hash(&secret);
            let key = c
                .query_row(
                    &format!(
                        "SELECT {KEY_COLUMNS} FROM api_keys WHERE hash = ?1 AND revoked_at IS NULL"
                    ),
                    [&hash],
                    key_row,
                )
                .optional()?;
            if key.is_some() {
                c.execute(
                    "UPDATE api_keys SET last_used_at = ?2 WHERE hash = ?1",
                    params![hash, now_ms()],
                )?;
            }
            Ok(key)
        })
        .await
    }

    /// At startup: answers still marked streaming were cut off by a kill or crash.
    pub async fn interrupt_streaming(&self) -> Result<usize, StoreError> {
        self.with(|c| {
            c.execute(
                "UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'",
                [],
            )
        })
        .await
    }
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
    async fn api_keys_are_stored_hashed_verified_and_revoked() {
        let dir = std::env::temp_dir().join(format!("hearth-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        let (key, secret) = store.create_key("laptop".into()).await.unwrap();
        assert!(secret.starts_with("hearth_") && secret.len() > 60);
        assert!(secret.starts_with(&key.prefix));
        let stored: String = store
            .conn
            .lock()
            .unwrap()
            .query_row("SELECT hash FROM api_keys WHERE id = ?1", [&key.id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(stored, key_hash(&secret));
        assert!(
            !stored.contains(&secret[7..20]),
            "the secret itself is not stored"
        );
        assert_eq!(
            store.verify_key(secret.clone()).await.unwrap().unwrap().id,
            key.id
        );
        assert!(store
            .verify_key("hearth_wrong".into())
            .await
            .unwrap()
            .is_none());
        let listed = store.list_keys().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].last_used_at.is_some());
        assert!(store.revoke_key(key.prefix.clone()).await.unwrap());
        assert!(
            !store.revoke_key(key.id.clone()).await.unwrap(),
            "already revoked"
        );
        assert!(store.verify_key(secret).await.unwrap().is_none());
        assert!(store.list_keys().await.unwrap()[0].revoked);
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
}
