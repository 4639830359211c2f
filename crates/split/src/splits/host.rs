//! Peers' split models on this machine: a tunnel a peer opens (see `hearth_cluster::tunnel`)
//! gets a `hearth-node rpc-serve` process of its own, whose standard input and output it
//! carries, when this node shares its memory (`--share-memory`), the peer is
//! one of the cluster's now, and it holds fewer than [`PER_PEER`] (all peers: [`AT_ONCE`]).
//! The tunnel's answer offers the memory free here, up to `--share-memory`'s limit, and the
//! process may allocate no more than that. It ends with the tunnel, and the tunnel with it.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use hearth_protocol::cluster::RPC_TUNNEL;

use super::Splits;
use hearth_cluster::tunnel::{Offer, Tunnel};
use hearth_cluster::Context;

/// Split models one peer may have on this machine at once, and all peers together.
pub(crate) const PER_PEER: usize = 2;
pub(crate) const AT_ONCE: usize = 4;

/// The `rpc-serve` processes this node runs: how many for each peer (by device id), and the
/// memory offered to them all.
#[derive(Debug, Default)]
pub struct Hosted(Arc<Mutex<Held>>);

#[derive(Debug, Default)]
struct Held {
    by_peer: HashMap<String, usize>,
    offered: u64,
}

/// One peer's place among them and what it was offered, given back when dropped.
struct Place {
    all: Arc<Mutex<Held>>,
    peer: String,
    offer: Offer,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        all.offered = all.offered.saturating_sub(self.offer.memory);
        if let Some(n) = all.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                all.by_peer.remove(&self.peer);
            }
        }
    }
}

impl Hosted {
    /// A place for `peer` with what this machine offers it: the memory free for models (a
    /// tenth kept for everything else), at most what is left of the `limit` (`--share-memory
    /// MIB` is for all places together; `u64::MAX`: none).
    fn take(&self, peer: &str, limit: u64, machine: (u64, u64)) -> Result<Place, String> {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if all.by_peer.values().sum::<usize>() >= AT_ONCE {
            return Err(format!("this node serves {AT_ONCE} split models already"));
        }
        if all.by_peer.get(peer).copied().unwrap_or(0) >= PER_PEER {
            return Err(format!(
                "this node serves {PER_PEER} of that peer's split models already"
            ));
        }
        let (available, total) = machine;
        // A limit is one for all places; what is free the system counts as they take it.
        let memory = match limit {
            u64::MAX => available / 10 * 9,
            limit => (available / 10 * 9).min(limit.saturating_sub(all.offered)),
        };
        if memory == 0 {
            return Err("this node has given all the memory it shares already".into());
        }
        *all.by_peer.entry(peer.to_owned()).or_default() += 1;
        all.offered = all.offered.saturating_add(memory);
        Ok(Place {
            all: self.0.clone(),
            peer: peer.to_owned(),
            offer: Offer {
                memory,
                device_memory: total,
            },
        })
    }
}

/// Serve a tunnel of kind `kind` a peer opened: why it ended.
pub(crate) async fn serve(
    splits: &Splits,
    state: &Context,
    kind: &str,
    mut tunnel: Tunnel,
) -> String {
    let peer = tunnel.peer_name.clone();
    let refused = if kind != RPC_TUNNEL {
        Some(format!(
            "unknown tunnel {:?}",
            kind.chars().take(40).collect::<String>()
        ))
    } else if splits.share_limit().is_none() {
        Some("this node does not share its memory with split models (--share-memory)".into())
    } else if !state
        .peers
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
        None => splits.hosted().take(
            &tunnel.peer_id,
            splits.share_limit().unwrap_or(0),
            hearth_models::memory::machine().unwrap_or((0, 0)),
        ),
    };
    let place = match place {
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
    // What this machine offers, which the process may not pass.
    let offer = place.offer;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_a_few_places_and_all_peers_a_few_more() {
        let hosted = Hosted::default();
        let plenty = (u64::MAX / 2, u64::MAX / 2);
        let take = |p: &str| hosted.take(p, u64::MAX, plenty);
        let a1 = take("a").unwrap();
        let _a2 = take("a").unwrap();
        assert!(take("a").is_err(), "a third for one peer");
        let _b1 = take("b").unwrap();
        let _b2 = take("b").unwrap();
        assert!(take("c").is_err(), "a fifth in all");
        drop(a1);
        assert!(take("c").is_ok(), "a place given back is free again");
    }

    #[test]
    fn the_shared_memory_is_offered_once_in_all() {
        const GIB: u64 = 1 << 30;
        let hosted = Hosted::default();
        // 10 GiB free: the limit of 4 GiB is what all places share.
        let machine = (10 * GIB, 16 * GIB);
        let first = hosted.take("a", 4 * GIB, machine).unwrap();
        assert_eq!(first.offer.memory, 4 * GIB);
        assert_eq!(first.offer.device_memory, 16 * GIB);
        assert!(hosted.take("b", 4 * GIB, machine).is_err(), "nothing left");
        drop(first);
        let again = hosted.take("b", 4 * GIB, machine).unwrap();
        assert_eq!(again.offer.memory, 4 * GIB, "given back when it ends");
        // Without a limit, what is free (less a tenth), which the system lowers as each
        // process takes its share.
        let all = Hosted::default();
        let one = all.take("a", u64::MAX, machine).unwrap();
        assert_eq!(one.offer.memory, 9 * GIB);
        assert_eq!(
            all.take("b", u64::MAX, machine).unwrap().offer.memory,
            9 * GIB
        );
    }
}
