//! Opening `hearth.db`: its folder made, a log damaged in the middle refused before SQLite
//! would replay part of it, the file this user's only, WAL mode, SQLite's own check, then the
//! schema migrations (by `PRAGMA user_version`, one per table group, in [`MIGRATIONS`]).

use std::path::Path;

use rusqlite::Connection;

use super::{
    clients, digests, documents, feedback, keys, mcp_servers, message_audio, message_images,
    passage_vectors, peers, responses, wal,
};
use crate::db::Store;
use crate::error::StoreError;

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
        Ok(Self::from_connection(conn))
    }
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
pub(crate) const MIGRATIONS: &[&str] = &[
    feedback::MIGRATION,
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
    mcp_servers::MIGRATION,
    super::conversations::TOOLS_MIGRATION,
    super::conversations::STEP_STATS_MIGRATION,
    documents::MIGRATION,
    documents::SOURCES_MIGRATION,
    passage_vectors::MIGRATION,
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
