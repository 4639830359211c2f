//! Documents attached to a conversation in `hearth.db`: each one's name, kind and digest (the
//! same file attached twice to a conversation is kept once), and its passages, indexed for
//! words with SQLite's FTS5 (BM25 ranking). Deleted with their conversation.

use rusqlite::{params, OptionalExtension as _};

use crate::db::{new_id, now_ms, Store};
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE documents (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    kind            TEXT NOT NULL,
    digest          TEXT NOT NULL,
    bytes           INTEGER NOT NULL,
    pages           INTEGER,
    created_at      INTEGER NOT NULL,
    UNIQUE (conversation_id, digest)
);
CREATE TABLE passages (
    id          INTEGER PRIMARY KEY,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    page        INTEGER,
    heading     TEXT,
    text        TEXT NOT NULL
);
CREATE INDEX passages_document ON passages(document_id, seq);
CREATE VIRTUAL TABLE passages_fts USING fts5(text, heading, content='passages', content_rowid='id', tokenize='porter unicode61');
CREATE TRIGGER passages_indexed AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts(rowid, text, heading) VALUES (new.id, new.text, coalesce(new.heading, ''));
END;
CREATE TRIGGER passages_unindexed AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts(passages_fts, rowid, text, heading) VALUES ('delete', old.id, old.text, coalesce(old.heading, ''));
END;";

/// The sources an answer was given (its documents' passages), kept with it.
pub const SOURCES_MIGRATION: &str = "ALTER TABLE messages ADD COLUMN sources TEXT;";

/// A document to keep: what it is, and its passages in order.
#[derive(Debug, Clone)]
pub struct NewDocument {
    pub conversation_id: String,
    pub name: String,
    pub kind: String,
    /// SHA-256 of the file, hex.
    pub digest: String,
    pub bytes: u64,
    pub pages: Option<u32>,
    pub passages: Vec<NewPassage>,
    /// The most documents, and bytes of files, the conversation may keep with this one:
    /// checked in the transaction that adds it, so uploads side by side cannot pass them.
    pub within: Option<(usize, u64)>,
}

/// What adding a document did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Added {
    /// Kept, with this id.
    New(String),
    /// The same file was kept before, with this id: nothing was added.
    Kept(String),
    /// Nothing was added: the conversation would pass `within`.
    Full,
}

#[derive(Debug, Clone)]
pub struct NewPassage {
    pub page: Option<u32>,
    pub heading: Option<String>,
    pub text: String,
}

/// A kept document, as a conversation lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DocumentRow {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub digest: String,
    pub bytes: u64,
    pub pages: Option<u32>,
    pub passages: u64,
    pub created_at: i64,
}

/// A document's passage, in order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PassageRow {
    pub seq: i64,
    pub page: Option<u32>,
    pub heading: Option<String>,
    pub text: String,
}

/// A passage found for a question, best first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hit {
    pub document_id: String,
    pub document: String,
    pub seq: i64,
    pub page: Option<u32>,
    pub heading: Option<String>,
    pub text: String,
    /// BM25's score: lower is better (FTS5's sign).
    pub rank: f64,
}

/// Distinct words of a question searched for, at most: a question pasted long (a whole page)
/// is searched by its first ones, not by an OR of millions.
pub const QUERY_WORDS: usize = 64;

/// The words of `question` as an FTS5 query any of whose words may match (each quoted, so no
/// word is read as FTS5's syntax; each once, [`QUERY_WORDS`] at most); `None` when it has no
/// word.
pub fn match_query(question: &str) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let words: Vec<String> = question
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| seen.insert(w.clone()))
        .take(QUERY_WORDS)
        .map(|w| format!("\"{w}\""))
        .collect();
    (!words.is_empty()).then(|| words.join(" OR "))
}

impl Store {
    /// Keep a document and its passages; one with the same digest in the conversation is kept
    /// once (nothing is added), and none that would pass `within`.
    pub async fn add_document(&self, doc: NewDocument) -> Result<Added, StoreError> {
        self.with(move |c| {
            let tx = c.unchecked_transaction()?;
            let kept: Option<String> = tx
                .query_row(
                    "SELECT id FROM documents WHERE conversation_id = ?1 AND digest = ?2",
                    params![doc.conversation_id, doc.digest],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = kept {
                return Ok(Added::Kept(id));
            }
            if let Some((documents, bytes)) = doc.within {
                let (held, held_bytes): (i64, i64) = tx.query_row(
                    "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM documents WHERE conversation_id = ?1",
                    params![doc.conversation_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                if held as usize >= documents || held_bytes as u64 + doc.bytes > bytes {
                    return Ok(Added::Full);
                }
            }
            let id = new_id("d");
            tx.execute(
                "INSERT INTO documents (id, conversation_id, name, kind, digest, bytes, pages, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![id, doc.conversation_id, doc.name, doc.kind, doc.digest, doc.bytes as i64, doc.pages, now_ms()],
            )?;
            {
                let mut insert = tx.prepare(
                    "INSERT INTO passages (document_id, seq, page, heading, text) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                for (seq, p) in doc.passages.iter().enumerate() {
                    insert.execute(params![id, seq as i64, p.page, p.heading, p.text])?;
                }
            }
            tx.commit()?;
            Ok(Added::New(id))
        })
        .await
    }

    /// A conversation's documents, oldest first.
    pub async fn documents(&self, conversation_id: String) -> Result<Vec<DocumentRow>, StoreError> {
        self.with(move |c| {
            let mut stmt = c.prepare(
                "SELECT d.id, d.name, d.kind, d.digest, d.bytes, d.pages, d.created_at,
                        (SELECT COUNT(*) FROM passages p WHERE p.document_id = d.id)
                 FROM documents d WHERE d.conversation_id = ?1 ORDER BY d.created_at, d.id",
            )?;
            let rows = stmt.query_map(params![conversation_id], |r| {
                Ok(DocumentRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    kind: r.get(2)?,
                    digest: r.get(3)?,
                    bytes: r.get::<_, i64>(4)?.max(0) as u64,
                    pages: r.get(5)?,
                    created_at: r.get(6)?,
                    passages: r.get::<_, i64>(7)?.max(0) as u64,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Take a document out of its conversation, with its passages; whether it was there.
    pub async fn delete_document(
        &self,
        conversation_id: String,
        document_id: String,
    ) -> Result<bool, StoreError> {
        self.with(move |c| {
            Ok(c.execute(
                "DELETE FROM documents WHERE id = ?1 AND conversation_id = ?2",
                params![document_id, conversation_id],
            )? > 0)
        })
        .await
    }

    /// Bytes of text in the conversation's passages, together.
    pub async fn document_text_bytes(&self, conversation_id: String) -> Result<u64, StoreError> {
        self.with(move |c| {
            c.query_row(
                "SELECT COALESCE(SUM(length(CAST(p.text AS BLOB))), 0) FROM passages p
                 JOIN documents d ON d.id = p.document_id WHERE d.conversation_id = ?1",
                params![conversation_id],
                |r| r.get::<_, i64>(0),
            )
            .map(|b| b.max(0) as u64)
        })
        .await
    }

    /// A document's passages in order (its whole text).
    pub async fn document_passages(
        &self,
        document_id: String,
    ) -> Result<Vec<PassageRow>, StoreError> {
        self.with(move |c| {
            let mut stmt = c.prepare(
                "SELECT seq, page, heading, text FROM passages WHERE document_id = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map(params![document_id], |r| {
                Ok(PassageRow {
                    seq: r.get(0)?,
                    page: r.get(1)?,
                    heading: r.get(2)?,
                    text: r.get(3)?,
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Keep the sources an answer was given (`None` clears them).
    pub async fn set_sources(
        &self,
        message_id: String,
        sources: Option<serde_json::Value>,
    ) -> Result<(), StoreError> {
        self.with(move |c| {
            c.execute(
                "UPDATE messages SET sources = ?2 WHERE id = ?1",
                params![message_id, sources.map(|v| v.to_string())],
            )?;
            Ok(())
        })
        .await
    }

    /// The `limit` passages of the conversation's documents that best match `question`'s
    /// words (BM25), best first.
    pub async fn search_passages(
        &self,
        conversation_id: String,
        question: String,
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let Some(query) = match_query(&question) else {
            return Ok(Vec::new());
        };
        self.with(move |c| {
            let mut stmt = c.prepare(
                "SELECT d.id, d.name, p.seq, p.page, p.heading, p.text, bm25(passages_fts) AS rank
                 FROM passages_fts
                 JOIN passages p ON p.id = passages_fts.rowid
                 JOIN documents d ON d.id = p.document_id
                 WHERE passages_fts MATCH ?1 AND d.conversation_id = ?2
                 ORDER BY rank LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![query, conversation_id, limit as i64], |r| {
                Ok(Hit {
                    document_id: r.get(0)?,
                    document: r.get(1)?,
                    seq: r.get(2)?,
                    page: r.get(3)?,
                    heading: r.get(4)?,
                    text: r.get(5)?,
                    rank: r.get(6)?,
                })
            })?;
            rows.collect()
        })
        .await
    }
}

/// A text document of `texts` (one passage each, page 1), 10 bytes, to keep in tests.
#[cfg(test)]
pub(crate) fn test_document(conversation_id: &str, digest: &str, texts: &[&str]) -> NewDocument {
    NewDocument {
        conversation_id: conversation_id.to_owned(),
        name: format!("{digest}.txt"),
        kind: "text".into(),
        digest: digest.to_owned(),
        bytes: 10,
        pages: None,
        passages: texts
            .iter()
            .map(|t| NewPassage {
                page: Some(1),
                heading: None,
                text: (*t).to_owned(),
            })
            .collect(),
        within: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_becomes_quoted_words_any_of_which_match() {
        assert_eq!(
            match_query("What's on page 40? (NEAR \"x\")").as_deref(),
            Some("\"what\" OR \"s\" OR \"on\" OR \"page\" OR \"40\" OR \"near\" OR \"x\"")
        );
        assert_eq!(match_query("?!"), None);
        assert_eq!(
            match_query("Page page PAGE 40").as_deref(),
            Some("\"page\" OR \"40\"")
        );
        let long: String = (0..100_000).map(|n| format!("w{n} ")).collect();
        assert_eq!(
            match_query(&long).unwrap().matches(" OR ").count(),
            QUERY_WORDS - 1
        );
    }

    #[tokio::test]
    async fn a_conversations_documents_passages_and_index_go_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let conv = store.create_conversation("c".into()).await.unwrap().id;
        store
            .add_document(test_document(&conv, "d1", &["kettle lid", "bread dough"]))
            .await
            .unwrap();
        let hits = store
            .search_passages(conv.clone(), "dough".into(), 5)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(store.document_text_bytes(conv.clone()).await.unwrap(), 21);
        // A second document past what the conversation may keep is not added.
        let second = NewDocument {
            within: Some((1, u64::MAX)),
            ..test_document(&conv, "d2", &["soup"])
        };
        assert_eq!(
            store.add_document(second.clone()).await.unwrap(),
            Added::Full
        );
        let within_bytes = NewDocument {
            within: Some((5, 19)),
            ..second.clone()
        };
        assert_eq!(store.add_document(within_bytes).await.unwrap(), Added::Full);
        let fits = NewDocument {
            within: Some((2, 20)),
            ..second
        };
        assert!(matches!(
            store.add_document(fits).await.unwrap(),
            Added::New(_)
        ));
        assert!(store.delete_conversation(conv).await.unwrap());
        let (rows, indexed) = store
            .with(|c| {
                c.execute(
                    "INSERT INTO passages_fts(passages_fts, rank) VALUES ('integrity-check', 1)",
                    [],
                )?;
                let rows: i64 = c.query_row("SELECT count(*) FROM passages", [], |r| r.get(0))?;
                let indexed: i64 = c.query_row(
                    "SELECT count(*) FROM passages_fts WHERE passages_fts MATCH 'dough OR kettle'",
                    [],
                    |r| r.get(0),
                )?;
                Ok((rows, indexed))
            })
            .await
            .unwrap();
        assert_eq!((rows, indexed), (0, 0));
    }
}
