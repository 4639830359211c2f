//! A real `hearth-node serve` process for tests that need one of their own (signals, file
//! descriptor limits, a second node on one data dir): started on a free port with a temp
//! data dir, its URL read from its first line, killed on drop even when the test panics.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Lines, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NodeProcess {
    pub child: Child,
    pub url: String,
    pub addr: String,
    /// The lines after the first (the ready line, ...).
    pub lines: Lines<BufReader<ChildStdout>>,
    /// Where the node's stderr goes.
    pub log: std::path::PathBuf,
}

/// What a node says (on standard error) when its model cannot be loaded.
const UNLOADABLE: &str = "The model could not be loaded";

/// How a node process is started (see `NodeProcess::launch_with`).
#[derive(Default)]
struct Launch<'a> {
    netns: Option<&'a str>,
    model: Option<&'a Path>,
    args: &'a [&'a str],
    open_files: Option<u32>,
    ready_line: &'a str,
    env: &'a [(&'a str, &'a str)],
}

impl NodeProcess {
    /// `hearth-node serve --port 0 --data-dir DATA --model <default model> ARGS`, run through
    /// `sh -c "ulimit -n N; exec ..."` when `open_files` is given. Waits for the ready line.
    pub fn start(data_dir: &Path, args: &[&str], open_files: Option<u32>) -> Self {
        Self::launch(data_dir, Some(&super::model_path()), args, open_files)
    }

    /// Like [`NodeProcess::start`] on another model file.
    pub fn start_model(data_dir: &Path, model: &Path, args: &[&str]) -> Self {
        Self::launch(data_dir, Some(model), args, None)
    }

    /// Like [`NodeProcess::start`] with no model (its models folder, in the data dir, empty).
    pub fn start_without_model(data_dir: &Path, args: &[&str]) -> Self {
        Self::launch(data_dir, None, args, None)
    }

    /// Like [`NodeProcess::start_without_model`], for a node whose folder holds a model it
    /// cannot load (too large for its memory limit): its second line says so.
    pub fn start_unloadable(data_dir: &Path, args: &[&str]) -> Self {
        Self::launch_with(
            data_dir,
            Launch {
                args,
                ready_line: UNLOADABLE,
                ..Launch::default()
            },
        )
    }

    /// Like [`NodeProcess::start`], with these environment variables set.
    pub fn start_with_env(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let model = super::model_path();
        Self::launch_with(
            data_dir,
            Launch {
                model: Some(&model),
                args,
                ready_line: Self::ready_line(true),
                env,
                ..Launch::default()
            },
        )
    }

    /// Like [`NodeProcess::start_with_env`] with no `--model`: the node loads the first model of
    /// its folder (`--models-dir` among `args`).
    pub fn start_from_folder_with_env(
        data_dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::launch_with(
            data_dir,
            Launch {
                args,
                ready_line: Self::ready_line(true),
                env,
                ..Launch::default()
            },
        )
    }

    /// Like [`NodeProcess::start`] (with the default model or none) inside network namespace
    /// `ns` (`ip netns exec`).
    pub fn start_in_netns(ns: &str, data_dir: &Path, model: bool, args: &[&str]) -> Self {
        let model = model.then(super::model_path);
        Self::launch_with(
            data_dir,
            Launch {
                netns: Some(ns),
                model: model.as_deref(),
                args,
                ready_line: Self::ready_line(model.is_some()),
                ..Launch::default()
            },
        )
    }

    fn launch(
        data_dir: &Path,
        model: Option<&Path>,
        args: &[&str],
        open_files: Option<u32>,
    ) -> Self {
        Self::launch_with(
            data_dir,
            Launch {
                model,
                args,
                open_files,
                ready_line: Self::ready_line(model.is_some()),
                ..Launch::default()
            },
        )
    }

    /// What a node's second line says once it is up, with a model or without.
    fn ready_line(model: bool) -> &'static str {
        if model {
            "is ready"
        } else {
            "No model yet"
        }
    }

    fn launch_with(data_dir: &Path, how: Launch<'_>) -> Self {
        let Launch {
            netns,
            model,
            args,
            open_files,
            ready_line,
            env,
        } = how;
        let bin = env!("CARGO_BIN_EXE_hearth-node");
        let log = data_dir.with_extension("log");
        let mut cmd = match open_files {
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin);
                c
            }
            None => match netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns, bin]);
                    c
                }
                None => Command::new(bin),
            },
        };
        cmd.args(["serve", "--port", "0", "--key-storage", "file"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(
                model
                    .map(|m| [OsStr::new("--model"), m.as_os_str()])
                    .into_iter()
                    .flatten(),
            )
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"));
        // Killed and reaped if anything below panics; killed if it is not ready in time (a
        // read of its output would otherwise wait forever).
        let mut child = Reaper(Some(cmd.spawn().expect("starting hearth-node")));
        let stdout = child.0.as_mut().and_then(|c| c.stdout.take());
        let mut lines = BufReader::new(stdout.expect("stdout")).lines();
        let started = watchdog(child.0.as_ref().map_or(0, Child::id), START_LIMIT);
        let first = lines
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("the node printed nothing: {}", read(&log)));
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_owned();
        if ready_line == UNLOADABLE {
            // Said on standard error, in the log.
            let deadline = std::time::Instant::now() + START_LIMIT;
            while !read(&log).contains(ready_line) {
                assert!(std::time::Instant::now() < deadline, "{}", read(&log));
                std::thread::sleep(Duration::from_millis(50));
            }
        } else {
            let ready = lines.next().and_then(Result::ok).unwrap_or_default();
            assert!(ready.contains(ready_line), "{ready}: {}", read(&log));
        }
        drop(started);
        let addr = url.trim_start_matches("http://").to_owned();
        Self {
            child: child.0.take().expect("the child"),
            url,
            addr,
            lines,
            log,
        }
    }

    /// `hearth-node serve --port 0 --key-storage file ARGS` (no data dir or model added), for a
    /// start that must fail: waits for it to exit (20 s at most; a node that starts anyway is
    /// killed) and returns whether it exited with an error, and its stderr.
    pub fn refused(args: &[&OsStr]) -> (bool, String) {
        let mut node = Command::new(env!("CARGO_BIN_EXE_hearth-node"))
            .args(["serve", "--port", "0", "--key-storage", "file"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting hearth-node");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = node.try_wait().expect("waiting for hearth-node") {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = node.kill();
                let _ = node.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        let _ = node.stderr.take().expect("stderr").read_to_string(&mut err);
        (status.is_some_and(|s| !s.success()), err)
    }

    /// What the node wrote to stderr so far.
    pub fn stderr(&self) -> String {
        read(&self.log)
    }
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python of the repository's `.venv`, made by `scripts/setup.sh`.
pub fn venv_python() -> PathBuf {
    let python = repo_root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing — run `make test` (or scripts/setup.sh) to create it",
        python.display()
    );
    python
}

/// Run a peer program (a real client or an independent implementation) to its end, on the
/// blocking pool, and return its stdout and stderr. Bounded: killed after 5 minutes. Panics
/// with both outputs when it fails.
pub async fn run_peer(cmd: Command, what: &'static str) -> (String, String) {
    let (status, stdout, stderr) = run_peer_to_end(cmd, what).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "{what} failed ({status:?}):\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// [`run_peer`] without judging how it ended: its exit status (`None`: killed at the
/// deadline), stdout and stderr.
pub async fn run_peer_to_end(
    mut cmd: Command,
    what: &'static str,
) -> (Option<std::process::ExitStatus>, String, String) {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().expect("temp dir");
        let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
        let mut child = cmd
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
        let deadline = Instant::now() + Duration::from_secs(300);
        let status = loop {
            if let Some(s) = child.try_wait().expect("waiting for a peer") {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (status, read(&out), read(&err))
    })
    .await
    .expect("the peer's thread")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// How long a node may take to print that it is ready.
const START_LIMIT: Duration = Duration::from_secs(120);

/// A child killed and reaped when dropped (unless taken).
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Kill process `pid` after `limit` unless the returned sender is dropped first.
fn watchdog(pid: u32, limit: Duration) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    tx
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
