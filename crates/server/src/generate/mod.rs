//! The streaming WebSocket door, `/generate` (`protocols/streaming-ws.md`). One session per
//! socket: `config` starts a generation (`init`, `token`s with cumulative `generated_text`,
//! `completion`); `control` stops, pauses, resumes, modifies or regenerates it; `feedback` is
//! stored in SQLite against the request id. While the model loads the client gets `status`
//! messages. Every bad message gets an `error` message and the session goes on.
//!
//! Decisions where the document is silent are listed in `hearth_protocol::streaming`.
//!
//! Here: the session and its socket loop (messages in, engine events and model-state changes
//! out); `start` resolves, validates and submits a config; `events` turns engine events into
//! messages; `control` handles controls and feedback; `messages` builds status and errors.

mod control;
mod events;
mod messages;
mod start;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use hearth_engine::{Event, ModelState};
use hearth_protocol::limits::{MAX_WS_MESSAGE_BYTES, WS_READ_LIMIT_BYTES};
use hearth_protocol::streaming::{
    self as sw, parse_client_message, ClientMessage, Config, ErrorKind, RecoveryAction,
    ServerMessage,
};
use hearth_route::{self, Events};
use tokio::sync::watch;

use self::messages::{error, invalid, load_failed, status};
use super::ws::{DoorSocket, Incoming, BAD_UTF8_REASON, CLOSE_BAD_UTF8};
use crate::state::AppState;

/// Most events written before one flush, so a burst never delays reading the client's
/// controls for long.
const MAX_BURST: usize = 64;
/// WebSocket close codes (RFC 6455).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_TOO_BIG: u16 = 1009;

pub(crate) async fn upgrade(
    State(state): State<Arc<AppState>>,
    caller: crate::caller::Caller,
    ws: WebSocketUpgrade,
) -> Response {
    let owner = caller.cache_owner();
    ws.max_message_size(WS_READ_LIMIT_BYTES)
        .max_frame_size(WS_READ_LIMIT_BYTES)
        .on_upgrade(move |socket| async move {
            let mut session = Session::new(state, socket, owner);
            session.run().await;
        })
}

/// The generation a session is running.
struct Running {
    request_id: String,
    events: Events,
    control: hearth_route::Control,
    /// `generated_text` so far (with the prompt in front when `echo_prompt`).
    text: String,
    prefix_len: usize,
    options: sw::Options,
    max_tokens: Option<u32>,
    tokens: u32,
    /// Descriptions of `modify` controls not yet acknowledged by the engine.
    modifications: std::collections::VecDeque<String>,
}

impl Running {
    /// Share of `max_tokens` generated so far, for status messages.
    fn progress(&self) -> u8 {
        self.max_tokens
            .map(|m| ((u64::from(self.tokens) * 100) / u64::from(m.max(1))).min(100) as u8)
            .unwrap_or(0)
    }
}

/// A config that arrived while the model was loading.
struct Waiting {
    config: Config,
    /// The model loads where no engine of this node shows it (a split model's worker): the
    /// config is tried again at this time (every [`POLL_LOAD`]) instead of waiting on a state
    /// channel.
    poll_at: Option<tokio::time::Instant>,
}

/// How often a config waiting for a model loaded elsewhere is tried again.
pub(super) const POLL_LOAD: Duration = Duration::from_secs(1);

struct Session {
    state: Arc<AppState>,
    socket: DoorSocket,
    model_state: watch::Receiver<ModelState>,
    last_percent: Option<u8>,
    running: Option<Running>,
    waiting: Option<Waiting>,
    /// The last config, for `regenerate` after a generation finished.
    last_config: Option<Config>,
    /// The last request id, for `feedback`.
    last_request_id: Option<String>,
    /// Whose prompt cache its generations read (the socket's caller).
    owner: hearth_engine::CacheOwner,
}

impl Session {
    fn new(state: Arc<AppState>, socket: WebSocket, owner: hearth_engine::CacheOwner) -> Self {
        let model_state = state.host.state();
        Self {
            state,
            socket: DoorSocket::new(socket),
            model_state,
            last_percent: None,
            running: None,
            waiting: None,
            last_config: None,
            last_request_id: None,
            owner,
        }
    }

    async fn send(&mut self, msg: &ServerMessage) {
        self.socket.send_text(msg.to_json()).await;
    }

    async fn close(&mut self, code: u16, reason: &str) {
        self.socket.close(code, reason).await;
    }

    /// Follow the focus model's state again (after waiting for another's load).
    pub(super) fn follow_focus(&mut self) {
        self.model_state = self.state.host.state();
    }

    fn loading(&self) -> bool {
        matches!(*self.model_state.borrow(), ModelState::Loading { .. })
    }

    async fn run(&mut self) {
        let shutdown = self.state.shutdown.clone();
        if self.loading() {
            self.report_loading().await;
        }
        while self.socket.is_open() {
            let poll_at = self.waiting.as_ref().and_then(|w| w.poll_at);
            let watching_model = self.loading() || (self.waiting.is_some() && poll_at.is_none());
            tokio::select! {
                incoming = self.socket.recv() => match incoming {
                    Incoming::Text(text) => self.on_text(text.as_str()).await,
                    Incoming::Binary => {
                        self.send(&invalid("binary messages are not supported; send JSON text messages")).await;
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
                event = next_event(&mut self.running) => {
                    // Write every event that is already waiting, then flush once.
                    self.socket.begin_burst();
                    self.on_event(event).await;
                    for _ in 0..MAX_BURST {
                        let Some(ev) = self.running.as_mut().and_then(|r| r.events.try_recv()) else {
                            break;
                        };
                        self.on_event(Some(ev)).await;
                    }
                    self.socket.end_burst().await;
                }
                changed = self.model_state.changed(), if watching_model => {
                    if changed.is_err() {
                        break;
                    }
                    self.on_model_state().await;
                }
                () = tokio::time::sleep_until(poll_at.unwrap_or_else(tokio::time::Instant::now)), if poll_at.is_some() => {
                    if let Some(w) = self.waiting.take() {
                        self.start(w.config, true).await;
                    }
                }
                () = shutdown.cancelled() => {
                    let request_id = self.running.as_ref().map(|r| r.request_id.clone());
                    self.send(&error(
                        ErrorKind::ServerShutdown,
                        "the server is shutting down",
                        true,
                        RecoveryAction::Reconnect,
                        request_id,
                    )).await;
                    self.close(CLOSE_GOING_AWAY, "server shutting down").await;
                    break;
                }
            }
        }
        // Dropping `running` drops the event receiver, which cancels the generation.
    }

    async fn too_big(&mut self) {
        self.send(&error(
            ErrorKind::InvalidRequest,
            format!(
                "message larger than the {} MiB limit",
                MAX_WS_MESSAGE_BYTES >> 20
            ),
            false,
            RecoveryAction::FixRequest,
            self.running.as_ref().map(|r| r.request_id.clone()),
        ))
        .await;
        self.close(CLOSE_TOO_BIG, "message too big").await;
    }

    async fn report_loading(&mut self) {
        let st = self.model_state.borrow().clone();
        if let ModelState::Loading {
            model, progress, ..
        } = &st
        {
            let percent = (progress * 100.0).floor().clamp(0.0, 99.0) as u8;
            if self.last_percent != Some(percent) {
                self.last_percent = Some(percent);
                self.send(&status(
                    "model_loading",
                    percent,
                    format!("Loading model {model}"),
                    st.eta_seconds(),
                ))
                .await;
            }
        }
    }

    async fn on_model_state(&mut self) {
        let st = self.model_state.borrow_and_update().clone();
        // A config waiting for a model loaded elsewhere is tried again on its own.
        if self.waiting.as_ref().is_some_and(|w| w.poll_at.is_some()) {
            if matches!(st, ModelState::Loading { .. }) {
                self.report_loading().await;
            }
            return;
        }
        match st {
            ModelState::Loading { .. } => self.report_loading().await,
            ModelState::Ready(info) => {
                if self.last_percent.is_some() {
                    self.last_percent = None;
                    self.send(&status(
                        "model_loading",
                        100,
                        format!("Model {} loaded", info.id),
                        Some(0.0),
                    ))
                    .await;
                }
                if let Some(w) = self.waiting.take() {
                    self.follow_focus();
                    self.start(w.config, false).await;
                }
            }
            ModelState::Failed { model, message } => {
                if self.waiting.is_some() {
                    self.follow_focus();
                }
                if self.waiting.take().is_some() || self.last_percent.is_some() {
                    self.last_percent = None;
                    self.send(&load_failed(&model, &message)).await;
                }
            }
            ModelState::Stopped | ModelState::Unloaded => {
                if self.waiting.take().is_some() {
                    self.follow_focus();
                    self.send(&error(
                        ErrorKind::ModelLoadingError,
                        "the model was unloaded before it finished loading",
                        true,
                        RecoveryAction::RetryLater,
                        None,
                    ))
                    .await;
                }
            }
        }
    }

    async fn on_text(&mut self, text: &str) {
        let msg = match parse_client_message(text) {
            Ok(m) => m,
            Err(e) => {
                let hint = if self.last_config.is_none() && self.running.is_none() {
                    " (the first message must be a config message)"
                } else {
                    ""
                };
                self.send(&invalid(format!("{e}{hint}"))).await;
                return;
            }
        };
        match msg {
            ClientMessage::Config(c) => {
                if self.running.is_some() || self.waiting.is_some() {
                    self.send(&invalid(
                        "a generation is already running on this connection; stop it first",
                    ))
                    .await;
                } else {
                    self.start(c, false).await;
                }
            }
            ClientMessage::Control(c) => self.on_control(c).await,
            ClientMessage::Feedback(f) => self.on_feedback(f).await,
        }
    }
}

/// The next event of the running generation; pends forever when there is none.
async fn next_event(running: &mut Option<Running>) -> Option<Event> {
    match running {
        Some(r) => r.events.recv().await,
        None => std::future::pending().await,
    }
}
