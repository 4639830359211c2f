//! The `/generate` door's feedback on answers (a rating, words, the token it is about), kept
//! by request id.

use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::params;

use crate::db::Store;
use crate::error::StoreError;

/// The feedback table: the first migration (`crate::open` lists every table's).
pub const MIGRATION: &str = "CREATE TABLE feedback (
        id          INTEGER PRIMARY KEY,
        request_id  TEXT NOT NULL,
        rating      REAL NOT NULL,
        text        TEXT,
        position    INTEGER,
        created_at  INTEGER NOT NULL
    );
    CREATE INDEX feedback_request ON feedback(request_id);";

/// A feedback row as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackRow {
    pub request_id: String,
    pub rating: f64,
    pub text: Option<String>,
    pub position: Option<i64>,
}

impl Store {
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
            .with(|c| c.pragma_query_value(None, "journal_mode", |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(mode, "wal");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
