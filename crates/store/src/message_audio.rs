//! The audio clips a chat message carries, in `hearth.db` beside their message as its images
//! are ([`super::message_images`]): the file's bytes as the UI sent them and its format (`wav`
//! or `mp3`), in the order they were attached, deleted with their message by SQLite's cascade.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension as _};
use serde::Serialize;

use super::message_images::{newest_files, Table};
use crate::db::{new_id, Store};
use crate::error::StoreError;

pub const MIGRATION: &str = "CREATE TABLE message_audio (
    id          TEXT PRIMARY KEY,
    message_id  TEXT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    ord         INTEGER NOT NULL,
    format      TEXT NOT NULL,
    bytes       BLOB NOT NULL
);
CREATE INDEX message_audio_message ON message_audio(message_id, ord)";

/// A clip as a message lists it (its bytes are fetched apart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AudioInfo {
    pub id: String,
    /// `wav` or `mp3`.
    pub format: String,
    /// The file's size in bytes.
    pub size: u64,
}

/// A clip to keep with a new message.
#[derive(Debug, Clone)]
pub struct NewAudio {
    pub format: String,
    pub bytes: Vec<u8>,
}

/// One stored clip's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAudio {
    pub format: String,
    pub bytes: Vec<u8>,
}

/// Keep `clips` with message `message_id`, in order (inside the caller's transaction).
pub(crate) fn insert(c: &Connection, message_id: &str, clips: &[NewAudio]) -> rusqlite::Result<()> {
    let mut stmt = c.prepare(
        "INSERT INTO message_audio (id, message_id, ord, format, bytes)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (ord, clip) in clips.iter().enumerate() {
        stmt.execute(params![
            new_id("a"),
            message_id,
            ord as i64,
            clip.format,
            clip.bytes
        ])?;
    }
    Ok(())
}

/// The clips of one message, in order.
pub(crate) fn of_message(c: &Connection, message_id: &str) -> rusqlite::Result<Vec<AudioInfo>> {
    let mut stmt = c.prepare(
        "SELECT id, format, length(bytes) FROM message_audio WHERE message_id = ?1 ORDER BY ord",
    )?;
    let rows = stmt.query_map([message_id], info_row)?;
    rows.collect()
}

/// The clips of every message of a conversation, by message id, each in order.
pub(crate) fn of_conversation(
    c: &Connection,
    conversation_id: &str,
) -> rusqlite::Result<HashMap<String, Vec<AudioInfo>>> {
    let mut stmt = c.prepare(
        "SELECT a.id, a.format, length(a.bytes), a.message_id
         FROM message_audio a JOIN messages m ON m.id = a.message_id
         WHERE m.conversation_id = ?1 ORDER BY a.message_id, a.ord",
    )?;
    let mut by_message: HashMap<String, Vec<AudioInfo>> = HashMap::new();
    let rows = stmt.query_map([conversation_id], |r| {
        Ok((info_row(r)?, r.get::<_, String>(3)?))
    })?;
    for row in rows {
        let (info, message) = row?;
        by_message.entry(message).or_default().push(info);
    }
    Ok(by_message)
}

fn info_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AudioInfo> {
    Ok(AudioInfo {
        id: r.get(0)?,
        format: r.get(1)?,
        size: r.get::<_, i64>(2)?.max(0) as u64,
    })
}

impl Store {
    /// One clip's file, by its id.
    pub async fn audio(&self, id: String) -> Result<Option<StoredAudio>, StoreError> {
        self.with(move |c| {
            c.query_row(
                "SELECT format, bytes FROM message_audio WHERE id = ?1",
                [id],
                |r| {
                    Ok(StoredAudio {
                        format: r.get(0)?,
                        bytes: r.get(1)?,
                    })
                },
            )
            .optional()
        })
        .await
    }

    /// The files of a conversation's newest clips, at most `count` and `max_bytes` together,
    /// by message id: what a chat turn sends to the model again (as
    /// [`Store::newest_image_files`] chooses images).
    pub async fn newest_audio_files(
        &self,
        conversation_id: String,
        through: Option<String>,
        count: usize,
        max_bytes: u64,
    ) -> Result<HashMap<String, Vec<Vec<u8>>>, StoreError> {
        self.with(move |c| {
            newest_files(
                c,
                Table::Audio,
                &conversation_id,
                through.as_deref(),
                count,
                max_bytes,
            )
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageStatus, NewMessage};

    fn clip(tag: u8) -> NewAudio {
        NewAudio {
            format: "wav".into(),
            bytes: vec![tag; 20 + usize::from(tag)],
        }
    }

    #[tokio::test]
    async fn clips_stay_with_their_message_in_order_and_go_with_their_conversation() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let conv = store.create_conversation("sounds".into()).await.unwrap();
        let message = |audio: Vec<NewAudio>| NewMessage {
            conversation_id: &conv.id,
            role: "user",
            content: "listen",
            status: MessageStatus::Complete,
            model: None,
            node: None,
            images: Vec::new(),
            audio,
        };
        let first = store
            .add_message(message(vec![clip(1), clip(2)]))
            .await
            .unwrap();
        let second = store.add_message(message(vec![clip(3)])).await.unwrap();
        assert_eq!(
            first.audio.iter().map(|a| a.size).collect::<Vec<_>>(),
            [21, 22]
        );
        assert!(first.images.is_empty());
        let (_, messages) = store.conversation(conv.id.clone()).await.unwrap().unwrap();
        assert_eq!(messages[0].audio, first.audio);
        assert_eq!(messages[1].audio, second.audio);
        // Counted with the conversation, in its own row and in the list.
        let (conv_row, _) = store.conversation(conv.id.clone()).await.unwrap().unwrap();
        assert_eq!((conv_row.clips, conv_row.clip_bytes), (3, 21 + 22 + 23));
        let listed = store.list_conversations(None).await.unwrap();
        assert_eq!(listed[0].clips, 3);

        // The newest first, by count.
        let one = store
            .newest_audio_files(conv.id.clone(), None, 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[&second.id], vec![vec![3u8; 23]]);
        let all = store
            .newest_audio_files(conv.id.clone(), None, 4, 1 << 20)
            .await
            .unwrap();
        assert_eq!(all[&first.id], vec![vec![1u8; 21], vec![2u8; 22]]);
        let stored = store
            .audio(first.audio[1].id.clone())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (stored.format.as_str(), stored.bytes),
            ("wav", vec![2u8; 22])
        );

        assert!(store.delete_conversation(conv.id.clone()).await.unwrap());
        assert!(store
            .audio(first.audio[0].id.clone())
            .await
            .unwrap()
            .is_none());
        let left: i64 = store
            .with(|c| c.query_row("SELECT COUNT(*) FROM message_audio", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(left, 0);
    }
}
