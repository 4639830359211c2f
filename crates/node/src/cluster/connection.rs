//! One cluster connection, on the listening side. The peer's `hello` comes first, within 10 s
//! and 64 KiB: anything else before it, or a passcode that does not match (both none, or equal
//! hashes), closes the connection. Then `helloAck` in the shape the peer used, and from there
//! every message in that shape:
//! - a `heartbeat` every 5 s from this node and a `heartbeatAck` to each of the peer's, with
//!   this node's real figures (the thermal estimate from CPU pressure goes out as `nominal` or
//!   `fair` only: it is not a temperature);
//! - any frame counts as a sign of life (the Rust node answers only between its streams); 30 s
//!   of silence closes the connection;
//! - each `inferenceRequest` is served on its own task ([`super::serve`]), at most as many at
//!   once as the engine has slots (more get `queue_full`); an `inferenceError` with code
//!   `cancelled` from the peer, or the connection ending, stops it; when this node shuts down,
//!   each running request gets an `inferenceError` `unavailable` first;
//! - a frame that is not a message of the document is skipped; one announced over the size
//!   limit closes the connection, and so does a peer that takes nothing written to it for the
//!   node's write timeout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hearth_protocol::cluster::{
    self as cm, AppleTime, ErrorCode, Heartbeat, Hello, Message, PeerUuid, Shape, ThermalLevel,
    PROTOCOL_VERSION,
};
use tokio::sync::mpsc;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use super::Me;
use crate::server::listen::Held;
use crate::telemetry::{self, ThermalSource};

/// How often this node sends its heartbeat (the document's 5 s).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// A TealeNet peer silent this long is gone (NOTES.md).
const SILENCE_LIMIT: Duration = Duration::from_secs(30);
/// How long a new connection has to send its `hello`.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// Messages the connection's tasks may queue for the peer.
const OUTBOX_CAPACITY: usize = 256;
/// How long each shutdown notice may take to go out.
const SHUTDOWN_WRITE_WAIT: Duration = Duration::from_millis(500);

type Frames = Framed<Held, tokio_util::codec::LengthDelimitedCodec>;

pub(super) async fn run(stream: Held, peer: SocketAddr, me: Arc<Me>, stop: CancellationToken) {
    let mut frames = Framed::new(stream, super::codec());
    let hello = tokio::select! {
        h = first_hello(&mut frames) => h,
        () = stop.cancelled() => return,
    };
    let (hello, shape) = match hello {
        Ok(h) => h,
        Err(why) => {
            tracing::info!(%peer, "cluster connection closed: {why}");
            return;
        }
    };
    if let Err(why) = admit(&me, &hello) {
        tracing::warn!(%peer, peer_name = %hello.device_info.name, "cluster peer refused: {why}");
        return;
    }
    tracing::info!(%peer, peer_name = %hello.device_info.name, id = %hello.device_info.id, "a TealeNet peer joined (plain text)");
    frames
        .codec_mut()
        .set_max_frame_length(super::ADMITTED_FRAME_BYTES);
    let listed = me.state.cluster_peers.add(&hello, peer);
    let ack = Message::HelloAck(Hello {
        device_info: me.device_info(),
        protocol_version: PROTOCOL_VERSION,
        cluster_passcode_hash: me.passcode_hash.clone(),
        loaded_models: me.loaded_models(),
        owner_user_id: None,
    });
    if let Err(why) = write(&mut frames, &ack, shape).await {
        tracing::info!(%peer, "cluster peer left: {why}");
        return;
    }
    let why = Session {
        me,
        shape,
        listed,
        running: HashMap::new(),
        next: 0,
    }
    .serve(&mut frames, &stop)
    .await;
    tracing::info!(%peer, "cluster peer left: {why}");
}

/// One message as a frame's bytes, in the peer's shape.
fn frame(m: &Message, shape: Shape) -> tokio_util::bytes::Bytes {
    cm::encode(m, shape).into()
}

/// Write one message. The stream itself fails a write the peer takes nothing of for the
/// write timeout ([`Held`]).
async fn write(frames: &mut Frames, m: &Message, shape: Shape) -> Result<(), String> {
    frames
        .send(frame(m, shape))
        .await
        .map_err(|e| format!("writing failed: {e}"))
}

/// The peer's first frame, which must be its `hello`.
async fn first_hello(frames: &mut Frames) -> Result<(Hello, Shape), String> {
    let frame = match tokio::time::timeout(HELLO_WAIT, frames.next()).await {
        Err(_) => return Err(format!("no hello within {} s", HELLO_WAIT.as_secs())),
        Ok(None) => return Err("it closed before its hello".into()),
        Ok(Some(Err(e))) => return Err(format!("its first frame failed: {e}")),
        Ok(Some(Ok(f))) => f,
    };
    match cm::decode(&frame) {
        Ok((Message::Hello(h), shape)) => Ok((h, shape)),
        Ok((other, _)) => Err(format!("it sent {} before hello", other.name())),
        Err(e) => Err(format!("its first frame is not a hello: {e}")),
    }
}

/// Whether this peer may stay: the same passcode.
fn admit(me: &Me, hello: &Hello) -> Result<(), String> {
    if passcodes_match(
        me.passcode_hash.as_deref(),
        hello.cluster_passcode_hash.as_deref(),
    ) {
        Ok(())
    } else {
        Err("its cluster passcode does not match".into())
    }
}

/// NOTES.md's rule: both without a passcode, or the same hash (hex of either case).
fn passcodes_match(ours: Option<&str>, theirs: Option<&str>) -> bool {
    match (ours, theirs) {
        (None, None) => true,
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        _ => false,
    }
}

/// This node's health as a heartbeat.
pub(super) fn heartbeat(me: &Me) -> Heartbeat {
    let t = me.state.telemetry.borrow().clone();
    let stats = me.state.host.stats();
    Heartbeat {
        device_id: me.id.clone(),
        timestamp: AppleTime::now(),
        thermal_level: wire_thermal(t.thermal.level, t.thermal.source),
        throttle_level: me.state.host.throttle(),
        loaded_models: me.loaded_models(),
        is_generating: stats.active > 0,
        queue_depth: u32::try_from(stats.queued).unwrap_or(u32::MAX),
        organization_id: me.passcode_hash.clone(),
        owner_user_id: None,
    }
}

/// The level peers see: a temperature as it is; an estimate from CPU pressure only as
/// nominal or fair (it is this node's own load, not heat: no reason to drop the node).
fn wire_thermal(level: telemetry::ThermalLevel, source: ThermalSource) -> ThermalLevel {
    match (source, level) {
        (_, telemetry::ThermalLevel::Nominal) => ThermalLevel::Nominal,
        (ThermalSource::Estimated, _) | (_, telemetry::ThermalLevel::Fair) => ThermalLevel::Fair,
        (ThermalSource::Sensors, telemetry::ThermalLevel::Serious) => ThermalLevel::Serious,
        (ThermalSource::Sensors, telemetry::ThermalLevel::Critical) => ThermalLevel::Critical,
    }
}

/// An admitted peer's connection.
struct Session {
    me: Arc<Me>,
    shape: Shape,
    /// This peer in the list of connected peers (it leaves the list with the session).
    listed: super::peers::Listed,
    /// Requests being served (with the serial number of their task), to stop on the peer's
    /// word or when it leaves.
    running: HashMap<PeerUuid, (u64, CancellationToken)>,
    next: u64,
}

impl Session {
    async fn serve(&mut self, frames: &mut Frames, stop: &CancellationToken) -> String {
        let (out_tx, mut out_rx) = mpsc::channel::<Message>(OUTBOX_CAPACITY);
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(PeerUuid, u64)>();
        let mut heard = Instant::now();
        let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let why = loop {
            tokio::select! {
                // Shutdown first, then finished requests (their slot is free again), the
                // heartbeat (a flood of frames must not starve it), our writes, the peer's frames.
                biased;
                () = stop.cancelled() => {
                    // Each running request is told, so the consumer retries elsewhere at once.
                    for id in self.running.keys() {
                        let m = error(id, ErrorCode::Unavailable, "this node is shutting down");
                        let notice = write(frames, &m, self.shape);
                        if !matches!(tokio::time::timeout(SHUTDOWN_WRITE_WAIT, notice).await, Ok(Ok(()))) {
                            break;
                        }
                    }
                    break "this node is shutting down".to_owned();
                }
                Some((id, serial)) = done_rx.recv() => {
                    if self.running.get(&id).is_some_and(|(s, _)| *s == serial) {
                        self.running.remove(&id);
                    }
                }
                _ = beat.tick() => {
                    if heard.elapsed() > SILENCE_LIMIT {
                        break format!("silent for {} s", SILENCE_LIMIT.as_secs());
                    }
                    let hb = Message::Heartbeat(heartbeat(&self.me));
                    if let Err(why) = write(frames, &hb, self.shape).await {
                        break why;
                    }
                }
                Some(m) = out_rx.recv() => {
                    if let Err(why) = write(frames, &m, self.shape).await {
                        break why;
                    }
                }
                incoming = frames.next() => {
                    heard = Instant::now();
                    self.listed.heard();
                    let reply = match incoming {
                        None => break "it closed the connection".to_owned(),
                        Some(Err(e)) => break format!("reading failed: {e}"),
                        Some(Ok(bytes)) => match cm::decode(&bytes) {
                            Ok((m, _)) => self.on_message(m, &out_tx, &done_tx),
                            Err(e) => {
                                tracing::debug!(error = %e, "skipping a cluster frame");
                                None
                            }
                        },
                    };
                    if let Some(m) = reply {
                        if let Err(why) = write(frames, &m, self.shape).await {
                            break why;
                        }
                    }
                }
            }
        };
        for (_, (_, cancel)) in self.running.drain() {
            cancel.cancel();
        }
        why
    }

    /// Handle one message from the peer; returns the reply to send at once, if any.
    fn on_message(
        &mut self,
        m: Message,
        out: &mpsc::Sender<Message>,
        done: &mpsc::UnboundedSender<(PeerUuid, u64)>,
    ) -> Option<Message> {
        match m {
            Message::Heartbeat(hb) => {
                self.listed.health(&hb);
                Some(Message::HeartbeatAck(heartbeat(&self.me)))
            }
            Message::HeartbeatAck(hb) => {
                self.listed.health(&hb);
                None
            }
            Message::InferenceRequest(req) => {
                let id = req.request_id.clone();
                if self.running.contains_key(&id) {
                    return Some(error(
                        &id,
                        ErrorCode::InternalError,
                        "a request with this requestID is already running",
                    ));
                }
                if self.running.len() >= self.me.state.host.stats().slots.max(1) {
                    return Some(error(
                        &id,
                        ErrorCode::QueueFull,
                        "this connection already has a request on every slot of this node",
                    ));
                }
                let cancel = CancellationToken::new();
                self.next += 1;
                let serial = self.next;
                self.running.insert(id.clone(), (serial, cancel.clone()));
                let (me, out, done) = (self.me.clone(), out.clone(), done.clone());
                tokio::spawn(async move {
                    super::serve::inference(&me, req, &out, &cancel).await;
                    let _ = done.send((id, serial));
                });
                None
            }
            Message::InferenceError(e) if e.code == Some(ErrorCode::Cancelled) => {
                if let Some((_, cancel)) = self.running.remove(&e.request_id) {
                    cancel.cancel();
                }
                None
            }
            // Acks, our own requests' answers (none yet) and model sharing (not yet served):
            // a model query is answered truthfully; the rest needs nothing.
            Message::ModelQuery(q) => Some(Message::ModelQueryResponse(cm::ModelQueryResponse {
                model_id: q.model_id,
                available: false,
                total_size_bytes: None,
            })),
            other => {
                tracing::debug!(message = other.name(), "cluster message with nothing to do");
                None
            }
        }
    }
}

/// An `inferenceError` for request `id`.
fn error(id: &PeerUuid, code: ErrorCode, message: &str) -> Message {
    Message::InferenceError(cm::InferenceError {
        request_id: id.clone(),
        error_message: message.into(),
        code: Some(code),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passcodes_match_when_both_have_none_or_the_same_hash() {
        let h = crate::cluster::passcode_hash("sesame");
        assert!(passcodes_match(None, None));
        assert!(passcodes_match(Some(&h), Some(&h)));
        assert!(passcodes_match(Some(&h), Some(&h.to_uppercase())));
        assert!(!passcodes_match(Some(&h), None));
        assert!(!passcodes_match(None, Some(&h)));
        assert!(!passcodes_match(
            Some(&h),
            Some(&crate::cluster::passcode_hash("other"))
        ));
    }

    #[test]
    fn an_estimate_goes_out_as_nominal_or_fair_and_a_temperature_as_it_is() {
        use telemetry::ThermalLevel as T;
        for (level, sensors, estimated) in [
            (T::Nominal, ThermalLevel::Nominal, ThermalLevel::Nominal),
            (T::Fair, ThermalLevel::Fair, ThermalLevel::Fair),
            (T::Serious, ThermalLevel::Serious, ThermalLevel::Fair),
            (T::Critical, ThermalLevel::Critical, ThermalLevel::Fair),
        ] {
            assert_eq!(wire_thermal(level, ThermalSource::Sensors), sensors);
            assert_eq!(wire_thermal(level, ThermalSource::Estimated), estimated);
        }
    }
}
