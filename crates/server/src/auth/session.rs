//! The signed-challenge socket on `/`: one [`Session`] per connection sends the challenge,
//! takes the one authentication attempt (counted by the rate limiter), then serves
//! `generate`, `stop`, `models` and `ping` through the route. Messages arrive typed from
//! `hearth_protocol::auth_ws`; what needs the node (authentication, the model's state and
//! context, running generations) is decided here.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::ws::WebSocket;
use futures_util::stream::{self, BoxStream, SelectAll};
use futures_util::{FutureExt as _, StreamExt as _};
use hearth_engine::{Event, FailureKind, Prompt, Request};
use hearth_protocol::auth_ws::{
    self, ClientMessage, Credentials, Frame, Generate, GeneratePrompt, MessageError, WireId,
};
use hearth_protocol::limits::MAX_WS_MESSAGE_BYTES;
use hearth_protocol::FinishReason;
use rand_core::RngCore as _;

use hearth_protocol::auth_ws::server::{
    AuthResult, ErrorCode, ErrorMessage, ModelEntry, ServerMessage, StreamEnd,
};

use super::replies::{error_fields, model_entry, params_for, resolve_error, submit_error};
use crate::state::AppState;
use crate::ws::{DoorSocket, Incoming, BAD_UTF8_REASON, CLOSE_BAD_UTF8};
use hearth_auth::clients;
use hearth_auth::limiter::{retry_after_secs, FailureOutcome};
use hearth_route::{Control, ControlError, Events, Generation};

/// Generations one socket may run at once.
pub(super) const MAX_RUNNING_PER_SOCKET: usize = 16;
/// Most events written before one flush.
const MAX_BURST: usize = 64;
/// WebSocket close codes (RFC 6455).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_POLICY: u16 = 1008;
const CLOSE_TOO_BIG: u16 = 1009;

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
    id: WireId,
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

pub(super) struct Session {
    state: Arc<AppState>,
    socket: DoorSocket,
    peer: IpAddr,
    /// The challenge until the one authentication attempt takes it.
    challenge: Option<String>,
    /// The client id, once authenticated.
    client: Option<String>,
    running: HashMap<String, Running>,
    streams: SelectAll<EventStream>,
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
    let Some((client, der)) = record else {
        return Err(Denied::Credentials(
            "Unknown clientId: register the public key first (POST /api/auth/register)".into(),
        ));
    };
    let key = clients::ClientKey::from_der(&der).map_err(|e| {
        tracing::error!(client = %client.client_id, error = %e, "a registered key does not read");
        Denied::Internal("the client's registered key does not read; register it again".into())
    })?;
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
    pub(super) fn new(state: Arc<AppState>, socket: WebSocket, peer: IpAddr) -> Self {
        Self {
            state,
            socket: DoorSocket::new(socket),
            peer,
            challenge: None,
            client: None,
            running: HashMap::new(),
            streams: SelectAll::new(),
        }
    }

    async fn send(&mut self, m: ServerMessage) {
        self.socket.send_text(m.to_text(now_ms())).await;
    }

    async fn error(&mut self, code: ErrorCode, message: impl Into<String>, id: Option<&WireId>) {
        self.send(ServerMessage::error(code, message, id)).await;
    }

    async fn close(&mut self, code: u16, reason: &str) {
        self.socket.close(code, reason).await;
    }

    pub(super) async fn run(&mut self) {
        let challenge = new_challenge();
        self.send(ServerMessage::Challenge {
            challenge: challenge.clone(),
        })
        .await;
        self.challenge = Some(challenge);
        let shutdown = self.state.shutdown.clone();
        let auth_deadline = tokio::time::Instant::now() + self.state.auth.timeout();
        while self.socket.is_open() {
            let authenticated = self.client.is_some();
            let streaming = !self.streams.is_empty();
            tokio::select! {
                incoming = self.socket.recv() => match incoming {
                    Incoming::Text(text) => self.on_text(text.as_str()).await,
                    Incoming::Binary => {
                        self.error(ErrorCode::InvalidRequest, "binary messages are not supported; send JSON text messages", None).await;
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
                        self.socket.begin_burst();
                        self.on_event(key, event).await;
                        for _ in 0..MAX_BURST {
                            match self.streams.next().now_or_never() {
                                Some(Some((key, event))) => self.on_event(key, event).await,
                                _ => break,
                            }
                        }
                        self.socket.end_burst().await;
                    }
                }
                () = tokio::time::sleep_until(auth_deadline), if !authenticated => {
                    let secs = self.state.auth.timeout().as_secs_f64();
                    self.error(
                        ErrorCode::AuthTimeout,
                        format!("authentication timed out: no valid authenticate within {secs} s of the challenge"),
                        None,
                    ).await;
                    self.close(CLOSE_POLICY, "authentication timed out").await;
                    break;
                }
                () = shutdown.cancelled() => {
                    // Each cut generation gets its error, then a stream_end marked cancelled
                    // so that the reference client library's request ends (NOTES.md).
                    let ids: Vec<WireId> = self.running.values().map(|r| r.id.clone()).collect();
                    for id in ids {
                        self.error(ErrorCode::InternalError, "the server is shutting down", Some(&id)).await;
                        self.send(cancelled_end(id)).await;
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
            ErrorCode::InvalidRequest,
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
        match auth_ws::parse_text(text) {
            Err(e) => {
                self.error(ErrorCode::InvalidRequest, e.message, e.id.as_ref())
                    .await
            }
            Ok(Frame::One(m)) => self.dispatch(Ok(m)).await,
            Ok(Frame::Batch(_)) if self.client.is_none() => {
                self.error(
                    ErrorCode::AuthFailed,
                    "not authenticated: sign the challenge and send authenticate first",
                    None,
                )
                .await;
            }
            Ok(Frame::Batch(Err(e))) => {
                self.error(ErrorCode::InvalidRequest, e.message, e.id.as_ref())
                    .await;
            }
            Ok(Frame::Batch(Ok(messages))) => {
                for m in messages {
                    if !self.socket.is_open() {
                        break;
                    }
                    self.dispatch(m).await;
                }
            }
        }
    }

    /// Handle one message of a frame.
    async fn dispatch(&mut self, message: Result<ClientMessage, MessageError>) {
        let m = match message {
            Ok(m) => m,
            Err(e) => {
                self.error(ErrorCode::InvalidRequest, e.message, e.id.as_ref())
                    .await;
                return;
            }
        };
        let needs_auth = !matches!(
            m,
            ClientMessage::Authenticate(_) | ClientMessage::Ping { .. }
        );
        if needs_auth && self.client.is_none() {
            self.error(
                ErrorCode::AuthFailed,
                format!(
                    "not authenticated: '{}' needs a successful authenticate first",
                    m.kind()
                ),
                m.id(),
            )
            .await;
            return;
        }
        match m {
            ClientMessage::Authenticate(credentials) => self.authenticate(credentials).await,
            ClientMessage::Ping { id } => {
                self.send(ServerMessage::Pong { id }).await;
            }
            ClientMessage::Models { id } => {
                let local = self.state.host.model();
                let models: Vec<ModelEntry> = self
                    .state
                    .router
                    .models()
                    .iter()
                    .map(|m| {
                        let here = local.as_deref().filter(|i| i.id == *m);
                        model_entry(m.as_str(), here)
                    })
                    .collect();
                self.send(ServerMessage::ModelsResult { id, models }).await;
            }
            ClientMessage::Generate(g) => self.generate(*g).await,
            ClientMessage::Stop { target, id } => self.stop(target, id).await,
        }
    }

    async fn auth_failure(&mut self, reason: String, remaining: Option<u32>) {
        self.send(ServerMessage::AuthResult(AuthResult {
            remaining_attempts: remaining,
            ..AuthResult::failed(reason.clone())
        }))
        .await;
        self.error(ErrorCode::AuthFailed, reason, None).await;
    }

    async fn rate_limited(&mut self, wait: Duration) {
        let secs = retry_after_secs(wait);
        let message =
            format!("Too many failed authentication attempts. Try again in {secs} seconds.");
        self.send(ServerMessage::AuthResult(AuthResult {
            retry_after: Some(secs),
            ..AuthResult::failed(message.clone())
        }))
        .await;
        self.send(ServerMessage::Error(ErrorMessage {
            retry_after: Some(secs),
            ..error_fields(ErrorCode::RateLimited, message, None)
        }))
        .await;
    }

    async fn authenticate(&mut self, credentials: Result<Credentials, String>) {
        if self.client.is_some() {
            self.error(
                ErrorCode::InvalidRequest,
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
        let Credentials {
            client_id,
            signature,
        } = match credentials {
            Ok(c) => c,
            Err(reason) => {
                self.auth_failure(reason, None).await;
                return;
            }
        };
        let client_id = client_id.as_str();
        let now = Instant::now();
        let blocked = self.state.auth.limiter().blocked(self.peer, client_id, now);
        if let Some(wait) = blocked {
            tracing::info!(peer = %self.peer, %client_id, "authentication refused: rate limited");
            self.rate_limited(wait).await;
            return;
        }
        let state = self.state.clone();
        match check_signature(&state, client_id, &signature, &challenge).await {
            Ok(()) => {
                self.state.auth.limiter().success(self.peer, client_id);
                self.client = Some(client_id.to_owned());
                if let Err(e) = self.state.store.touch_client(client_id.to_owned()).await {
                    tracing::warn!(error = %e, "noting a client's last use failed");
                }
                tracing::info!(peer = %self.peer, %client_id, "client authenticated");
                self.send(ServerMessage::AuthResult(AuthResult {
                    success: true,
                    client_id: Some(client_id.to_owned()),
                    error: None,
                    remaining_attempts: None,
                    retry_after: None,
                }))
                .await;
            }
            Err(Denied::Internal(message)) => {
                self.send(ServerMessage::AuthResult(AuthResult::failed(
                    message.clone(),
                )))
                .await;
                self.error(ErrorCode::InternalError, message, None).await;
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

    async fn generate(&mut self, g: Generate) {
        let id =
            g.id.unwrap_or_else(|| WireId::Text(format!("req-{}", uuid::Uuid::new_v4().simple())));
        let key = id.key();
        if self.running.contains_key(&key) {
            self.error(
                ErrorCode::InvalidRequest,
                format!("a generation with id {key} is already running on this connection"),
                Some(&id),
            )
            .await;
            return;
        }
        if self.running.len() >= MAX_RUNNING_PER_SOCKET {
            self.error(
                ErrorCode::RateLimited,
                format!("at most {MAX_RUNNING_PER_SOCKET} generations may run at once on one connection"),
                Some(&id),
            )
            .await;
            return;
        }
        // Each registered client's prompt cache is its own (generating needs authenticating).
        let owner = hearth_engine::CacheOwner::caller(&format!(
            "client {}",
            self.client.as_deref().unwrap_or("")
        ));
        let prompt = match g.prompt {
            GeneratePrompt::Chat(messages) => Prompt::Chat(messages.into()),
            GeneratePrompt::Raw(text) => Prompt::Text(text),
        };
        let target = match self
            .state
            .router
            .resolve(g.model.as_deref(), Duration::ZERO)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                self.send(resolve_error(&e, &id)).await;
                return;
            }
        };
        // A model only remote providers serve: its context is theirs.
        let ctx = target.ctx().unwrap_or(u32::MAX);
        let params = match params_for(&g.options, ctx) {
            Ok(p) => p,
            Err(message) => {
                self.error(ErrorCode::InvalidRequest, message, Some(&id))
                    .await;
                return;
            }
        };
        let gen = match self.state.router.submit(
            &target,
            Request {
                prompt,
                params,
                owner,
            },
        ) {
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
        self.send(ServerMessage::StreamStart {
            id: id.clone(),
            model: model.to_string(),
        })
        .await;
        self.streams.push(event_stream(key.clone(), events));
        self.running.insert(key, Running { id, control });
    }

    async fn stop(&mut self, target: WireId, own_id: Option<WireId>) {
        let key = target.key();
        let Some(running) = self.running.get(&key) else {
            self.error(
                ErrorCode::InvalidRequest,
                format!("no generation with id {key} is running on this connection"),
                Some(&target),
            )
            .await;
            return;
        };
        let result = running.control.stop();
        match result {
            Ok(()) => {
                self.send(ServerMessage::Ack {
                    action: "stop",
                    request_id: target,
                    id: own_id,
                })
                .await;
            }
            Err(ControlError::Busy) => {
                self.error(
                    ErrorCode::RateLimited,
                    "the engine is busy; send stop again",
                    Some(&target),
                )
                .await;
            }
            Err(ControlError::Stopped) => {
                self.error(
                    ErrorCode::InternalError,
                    "the engine has stopped",
                    Some(&target),
                )
                .await;
            }
            Err(e @ ControlError::Unsupported(_)) => {
                self.error(ErrorCode::InvalidRequest, e.to_string(), Some(&target))
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
                    self.send(ServerMessage::StreamToken { id, token: t.text })
                        .await;
                }
            }
            Some(Event::Restarted | Event::Paused | Event::Resumed | Event::Modified) => {}
            Some(Event::Done(done)) => {
                self.running.remove(&key);
                self.send(ServerMessage::StreamEnd(StreamEnd {
                    id,
                    total_tokens: Some(done.usage.completion_tokens),
                    prompt_tokens: Some(done.usage.prompt_tokens),
                    elapsed_time: Some(done.timing.total.as_millis() as u64),
                    finish_reason: done.reason.as_str().to_owned(),
                    is_cancelled: done.reason == FinishReason::Cancelled,
                }))
                .await;
            }
            Some(Event::Error(f)) => {
                self.running.remove(&key);
                let code = match f.kind {
                    FailureKind::Decode | FailureKind::Unloaded => ErrorCode::GenerationFailed,
                    FailureKind::ShuttingDown => ErrorCode::InternalError,
                    FailureKind::Invalid => ErrorCode::InvalidRequest,
                };
                self.error(code, format!("generation failed: {}", f.message), Some(&id))
                    .await;
                // Cut by the node (shutdown, unload) rather than failed: the stream still
                // ends, so the reference client library's request ends too (NOTES.md).
                if matches!(f.kind, FailureKind::ShuttingDown | FailureKind::Unloaded) {
                    self.send(cancelled_end(id)).await;
                }
            }
            None => {
                self.running.remove(&key);
                self.error(
                    ErrorCode::GenerationFailed,
                    "the engine stopped unexpectedly",
                    Some(&id),
                )
                .await;
            }
        }
    }
}

/// The `stream_end` of a generation the node cut short, after its `error`.
fn cancelled_end(id: WireId) -> ServerMessage {
    ServerMessage::StreamEnd(StreamEnd {
        id,
        total_tokens: None,
        prompt_tokens: None,
        elapsed_time: None,
        finish_reason: "cancelled".into(),
        is_cancelled: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_64_fresh_hex_digits() {
        let a = new_challenge();
        let b = new_challenge();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
