//! The UI's conversations and messages in `hearth.db`: settings per conversation, messages in
//! order, an answer saved while it streams (and marked interrupted when a crash cut it off),
//! search over titles and text, editing and regenerating. A message's images are kept beside it
//! ([`super::message_images`]).

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use super::message_audio::{self, AudioInfo, NewAudio};
use super::message_images::{self, ImageInfo, NewImage};
use crate::db::{new_id, now_ms, Store};
use crate::error::StoreError;

/// A conversation's generation settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    pub system_prompt: String,
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: Option<i64>,
    /// Offer the tools of the enabled MCP servers to the model.
    pub tools: bool,
    /// The most answers with tool calls one turn may chain.
    pub tool_steps: i64,
    /// Whether the answers of a turn may (`auto`) or must call a tool: each of them
    /// (`required`), or the first (`first`, the rest then may).
    pub tool_choice: ToolChoice,
}

/// Whether the chat's model may answer without calling a tool: `first` and `required` are for
/// a model that does not call tools on its own (a grammar makes the turn's first answer, or
/// each answer, a call; with `required` a turn ends at its step limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    #[default]
    Auto,
    First,
    Required,
}

impl ToolChoice {
    fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::First => "first",
            Self::Required => "required",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "required" => Self::Required,
            "first" => Self::First,
            _ => Self::Auto,
        }
    }
}

/// A change to settings: only the fields that are present change (`max_tokens: null` clears
/// the limit).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SettingsPatch {
    pub system_prompt: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    #[serde(default, deserialize_with = "double_option")]
    pub max_tokens: Option<Option<i64>>,
    pub tools: Option<bool>,
    pub tool_steps: Option<i64>,
    pub tool_choice: Option<ToolChoice>,
}

fn double_option<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    pub id: String,
    pub title: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub settings: Settings,
    /// The images its messages carry, and their files' bytes: what it keeps on disk.
    pub images: u64,
    pub image_bytes: u64,
    /// The audio clips its messages carry, and their files' bytes.
    pub clips: u64,
    pub clip_bytes: u64,
}

/// Settings and calls of the chat's MCP tools: a conversation's switch and step limit, an
/// answer's calls.
pub const TOOLS_MIGRATION: &str =
    "ALTER TABLE conversations ADD COLUMN tools INTEGER NOT NULL DEFAULT 1;
ALTER TABLE conversations ADD COLUMN tool_steps INTEGER NOT NULL DEFAULT 10;
ALTER TABLE messages ADD COLUMN tool_calls TEXT;";

/// A conversation's tool choice, and each answer's prompt (its tokens, those kept from before)
/// and whole time: what a tool loop's steps cost.
pub const STEP_STATS_MIGRATION: &str =
    "ALTER TABLE conversations ADD COLUMN tool_choice TEXT NOT NULL DEFAULT 'auto';
ALTER TABLE messages ADD COLUMN prompt_tokens INTEGER;
ALTER TABLE messages ADD COLUMN cached_tokens INTEGER;
ALTER TABLE messages ADD COLUMN total_ms REAL;";

/// Where an answer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Complete,
    Streaming,
    Stopped,
    Interrupted,
    Error,
}

impl MessageStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Streaming => "streaming",
            Self::Stopped => "stopped",
            Self::Interrupted => "interrupted",
            Self::Error => "error",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "streaming" => Self::Streaming,
            "stopped" => Self::Stopped,
            "interrupted" => Self::Interrupted,
            "error" => Self::Error,
            _ => Self::Complete,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    pub tokens: i64,
    pub tokens_per_s: f64,
    pub ttft_ms: f64,
    /// The prompt's tokens, and those of them kept from an earlier answer (not prefilled).
    pub prompt_tokens: i64,
    pub cached_tokens: i64,
    /// From asking the engine to the answer's end.
    pub total_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: String,
    pub conversation_id: String,
    pub role: String,
    pub content: String,
    pub status: MessageStatus,
    pub model: Option<String>,
    pub node: Option<String>,
    pub error: Option<String>,
    pub stats: Option<Stats>,
    pub created_at: i64,
    /// The images it carries, in order (a user's message only).
    pub images: Vec<ImageInfo>,
    /// The audio clips it carries, in order (a user's message only).
    pub audio: Vec<AudioInfo>,
    /// The MCP tool calls an answer made, as the chat loop keeps them (JSON it owns).
    pub tool_calls: Option<serde_json::Value>,
    /// The passages of the conversation's documents an answer was given (JSON the chat owns).
    pub sources: Option<serde_json::Value>,
    #[serde(skip)]
    pub seq: i64,
}

/// A new message to append.
#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    pub conversation_id: &'a str,
    pub role: &'a str,
    pub content: &'a str,
    pub status: MessageStatus,
    pub model: Option<&'a str>,
    pub node: Option<&'a str>,
    pub images: Vec<NewImage>,
    pub audio: Vec<NewAudio>,
}

/// A conversation's columns, read `FROM conversations c`: its images' and clips' counts and
/// bytes last.
const CONVERSATION_COLUMNS: &str =
    "c.id, c.title, c.created_at, c.updated_at, c.system_prompt, c.temperature, c.top_p, c.max_tokens,
     c.tools, c.tool_steps, c.tool_choice,
     (SELECT COUNT(*) FROM message_images i JOIN messages m ON m.id = i.message_id WHERE m.conversation_id = c.id),
     (SELECT COALESCE(SUM(length(i.bytes)), 0) FROM message_images i JOIN messages m ON m.id = i.message_id WHERE m.conversation_id = c.id),
     (SELECT COUNT(*) FROM message_audio a JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = c.id),
     (SELECT COALESCE(SUM(length(a.bytes)), 0) FROM message_audio a JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = c.id)";
const MESSAGE_COLUMNS: &str = "id, conversation_id, seq, role, content, status, model, node, error, tokens, tokens_per_s, ttft_ms, created_at, tool_calls, prompt_tokens, cached_tokens, total_ms, sources";

fn conversation_row(r: &Row<'_>) -> rusqlite::Result<Conversation> {
    Ok(Conversation {
        id: r.get(0)?,
        title: r.get(1)?,
        created_at: r.get(2)?,
        updated_at: r.get(3)?,
        settings: Settings {
            system_prompt: r.get(4)?,
            temperature: r.get(5)?,
            top_p: r.get(6)?,
            max_tokens: r.get(7)?,
            tools: r.get(8)?,
            tool_steps: r.get(9)?,
            tool_choice: ToolChoice::parse(&r.get::<_, String>(10)?),
        },
        images: r.get::<_, i64>(11)?.max(0) as u64,
        image_bytes: r.get::<_, i64>(12)?.max(0) as u64,
        clips: r.get::<_, i64>(13)?.max(0) as u64,
        clip_bytes: r.get::<_, i64>(14)?.max(0) as u64,
    })
}

fn message_row(r: &Row<'_>) -> rusqlite::Result<Message> {
    let tokens: Option<i64> = r.get(9)?;
    let tokens_per_s: Option<f64> = r.get(10)?;
    let ttft_ms: Option<f64> = r.get(11)?;
    let prompt_tokens: Option<i64> = r.get(14)?;
    let cached_tokens: Option<i64> = r.get(15)?;
    let total_ms: Option<f64> = r.get(16)?;
    let status: String = r.get(5)?;
    Ok(Message {
        id: r.get(0)?,
        conversation_id: r.get(1)?,
        seq: r.get(2)?,
        role: r.get(3)?,
        content: r.get(4)?,
        status: MessageStatus::parse(&status),
        model: r.get(6)?,
        node: r.get(7)?,
        error: r.get(8)?,
        stats: tokens.map(|tokens| Stats {
            tokens,
            tokens_per_s: tokens_per_s.unwrap_or(0.0),
            ttft_ms: ttft_ms.unwrap_or(0.0),
            prompt_tokens: prompt_tokens.unwrap_or(0),
            cached_tokens: cached_tokens.unwrap_or(0),
            total_ms: total_ms.unwrap_or(0.0),
        }),
        created_at: r.get(12)?,
        images: Vec::new(),
        audio: Vec::new(),
        // Written by this program only; a row it cannot read shows no calls.
        tool_calls: r
            .get::<_, Option<String>>(13)?
            .and_then(|t| serde_json::from_str(&t).ok()),
        sources: r
            .get::<_, Option<String>>(17)?
            .and_then(|t| serde_json::from_str(&t).ok()),
    })
}

fn get_conversation(c: &Connection, id: &str) -> rusqlite::Result<Option<Conversation>> {
    c.query_row(
        &format!("SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = ?1"),
        [id],
        conversation_row,
    )
    .optional()
}

fn get_message(c: &Connection, id: &str) -> rusqlite::Result<Option<Message>> {
    let Some(mut message) = c
        .query_row(
            &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"),
            [id],
            message_row,
        )
        .optional()?
    else {
        return Ok(None);
    };
    message.images = message_images::of_message(c, id)?;
    message.audio = message_audio::of_message(c, id)?;
    Ok(Some(message))
}

impl Store {
    /// Conversations, newest activity first; `q` matches titles and message text.
    pub async fn list_conversations(
        &self,
        q: Option<String>,
    ) -> Result<Vec<Conversation>, StoreError> {
        self.with(move |c| {
            let q = q.map(|q| q.trim().to_lowercase()).filter(|q| !q.is_empty());
            let rows = match q {
                None => {
                    let mut stmt = c.prepare(&format!(
                        "SELECT {CONVERSATION_COLUMNS} FROM conversations c ORDER BY c.updated_at DESC, c.id"
                    ))?;
                    let rows = stmt.query_map([], conversation_row)?;
                    rows.collect::<Result<Vec<_>, _>>()?
                }
                Some(q) => {
                    let like = format!("%{}%", q.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
                    let mut stmt = c.prepare(&format!(
                        "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE lower(c.title) LIKE ?1 ESCAPE '\\'
                         OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND lower(m.content) LIKE ?1 ESCAPE '\\')
                         ORDER BY c.updated_at DESC, c.id"
                    ))?;
                    let rows = stmt.query_map([like], conversation_row)?;
                    rows.collect::<Result<Vec<_>, _>>()?
                }
            };
            Ok(rows)
        })
        .await
    }

    pub async fn create_conversation(&self, title: String) -> Result<Conversation, StoreError> {
        self.with(move |c| {
            let id = new_id("c");
            let now = now_ms();
            c.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)",
                params![id, title, now],
            )?;
            get_conversation(c, &id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)
        })
        .await
    }

    /// The conversation and its messages, oldest first.
    pub async fn conversation(
        &self,
        id: String,
    ) -> Result<Option<(Conversation, Vec<Message>)>, StoreError> {
        self.with(move |c| {
            let Some(conv) = get_conversation(c, &id)? else {
                return Ok(None);
            };
            let mut stmt = c.prepare(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ?1 ORDER BY seq"
            ))?;
            let mut messages = stmt
                .query_map([&id], message_row)?
                .collect::<Result<Vec<_>, _>>()?;
            let mut images = message_images::of_conversation(c, &id)?;
            let mut audio = message_audio::of_conversation(c, &id)?;
            for m in &mut messages {
                m.images = images.remove(&m.id).unwrap_or_default();
                m.audio = audio.remove(&m.id).unwrap_or_default();
            }
            Ok(Some((conv, messages)))
        })
        .await
    }

    pub async fn update_conversation(
        &self,
        id: String,
        title: Option<String>,
        settings: Option<SettingsPatch>,
    ) -> Result<Option<Conversation>, StoreError> {
        self.with(move |c| {
            let Some(mut conv) = get_conversation(c, &id)? else {
                return Ok(None);
            };
            if let Some(t) = title {
                conv.title = t;
            }
            if let Some(p) = settings {
                let s = &mut conv.settings;
                if let Some(v) = p.system_prompt {
                    s.system_prompt = v;
                }
                if let Some(v) = p.temperature {
                    s.temperature = v;
                }
                if let Some(v) = p.top_p {
                    s.top_p = v;
                }
                if let Some(v) = p.max_tokens {
                    s.max_tokens = v;
                }
                if let Some(v) = p.tools {
                    s.tools = v;
                }
                if let Some(v) = p.tool_steps {
                    s.tool_steps = v;
                }
                if let Some(v) = p.tool_choice {
                    s.tool_choice = v;
                }
            }
            let s = &conv.settings;
            c.execute(
                "UPDATE conversations SET title = ?2, system_prompt = ?3, temperature = ?4, top_p = ?5, max_tokens = ?6, updated_at = ?7, tools = ?8, tool_steps = ?9, tool_choice = ?10 WHERE id = ?1",
                params![id, conv.title, s.system_prompt, s.temperature, s.top_p, s.max_tokens, now_ms(), s.tools, s.tool_steps, s.tool_choice.as_str()],
            )?;
            get_conversation(c, &id)
        })
        .await
    }

    pub async fn delete_conversation(&self, id: String) -> Result<bool, StoreError> {
        self.with(move |c| Ok(c.execute("DELETE FROM conversations WHERE id = ?1", [id])? > 0))
            .await
    }

    /// Append a message (and its images and clips, all or nothing) at the end of its conversation.
    pub async fn add_message(&self, m: NewMessage<'_>) -> Result<Message, StoreError> {
        let (conv, role, content, status) = (
            m.conversation_id.to_owned(),
            m.role.to_owned(),
            m.content.to_owned(),
            m.status,
        );
        let (model, node, images, audio) = (
            m.model.map(str::to_owned),
            m.node.map(str::to_owned),
            m.images,
            m.audio,
        );
        self.with(move |c| {
            let id = new_id("m");
            let now = now_ms();
            let tx = c.unchecked_transaction()?;
            tx.execute(
                "INSERT INTO messages (id, conversation_id, seq, role, content, status, model, node, created_at)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?2), ?3, ?4, ?5, ?6, ?7, ?8)",
                params![id, conv, role, content, status.as_str(), model, node, now],
            )?;
            message_images::insert(&tx, &id, &images)?;
            message_audio::insert(&tx, &id, &audio)?;
            tx.execute("UPDATE conversations SET updated_at = ?2 WHERE id = ?1", params![conv, now])?;
            tx.commit()?;
            get_message(c, &id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)
        })
        .await
    }

    pub async fn message(&self, id: String) -> Result<Option<Message>, StoreError> {
        self.with(move |c| get_message(c, &id)).await
    }

    /// Save an answer's text so far (it keeps streaming).
    pub async fn save_partial(&self, id: String, content: String) -> Result<(), StoreError> {
        self.with(move |c| {
            c.execute(
                "UPDATE messages SET content = ?2 WHERE id = ?1",
                params![id, content],
            )
            .map(|_| ())
        })
        .await
    }

    /// Record how an answer ended, and which node ended it (a re-dispatched answer moves).
    pub async fn finish_message(
        &self,
        id: String,
        content: String,
        status: MessageStatus,
        stats: Option<Stats>,
        node: String,
        error: Option<String>,
    ) -> Result<Option<Message>, StoreError> {
        self.with(move |c| {
            c.execute(
                "UPDATE messages SET content = ?2, status = ?3, tokens = ?4, tokens_per_s = ?5, ttft_ms = ?6, error = ?7, node = ?8, prompt_tokens = ?9, cached_tokens = ?10, total_ms = ?11 WHERE id = ?1",
                params![
                    id,
                    content,
                    status.as_str(),
                    stats.map(|s| s.tokens),
                    stats.map(|s| s.tokens_per_s),
                    stats.map(|s| s.ttft_ms),
                    error,
                    node,
                    stats.map(|s| s.prompt_tokens),
                    stats.map(|s| s.cached_tokens),
                    stats.map(|s| s.total_ms)
                ],
            )?;
            get_message(c, &id)
        })
        .await
    }

    /// Replace a user message's text and delete everything after it (edit and resend) but
    /// `keep` (the answer to the edit, already started).
    pub async fn edit_and_truncate(
        &self,
        id: String,
        content: String,
        keep: Option<String>,
    ) -> Result<Option<Message>, StoreError> {
        self.with(move |c| {
            let Some(m) = get_message(c, &id)? else {
                return Ok(None);
            };
            c.execute(
                "UPDATE messages SET content = ?2 WHERE id = ?1",
                params![id, content],
            )?;
            c.execute(
                "DELETE FROM messages WHERE conversation_id = ?1 AND seq > ?2 AND id IS NOT ?3",
                params![m.conversation_id, m.seq, keep],
            )?;
            get_message(c, &id)
        })
        .await
    }

    /// Keep the MCP tool calls an answer made (`None` clears them).
    pub async fn set_tool_calls(
        &self,
        id: String,
        calls: Option<serde_json::Value>,
    ) -> Result<Option<Message>, StoreError> {
        self.with(move |c| {
            let text = calls.map(|v| v.to_string());
            c.execute(
                "UPDATE messages SET tool_calls = ?2 WHERE id = ?1",
                params![id, text],
            )?;
            get_message(c, &id)
        })
        .await
    }

    /// Delete one message (the answer being regenerated).
    pub async fn delete_message(&self, id: String) -> Result<bool, StoreError> {
        self.with(move |c| Ok(c.execute("DELETE FROM messages WHERE id = ?1", [id])? > 0))
            .await
    }

    /// At startup: answers still marked streaming were cut off by a kill or crash.
    pub async fn interrupt_streaming(&self) -> Result<usize, StoreError> {
        self.with(|c| {
            c.execute(
                "UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'",
                [],
            )
        })
        .await
    }
}
