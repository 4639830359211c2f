//! What one connection may take and hold, for every listener and outbound link of a node:
//! the [`Limits`] a user sets, the count of open connections per LAN address ([`PerAddress`])
//! and the TCP stream that holds its place and fails a write the client stops taking ([`Held`]).
//! The HTTP accept loop that applies them lives with the doors; the cluster's links use them too.

use std::collections::HashMap;
use std::future::Future as _;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

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

/// Open connections per non-loopback address, one table for all of a node's listeners (a LAN
/// machine's connections to an earlier listener still count after the node rebinds).
#[derive(Debug, Default)]
pub struct PerAddress {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection's place; given back when dropped.
#[derive(Debug)]
pub struct Place {
    table: Arc<PerAddress>,
    ip: Option<IpAddr>,
}

impl PerAddress {
    /// A place for a connection this node opened itself (counted nowhere).
    pub fn outbound(self: &Arc<Self>) -> Place {
        Place {
            table: self.clone(),
            ip: None,
        }
    }

    /// A place for a connection from `ip`, or `None` when it holds `cap` already (loopback
    /// is never limited).
    pub fn admit(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<Place> {
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
#[derive(Debug)]
pub struct Held {
    tcp: tokio::net::TcpStream,
    _place: Place,
    write_timeout: Duration,
    /// Started when a write first finds the socket full; cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Held {
    pub fn new(tcp: tokio::net::TcpStream, place: Place, write_timeout: Duration) -> Self {
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
