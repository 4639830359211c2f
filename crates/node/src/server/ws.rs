//! What one WebSocket read means to a door, the same for every JSON door: a message within the
//! 4 MiB limit, one over it (also when the library gave up mid-message past its read limit), a
//! text message that is not UTF-8 (RFC 6455 §8.1: the connection fails with close code 1007),
//! the end of the connection, or a ping/pong the library has already answered.

use axum::extract::ws::{Message, Utf8Bytes};
use hearth_protocol::limits::MAX_WS_MESSAGE_BYTES;

pub(crate) enum Incoming {
    Text(Utf8Bytes),
    /// No JSON door reads binary messages: each answers with its own error.
    Binary,
    /// Over the limit: the door answers in its own format, then closes with 1009.
    TooBig,
    /// A text message that is not valid UTF-8: the door closes with [`CLOSE_BAD_UTF8`].
    BadUtf8,
    /// The client closed, or the connection failed (logged here).
    Closed,
    /// Ping or pong.
    Control,
}

/// Close code for "inconsistent data" (RFC 6455 §7.4.1), such as a text frame that is not UTF-8.
pub(crate) const CLOSE_BAD_UTF8: u16 = 1007;

/// The close reason sent with [`CLOSE_BAD_UTF8`].
pub(crate) const BAD_UTF8_REASON: &str = "a text message was not valid UTF-8";

pub(crate) fn classify(msg: Option<Result<Message, axum::Error>>) -> Incoming {
    match msg {
        Some(Ok(Message::Text(t))) if t.len() > MAX_WS_MESSAGE_BYTES => Incoming::TooBig,
        Some(Ok(Message::Text(t))) => Incoming::Text(t),
        Some(Ok(Message::Binary(b))) if b.len() > MAX_WS_MESSAGE_BYTES => Incoming::TooBig,
        Some(Ok(Message::Binary(_))) => Incoming::Binary,
        Some(Ok(Message::Close(_))) | None => Incoming::Closed,
        Some(Ok(_)) => Incoming::Control,
        Some(Err(e)) => {
            let text = e.to_string();
            if text.contains("too long") || text.contains("Space limit") {
                Incoming::TooBig
            } else if text.starts_with("UTF-8 encoding error") {
                Incoming::BadUtf8
            } else {
                tracing::debug!(error = %text, "websocket read failed");
                Incoming::Closed
            }
        }
    }
}
