//! `hearth-node rpc-serve`: ggml's RPC server over this machine's CPU, for one tunnel. The
//! tunnel is the process's standard input and output (the node that starts it carries them
//! over its encrypted connection with the peer); the server's loopback port serves only this
//! process's own connection and refuses every other, and the process ends with the tunnel.

use std::io::{Read, Write};
use std::time::Duration;

use hearth_engine::rpc::RpcError;

/// How long the server may take to start and accept this process's connection.
const START_WAIT: Duration = Duration::from_secs(30);

/// Serving a split model needs a Unix descriptor model (the tunnel on standard output, the
/// RPC server's lock-down).
#[cfg(not(unix))]
pub fn run(_threads: usize) -> Result<(), RpcError> {
    Err(RpcError::Stopped(
        "serving a split model is supported on Linux and macOS only".into(),
    ))
}

/// Serve the tunnel on standard input and output until either side closes it.
#[cfg(unix)]
pub fn run(threads: usize) -> Result<(), RpcError> {
    // Before ggml prints anything: its banner goes to standard error, the bytes to the tunnel.
    let mut tunnel_out = hearth_engine::rpc::take_stdout()?;
    let (server, _thread) = hearth_engine::rpc::serve_one(threads, START_WAIT)?;
    let at = server.peer_addr()?;
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
