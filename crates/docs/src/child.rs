//! Reading a document in a process of its own, so that a file built to hurt (a PDF whose parse
//! loops, recurses past the stack or eats memory) costs that process and never the node: the
//! child is this same program started as `<program> read-document <job>`, with a ceiling on its
//! memory and CPU time, and killed at a deadline. It reads the file from its standard input
//! and writes `Result<Document, ReadError>` as JSON to its standard output.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::document::{Document, Limits};
use crate::error::ReadError;

/// The first argument that makes this program a document's reader.
pub const READ_DOCUMENT: &str = "read-document";

/// Documents read at once: each reader may take a core and its memory ceiling.
const READERS: usize = 2;

/// How a document is read in a child: the program (one whose `main` calls [`run_if_asked`]
/// first), and the child's ceilings.
#[derive(Debug, Clone)]
pub struct Reader {
    pub program: PathBuf,
    /// Wall-clock time a read may take; its CPU time is held to the same.
    pub timeout: Duration,
    /// Bytes of memory the read may take beyond what the program maps when it starts
    /// (Linux; elsewhere only the time is held).
    pub memory: u64,
    pub limits: Limits,
    /// One per document being read: more wait their turn.
    permits: Arc<tokio::sync::Semaphore>,
}

impl Reader {
    /// This program as the reader, with the default ceilings.
    pub fn this_program() -> std::io::Result<Self> {
        Ok(Self::new(std::env::current_exe()?))
    }

    /// `program` as the reader, with the default ceilings: a minute, 1 GiB.
    pub fn new(program: PathBuf) -> Self {
        Self {
            program,
            timeout: Duration::from_secs(60),
            memory: 1 << 30,
            limits: Limits::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(READERS)),
        }
    }

    /// Read the file `name` in a child process.
    pub async fn read(&self, name: &str, bytes: &[u8]) -> Result<Document, ReadError> {
        if bytes.len() > self.limits.file_bytes {
            return Err(ReadError::TooLarge {
                bytes: bytes.len(),
                max: self.limits.file_bytes,
            });
        }
        let job = Job {
            name: name.to_owned(),
            limits: self.limits,
            memory: self.memory,
            cpu_secs: self.timeout.as_secs().max(1),
        };
        let job = serde_json::to_string(&job).map_err(|e| ReadError::Reader(e.to_string()))?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| ReadError::Reader(e.to_string()))?;
        let mut child = tokio::process::Command::new(&self.program)
            .args([READ_DOCUMENT, &job])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ReadError::Reader(format!("{}: {e}", self.program.display())))?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ReadError::Reader(
                "it has no standard input or output".into(),
            ));
        };
        // Its answer holds at most the text limit, escaped as JSON.
        let most = (self.limits.text_bytes as u64).saturating_mul(7) + (1 << 20);
        let exchange = async {
            let bytes = bytes.to_vec();
            let write = async move {
                // A child that stops reading (it failed early) closes the pipe: not an error here.
                let _ = stdin.write_all(&bytes).await;
                drop(stdin);
            };
            let mut out = Vec::new();
            let mut limited = stdout.take(most);
            let read = limited.read_to_end(&mut out);
            let (_, read) = tokio::join!(write, read);
            if out.len() as u64 >= most {
                // An answer past any the limits allow: the child is not waited for.
                let _ = child.start_kill();
            }
            let status = child.wait().await;
            (read.map(|_| out), status)
        };
        let (out, status) = match tokio::time::timeout(self.timeout, exchange).await {
            Ok(done) => done,
            Err(_) => {
                return Err(ReadError::TimedOut {
                    secs: self.timeout.as_secs(),
                })
            }
        };
        let out = out.map_err(|e| ReadError::Crashed(e.to_string()))?;
        // Up to the text limit of JSON: parsed off the async threads.
        let parsed = tokio::task::spawn_blocking(move || {
            serde_json::from_slice::<Result<Document, ReadError>>(&out).ok()
        })
        .await
        .map_err(|e| ReadError::Reader(e.to_string()))?;
        match parsed {
            Some(answer) => answer,
            None => Err(ReadError::Crashed(match status {
                Ok(status) => ended(status),
                Err(e) => e.to_string(),
            })),
        }
    }
}

/// What a child is asked to do.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    name: String,
    limits: Limits,
    memory: u64,
    cpu_secs: u64,
}

/// How a child ended, in words.
fn ended(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        match status.signal() {
            Some(9) => return "it was killed".into(),
            Some(24) => return "it ran out of CPU time".into(),
            Some(11) => return "it crashed (signal 11)".into(),
            // Rust aborts on a stack overflow and on memory it cannot have.
            Some(6) => return "it aborted: out of stack or memory".into(),
            Some(s) => return format!("it was stopped by signal {s}"),
            None => {}
        }
    }
    format!("it exited with {status}")
}

/// When this program was started as a document's reader (`<program> read-document <job>`):
/// read the file on standard input and write the answer; the exit code to end with. `None`
/// otherwise: the program goes on as itself. Call it first in `main`.
pub fn run_if_asked() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != READ_DOCUMENT {
        return None;
    }
    let job: Job = match args
        .next()
        .and_then(|a| serde_json::from_str(a.to_str()?).ok())
    {
        Some(job) => job,
        None => {
            eprintln!("usage: {READ_DOCUMENT} <job as JSON>, started by Hearth itself");
            return Some(2);
        }
    };
    if let Err(e) = hold_to(&job) {
        eprintln!("cannot set the reader's limits: {e}");
        return Some(1);
    }
    let mut bytes = Vec::new();
    let most = job.limits.file_bytes as u64 + 1;
    if let Err(e) = std::io::stdin().take(most).read_to_end(&mut bytes) {
        eprintln!("cannot read the file: {e}");
        return Some(1);
    }
    let answer = crate::read::read(&job.name, &bytes, &job.limits);
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut out, &answer).is_ok() && out.flush().is_ok();
    Some(i32::from(!written))
}

/// Hold this process to the job's CPU time and memory.
fn hold_to(job: &Job) -> std::io::Result<()> {
    #[cfg(unix)]
    rlimit::setrlimit(rlimit::Resource::CPU, job.cpu_secs, job.cpu_secs + 1)?;
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status")?;
        let now_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| std::io::Error::other("no VmSize in /proc/self/status"))?;
        let limit = now_kib.saturating_mul(1024).saturating_add(job.memory);
        rlimit::setrlimit(rlimit::Resource::AS, limit, limit)?;
    }
    #[cfg(not(unix))]
    let _ = job;
    Ok(())
}
