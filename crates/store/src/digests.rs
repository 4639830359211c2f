//! Model files' SHA-256, in `hearth.db`: once computed, a file's digest is kept by its path,
//! size and modification time, so a restart does not read every model again and a replaced
//! file (another size or time) is hashed anew.

use rusqlite::{params, OptionalExtension as _};

use crate::db::Store;
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE model_digests (
    path         TEXT PRIMARY KEY,
    size         INTEGER NOT NULL,
    modified_ns  INTEGER,
    sha256       TEXT NOT NULL
);";

/// Which file a digest is of: its path, size and modification time (ns since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileKey {
    pub path: String,
    pub size: u64,
    pub modified_ns: Option<i64>,
}

impl Store {
    /// The digest kept for this very file, if any.
    pub async fn known_digest(&self, key: FileKey) -> Result<Option<String>, StoreError> {
        self.with(move |c| {
            c.query_row(
                "SELECT sha256 FROM model_digests
                 WHERE path = ?1 AND size = ?2 AND modified_ns IS ?3",
                params![key.path, key.size as i64, key.modified_ns],
                |row| row.get(0),
            )
            .optional()
        })
        .await
    }

    /// Keep `sha256` as the digest of this file (replacing one of an older file there).
    pub async fn remember_digest(&self, key: FileKey, sha256: String) -> Result<(), StoreError> {
        self.with(move |c| {
            c.execute(
                "INSERT INTO model_digests (path, size, modified_ns, sha256) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(path) DO UPDATE SET size = ?2, modified_ns = ?3, sha256 = ?4",
                params![key.path, key.size as i64, key.modified_ns, sha256],
            )
            .map(|_| ())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_digest_is_kept_for_its_file_and_not_for_a_changed_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let key = FileKey {
            path: "/models/a.gguf".into(),
            size: 10,
            modified_ns: Some(5),
        };
        assert_eq!(store.known_digest(key.clone()).await.unwrap(), None);
        store
            .remember_digest(key.clone(), "ab".into())
            .await
            .unwrap();
        // Kept across a reopening of the database.
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.known_digest(key.clone()).await.unwrap().as_deref(),
            Some("ab")
        );
        for changed in [
            FileKey {
                size: 11,
                ..key.clone()
            },
            FileKey {
                modified_ns: Some(6),
                ..key.clone()
            },
            FileKey {
                modified_ns: None,
                ..key.clone()
            },
        ] {
            assert_eq!(store.known_digest(changed).await.unwrap(), None);
        }
        // The file replaced: its new digest replaces the old one.
        let newer = FileKey {
            size: 12,
            ..key.clone()
        };
        store
            .remember_digest(newer.clone(), "cd".into())
            .await
            .unwrap();
        assert_eq!(
            store.known_digest(newer).await.unwrap().as_deref(),
            Some("cd")
        );
        assert_eq!(store.known_digest(key).await.unwrap(), None);
    }
}
