//! The signed-challenge door's registered clients in `hearth.db`: registration (a key
//! registered again keeps its id; a revoked one stays refused until removed), lookup with the
//! key's bytes for a signature check, listing, revocation and last use. The rows only: what a
//! key is and how it verifies is `hearth_auth::clients`', which the door applies.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;

use crate::db::{now_ms, Store};
use crate::error::StoreError;

/// A public key as the store keeps it: the client id derived from it, its algorithm's name
/// (`ed25519`, `rsa-sha256`) and its DER bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    pub client_id: String,
    pub algorithm: String,
    pub der: Vec<u8>,
}

/// The schema migration that adds the clients table. `crate::open::MIGRATIONS` lists it after the
/// ones before it (`MIGRATION` here).
pub const MIGRATION: &str = "CREATE TABLE clients (
        client_id      TEXT PRIMARY KEY,
        name           TEXT NOT NULL,
        algorithm      TEXT NOT NULL,
        public_key_der BLOB NOT NULL,
        created_at     INTEGER NOT NULL,
        last_seen_at   INTEGER,
        revoked_at     INTEGER
    );";

/// A registered client as listed (never its key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Client {
    pub client_id: String,
    pub name: String,
    /// The key's algorithm, by name (`ed25519`, `rsa-sha256`).
    pub algorithm: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub last_seen_at: Option<i64>,
    pub revoked: bool,
}

/// The outcome of a registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// A new client.
    Created(Client),
    /// The key was registered before; its client is unchanged.
    Existing(Client),
    /// The key was registered and then revoked.
    Revoked(Client),
}

const CLIENT_COLUMNS: &str = "client_id, name, algorithm, created_at, last_seen_at, revoked_at";

fn client_row(r: &Row<'_>) -> rusqlite::Result<Client> {
    let revoked_at: Option<i64> = r.get(5)?;
    Ok(Client {
        client_id: r.get(0)?,
        name: r.get(1)?,
        algorithm: r.get(2)?,
        created_at: r.get(3)?,
        last_seen_at: r.get(4)?,
        revoked: revoked_at.is_some(),
    })
}

/// Register a key, or find the client it already belongs to.
pub fn register_client(c: &Connection, name: &str, key: &KeyRow) -> rusqlite::Result<Registration> {
    let id = &key.client_id;
    if let Some(existing) = get_client(c, id)? {
        return Ok(if existing.revoked {
            Registration::Revoked(existing)
        } else {
            Registration::Existing(existing)
        });
    }
    c.execute(
        "INSERT INTO clients (client_id, name, algorithm, public_key_der, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, name, key.algorithm, key.der, now_ms()],
    )?;
    let client = get_client(c, id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    Ok(Registration::Created(client))
}

pub fn get_client(c: &Connection, client_id: &str) -> rusqlite::Result<Option<Client>> {
    c.query_row(
        &format!("SELECT {CLIENT_COLUMNS} FROM clients WHERE client_id = ?1"),
        [client_id],
        client_row,
    )
    .optional()
}

/// A client and its key's DER bytes, revoked or not (the door tells the two apart).
pub fn client_with_key(
    c: &Connection,
    client_id: &str,
) -> rusqlite::Result<Option<(Client, Vec<u8>)>> {
    c.query_row(
        &format!("SELECT {CLIENT_COLUMNS}, public_key_der FROM clients WHERE client_id = ?1"),
        [client_id],
        |r| Ok((client_row(r)?, r.get::<_, Vec<u8>>(6)?)),
    )
    .optional()
}

pub fn list_clients(c: &Connection) -> rusqlite::Result<Vec<Client>> {
    let mut stmt = c.prepare(&format!(
        "SELECT {CLIENT_COLUMNS} FROM clients ORDER BY created_at, client_id"
    ))?;
    let rows = stmt.query_map([], client_row)?;
    rows.collect()
}

/// Revoke a live client. False when no live client has this id.
pub fn revoke_client(c: &Connection, client_id: &str) -> rusqlite::Result<bool> {
    Ok(c.execute(
        "UPDATE clients SET revoked_at = ?2 WHERE client_id = ?1 AND revoked_at IS NULL",
        params![client_id, now_ms()],
    )? > 0)
}

/// Delete a client (revoked or not), so its key could register again.
pub fn remove_client(c: &Connection, client_id: &str) -> rusqlite::Result<bool> {
    Ok(c.execute("DELETE FROM clients WHERE client_id = ?1", [client_id])? > 0)
}

/// Note a successful authentication.
pub fn touch_client(c: &Connection, client_id: &str) -> rusqlite::Result<()> {
    c.execute(
        "UPDATE clients SET last_seen_at = ?2 WHERE client_id = ?1",
        params![client_id, now_ms()],
    )
    .map(|_| ())
}

/// The same queries on the node's database, off the async threads.
impl Store {
    pub async fn register_client(
        &self,
        name: String,
        key: KeyRow,
    ) -> Result<Registration, StoreError> {
        self.with(move |c| register_client(c, &name, &key)).await
    }

    pub async fn client_with_key(
        &self,
        client_id: String,
    ) -> Result<Option<(Client, Vec<u8>)>, StoreError> {
        self.with(move |c| client_with_key(c, &client_id)).await
    }

    pub async fn list_clients(&self) -> Result<Vec<Client>, StoreError> {
        self.with(list_clients).await
    }

    pub async fn revoke_client(&self, client_id: String) -> Result<bool, StoreError> {
        self.with(move |c| revoke_client(c, &client_id)).await
    }

    pub async fn remove_client(&self, client_id: String) -> Result<bool, StoreError> {
        self.with(move |c| remove_client(c, &client_id)).await
    }

    pub async fn touch_client(&self, client_id: String) -> Result<(), StoreError> {
        self.with(move |c| touch_client(c, &client_id)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> KeyRow {
        KeyRow {
            client_id: "k1a2b3".into(),
            algorithm: "ed25519".into(),
            der: vec![0x30, 0x2a, 7, 7, 7],
        }
    }

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(MIGRATION).unwrap();
        c
    }

    #[test]
    fn registering_twice_listing_revoking_and_removing() {
        let c = db();
        let key = key();
        let Registration::Created(first) = register_client(&c, "laptop", &key).unwrap() else {
            panic!("first registration creates");
        };
        assert_eq!(first.client_id, key.client_id);
        assert_eq!(
            (first.name.as_str(), first.algorithm.as_str()),
            ("laptop", "ed25519")
        );
        let Registration::Existing(again) = register_client(&c, "other name", &key).unwrap() else {
            panic!("second registration finds the same client");
        };
        assert_eq!(again, first);
        let (found, found_der) = client_with_key(&c, &first.client_id).unwrap().unwrap();
        assert_eq!(found, first);
        assert_eq!(found_der, key.der);
        assert!(client_with_key(&c, "0000000000").unwrap().is_none());
        touch_client(&c, &first.client_id).unwrap();
        assert!(get_client(&c, &first.client_id)
            .unwrap()
            .unwrap()
            .last_seen_at
            .is_some());
        assert_eq!(list_clients(&c).unwrap().len(), 1);
        assert!(revoke_client(&c, &first.client_id).unwrap());
        assert!(
            !revoke_client(&c, &first.client_id).unwrap(),
            "already revoked"
        );
        assert!(matches!(
            register_client(&c, "laptop", &key).unwrap(),
            Registration::Revoked(_)
        ));
        assert!(list_clients(&c).unwrap()[0].revoked);
        assert!(remove_client(&c, &first.client_id).unwrap());
        assert!(matches!(
            register_client(&c, "laptop", &key).unwrap(),
            Registration::Created(_)
        ));
    }
}
