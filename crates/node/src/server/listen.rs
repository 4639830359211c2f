//! Accepting connections: the node's own loop over hyper's HTTP/1 server, because
//! `axum::serve` sets no timer (so no header timeout), keeps idle connections forever and logs
//! every failed accept. Here:
//! - request headers must arrive within the header timeout, which also closes keep-alive
//!   connections idle for that long (hyper's `header_read_timeout`, with a Tokio timer); a body
//!   that stalls for as long fails (tower-http's `RequestBodyTimeout`, in `server::router`);
//! - each non-loopback address may hold [`Limits::per_address`] connections, WebSockets
//!   upgraded from them included (the place travels with the socket); more are closed at once
//!   (a LAN machine cannot take every file descriptor);
//! - a connection whose client takes nothing written to it for [`Limits::write_timeout`] is
//!   closed, WebSockets included (see [`Held`]);
//! - when accepting fails for want of file descriptors (`EMFILE`), the loop backs off and
//!   tries again, logging once per episode;
//! - stopping stops accepting and asks every open HTTP connection to finish its request and
//!   close; upgraded WebSockets belong to their doors and end with the node's shutdown token.
//!
//! HTTP/1.1 only: the clients of every door speak it, and HTTP/2's preface sniffing would wait
//! for a silent connection with no timeout.

use std::collections::HashMap;
use std::future::Future as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// What a connection may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time to send a request's headers, and the longest a keep-alive connection may sit idle.
    pub header_timeout: Duration,
    /// Open connections one non-loopback address may hold.
    pub per_address: usize,
    /// How long a connection's writes may find the client taking nothing before it is closed.
    pub write_timeout: Duration,
    /// How long an SSE answer stays silent before it sends a comment line.
    pub sse_keep_alive: Duration,
}

/// 15 s for headers: a person typing a request by hand is slower, no program is.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// Enough for a LAN machine's browser tabs, scripts and a hub's streams at once.
pub const DEFAULT_PER_ADDRESS: usize = 64;
/// 30 s: longer than any pause of a live client (a sleeping laptop's connection is dead anyway).
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// 15 s: within the idle timeouts of common proxies (nginx's 60 s, load balancers' 30-60 s).
pub const DEFAULT_SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            per_address: DEFAULT_PER_ADDRESS,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            sse_keep_alive: DEFAULT_SSE_KEEP_ALIVE,
        }
    }
}

/// The first pause after a failed accept; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Open connections per non-loopback address, one table for all of a node's listeners (a LAN
/// machine's connections to an earlier listener still count after the node rebinds).
#[derive(Debug, Default)]
pub(crate) struct PerAddress {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection's place; given back when dropped.
pub(crate) struct Place {
    table: Arc<PerAddress>,
    ip: Option<IpAddr>,
}

impl PerAddress {
    /// A place for a connection this node opened itself (counted nowhere).
    pub(crate) fn outbound(self: &Arc<Self>) -> Place {
        Place {
            table: self.clone(),
            ip: None,
        }
    }

    /// A place for a connection from `ip`, or `None` when it holds `cap` already (loopback
    /// is never limited).
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<Place> {
        let ip = ip.to_canonical();
        if ip.is_loopback() {
            return Some(Place {
                table: self.clone(),
                ip: None,
            });
        }
        let mut open = self.open.lock().expect("connection table lock");
        let n = open.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Place {
            table: self.clone(),
            ip: Some(ip),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(ip) = self.ip {
            let mut open = self.table.open.lock().expect("connection table lock");
            if let Some(n) = open.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&ip);
                }
            }
        }
    }
}

/// A TCP stream that holds its address's place for as long as it lives (through hyper's
/// upgrade the stream moves into the WebSocket, and the place goes with it), and fails a
/// write the client has taken nothing of for [`Limits::write_timeout`]: a client that stops
/// reading would otherwise hold its generation's slot forever, since the engine waits for
/// slow readers instead of buffering without bound. The cluster's connections use it too.
pub(crate) struct Held {
    tcp: tokio::net::TcpStream,
    _place: Place,
    write_timeout: Duration,
    /// Started when a write first finds the socket full; cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Held {
    pub(crate) fn new(tcp: tokio::net::TcpStream, place: Place, write_timeout: Duration) -> Self {
        Self {
            tcp,
            _place: place,
            write_timeout,
            stalled: None,
        }
    }

    /// What a write that made progress (or failed) returns; a pending one fails once the
    /// socket has been full for the whole write timeout.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let timeout = self.write_timeout;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took nothing written for {timeout:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Held {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_shutdown(cx);
        this.watch(cx, polled)
    }
}

/// Whether an accept error concerns only the connection being accepted.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Serve `app` on `listener` until `stop` is cancelled; the task ends once every HTTP
/// connection has closed.
pub(crate) fn serve(
    listener: TcpListener,
    app: Router,
    stop: CancellationToken,
    limits: Limits,
    table: Arc<PerAddress>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let connections = tokio_util::task::TaskTracker::new();
        let mut backoff = FIRST_BACKOFF;
        let mut starved = false;
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
                r = listener.accept() => r,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors (or another passing failure): wait, then go on.
                    if !starved {
                        tracing::warn!(error = %e, "cannot accept connections for now; retrying until it works again");
                        starved = true;
                    }
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            if starved {
                tracing::info!("accepting connections again");
                starved = false;
            }
            backoff = FIRST_BACKOFF;
            let Some(place) = table.admit(peer.ip(), limits.per_address) else {
                tracing::debug!(%peer, "refused a connection: too many open from this address");
                drop(tcp);
                continue;
            };
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "TCP_NODELAY not set");
            }
            connections.spawn(connection(
                tcp,
                peer,
                app.clone(),
                stop.clone(),
                limits,
                place,
            ));
        }
        drop(listener);
        connections.close();
        connections.wait().await;
    })
}

/// One HTTP/1.1 connection (and the upgrade it may end in).
async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    stop: CancellationToken,
    limits: Limits,
    place: Place,
) {
    let service = app.map_request(move |mut req: axum::http::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        req
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder
        .serve_connection(
            TokioIo::new(Held::new(tcp, place, limits.write_timeout)),
            TowerToHyperService::new(service),
        )
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_capped_except_loopback_and_places_come_back() {
        let table = Arc::new(PerAddress::default());
        let lan: IpAddr = "192.168.1.7".parse().unwrap();
        let first = table.admit(lan, 2).expect("first");
        let second = table.admit(lan, 2).expect("second");
        assert!(table.admit(lan, 2).is_none(), "a third is refused");
        // Another address and loopback are not affected; loopback is never capped.
        let other = table.admit("192.168.1.8".parse().unwrap(), 2);
        assert!(other.is_some());
        let many: Vec<_> = (0..10)
            .map(|_| table.admit("127.0.0.1".parse().unwrap(), 2))
            .collect();
        assert!(many.iter().all(Option::is_some));
        // An IPv4-mapped IPv6 address is the same machine.
        assert!(table
            .admit("::ffff:192.168.1.7".parse().unwrap(), 2)
            .is_none());
        drop(first);
        assert!(
            table.admit(lan, 2).is_some(),
            "a closed connection's place is free"
        );
        drop(second);
        drop(other);
        drop(many);
        assert!(table.open.lock().unwrap().is_empty(), "nothing left behind");
    }
}
