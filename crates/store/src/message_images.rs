//! The images a chat message carries, in `hearth.db` beside their message: the file's bytes as
//! the UI sent them, its type and size, in the order they were attached. They are deleted with
//! their message (and so with their conversation) by SQLite's cascade.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension as _};
use serde::Serialize;

use crate::db::{new_id, Store};
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE message_images (
    id          TEXT PRIMARY KEY,
    message_id  TEXT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    ord         INTEGER NOT NULL,
    mime        TEXT NOT NULL,
    width       INTEGER NOT NULL,
    height      INTEGER NOT NULL,
    bytes       BLOB NOT NULL
);
CREATE INDEX message_images_message ON message_images(message_id, ord)";

/// An image as a message lists it: what the UI needs to show it (its bytes are fetched apart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageInfo {
    pub id: String,
    pub mime: String,
    pub width: u32,
    pub height: u32,
    /// The file's size in bytes.
    pub size: u64,
}

/// An image to keep with a new message.
#[derive(Debug, Clone)]
pub struct NewImage {
    pub mime: String,
    pub width: u32,
    pub height: u32,
    pub bytes: Vec<u8>,
}

/// One stored image's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    pub mime: String,
    pub bytes: Vec<u8>,
}

/// Keep `images` with message `message_id`, in order (inside the caller's transaction).
pub(crate) fn insert(
    c: &Connection,
    message_id: &str,
    images: &[NewImage],
) -> rusqlite::Result<()> {
    let mut stmt = c.prepare(
        "INSERT INTO message_images (id, message_id, ord, mime, width, height, bytes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (ord, image) in images.iter().enumerate() {
        stmt.execute(params![
            new_id("i"),
            message_id,
            ord as i64,
            image.mime,
            image.width,
            image.height,
            image.bytes
        ])?;
    }
    Ok(())
}

/// The images of one message, in order.
pub(crate) fn of_message(c: &Connection, message_id: &str) -> rusqlite::Result<Vec<ImageInfo>> {
    let mut stmt = c.prepare(
        "SELECT id, mime, width, height, length(bytes) FROM message_images
         WHERE message_id = ?1 ORDER BY ord",
    )?;
    let rows = stmt.query_map([message_id], info_row)?;
    rows.collect()
}

/// The images of every message of a conversation, by message id, each in order.
pub(crate) fn of_conversation(
    c: &Connection,
    conversation_id: &str,
) -> rusqlite::Result<HashMap<String, Vec<ImageInfo>>> {
    let mut stmt = c.prepare(
        "SELECT i.id, i.mime, i.width, i.height, length(i.bytes), i.message_id
         FROM message_images i JOIN messages m ON m.id = i.message_id
         WHERE m.conversation_id = ?1 ORDER BY i.message_id, i.ord",
    )?;
    let mut by_message: HashMap<String, Vec<ImageInfo>> = HashMap::new();
    let rows = stmt.query_map([conversation_id], |r| {
        Ok((info_row(r)?, r.get::<_, String>(5)?))
    })?;
    for row in rows {
        let (info, message) = row?;
        by_message.entry(message).or_default().push(info);
    }
    Ok(by_message)
}

fn info_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ImageInfo> {
    Ok(ImageInfo {
        id: r.get(0)?,
        mime: r.get(1)?,
        width: r.get(2)?,
        height: r.get(3)?,
        size: r.get::<_, i64>(4)?.max(0) as u64,
    })
}

impl Store {
    /// One image's file, by its id.
    pub async fn image(&self, id: String) -> Result<Option<StoredImage>, StoreError> {
        self.with(move |c| {
            c.query_row(
                "SELECT mime, bytes FROM message_images WHERE id = ?1",
                [id],
                |r| {
                    Ok(StoredImage {
                        mime: r.get(0)?,
                        bytes: r.get(1)?,
                    })
                },
            )
            .optional()
        })
        .await
    }

    /// The files of a conversation's newest images, at most `count` and `max_bytes` together
    /// (the newest first, up to the first that does not fit), by message id, each message's in
    /// order: what a chat turn sends to the model again. Only their files are read. `through`:
    /// none of messages after that one (an edited turn's, whose later messages are to go).
    pub async fn newest_image_files(
        &self,
        conversation_id: String,
        through: Option<String>,
        count: usize,
        max_bytes: u64,
    ) -> Result<HashMap<String, Vec<Vec<u8>>>, StoreError> {
        self.with(move |c| {
            newest_files(
                c,
                Table::Images,
                &conversation_id,
                through.as_deref(),
                count,
                max_bytes,
            )
        })
        .await
    }
}

/// The tables of files that messages carry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Table {
    Images,
    Audio,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Self::Images => "message_images",
            Self::Audio => "message_audio",
        }
    }
}

/// The newest files of `table` in a conversation ([`Store::newest_image_files`]).
pub(crate) fn newest_files(
    c: &Connection,
    table: Table,
    conversation_id: &str,
    through: Option<&str>,
    count: usize,
    max_bytes: u64,
) -> rusqlite::Result<HashMap<String, Vec<Vec<u8>>>> {
    let table = table.name();
    let mut stmt = c.prepare(&format!(
        "SELECT f.id, f.message_id, length(f.bytes) FROM {table} f
         JOIN messages m ON m.id = f.message_id
         WHERE m.conversation_id = ?1
           AND (?2 IS NULL OR m.seq <= (SELECT seq FROM messages WHERE id = ?2))
         ORDER BY m.seq DESC, f.ord DESC"
    ))?;
    let rows = stmt.query_map(rusqlite::params![conversation_id, through], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    let (mut chosen, mut bytes) = (Vec::new(), 0u64);
    for row in rows {
        let (id, message, len) = row?;
        let len = len.max(0) as u64;
        if chosen.len() == count || bytes + len > max_bytes {
            break;
        }
        bytes += len;
        chosen.push((id, message));
    }
    let mut files: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    let mut read = c.prepare(&format!("SELECT bytes FROM {table} WHERE id = ?1"))?;
    // Oldest first, so each message's files come in their order.
    for (id, message) in chosen.into_iter().rev() {
        let file: Vec<u8> = read.query_row([id], |r| r.get(0))?;
        files.entry(message).or_default().push(file);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageStatus, NewMessage};

    fn image(tag: u8) -> NewImage {
        NewImage {
            mime: "image/png".into(),
            width: 2,
            height: 3,
            bytes: vec![tag; 10 + usize::from(tag)],
        }
    }

    /// A conversation's images as the conversation counts them, in its own row and in the list.
    async fn counted(store: &Store, id: &str) -> (u64, u64) {
        let (conv, _) = store.conversation(id.to_owned()).await.unwrap().unwrap();
        let listed = store.list_conversations(None).await.unwrap();
        let row = listed.iter().find(|c| c.id == id).unwrap();
        assert_eq!(
            (row.images, row.image_bytes),
            (conv.images, conv.image_bytes)
        );
        (conv.images, conv.image_bytes)
    }

    #[tokio::test]
    async fn images_stay_with_their_message_in_order_and_go_with_their_conversation() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let conv = store.create_conversation("pictures".into()).await.unwrap();
        let message = |images: Vec<NewImage>| NewMessage {
            conversation_id: &conv.id,
            role: "user",
            content: "look",
            status: MessageStatus::Complete,
            model: None,
            node: None,
            images,
            audio: Vec::new(),
        };
        let first = store
            .add_message(message(vec![image(1), image(2)]))
            .await
            .unwrap();
        let second = store.add_message(message(vec![image(3)])).await.unwrap();
        let plain = store.add_message(message(Vec::new())).await.unwrap();
        assert_eq!(first.images.len(), 2);
        assert_eq!((first.images[0].size, first.images[1].size), (11, 12));
        assert_eq!((first.images[0].width, first.images[0].height), (2, 3));
        assert!(plain.images.is_empty());

        let (_, messages) = store.conversation(conv.id.clone()).await.unwrap().unwrap();
        let listed: Vec<_> = messages.iter().map(|m| m.images.clone()).collect();
        assert_eq!(
            listed,
            vec![first.images.clone(), second.images.clone(), vec![]]
        );
        let files =
            |count, max_bytes| store.newest_image_files(conv.id.clone(), None, count, max_bytes);
        let all = files(16, 1 << 20).await.unwrap();
        assert_eq!(all[&first.id], vec![vec![1u8; 11], vec![2u8; 12]]);
        assert_eq!(all[&second.id], vec![vec![3u8; 13]]);
        assert!(!all.contains_key(&plain.id));
        // The newest first: by count, then by bytes (up to the first that does not fit).
        let two = files(2, 1 << 20).await.unwrap();
        assert_eq!(two[&first.id], vec![vec![2u8; 12]]);
        assert_eq!(two.len(), 2);
        let small = files(16, 24).await.unwrap();
        assert_eq!((small.len(), small[&second.id].len()), (1, 1));
        // Through the first message: none of the later ones' (an edit of the first).
        let through = store
            .newest_image_files(conv.id.clone(), Some(first.id.clone()), 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(through[&first.id], vec![vec![2u8; 12]]);
        assert_eq!(through.len(), 1);
        let stored = store
            .image(first.images[1].id.clone())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (stored.mime.as_str(), stored.bytes),
            ("image/png", vec![2u8; 12])
        );
        assert_eq!(counted(&store, &conv.id).await, (3, 36));

        // Edited, a message keeps its images; those after it go with their messages.
        store
            .edit_and_truncate(first.id.clone(), "look again".into(), None)
            .await
            .unwrap();
        assert_eq!(counted(&store, &conv.id).await, (2, 23));
        assert!(store
            .image(second.images[0].id.clone())
            .await
            .unwrap()
            .is_none());

        let other = store.create_conversation("words".into()).await.unwrap();
        assert_eq!(counted(&store, &other.id).await, (0, 0));
        assert!(store.delete_conversation(conv.id.clone()).await.unwrap());
        let left: i64 = store
            .with(|c| c.query_row("SELECT COUNT(*) FROM message_images", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(left, 0);
        assert!(store
            .image(first.images[0].id.clone())
            .await
            .unwrap()
            .is_none());
    }
}
