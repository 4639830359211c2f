//! Peers' split models on this machine: a tunnel a peer opens (see
//! `cluster::tunnel`) gets a `hearth-node rpc-serve` process of its own, whose standard input
//! and output it carries, when this node shares its memory (`--share-memory`). The process
//! ends with the tunnel, and the tunnel with the process.

use std::process::Stdio;

use hearth_protocol::cluster::RPC_TUNNEL;

use crate::cluster::tunnel::Tunnel;
use crate::server::AppState;

/// Serve a tunnel of kind `kind` a peer opened: why it ended.
pub(crate) async fn serve(state: &AppState, kind: &str, mut tunnel: Tunnel) -> String {
    let peer = tunnel.peer_name.clone();
    let refused = if kind != RPC_TUNNEL {
        Some(format!(
            "unknown tunnel {:?}",
            kind.chars().take(40).collect::<String>()
        ))
    } else if !state.splits.shares_memory() {
        Some("this node does not share its memory with split models (--share-memory)".into())
    } else {
        None
    };
    if let Some(why) = refused {
        let _ = tunnel.answer(Some(&why)).await;
        return format!("refused {peer}'s tunnel: {why}");
    }
    let threads = state.host.settings().threads.max(1);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            let why = format!("cannot find this program: {e}");
            let _ = tunnel.answer(Some(&why)).await;
            return why;
        }
    };
    let spawned = tokio::process::Command::new(exe)
        .args(["rpc-serve", "--threads", &threads.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let why = format!("cannot start rpc-serve: {e}");
            let _ = tunnel.answer(Some(&why)).await;
            return why;
        }
    };
    let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
        return "rpc-serve has no standard input or output".into();
    };
    if let Err(e) = tunnel.answer(None).await {
        return e;
    }
    tracing::info!(%peer, "serving a peer's split model: memory and CPU over a tunnel");
    let why = tunnel.pump(from, to).await;
    let _ = child.kill().await;
    why
}
