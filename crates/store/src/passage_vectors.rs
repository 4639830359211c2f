//! The embeddings of a conversation's passages, by the model that made them (the documents'
//! embedding model named in Settings): little-endian `f32`s, normalized, deleted with their
//! passage. A passage gets one when a turn first needs it.

use rusqlite::params;

use crate::db::Store;
use crate::documents::Hit;
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE passage_vectors (
    passage_id INTEGER PRIMARY KEY REFERENCES passages(id) ON DELETE CASCADE,
    model      TEXT NOT NULL,
    vector     BLOB NOT NULL
);";

fn to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl Store {
    /// Up to `limit` of the conversation's passages without a vector of `model`: id and text,
    /// in order.
    pub async fn passages_without_vector(
        &self,
        conversation_id: String,
        model: String,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        self.with(move |c| {
            let mut stmt = c.prepare(
                "SELECT p.id, p.text FROM passages p
                 JOIN documents d ON d.id = p.document_id
                 LEFT JOIN passage_vectors v ON v.passage_id = p.id AND v.model = ?2
                 WHERE d.conversation_id = ?1 AND v.passage_id IS NULL
                 ORDER BY d.created_at, p.document_id, p.seq LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![conversation_id, model, limit as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            rows.collect()
        })
        .await
    }

    /// Keep passages' vectors of `model` (a vector made by another model is replaced).
    pub async fn set_passage_vectors(
        &self,
        model: String,
        vectors: Vec<(i64, Vec<f32>)>,
    ) -> Result<(), StoreError> {
        self.with(move |c| {
            let tx = c.unchecked_transaction()?;
            {
                let mut insert = tx.prepare(
                    "INSERT INTO passage_vectors (passage_id, model, vector) VALUES (?1, ?2, ?3)
                     ON CONFLICT(passage_id) DO UPDATE SET model = ?2, vector = ?3",
                )?;
                for (id, vector) in &vectors {
                    insert.execute(params![id, model, to_bytes(vector)])?;
                }
            }
            tx.commit()
        })
        .await
    }

    /// The conversation's passages that have a vector of `model`, each with it (`rank` 0).
    pub async fn passage_vectors(
        &self,
        conversation_id: String,
        model: String,
    ) -> Result<Vec<(Hit, Vec<f32>)>, StoreError> {
        self.with(move |c| {
            let mut stmt = c.prepare(
                "SELECT d.id, d.name, p.seq, p.page, p.heading, p.text, v.vector
                 FROM passage_vectors v
                 JOIN passages p ON p.id = v.passage_id
                 JOIN documents d ON d.id = p.document_id
                 WHERE d.conversation_id = ?1 AND v.model = ?2",
            )?;
            let rows = stmt.query_map(params![conversation_id, model], |r| {
                let hit = Hit {
                    document_id: r.get(0)?,
                    document: r.get(1)?,
                    seq: r.get(2)?,
                    page: r.get(3)?,
                    heading: r.get(4)?,
                    text: r.get(5)?,
                    rank: 0.0,
                };
                Ok((hit, from_bytes(&r.get::<_, Vec<u8>>(6)?)))
            })?;
            rows.collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::test_document;

    #[tokio::test]
    async fn vectors_are_kept_per_model_and_go_with_their_passage() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let conv = store.create_conversation("c".into()).await.unwrap().id;
        store
            .add_document(test_document(&conv, "d", &["one", "two"]))
            .await
            .unwrap();
        let missing = store
            .passages_without_vector(conv.clone(), "m".into(), 10)
            .await
            .unwrap();
        assert_eq!(
            missing.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(),
            ["one", "two"]
        );
        store
            .set_passage_vectors("m".into(), vec![(missing[0].0, vec![0.5, -1.25])])
            .await
            .unwrap();
        let kept = store
            .passage_vectors(conv.clone(), "m".into())
            .await
            .unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(
            (kept[0].0.text.as_str(), kept[0].1.clone()),
            ("one", vec![0.5, -1.25])
        );
        // Another model's vectors are its own.
        assert!(store
            .passage_vectors(conv.clone(), "n".into())
            .await
            .unwrap()
            .is_empty());
        let left = store
            .passages_without_vector(conv.clone(), "m".into(), 10)
            .await
            .unwrap();
        assert_eq!(left.len(), 1);
        assert!(store.delete_conversation(conv).await.unwrap());
        let rows: i64 = store
            .with(|c| c.query_row("SELECT count(*) FROM passage_vectors", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(rows, 0);
    }
}
