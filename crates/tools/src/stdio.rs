//! A local MCP server as a child process: started in a process group of its own, spoken to in
//! JSON-RPC lines over its stdin and stdout, its stderr kept in the server's log, and the whole
//! group stopped (stdin closed, then SIGTERM, then SIGKILL to the group).
//!
//! Why not rmcp's `TokioChildProcess` (process-wrap): its shutdown returns once the server
//! itself has exited, so a grandchild the server started (an `npx` wrapper's node, a browser)
//! lives on; and its line reader skips a line that is not JSON-RPC with only a log entry, so a
//! reply broken by a stray `print` leaves the call waiting for its timeout. Here the group is
//! made with std's `process_group(0)` (no `pre_exec`, no `unsafe`) and signalled with
//! `kill(-pgid)` through `rustix`; and such a line ends the connection with an error that names
//! it (MCP's stdio transport: "The server MUST NOT write anything to its stdout that is not a
//! valid MCP message"). Everything above the lines (the session, requests, cancellation) is
//! rmcp's.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rustix::process::{Pid, Signal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::log::{ServerLog, LOG_LINE_BYTES};

/// The longest JSON-RPC line read from a server. Servers on the Python SDK send a tool's result
/// twice (`content` and `structuredContent`), so a 10 MB result is a 20 MB line; anything past
/// this is refused rather than buffered.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// How long each step of a stop waits (stdin closed, then SIGTERM) before the next.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How long a stop waits for the rest of the server's stderr once the group is gone (a
/// member that escaped the group may hold the pipe open).
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// What a stdio server's start needs from its spec.
#[derive(Debug)]
pub(crate) struct StdioCommand<'a> {
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub cwd: Option<&'a PathBuf>,
}

/// Starts the server; its stderr goes into `log` from a task of its own.
pub(crate) fn spawn(
    cmd: StdioCommand<'_>,
    log: Arc<ServerLog>,
) -> io::Result<(ChildGroup, StdioTransport)> {
    let mut command = Command::new(cmd.command);
    command
        .args(cmd.args)
        .envs(cmd.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = cmd.cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn()?;
    let pgid = child.id().and_then(|id| Pid::from_raw(id as i32));
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io::Error::other("the child's pipes were not made"));
    };
    let stderr = tokio::spawn(read_stderr(stderr, log.clone()));
    let broken = Arc::new(Mutex::new(None));
    let group = ChildGroup {
        child,
        pgid,
        done: false,
        broken: broken.clone(),
        stderr,
    };
    let transport = StdioTransport {
        stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
        stdout: FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_MESSAGE_BYTES)),
        broken,
        log,
    };
    Ok((group, transport))
}

/// Copies stderr into the log line by line; bytes that are not UTF-8 are replaced, a line past
/// the log's limit is cut (the rest of it dropped), and reading never stops before EOF, so the
/// server never blocks on a full pipe.
async fn read_stderr(mut stderr: ChildStderr, log: Arc<ServerLog>) {
    let mut chunk = vec![0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                log.push(&String::from_utf8_lossy(&line));
                line.clear();
            } else if line.len() <= LOG_LINE_BYTES {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        log.push(&String::from_utf8_lossy(&line));
    }
}

/// The server's process group; dropping it kills the group.
#[derive(Debug)]
pub(crate) struct ChildGroup {
    child: Child,
    pgid: Option<Pid>,
    done: bool,
    broken: Arc<Mutex<Option<String>>>,
    stderr: tokio::task::JoinHandle<()>,
}

impl ChildGroup {
    /// Waits for the server itself to exit (cancel-safe).
    pub(crate) async fn exited(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Why the transport ended the connection, if it did (a line that is not JSON-RPC).
    pub(crate) fn protocol_error(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops the whole group once its stdin is closed: waits for the server, then SIGTERM to
    /// the group, then SIGKILL; members left after the server exited get the same. Returns the
    /// server's exit status when it was read.
    pub(crate) async fn stop(mut self) -> Option<ExitStatus> {
        let mut status = tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        if status.is_none() {
            self.signal(Signal::TERM);
            status = tokio::time::timeout(STOP_GRACE, self.child.wait())
                .await
                .ok()
                .and_then(Result::ok);
        }
        if status.is_none() {
            self.signal(Signal::KILL);
            status = self.child.wait().await.ok();
        }
        // The server is gone; what it started in its group goes too.
        if self.group_alive() {
            self.signal(Signal::TERM);
            let deadline = tokio::time::Instant::now() + STOP_GRACE;
            while self.group_alive() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            self.signal(Signal::KILL);
        }
        self.done = true;
        // The server's last words (why it failed) are in the log before anyone reads them.
        let _ = tokio::time::timeout(STDERR_DRAIN, &mut self.stderr).await;
        status
    }

    fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH (no member left) is the expected end.
            let _ = rustix::process::kill_process_group(pgid, signal);
        }
    }

    fn group_alive(&self) -> bool {
        self.pgid
            .is_some_and(|pgid| rustix::process::test_kill_process_group(pgid).is_ok())
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        if !self.done {
            // Not stopped in order (the manager was dropped, or a start failed half-way).
            self.signal(Signal::KILL);
        }
    }
}

/// rmcp's transport over the child's pipes: one JSON-RPC message per line.
#[derive(Debug)]
pub(crate) struct StdioTransport {
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    stdout: FramedRead<ChildStdout, LinesCodec>,
    broken: Arc<Mutex<Option<String>>>,
    log: Arc<ServerLog>,
}

impl StdioTransport {
    fn broke(&self, why: String) {
        tracing::warn!("MCP server's stdout: {why}");
        self.log.note(&why);
        *self.broken.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let stdin = self.stdin.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(io::Error::other)?;
            line.push(b'\n');
            let mut stdin = stdin.lock().await;
            let pipe = stdin
                .as_mut()
                .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin is closed"))?;
            pipe.write_all(&line).await?;
            pipe.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let line = match self.stdout.next().await? {
                Ok(line) => line,
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    self.broke(format!(
                        "wrote a message over {} MiB to stdout",
                        MAX_MESSAGE_BYTES >> 20
                    ));
                    return None;
                }
                Err(LinesCodecError::Io(e)) if e.kind() == io::ErrorKind::InvalidData => {
                    self.broke("wrote bytes that are not UTF-8 to stdout, which MCP keeps for its JSON-RPC messages".into());
                    return None;
                }
                Err(LinesCodecError::Io(_)) => return None,
            };
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&line) {
                Ok(message) => return Some(message),
                Err(e) if e.is_syntax() || e.is_eof() => {
                    let shown: String = line.chars().take(200).collect();
                    self.broke(format!(
                        "wrote a line that is not JSON-RPC to stdout, which MCP keeps for its \
                         messages (a server should log to stderr): {shown:?}"
                    ));
                    return None;
                }
                // JSON, but no message rmcp knows (a newer protocol's): skipped, as rmcp does.
                Err(e) => {
                    tracing::debug!("skipped a message from an MCP server: {e}");
                    self.log
                        .note(&format!("skipped a message it cannot read: {e}"));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Closing stdin is MCP's stdio shutdown; the process group is ChildGroup's.
        self.stdin.lock().await.take();
        Ok(())
    }
}
