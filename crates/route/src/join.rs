//! Worker mode, the node side of `protocols/worker-node.md`: `hearth-node serve --join
//! ws://HOST:PORT/PATH --join-token T` connects to a hub and serves its tasks with the local
//! engine.
//!
//! ## How it runs
//! [`run`] waits until the node's model is ready, connects with `token`, `model` (the model's
//! id), `max_concurrency` (the engine's slots unless configured) and `name`, and then runs one
//! session: tasks are JSON text frames; each task gets its own runner (`crate::task`) that
//! starts it through the route on this node's model and streams binary frames (4-byte
//! big-endian id + UTF-8 text, whole characters only, ready tokens coalesced up to
//! [`wp::MAX_FRAME_TEXT_BYTES`]); a 4-byte frame ends the task. All frames go through one
//! bounded outbox to the socket, so a task's frames stay in order. An empty text frame goes
//! out every 10 s as the keepalive. Before the connection closes because this node stops
//! (shutdown, quit, a model change), every running task gets its end frame.
//!
//! ## Decisions
//! - **Stop** (`{"id":N,"stop":true}`): the runner is cancelled, the engine frees the slot at
//!   its next step, and nothing more is sent for that task (the hub has already forgotten it;
//!   frames still queued for it are dropped).
//! - **Refused tasks**, as the document says, are logged as warnings and not processed: a
//!   task whose `state` is not 0, a frame that is not a task (bad JSON, an id that does not fit
//!   in 32 bits), a stop for a task this node is not running, a second task with a running id.
//! - **Failures of an accepted task** (a prompt longer than the context, bad parameter values,
//!   an engine error) end only that task: the error is logged and the end frame is sent so the
//!   hub's slot is released. The reference node disconnects instead, which would lose every
//!   other task on the connection. A Hearth hub also gets `{"id":N,"error":{...}}` first.
//! - **`max_new_tokens`** above the context is capped at the context (hubs ask for what their
//!   own model allows); 0 or less is refused. A missing `temperature` uses the node's default.
//! - **Reconnects**: after any error or close the worker reconnects with exponential backoff
//!   (1 s doubling to 60 s) and equal jitter; a connection that lasted 30 s resets it. In-flight
//!   tasks are cancelled, not resent (the hub re-dispatches them).
//! - **Model changes**: loading another model ends the session (close 1000) and the worker
//!   joins again with the new model once it is ready.
//! - **Limits**: a message over 4 MiB from the hub closes the connection with 1009
//!   (DESIGN.md §3) and the worker reconnects.
//! - Only `ws://` is supported: this build has no TLS for outbound WebSockets.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hearth_engine::{ModelInfo, ModelState};
use hearth_protocol::limits::{MAX_WS_MESSAGE_BYTES, WS_READ_LIMIT_BYTES};
use hearth_protocol::worker::{self as wp, HubMessage, Task, TaskFailure, TaskId};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

use crate::router::Router;
use crate::task::{self, Outgoing};
use hearth_models::ModelHost;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Keepalive period (NOTES.md: the reference nodes send one every 10 s).
const KEEPALIVE_EVERY: Duration = Duration::from_secs(wp::KEEPALIVE_INTERVAL_SECS);
/// How long a connection attempt (TCP + upgrade) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A connection that lasted this long was healthy: the next failure starts the backoff over.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// Frames from all tasks waiting for the socket. Runners wait when it is full, so a slow hub
/// holds generation back instead of growing memory.
const OUTBOX_CAPACITY: usize = 256;
/// Most frames written before one flush.
const MAX_BURST: usize = 64;
/// How long a close frame may take to go out.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// How this node joins a hub (`--join`, `--join-token`).
#[derive(Clone)]
pub struct JoinConfig {
    /// `ws://HOST:PORT/PATH`; the protocol's query parameters are appended.
    pub url: String,
    /// The hub's token. Never logged.
    pub token: String,
    /// This node's name as the hub lists it.
    pub name: String,
    /// Tasks at once; `None` = the engine's slots.
    pub max_concurrency: Option<usize>,
}

impl fmt::Debug for JoinConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinConfig")
            .field("url", &without_query(&self.url))
            .field("token", &"<redacted>")
            .field("name", &self.name)
            .field("max_concurrency", &self.max_concurrency)
            .finish()
    }
}

/// Why a `--join` setting cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    #[error("--join must be a ws:// URL (ws://HOST:PORT/PATH), got '{0}'")]
    Url(String),
    #[error("--join-token must not be empty")]
    EmptyToken,
    #[error("--name must not be empty in worker mode")]
    EmptyName,
}

impl JoinConfig {
    /// Check the settings before starting (the CLI reports the error and exits).
    pub fn validate(&self) -> Result<(), JoinError> {
        let rest = self
            .url
            .strip_prefix("ws://")
            .ok_or_else(|| JoinError::Url(without_query(&self.url).to_owned()))?;
        let host = rest.split(['/', '?']).next().unwrap_or("");
        if host.is_empty() || self.url.parse::<tungstenite::http::Uri>().is_err() {
            return Err(JoinError::Url(without_query(&self.url).to_owned()));
        }
        if self.token.is_empty() {
            return Err(JoinError::EmptyToken);
        }
        if self.name.trim().is_empty() {
            return Err(JoinError::EmptyName);
        }
        Ok(())
    }

    /// The URL with the protocol's query parameters (and `hearth=1`, Hearth's extension, with
    /// `vision=1` when the model sees images).
    fn url_for(&self, model: &str, max_concurrency: usize, vision: bool) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let sees = if vision {
            format!("&{}=1", wp::VISION_QUERY_PARAM)
        } else {
            String::new()
        };
        format!(
            "{}{sep}token={}&model={}&max_concurrency={max_concurrency}&name={}&{}=1{sees}",
            self.url,
            encode(&self.token),
            encode(model),
            encode(&self.name),
            wp::HEARTH_QUERY_PARAM,
        )
    }
}

fn without_query(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

/// Percent-encode everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    /// Everything but RFC 3986's unreserved characters.
    const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, QUERY_VALUE).to_string()
}

/// Serve a hub's tasks until `shutdown` is cancelled: connect, serve, reconnect after any
/// error. Spawn it once per node (the node keeps the handle and awaits it on shutdown).
pub async fn run(config: JoinConfig, router: Router, shutdown: CancellationToken) {
    let host = router.host().clone();
    let mut delays = backoff();
    let hub = without_query(&config.url).to_owned();
    loop {
        let ready = tokio::select! {
            r = host.ready() => r,
            () = shutdown.cancelled() => return,
        };
        let info = match ready {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(%hub, error = %e, "worker mode: no model to serve; waiting for one");
                let mut state = host.state();
                tokio::select! {
                    _ = state.changed() => {}
                    () = shutdown.cancelled() => return,
                }
                continue;
            }
        };
        let max_concurrency = config.max_concurrency.unwrap_or(info.slots).max(1);
        let url = config.url_for(info.id.as_str(), max_concurrency, info.vision);
        let connected = tokio::select! {
            r = tokio::time::timeout(CONNECT_TIMEOUT, connect(&url)) => r,
            () = shutdown.cancelled() => return,
        };
        match connected {
            Ok(Ok((mut ws, extensions))) => {
                let since = Instant::now();
                tracing::info!(%hub, model = %info.id, max_concurrency, name = %config.name, extensions, "joined the hub");
                let origin: Arc<str> = format!("hub {hub}").into();
                let mut session =
                    Session::new(router.clone(), info, max_concurrency, extensions, origin);
                match session.run(&mut ws, &shutdown).await {
                    End::Shutdown => return,
                    End::ModelChanged => {
                        tracing::info!(%hub, "the model changed; joining again with the new one");
                        delays = backoff();
                        continue;
                    }
                    End::Lost(reason) => {
                        tracing::warn!(%hub, %reason, "lost the connection to the hub; tasks in flight were cancelled");
                    }
                }
                if since.elapsed() >= STABLE_AFTER {
                    delays = backoff();
                }
            }
            Ok(Err(e)) => tracing::warn!(%hub, error = %e, "could not connect to the hub"),
            Err(_) => tracing::warn!(%hub, "connecting to the hub timed out"),
        }
        let delay = delays.next().unwrap_or(BACKOFF_MAX);
        tracing::info!(%hub, retry_in_ms = delay.as_millis() as u64, "reconnecting to the hub");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Open the socket; `true` when the hub is a Hearth hub (it understands the extension frames).
async fn connect(url: &str) -> Result<(Socket, bool), tungstenite::Error> {
    let config = WebSocketConfig::default()
        .max_message_size(Some(WS_READ_LIMIT_BYTES))
        .max_frame_size(Some(WS_READ_LIMIT_BYTES));
    let (ws, response) =
        tokio_tungstenite::connect_async_with_config(url, Some(config), true).await?;
    let extensions = response.headers().contains_key(wp::HEARTH_HUB_HEADER);
    Ok((ws, extensions))
}

/// Reconnect delays: exponential with equal jitter, capped at [`BACKOFF_MAX`].
fn backoff() -> backon::ExponentialBackoff {
    hearth_base::backoff::jittered(BACKOFF_FIRST, BACKOFF_MAX)
}

/// Why a session ended.
#[derive(Debug)]
enum End {
    Shutdown,
    ModelChanged,
    Lost(String),
}

/// A task this node is running; `seq` tells it apart from an earlier task with the same id.
#[derive(Debug)]
struct Running {
    seq: u64,
    cancel: CancellationToken,
}

/// One connection's worth of state.
#[derive(Debug)]
struct Session {
    host: Arc<ModelHost>,
    router: Router,
    model: Arc<ModelInfo>,
    max_concurrency: usize,
    /// The hub is a Hearth hub: send `done` / `error` text frames before end frames.
    extensions: bool,
    /// The hub, as the prompt cache names the origin of its tasks.
    origin: Arc<str>,
    running: HashMap<TaskId, Running>,
    runners: JoinSet<()>,
    runner_tasks: HashMap<tokio::task::Id, (TaskId, u64)>,
    seq: u64,
    out_tx: mpsc::Sender<Outgoing>,
    out_rx: mpsc::Receiver<Outgoing>,
}

impl Session {
    fn new(
        router: Router,
        model: Arc<ModelInfo>,
        max_concurrency: usize,
        extensions: bool,
        origin: Arc<str>,
    ) -> Self {
        let (out_tx, out_rx) = mpsc::channel(OUTBOX_CAPACITY);
        Self {
            origin,
            host: router.host().clone(),
            router,
            model,
            max_concurrency,
            extensions,
            running: HashMap::new(),
            runners: JoinSet::new(),
            runner_tasks: HashMap::new(),
            seq: 0,
            out_tx,
            out_rx,
        }
    }

    /// Serve until the connection ends. Dropping the session afterwards aborts every runner,
    /// which drops its generation and so frees its engine slot.
    async fn run(&mut self, ws: &mut Socket, shutdown: &CancellationToken) -> End {
        let mut keepalive = tokio::time::interval_at(
            tokio::time::Instant::now() + KEEPALIVE_EVERY,
            KEEPALIVE_EVERY,
        );
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A fresh subscription has seen the current state: only changes wake the loop.
        let mut model_state = self.host.state();
        loop {
            tokio::select! {
                msg = ws.next() => match msg {
                    Some(Ok(Message::Text(text))) => {
                        if text.len() > MAX_WS_MESSAGE_BYTES {
                            tracing::warn!(bytes = text.len(), "the hub sent a message over the 4 MiB limit; closing the connection");
                            close(ws, CloseCode::Size, "message too big").await;
                            return End::Lost("the hub sent a message over the size limit".into());
                        }
                        self.on_text(text.as_str());
                    }
                    Some(Ok(Message::Binary(b))) => {
                        tracing::warn!(bytes = b.len(), "ignoring a binary message from the hub (tasks are JSON text)");
                    }
                    Some(Ok(Message::Close(frame))) => return End::Lost(describe_close(frame.as_ref())),
                    Some(Ok(_)) => {} // ping/pong: answered by the library
                    Some(Err(e)) => return End::Lost(format!("reading failed: {e}")),
                    None => return End::Lost("the hub closed the connection".into()),
                },
                Some(out) = self.out_rx.recv() => {
                    if let Err(e) = self.write(ws, out).await {
                        return End::Lost(format!("writing failed: {e}"));
                    }
                }
                _ = keepalive.tick() => {
                    if let Err(e) = ws.send(Message::text("")).await {
                        return End::Lost(format!("writing the keepalive failed: {e}"));
                    }
                }
                Some(joined) = self.runners.join_next_with_id(), if !self.runners.is_empty() => {
                    self.on_joined(joined);
                }
                changed = model_state.changed() => {
                    if changed.is_err() {
                        close(ws, CloseCode::Away, "node shutting down").await;
                        return End::Shutdown;
                    }
                    let next = model_state.borrow_and_update().clone();
                    match next {
                        ModelState::Ready(info) if info.id == self.model.id => self.model = info,
                        _ => {
                            self.goodbye(ws).await;
                            close(ws, CloseCode::Normal, "the node's model changed").await;
                            return End::ModelChanged;
                        }
                    }
                }
                () = shutdown.cancelled() => {
                    self.goodbye(ws).await;
                    close(ws, CloseCode::Away, "node shutting down").await;
                    return End::Shutdown;
                }
            }
        }
    }

    /// Before the connection closes because this node stops: every running task gets its end
    /// frame (a Hearth hub first the `worker_stopping` error, so it places the task again). The
    /// reference server never ends the tasks of a closed connection: without the end frames its
    /// user's answer would stay open until its 10-minute timeout (NOTES.md).
    async fn goodbye(&mut self, ws: &mut Socket) {
        let running: Vec<(TaskId, Running)> = self.running.drain().collect();
        if running.is_empty() {
            return;
        }
        tracing::info!(
            tasks = running.len(),
            "ending the running tasks before leaving the hub"
        );
        let stopping = TaskFailure {
            code: wp::WORKER_STOPPING.into(),
            message: "the worker node is stopping".into(),
        };
        let send = async {
            for (id, r) in running {
                r.cancel.cancel();
                if self.extensions {
                    ws.feed(Message::text(wp::error_frame(id, &stopping)))
                        .await?;
                }
                ws.feed(Message::binary(wp::encode_end(id))).await?;
            }
            ws.flush().await
        };
        if let Ok(Err(e)) = tokio::time::timeout(CLOSE_WAIT, send).await {
            tracing::warn!(error = %e, "could not end the running tasks before leaving the hub");
        }
    }

    /// Write `first` and whatever else is ready (up to a burst), then flush once.
    async fn write(&mut self, ws: &mut Socket, first: Outgoing) -> Result<(), tungstenite::Error> {
        let mut next = Some(first);
        let mut written = 0;
        while let Some(out) = next.take() {
            if self.admit(&out) {
                ws.feed(out.msg).await?;
                written += 1;
                if written >= MAX_BURST {
                    break;
                }
            }
            next = self.out_rx.try_recv().ok();
        }
        ws.flush().await
    }

    /// Whether a runner's frame still belongs on the wire: not for a task the hub stopped
    /// (or an earlier task with the same id). The end frame retires the task.
    fn admit(&mut self, out: &Outgoing) -> bool {
        let current = self.running.get(&out.id).is_some_and(|r| r.seq == out.seq);
        if current && out.last {
            self.running.remove(&out.id);
        }
        current
    }

    fn on_joined(&mut self, joined: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let tid = match &joined {
            Ok((tid, ())) => *tid,
            Err(e) => e.id(),
        };
        let Some((id, seq)) = self.runner_tasks.remove(&tid) else {
            return;
        };
        if let Err(e) = joined {
            // A runner that panicked never sent its end frame; forget the task so its slot
            // counts as free (the hub learns nothing, as with any lost task).
            tracing::error!(task = %id, error = %e, "a task runner failed");
            if self.running.get(&id).is_some_and(|r| r.seq == seq) {
                self.running.remove(&id);
            }
        }
    }

    fn on_text(&mut self, text: &str) {
        match wp::parse_hub_text(text) {
            Ok(None) => {} // the hub's own keepalive, if it sends one
            Ok(Some(HubMessage::Stop { id })) => match self.running.remove(&id) {
                Some(r) => {
                    r.cancel.cancel();
                    tracing::info!(task = %id, "the hub stopped a task");
                }
                None => {
                    tracing::warn!(task = %id, "the hub stopped a task this node is not running; ignored");
                }
            },
            Ok(Some(HubMessage::Task(task))) => self.start(*task),
            Err(e) => tracing::warn!(error = %e, "ignoring a message from the hub"),
        }
    }

    fn start(&mut self, task: Task) {
        let id = task.id;
        if !task.is_pending() {
            tracing::warn!(task = %id, state = task.state, "the task is not pending; not processing it");
            return;
        }
        if self.running.contains_key(&id) {
            tracing::warn!(task = %id, "a task with this id is already running; ignoring the new one");
            return;
        }
        if self.running.len() >= self.max_concurrency {
            tracing::warn!(
                task = %id,
                running = self.running.len(),
                max_concurrency = self.max_concurrency,
                "the hub sent more tasks than max_concurrency; this one waits for a free slot"
            );
        }
        self.seq += 1;
        let cancel = CancellationToken::new();
        self.running.insert(
            id,
            Running {
                seq: self.seq,
                cancel: cancel.clone(),
            },
        );
        let runner = task::Runner {
            id,
            seq: self.seq,
            router: self.router.clone(),
            model: self.model.clone(),
            out: self.out_tx.clone(),
            cancel,
            extensions: self.extensions,
            origin: self.origin.clone(),
        };
        let handle = self.runners.spawn(runner.run(task));
        self.runner_tasks.insert(handle.id(), (id, self.seq));
    }
}

async fn close(ws: &mut Socket, code: CloseCode, reason: &str) {
    let frame = CloseFrame {
        code,
        reason: reason.into(),
    };
    let _ = tokio::time::timeout(CLOSE_WAIT, ws.close(Some(frame))).await;
}

/// A hub's close frame in words, with what to do about it.
fn describe_close(frame: Option<&CloseFrame>) -> String {
    let Some(f) = frame else {
        return "the hub closed the connection".into();
    };
    match u16::from(f.code) {
        wp::CLOSE_MISSING_PARAMETER => format!("the hub says a query parameter is missing or unusable ({})", f.reason),
        wp::CLOSE_BAD_TOKEN => "the hub refused the token (check --join-token)".into(),
        wp::CLOSE_SUPERSEDED => "another connection with the same model and name replaced this one (is another node using this --name?)".into(),
        code => format!("the hub closed the connection (code {code}: {})", f.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join() -> JoinConfig {
        JoinConfig {
            url: "ws://10.0.0.5:8080/node".into(),
            token: "s3cret&x=y".into(),
            name: "desk pc".into(),
            max_concurrency: None,
        }
    }

    #[test]
    fn url_carries_the_documents_parameters_encoded() {
        let url = join().url_for("SmolLM2-135M-Instruct.Q4_1", 4, false);
        assert_eq!(
            url,
            "ws://10.0.0.5:8080/node?token=s3cret%26x%3Dy&model=SmolLM2-135M-Instruct.Q4_1&max_concurrency=4&name=desk%20pc&hearth=1"
        );
        let mut c = join();
        c.url = "ws://h:1/p?region=eu".into();
        assert!(c
            .url_for("m", 1, false)
            .starts_with("ws://h:1/p?region=eu&token="));
        assert!(c.url_for("m", 1, true).ends_with("&hearth=1&vision=1"));
    }

    #[test]
    fn validation_and_redaction() {
        assert_eq!(join().validate(), Ok(()));
        for bad in [
            "http://h/node",
            "wss://h/node",
            "ws://",
            "ws:///node",
            "h:1/node",
        ] {
            let mut c = join();
            c.url = bad.into();
            assert!(matches!(c.validate(), Err(JoinError::Url(_))), "{bad}");
        }
        let mut c = join();
        c.token.clear();
        assert_eq!(c.validate(), Err(JoinError::EmptyToken));
        let shown = format!("{:?}", join());
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter_and_resets() {
        let ceilings = [1, 2, 4, 8, 16, 32, 60, 60, 60];
        for round in 0..2 {
            // A fresh backoff (the reset after a stable connection) starts over.
            let mut delays = backoff();
            for ceiling in ceilings {
                let c = Duration::from_secs(ceiling);
                let d = delays.next().expect("never runs out");
                assert!(
                    d >= c / 2 && d <= c,
                    "round {round}: {d:?} not within [{:?}, {c:?}]",
                    c / 2
                );
            }
        }
        let mut delays = backoff();
        assert!(
            delays.by_ref().take(100).all(|d| d <= BACKOFF_MAX),
            "never beyond the cap"
        );
    }

    #[test]
    fn close_codes_are_explained() {
        let f = |code: u16| CloseFrame {
            code: CloseCode::from(code),
            reason: "r".into(),
        };
        assert!(describe_close(Some(&f(4002))).contains("--join-token"));
        assert!(describe_close(Some(&f(4003))).contains("--name"));
        assert!(describe_close(Some(&f(4001))).contains("parameter"));
        assert!(describe_close(Some(&f(1011))).contains("1011"));
        assert!(describe_close(None).contains("closed"));
    }
}
