//! Taking the node onto the LAN and back: its listeners rebound on all interfaces or loopback
//! with the same ports (the doors', Ollama's second port and the cluster's following), the
//! connections already open left to finish.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpListener;

use super::{Listening, Node};
use crate::error::NodeError;

/// How long a rebind waits for the previous listener's port to be free.
const REBIND_WAIT: Duration = Duration::from_secs(2);

impl Node {
    /// Expose the node to the LAN (listen on all interfaces, API keys required from other
    /// machines) or take it back to loopback, keeping the port. Connections already open stay
    /// open; new ones go to the new listener.
    pub async fn set_exposed(&self, exposed: bool) -> Result<SocketAddr, NodeError> {
        let mut listening = self.inner.listening.lock().await;
        if self.is_exposed() == exposed {
            return Ok(self.addr());
        }
        let host = if exposed {
            self.inner.lan_host
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        let old_addr = self.addr();
        let addr = SocketAddr::new(host, self.inner.port);
        listening.stop.cancel();
        let listener = match bind_retrying(addr).await {
            Ok(l) => l,
            Err(source) => {
                // Put the old listener back so the node stays reachable.
                let old = bind_retrying(old_addr)
                    .await
                    .map_err(|source| NodeError::Bind {
                        addr: old_addr,
                        source,
                    })?;
                listening.stop = self.inner.state.shutdown.child_token();
                let task = hearth_server::listen::serve(
                    old,
                    self.inner.app.clone(),
                    listening.stop.clone(),
                    self.inner.state.limits,
                    self.inner.connections.clone(),
                );
                listening.tasks.push(task);
                self.follow_with_ollama_port(&mut listening, old_addr.ip())
                    .await;
                return Err(NodeError::Bind { addr, source });
            }
        };
        self.inner.state.exposure.set_exposed(exposed);
        listening.stop = self.inner.state.shutdown.child_token();
        let task = hearth_server::listen::serve(
            listener,
            self.inner.app.clone(),
            listening.stop.clone(),
            self.inner.state.limits,
            self.inner.connections.clone(),
        );
        listening.tasks.retain(|t| !t.is_finished());
        listening.tasks.push(task);
        *self.inner.addr.lock().expect("addr lock") = addr;
        self.follow_with_ollama_port(&mut listening, host).await;
        tracing::info!(%addr, exposed, "rebound");
        if let Some(task) = self.rebind_cluster(host).await {
            listening.tasks.push(task);
        }
        Ok(addr)
    }

    /// Listen on the second port (`--ollama-port`) at `host`, under the doors' current stop
    /// token (its previous listener stopped with the previous token).
    async fn follow_with_ollama_port(&self, listening: &mut Listening, host: IpAddr) {
        // The configured port, not the current address: after one failed move there is none,
        // and the next move must still bring the port back.
        let Some(port) = self.inner.ollama_port else {
            return;
        };
        let at = SocketAddr::new(host, port);
        let bound = match bind_retrying(at).await {
            Ok(l) => {
                let task = hearth_server::listen::serve(
                    l,
                    self.inner.app.clone(),
                    listening.stop.clone(),
                    self.inner.state.limits,
                    self.inner.connections.clone(),
                );
                listening.tasks.push(task);
                Some(at)
            }
            Err(e) => {
                tracing::warn!(addr = %at, error = %e, "the Ollama port could not follow the main one; it is closed");
                None
            }
        };
        *self.inner.ollama_addr.lock().expect("ollama addr lock") = bound;
    }
}

/// Bind, retrying briefly while a just-closed listener still holds the port.
pub(crate) async fn bind_retrying(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let deadline = tokio::time::Instant::now() + REBIND_WAIT;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
