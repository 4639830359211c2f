//! A Hearth connection that carries one byte stream instead of cluster messages: its `hello`
//! names the tunnel's kind (`RPC_TUNNEL`: a split model's link to ggml's RPC server), and
//! after the usual handshake (passcode, device identity) each piece of the stream is one
//! encrypted message. The listening side's first message says whether it took the tunnel
//! (`[1]`, then its [`Offer`]: two big-endian u64) or why not (`[0]` and a reason). From then on both sides ping every second (while
//! waiting for the stream's local end too) and end a tunnel whose peer is silent for
//! [`SILENCE`], as cluster connections do, so a vanished machine ends it in seconds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::handshake::{self, Admitted};
use super::link::{Incoming, Link};
use super::peers::Kind;
use crate::context::Context;
use crate::me::Me;
use hearth_base::connections::Held;

/// How often each side pings.
const PING_EVERY: Duration = Duration::from_secs(1);
/// A peer heard from not for this long is gone.
const SILENCE: Duration = Duration::from_millis(3000);
/// How long a tunnel's connection may take to be made and admitted.
const OPEN_WAIT: Duration = Duration::from_secs(10);
/// The most bytes one encrypted message of a tunnel holds.
const PIECE: usize = 64 * 1024;

/// What the side that took a tunnel offers it: the memory it gives (bytes), by which the owner
/// divides layers (passed to llama.cpp as a tensor split), and the memory its RPC device
/// reports to llama.cpp (sent for owners that divided by it before the tensor split; unused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    pub memory: u64,
    pub device_memory: u64,
}

impl Offer {
    fn encode(self) -> Vec<u8> {
        let mut m = vec![1];
        m.extend(self.memory.to_be_bytes());
        m.extend(self.device_memory.to_be_bytes());
        m
    }

    /// A taken tunnel's first message, or `None` when it is not one.
    fn decode(m: &[u8]) -> Option<Self> {
        let (&[1], rest) = m.split_at_checked(1)? else {
            return None;
        };
        let (memory, device_memory) = rest.split_at_checked(8)?;
        Some(Self {
            memory: u64::from_be_bytes(memory.try_into().ok()?),
            device_memory: u64::from_be_bytes(device_memory.try_into().ok()?),
        })
    }
}

/// Serves one tunnel a peer opened, of the kind it names; says why it ended.
pub type TunnelServer = Box<
    dyn Fn(
            Arc<Context>,
            String,
            Tunnel,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>
        + Send
        + Sync,
>;

impl Context {
    /// Tunnels peers open are served by `server` (once; a later one is ignored).
    pub fn serve_tunnels(&self, server: TunnelServer) {
        let _ = self.tunnels.set(Box::new(server));
    }

    /// Serve a tunnel of kind `kind`: why it ended.
    pub(crate) async fn serve_tunnel(self: &Arc<Self>, kind: String, mut tunnel: Tunnel) -> String {
        match self
            .tunnels
            .get()
            .and_then(|s| s.downcast_ref::<TunnelServer>())
        {
            Some(serve) => serve(self.clone(), kind, tunnel).await,
            None => {
                let why = "this node serves no tunnels".to_owned();
                let _ = tunnel.answer(Err(&why)).await;
                why
            }
        }
    }
}

/// One admitted tunnel connection, before its bytes flow.
pub struct Tunnel {
    link: Link,
    /// The peer's device name, for messages, and its proven device id.
    pub peer_name: String,
    pub peer_id: String,
    pub peer_addr: SocketAddr,
    /// What the peer offered when it took the tunnel (the opening side's only).
    pub offer: Option<Offer>,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel")
            .field("peer_name", &self.peer_name)
            .field("peer_addr", &self.peer_addr)
            .finish_non_exhaustive()
    }
}

/// The kind of tunnel an admitted connection's `hello` asks for, if any.
pub(crate) fn asked(admitted: &Admitted) -> Option<&str> {
    admitted.hello.hearth.as_ref()?.tunnel.as_deref()
}

impl Tunnel {
    /// The listening side of an admitted connection that asked for a tunnel (a Hearth peer's
    /// only: its link is encrypted).
    pub(crate) fn accepted(admitted: Admitted, peer_addr: SocketAddr) -> Result<Self, String> {
        if admitted.link.kind() != Kind::Hearth {
            return Err("a tunnel is for Hearth peers only".into());
        }
        Ok(Self {
            peer_name: admitted.hello.device_info.name.clone(),
            peer_id: admitted.hello.device_info.id.to_string(),
            link: admitted.link,
            peer_addr,
            offer: None,
        })
    }

    /// The listening side: tell the peer the tunnel is taken with what it offers, or why not
    /// (and end it).
    pub async fn answer(&mut self, taken: Result<Offer, &str>) -> Result<(), String> {
        let first = match taken {
            Ok(offer) => offer.encode(),
            Err(why) => [&[0u8][..], why.as_bytes()].concat(),
        };
        self.link.send_bytes(first).await
    }

    /// Connect to the Hearth node at `addr` for a tunnel of kind `kind`, and wait for it to be
    /// taken.
    pub async fn open(me: &Arc<Me>, addr: &str, kind: &str) -> Result<Self, String> {
        let opening = async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
            let peer_addr = tcp.peer_addr().map_err(|e| e.to_string())?;
            if !peer_addr.ip().is_loopback() && me.rules().passcode_hash.is_none() {
                return Err(format!(
                    "{peer_addr} is on the LAN, and a cluster on the LAN needs a passcode"
                ));
            }
            let _ = tcp.set_nodelay(true);
            let held = Held::new(tcp, me.table.outbound(), me.state.limits.write_timeout);
            let admitted = handshake::dial_for(
                Framed::new(held, super::frames::codec()),
                me,
                Some(kind),
                true,
            )
            .await
            .map_err(|e| e.to_string())?;
            let mut link = admitted.link;
            let name = admitted.hello.device_info.name;
            let peer_id = admitted.hello.device_info.id.to_string();
            let offer = loop {
                match link.next().await {
                    Some(Ok(Incoming::Ping)) => {}
                    Some(Ok(Incoming::Message(m))) if m.first() == Some(&1) => {
                        break Offer::decode(&m).ok_or_else(|| {
                            format!("{name} took the tunnel without saying what it offers")
                        })?
                    }
                    Some(Ok(Incoming::Message(m))) => {
                        let why = String::from_utf8_lossy(m.get(1..).unwrap_or_default());
                        return Err(format!("{name} refused: {why}"));
                    }
                    Some(Err(e)) => return Err(format!("{name}: {e}")),
                    None => return Err(format!("{name} closed the connection")),
                }
            };
            Ok(Self {
                peer_name: name,
                peer_id,
                link,
                peer_addr,
                offer: Some(offer),
            })
        };
        tokio::time::timeout(OPEN_WAIT, opening)
            .await
            .map_err(|_| format!("no tunnel to {addr} within {} s", OPEN_WAIT.as_secs()))?
    }

    /// Keep the tunnel alive (pinging, and hearing the peer's pings) until `fut` is ready: its
    /// output, or why the tunnel ended first. No bytes may come before the stream starts.
    pub async fn idle_until<T>(
        &mut self,
        fut: impl std::future::Future<Output = T>,
    ) -> Result<T, String> {
        tokio::pin!(fut);
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                out = &mut fut => return Ok(out),
                incoming = self.link.next() => match incoming {
                    None => return Err(format!("{} closed the tunnel", self.peer_name)),
                    Some(Err(e)) => return Err(format!("from {}: {e}", self.peer_name)),
                    Some(Ok(Incoming::Ping)) => {}
                    Some(Ok(Incoming::Message(_))) => {
                        return Err(format!("{} sent bytes before the stream began", self.peer_name))
                    }
                },
                _ = ping.tick() => self.keep_alive().await?,
            }
        }
    }

    /// A ping, after checking the peer was heard from lately.
    async fn keep_alive(&mut self) -> Result<(), String> {
        if self.link.heard().elapsed() > SILENCE {
            return Err(format!("{} went silent", self.peer_name));
        }
        self.link
            .ping()
            .await
            .map_err(|e| format!("pinging {}: {e}", self.peer_name))
    }

    /// Carry bytes between the tunnel and a local stream (`from` read into the tunnel, the
    /// tunnel's bytes written to `to`) until either side ends: why it ended.
    pub async fn pump(
        mut self,
        mut from: impl AsyncRead + Unpin,
        mut to: impl AsyncWrite + Unpin,
    ) -> String {
        let mut buf = vec![0u8; PIECE];
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                read = from.read(&mut buf) => match read {
                    Ok(0) => return "the local side closed".into(),
                    Ok(n) => {
                        if let Err(e) = self.link.send_bytes(buf[..n].to_vec()).await {
                            return format!("sending to {}: {e}", self.peer_name);
                        }
                    }
                    Err(e) => return format!("the local side failed: {e}"),
                },
                incoming = self.link.next() => match incoming {
                    None => return format!("{} closed the tunnel", self.peer_name),
                    Some(Err(e)) => return format!("from {}: {e}", self.peer_name),
                    Some(Ok(Incoming::Ping)) => {}
                    Some(Ok(Incoming::Message(bytes))) => {
                        if let Err(e) = to.write_all(&bytes).await {
                            return format!("the local side failed: {e}");
                        }
                    }
                },
                _ = ping.tick() => {
                    if let Err(why) = self.keep_alive().await {
                        return why;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offer_is_read_back_and_a_short_one_is_not() {
        let offer = Offer {
            memory: 1 << 30,
            device_memory: 24 << 30,
        };
        assert_eq!(Offer::decode(&offer.encode()), Some(offer));
        assert_eq!(Offer::decode(&[1]), None);
        assert_eq!(Offer::decode(&offer.encode()[..16]), None);
        assert_eq!(Offer::decode(&[[0u8].as_slice(), &[7; 16]].concat()), None);
    }
}
