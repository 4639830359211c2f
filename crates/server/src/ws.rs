//! What one WebSocket read means to a door, the same for every JSON door: a message within the
//! 4 MiB limit, one over it (also when the library gave up mid-message past its read limit), a
//! text message that is not UTF-8 (RFC 6455 §8.1: the connection fails with close code 1007),
//! the end of the connection, or a ping/pong the library has already answered. And the
//! socket as the `/generate` and signed-challenge sessions write to it ([`DoorSocket`]).

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::SinkExt;
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

/// A session's socket: reads classified, text written at once or, during a burst, fed and
/// flushed together at its end. The first failed write (or a close) marks it closed; later
/// writes are dropped, and the session's loop ends.
pub(crate) struct DoorSocket {
    socket: WebSocket,
    open: bool,
    burst: bool,
}

impl DoorSocket {
    pub(crate) fn new(socket: WebSocket) -> Self {
        Self {
            socket,
            open: true,
            burst: false,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// The next read, classified.
    pub(crate) async fn recv(&mut self) -> Incoming {
        classify(self.socket.recv().await)
    }

    pub(crate) async fn send_text(&mut self, text: String) {
        if !self.open {
            return;
        }
        let msg = Message::Text(Utf8Bytes::from(text));
        let sent = if self.burst {
            self.socket.feed(msg).await
        } else {
            self.socket.send(msg).await
        };
        if sent.is_err() {
            self.open = false;
        }
    }

    /// Until [`DoorSocket::end_burst`], writes are queued without flushing (a burst of ready
    /// events goes out with one flush).
    pub(crate) fn begin_burst(&mut self) {
        self.burst = true;
    }

    pub(crate) async fn end_burst(&mut self) {
        self.burst = false;
        if self.open && self.socket.flush().await.is_err() {
            self.open = false;
        }
    }

    pub(crate) async fn close(&mut self, code: u16, reason: &str) {
        if self.open {
            let _ = self
                .socket
                .send(Message::Close(Some(CloseFrame {
                    code,
                    reason: Utf8Bytes::from(reason.to_owned()),
                })))
                .await;
            self.open = false;
        }
    }
}
