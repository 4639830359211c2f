//! What the store's calls fail with: SQLite's errors, a folder it cannot make, a task that
//! died, and a database or log found damaged (each message says what to do).

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
