//! The batch WebSocket door, `/ws` and `/api/ws` (`protocols/batch-ws.md`): each message is a
//! batch of prompts run concurrently in the engine's slots, answered with JSON arrays of events;
//! several batches share one socket, and unfinished batches continue by their ids (see below).
//!
//! Wire types, validation and the protocol decisions are in `hearth_protocol::batch`. Here:
//! the socket (one writer per socket, fed through a bounded channel, so a slow client holds
//! back only its own generations); one task per batch (`run`), whose prompts go through the
//! route in order and wait there for room (the batch keeps no queue of its own); and the
//! continuation cache (`crate::state::batch`, which `AppState` holds): when a batch ends with a
//! prompt that did not reach end-of-sequence, every prompt's token ids (prompt + generated) and
//! text are kept under the batch's ordered request ids, and a later message with the same ids
//! submits them as `Prompt::Tokens`: the engine keeps the KV cache of a slot whose last tenant
//! shares that prefix (so a continuation in a slot not yet reused prefills almost nothing) and
//! prefills the rest. The cache is the node's, shared by the sockets of one caller (the API
//! key the socket presented, else this machine's owner: another key never sees an entry;
//! see `caller`),
//! bounded in entries and bytes, and entries expire an hour after they were stored.

mod run;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::Extension;
use hearth_protocol::batch as bw;
use hearth_protocol::limits::{MAX_WS_MESSAGE_BYTES, WS_READ_LIMIT_BYTES};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::security::VerifiedKey;
use super::ws::{classify, Incoming, BAD_UTF8_REASON, CLOSE_BAD_UTF8};
use crate::state::AppState;
use run::run_batch;

/// Batches running at once on one socket; more get a whole-message error.
const MAX_BATCHES_PER_SOCKET: usize = 16;
/// Messages buffered for a slow client before its batches wait for it.
const OUTBOX: usize = 64;
/// How long a closing node waits for batches to send their final events.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// WebSocket close codes (RFC 6455).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_TOO_BIG: u16 = 1009;

pub(crate) async fn upgrade(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    verified: Option<Extension<VerifiedKey>>,
    headers: HeaderMap,
    uri: Uri,
    ws: WebSocketUpgrade,
) -> Response {
    let caller = caller(&state, peer, verified.map(|Extension(v)| v), &headers, &uri).await;
    ws.max_message_size(WS_READ_LIMIT_BYTES)
        .max_frame_size(WS_READ_LIMIT_BYTES)
        .on_upgrade(move |socket| connection(state, socket, caller))
}

/// Whose continuations a socket reads and writes: the API key it presented (checked by the
/// security layer for another machine, here for this one), else, on this machine, the
/// owner's. A socket from another machine without a checked key (one left open when the node
/// stopped sharing on the LAN) has its own, shared with no one.
async fn caller(
    state: &AppState,
    peer: SocketAddr,
    verified: Option<VerifiedKey>,
    headers: &HeaderMap,
    uri: &Uri,
) -> String {
    if let Some(VerifiedKey(id)) = verified {
        return format!("key {id}");
    }
    if !peer.ip().to_canonical().is_loopback() {
        return format!("socket {}", uuid::Uuid::new_v4().simple());
    }
    let Some(secret) = super::security::presented_key_in(headers, uri) else {
        return OWNER.to_owned();
    };
    match state.store.verify_key(secret).await {
        Ok(Some(key)) => format!("key {}", key.id),
        _ => OWNER.to_owned(),
    }
}

/// The caller of a socket from this machine that presented no API key.
const OWNER: &str = "owner";

/// One socket: read messages and start a batch task for each; write what the batches send.
async fn connection(state: Arc<AppState>, mut socket: WebSocket, caller: String) {
    let (tx, mut outbox) = mpsc::channel::<String>(OUTBOX);
    // Dropped when the node shuts down: once every batch has dropped its sender too, the
    // outbox ends and the socket is closed.
    let mut tx = Some(tx);
    let mut batches: JoinSet<()> = JoinSet::new();
    let shutdown = state.shutdown.clone();
    let mut grace_end: Option<tokio::time::Instant> = None;
    loop {
        let accepting = tx.is_some();
        tokio::select! {
            msg = socket.recv(), if accepting => match classify(msg) {
                Incoming::Text(text) => {
                    let reply = match bw::parse_message(text.as_str()) {
                        Err(e) => Some(bw::message_error(&e.0)),
                        Ok(_) if batches.len() >= MAX_BATCHES_PER_SOCKET => {
                            Some(bw::message_error(&format!(
                                "{MAX_BATCHES_PER_SOCKET} batches are already running on this \
                                 connection; wait for one to finish"
                            )))
                        }
                        Ok(request) => {
                            if let Some(tx) = tx.as_ref() {
                                batches.spawn(run_batch(
                                    state.clone(),
                                    caller.clone(),
                                    request,
                                    tx.clone(),
                                ));
                            }
                            None
                        }
                    };
                    if let Some(reply) = reply {
                        if !send_text(&mut socket, reply).await {
                            return;
                        }
                    }
                }
                Incoming::Binary => {
                    let reply = bw::message_error(
                        "binary messages are not supported; send the batch as a JSON text message",
                    );
                    if !send_text(&mut socket, reply).await {
                        return;
                    }
                }
                Incoming::TooBig => {
                    too_big(&mut socket).await;
                    return;
                }
                Incoming::BadUtf8 => {
                    close(&mut socket, CLOSE_BAD_UTF8, BAD_UTF8_REASON).await;
                    return;
                }
                Incoming::Closed => return,
                Incoming::Control => {}
            },
            out = outbox.recv() => match out {
                Some(text) => {
                    if !send_text(&mut socket, text).await {
                        return;
                    }
                }
                // Shutting down, and every batch has sent its last events.
                None => break,
            },
            Some(joined) = batches.join_next(), if !batches.is_empty() => {
                if let Err(e) = joined {
                    if e.is_panic() {
                        tracing::error!(error = %e, "a batch task panicked");
                    }
                }
            }
            () = shutdown.cancelled(), if accepting => {
                // Batches see the same token and end their prompts with ERROR events.
                tx = None;
                grace_end = Some(tokio::time::Instant::now() + SHUTDOWN_GRACE);
            }
            () = tokio::time::sleep_until(grace_end.unwrap_or_else(tokio::time::Instant::now)),
                if grace_end.is_some() => break,
        }
    }
    close(&mut socket, CLOSE_GOING_AWAY, "server shutting down").await;
    // Dropping `batches` aborts what is left; dropped event streams cancel their generations.
}

async fn send_text(socket: &mut WebSocket, text: String) -> bool {
    socket
        .send(Message::Text(Utf8Bytes::from(text)))
        .await
        .is_ok()
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: Utf8Bytes::from(reason.to_owned()),
        })))
        .await;
}

/// An over-limit message: the error in this protocol's shape, then close 1009.
async fn too_big(socket: &mut WebSocket) {
    let reply = bw::message_error(&format!(
        "message larger than the {} MiB limit",
        MAX_WS_MESSAGE_BYTES >> 20
    ));
    if send_text(socket, reply).await {
        close(socket, CLOSE_TOO_BIG, "message too big").await;
    }
}
