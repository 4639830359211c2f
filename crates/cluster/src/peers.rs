//! The cluster peers connected now, with what each last said about itself: who it is (from
//! its `hello`) and its health (from its latest `heartbeat` or `heartbeatAck`). A peer is
//! listed from its admission until its connection ends (a closed connection is gone at once);
//! `/api/status` shows the list. Keyed by connection, not by device id: a peer's heartbeat may
//! carry another id than its hello (NOTES.md). Two connections with one device follow NOTES.md's
//! rule: the outbound one stays when this node's id is the lower, else the inbound one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use hearth_protocol::cluster::{Heartbeat, Hello, Message, PeerUuid, ThermalLevel};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Which kind of peer is at the other end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Another Hearth node, over the encrypted transport.
    Hearth,
    /// A TealeNet peer, in plain text (compatibility mode).
    TealeNet,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Hearth => "hearth",
            Kind::TealeNet => "tealenet",
        }
    }
}

/// One peer as `/api/status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerView {
    pub name: String,
    pub device_id: String,
    pub addr: String,
    /// `hearth` (encrypted) or `tealenet` (plain text).
    pub kind: &'static str,
    /// This node opened the connection.
    pub outbound: bool,
    /// A TealeNet peer silent for 15 s (gone at 30 s).
    pub degraded: bool,
    pub loaded_models: Vec<String>,
    pub thermal_level: ThermalLevel,
    pub throttle: u8,
    pub queue_depth: u32,
    pub is_generating: bool,
    /// Milliseconds since the peer's last frame of any kind.
    pub silent_ms: u64,
    /// Where its cluster listens (the address this node dialed, or the one a Hearth peer
    /// gave in its hello), for connections back to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listens_at: Option<String>,
}

#[derive(Debug)]
struct Entry {
    view: PeerView,
    id: PeerUuid,
    heard: Instant,
    kick: CancellationToken,
    reason: Arc<std::sync::OnceLock<&'static str>>,
    /// Where messages to a Hearth peer go (its connection's outbox), for what this node asks of
    /// it outside the route (`rerank`).
    outbox: Option<mpsc::Sender<Message>>,
}

/// The connected peers. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Peers {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: AtomicU64,
    peers: Mutex<BTreeMap<u64, Entry>>,
    /// Bytes written to and read from every cluster connection, frame headers included.
    sent: AtomicU64,
    received: AtomicU64,
}

/// A peer's place in the list; it leaves the list when dropped.
#[derive(Debug)]
pub(crate) struct Listed {
    peers: Peers,
    key: u64,
    kick: CancellationToken,
    reason: Arc<std::sync::OnceLock<&'static str>>,
}

/// How long a TealeNet peer may be silent before it is listed as degraded.
pub(crate) const DEGRADED_AFTER: std::time::Duration = std::time::Duration::from_secs(15);

impl Peers {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        // Plain bookkeeping: a panic elsewhere cannot leave it half-updated.
        self.inner
            .peers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// List an admitted peer, unless this node already has the connection with it that
    /// NOTES.md's rule keeps (then why not); a connection the new one replaces is told to close.
    pub(crate) fn add(
        &self,
        me: &PeerUuid,
        hello: &Hello,
        addr: SocketAddr,
        kind: Kind,
        outbound: bool,
    ) -> Result<Listed, String> {
        let id = hello.device_info.id.clone();
        let mut peers = self.lock();
        let keep_outbound = *me < id;
        for e in peers.values() {
            if e.id != id || e.kick.is_cancelled() {
                continue;
            }
            let theirs_hearth = e.view.kind == Kind::Hearth.as_str();
            let keep_old = match (theirs_hearth, kind == Kind::Hearth) {
                // A proven Hearth connection always wins over a plain one claiming its id
                // (anyone can claim an id in plain text).
                (false, true) => false,
                (true, false) => true,
                // Of two of one kind, the one in NOTES.md's direction; of two in the same
                // direction (a second address of the same peer), the one already open.
                _ => e.view.outbound == keep_outbound || outbound != keep_outbound,
            };
            if keep_old {
                return Err("this node has the connection with that peer to keep already".into());
            }
            let _ = e
                .reason
                .set("a newer connection with the same peer replaced it");
            e.kick.cancel();
        }
        let key = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let kick = CancellationToken::new();
        let reason = Arc::new(std::sync::OnceLock::new());
        let view = PeerView {
            name: hello.device_info.name.clone(),
            device_id: hello.device_info.id.to_string(),
            addr: addr.to_string(),
            kind: kind.as_str(),
            outbound,
            degraded: false,
            loaded_models: hello.loaded_models.clone(),
            thermal_level: ThermalLevel::Nominal,
            throttle: 100,
            queue_depth: 0,
            is_generating: false,
            silent_ms: 0,
            listens_at: if outbound {
                Some(addr.to_string())
            } else {
                hello
                    .hearth
                    .as_ref()
                    .and_then(|h| h.port)
                    .map(|p| SocketAddr::new(addr.ip(), p).to_string())
            },
        };
        peers.insert(
            key,
            Entry {
                view,
                id,
                heard: Instant::now(),
                kick: kick.clone(),
                reason: reason.clone(),
                outbox: None,
            },
        );
        Ok(Listed {
            peers: self.clone(),
            key,
            kick,
            reason,
        })
    }

    /// Count bytes written to a peer.
    pub(crate) fn count_sent(&self, n: usize) {
        self.inner.sent.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Count bytes read from a peer.
    pub(crate) fn count_received(&self, n: usize) {
        self.inner.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes sent and received on every cluster connection since the node started.
    pub fn traffic(&self) -> (u64, u64) {
        (
            self.inner.sent.load(Ordering::Relaxed),
            self.inner.received.load(Ordering::Relaxed),
        )
    }

    /// Close every connection (the cluster's rules changed).
    pub(crate) fn kick_all(&self, reason: &'static str) {
        self.kick_where(|_| true, reason);
    }

    /// Close the connections of plain-text TealeNet peers (compatibility was turned off).
    pub(crate) fn kick_tealenet(&self, reason: &'static str) {
        self.kick_where(|e| e.view.kind == Kind::TealeNet.as_str(), reason);
    }

    fn kick_where(&self, which: impl Fn(&Entry) -> bool, reason: &'static str) {
        for e in self.lock().values().filter(|e| which(e)) {
            let _ = e.reason.set(reason);
            e.kick.cancel();
        }
    }

    /// The Hearth peer with `model` loaded that is least busy (its queue, then whether it
    /// generates): its name and its connection's outbox.
    pub(crate) fn hearth_outbox_for(&self, model: &str) -> Option<(String, mpsc::Sender<Message>)> {
        self.lock()
            .values()
            .filter(|e| !e.kick.is_cancelled() && e.view.loaded_models.iter().any(|m| m == model))
            .filter_map(|e| e.outbox.clone().map(|o| (e, o)))
            .min_by_key(|(e, _)| (e.view.queue_depth, e.view.is_generating))
            .map(|(e, o)| (e.view.name.clone(), o))
    }

    /// The peers now, in the order they joined.
    pub fn list(&self) -> Vec<PeerView> {
        self.lock()
            .values()
            .map(|e| PeerView {
                silent_ms: u64::try_from(e.heard.elapsed().as_millis()).unwrap_or(u64::MAX),
                degraded: e.view.kind == Kind::TealeNet.as_str()
                    && e.heard.elapsed() >= DEGRADED_AFTER,
                ..e.view.clone()
            })
            .collect()
    }
}

impl Listed {
    /// Cancelled when this connection must close (a newer one with the same peer replaces it,
    /// or the cluster's rules changed).
    pub(crate) fn kicked(&self) -> &CancellationToken {
        &self.kick
    }

    /// Why it was told to close.
    pub(crate) fn kick_reason(&self) -> &'static str {
        self.reason.get().copied().unwrap_or("told to close")
    }

    /// A Hearth peer's outbox, for what this node asks of it outside the route.
    pub(crate) fn set_outbox(&self, outbox: mpsc::Sender<Message>) {
        if let Some(e) = self.peers.lock().get_mut(&self.key) {
            e.outbox = Some(outbox);
        }
    }

    /// The peer sent a frame.
    pub(crate) fn heard(&self) {
        if let Some(e) = self.peers.lock().get_mut(&self.key) {
            e.heard = Instant::now();
        }
    }

    /// The peer's health, from its heartbeat or heartbeatAck.
    pub(crate) fn health(&self, hb: &Heartbeat) {
        if let Some(e) = self.peers.lock().get_mut(&self.key) {
            e.view.thermal_level = hb.thermal_level;
            e.view.throttle = hb.throttle_level;
            e.view.queue_depth = hb.queue_depth;
            e.view.is_generating = hb.is_generating;
            e.view.loaded_models.clone_from(&hb.loaded_models);
        }
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.peers.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(id: &str) -> Hello {
        serde_json::from_value(serde_json::json!({
            "deviceInfo": {"id": id, "name": "p", "hardware": {"chipFamily": "intelCPU",
                "chipName": "x", "totalRAMGB": 8.0, "gpuCoreCount": 0, "memoryBandwidthGBs": 1.0},
                "registeredAt": 0.0, "lastSeenAt": 0.0, "isCurrentDevice": false,
                "loadedModels": []},
            "protocolVersion": 1, "loadedModels": []}))
        .unwrap()
    }

    #[test]
    fn two_connections_with_one_device_keep_one() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let low = PeerUuid::parse("11111111-1111-4111-8111-111111111111").unwrap();
        let high = "EEEEEEEE-EEEE-4EEE-8EEE-EEEEEEEEEEEE";
        let peers = Peers::default();
        // This node has the lower id: its outbound connection is the one to keep.
        let inbound = peers
            .add(&low, &hello(high), addr, Kind::Hearth, false)
            .unwrap();
        let outbound = peers
            .add(&low, &hello(high), addr, Kind::Hearth, true)
            .unwrap();
        assert!(inbound.kicked().is_cancelled());
        assert!(peers
            .add(&low, &hello(high), addr, Kind::Hearth, false)
            .is_err());
        assert!(!outbound.kicked().is_cancelled());
        drop(inbound);
        assert_eq!(peers.list().len(), 1);
        // The other way round from the higher id's side: the inbound one stays.
        let peers = Peers::default();
        let me = PeerUuid::parse(high).unwrap();
        let low_id = "11111111-1111-4111-8111-111111111111";
        let inbound = peers
            .add(&me, &hello(low_id), addr, Kind::Hearth, false)
            .unwrap();
        assert!(peers
            .add(&me, &hello(low_id), addr, Kind::Hearth, true)
            .is_err());
        assert!(!inbound.kicked().is_cancelled());
    }

    #[test]
    fn a_plain_connection_never_keeps_a_hearth_one_out() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let me = PeerUuid::parse("EEEEEEEE-EEEE-4EEE-8EEE-EEEEEEEEEEEE").unwrap();
        let claimed = "11111111-1111-4111-8111-111111111111";
        let peers = Peers::default();
        // A plain connection claiming the id first, on the side the rule would keep...
        let fake = peers
            .add(&me, &hello(claimed), addr, Kind::TealeNet, false)
            .unwrap();
        // ...is replaced by the proven one, whatever its direction.
        let real = peers
            .add(&me, &hello(claimed), addr, Kind::Hearth, true)
            .unwrap();
        assert!(fake.kicked().is_cancelled());
        // And a plain one never replaces a proven one.
        assert!(peers
            .add(&me, &hello(claimed), addr, Kind::TealeNet, false)
            .is_err());
        assert!(!real.kicked().is_cancelled());
    }
}
