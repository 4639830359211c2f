//! The streaming WebSocket door, `/generate` (`protocols/streaming-ws.md`). One session per
//! socket: `config` starts a generation (`init`, `token`s with cumulative `generated_text`,
//! `completion`); `control` stops, pauses, resumes, modifies or regenerates it; `feedback` is
//! stored in SQLite against the request id. While the model loads the client gets `status`
//! messages. Every bad message gets an `error` message and the session goes on.
//!
//! Decisions where the document is silent are listed in `hearth_protocol::streaming`.

use std::sync::Arc;
use std::time::Duration;

use crate::route::{self, Events, Generation, ResolveError};
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures_util::SinkExt;
use hearth_engine::{
    Done, Event, Failure, FailureKind, ModelInfo, ModelState, Prompt, Request, SubmitError,
    TokenEvent,
};
use hearth_protocol::limits::{MAX_FEEDBACK_TEXT_BYTES, MAX_WS_MESSAGE_BYTES, WS_READ_LIMIT_BYTES};
use hearth_protocol::streaming::{
    self as sw, parse_client_message, ClientMessage, Config, Control, ErrorKind, RecoveryAction,
    ServerMessage,
};
use hearth_protocol::{ChatMessage, ModelId, SamplingParams};
use tokio::sync::watch;

use super::ws::{classify, Incoming, BAD_UTF8_REASON, CLOSE_BAD_UTF8};
use super::AppState;
use crate::store::FeedbackRow;

/// Alternatives per token when `include_logprobs` is set and `top_logprobs` is not.
const DEFAULT_TOP_LOGPROBS: i64 = 5;
/// Most events written before one flush, so a burst never delays reading the client's
/// controls for long.
const MAX_BURST: usize = 64;
/// WebSocket close codes (RFC 6455).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_TOO_BIG: u16 = 1009;

pub(crate) async fn upgrade(State(state): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(WS_READ_LIMIT_BYTES)
        .max_frame_size(WS_READ_LIMIT_BYTES)
        .on_upgrade(move |socket| async move {
            let mut session = Session::new(state, socket);
            session.run().await;
        })
}

/// The generation a session is running.
struct Running {
    request_id: String,
    events: Events,
    control: route::Control,
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
}

struct Session {
    state: Arc<AppState>,
    socket: WebSocket,
    model_state: watch::Receiver<ModelState>,
    last_percent: Option<u8>,
    running: Option<Running>,
    waiting: Option<Waiting>,
    /// The last config, for `regenerate` after a generation finished.
    last_config: Option<Config>,
    /// The last request id, for `feedback`.
    last_request_id: Option<String>,
    open: bool,
    /// While true, messages are queued without flushing (a burst of ready events is written
    /// with one flush).
    batching: bool,
}

/// An error message, with the request it concerns.
fn error(
    kind: ErrorKind,
    message: impl Into<String>,
    recoverable: bool,
    action: RecoveryAction,
    request_id: Option<String>,
) -> ServerMessage {
    ServerMessage::Error(sw::ErrorMessage {
        error: kind,
        message: message.into(),
        recoverable,
        recovery_action: action,
        request_id,
    })
}

/// The model this socket waits for (or asked for) failed to load: not retryable as is.
fn load_failed(model: &ModelId, message: &str) -> ServerMessage {
    error(
        ErrorKind::ModelLoadingError,
        format!("model {model} failed to load: {message}"),
        false,
        RecoveryAction::None,
        None,
    )
}

fn invalid(message: impl Into<String>) -> ServerMessage {
    error(
        ErrorKind::InvalidRequest,
        message,
        true,
        RecoveryAction::FixRequest,
        None,
    )
}

fn status(
    operation: &str,
    progress: u8,
    message: impl Into<String>,
    eta: Option<f64>,
) -> ServerMessage {
    ServerMessage::Status(sw::Status {
        operation: operation.into(),
        progress,
        message: message.into(),
        eta_seconds: eta,
    })
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

impl Session {
    fn new(state: Arc<AppState>, socket: WebSocket) -> Self {
        let model_state = state.host.state();
        Self {
            state,
            socket,
            model_state,
            last_percent: None,
            running: None,
            waiting: None,
            last_config: None,
            last_request_id: None,
            open: true,
            batching: false,
        }
    }

    async fn send(&mut self, msg: &ServerMessage) {
        if !self.open {
            return;
        }
        let msg = Message::Text(Utf8Bytes::from(msg.to_json()));
        let sent = if self.batching {
            self.socket.feed(msg).await
        } else {
            self.socket.send(msg).await
        };
        if sent.is_err() {
            self.open = false;
        }
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

    fn loading(&self) -> bool {
        matches!(*self.model_state.borrow(), ModelState::Loading { .. })
    }

    async fn run(&mut self) {
        let shutdown = self.state.shutdown.clone();
        if self.loading() {
            self.report_loading().await;
        }
        while self.open {
            let watching_model = self.loading() || self.waiting.is_some();
            tokio::select! {
                msg = self.socket.recv() => match classify(msg) {
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
                    self.batching = true;
                    self.on_event(event).await;
                    for _ in 0..MAX_BURST {
                        let Some(ev) = self.running.as_mut().and_then(|r| r.events.try_recv()) else {
                            break;
                        };
                        self.on_event(Some(ev)).await;
                    }
                    self.batching = false;
                    if self.open && self.socket.flush().await.is_err() {
                        self.open = false;
                    }
                }
                changed = self.model_state.changed(), if watching_model => {
                    if changed.is_err() {
                        break;
                    }
                    self.on_model_state().await;
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
                    self.start(w.config).await;
                }
            }
            ModelState::Failed { model, message } => {
                if self.waiting.take().is_some() || self.last_percent.is_some() {
                    self.last_percent = None;
                    self.send(&load_failed(&model, &message)).await;
                }
            }
            ModelState::Stopped | ModelState::Unloaded => {
                if self.waiting.take().is_some() {
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
                    self.start(c).await;
                }
            }
            ClientMessage::Control(c) => self.on_control(c).await,
            ClientMessage::Feedback(f) => self.on_feedback(f).await,
        }
    }

    /// Validate a config and submit it; on success send `init`.
    async fn start(&mut self, config: Config) {
        // In hub mode a model that only workers serve is accepted: it runs on a worker, and
        // what this node knows of it is its name.
        let target = match self
            .state
            .router
            .resolve(config.model.as_deref(), Duration::ZERO)
            .await
        {
            Ok(t) => t,
            Err(ResolveError::Engine(SubmitError::ModelLoading { .. })) => {
                // Answer once the model is ready; meanwhile `status` messages flow.
                self.waiting = Some(Waiting { config });
                self.last_percent = None;
                self.report_loading().await;
                return;
            }
            Err(ResolveError::Engine(SubmitError::LoadFailed { model, message })) => {
                self.send(&load_failed(&model, &message)).await;
                return;
            }
            Err(ResolveError::Engine(e)) => {
                self.send(&submit_error(&e)).await;
                return;
            }
            Err(ResolveError::Unknown { requested, served }) => {
                let served: Vec<String> = served.iter().map(|m| format!("'{m}'")).collect();
                self.send(&invalid(format!(
                    "unknown model '{requested}': this node serves {}",
                    if served.is_empty() {
                        "no model".to_owned()
                    } else {
                        served.join(", ")
                    }
                )))
                .await;
                return;
            }
        };
        let info = target.local.clone();
        let top_logprobs = config
            .options
            .include_logprobs
            .then(|| config.options.top_logprobs.unwrap_or(DEFAULT_TOP_LOGPROBS));
        let mut params = match config.parameters.to_raw(top_logprobs).validate(
            &SamplingParams::default(),
            info.as_ref().map(|i| i.ctx_per_slot),
        ) {
            Ok(p) => p,
            Err(e) => {
                self.send(&invalid(format!("parameters.{}: {}", e.param, e.message)))
                    .await;
                return;
            }
        };
        // `logprobs` lists the chosen token and then N alternatives other than it: ask the
        // engine for one more than N so there are always N left after removing the chosen one.
        params.top_logprobs = params.top_logprobs.map(|n| n.saturating_add(1));
        let prompt = if config.options.raw {
            Prompt::Text(config.prompt.clone())
        } else {
            Prompt::Chat(vec![ChatMessage::new("user", config.prompt.clone())])
        };
        let max_tokens = params.max_tokens;
        let gen = match self
            .state
            .router
            .submit(&target, Request { prompt, params })
        {
            Ok(g) => g,
            Err(e) => {
                self.send(&submit_error(&e)).await;
                return;
            }
        };
        self.begin(gen, info.as_deref(), config, max_tokens).await;
    }

    async fn begin(
        &mut self,
        gen: Generation,
        info: Option<&ModelInfo>,
        config: Config,
        max_tokens: Option<u32>,
    ) {
        let request_id = format!("gen_{}", gen.id);
        self.send(&ServerMessage::Init(sw::Init {
            request_id: request_id.clone(),
            model: gen.model.to_string(),
            // A generation on a worker: this node knows its model's name only.
            model_info: info.map(|info| sw::ModelInfo {
                version: info
                    .gguf
                    .name
                    .clone()
                    .unwrap_or_else(|| info.id.to_string()),
                max_tokens: info.ctx_per_slot,
                quantization: info
                    .gguf
                    .quantization
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
                architecture: info.gguf.architecture.clone(),
                parameters: info.n_params,
            }),
        }))
        .await;
        let text = if config.options.echo_prompt {
            config.prompt.clone()
        } else {
            String::new()
        };
        self.last_request_id = Some(request_id.clone());
        self.running = Some(Running {
            request_id,
            events: gen.events,
            control: gen.control,
            prefix_len: text.len(),
            text,
            options: config.options.clone(),
            max_tokens,
            tokens: 0,
            modifications: std::collections::VecDeque::new(),
        });
        self.last_config = Some(config);
    }

    async fn on_event(&mut self, event: Option<Event>) {
        let Some(running) = self.running.as_mut() else {
            return;
        };
        match event {
            Some(Event::Token(t)) => {
                running.tokens += u32::from(t.id.is_some());
                running.text.push_str(&t.text);
                let msg = token_message(running, &t);
                if let Some(msg) = msg {
                    self.send(&msg).await;
                }
            }
            Some(Event::Paused) => {
                let p = running.progress();
                self.send(&status("pause", p, "Generation paused", None))
                    .await;
            }
            Some(Event::Resumed) => {
                let p = running.progress();
                self.send(&status("resume", p, "Generation resumed", None))
                    .await;
            }
            Some(Event::Modified) => {
                let p = running.progress();
                let what = running.modifications.pop_front().unwrap_or_default();
                self.send(&status("modify", p, format!("Updated {what}"), None))
                    .await;
            }
            Some(Event::Restarted) => {
                running.text.truncate(running.prefix_len);
                running.tokens = 0;
                self.send(&status(
                    "regenerate",
                    0,
                    "Generation restarted from the prompt",
                    None,
                ))
                .await;
            }
            Some(Event::Done(done)) => {
                let running = self.running.take().expect("running");
                self.send(&completion(running, &done)).await;
            }
            Some(Event::Error(f)) => {
                let running = self.running.take().expect("running");
                self.send(&failure(&f, running.request_id)).await;
            }
            None => {
                let running = self.running.take().expect("running");
                self.send(&error(
                    ErrorKind::InternalError,
                    "the engine stopped unexpectedly",
                    true,
                    RecoveryAction::Retry,
                    Some(running.request_id),
                ))
                .await;
            }
        }
    }

    async fn on_control(&mut self, control: Control) {
        if matches!(control, Control::Stop) && self.waiting.is_some() {
            // Stopped before the model finished loading: nothing was generated.
            self.waiting = None;
            self.send(&status(
                "stop",
                100,
                "Cancelled before generation started",
                None,
            ))
            .await;
            return;
        }
        let Some(running) = self.running.as_ref() else {
            if matches!(control, Control::Regenerate) {
                if let Some(config) = self.last_config.clone() {
                    self.start(config).await;
                    return;
                }
            }
            let hint = if self.last_config.is_none() {
                " (the first message must be a config message)"
            } else {
                ""
            };
            self.send(&invalid(format!(
                "no generation is running on this connection; '{}' needs one{hint}",
                control.name()
            )))
            .await;
            return;
        };
        let ctl = running.control.clone();
        let request_id = running.request_id.clone();
        let result = match &control {
            Control::Stop => ctl.stop(),
            Control::Pause => ctl.pause(),
            Control::Resume => ctl.resume(),
            Control::Regenerate => ctl.regenerate(),
            Control::Modify { parameters } => {
                let ctx = self.state.host.model().map(|m| m.ctx_per_slot);
                match parameters.to_raw(None).validate_patch(ctx) {
                    Ok(patch) if patch.is_empty() => {
                        self.send(&invalid("modify needs at least one parameter to change"))
                            .await;
                        return;
                    }
                    Ok(patch) => ctl.modify(patch),
                    Err(e) => {
                        self.send(&invalid(format!("parameters.{}: {}", e.param, e.message)))
                            .await;
                        return;
                    }
                }
            }
        };
        if let Err(e @ route::ControlError::Unsupported(_)) = result {
            self.send(&invalid(e.to_string())).await;
            return;
        }
        if let Err(e) = result {
            self.send(&error(
                ErrorKind::RateLimited,
                e.to_string(),
                true,
                RecoveryAction::RetryLater,
                Some(request_id),
            ))
            .await;
            return;
        }
        // The acknowledgement is sent when the engine reports the control took effect, so
        // that no token of the old state follows it.
        if let (Control::Modify { parameters }, Some(r)) = (&control, self.running.as_mut()) {
            let mut changed = Vec::new();
            for (name, set) in [
                ("temperature", parameters.temperature.is_some()),
                ("top_p", parameters.top_p.is_some()),
                ("top_k", parameters.top_k.is_some()),
                (
                    "repetition_penalty",
                    parameters.repetition_penalty.is_some(),
                ),
                ("seed", parameters.seed.is_some()),
                ("max_tokens", parameters.max_tokens.is_some()),
                ("stop", parameters.stop.is_some()),
            ] {
                if set {
                    changed.push(name);
                }
            }
            if let Some(m) = parameters.max_tokens {
                r.max_tokens = u32::try_from(m).ok();
            }
            r.modifications.push_back(changed.join(", "));
        }
    }

    async fn on_feedback(&mut self, f: sw::Feedback) {
        if !f.rating.is_finite() || !(-1.0..=1.0).contains(&f.rating) {
            self.send(&invalid(format!(
                "rating must be between -1 and 1, got {}",
                f.rating
            )))
            .await;
            return;
        }
        if f.text
            .as_ref()
            .is_some_and(|t| t.len() > MAX_FEEDBACK_TEXT_BYTES)
        {
            self.send(&invalid(format!(
                "feedback text may be at most {MAX_FEEDBACK_TEXT_BYTES} bytes"
            )))
            .await;
            return;
        }
        if f.position.is_some_and(|p| p < 0) {
            self.send(&invalid("position must be >= 0")).await;
            return;
        }
        let Some(request_id) = self.last_request_id.clone() else {
            self.send(&invalid(
                "feedback needs a generation to refer to; send a config first",
            ))
            .await;
            return;
        };
        let row = FeedbackRow {
            request_id: request_id.clone(),
            rating: f.rating,
            text: f.text,
            position: f.position,
        };
        match self.state.store.add_feedback(row).await {
            Ok(()) => {
                self.send(&status(
                    "feedback",
                    100,
                    format!("Feedback recorded for {request_id}"),
                    None,
                ))
                .await
            }
            Err(e) => {
                tracing::error!(error = %e, "storing feedback failed");
                self.send(&error(
                    ErrorKind::InternalError,
                    "feedback could not be stored",
                    true,
                    RecoveryAction::Retry,
                    Some(request_id),
                ))
                .await
            }
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

fn token_message(running: &Running, t: &TokenEvent) -> Option<ServerMessage> {
    let o = &running.options;
    if !o.stream {
        return None;
    }
    // Held-back text produces tokens without text; send them only when ids or logprobs were
    // asked for (every sampled token is then reported).
    let wants_every_token = (o.include_token_ids || o.include_logprobs) && t.id.is_some();
    if t.text.is_empty() && !wants_every_token {
        return None;
    }
    let logprobs = if o.include_logprobs {
        t.logprobs.as_ref().map(|lp| {
            let mut v = vec![sw::TokenLogprob {
                token: lp.token.text.clone(),
                logprob: lp.token.logprob,
            }];
            v.extend(
                lp.top
                    .iter()
                    .filter(|c| c.id != lp.token.id)
                    .take(lp.top.len().saturating_sub(1))
                    .map(|c| sw::TokenLogprob {
                        token: c.text.clone(),
                        logprob: c.logprob,
                    }),
            );
            v
        })
    } else {
        None
    };
    Some(ServerMessage::Token(sw::Token {
        token: t.text.clone(),
        token_id: if o.include_token_ids { t.id } else { None },
        generated_text: running.text.clone(),
        logprobs,
        timing: o.include_timing.then(|| sw::TokenTiming {
            token_ms: ms(t.since_prev),
            total_ms: ms(t.elapsed),
        }),
        finish_reason: None,
        finished: false,
    }))
}

fn completion(running: Running, done: &Done) -> ServerMessage {
    ServerMessage::Completion(sw::Completion {
        request_id: running.request_id,
        generated_text: running.text,
        finish_reason: done.reason.as_str().to_owned(),
        usage: done.usage,
        timing: running
            .options
            .include_timing
            .then(|| sw::CompletionTiming {
                first_token_ms: done.timing.first_token.map_or(0.0, ms),
                total_ms: ms(done.timing.total),
            }),
    })
}

fn failure(f: &Failure, request_id: String) -> ServerMessage {
    match f.kind {
        FailureKind::ShuttingDown => error(
            ErrorKind::ServerShutdown,
            f.message.clone(),
            true,
            RecoveryAction::Reconnect,
            Some(request_id),
        ),
        FailureKind::Unloaded => error(
            ErrorKind::ModelLoadingError,
            f.message.clone(),
            true,
            RecoveryAction::RetryLater,
            Some(request_id),
        ),
        FailureKind::Decode => error(
            ErrorKind::InternalError,
            f.message.clone(),
            true,
            RecoveryAction::Retry,
            Some(request_id),
        ),
    }
}

fn submit_error(e: &SubmitError) -> ServerMessage {
    let message = e.to_string();
    match e {
        SubmitError::ContextLengthExceeded { .. } => error(
            ErrorKind::ContextLengthExceeded,
            message,
            true,
            RecoveryAction::ReducePrompt,
            None,
        ),
        SubmitError::QueueFull { .. } => error(
            ErrorKind::RateLimited,
            message,
            true,
            RecoveryAction::RetryLater,
            None,
        ),
        SubmitError::ModelLoading { .. } => error(
            ErrorKind::ModelLoadingError,
            message,
            true,
            RecoveryAction::RetryLater,
            None,
        ),
        SubmitError::LoadFailed { .. } => error(
            ErrorKind::ModelLoadingError,
            message,
            false,
            RecoveryAction::None,
            None,
        ),
        SubmitError::Prompt(_) => error(
            ErrorKind::InvalidRequest,
            message,
            true,
            RecoveryAction::FixRequest,
            None,
        ),
        SubmitError::NoModel => error(
            ErrorKind::ModelLoadingError,
            message,
            true,
            RecoveryAction::RetryLater,
            None,
        ),
        SubmitError::ShuttingDown => error(
            ErrorKind::ServerShutdown,
            message,
            true,
            RecoveryAction::Reconnect,
            None,
        ),
    }
}
