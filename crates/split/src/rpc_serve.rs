//! `hearth-node rpc-serve`: ggml's RPC server over this machine's CPU, for one tunnel. The
//! tunnel is the process's standard input and output (the node that starts it carries them
//! over its encrypted connection with the peer); the server's loopback port serves only this
//! process's own connection and refuses every other, and the process ends with the tunnel.
//! On Linux the process may map only what the node offered the peer (`--memory-limit`) beyond
//! what it holds once the server is up, and a little for threads.

use std::io::{Read, Write};
use std::time::Duration;

use hearth_engine::rpc::RpcError;

/// How long the server may take to start and accept this process's connection.
const START_WAIT: Duration = Duration::from_secs(30);
/// Address space beyond the offer: the server's own buffers, and each compute thread's stack.
/// And a quarter of the offer: ggml receives each tensor whole before copying it into place,
/// so the largest one it is sent (an output layer) is held twice for a moment.
#[cfg(target_os = "linux")]
const SLACK: u64 = 64 << 20;
#[cfg(target_os = "linux")]
const PER_THREAD: u64 = 16 << 20;

/// Serving a split model needs a Unix descriptor model (the tunnel on standard output, the
/// RPC server's lock-down).
#[cfg(not(unix))]
pub fn run(_threads: usize, _memory: Option<u64>) -> Result<(), RpcError> {
    Err(RpcError::Stopped(
        "serving a split model is supported on Linux and macOS only".into(),
    ))
}

/// Serve the tunnel on standard input and output until either side closes it, allocating at
/// most `memory` bytes for the peer's layers when given.
#[cfg(unix)]
pub fn run(threads: usize, memory: Option<u64>) -> Result<(), RpcError> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    hearth_engine::rpc::one_malloc_arena();
    // Before ggml prints anything: its banner goes to standard error, the bytes to the tunnel.
    let mut tunnel_out = hearth_engine::rpc::take_stdout()?;
    let (server, _thread) = hearth_engine::rpc::serve_one(threads, START_WAIT)?;
    let at = server.peer_addr()?;
    if let Some(memory) = memory {
        #[cfg(target_os = "linux")]
        {
            let slack = SLACK + PER_THREAD * threads as u64 + memory / 4;
            let limit = limit_memory(memory.saturating_add(slack))?;
            tracing::info!(
                memory_mib = memory >> 20,
                limit_mib = limit >> 20,
                "the peer's layers may take no more than it was offered"
            );
        }
        #[cfg(not(target_os = "linux"))]
        tracing::warn!(
            memory_mib = memory >> 20,
            "no memory limit on this system: the peer is trusted to keep to its offer"
        );
    }
    tracing::info!(%at, threads, "serving this machine's CPU to one tunnel");
    let mut to_server = server.try_clone()?;
    let inbound = std::thread::Builder::new()
        .name("rpc-tunnel-in".into())
        .spawn(move || {
            let copied = pump(&mut std::io::stdin().lock(), &mut to_server);
            // The tunnel closed: the server sees its client go and stops.
            let _ = to_server.shutdown(std::net::Shutdown::Write);
            copied
        })?;
    let mut from_server = server;
    let sent = pump(&mut from_server, &mut tunnel_out);
    let _ = tunnel_out.flush();
    let received = inbound.join().ok();
    tracing::info!(
        sent = sent.as_ref().ok(),
        received = received.as_ref().and_then(|r| r.as_ref().ok()),
        "the tunnel closed"
    );
    sent?;
    Ok(())
}

/// Keep this process's address space within what it maps now plus `extra` bytes: what a
/// peer's split model may allocate here. An allocation past it fails (ggml's server refuses
/// the buffer, or this process ends), and the machine's memory is never at stake. The limit.
#[cfg(target_os = "linux")]
fn limit_memory(extra: u64) -> Result<u64, RpcError> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let now_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| RpcError::Backend("no VmSize in /proc/self/status".into()))?;
    let limit = now_kib.saturating_mul(1024).saturating_add(extra);
    rlimit::setrlimit(rlimit::Resource::AS, limit, limit)?;
    Ok(limit)
}

/// Copy until the reader ends, each read passed on at once. Not `std::io::copy`: between a pipe
/// and a socket it splices, and a splice was seen to sit on bytes already in the pipe until the
/// next ones came, which stalls a request-and-answer protocol.
fn pump(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
        total += n as u64;
    }
}
