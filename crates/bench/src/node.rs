//! A `hearth-node serve` process on loopback for the benchmark to measure: started on a free
//! port with a temp data dir, ready when it says so, its resident memory read from /proc,
//! stopped with SIGTERM (and killed if it lingers) when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub(crate) struct NodeProc {
    child: Child,
    pub(crate) addr: String,
    _dir: tempfile::TempDir,
}

impl NodeProc {
    pub(crate) fn start(bin: &Path, model: &Path, extra: &[String]) -> Result<Self> {
        Self::launch(bin, Some(model), extra, None)
    }

    /// [`NodeProc::start`] with the model or none, pinned to `core` when given (`taskset`).
    pub(crate) fn launch(
        bin: &Path,
        model: Option<&Path>,
        extra: &[String],
        core: Option<usize>,
    ) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut cmd = match core {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.args(["-c", &c.to_string()]).arg(bin);
                t
            }
            None => Command::new(bin),
        };
        cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(["--key-storage", "file", "--no-discovery"]);
        if !extra.iter().any(|a| a == "--cluster-port") {
            cmd.args(["--cluster-port", "0"]);
        }
        let mut child = cmd
            .arg("--data-dir")
            .arg(dir.path())
            .args(
                model
                    .map(|m| ["--model".as_ref(), m.as_os_str()])
                    .into_iter()
                    .flatten(),
            )
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut lines = BufReader::new(child.stdout.take().context("node stdout")?).lines();
        let first = lines.next().context("the node printed nothing")??;
        let addr = first
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .context("the node did not print its URL")?
            .to_owned();
        let ready = lines
            .next()
            .context("the node exited before it was ready")??;
        if !(ready.contains("is ready") || model.is_none() && ready.contains("No model yet")) {
            bail!("the node did not get ready: {ready}");
        }
        Ok(Self {
            child,
            addr,
            _dir: dir,
        })
    }

    /// SIGKILL, and reaped.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Resident set size in bytes, from /proc/PID/status.
    pub(crate) fn rss_bytes(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .context("no VmRSS")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()?;
        Ok(kb * 1024)
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(6);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An argument, owned.
pub(crate) fn s(v: &str) -> String {
    v.to_owned()
}

/// The node's cluster port, as `127.0.0.1:PORT`.
pub(crate) async fn cluster_addr(http: &reqwest::Client, node: &NodeProc) -> Result<String> {
    let v: serde_json::Value = http
        .get(format!("{}/api/cluster", node.base()))
        .send()
        .await?
        .json()
        .await?;
    let port = v["port"].as_u64().context("no cluster port")?;
    Ok(format!("127.0.0.1:{port}"))
}
