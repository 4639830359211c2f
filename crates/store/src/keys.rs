//! API keys for clients on the LAN, in `hearth.db`: only a SHA-256 of each secret is kept,
//! with its first characters so a user can tell keys apart; revoked keys stop working at once.
//! Each key has a scope ([`KeyScope`]): `use` reaches the model doors only, `manage` the UI's
//! API too. Keys made before scopes existed keep working as `manage` (their migration).

use rusqlite::{params, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use crate::db::{new_id, now_ms, Store};
use crate::error::StoreError;

/// An API key as stored: only a SHA-256 of the secret is kept, and its first characters so a
/// user can tell keys apart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiKey {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub scope: KeyScope,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked: bool,
}

/// What a key reaches (DESIGN.md §6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyScope {
    /// The model doors: OpenAI, Ollama (but its model management), the WebSocket protocols.
    #[default]
    Use,
    /// Also the UI's API: conversations, settings, models, downloads, the cluster, metrics.
    Manage,
}

impl KeyScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Use => "use",
            Self::Manage => "manage",
        }
    }
}

impl std::str::FromStr for KeyScope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "use" => Ok(Self::Use),
            "manage" => Ok(Self::Manage),
            other => Err(format!(
                "'{}' is not a key scope: use or manage",
                other.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// Keys made before scopes keep what they reached: everything (`manage`).
pub(super) const SCOPE_MIGRATION: &str =
    "ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'manage';";

/// Lowercase hex SHA-256: how key secrets are stored and looked up. Keys are 256-bit random
/// values, so a fast hash is enough (no password stretching needed).
pub fn key_hash(secret: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn key_row(r: &Row<'_>) -> rusqlite::Result<ApiKey> {
    let revoked_at: Option<i64> = r.get(5)?;
    let scope: String = r.get(6)?;
    Ok(ApiKey {
        id: r.get(0)?,
        name: r.get(1)?,
        prefix: r.get(2)?,
        // A scope this version does not know reaches the least.
        scope: scope.parse().unwrap_or(KeyScope::Use),
        created_at: r.get(3)?,
        last_used_at: r.get(4)?,
        revoked: revoked_at.is_some(),
    })
}

const KEY_COLUMNS: &str = "id, name, prefix, created_at, last_used_at, revoked_at, scope";

impl Store {
    /// A new API key: the stored record and the secret, which is shown once and never stored.
    pub async fn create_key(
        &self,
        name: String,
        scope: KeyScope,
    ) -> Result<(ApiKey, String), StoreError> {
        self.with(move |c| {
            let secret = format!(
                "hearth_{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            let id = new_id("k");
            let prefix: String = secret.chars().take(14).collect();
            c.execute(
                "INSERT INTO api_keys (id, name, hash, prefix, created_at, scope) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![id, name, key_hash(&secret), prefix, now_ms(), scope.as_str()],
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
            let revoked = c.execute(
                "UPDATE api_keys SET revoked_at = ?2 WHERE (id = ?1 OR prefix = ?1) AND revoked_at IS NULL",
                params![id_or_prefix, now_ms()],
            )? > 0;
            // What the key kept goes with it.
            c.execute(
                "DELETE FROM stored_responses WHERE owner IN
                 (SELECT id FROM api_keys WHERE (id = ?1 OR prefix = ?1) AND revoked_at IS NOT NULL)",
                params![id_or_prefix],
            )?;
            Ok(revoked)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn api_keys_are_stored_hashed_verified_and_revoked() {
        let dir = std::env::temp_dir().join(format!("hearth-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        let (key, secret) = store
            .create_key("laptop".into(), KeyScope::Use)
            .await
            .unwrap();
        assert_eq!(key.scope, KeyScope::Use);
        assert!(secret.starts_with("hearth_") && secret.len() > 60);
        assert!(secret.starts_with(&key.prefix));
        let id = key.id.clone();
        let stored: String = store
            .with(move |c| {
                c.query_row("SELECT hash FROM api_keys WHERE id = ?1", [&id], |r| {
                    r.get(0)
                })
            })
            .await
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
    async fn keys_made_before_scopes_keep_working_as_manage() {
        let dir = tempfile::tempdir().unwrap();
        {
            // A database as the node left it before keys had a scope, with one key in it.
            let c = rusqlite::Connection::open(dir.path().join("hearth.db")).unwrap();
            let before = crate::open::MIGRATIONS
                .iter()
                .position(|m| *m == SCOPE_MIGRATION)
                .unwrap();
            for (i, sql) in crate::open::MIGRATIONS[..before].iter().enumerate() {
                c.execute_batch(&format!("{sql}; PRAGMA user_version = {};", i + 1))
                    .unwrap();
            }
            c.execute(
                "INSERT INTO api_keys (id, name, hash, prefix, created_at) VALUES ('k_old', 'old', ?1, 'hearth_old', 1)",
                [key_hash("hearth_old_secret")],
            )
            .unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let old = store.verify_key("hearth_old_secret".into()).await.unwrap();
        assert_eq!(old.map(|k| k.scope), Some(KeyScope::Manage));
        let (new, _) = store
            .create_key("new".into(), KeyScope::default())
            .await
            .unwrap();
        assert_eq!(new.scope, KeyScope::Use, "a new key uses the models only");
    }
}
