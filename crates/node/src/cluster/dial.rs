//! The connections this node opens: one keeper task per peer address (`--peer`, discovery, or
//! added in the UI) that connects, runs the connection while it lasts, and reconnects with
//! exponential backoff and jitter (backon) after any failure or close. A connection that
//! lasted a while starts the backoff over; a change of the cluster's rules wakes every keeper.
//! Addresses given by hand are kept for good and remembered in `hearth.db`; discovered ones
//! (at most [`MAX_DISCOVERED`]) are dropped after [`DISCOVERED_TRIES`] failures in a row.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use super::{codec, connection, handshake, Me};
use crate::server::listen::Held;

/// The first reconnect waits about this long.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// Reconnects wait at most about this long.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A connection that lasted this long was healthy: the next failure starts the backoff over.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How long a TCP connect may take.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// Addresses found by discovery kept at once, at most (an mDNS record is unauthenticated).
const MAX_DISCOVERED: usize = 32;
/// A discovered address is dropped after this many failures in a row (a stale or unusable
/// address; discovery hands it over again when the peer announces itself again).
const DISCOVERED_TRIES: u32 = 5;

/// One kept address.
#[derive(Debug)]
struct Keeper {
    stop: CancellationToken,
    /// Added by hand (`--peer`, the Cluster page) or known from an earlier run: kept for good
    /// and remembered; a discovered one is neither.
    persistent: bool,
}

/// The addresses this node keeps connections to. Cheap to share.
#[derive(Debug)]
pub struct Dialer {
    me: Arc<Me>,
    stop: CancellationToken,
    keepers: Mutex<BTreeMap<String, Keeper>>,
    /// Wakes every keeper waiting to reconnect (the cluster's rules changed).
    nudge: tokio::sync::Notify,
    /// The runtime the keepers run on (discovery adds addresses from its own thread).
    runtime: tokio::runtime::Handle,
}

impl Dialer {
    /// Call it on the runtime.
    pub(crate) fn new(me: Arc<Me>, stop: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            me,
            stop,
            keepers: Mutex::new(BTreeMap::new()),
            nudge: tokio::sync::Notify::new(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Keeper>> {
        self.keepers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep a connection to `addr` (`HOST:PORT`) for good; false when it is kept already (a
    /// discovered keeper of it becomes a persistent one).
    pub fn add(self: &Arc<Self>, addr: &str) -> bool {
        self.keep_address(addr, true)
    }

    /// Keep a connection to an address discovery found, for as long as it works.
    pub(crate) fn add_discovered(self: &Arc<Self>, addr: &str) -> bool {
        let discovered = self.lock().values().filter(|k| !k.persistent).count();
        if discovered >= MAX_DISCOVERED {
            tracing::debug!(peer = %addr, "too many discovered addresses kept: not this one");
            return false;
        }
        self.keep_address(addr, false)
    }

    fn keep_address(self: &Arc<Self>, addr: &str, persistent: bool) -> bool {
        let mut keepers = self.lock();
        if let Some(k) = keepers.get_mut(addr) {
            k.persistent |= persistent;
            return false;
        }
        let stop = self.stop.child_token();
        keepers.insert(
            addr.to_owned(),
            Keeper {
                stop: stop.clone(),
                persistent,
            },
        );
        self.runtime
            .spawn(keep(addr.to_owned(), self.clone(), stop));
        true
    }

    /// Stop keeping a connection to `addr` (an open one closes); false when it was not kept.
    pub fn remove(&self, addr: &str) -> bool {
        match self.lock().remove(addr) {
            Some(k) => {
                k.stop.cancel();
                true
            }
            None => false,
        }
    }

    /// Reconnect now whatever waits to (the cluster's rules changed).
    pub(crate) fn nudge(&self) {
        self.nudge.notify_waiters();
    }

    fn persistent(&self, addr: &str) -> bool {
        self.lock().get(addr).is_some_and(|k| k.persistent)
    }

    /// What this node is to its peers.
    pub(crate) fn me(&self) -> &Arc<Me> {
        &self.me
    }

    /// The addresses kept, in order.
    pub fn addresses(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

fn backoff() -> backon::ExponentialBackoff {
    crate::backoff::jittered(BACKOFF_FIRST, BACKOFF_MAX)
}

/// Connect, run, reconnect, until `stop` (or, for a discovered address, until it has failed
/// [`DISCOVERED_TRIES`] times in a row).
async fn keep(addr: String, dialer: Arc<Dialer>, stop: CancellationToken) {
    let mut delays = backoff();
    let mut failures = 0;
    loop {
        let began = Instant::now();
        let (why, admitted) = tokio::select! {
            r = once(&addr, &dialer, &stop) => r,
            () = stop.cancelled() => return,
        };
        if began.elapsed() >= HEALTHY_AFTER {
            delays = backoff();
        }
        failures = if admitted { 0 } else { failures + 1 };
        if failures >= DISCOVERED_TRIES && !dialer.persistent(&addr) {
            tracing::info!(peer = %addr, "a discovered address failed {failures} times: no longer kept ({why})");
            dialer.lock().remove(&addr);
            return;
        }
        let delay = delays.next().unwrap_or(BACKOFF_MAX);
        tracing::info!(peer = %addr, retry_in_ms = delay.as_millis() as u64, "cluster connection ended: {why}");
        let nudged = dialer.nudge.notified();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = nudged => delays = backoff(),
            () = stop.cancelled() => return,
        }
    }
}

/// One connection to `addr`, from connect to close: why it ended, and whether the peer was
/// admitted.
async fn once(addr: &str, dialer: &Arc<Dialer>, stop: &CancellationToken) -> (String, bool) {
    let me = &dialer.me;
    let tcp = match tokio::time::timeout(CONNECT_WAIT, TcpStream::connect(addr)).await {
        Err(_) => {
            return (
                format!("no connection within {} s", CONNECT_WAIT.as_secs()),
                false,
            )
        }
        Ok(Err(e)) => return (format!("cannot connect: {e}"), false),
        Ok(Ok(t)) => t,
    };
    let peer = match tcp.peer_addr() {
        Ok(p) => p,
        Err(e) => return (format!("cannot connect: {e}"), false),
    };
    // Without a passcode the transport's key is anyone's: such a cluster stays on this
    // machine, as the listener does.
    if !peer.ip().is_loopback() && me.rules().passcode_hash.is_none() {
        let why =
            format!("{peer} is on the LAN, and a cluster on the LAN needs a passcode (--passcode)");
        return (why, false);
    }
    let _ = tcp.set_nodelay(true);
    let held = Held::new(tcp, me.table.outbound(), me.state.limits.write_timeout);
    let admitted = match handshake::dial(Framed::new(held, codec()), me).await {
        Ok(a) => a,
        Err(why) => {
            tracing::warn!(%peer, "cluster peer refused: {why}");
            return (why, false);
        }
    };
    // Remembered only when kept for good: a discovered address may be stale tomorrow.
    if dialer.persistent(addr) {
        if let Err(e) = me.state.store.peer_connected(addr.to_owned()).await {
            tracing::warn!(error = %e, "could not remember a cluster peer");
        }
    }
    connection::run(admitted, peer, true, me.clone(), stop.clone()).await
}
