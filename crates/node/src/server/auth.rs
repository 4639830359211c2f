//! The signed-challenge WebSocket door on `/` and `POST /api/auth/register`
//! (`protocols/auth-ws.md`; the behaviour of the reference implementation is in NOTES.md
//! "auth-ws"). `GET /` without an upgrade is still the web UI.
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
//!   Hearth's extension for multi-turn clients, used instead of `prompt`), `model` (must be the
//!   served model when given), `options` (`temperature` 0.8, `top_p` 0.9, `top_k` 40,
//!   `max_tokens` 2048 capped at the context, `seed`, `stop`; Ollama's `num_predict` and
//!   `repeat_penalty` are read too). Several generations may run at once on one socket.
//!   Replies: `stream_start` {id, model}, `stream_token` {id, token} for every piece of text,
//!   `stream_end` {id, totalTokens (the engine's completion tokens), elapsedTime (ms from
//!   submission), finishReason, promptTokens, and `isCancelled: true` after a stop}.
//! - `stop`: the generation named by `requestId` (the reference client) or else `id` (the
//!   document). The node acknowledges with `{"type":"ack","action":"stop","requestId"}` as the
//!   reference server does; the stream then ends with `stream_end`.
//! - `models` -> `models_result` {models: [the model this node serves]}; `ping` -> `pong`; both
//!   echo an `id` when given.
//! - `batch` {messages: [...]}: each message handled in order as if sent alone (at most 64, no
//!   nested batch).
//! - Every error is `{"type":"error","error","code","timestamp"}` plus the `id` it concerns when
//!   there is one. Codes: `auth_failed`, `auth_timeout`, `rate_limited`, `invalid_model`,
//!   `model_loading` (the model is still loading: retry), `generation_failed` (the engine failed
//!   mid-way), `invalid_request` (bad JSON, types or values, unknown type, too big),
//!   `internal_error` (database, shutdown).
//! - Messages over 4 MiB get `invalid_request` and a close with 1009.
//!
//! ## Rate limit
//! [`RateLimiter`]: per IP address + client id, as the reference does. A failure after a quiet
//! spell of 10 minutes starts the count again; the 5th failure in a row blocks the pair for
//! 2^(n-1) seconds (16 s at the 5th, 32 s at the 6th, ...) up to 30 minutes, and attempts while
//! blocked are refused without being checked. A success clears the pair.
//!
//! ## Registration
//! `POST /api/auth/register` {name, publicKey, signatureAlgorithm?} answers the document's 200
//! `{"success":true,"clientId","message"}` (also for a key registered before, with the same
//! id) or 400 `{"success":false,"error","code":"invalid_key"}`; other refusals use the same
//! shape with `invalid_request`, `client_revoked` (403) or `internal_error` (500). Keys and ids:
//! [`crate::clients`]. When the node is exposed to the LAN, registration and the socket from
//! another machine need an API key like every other door (`server/security.rs`): a client
//! key planted by a web page or a stranger on the LAN must not be enough to generate; the
//! challenge then proves the client's key on top of the API key.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::dispatch::{Control, ControlError, Events, Generation};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, BoxStream, SelectAll};
use futures_util::{FutureExt as _, SinkExt as _, StreamExt as _};
use hearth_engine::{Event, FailureKind, ModelState, Prompt, Request, SubmitError};
use hearth_protocol::generation::{RawParams, StopField};
use hearth_protocol::limits::{MAX_WS_MESSAGE_BYTES, WS_READ_LIMIT_BYTES};
use hearth_protocol::{ChatMessage, FinishReason, SamplingParams};
use rand_core::RngCore as _;
use serde_json::{json, Map, Value};

use super::ws::{classify, Incoming, BAD_UTF8_REASON, CLOSE_BAD_UTF8};
use super::AppState;
use crate::clients::{self, ClientKey, Registration};

/// How long a connection may stay unauthenticated.
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// `max_tokens` when the client sends none (the document's default; capped at the context).
pub const DEFAULT_MAX_TOKENS: u32 = 2048;
/// Generations one socket may run at once.
pub const MAX_RUNNING_PER_SOCKET: usize = 16;
/// Messages one `batch` may carry.
pub const MAX_BATCH_MESSAGES: usize = 64;
/// Longest `id` or `clientId` accepted.
const MAX_ID_BYTES: usize = 256;
/// Longest `signature` accepted (base64 of an RSA-4096 signature is 684 bytes).
const MAX_SIGNATURE_BYTES: usize = 4096;
/// Most events written before one flush.
const MAX_BURST: usize = 64;
/// WebSocket close codes (RFC 6455).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_POLICY: u16 = 1008;
const CLOSE_TOO_BIG: u16 = 1009;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Rate limiting

/// Failed authentications per IP address + client id (see the module docs).
#[derive(Debug)]
pub struct RateLimiter {
    threshold: u32,
    window: Duration,
    max_block: Duration,
    entries: HashMap<(IpAddr, String), Attempts>,
}

#[derive(Debug, Clone, Copy)]
struct Attempts {
    failures: u32,
    last_failure: Instant,
    blocked_until: Option<Instant>,
}

/// What a failure leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Attempts left before the pair is blocked.
    Remaining(u32),
    /// Blocked for this long.
    Blocked(Duration),
}

/// Entries kept before stale ones are dropped.
const MAX_LIMITER_ENTRIES: usize = 10_000;

impl Default for RateLimiter {
    /// The reference's numbers: 5 failures, 10 minutes, at most 30 minutes blocked.
    fn default() -> Self {
        Self::new(5, Duration::from_secs(600), Duration::from_secs(1800))
    }
}

impl RateLimiter {
    pub fn new(threshold: u32, window: Duration, max_block: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            window,
            max_block,
            entries: HashMap::new(),
        }
    }

    /// How much longer the pair is blocked, if it is.
    pub fn blocked(&self, ip: IpAddr, client_id: &str, now: Instant) -> Option<Duration> {
        let until = self
            .entries
            .get(&(ip, client_id.to_owned()))?
            .blocked_until?;
        until.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// Record a failed attempt.
    pub fn failure(&mut self, ip: IpAddr, client_id: &str, now: Instant) -> FailureOutcome {
        if self.entries.len() >= MAX_LIMITER_ENTRIES {
            self.prune(now);
        }
        let window = self.window;
        let e = self
            .entries
            .entry((ip, client_id.to_owned()))
            .or_insert(Attempts {
                failures: 0,
                last_failure: now,
                blocked_until: None,
            });
        // The quiet spell counts from the end of the last block, so a client that comes back
        // right after a block keeps its count (and its backoff keeps growing).
        let quiet_since = e
            .blocked_until
            .map_or(e.last_failure, |b| b.max(e.last_failure));
        if now.saturating_duration_since(quiet_since) > window {
            e.failures = 0;
            e.blocked_until = None;
        }
        e.failures = e.failures.saturating_add(1);
        e.last_failure = now;
        if e.failures >= self.threshold {
            let secs = 2u64
                .saturating_pow(e.failures - 1)
                .min(self.max_block.as_secs().max(1));
            let block = Duration::from_secs(secs);
            e.blocked_until = Some(now + block);
            FailureOutcome::Blocked(block)
        } else {
            FailureOutcome::Remaining(self.threshold - e.failures)
        }
    }

    /// A successful authentication clears the pair.
    pub fn success(&mut self, ip: IpAddr, client_id: &str) {
        self.entries.remove(&(ip, client_id.to_owned()));
    }

    /// Drop entries that neither block nor count any more.
    fn prune(&mut self, now: Instant) {
        let window = self.window;
        self.entries.retain(|_, e| {
            e.blocked_until.is_some_and(|b| b > now)
                || now.saturating_duration_since(e.last_failure) <= window
        });
        if self.entries.len() >= MAX_LIMITER_ENTRIES {
            // Under a flood of made-up client ids keep only the pairs that are blocked.
            self.entries
                .retain(|_, e| e.blocked_until.is_some_and(|b| b > now));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Whole seconds to wait, rounded up (what `retryAfter` carries).
pub fn retry_after_secs(d: Duration) -> u64 {
    let s = d.as_secs();
    if d.subsec_nanos() > 0 {
        s + 1
    } else {
        s.max(1)
    }
}

/// What the door shares across connections.
#[derive(Debug)]
pub struct AuthState {
    timeout: Duration,
    limiter: Mutex<RateLimiter>,
}

impl Default for AuthState {
    fn default() -> Self {
        Self::new(DEFAULT_AUTH_TIMEOUT)
    }
}

impl AuthState {
    /// `timeout`: how long a connection may stay unauthenticated (30 s; tests shorten it).
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            limiter: Mutex::new(RateLimiter::default()),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn limiter(&self) -> std::sync::MutexGuard<'_, RateLimiter> {
        // A panic while holding the lock leaves consistent data: keep using it.
        self.limiter.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// ---------------------------------------------------------------------------------------------
// Registration

fn register_error(status: StatusCode, code: &'static str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"success": false, "error": message.into(), "code": code})),
    )
        .into_response()
}

pub(crate) async fn register(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return register_error(e.status(), "invalid_request", e.body_text()),
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("the body must be JSON: {e}"),
            )
        }
    };
    let Value::Object(o) = value else {
        return register_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the body must be a JSON object with name and publicKey",
        );
    };
    let name = match o.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.trim().chars().count() <= 200 => {
            s.trim().to_owned()
        }
        Some(Value::String(_)) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "name must be 1 to 200 characters",
            )
        }
        None | Some(Value::Null) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "name is required",
            )
        }
        Some(_) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "name must be a string",
            )
        }
    };
    let public_key = match o.get("publicKey") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                "publicKey is required",
            )
        }
        Some(_) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                "publicKey must be a string (PEM)",
            )
        }
    };
    let algorithm = match o.get("signatureAlgorithm") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "signatureAlgorithm must be a string",
            )
        }
    };
    let key = match ClientKey::parse(public_key) {
        Ok(k) => k,
        Err(e @ clients::KeyError::Unsupported(_)) => {
            return register_error(StatusCode::BAD_REQUEST, "invalid_key", e.to_string())
        }
        Err(e) => {
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                format!("Invalid public key format: {e}"),
            )
        }
    };
    if let Some(a) = algorithm {
        if !key.algorithm().accepts(a) {
            let expected = match key.algorithm() {
                clients::Algorithm::Ed25519 => "Ed25519",
                clients::Algorithm::RsaSha256 => "SHA256",
            };
            return register_error(
                StatusCode::BAD_REQUEST,
                "invalid_key",
                format!(
                    "signatureAlgorithm {a} is not supported with this {} key; use {expected}",
                    key.algorithm()
                ),
            );
        }
    }
    match state.store.register_client(name, key).await {
        Ok(Registration::Created(c)) => {
            tracing::info!(client_id = %c.client_id, name = %c.name, algorithm = %c.algorithm, "registered a client");
            (
                StatusCode::OK,
                Json(json!({"success": true, "clientId": c.client_id, "message": "Client registered successfully"})),
            )
                .into_response()
        }
        Ok(Registration::Existing(c)) => (
            StatusCode::OK,
            Json(json!({"success": true, "clientId": c.client_id, "message": "Client already registered"})),
        )
            .into_response(),
        Ok(Registration::Revoked(c)) => register_error(
            StatusCode::FORBIDDEN,
            "client_revoked",
            format!(
                "client {} was revoked on this node; remove it (hearth-node clients remove {}) to register this key again, or use a new key",
                c.client_id, c.client_id
            ),
        ),
        Err(e) => {
            tracing::error!(error = %e, "registering a client failed");
            register_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the client could not be stored",
            )
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The socket

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
                let mut session = Session::new(state, socket, peer.ip().to_canonical());
                session.run().await;
            }),
        Err(rejection) if wants_websocket(&headers) => rejection.into_response(),
        Err(_) => super::ui::serve(uri).await,
    }
}

/// A fresh challenge: 32 random bytes as 64 lowercase hex digits.
fn new_challenge() -> String {
    let mut bytes = [0u8; 32];
    rand_core::OsRng.fill_bytes(&mut bytes);
    clients::hex(&bytes)
}

/// A generation running on a socket.
struct Running {
    /// The id as the client sent it (string or number), echoed in every reply.
    id: Value,
    control: Control,
}

type EventStream = BoxStream<'static, (String, Option<Event>)>;

/// A generation's events, tagged with its key, ending after the final event; `None` once if
/// the engine dropped the stream without one.
fn event_stream(key: String, events: Events) -> EventStream {
    stream::unfold(Some(events), move |state| {
        let key = key.clone();
        async move {
            let mut events = state?;
            match events.recv().await {
                Some(e) => {
                    let last = matches!(e, Event::Done(_) | Event::Error(_));
                    let next = if last { None } else { Some(events) };
                    Some(((key, Some(e)), next))
                }
                None => Some(((key, None), None)),
            }
        }
    })
    .boxed()
}

struct Session {
    state: Arc<AppState>,
    socket: WebSocket,
    peer: IpAddr,
    /// The challenge until the one authentication attempt takes it.
    challenge: Option<String>,
    /// The client id, once authenticated.
    client: Option<String>,
    running: HashMap<String, Running>,
    streams: SelectAll<EventStream>,
    open: bool,
    /// While true, messages are queued without flushing.
    batching: bool,
}

/// Text of an id as the map of running generations keys it.
fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn error_message(code: &str, message: impl Into<String>, id: Option<&Value>) -> Value {
    let mut v =
        json!({"type": "error", "error": message.into(), "code": code, "timestamp": now_ms()});
    if let Some(id) = id {
        v["id"] = id.clone();
    }
    v
}

/// A usable `id` field: a string or a number, not too long.
fn parse_id(obj: &Map<String, Value>, field: &str) -> Result<Option<Value>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::String(s)) if !s.is_empty() && s.len() <= MAX_ID_BYTES => {
            Ok(Some(v.clone()))
        }
        Some(Value::String(_)) => Err(format!("{field} must be 1 to {MAX_ID_BYTES} bytes")),
        Some(v @ Value::Number(_)) => Ok(Some(v.clone())),
        Some(_) => Err(format!("{field} must be a string or a number")),
    }
}

fn opt_number(o: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("options.{key} must be a number")),
        Some(_) => Err(format!("options.{key} must be a number")),
    }
}

fn opt_integer(o: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                Ok(Some(i))
            } else if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15) {
                Ok(Some(f as i64))
            } else {
                Err(format!("options.{key} must be an integer, got {n}"))
            }
        }
        Some(_) => Err(format!("options.{key} must be an integer")),
    }
}

/// The sampling parameters of a `generate` message's `options`.
fn parse_options(options: Option<&Value>, ctx: u32) -> Result<SamplingParams, String> {
    let defaults = SamplingParams {
        temperature: 0.8,
        top_p: 0.9,
        top_k: 40,
        max_tokens: Some(DEFAULT_MAX_TOKENS.min(ctx.max(1))),
        ..SamplingParams::default()
    };
    let o = match options {
        None | Some(Value::Null) => return Ok(defaults),
        Some(Value::Object(o)) => o,
        Some(_) => return Err("options must be an object".into()),
    };
    let max_tokens = opt_integer(o, "max_tokens")?;
    let num_predict = opt_integer(o, "num_predict")?;
    // Ollama's num_predict -1 (or -2) means "until the context is full".
    let unlimited = max_tokens.is_none() && num_predict.is_some_and(|n| n < 0);
    let raw = RawParams {
        temperature: opt_number(o, "temperature")?,
        top_p: opt_number(o, "top_p")?,
        top_k: opt_integer(o, "top_k")?,
        repetition_penalty: match opt_number(o, "repetition_penalty")? {
            Some(v) => Some(v),
            None => opt_number(o, "repeat_penalty")?,
        },
        seed: opt_integer(o, "seed")?,
        max_tokens: max_tokens.or(num_predict.filter(|n| *n >= 0)),
        stop: match o.get("stop") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(StopField::One(s.clone())),
            Some(Value::Array(items)) => {
                let mut v = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(s) => v.push(s.clone()),
                        _ => {
                            return Err(
                                "options.stop must be a string or an array of strings".into()
                            )
                        }
                    }
                }
                Some(StopField::Many(v))
            }
            Some(_) => return Err("options.stop must be a string or an array of strings".into()),
        },
        ..RawParams::default()
    };
    let mut params = raw
        .validate(&defaults, Some(ctx))
        .map_err(|e| format!("options.{}: {}", e.param, e.message))?;
    if unlimited {
        params.max_tokens = None;
    }
    Ok(params)
}

/// The prompt of a `generate` message.
fn parse_prompt(obj: &Map<String, Value>) -> Result<Prompt, String> {
    let system = match obj.get("system") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("system must be a string".into()),
    };
    let raw = match obj.get("raw") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("raw must be true or false".into()),
    };
    if let Some(messages) = obj.get("messages").filter(|v| !v.is_null()) {
        let Value::Array(items) = messages else {
            return Err("messages must be an array of {role, content} objects".into());
        };
        if items.is_empty() {
            return Err("messages must not be empty".into());
        }
        let mut chat = Vec::with_capacity(items.len() + 1);
        if let Some(s) = system {
            chat.push(ChatMessage::new("system", s));
        }
        for (i, m) in items.iter().enumerate() {
            let (Some(role), Some(content)) = (
                m.get("role").and_then(Value::as_str),
                m.get("content").and_then(Value::as_str),
            ) else {
                return Err(format!(
                    "messages[{i}] must be an object with string role and content"
                ));
            };
            if !matches!(role, "system" | "user" | "assistant") {
                return Err(format!(
                    "messages[{i}].role must be system, user or assistant, got {role}"
                ));
            }
            chat.push(ChatMessage::new(role, content));
        }
        return Ok(Prompt::Chat(chat));
    }
    let prompt = match obj.get("prompt") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err("prompt must not be empty".into()),
        None | Some(Value::Null) => return Err("generate needs a prompt (a string)".into()),
        Some(_) => return Err("prompt must be a string".into()),
    };
    if raw {
        return Ok(Prompt::Text(prompt));
    }
    let mut chat = Vec::with_capacity(2);
    if let Some(s) = system {
        chat.push(ChatMessage::new("system", s));
    }
    chat.push(ChatMessage::new("user", prompt));
    Ok(Prompt::Chat(chat))
}

/// The door's error for a request the engine did not accept.
fn submit_error(e: &SubmitError, id: &Value) -> Value {
    let message = e.to_string();
    let mut v = match e {
        SubmitError::ModelLoading { .. } => error_message("model_loading", message, Some(id)),
        SubmitError::LoadFailed { .. } => error_message("internal_error", message, Some(id)),
        SubmitError::NoModel => error_message("invalid_model", message, Some(id)),
        SubmitError::ContextLengthExceeded { .. } | SubmitError::Prompt(_) => {
            error_message("invalid_request", message, Some(id))
        }
        SubmitError::QueueFull { .. } => error_message("rate_limited", message, Some(id)),
        SubmitError::ShuttingDown => error_message("internal_error", message, Some(id)),
    };
    if let SubmitError::QueueFull { retry_after, .. } = e {
        v["retryAfter"] = json!(retry_after_secs(*retry_after));
    }
    v
}

/// Why an authentication attempt failed.
enum Denied {
    /// Counts against the rate limit.
    Credentials(String),
    /// The node's fault: does not count.
    Internal(String),
}

/// Check a signature of the challenge against the client's registered key. A free function
/// over the shared state (not `&Session`, which is not `Sync`), so the socket's future stays `Send`.
async fn check_signature(
    state: &AppState,
    client_id: &str,
    signature: &str,
    challenge: &str,
) -> Result<(), Denied> {
    let record = state
        .store
        .client_with_key(client_id.to_owned())
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "looking up a client failed");
            Denied::Internal("the client could not be looked up; try again".into())
        })?;
    let Some((client, key)) = record else {
        return Err(Denied::Credentials(
            "Unknown clientId: register the public key first (POST /api/auth/register)".into(),
        ));
    };
    let Some(sig) = clients::decode_base64(signature) else {
        return Err(Denied::Credentials("Invalid signature: not base64".into()));
    };
    if !key.verify(challenge.as_bytes(), &sig) {
        return Err(Denied::Credentials("Invalid signature".into()));
    }
    if client.revoked {
        return Err(Denied::Credentials(
            "Client not found or has been revoked".into(),
        ));
    }
    Ok(())
}

impl Session {
    fn new(state: Arc<AppState>, socket: WebSocket, peer: IpAddr) -> Self {
        Self {
            state,
            socket,
            peer,
            challenge: None,
            client: None,
            running: HashMap::new(),
            streams: SelectAll::new(),
            open: true,
            batching: false,
        }
    }

    async fn send(&mut self, v: Value) {
        if !self.open {
            return;
        }
        let msg = Message::Text(Utf8Bytes::from(v.to_string()));
        let sent = if self.batching {
            self.socket.feed(msg).await
        } else {
            self.socket.send(msg).await
        };
        if sent.is_err() {
            self.open = false;
        }
    }

    async fn error(&mut self, code: &str, message: impl Into<String>, id: Option<&Value>) {
        self.send(error_message(code, message, id)).await;
    }

    async fn close(&mut self, code: u16, reason: &str) {
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

    async fn run(&mut self) {
        let challenge = new_challenge();
        self.send(json!({"type": "challenge", "challenge": challenge, "timestamp": now_ms()}))
            .await;
        self.challenge = Some(challenge);
        let shutdown = self.state.shutdown.clone();
        let auth_deadline = tokio::time::Instant::now() + self.state.auth.timeout();
        while self.open {
            let authenticated = self.client.is_some();
            let streaming = !self.streams.is_empty();
            tokio::select! {
                msg = self.socket.recv() => match classify(msg) {
                    Incoming::Text(text) => self.on_text(text.as_str()).await,
                    Incoming::Binary => {
                        self.error("invalid_request", "binary messages are not supported; send JSON text messages", None).await;
                    }
                    Incoming::TooBig => {
                        self.too_big().await;
                        break;
                    }
                    Incoming::BadUtf8 => {
                        self.close(CLOSE_BAD_UTF8, BAD_UTF8_REASON).await;
                        break;
                    }
                    Incoming::Closed => break,
                    Incoming::Control => {}
                },
                item = self.streams.next(), if streaming => {
                    if let Some((key, event)) = item {
                        // Write every event that is already waiting, then flush once.
                        self.batching = true;
                        self.on_event(key, event).await;
                        for _ in 0..MAX_BURST {
                            match self.streams.next().now_or_never() {
                                Some(Some((key, event))) => self.on_event(key, event).await,
                                _ => break,
                            }
                        }
                        self.batching = false;
                        if self.open && self.socket.flush().await.is_err() {
                            self.open = false;
                        }
                    }
                }
                () = tokio::time::sleep_until(auth_deadline), if !authenticated => {
                    let secs = self.state.auth.timeout().as_secs_f64();
                    self.error(
                        "auth_timeout",
                        format!("authentication timed out: no valid authenticate within {secs} s of the challenge"),
                        None,
                    ).await;
                    self.close(CLOSE_POLICY, "authentication timed out").await;
                    break;
                }
                () = shutdown.cancelled() => {
                    let ids: Vec<Value> = self.running.values().map(|r| r.id.clone()).collect();
                    for id in ids {
                        self.error("internal_error", "the server is shutting down", Some(&id)).await;
                    }
                    self.close(CLOSE_GOING_AWAY, "server shutting down").await;
                    break;
                }
            }
        }
        // Dropping the streams drops every generation's receiver, which cancels them.
    }

    async fn too_big(&mut self) {
        self.error(
            "invalid_request",
            format!(
                "message larger than the {} MiB limit",
                MAX_WS_MESSAGE_BYTES >> 20
            ),
            None,
        )
        .await;
        self.close(CLOSE_TOO_BIG, "message too big").await;
    }

    async fn on_text(&mut self, text: &str) {
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                self.error("invalid_request", format!("invalid JSON: {e}"), None)
                    .await;
                return;
            }
        };
        if value.get("type").and_then(Value::as_str) == Some("batch") {
            self.batch(value).await;
        } else {
            self.dispatch(value).await;
        }
    }

    async fn batch(&mut self, value: Value) {
        if self.client.is_none() {
            self.error(
                "auth_failed",
                "not authenticated: sign the challenge and send authenticate first",
                None,
            )
            .await;
            return;
        }
        let messages = match value.get("messages") {
            Some(Value::Array(items)) => items.clone(),
            _ => {
                self.error(
                    "invalid_request",
                    "batch needs messages: an array of messages",
                    None,
                )
                .await;
                return;
            }
        };
        if messages.len() > MAX_BATCH_MESSAGES {
            self.error(
                "invalid_request",
                format!(
                    "a batch may carry at most {MAX_BATCH_MESSAGES} messages, got {}",
                    messages.len()
                ),
                None,
            )
            .await;
            return;
        }
        for m in messages {
            if !self.open {
                break;
            }
            self.dispatch(m).await;
        }
    }

    /// Handle one message (never a batch: `on_text` unwraps those, and a batch inside a batch
    /// is refused, so this never recurses).
    async fn dispatch(&mut self, value: Value) {
        let Value::Object(obj) = value else {
            self.error(
                "invalid_request",
                "each message must be a JSON object with a \"type\"",
                None,
            )
            .await;
            return;
        };
        let ty = match obj.get("type") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                self.error("invalid_request", "type must be a string", None)
                    .await;
                return;
            }
            None => {
                self.error("invalid_request", "the message has no \"type\"", None)
                    .await;
                return;
            }
        };
        match ty.as_str() {
            "authenticate" => self.authenticate(&obj).await,
            "ping" => {
                let mut pong = json!({"type": "pong", "timestamp": now_ms()});
                if let Some(id) = obj.get("id").filter(|v| !v.is_null()) {
                    pong["id"] = id.clone();
                }
                self.send(pong).await;
            }
            "generate" | "stop" | "models" | "batch" if self.client.is_none() => {
                self.error(
                    "auth_failed",
                    format!("not authenticated: '{ty}' needs a successful authenticate first"),
                    obj.get("id"),
                )
                .await;
            }
            "generate" => self.generate(&obj).await,
            "stop" => self.stop(&obj).await,
            "models" => {
                let models: Vec<String> = self
                    .state
                    .dispatcher
                    .models()
                    .iter()
                    .map(|m| m.to_string())
                    .collect();
                let mut reply =
                    json!({"type": "models_result", "models": models, "timestamp": now_ms()});
                if let Some(id) = obj.get("id").filter(|v| !v.is_null()) {
                    reply["id"] = id.clone();
                }
                self.send(reply).await;
            }
            "batch" => {
                self.error(
                    "invalid_request",
                    "a batch cannot contain another batch",
                    None,
                )
                .await;
            }
            other => {
                let shown: String = other.chars().take(64).collect();
                self.error(
                    "invalid_request",
                    format!("unknown message type '{shown}' (expected authenticate, generate, stop, models, ping or batch)"),
                    obj.get("id"),
                )
                .await;
            }
        }
    }

    async fn auth_failure(&mut self, reason: String, remaining: Option<u32>) {
        let mut result = json!({"type": "auth_result", "success": false, "error": reason, "timestamp": now_ms()});
        if let Some(n) = remaining {
            result["remainingAttempts"] = json!(n);
        }
        self.send(result).await;
        self.error("auth_failed", reason, None).await;
    }

    async fn rate_limited(&mut self, wait: Duration) {
        let secs = retry_after_secs(wait);
        let message =
            format!("Too many failed authentication attempts. Try again in {secs} seconds.");
        self.send(json!({"type": "auth_result", "success": false, "error": message, "retryAfter": secs, "timestamp": now_ms()}))
            .await;
        let mut e = error_message("rate_limited", message, None);
        e["retryAfter"] = json!(secs);
        self.send(e).await;
    }

    async fn authenticate(&mut self, obj: &Map<String, Value>) {
        if self.client.is_some() {
            self.error(
                "invalid_request",
                "this connection is already authenticated",
                None,
            )
            .await;
            return;
        }
        let Some(challenge) = self.challenge.take() else {
            self.auth_failure(
                "this connection's challenge was already used (one attempt per connection); open a new connection for a new challenge".into(),
                None,
            )
            .await;
            return;
        };
        let client_id = obj.get("clientId").and_then(Value::as_str);
        let signature = obj.get("signature").and_then(Value::as_str);
        let (Some(client_id), Some(signature)) = (client_id, signature) else {
            self.auth_failure(
                "Invalid authentication data: authenticate needs clientId and signature strings"
                    .into(),
                None,
            )
            .await;
            return;
        };
        if client_id.is_empty()
            || client_id.len() > MAX_ID_BYTES
            || signature.len() > MAX_SIGNATURE_BYTES
        {
            self.auth_failure(
                "Invalid authentication data: clientId or signature is too long or empty".into(),
                None,
            )
            .await;
            return;
        }
        let now = Instant::now();
        let blocked = self.state.auth.limiter().blocked(self.peer, client_id, now);
        if let Some(wait) = blocked {
            tracing::info!(peer = %self.peer, %client_id, "authentication refused: rate limited");
            self.rate_limited(wait).await;
            return;
        }
        let state = self.state.clone();
        match check_signature(&state, client_id, signature, &challenge).await {
            Ok(()) => {
                self.state.auth.limiter().success(self.peer, client_id);
                self.client = Some(client_id.to_owned());
                if let Err(e) = self.state.store.touch_client(client_id.to_owned()).await {
                    tracing::warn!(error = %e, "noting a client's last use failed");
                }
                tracing::info!(peer = %self.peer, %client_id, "client authenticated");
                self.send(json!({"type": "auth_result", "success": true, "clientId": client_id, "timestamp": now_ms()}))
                    .await;
            }
            Err(Denied::Internal(message)) => {
                self.send(json!({"type": "auth_result", "success": false, "error": message, "timestamp": now_ms()}))
                    .await;
                self.error("internal_error", message, None).await;
            }
            Err(Denied::Credentials(reason)) => {
                tracing::info!(peer = %self.peer, %client_id, %reason, "authentication failed");
                let outcome = self.state.auth.limiter().failure(self.peer, client_id, now);
                match outcome {
                    FailureOutcome::Blocked(wait) => self.rate_limited(wait).await,
                    FailureOutcome::Remaining(n) => self.auth_failure(reason, Some(n)).await,
                }
            }
        }
    }

    async fn generate(&mut self, obj: &Map<String, Value>) {
        let id = match parse_id(obj, "id") {
            Ok(Some(id)) => id,
            Ok(None) => Value::String(format!("req-{}", uuid::Uuid::new_v4().simple())),
            Err(message) => {
                self.error("invalid_request", message, None).await;
                return;
            }
        };
        let key = id_key(&id);
        if self.running.contains_key(&key) {
            self.error(
                "invalid_request",
                format!("a generation with id {key} is already running on this connection"),
                Some(&id),
            )
            .await;
            return;
        }
        if self.running.len() >= MAX_RUNNING_PER_SOCKET {
            self.error(
                "rate_limited",
                format!("at most {MAX_RUNNING_PER_SOCKET} generations may run at once on one connection"),
                Some(&id),
            )
            .await;
            return;
        }
        let prompt = match parse_prompt(obj) {
            Ok(p) => p,
            Err(message) => {
                self.error("invalid_request", message, Some(&id)).await;
                return;
            }
        };
        let requested = match obj.get("model") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.error("invalid_request", "model must be a string", Some(&id))
                    .await;
                return;
            }
        };
        // In hub mode a model only workers serve is accepted; its context is theirs.
        let remote = requested
            .as_deref()
            .and_then(|m| self.state.dispatcher.remote_model(m));
        let ctx = match remote {
            Some(_) => u32::MAX,
            None => {
                let model_state = self.state.host.state().borrow().clone();
                let info = match model_state {
                    ModelState::Ready(info) => info,
                    ModelState::Loading {
                        model, progress, ..
                    } => {
                        if requested.as_deref().is_some_and(|m| !model.matches(m)) {
                            self.invalid_model(
                                requested.as_deref().unwrap_or_default(),
                                model.as_str(),
                                &id,
                            )
                            .await;
                        } else {
                            let percent = (progress * 100.0).floor().clamp(0.0, 99.0) as u8;
                            self.error(
                            "model_loading",
                            format!("model {model} is still loading ({percent}%); try again shortly"),
                            Some(&id),
                        )
                        .await;
                        }
                        return;
                    }
                    ModelState::Failed { model, message } => {
                        self.error(
                            "internal_error",
                            format!("model {model} failed to load: {message}"),
                            Some(&id),
                        )
                        .await;
                        return;
                    }
                    ModelState::Unloaded | ModelState::Stopped => {
                        self.error(
                            "invalid_model",
                            "no model is loaded on this node",
                            Some(&id),
                        )
                        .await;
                        return;
                    }
                };
                if let Some(m) = requested.as_deref() {
                    if !info.id.matches(m) {
                        self.invalid_model(m, info.id.as_str(), &id).await;
                        return;
                    }
                }
                info.ctx_per_slot
            }
        };
        let params = match parse_options(obj.get("options"), ctx) {
            Ok(p) => p,
            Err(message) => {
                self.error("invalid_request", message, Some(&id)).await;
                return;
            }
        };
        let gen = match self
            .state
            .dispatcher
            .submit(requested.as_deref(), Request { prompt, params })
        {
            Ok(g) => g,
            Err(e) => {
                self.send(submit_error(&e, &id)).await;
                return;
            }
        };
        let Generation {
            events,
            control,
            model,
            id: engine_id,
            ..
        } = gen;
        tracing::debug!(client_id = self.client.as_deref().unwrap_or_default(), request = %engine_id, id = %key, "generation started");
        self.send(json!({"type": "stream_start", "id": id, "model": model.as_str(), "timestamp": now_ms()}))
            .await;
        self.streams.push(event_stream(key.clone(), events));
        self.running.insert(key, Running { id, control });
    }

    async fn invalid_model(&mut self, requested: &str, served: &str, id: &Value) {
        let shown: String = requested.chars().take(200).collect();
        self.error(
            "invalid_model",
            format!("model '{shown}' is not available on this node; it serves '{served}'"),
            Some(id),
        )
        .await;
    }

    async fn stop(&mut self, obj: &Map<String, Value>) {
        let own_id = obj.get("id").filter(|v| !v.is_null()).cloned();
        let target = match parse_id(obj, "requestId") {
            Ok(Some(t)) => t,
            Ok(None) => match parse_id(obj, "id") {
                Ok(Some(t)) => t,
                Ok(None) => {
                    self.error(
                        "invalid_request",
                        "stop needs requestId (or id): the generation to stop",
                        None,
                    )
                    .await;
                    return;
                }
                Err(message) => {
                    self.error("invalid_request", message, None).await;
                    return;
                }
            },
            Err(message) => {
                self.error("invalid_request", message, own_id.as_ref())
                    .await;
                return;
            }
        };
        let key = id_key(&target);
        let Some(running) = self.running.get(&key) else {
            self.error(
                "invalid_request",
                format!("no generation with id {key} is running on this connection"),
                Some(&target),
            )
            .await;
            return;
        };
        let result = running.control.stop();
        match result {
            Ok(()) => {
                let mut ack = json!({"type": "ack", "action": "stop", "requestId": target, "timestamp": now_ms()});
                if let Some(id) = own_id {
                    ack["id"] = id;
                }
                self.send(ack).await;
            }
            Err(ControlError::Busy) => {
                self.error(
                    "rate_limited",
                    "the engine is busy; send stop again",
                    Some(&target),
                )
                .await;
            }
            Err(ControlError::Stopped) => {
                self.error("internal_error", "the engine has stopped", Some(&target))
                    .await;
            }
            Err(e @ ControlError::Unsupported(_)) => {
                self.error("invalid_request", e.to_string(), Some(&target))
                    .await;
            }
        }
    }

    async fn on_event(&mut self, key: String, event: Option<Event>) {
        let Some(running) = self.running.get(&key) else {
            return;
        };
        let id = running.id.clone();
        match event {
            Some(Event::Token(t)) => {
                if !t.text.is_empty() {
                    self.send(json!({"type": "stream_token", "id": id, "token": t.text, "timestamp": now_ms()}))
                        .await;
                }
            }
            Some(Event::Restarted | Event::Paused | Event::Resumed | Event::Modified) => {}
            Some(Event::Done(done)) => {
                self.running.remove(&key);
                let mut end = json!({
                    "type": "stream_end",
                    "id": id,
                    "totalTokens": done.usage.completion_tokens,
                    "promptTokens": done.usage.prompt_tokens,
                    "elapsedTime": done.timing.total.as_millis() as u64,
                    "finishReason": done.reason.as_str(),
                    "timestamp": now_ms(),
                });
                if done.reason == FinishReason::Cancelled {
                    end["isCancelled"] = json!(true);
                }
                self.send(end).await;
            }
            Some(Event::Error(f)) => {
                self.running.remove(&key);
                let code = match f.kind {
                    FailureKind::Decode | FailureKind::Unloaded => "generation_failed",
                    FailureKind::ShuttingDown => "internal_error",
                };
                self.error(code, format!("generation failed: {}", f.message), Some(&id))
                    .await;
            }
            None => {
                self.running.remove(&key);
                self.error(
                    "generation_failed",
                    "the engine stopped unexpectedly",
                    Some(&id),
                )
                .await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 7));
    const OTHER_IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 8));

    #[test]
    fn five_failures_block_with_exponential_backoff() {
        let mut l = RateLimiter::default();
        let t0 = Instant::now();
        for (i, left) in [4, 3, 2, 1].into_iter().enumerate() {
            let t = t0 + Duration::from_secs(i as u64);
            assert_eq!(l.blocked(IP, "abc", t), None);
            assert_eq!(l.failure(IP, "abc", t), FailureOutcome::Remaining(left));
        }
        let t5 = t0 + Duration::from_secs(10);
        assert_eq!(
            l.failure(IP, "abc", t5),
            FailureOutcome::Blocked(Duration::from_secs(16))
        );
        assert_eq!(
            l.blocked(IP, "abc", t5 + Duration::from_secs(1)),
            Some(Duration::from_secs(15))
        );
        // Another client id from the same address, or the same id from elsewhere, is not blocked.
        assert_eq!(l.blocked(IP, "other", t5), None);
        assert_eq!(l.blocked(OTHER_IP, "abc", t5), None);
        // After the block, the next failure doubles it.
        let t6 = t5 + Duration::from_secs(17);
        assert_eq!(l.blocked(IP, "abc", t6), None);
        assert_eq!(
            l.failure(IP, "abc", t6),
            FailureOutcome::Blocked(Duration::from_secs(32))
        );
        let t7 = t6 + Duration::from_secs(33);
        assert_eq!(
            l.failure(IP, "abc", t7),
            FailureOutcome::Blocked(Duration::from_secs(64))
        );
    }

    #[test]
    fn blocks_are_capped_at_thirty_minutes() {
        let mut l = RateLimiter::default();
        let mut t = Instant::now();
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            if let FailureOutcome::Blocked(d) = l.failure(IP, "abc", t) {
                last = d;
                t += d;
            }
            t += Duration::from_secs(1);
        }
        assert_eq!(last, Duration::from_secs(1800));
    }

    #[test]
    fn quiet_spells_and_successes_reset_the_count() {
        let mut l = RateLimiter::default();
        let t0 = Instant::now();
        for i in 0..4 {
            l.failure(IP, "abc", t0 + Duration::from_secs(i));
        }
        // Eleven quiet minutes: the count starts again.
        let later = t0 + Duration::from_secs(3 + 660);
        assert_eq!(l.failure(IP, "abc", later), FailureOutcome::Remaining(4));
        for i in 1..4 {
            l.failure(IP, "abc", later + Duration::from_secs(i));
        }
        l.success(IP, "abc");
        assert_eq!(
            l.failure(IP, "abc", later + Duration::from_secs(5)),
            FailureOutcome::Remaining(4)
        );
    }

    #[test]
    fn a_flood_of_client_ids_is_pruned() {
        let mut l = RateLimiter::default();
        let t0 = Instant::now();
        for i in 0..MAX_LIMITER_ENTRIES {
            l.failure(IP, &format!("id{i}"), t0);
        }
        let later = t0 + Duration::from_secs(3600);
        l.failure(IP, "fresh", later);
        assert_eq!(l.len(), 1, "stale entries are dropped");
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(15_001)), 16);
        assert_eq!(retry_after_secs(Duration::from_secs(16)), 16);
        assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
    }

    #[test]
    fn challenges_are_64_fresh_hex_digits() {
        let a = new_challenge();
        let b = new_challenge();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn options_defaults_aliases_and_errors() {
        let p = parse_options(None, 1024).unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k), (0.8, 0.9, 40));
        assert_eq!(
            p.max_tokens,
            Some(1024),
            "the default 2048 is capped at the context"
        );
        let p = parse_options(
            Some(&json!({"temperature": 0, "top_p": 0.5, "top_k": 3, "max_tokens": 7, "seed": 42, "stop": ["\n"]})),
            1024,
        )
        .unwrap();
        assert_eq!(p.temperature, 0.0);
        assert_eq!(p.max_tokens, Some(7));
        assert_eq!(p.seed, Some(42));
        assert_eq!(p.stop, vec!["\n".to_owned()]);
        let p = parse_options(
            Some(&json!({"num_predict": 5, "repeat_penalty": 1.1, "stop": "END"})),
            1024,
        )
        .unwrap();
        assert_eq!(p.max_tokens, Some(5));
        assert!((p.repetition_penalty - 1.1).abs() < 1e-6);
        assert_eq!(
            parse_options(Some(&json!({"num_predict": -1})), 1024)
                .unwrap()
                .max_tokens,
            None
        );
        assert_eq!(
            parse_options(Some(&json!({"max_tokens": 3.0})), 1024)
                .unwrap()
                .max_tokens,
            Some(3)
        );
        for (bad, needle) in [
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"temperature": -1}), "temperature"),
            (json!({"top_k": 1.5}), "top_k"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"max_tokens": 5000}), "max_tokens"),
            (json!({"stop": [1]}), "stop"),
            (json!([1, 2]), "options"),
        ] {
            let e = parse_options(Some(&bad), 1024).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn prompts_messages_and_errors() {
        let o = |v: Value| v.as_object().unwrap().clone();
        assert!(matches!(
            parse_prompt(&o(json!({"prompt": "hi"}))).unwrap(),
            Prompt::Chat(m) if m.len() == 1 && m[0].role == "user"
        ));
        assert!(matches!(
            parse_prompt(&o(json!({"prompt": "hi", "system": "be brief"}))).unwrap(),
            Prompt::Chat(m) if m.len() == 2 && m[0].role == "system"
        ));
        assert!(matches!(
            parse_prompt(&o(json!({"prompt": "hi", "raw": true}))).unwrap(),
            Prompt::Text(t) if t == "hi"
        ));
        assert!(matches!(
            parse_prompt(&o(json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}))).unwrap(),
            Prompt::Chat(m) if m.len() == 3
        ));
        for bad in [
            json!({}),
            json!({"prompt": ""}),
            json!({"prompt": 5}),
            json!({"messages": []}),
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            json!({"messages": "hi"}),
            json!({"prompt": "x", "system": 1}),
        ] {
            assert!(parse_prompt(&o(bad.clone())).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_are_strings_or_numbers() {
        let o = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            parse_id(&o(json!({"id": "a"})), "id").unwrap(),
            Some(json!("a"))
        );
        assert_eq!(
            parse_id(&o(json!({"id": 7})), "id").unwrap(),
            Some(json!(7))
        );
        assert_eq!(parse_id(&o(json!({})), "id").unwrap(), None);
        assert!(parse_id(&o(json!({"id": {}})), "id").is_err());
        assert!(parse_id(&o(json!({"id": ""})), "id").is_err());
        assert!(parse_id(&o(json!({"id": "x".repeat(300)})), "id").is_err());
        assert_eq!(id_key(&json!(7)), "7");
        assert_eq!(id_key(&json!("7")), "7");
    }
}
