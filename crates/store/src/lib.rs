//! The node's SQLite database (`hearth.db` in the data dir, WAL mode): opening it (`open`: a
//! damaged file, or a log damaged in the middle (`wal`), is refused, never replaced; schema
//! migrations by `PRAGMA user_version`), and `/generate` feedback ([`feedback`]); the UI's conversations and messages
//! ([`conversations`]), API keys ([`keys`]), the images and audio clips of chat messages
//! ([`message_images`], [`message_audio`]), the signed-challenge door's clients ([`clients`]),
//! the cluster's known peers ([`peers`]), the chat's MCP servers and the consent given to their
//! tools ([`mcp_servers`]), documents attached to a conversation and their passages, indexed
//! for words ([`documents`]) and their embeddings ([`passage_vectors`]), model files' digests ([`digests`]) and the Responses
//! door's stored answers ([`responses`]) each have a file. One connection behind a mutex;
//! every call runs on tokio's blocking pool. A clean stop empties the log into `hearth.db`
//! ([`Store::checkpoint`]).
//!
//! Architecture invariant: `hearth-store` is the only crate that names SQLite, and it knows
//! rows, not what they are for: no HTTP, no protocol, no model, no cluster, no keys (it
//! depends on no Hearth crate). A part that keeps something across restarts adds its table
//! and its file here.

pub mod clients;
pub mod conversations;
mod db;
pub mod digests;
pub mod documents;
mod error;
pub mod feedback;
pub mod keys;
pub mod mcp_servers;
pub mod message_audio;
pub mod message_images;
mod open;
pub mod passage_vectors;
pub mod peers;
pub mod responses;
mod wal;

pub use conversations::{
    Conversation, Message, MessageStatus, NewMessage, Settings, SettingsPatch, Stats,
    ToolChoice as ChatToolChoice,
};
pub use db::Store;
pub use error::StoreError;
pub use feedback::FeedbackRow;
pub use keys::{key_hash, ApiKey, KeyScope};
pub use mcp_servers::McpServerRow;
pub use message_audio::{AudioInfo, NewAudio, StoredAudio};
pub use message_images::{ImageInfo, NewImage, StoredImage};
