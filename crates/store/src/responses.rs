//! Stored answers of the Responses door, in `hearth.db`: each row is an answer's JSON and the
//! conversation it continues (JSON too), kept under its owner (an API key's id, or "" for the
//! node's own user on loopback) so that an owner reads, continues and deletes only its own.
//! Rows last [`KEPT_FOR_MS`] (OpenAI keeps stored responses 30 days), an owner keeps its
//! newest [`MAX_PER_OWNER`], and a revoked key's go with it (`keys`).

use rusqlite::{params, OptionalExtension as _};

use crate::db::{now_ms, Store};
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE stored_responses (
    id          TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    body        TEXT NOT NULL,
    history     TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX stored_responses_owner ON stored_responses(owner, created_at)";

/// How long a stored answer is kept.
pub const KEPT_FOR_MS: i64 = 30 * 24 * 3600 * 1000;

/// The most answers one owner keeps; the oldest go first.
pub const MAX_PER_OWNER: i64 = 1000;

/// One stored answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub id: String,
    pub owner: String,
    /// The answer as the door sent it (JSON).
    pub body: String,
    /// The conversation up to and including this answer (JSON), for a continuation.
    pub history: String,
}

impl Store {
    /// Keep an answer (replacing one of the same id), and let go of what is past keeping.
    pub async fn put_response(&self, r: StoredResponse) -> Result<(), StoreError> {
        self.with(move |c| {
            let now = now_ms();
            c.execute(
                "INSERT OR REPLACE INTO stored_responses (id, owner, body, history, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![r.id, r.owner, r.body, r.history, now],
            )?;
            c.execute(
                "DELETE FROM stored_responses WHERE created_at < ?1",
                params![now - KEPT_FOR_MS],
            )?;
            c.execute(
                "DELETE FROM stored_responses WHERE owner = ?1 AND id NOT IN
                 (SELECT id FROM stored_responses WHERE owner = ?1
                  ORDER BY created_at DESC, rowid DESC LIMIT ?2)",
                params![r.owner, MAX_PER_OWNER],
            )
            .map(|_| ())
        })
        .await
    }

    /// The answer `id` if `owner` stored it.
    pub async fn response(
        &self,
        owner: String,
        id: String,
    ) -> Result<Option<StoredResponse>, StoreError> {
        self.with(move |c| {
            c.query_row(
                "SELECT id, owner, body, history FROM stored_responses WHERE id = ?1 AND owner = ?2",
                params![id, owner],
                |row| {
                    Ok(StoredResponse {
                        id: row.get(0)?,
                        owner: row.get(1)?,
                        body: row.get(2)?,
                        history: row.get(3)?,
                    })
                },
            )
            .optional()
        })
        .await
    }

    /// Delete the answer `id` if `owner` stored it; whether there was one.
    pub async fn delete_response(&self, owner: String, id: String) -> Result<bool, StoreError> {
        self.with(move |c| {
            c.execute(
                "DELETE FROM stored_responses WHERE id = ?1 AND owner = ?2",
                params![id, owner],
            )
            .map(|n| n > 0)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_owner_sees_and_deletes_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let r = StoredResponse {
            id: "resp_1".into(),
            owner: "key_a".into(),
            body: "{}".into(),
            history: "[]".into(),
        };
        store.put_response(r.clone()).await.unwrap();
        assert_eq!(
            store
                .response("key_a".into(), "resp_1".into())
                .await
                .unwrap(),
            Some(r)
        );
        assert_eq!(
            store.response("".into(), "resp_1".into()).await.unwrap(),
            None
        );
        assert!(!store
            .delete_response("key_b".into(), "resp_1".into())
            .await
            .unwrap());
        assert!(store
            .delete_response("key_a".into(), "resp_1".into())
            .await
            .unwrap());
        assert_eq!(
            store
                .response("key_a".into(), "resp_1".into())
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn old_answers_and_those_past_the_owners_cap_go_and_a_revoked_keys_too() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let row = |id: &str, owner: &str| StoredResponse {
            id: id.into(),
            owner: owner.into(),
            body: "{}".into(),
            history: "[]".into(),
        };
        store.put_response(row("old", "")).await.unwrap();
        store
            .with(|c| {
                c.execute(
                    "UPDATE stored_responses SET created_at = 0 WHERE id = 'old'",
                    [],
                )
            })
            .await
            .unwrap();
        for i in 0..MAX_PER_OWNER + 2 {
            store.put_response(row(&format!("r{i}"), "")).await.unwrap();
        }
        let kept = |id: &str| {
            let (store, id) = (store.clone(), id.to_owned());
            async move { store.response(String::new(), id).await.unwrap().is_some() }
        };
        assert!(!kept("old").await, "past 30 days");
        assert!(
            !kept("r0").await && !kept("r1").await,
            "past the cap, oldest first"
        );
        assert!(kept("r2").await);
        let (key, _) = store
            .create_key("laptop".into(), crate::KeyScope::Use)
            .await
            .unwrap();
        store.put_response(row("mine", &key.id)).await.unwrap();
        assert!(store.revoke_key(key.id.clone()).await.unwrap());
        assert_eq!(store.response(key.id, "mine".into()).await.unwrap(), None);
    }
}
