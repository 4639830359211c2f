//! The cluster's known peers, in `hearth.db`: the addresses this node keeps connections to
//! across restarts (added by hand, or found by discovery and connected once), each with when
//! it was added and when a connection to it last succeeded; and the settings made in the UI
//! (the cluster's passcode and TealeNet compatibility, which the command line's flags
//! override, and the throttle cap).

use rusqlite::params;
use serde::Serialize;

use crate::db::{now_ms, Store};
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE cluster_peers (
    address        TEXT PRIMARY KEY,
    added_at       INTEGER NOT NULL,
    connected_at   INTEGER
);
CREATE TABLE node_settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);";

/// A known peer as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownPeer {
    pub address: String,
    pub added_at: i64,
    pub connected_at: Option<i64>,
}

impl Store {
    /// Remember `address` (kept as it is when known already); whether it is new.
    pub async fn add_known_peer(&self, address: String) -> Result<bool, StoreError> {
        self.with(move |c| {
            c.execute(
                "INSERT OR IGNORE INTO cluster_peers (address, added_at) VALUES (?1, ?2)",
                params![address, now_ms()],
            )
            .map(|n| n > 0)
        })
        .await
    }

    /// A connection to `address` succeeded now (it is remembered if it was not).
    pub async fn peer_connected(&self, address: String) -> Result<(), StoreError> {
        self.with(move |c| {
            let now = now_ms();
            c.execute(
                "INSERT INTO cluster_peers (address, added_at, connected_at) VALUES (?1, ?2, ?2)
                 ON CONFLICT(address) DO UPDATE SET connected_at = ?2",
                params![address, now],
            )
            .map(|_| ())
        })
        .await
    }

    /// Forget `address`; whether it was known.
    pub async fn remove_known_peer(&self, address: String) -> Result<bool, StoreError> {
        self.with(move |c| {
            c.execute("DELETE FROM cluster_peers WHERE address = ?1", [address])
                .map(|n| n > 0)
        })
        .await
    }

    /// Every known peer, oldest first.
    pub async fn known_peers(&self) -> Result<Vec<KnownPeer>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT address, added_at, connected_at FROM cluster_peers ORDER BY added_at, address",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(KnownPeer {
                    address: r.get(0)?,
                    added_at: r.get(1)?,
                    connected_at: r.get(2)?,
                })
            })?;
            rows.collect()
        })
        .await
    }
}

impl Store {
    /// A setting made in the UI (the cluster's, the throttle cap), if any.
    pub async fn node_setting(&self, key: &'static str) -> Result<Option<String>, StoreError> {
        self.with(move |c| {
            use rusqlite::OptionalExtension as _;
            c.query_row(
                "SELECT value FROM node_settings WHERE key = ?1",
                [key],
                |r| r.get(0),
            )
            .optional()
        })
        .await
    }

    /// Set (or with None, clear) a setting made in the UI.
    pub async fn set_node_setting(
        &self,
        key: &'static str,
        value: Option<String>,
    ) -> Result<(), StoreError> {
        self.with(move |c| {
            match value {
                Some(v) => c.execute(
                    "INSERT INTO node_settings (key, value) VALUES (?1, ?2)
                     ON CONFLICT(key) DO UPDATE SET value = ?2",
                    params![key, v],
                ),
                None => c.execute("DELETE FROM node_settings WHERE key = ?1", [key]),
            }
            .map(|_| ())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn known_peers_are_added_once_marked_connected_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(store.add_known_peer("10.0.0.2:8421".into()).await.unwrap());
        assert!(!store.add_known_peer("10.0.0.2:8421".into()).await.unwrap());
        store.peer_connected("10.0.0.3:8421".into()).await.unwrap();
        store.peer_connected("10.0.0.2:8421".into()).await.unwrap();
        let known = store.known_peers().await.unwrap();
        assert_eq!(known.len(), 2);
        assert!(known.iter().all(|k| k.connected_at.is_some()));
        assert!(store
            .remove_known_peer("10.0.0.2:8421".into())
            .await
            .unwrap());
        assert!(!store
            .remove_known_peer("10.0.0.2:8421".into())
            .await
            .unwrap());
        let known = store.known_peers().await.unwrap();
        assert_eq!(known.len(), 1);
        assert_eq!(known[0].address, "10.0.0.3:8421");
        // Kept across a reopening.
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.known_peers().await.unwrap().len(), 1);
    }

    #[tokio::test]
    #[cfg(unix)]
    async fn the_database_holding_them_is_this_users_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .set_node_setting("passcode", Some("p".into()))
            .await
            .unwrap();
        for f in ["hearth.db", "hearth.db-wal"] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }

    #[tokio::test]
    async fn node_settings_are_set_replaced_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.node_setting("passcode").await.unwrap(), None);
        store
            .set_node_setting("passcode", Some("a".into()))
            .await
            .unwrap();
        store
            .set_node_setting("passcode", Some("b".into()))
            .await
            .unwrap();
        assert_eq!(
            store.node_setting("passcode").await.unwrap().as_deref(),
            Some("b")
        );
        store.set_node_setting("passcode", None).await.unwrap();
        assert_eq!(store.node_setting("passcode").await.unwrap(), None);
    }
}
