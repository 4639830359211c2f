//! Peers' split models on this machine: a tunnel a peer opens (see
//! `cluster::tunnel`) gets a `hearth-node rpc-serve` process of its own, whose standard input
//! and output it carries, when this node shares its memory (`--share-memory`), the peer is
//! one of the cluster's now, and it holds fewer than [`PER_PEER`] (all peers: [`AT_ONCE`]).
//! The tunnel's answer offers the memory free here, up to `--share-memory`'s limit, and the
//! process may allocate no more than that. It ends with the tunnel, and the tunnel with it.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use hearth_protocol::cluster::RPC_TUNNEL;

use crate::cluster::tunnel::{Offer, Tunnel};
use crate::server::AppState;

/// Split models one peer may have on this machine at once, and all peers together.
pub(crate) const PER_PEER: usize = 2;
pub(crate) const AT_ONCE: usize = 4;

/// The `rpc-serve` processes this node runs, by peer device id.
#[derive(Debug, Default)]
pub struct Hosted(Arc<Mutex<HashMap<String, usize>>>);

/// One peer's place among them, given back when dropped.
struct Place(Arc<Mutex<HashMap<String, usize>>>, String);

impl Drop for Place {
    fn drop(&mut self) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = all.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.1);
            }
        }
    }
}

impl Hosted {
    fn take(&self, peer: &str) -> Result<Place, String> {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if all.values().sum::<usize>() >= AT_ONCE {
            return Err(format!("this node serves {AT_ONCE} split models already"));
        }
        let n = all.entry(peer.to_owned()).or_default();
        if *n >= PER_PEER {
            return Err(format!(
                "this node serves {PER_PEER} of that peer's split models already"
            ));
        }
        *n += 1;
        Ok(Place(self.0.clone(), peer.to_owned()))
    }
}

/// Serve a tunnel of kind `kind` a peer opened: why it ended.
pub(crate) async fn serve(state: &AppState, kind: &str, mut tunnel: Tunnel) -> String {
    let peer = tunnel.peer_name.clone();
    let refused = if kind != RPC_TUNNEL {
        Some(format!(
            "unknown tunnel {:?}",
            kind.chars().take(40).collect::<String>()
        ))
    } else if state.splits.share_limit().is_none() {
        Some("this node does not share its memory with split models (--share-memory)".into())
    } else if !state
        .cluster_peers
        .list()
        .iter()
        .any(|p| p.device_id == tunnel.peer_id)
    {
        Some("only a peer connected to this node's cluster may open one".into())
    } else {
        None
    };
    let place = match refused {
        Some(why) => Err(why),
        None => state.splits.hosted().take(&tunnel.peer_id),
    };
    let _place = match place {
        Ok(p) => p,
        Err(why) => {
            let _ = tunnel.answer(Err(&why)).await;
            return format!("refused {peer}'s tunnel: {why}");
        }
    };
    let threads = state.host.settings().threads.max(1);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            let why = format!("cannot find this program: {e}");
            let _ = tunnel.answer(Err(&why)).await;
            return why;
        }
    };
    // What this machine offers now, which the process may not pass.
    let offer = offer(state.splits.share_limit().unwrap_or(0));
    let spawned = tokio::process::Command::new(exe)
        .args(["rpc-serve", "--threads", &threads.to_string()])
        .args(["--memory-limit", &(offer.memory >> 20).max(1).to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let why = format!("cannot start rpc-serve: {e}");
            let _ = tunnel.answer(Err(&why)).await;
            return why;
        }
    };
    let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
        return "rpc-serve has no standard input or output".into();
    };
    if let Err(e) = tunnel.answer(Ok(offer)).await {
        return e;
    }
    tracing::info!(%peer, offer_mib = offer.memory >> 20, "serving a peer's split model: memory and CPU over a tunnel");
    let why = tunnel.pump(from, to).await;
    let _ = child.kill().await;
    why
}

/// What this machine offers a split now: the memory free for models (a tenth is kept for
/// everything else), up to `limit`, and what its RPC device reports (ggml's CPU device
/// reports the machine's whole memory).
fn offer(limit: u64) -> Offer {
    let (available, total) = crate::models::memory::machine().unwrap_or((0, 0));
    Offer {
        memory: (available / 10 * 9).min(limit),
        device_memory: total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_a_few_places_and_all_peers_a_few_more() {
        let hosted = Hosted::default();
        let a1 = hosted.take("a").unwrap();
        let _a2 = hosted.take("a").unwrap();
        assert!(hosted.take("a").is_err(), "a third for one peer");
        let _b1 = hosted.take("b").unwrap();
        let _b2 = hosted.take("b").unwrap();
        assert!(hosted.take("c").is_err(), "a fifth in all");
        drop(a1);
        assert!(hosted.take("c").is_ok(), "a place given back is free again");
    }
}
