//! The signed-challenge WebSocket door on `/` and `POST /api/auth/register`
//! (`protocols/auth-ws.md`; the behaviour of the reference implementation is in NOTES.md
//! "auth-ws"). `GET /` without an upgrade is still the web UI. The messages both ways and
//! registration are typed in `hearth_protocol::auth_ws`; here: the socket ([`session`]),
//! registration ([`register`]) and the rate limit (`hearth_auth::limiter`; the door's timeout
//! and failure counters are [`AuthState`], held in `AppState`).
//!
//! ## The socket
//! 1. On connect the node sends `challenge`: 32 random bytes as 64 hex digits, and `timestamp`
//!    in ms. The challenge lives as long as the connection and is good for one attempt.
//! 2. The client sends `authenticate` with `clientId` and `signature`: base64 of a signature
//!    over the UTF-8 bytes of the challenge string, Ed25519 or RSASSA-PKCS1-v1_5/SHA-256 after
//!    the key registered for `clientId`. The challenge is consumed by the first attempt,
//!    whatever its outcome; later attempts on the connection fail. The node answers
//!    `auth_result` (`success`, and on failure `error`, `remainingAttempts` or `retryAfter`),
//!    and on failure also an `error` with code `auth_failed` or `rate_limited`.
//! 3. Authenticated, the client may send `generate`, `stop`, `models`, `ping` and `batch`;
//!    before that only `authenticate` and `ping` (anything else gets `auth_failed`). Without a
//!    successful `authenticate` within the auth timeout (30 s) the node sends `auth_timeout`
//!    and closes the socket with 1008.
//!
//! ## Messages (decisions where the document is silent)
//! - `generate`: `id` (string or number; echoed as sent; one is made when missing), `prompt`
//!   (rendered with the model's chat template as one user turn, as Ollama's `generate` does;
//!   `raw: true` sends it as is), optional `system`, optional `messages` (`[{role, content}]`,
//!   Hearth's extension for multi-turn clients, used instead of `prompt`), `model` (when given,
//!   this node's model or one its hub's workers serve), `options` (`temperature` 0.8, `top_p` 0.9, `top_k` 40,
//!   `max_tokens` 2048 capped at the context, `seed`, `stop`; the reference client library's
//!   `maxTokens` and Ollama's `num_predict` and `repeat_penalty` are read too). Several generations may run at once on one socket.
//!   Replies: `stream_start` {id, model}, `stream_token` {id, token} for every piece of text,
//!   `stream_end` {id, totalTokens (the engine's completion tokens), elapsedTime (ms from
//!   submission), finishReason, promptTokens, and `isCancelled: true` after a stop}.
//! - `stop`: the generation named by `requestId` (the reference client) or else `id` (the
//!   document). The node acknowledges with `{"type":"ack","action":"stop","requestId"}` as the
//!   reference server does; the stream then ends with `stream_end`.
//! - `models` -> `models_result` {models: [{name, model, size, modified_at, details}]}: Ollama's
//!   `/api/tags` entries, as the reference passes them on and its client reads `m.name`
//!   (size, date and details for the local model); `ping` -> `pong`; both echo an `id`.
//! - `batch` {messages: [...]}: each message handled in order as if sent alone (at most 64, no
//!   nested batch).
//! - Every error is `{"type":"error","error","code","timestamp"}` plus the `id` it concerns when
//!   there is one. Codes: `auth_failed`, `auth_timeout`, `rate_limited`, `invalid_model`,
//!   `model_loading` (the model is still loading: retry), `generation_failed` (the engine failed
//!   mid-way), `invalid_request` (bad JSON, types or values, unknown type, too big),
//!   `internal_error` (database, shutdown).
//! - Messages over 4 MiB get `invalid_request` and a close with 1009.
//! - A generation cut by the node shutting down or by unloading the model gets its `error`,
//!   then a `stream_end` with `isCancelled: true`, so the reference client library's request
//!   ends.
//!
//! ## Rate limit
//! [`hearth_auth::limiter::RateLimiter`]: per IP address + client id, as the reference does. A failure after a quiet
//! spell of 10 minutes starts the count again; the 5th failure in a row blocks the pair for
//! 2^(n-1) seconds (16 s at the 5th, 32 s at the 6th, ...) up to 30 minutes, and attempts while
//! blocked are refused without being checked. A success clears the pair.
//!
//! ## Registration
//! `POST /api/auth/register` {name, publicKey, signatureAlgorithm?} answers the document's 200
//! `{"success":true,"clientId","message"}` (also for a key registered before, with the same
//! id) or 400 `{"success":false,"error","code":"invalid_key"}`; other refusals use the same
//! shape with `invalid_request`, `client_revoked` (403) or `internal_error` (500). Keys and ids:
//! [`hearth_auth::clients`]. When the node is exposed to the LAN, registration and the socket from
//! another machine need an API key like every other door (`crate::security`): a client
//! key planted by a web page or a stranger on the LAN must not be enough to generate; the
//! challenge then proves the client's key on top of the API key.

mod register;
mod replies;
mod session;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use hearth_protocol::limits::WS_READ_LIMIT_BYTES;

pub(crate) use register::register;

pub use crate::state::auth::{AuthState, DEFAULT_AUTH_TIMEOUT};
use crate::state::AppState;

fn wants_websocket(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// `GET /`: the WebSocket when the request asks for an upgrade, else the web UI.
pub(crate) async fn root(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    uri: Uri,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match ws {
        Ok(ws) => ws
            .max_message_size(WS_READ_LIMIT_BYTES)
            .max_frame_size(WS_READ_LIMIT_BYTES)
            .on_upgrade(move |socket| async move {
                let mut session = session::Session::new(state, socket, peer.ip().to_canonical());
                session.run().await;
            }),
        Err(rejection) if wants_websocket(&headers) => rejection.into_response(),
        Err(_) => crate::ui::serve(uri).await,
    }
}
