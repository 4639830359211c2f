//! The cluster's listener: accept connections (a LAN peer only with a passcode, each address
//! within its cap), admit each by the handshake, then run it as a connection or a tunnel.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hearth_base::connections::Held;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use super::frames::codec;
use super::{connection, handshake, tunnel};
use crate::me::Me;

/// Accept cluster connections on `listener` until `stop` is cancelled; each address may hold
/// as many connections, counted with the doors', as `--connections-per-address` allows.
pub fn listen(listener: TcpListener, me: Arc<Me>, stop: CancellationToken) -> JoinHandle<()> {
    let limits = me.state.limits;
    tokio::spawn(async move {
        let connections = tokio_util::task::TaskTracker::new();
        loop {
            let (tcp, peer): (_, SocketAddr) = tokio::select! {
                () = stop.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "cluster accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Without a passcode the transport's key is anyone's: LAN peers need one (the
            // listener may still be on the LAN after the passcode was cleared in the UI).
            if !peer.ip().to_canonical().is_loopback() && me.rules().passcode_hash.is_none() {
                tracing::warn!(%peer, "refused a LAN peer: the cluster has no passcode");
                continue;
            }
            let Some(place) = me.table.admit(peer.ip(), limits.per_address) else {
                tracing::debug!(%peer, "refused a cluster connection: too many open from this address");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            // The stream holds its place, and fails writes the peer takes nothing of for the
            // write timeout, as the doors' connections do.
            let frames = Framed::new(Held::new(tcp, place, limits.write_timeout), codec());
            let (me, stop) = (me.clone(), stop.clone());
            connections.spawn(async move {
                let admitted = tokio::select! {
                    a = handshake::accept(frames, &me) => a,
                    () = stop.cancelled() => return,
                };
                let why = match admitted {
                    Ok(a) => match tunnel::asked(&a).map(str::to_owned) {
                        Some(kind) => match tunnel::Tunnel::accepted(a, peer) {
                            Ok(t) => tokio::select! {
                                why = me.state.serve_tunnel(kind, t) => why,
                                () = stop.cancelled() => "the node is stopping".into(),
                            },
                            Err(why) => why,
                        },
                        None => connection::run(a, peer, false, me, stop).await.0,
                    },
                    Err(why) => {
                        tracing::warn!(%peer, "cluster peer refused: {why}");
                        return;
                    }
                };
                tracing::info!(%peer, "cluster peer left: {why}");
            });
        }
        connections.close();
        connections.wait().await;
    })
}
