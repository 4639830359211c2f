//! The chat's MCP servers in `hearth.db`: each server's settings as one JSON document under its
//! name (what it means is `hearth-tools`' business), in the order they were added, and the
//! consent a user gave for good: tools always allowed, and tools allowed for one conversation
//! (gone with it).

use rusqlite::{params, OptionalExtension as _};

use crate::db::{now_ms, Store};
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE mcp_servers (
    name        TEXT PRIMARY KEY,
    spec        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE TABLE mcp_always_allowed (
    tool        TEXT PRIMARY KEY,
    created_at  INTEGER NOT NULL
);
CREATE TABLE mcp_chat_allowed (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    tool            TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, tool)
);";

/// One kept server: its name and its settings as the JSON text they were saved as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerRow {
    pub name: String,
    pub spec: String,
}

impl Store {
    /// Every kept server, oldest first.
    pub async fn mcp_servers(&self) -> Result<Vec<McpServerRow>, StoreError> {
        self.with(|c| {
            let mut stmt =
                c.prepare("SELECT name, spec FROM mcp_servers ORDER BY created_at, name")?;
            let rows = stmt.query_map([], |r| {
                Ok(McpServerRow {
                    name: r.get(0)?,
                    spec: r.get(1)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Keep `spec` under `name`: a new server, or new settings for one kept already (which
    /// keeps its place in the order). Returns whether the name was new.
    pub async fn put_mcp_server(&self, name: String, spec: String) -> Result<bool, StoreError> {
        self.with(move |c| {
            let now = now_ms();
            let existed: Option<i64> = c
                .query_row(
                    "SELECT created_at FROM mcp_servers WHERE name = ?1",
                    params![name],
                    |r| r.get(0),
                )
                .optional()?;
            c.execute(
                "INSERT INTO mcp_servers (name, spec, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
                 ON CONFLICT(name) DO UPDATE SET spec = ?2, updated_at = ?3",
                params![name, spec, now],
            )?;
            Ok(existed.is_none())
        })
        .await
    }

    /// Forget a server, and the consent given to its tools (`tool_prefix` is how its tools'
    /// names begin). Returns whether it was kept.
    pub async fn delete_mcp_server(
        &self,
        name: String,
        tool_prefix: String,
    ) -> Result<bool, StoreError> {
        self.with(move |c| {
            let n = c.execute("DELETE FROM mcp_servers WHERE name = ?1", params![name])?;
            // Matched as a prefix by its length: a name may hold LIKE's wildcards.
            let len = tool_prefix.chars().count() as i64;
            for table in ["mcp_always_allowed", "mcp_chat_allowed"] {
                c.execute(
                    &format!("DELETE FROM {table} WHERE substr(tool, 1, ?2) = ?1"),
                    params![tool_prefix, len],
                )?;
            }
            Ok(n > 0)
        })
        .await
    }

    /// The tools a user always allows.
    pub async fn mcp_always_allowed(&self) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT tool FROM mcp_always_allowed ORDER BY tool")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    /// Always allow `tool`, or stop doing so.
    pub async fn set_mcp_always_allowed(
        &self,
        tool: String,
        allowed: bool,
    ) -> Result<(), StoreError> {
        self.with(move |c| {
            if allowed {
                c.execute(
                    "INSERT OR IGNORE INTO mcp_always_allowed (tool, created_at) VALUES (?1, ?2)",
                    params![tool, now_ms()],
                )?;
            } else {
                c.execute(
                    "DELETE FROM mcp_always_allowed WHERE tool = ?1",
                    params![tool],
                )?;
            }
            Ok(())
        })
        .await
    }

    /// The tools allowed for the rest of one conversation.
    pub async fn mcp_chat_allowed(
        &self,
        conversation_id: String,
    ) -> Result<Vec<String>, StoreError> {
        self.with(move |c| {
            let mut stmt = c.prepare(
                "SELECT tool FROM mcp_chat_allowed WHERE conversation_id = ?1 ORDER BY tool",
            )?;
            let rows = stmt.query_map(params![conversation_id], |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    /// Allow `tool` for the rest of a conversation.
    pub async fn allow_mcp_tool_for_chat(
        &self,
        conversation_id: String,
        tool: String,
    ) -> Result<(), StoreError> {
        self.with(move |c| {
            c.execute(
                "INSERT OR IGNORE INTO mcp_chat_allowed (conversation_id, tool, created_at)
                 VALUES (?1, ?2, ?3)",
                params![conversation_id, tool, now_ms()],
            )
            .map(drop)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn servers_keep_their_order_and_settings_and_consent_goes_with_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(store
            .put_mcp_server("b".into(), "{\"x\":1}".into())
            .await
            .unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        assert!(store
            .put_mcp_server("a%".into(), "{}".into())
            .await
            .unwrap());
        // New settings keep the server's place.
        assert!(!store
            .put_mcp_server("b".into(), "{\"x\":2}".into())
            .await
            .unwrap());
        let conv = store.create_conversation("chat".into()).await.unwrap();
        store
            .set_mcp_always_allowed("a%__read".into(), true)
            .await
            .unwrap();
        store
            .set_mcp_always_allowed("ab__read".into(), true)
            .await
            .unwrap();
        store
            .allow_mcp_tool_for_chat(conv.id.clone(), "a%__write".into())
            .await
            .unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        let rows = store.mcp_servers().await.unwrap();
        let names: Vec<_> = rows
            .iter()
            .map(|r| (r.name.as_str(), r.spec.as_str()))
            .collect();
        assert_eq!(names, [("b", "{\"x\":2}"), ("a%", "{}")]);
        assert_eq!(
            store.mcp_chat_allowed(conv.id.clone()).await.unwrap(),
            ["a%__write"]
        );
        // Removing "a%" forgets its tools' consent, and not that of "ab" (LIKE would match it).
        assert!(store
            .delete_mcp_server("a%".into(), "a%__".into())
            .await
            .unwrap());
        assert!(!store
            .delete_mcp_server("a%".into(), "a%__".into())
            .await
            .unwrap());
        assert_eq!(store.mcp_always_allowed().await.unwrap(), ["ab__read"]);
        assert!(store
            .mcp_chat_allowed(conv.id.clone())
            .await
            .unwrap()
            .is_empty());
        // A conversation's consent goes with it.
        store
            .allow_mcp_tool_for_chat(conv.id.clone(), "b__x".into())
            .await
            .unwrap();
        store.delete_conversation(conv.id.clone()).await.unwrap();
        assert!(store.mcp_chat_allowed(conv.id).await.unwrap().is_empty());
        store
            .set_mcp_always_allowed("ab__read".into(), false)
            .await
            .unwrap();
        assert!(store.mcp_always_allowed().await.unwrap().is_empty());
    }
}
