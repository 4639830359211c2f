//! Accepting connections: the node's own loop over hyper's HTTP/1 server, because
//! `axum::serve` sets no timer (so no header timeout), keeps idle connections forever and logs
//! every failed accept. Here:
//! - request headers must arrive within the header timeout, which also closes keep-alive
//!   connections idle for that long (hyper's `header_read_timeout`, with a Tokio timer); a body
//!   that stalls for as long fails (tower-http's `RequestBodyTimeout`, in `crate::app`);
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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hearth_base::connections::{Held, Limits, PerAddress, Place};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// The first pause after a failed accept; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

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
pub fn serve(
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
