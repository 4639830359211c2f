//! One admitted peer's connection, whichever side opened it ([`super::handshake`]). From there
//! every message goes in the peer's transport ([`super::link`]):
//! - a `heartbeat` every 5 s (and at once when this node's model changes) and a
//!   `heartbeatAck` to each of the peer's, with
//!   this node's real figures (the thermal estimate from CPU pressure goes out as `nominal` or
//!   `fair` only: it is not a temperature); a Hearth peer also gets a ping every second;
//! - any frame counts as a sign of life (the Rust node answers only between its streams): a
//!   Hearth peer silent for 3 s is gone, a TealeNet peer is degraded at 15 s and gone at 30 s;
//! - each `inferenceRequest` is served on its own task ([`super::serve`]), at most as many at
//!   once as the engine has slots (more get `queue_full`); an `inferenceError` with code
//!   `cancelled` from the peer, or the connection ending, stops it; when this node shuts down,
//!   each running request gets an `inferenceError` `unavailable` first;
//! - the peer serves this node's route as a provider ([`super::provider`]): requests placed on
//!   it go out as `inferenceRequest`s and its answers come back to their supervisors;
//! - model sharing goes over it ([`super::sharing`]): the peer's queries and transfers are
//!   served (until done, or until the peer sends `modelTransferComplete` for one: it gave it
//!   up), and this node's get their answers (a Hearth peer's chunks may be binary);
//! - a frame that is not a message of the document is skipped, and so is a message with a list
//!   past its bound (`hearth_protocol::limits`; logged once); one announced over the size
//!   limit (or that does not decrypt) closes the connection, and so does a peer that takes
//!   nothing written to it for the node's write timeout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hearth_protocol::cluster::{
    self as cm, AppleTime, ErrorCode, Heartbeat, Message, PeerUuid, ThermalLevel,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::handshake::Admitted;
use super::link::{Incoming, Link};
use super::peers::Kind;
use super::provider::Provider;
use crate::me::Me;
use hearth_models::telemetry::ThermalSource;

/// How often this node sends its heartbeat (the document's 5 s).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How often a Hearth peer gets a liveness ping.
const PING_EVERY: Duration = Duration::from_secs(1);
/// A TealeNet peer silent this long is gone (NOTES.md).
const TEALENET_SILENCE: Duration = Duration::from_secs(30);
/// A Hearth peer silent this long is gone (found within [`SILENCE_CHECK`]): within 3 s, and
/// one ping may come up to 1.5 s late.
const HEARTH_SILENCE: Duration = Duration::from_millis(2500);
/// How often silence is looked for.
const SILENCE_CHECK: Duration = Duration::from_millis(250);
/// Before a silent peer is declared gone, how long to look for frames already waiting.
const DRAIN_WAIT: Duration = Duration::from_millis(100);
/// Messages the connection's tasks may queue for the peer.
const OUTBOX_CAPACITY: usize = 256;
/// Model chunks (1 MiB each) that may wait to go out.
const TRANSFER_OUTBOX: usize = 2;
/// How long each shutdown notice may take to go out.
const SHUTDOWN_WRITE_WAIT: Duration = Duration::from_millis(500);

/// Serve an admitted peer until the connection ends: why it ended, and whether it was listed
/// (not refused as a second connection with the same peer, nor under changed rules).
pub(crate) async fn run(
    admitted: Admitted,
    addr: SocketAddr,
    outbound: bool,
    me: Arc<Me>,
    stop: CancellationToken,
) -> (String, bool) {
    let Admitted {
        mut link,
        hello,
        proven,
        rules,
    } = admitted;
    // Rules changed during its handshake (a passcode set or cleared): `kick_all` did not see
    // it, so it goes now and is admitted again under the new ones.
    if !Arc::ptr_eq(&rules, &me.rules()) {
        let why = "the cluster's passcode or compatibility changed during its handshake";
        return (why.into(), false);
    }
    let kind = link.kind();
    let listed = match me.state.peers.add(&me.id, &hello, addr, kind, outbound) {
        Ok(l) => l,
        Err(why) => return (why, false),
    };
    // Listed: a change from here on kicks it; one between the check above and now is seen here.
    if !Arc::ptr_eq(&rules, &me.rules()) {
        let why = "the cluster's passcode or compatibility changed during its handshake";
        return (why.into(), false);
    }
    tracing::info!(%addr, peer_name = %hello.device_info.name, id = %hello.device_info.id, kind = kind.as_str(), outbound, "a cluster peer joined");
    // A TealeNet peer takes one request at a time (the Rust node reads the next message only
    // after its stream ends); a Hearth peer said how many in its proof.
    let slots = proven.as_ref().map_or(1, |p| p.slots);
    // Who its requests come from, for the prompt cache: a Hearth peer's device id as its
    // handshake proved it; for a TealeNet peer, whose plain hello proves nothing (another could
    // claim its id), this connection alone.
    let origin = match &proven {
        Some(p) => format!("peer {}", p.device_id),
        None => format!("tealenet connection {}", uuid::Uuid::new_v4()),
    };
    let (mut provider, provider_rx) = Provider::new(
        me.hub.clone(),
        kind,
        hello.device_info.name.clone(),
        addr,
        slots,
    );
    // A Hearth peer's models come in its first heartbeat; a TealeNet peer's are in its hello.
    let _ = provider.models(&hello.loaded_models);
    let why = Session {
        me,
        kind,
        origin,
        peer_name: hello.device_info.name.clone(),
        listed,
        provider,
        running: HashMap::new(),
        next: 0,
        share_key: 0,
        share_stop: CancellationToken::new(),
        transfers_out: None,
        serving: Arc::new(tokio::sync::Semaphore::new(super::sharing::SERVED_AT_ONCE)),
        reranking: Arc::new(tokio::sync::Semaphore::new(super::rerank::SERVED_AT_ONCE)),
        served: Served::default(),
        refusal_logged: false,
    }
    .serve(&mut link, provider_rx, &stop)
    .await;
    (why, true)
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
        organization_id: me.rules().passcode_hash.clone(),
        owner_user_id: None,
        ewma_tokens_per_second: Some(stats.decode_tokens_per_s).filter(|s| *s > 0.0),
        vision_models: me.vision_models(),
    }
}

/// The level peers see: a temperature as it is; an estimate from CPU pressure only as
/// nominal or fair (it is this node's own load, not heat: no reason to drop the node).
fn wire_thermal(level: hearth_base::thermal::ThermalLevel, source: ThermalSource) -> ThermalLevel {
    match (source, level) {
        (_, hearth_base::thermal::ThermalLevel::Nominal) => ThermalLevel::Nominal,
        (ThermalSource::Estimated, _) | (_, hearth_base::thermal::ThermalLevel::Fair) => {
            ThermalLevel::Fair
        }
        (ThermalSource::Sensors, hearth_base::thermal::ThermalLevel::Serious) => {
            ThermalLevel::Serious
        }
        (ThermalSource::Sensors, hearth_base::thermal::ThermalLevel::Critical) => {
            ThermalLevel::Critical
        }
    }
}

/// An admitted peer's connection.
struct Session {
    me: Arc<Me>,
    kind: Kind,
    /// This peer as the prompt cache names the origin of its requests.
    origin: String,
    /// This peer in the list of connected peers (it leaves the list with the session).
    listed: super::peers::Listed,
    /// This node's requests on the peer.
    provider: Provider,
    /// The peer's requests being served here (with the serial number of their task), to stop
    /// on the peer's word or when it leaves.
    running: HashMap<PeerUuid, Running>,
    next: u64,
    peer_name: String,
    /// This connection in model sharing ([`super::sharing`]), the transfers it serves (stopped
    /// with it) and their outbox.
    share_key: u64,
    share_stop: CancellationToken,
    transfers_out: Option<mpsc::Sender<Message>>,
    serving: Arc<tokio::sync::Semaphore>,
    /// Reranks served for the peer now (`rerank::SERVED_AT_ONCE` at most).
    reranking: Arc<tokio::sync::Semaphore>,
    /// The transfers served on this connection, each stopped when the peer says it is done
    /// with it (a `modelTransferComplete` for it) or when the connection ends.
    served: Served,
    /// Whether a message past the bounds on a peer's lists was logged (once a connection).
    refusal_logged: bool,
}

/// Transfers being served, by id.
type Served = Arc<std::sync::Mutex<HashMap<PeerUuid, CancellationToken>>>;

/// A peer's request served here.
#[derive(Debug)]
struct Running {
    /// Tells it apart from an earlier request with the same id.
    serial: u64,
    cancel: CancellationToken,
    /// Its controls (a Hearth peer may pause and resume it, even before it has started).
    control: Arc<super::serve::ControlSlot>,
}

impl Session {
    async fn serve(
        &mut self,
        link: &mut Link,
        mut provider_rx: mpsc::Receiver<(hearth_hub::WorkerId, super::provider::Ask)>,
        stop: &CancellationToken,
    ) -> String {
        let (out_tx, mut out_rx) = mpsc::channel::<Message>(OUTBOX_CAPACITY);
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(PeerUuid, u64)>();
        // Model chunks wait in an outbox of their own, two at most: a transfer never holds a
        // file in memory, and heartbeats and answers go first.
        let (transfers_tx, mut transfers_rx) = mpsc::channel::<Message>(TRANSFER_OUTBOX);
        let sharing = self.me.state.sharing.connect(
            self.peer_name.clone(),
            self.kind == Kind::Hearth,
            out_tx.clone(),
        );
        self.share_key = sharing.key;
        self.transfers_out = Some(transfers_tx);
        if self.kind == Kind::Hearth {
            self.listed.set_outbox(out_tx.clone());
        }
        let silence_limit = match self.kind {
            Kind::Hearth => HEARTH_SILENCE,
            Kind::TealeNet => TEALENET_SILENCE,
        };
        let kicked = self.listed.kicked().clone();
        let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A model loaded or unloaded here is announced at once, not at the next beat.
        let mut model_state = self.me.state.host.loaded();
        let mut announced = self.me.loaded_models();
        let mut pulse = tokio::time::interval(PING_EVERY);
        pulse.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut check = tokio::time::interval(SILENCE_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let why = loop {
            tokio::select! {
                // Shutdown first, then finished requests (their slot is free again), liveness
                // and heartbeats (a flood of frames must not starve them), our writes, the
                // peer's frames.
                biased;
                () = stop.cancelled() => {
                    // Each running request is told, so the consumer retries elsewhere at once.
                    for id in self.running.keys() {
                        let m = error(id, ErrorCode::Unavailable, "this node is shutting down");
                        let notice = link.send(&m);
                        if !matches!(tokio::time::timeout(SHUTDOWN_WRITE_WAIT, notice).await, Ok(Ok(()))) {
                            break;
                        }
                    }
                    break "this node is shutting down".to_owned();
                }
                () = kicked.cancelled() => break self.listed.kick_reason().to_owned(),
                Some((id, serial)) = done_rx.recv() => {
                    if self.running.get(&id).is_some_and(|r| r.serial == serial) {
                        self.running.remove(&id);
                    }
                }
                _ = check.tick() => {
                    if link.heard().elapsed() > silence_limit {
                        // Its frames may wait unread behind this side's own writes: read what
                        // is there before judging.
                        match tokio::time::timeout(DRAIN_WAIT, link.next()).await {
                            Ok(incoming) => {
                                if let Err(why) = self.incoming(link, incoming, &out_tx, &done_tx).await {
                                    break why;
                                }
                            }
                            Err(_) => break format!("silent for {:.1} s", silence_limit.as_secs_f64()),
                        }
                    }
                }
                _ = pulse.tick() => {
                    if let Err(why) = link.ping().await {
                        break why;
                    }
                }
                Ok(()) = model_state.changed() => {
                    // Sent only when the set of models changed since the last announcement.
                    let now = self.me.loaded_models();
                    if now == announced {
                        continue;
                    }
                    announced = now;
                    let hb = Message::Heartbeat(heartbeat(&self.me));
                    if let Err(why) = link.send(&hb).await {
                        break why;
                    }
                    beat.reset();
                }
                _ = beat.tick() => {
                    let hb = Message::Heartbeat(heartbeat(&self.me));
                    if let Err(why) = link.send(&hb).await {
                        break why;
                    }
                }
                Some(m) = out_rx.recv() => {
                    if let Err(why) = link.send(&m).await {
                        break why;
                    }
                }
                Some(m) = transfers_rx.recv() => {
                    if let Err(why) = link.send_owned(m).await {
                        break why;
                    }
                }
                Some((worker, frame)) = provider_rx.recv() => {
                    if let Some(m) = self.provider.message_for(worker, frame) {
                        if let Err(why) = link.send(&m).await {
                            break why;
                        }
                    }
                }
                incoming = link.next() => {
                    if let Err(why) = self.incoming(link, incoming, &out_tx, &done_tx).await {
                        break why;
                    }
                }
            }
        };
        for (_, r) in self.running.drain() {
            r.cancel.cancel();
        }
        self.share_stop.cancel();
        drop(sharing);
        why
    }

    /// What [`Link::next`] gave: handled, and any reply sent; why the connection ends, if it does.
    async fn incoming(
        &mut self,
        link: &mut Link,
        incoming: Option<Result<Incoming, String>>,
        out: &mpsc::Sender<Message>,
        done: &mpsc::UnboundedSender<(PeerUuid, u64)>,
    ) -> Result<(), String> {
        self.listed.heard();
        let reply = match incoming {
            None => return Err("it closed the connection".to_owned()),
            Some(Err(e)) => return Err(e),
            Some(Ok(Incoming::Ping)) => None,
            Some(Ok(Incoming::Message(bytes))) => match cm::decode_owned(bytes) {
                // A transfer's pieces wait for its writer: the connection is held back.
                Ok((Message::ModelTransferChunk(c), _)) => {
                    self.me.state.sharing.deliver(self.share_key, c).await;
                    None
                }
                Ok((Message::HearthChunk(c), _)) if self.kind == Kind::Hearth => {
                    self.me
                        .state
                        .sharing
                        .deliver_binary(self.share_key, c)
                        .await;
                    None
                }
                Ok((Message::ModelTransferComplete(c), _)) => {
                    let sharing = &self.me.state.sharing;
                    if sharing.is_ours(self.share_key, &c.transfer_id) {
                        sharing.complete(self.share_key, c).await;
                    } else if let Some(stop) =
                        super::sharing::lock(&self.served).remove(&c.transfer_id)
                    {
                        // The peer has given the transfer up: its chunks would be dropped.
                        stop.cancel();
                    }
                    None
                }
                Ok((m, _)) => self.on_message(m, out, done),
                // A list past its bound: the message is refused whole and what the peer said
                // before stands (its models, its health).
                Err(e @ cm::ClusterError::Invalid { .. }) if !self.refusal_logged => {
                    self.refusal_logged = true;
                    tracing::warn!(peer = %self.peer_name, error = %e, "refused a cluster message (logged once a connection)");
                    None
                }
                Err(e) => {
                    tracing::debug!(error = %e, "skipping a cluster frame");
                    None
                }
            },
        };
        match reply {
            Some(m) => link.send(&m).await,
            None => Ok(()),
        }
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
                self.health(&hb, out);
                Some(Message::HeartbeatAck(heartbeat(&self.me)))
            }
            Message::HeartbeatAck(hb) => {
                self.health(&hb, out);
                None
            }
            Message::InferenceRequest(req) => self.start(req, out, done),
            // Answers to this node's requests on the peer.
            Message::InferenceChunk(c) => {
                self.provider.on_chunk(&c);
                None
            }
            Message::InferenceComplete(c) => {
                self.provider.on_complete(c);
                None
            }
            Message::InferenceError(e) if self.provider.owns(&e.request_id) => {
                self.provider.on_error(e);
                None
            }
            Message::InferenceError(e) if e.code == Some(ErrorCode::Cancelled) => {
                if let Some(r) = self.running.remove(&e.request_id) {
                    r.cancel.cancel();
                }
                None
            }
            // Rerank, between Hearth nodes only: answered from a task (the engine takes a while).
            // A few at once per peer (each takes the engine's embedding context); more are
            // refused at once. Each ends with the connection.
            Message::HearthRerank(ask) if self.kind == Kind::Hearth => {
                let Ok(permit) = self.reranking.clone().try_acquire_owned() else {
                    let why = format!(
                        "{} reranks for peers run here already",
                        super::rerank::SERVED_AT_ONCE
                    );
                    return Some(Message::HearthRerankResult(super::rerank::refused(
                        &ask, why, "busy",
                    )));
                };
                let (state, out) = (self.me.state.clone(), out.clone());
                let stop = self.share_stop.child_token();
                tokio::spawn(async move {
                    tokio::select! {
                        answer = super::rerank::serve(&state, ask) => {
                            let _ = out.send(Message::HearthRerankResult(answer)).await;
                        }
                        () = stop.cancelled() => {}
                    }
                    drop(permit);
                });
                None
            }
            Message::HearthRerankResult(result) if self.kind == Kind::Hearth => {
                self.me.state.reranks.answered(result);
                None
            }
            // Hearth's own control, from a Hearth peer only (TealeNet peers have none).
            Message::HearthControl(c) if self.kind == Kind::Hearth => {
                if let Some(r) = self.running.get(&c.request_id) {
                    r.control.apply(c.action);
                }
                None
            }
            // Model sharing (its hash may take a while the first time: answered from a task).
            Message::ModelQuery(q) => {
                let (files, out) = (self.me.state.files(), out.clone());
                tokio::spawn(async move {
                    let answer = super::sharing::answer(&files, q).await;
                    let _ = out.send(answer).await;
                });
                None
            }
            Message::ModelQueryResponse(r) => {
                self.me.state.sharing.answered(self.share_key, r);
                None
            }
            Message::ModelTransferRequest(r) => {
                // A few at once per connection: each holds a chunk while it waits to go out.
                // One whose id is being served already is answered empty too.
                let to = self.transfers_out.clone()?;
                let again = super::sharing::lock(&self.served).contains_key(&r.transfer_id);
                let permit = self.serving.clone().try_acquire_owned().ok();
                let Some(permit) = permit.filter(|_| !again) else {
                    return Some(Message::ModelTransferComplete(cm::ModelTransferComplete {
                        transfer_id: r.transfer_id,
                        model_id: r.model_id,
                    }));
                };
                let files = self.me.state.files();
                let stop = self.share_stop.child_token();
                let binary = self.kind == Kind::Hearth;
                let (served, id) = (self.served.clone(), r.transfer_id.clone());
                super::sharing::lock(&served).insert(id.clone(), stop.clone());
                tokio::spawn(async move {
                    super::sharing::send(files, r, to, stop, binary).await;
                    super::sharing::lock(&served).remove(&id);
                    drop(permit);
                });
                None
            }
            other => {
                tracing::debug!(message = other.name(), "cluster message with nothing to do");
                None
            }
        }
    }

    /// The peer's heartbeat: listed, and its figures and models given to the route.
    fn health(&mut self, hb: &Heartbeat, out: &mpsc::Sender<Message>) {
        self.listed.health(hb);
        for cancel in self.provider.health(hb) {
            if out.try_send(cancel).is_err() {
                tracing::debug!("the outbox is full: a cancellation is dropped");
            }
        }
    }

    /// Serve a peer's request on its own task.
    fn start(
        &mut self,
        req: cm::InferenceRequest,
        out: &mpsc::Sender<Message>,
        done: &mpsc::UnboundedSender<(PeerUuid, u64)>,
    ) -> Option<Message> {
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
        let control = Arc::new(super::serve::ControlSlot::default());
        self.running.insert(
            id.clone(),
            Running {
                serial,
                cancel: cancel.clone(),
                control: control.clone(),
            },
        );
        let (me, out, done, kind) = (self.me.clone(), out.clone(), done.clone(), self.kind);
        let origin = self.origin.clone();
        tokio::spawn(async move {
            super::serve::inference(&me, req, &out, &cancel, (kind, &origin), &control).await;
            let _ = done.send((id, serial));
        });
        None
    }
}

/// An `inferenceError` for request `id`.
fn error(id: &PeerUuid, code: ErrorCode, message: &str) -> Message {
    Message::InferenceError(cm::InferenceError {
        request_id: id.clone(),
        error_message: message.into(),
        code: Some(code),
        hearth_code: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_goes_out_as_nominal_or_fair_and_a_temperature_as_it_is() {
        use hearth_base::thermal::ThermalLevel as T;
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
