//! llama-server built from the same era of llama.cpp (`scripts/llama-server.sh`), the program
//! the node's figures are compared with: found or built, started on a free loopback port, ready
//! when its `/health` says so, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// llama-server as `scripts/llama-server.sh` builds it (`HEARTH_LLAMA_SERVER` names another);
/// with `build` false, only one built already (a quick run never spends minutes on it).
pub(crate) fn llama_server_bin(build: bool) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HEARTH_LLAMA_SERVER") {
        return Some(PathBuf::from(p));
    }
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/llama-server.sh");
    let mut script = Command::new(script_path);
    if !build {
        script.arg("--built");
    }
    let out = script.output().ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_file()).then_some(path)
}

/// A llama-server process, killed when dropped.
pub(crate) struct LlamaServer {
    child: Child,
    pub(crate) base: String,
}

impl LlamaServer {
    /// Four slots as the node has, `threads` threads, `extra` arguments after.
    pub(crate) async fn start(
        bin: &Path,
        model: &Path,
        threads: i32,
        extra: &[&str],
    ) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        // Its log, to read when it fails.
        let log = std::env::temp_dir().join(format!("hearth-bench-llama-server-{port}.log"));
        let child = Command::new(bin)
            .arg("-m")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-np", "4", "-t", &threads.to_string(), "--jinja"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let server = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let ok = reqwest::get(format!("{}/health", server.base))
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("llama-server did not get ready in 120 s")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
