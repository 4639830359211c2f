//! The hub's worker door, WebSocket `/node` (`protocols/worker-node.md`, hub side), open when
//! the node runs with `--hub-token`. A worker connects with `token`, `model`,
//! `max_concurrency` and `name` in the query; the door checks them (close 4001 for a missing or
//! unusable parameter, 4002 for a wrong token), registers the worker with the [`Hub`] (a
//! worker with the same model and name is closed with 4003), then relays: task and stop frames
//! from the route's supervisors to the worker, and the worker's data frames, end frames
//! and (Hearth extension) `tokens` / `done` / `error` frames back to each task's supervisor.
//!
//! The upgrade answer carries `x-hearth-hub: 1`, so Hearth workers add their `tokens`, `done`
//! and `error` frames; other workers never see them.
//!
//! Bad input never ends the connection, except what DESIGN.md §3 says must: a message over
//! 4 MiB closes it with 1009. Frames that are not understood, or that name a task the worker
//! was not given, are logged and dropped. A worker silent for 45 s (no frame, keepalive or
//! pong) is closed; when it leaves, its tasks are re-dispatched. Frames reach each task's
//! supervisor without waiting, so one slow reader never holds back the worker's other tasks;
//! a task that brings more than [`MAX_TASK_BYTES`] fails and the worker is told to stop it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::ws::{close_code, CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_protocol::limits::{MAX_WS_MESSAGE_BYTES, WS_READ_LIMIT_BYTES};
use hearth_protocol::utf8::Utf8Stream;
use hearth_protocol::worker::{self as wp, HubFrame, TaskId, WorkerText};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;
use hearth_hub::{
    Hub, Route, TaskEvent, WorkerId, WorkerJoin, FRAME_OVERHEAD, MAX_TASK_BYTES,
    MAX_WORKER_CONCURRENCY, WORKER_OUTBOX_CAPACITY,
};

/// A worker silent this long is gone (workers send a keepalive every 10 s).
const SILENCE_LIMIT: Duration = Duration::from_secs(45);
const SILENCE_CHECK: Duration = Duration::from_secs(5);
/// How long a close frame may take to go out.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Longest model or worker name accepted (they appear in logs, metrics and the status API).
const MAX_NAME_BYTES: usize = 256;
/// A close frame's reason must fit in a 125-byte control frame with its 2-byte code.
const MAX_CLOSE_REASON_BYTES: usize = 123;

pub(crate) async fn upgrade(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    ws: WebSocketUpgrade,
) -> Response {
    let Some(hub) = state.router.hub().filter(|h| h.accepts_workers()).cloned() else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {
                "message": "this node is not a hub: start it with --hub-token to accept workers",
                "code": "not_a_hub"
            }})),
        )
            .into_response();
    };
    // A query that does not parse is treated as missing parameters (4001 after the upgrade),
    // so the worker learns why in the protocol's own terms.
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let shutdown = state.shutdown.clone();
    let mut response = ws
        .max_message_size(WS_READ_LIMIT_BYTES)
        .max_frame_size(WS_READ_LIMIT_BYTES)
        .on_upgrade(move |socket| serve(hub, socket, query, peer, shutdown));
    response
        .headers_mut()
        .insert(wp::HEARTH_HUB_HEADER, HeaderValue::from_static("1"));
    response
}

/// Why a worker is turned away, with the close code the protocol gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    code: u16,
    reason: String,
}

/// The token and the worker's description from its query.
fn parse_join(
    q: &HashMap<String, String>,
    peer: SocketAddr,
) -> Result<(String, WorkerJoin), Refusal> {
    let get = |k: &str| {
        q.get(k)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    };
    let missing: Vec<&str> = ["token", "model", "max_concurrency", "name"]
        .into_iter()
        .filter(|&k| get(k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Refusal {
            code: wp::CLOSE_MISSING_PARAMETER,
            reason: format!("missing query parameter: {}", missing.join(", ")),
        });
    }
    let unusable = |reason: String| Refusal {
        code: wp::CLOSE_MISSING_PARAMETER,
        reason,
    };
    let raw = get("max_concurrency").unwrap_or_default().trim();
    let max_concurrency = match raw.parse::<usize>() {
        Ok(n) if n >= 1 => n.min(MAX_WORKER_CONCURRENCY),
        _ => {
            return Err(unusable(format!(
                "max_concurrency must be a whole number of at least 1, got '{}'",
                truncate(raw, 24)
            )))
        }
    };
    let model = get("model").unwrap_or_default().trim().to_owned();
    let name = get("name").unwrap_or_default().trim().to_owned();
    if model.len() > MAX_NAME_BYTES || name.len() > MAX_NAME_BYTES {
        return Err(unusable(format!(
            "model and name may be at most {MAX_NAME_BYTES} bytes"
        )));
    }
    let token = get("token").unwrap_or_default().to_owned();
    let hearth = q.get(wp::HEARTH_QUERY_PARAM).is_some_and(|v| v == "1");
    let vision = hearth && q.get(wp::VISION_QUERY_PARAM).is_some_and(|v| v == "1");
    Ok((
        token,
        WorkerJoin {
            model,
            name,
            max_concurrency,
            hearth,
            vision,
            addr: peer,
            peer: false,
        },
    ))
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let frame = CloseFrame {
        code,
        reason: Utf8Bytes::from(truncate(reason, MAX_CLOSE_REASON_BYTES).to_owned()),
    };
    let _ = tokio::time::timeout(CLOSE_WAIT, socket.send(Message::Close(Some(frame)))).await;
}

async fn serve(
    hub: Hub,
    mut socket: WebSocket,
    query: HashMap<String, String>,
    peer: SocketAddr,
    shutdown: CancellationToken,
) {
    let (token, join) = match parse_join(&query, peer) {
        Ok(j) => j,
        Err(r) => {
            tracing::info!(%peer, reason = %r.reason, "refused a worker");
            close(&mut socket, r.code, &r.reason).await;
            return;
        }
    };
    if !hub.token_matches(&token, peer.ip()) {
        tracing::warn!(%peer, worker = %join.name, "refused a worker with a wrong token");
        close(&mut socket, wp::CLOSE_BAD_TOKEN, "bad token").await;
        return;
    }
    let (outbox_tx, outbox_rx) = mpsc::channel(WORKER_OUTBOX_CAPACITY);
    let kick = CancellationToken::new();
    let name = join.name.clone();
    tracing::info!(
        %peer,
        worker = %name,
        model = %join.model,
        max_concurrency = join.max_concurrency,
        hearth = join.hearth,
        "a worker joined"
    );
    let id = hub.register(join, outbox_tx, kick.clone(), None);
    let mut conn = Connection {
        hub,
        id,
        name,
        carries: HashMap::new(),
        received: HashMap::new(),
    };
    let why = conn.run(&mut socket, outbox_rx, &kick, &shutdown).await;
    conn.hub.unregister(id);
    tracing::info!(worker = %conn.name, reason = %why, "a worker left");
}

/// One worker's connection.
#[derive(Debug)]
struct Connection {
    hub: Hub,
    id: WorkerId,
    name: String,
    /// Tasks whose last frame ended inside a character (never from Hearth workers).
    carries: HashMap<TaskId, Utf8Stream>,
    /// Bytes each live task has brought so far (see [`MAX_TASK_BYTES`]).
    received: HashMap<TaskId, usize>,
}

impl Connection {
    /// Relay until the connection ends; returns why, for the log.
    async fn run(
        &mut self,
        socket: &mut WebSocket,
        mut outbox: mpsc::Receiver<HubFrame>,
        kick: &CancellationToken,
        shutdown: &CancellationToken,
    ) -> String {
        let mut heard = Instant::now();
        let mut check = tokio::time::interval(SILENCE_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = socket.recv() => {
                    heard = Instant::now();
                    let size = match &msg {
                        Some(Ok(Message::Binary(b))) => b.len(),
                        Some(Ok(Message::Text(t))) => t.len(),
                        _ => 0,
                    };
                    if size > MAX_WS_MESSAGE_BYTES {
                        close(socket, close_code::SIZE, "message too big").await;
                        return "it sent a message over the 4 MiB limit".into();
                    }
                    // A task that brought too much is told to stop.
                    let stop = match msg {
                        Some(Ok(Message::Binary(b))) => self.on_binary(&b),
                        Some(Ok(Message::Text(t))) => self.on_text(t.as_str()),
                        Some(Ok(Message::Close(_))) | None => return "it closed the connection".into(),
                        Some(Ok(_)) => None, // ping/pong
                        Some(Err(e)) => return format!("the connection failed: {e}"),
                    };
                    if let Some(task) = stop {
                        let stop = wp::HubFrame::Stop(task).to_text();
                        if let Err(e) = socket.send(Message::Text(Utf8Bytes::from(stop))).await {
                            return format!("writing failed: {e}");
                        }
                    }
                }
                Some(frame) = outbox.recv() => {
                    if let Err(e) = socket.send(Message::Text(Utf8Bytes::from(frame.to_text()))).await {
                        return format!("writing failed: {e}");
                    }
                }
                _ = check.tick() => {
                    self.forget_ended();
                    if heard.elapsed() > SILENCE_LIMIT {
                        close(socket, wp::CLOSE_NORMAL, "no message or keepalive for 45 s").await;
                        return format!("it was silent for {} s", SILENCE_LIMIT.as_secs());
                    }
                }
                () = kick.cancelled() => {
                    close(socket, wp::CLOSE_SUPERSEDED, "superseded by a new connection with the same model and name").await;
                    return "a newer connection with the same model and name superseded it".into();
                }
                () = shutdown.cancelled() => {
                    close(socket, close_code::AWAY, "hub shutting down").await;
                    return "the hub is shutting down".into();
                }
            }
        }
    }

    /// Count a frame of `len` bytes against task `id`'s [`MAX_TASK_BYTES`]; whether it is over.
    fn over_limit(&mut self, id: TaskId, len: usize) -> bool {
        let received = self.received.entry(id).or_default();
        *received = received.saturating_add(len + FRAME_OVERHEAD);
        *received > MAX_TASK_BYTES
    }

    /// Fail task `id`, which brought more than [`MAX_TASK_BYTES`]; returns it, for the stop
    /// frame.
    fn overflow(&mut self, id: TaskId, tx: &mpsc::UnboundedSender<TaskEvent>) -> TaskId {
        tracing::warn!(worker = %self.name, task = %id, "the worker sent more than {} MiB for one task; failing it", MAX_TASK_BYTES >> 20);
        self.received.remove(&id);
        self.carries.remove(&id);
        let _ = tx.send(TaskEvent::Failed(wp::TaskFailure {
            code: "too_much_output".into(),
            message: format!(
                "the worker sent more than {} MiB for this answer",
                MAX_TASK_BYTES >> 20
            ),
        }));
        let _ = tx.send(TaskEvent::End);
        // Its later frames are dropped quietly.
        self.hub.retire(self.id, id);
        id
    }

    /// Forget the byte counts and partial characters of tasks that are no longer live (the
    /// hub stopped them and no end frame came).
    fn forget_ended(&mut self) {
        let (hub, me) = (&self.hub, self.id);
        let live = |id: &TaskId| matches!(hub.route(me, *id), Route::Live(_));
        self.received.retain(|id, _| live(id));
        self.carries.retain(|id, _| live(id));
    }

    /// Relay a data or end frame; returns a task the worker must be told to stop.
    fn on_binary(&mut self, bytes: &[u8]) -> Option<TaskId> {
        let frame = match wp::decode_binary(bytes) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(worker = %self.name, error = %e, "ignoring a binary frame from the worker");
                return None;
            }
        };
        let id = frame.id;
        if frame.is_end() {
            self.received.remove(&id);
            let rest = self
                .carries
                .remove(&id)
                .map(|mut c| c.finish())
                .unwrap_or_default();
            match self.hub.finish(self.id, id) {
                Route::Live(tx) => {
                    if !rest.is_empty() {
                        let _ = tx.send(TaskEvent::Text(rest));
                    }
                    let _ = tx.send(TaskEvent::End);
                }
                Route::Retired => {}
                Route::Unknown => {
                    tracing::warn!(worker = %self.name, task = %id, "the worker ended a task it was not given; ignored");
                }
            }
            return None;
        }
        match self.hub.route(self.id, id) {
            Route::Live(tx) => {
                if self.over_limit(id, frame.payload.len()) {
                    return Some(self.overflow(id, &tx));
                }
                let mut carry = self.carries.remove(&id).unwrap_or_default();
                let text = carry.push(frame.payload);
                if carry.holds_partial() {
                    self.carries.insert(id, carry);
                }
                if !text.is_empty() {
                    // Never waits: a slow reader must not hold back the worker's other tasks.
                    let _ = tx.send(TaskEvent::Text(text));
                }
            }
            Route::Retired => {
                self.received.remove(&id);
                self.carries.remove(&id);
            }
            Route::Unknown => {
                tracing::warn!(worker = %self.name, task = %id, "data for a task the worker was not given; ignored");
            }
        }
        None
    }

    /// Relay a Hearth report; returns a task the worker must be told to stop.
    fn on_text(&mut self, text: &str) -> Option<TaskId> {
        let (id, event) = match wp::parse_worker_text(text) {
            Ok(None) => return None, // keepalive
            Ok(Some(WorkerText::Tokens { id, count })) => (id, TaskEvent::Tokens(count)),
            Ok(Some(WorkerText::Done { id, done })) => (id, TaskEvent::Done(done)),
            Ok(Some(WorkerText::Failed { id, failure })) => (id, TaskEvent::Failed(failure)),
            Err(e) => {
                tracing::warn!(worker = %self.name, error = %e, "ignoring a text message from the worker");
                return None;
            }
        };
        match self.hub.route(self.id, id) {
            Route::Live(tx) => {
                // A count holds no text; a done or error report does.
                let size = if matches!(event, TaskEvent::Tokens(_)) {
                    0
                } else {
                    text.len()
                };
                if self.over_limit(id, size) {
                    return Some(self.overflow(id, &tx));
                }
                let _ = tx.send(event);
            }
            Route::Retired => {}
            Route::Unknown => {
                tracing::warn!(worker = %self.name, task = %id, "a report for a task the worker was not given; ignored");
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn peer() -> SocketAddr {
        "192.168.1.9:40000".parse().unwrap()
    }

    #[test]
    fn a_complete_query_joins() {
        let (token, join) = parse_join(
            &q(&[
                ("token", "t"),
                ("model", "m"),
                ("max_concurrency", "2"),
                ("name", "desk"),
                ("hearth", "1"),
                ("vision", "1"),
                ("extra", "ignored"),
            ]),
            peer(),
        )
        .unwrap();
        assert_eq!(token, "t");
        assert_eq!(join.model, "m");
        assert_eq!(join.name, "desk");
        assert_eq!(join.max_concurrency, 2);
        assert!(join.hearth);
        assert!(join.vision);
        assert_eq!(join.addr, peer());
    }

    #[test]
    fn missing_or_unusable_parameters_get_4001() {
        let r = parse_join(&q(&[("token", "t"), ("model", "m")]), peer()).unwrap_err();
        assert_eq!(r.code, 4001);
        assert_eq!(r.reason, "missing query parameter: max_concurrency, name");
        let r = parse_join(&q(&[]), peer()).unwrap_err();
        assert_eq!(r.code, 4001);
        let r = parse_join(
            &q(&[
                ("token", ""),
                ("model", "m"),
                ("max_concurrency", "1"),
                ("name", "n"),
            ]),
            peer(),
        )
        .unwrap_err();
        assert!(
            r.reason.contains("token"),
            "an empty token is a missing one"
        );
        for bad in ["0", "-1", "two", "1.5"] {
            let r = parse_join(
                &q(&[
                    ("token", "t"),
                    ("model", "m"),
                    ("max_concurrency", bad),
                    ("name", "n"),
                ]),
                peer(),
            )
            .unwrap_err();
            assert_eq!(r.code, 4001, "{bad}");
            assert!(r.reason.contains("max_concurrency"), "{bad}");
        }
        let (_, join) = parse_join(
            &q(&[
                ("token", "t"),
                ("model", "m"),
                ("max_concurrency", "100000"),
                ("name", "n"),
            ]),
            peer(),
        )
        .unwrap();
        assert_eq!(join.max_concurrency, MAX_WORKER_CONCURRENCY);
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        let r = parse_join(
            &q(&[
                ("token", "t"),
                ("model", long.as_str()),
                ("max_concurrency", "1"),
                ("name", "n"),
            ]),
            peer(),
        )
        .unwrap_err();
        assert_eq!(r.code, 4001);
    }

    #[test]
    fn close_reasons_fit_a_control_frame() {
        let long = "é".repeat(200);
        let t = truncate(&long, MAX_CLOSE_REASON_BYTES);
        assert!(t.len() <= MAX_CLOSE_REASON_BYTES);
        assert!(t.chars().all(|c| c == 'é'));
        assert_eq!(truncate("short", 10), "short");
    }
}
