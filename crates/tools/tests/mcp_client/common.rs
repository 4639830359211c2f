//! What the MCP client's tests share: where the real servers are (installed by
//! scripts/setup.sh; a missing one fails the test with that advice), specs for them, a Python
//! server over HTTP on a free port, and a bound on every wait.

use std::future::Future;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hearth_tools::{McpServerSpec, McpServers, McpSettings};

/// No test waits longer than this for anything.
pub(crate) const TEST_LIMIT: Duration = Duration::from_secs(90);

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository")
}

const SETUP: &str =
    "run scripts/setup.sh (or scripts/mcp-servers.sh) to install the MCP test servers";

/// The folder scripts/mcp-servers.sh installs into ($HEARTH_MCP_DIR, else its `--dir`).
pub(crate) fn mcp_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEARTH_MCP_DIR") {
        return dir.into();
    }
    let out = Command::new(repo_root().join("scripts/mcp-servers.sh"))
        .arg("--dir")
        .output()
        .expect("scripts/mcp-servers.sh --dir runs");
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

fn installed(name: &str) -> PathBuf {
    let path = mcp_dir().join(name);
    assert!(path.exists(), "{} is missing: {SETUP}", path.display());
    path
}

/// The repository's virtualenv Python, with the `mcp` SDK.
pub(crate) fn python() -> PathBuf {
    let python = repo_root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh",
        python.display()
    );
    let ok = Command::new(&python)
        .args(["-c", "import mcp"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "the venv has no `mcp` package: run scripts/setup.sh");
    python
}

pub(crate) fn everything(name: &str) -> McpServerSpec {
    let bin = installed("server-everything");
    McpServerSpec::stdio(name, bin.to_string_lossy(), vec!["stdio".into()])
}

pub(crate) fn filesystem(name: &str, dir: &Path) -> McpServerSpec {
    let bin = installed("server-filesystem");
    McpServerSpec::stdio(
        name,
        bin.to_string_lossy(),
        vec![dir.to_string_lossy().into_owned()],
    )
}

pub(crate) fn py_server() -> PathBuf {
    repo_root().join("tests/mcp/py_server.py")
}

pub(crate) fn py_stdio(name: &str) -> McpServerSpec {
    McpServerSpec::stdio(
        name,
        python().to_string_lossy(),
        vec![py_server().to_string_lossy().into_owned()],
    )
}

/// Quick settings for tests: short backoff, idle stop out of the way unless a test wants it.
pub(crate) fn settings() -> McpSettings {
    McpSettings {
        idle_stop: Duration::from_secs(600),
        start_timeout: Duration::from_secs(60),
        backoff_first: Duration::from_millis(200),
        backoff_max: Duration::from_secs(30),
    }
}

pub(crate) fn servers(specs: Vec<McpServerSpec>) -> McpServers {
    McpServers::new(specs, settings()).expect("valid specs")
}

/// Runs a test body within [`TEST_LIMIT`].
pub(crate) async fn bounded<T>(body: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .expect("the test finished in time")
}

/// Waits for `check` to hold, polling every 50 ms, up to `limit`.
pub(crate) async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

/// Whether a process is alive (a zombie counts as gone: it has exited).
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// Our Python server over streamable HTTP on a free port of 127.0.0.1, stopped (its whole
/// process group) on drop.
pub(crate) struct HttpServer {
    child: Child,
    pub(crate) url: String,
}

impl HttpServer {
    pub(crate) fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python())
            .arg(py_server())
            .args(["--http", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("the Python MCP server starts");
        let server = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the HTTP server listens within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}
