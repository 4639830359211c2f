//! The connections this node opens: one keeper task per peer address (`--peer`, discovery, or
//! added in the UI) that connects, runs the connection while it lasts, and reconnects with
//! exponential backoff and jitter (backon) after any failure or close. A connection that
//! lasted a while starts the backoff over; a change of the cluster's rules wakes every keeper.
//! Addresses given by hand are kept for good and remembered in `hearth.db`; discovered ones
//! (at most [`MAX_DISCOVERED`]) are dropped after [`DISCOVERED_TRIES`] failures in a row.
//!
//! Each connection opens with a Hearth hello; a plain answer makes the peer a TealeNet one
//! when the rules allow it ([`handshake`]). An address given by hand whose listener closed
//! that hello unanswered, while TealeNet compatibility and a passcode are on, is greeted the
//! TealeNet way next time (the passcode hash in the clear: a TealeNet listener with a passcode
//! closes a hello without it), and the Hearth way again after that fails. A discovered
//! address is a Hearth node's (`app=hearth`): it is never greeted or taken in plain text.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use super::frames::codec;
use super::handshake::{DialFailure, Greeting};
use super::{connection, handshake};
use crate::me::Me;
use hearth_base::connections::Held;

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
    /// Found by discovery, where it was announced as a Hearth node's (kept so when it is then
    /// added by hand): a plain answer there is a downgrade.
    advertised: bool,
}

impl crate::context::Context {
    /// The cluster's dialer, while the cluster runs.
    pub fn dialer(&self) -> Option<Arc<Dialer>> {
        self.dialer.get()?.upgrade()?.downcast::<Dialer>().ok()
    }

    /// The cluster runs with `dialer` (once; a later one is ignored).
    pub fn set_dialer(&self, dialer: &Arc<Dialer>) {
        let any: Arc<dyn std::any::Any + Send + Sync> = dialer.clone();
        let _ = self.dialer.set(Arc::downgrade(&any));
    }
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
    pub fn new(me: Arc<Me>, stop: CancellationToken) -> Arc<Self> {
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
        self.keep_address(addr, true, false)
    }

    /// Keep a connection to an address discovery found, for as long as it works.
    pub(crate) fn add_discovered(self: &Arc<Self>, addr: &str) -> bool {
        let discovered = self.lock().values().filter(|k| !k.persistent).count();
        if discovered >= MAX_DISCOVERED {
            tracing::debug!(peer = %addr, "too many discovered addresses kept: not this one");
            return false;
        }
        self.keep_address(addr, false, true)
    }

    fn keep_address(self: &Arc<Self>, addr: &str, persistent: bool, advertised: bool) -> bool {
        let mut keepers = self.lock();
        if let Some(k) = keepers.get_mut(addr) {
            k.persistent |= persistent;
            k.advertised |= advertised;
            return false;
        }
        let stop = self.stop.child_token();
        keepers.insert(
            addr.to_owned(),
            Keeper {
                stop: stop.clone(),
                persistent,
                advertised,
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
    pub fn nudge(&self) {
        self.nudge.notify_waiters();
    }

    fn persistent(&self, addr: &str) -> bool {
        self.lock().get(addr).is_some_and(|k| k.persistent)
    }

    fn advertised(&self, addr: &str) -> bool {
        self.lock().get(addr).is_some_and(|k| k.advertised)
    }

    /// Whether `addr` may be a TealeNet listener that wants the passcode hash in the hello:
    /// compatibility and a passcode on, given by hand, never announced as a Hearth node's.
    fn may_be_tealenet(&self, addr: &str) -> bool {
        let rules = self.me.rules();
        rules.compat
            && rules.passcode_hash.is_some()
            && self.persistent(addr)
            && !self.advertised(addr)
    }

    /// What this node is to its peers.
    pub fn me(&self) -> &Arc<Me> {
        &self.me
    }

    /// The addresses kept, in order.
    pub fn addresses(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

fn backoff() -> backon::ExponentialBackoff {
    hearth_base::backoff::jittered(BACKOFF_FIRST, BACKOFF_MAX)
}

/// Connect, run, reconnect, until `stop` (or, for a discovered address, until it has failed
/// [`DISCOVERED_TRIES`] times in a row).
async fn keep(addr: String, dialer: Arc<Dialer>, stop: CancellationToken) {
    let mut delays = backoff();
    let mut failures = 0;
    let mut greeting = Greeting::Hearth;
    loop {
        let began = Instant::now();
        let (why, admitted, unanswered) = tokio::select! {
            r = once(&addr, &dialer, &stop, greeting) => r,
            () = stop.cancelled() => return,
        };
        greeting = next_greeting(
            greeting,
            admitted,
            unanswered,
            dialer.may_be_tealenet(&addr),
        );
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

/// How to greet `addr` next: the TealeNet way after a Hearth hello its listener closed
/// unanswered, when that may be a TealeNet listener with a passcode (compatibility and a
/// passcode on, an address given by hand and never announced as a Hearth node's); the way
/// that worked while it works; else the Hearth way.
fn next_greeting(
    now: Greeting,
    admitted: bool,
    unanswered: bool,
    may_be_tealenet: bool,
) -> Greeting {
    match now {
        _ if admitted => now,
        Greeting::Hearth if unanswered && may_be_tealenet => Greeting::TealeNet,
        _ => Greeting::Hearth,
    }
}

/// One connection to `addr`, from connect to close: why it ended, whether the peer was
/// admitted, and whether it closed our hello unanswered.
async fn once(
    addr: &str,
    dialer: &Arc<Dialer>,
    stop: &CancellationToken,
    greeting: Greeting,
) -> (String, bool, bool) {
    let me = &dialer.me;
    let tcp = match tokio::time::timeout(CONNECT_WAIT, TcpStream::connect(addr)).await {
        Err(_) => {
            return (
                format!("no connection within {} s", CONNECT_WAIT.as_secs()),
                false,
                false,
            )
        }
        Ok(Err(e)) => return (format!("cannot connect: {e}"), false, false),
        Ok(Ok(t)) => t,
    };
    let peer = match tcp.peer_addr() {
        Ok(p) => p,
        Err(e) => return (format!("cannot connect: {e}"), false, false),
    };
    // Without a passcode the transport's key is anyone's: such a cluster stays on this
    // machine, as the listener does.
    if !peer.ip().is_loopback() && me.rules().passcode_hash.is_none() {
        let why =
            format!("{peer} is on the LAN, and a cluster on the LAN needs a passcode (--passcode)");
        return (why, false, false);
    }
    let _ = tcp.set_nodelay(true);
    let held = Held::new(tcp, me.table.outbound(), me.state.limits.write_timeout);
    let framed = Framed::new(held, codec());
    let admitted = match handshake::dial(framed, me, greeting, dialer.advertised(addr)).await {
        Ok(a) => a,
        Err(failure) => {
            tracing::warn!(%peer, ?greeting, "cluster peer refused: {failure}");
            let unanswered = matches!(failure, DialFailure::Unanswered(_));
            return (failure.to_string(), false, unanswered);
        }
    };
    // Remembered only when kept for good: a discovered address may be stale tomorrow.
    if dialer.persistent(addr) {
        if let Err(e) = me.state.store.peer_connected(addr.to_owned()).await {
            tracing::warn!(error = %e, "could not remember a cluster peer");
        }
    }
    let (why, listed) = connection::run(admitted, peer, true, me.clone(), stop.clone()).await;
    (why, listed, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hearth_hello_closed_unanswered_is_followed_by_a_tealenet_one_where_that_may_help() {
        use Greeting::{Hearth, TealeNet};
        // Closed unanswered: the TealeNet way next, where the address may be a TealeNet one.
        assert_eq!(next_greeting(Hearth, false, true, true), TealeNet);
        assert_eq!(next_greeting(Hearth, false, true, false), Hearth);
        // Refused for another reason (a wrong passcode, a Hearth node's answer): unchanged.
        assert_eq!(next_greeting(Hearth, false, false, true), Hearth);
        // The way that worked is kept; one that failed goes back to the Hearth way.
        assert_eq!(next_greeting(TealeNet, true, false, true), TealeNet);
        assert_eq!(next_greeting(Hearth, true, false, true), Hearth);
        assert_eq!(next_greeting(TealeNet, false, true, true), Hearth);
        assert_eq!(next_greeting(TealeNet, false, false, true), Hearth);
    }
}
