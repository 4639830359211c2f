//! The connections this node opens: one keeper task per peer address (`--peer`, discovery, or
//! added in the UI) that connects, runs the connection while it lasts, and reconnects with
//! exponential backoff and jitter (backon) after any failure or close. A connection that
//! lasted a while starts the backoff over.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use backon::BackoffBuilder as _;
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

/// The addresses this node keeps connections to. Cheap to share.
#[derive(Debug)]
pub struct Dialer {
    me: Arc<Me>,
    stop: CancellationToken,
    keepers: Mutex<BTreeMap<String, CancellationToken>>,
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
            runtime: tokio::runtime::Handle::current(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, CancellationToken>> {
        self.keepers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep a connection to `addr` (`HOST:PORT`); false when it is kept already.
    pub fn add(&self, addr: &str) -> bool {
        let mut keepers = self.lock();
        if keepers.contains_key(addr) {
            return false;
        }
        let stop = self.stop.child_token();
        keepers.insert(addr.to_owned(), stop.clone());
        self.runtime
            .spawn(keep(addr.to_owned(), self.me.clone(), stop));
        true
    }

    /// Stop keeping a connection to `addr` (an open one closes); false when it was not kept.
    pub fn remove(&self, addr: &str) -> bool {
        match self.lock().remove(addr) {
            Some(stop) => {
                stop.cancel();
                true
            }
            None => false,
        }
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
    // backon adds up to 100% jitter above its base: a base of half gives half to all.
    backon::ExponentialBuilder::new()
        .with_min_delay(BACKOFF_FIRST / 2)
        .with_max_delay(BACKOFF_MAX / 2)
        .with_jitter()
        .without_max_times()
        .build()
}

/// Connect, run, reconnect, until `stop`.
async fn keep(addr: String, me: Arc<Me>, stop: CancellationToken) {
    let mut delays = backoff();
    loop {
        let began = Instant::now();
        let why = tokio::select! {
            why = once(&addr, &me, &stop) => why,
            () = stop.cancelled() => return,
        };
        if began.elapsed() >= HEALTHY_AFTER {
            delays = backoff();
        }
        let delay = delays.next().unwrap_or(BACKOFF_MAX);
        tracing::info!(peer = %addr, retry_in_ms = delay.as_millis() as u64, "cluster connection ended: {why}");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// One connection to `addr`, from connect to close; why it ended.
async fn once(addr: &str, me: &Arc<Me>, stop: &CancellationToken) -> String {
    let tcp = match tokio::time::timeout(CONNECT_WAIT, TcpStream::connect(addr)).await {
        Err(_) => return format!("no connection within {} s", CONNECT_WAIT.as_secs()),
        Ok(Err(e)) => return format!("cannot connect: {e}"),
        Ok(Ok(t)) => t,
    };
    let peer = match tcp.peer_addr() {
        Ok(p) => p,
        Err(e) => return format!("cannot connect: {e}"),
    };
    // Without a passcode the transport's key is anyone's: such a cluster stays on this
    // machine, as the listener does.
    if !peer.ip().is_loopback() && me.rules().passcode_hash.is_none() {
        return format!(
            "{peer} is on the LAN, and a cluster on the LAN needs a passcode (--passcode)"
        );
    }
    let _ = tcp.set_nodelay(true);
    let held = Held::new(tcp, me.table.outbound(), me.state.limits.write_timeout);
    let admitted = match handshake::dial(Framed::new(held, codec()), me).await {
        Ok(a) => a,
        Err(why) => {
            tracing::warn!(%peer, "cluster peer refused: {why}");
            return why;
        }
    };
    if let Err(e) = me.state.store.peer_connected(addr.to_owned()).await {
        tracing::warn!(error = %e, "could not remember a cluster peer");
    }
    connection::run(admitted, peer, true, me.clone(), stop.clone()).await
}
