//! llama.cpp's RPC backend alone, in real processes on loopback: `hearth-node rpc-serve` serves
//! this machine's CPU over its standard input and output (the test carries them over TCP, where
//! the node's encrypted tunnel will), and a `hearth-node serve` worker places the default
//! model's last layers on it. Greedy answers match the whole model's; the server maps no more
//! memory than its node offered; its own port refuses every connection but its tunnel's, and it
//! ends with the tunnel. (Splits between nodes: `split.rs`.)

use crate::common;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::greedy_at as greedy;
use common::process::NodeProcess;

/// The default model (SmolLM2-135M) has 30 layers: half go to the RPC server.
const REMOTE_LAYERS: &str = "15";

/// A running `hearth-node rpc-serve`, killed on drop.
struct RpcServe {
    child: Child,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl RpcServe {
    fn start() -> Self {
        Self::start_with(&[])
    }

    fn start_with(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("rpc-serve.log");
        let child = Command::new(env!("CARGO_BIN_EXE_hearth-node"))
            .args(["rpc-serve", "--threads", "1"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting hearth-node rpc-serve");
        Self {
            child,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The loopback port ggml's server listens on, from the process's log.
    fn port(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.log();
            if let Some(port) = log
                .split("at=127.0.0.1:")
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|p| p.parse().ok())
            {
                return port;
            }
            assert!(Instant::now() < deadline, "no port in the log: {log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Carry one TCP connection on a loopback port to and from the process's standard input
    /// and output (what the node's tunnel does): the port, and the bytes sent to the server.
    fn tunnel(&mut self) -> (u16, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut stdin = self.child.stdin.take().unwrap();
        let mut stdout = self.child.stdout.take().unwrap();
        let sent = Arc::new(AtomicU64::new(0));
        let counted = sent.clone();
        std::thread::spawn(move || {
            let Ok((conn, _)) = listener.accept() else {
                return;
            };
            let mut back = conn.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n @ 1..) = stdout.read(&mut buf) {
                    if back.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = back.shutdown(std::net::Shutdown::Both);
            });
            let mut conn = conn;
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n @ 1..) = conn.read(&mut buf) {
                if stdin.write_all(&buf[..n]).is_err() {
                    break;
                }
                counted.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
        (port, sent)
    }

    /// Whether the process ends within `limit`.
    fn ends_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for RpcServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_split_over_an_rpc_server_answers_as_the_whole_model() {
    let mut rpc = RpcServe::start();
    let (port, sent) = rpc.tunnel();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let remote = format!("127.0.0.1:{port}");
    let split = NodeProcess::start(
        &dirs[0].path().join("data"),
        &[
            "--parallel",
            "1",
            "--threads",
            "1",
            "--split-remote",
            &remote,
            "--split-layers",
            REMOTE_LAYERS,
        ],
        None,
    );
    let whole = NodeProcess::start(
        &dirs[1].path().join("data"),
        &["--parallel", "1", "--threads", "1"],
        None,
    );
    // The remote half of the weights crossed the tunnel when the model loaded.
    let loaded = sent.load(Ordering::Relaxed);
    let size = common::model_size();
    assert!(
        loaded > size / 4,
        "{loaded} bytes to the RPC server for a {size}-byte model: {}",
        rpc.log()
    );
    for prompt in ["Name three colours.", "What is the capital of France?"] {
        let (a, b) = (
            greedy(&split.url, prompt).await,
            greedy(&whole.url, prompt).await,
        );
        assert!(!a.is_empty());
        assert_eq!(a, b, "{prompt}");
    }
    // Every token computed half on the server: more went to it than the load.
    assert!(sent.load(Ordering::Relaxed) > loaded);
    drop(split);
    // The worker gone, its tunnel closes, and the server with it.
    assert!(
        rpc.ends_within(Duration::from_secs(20)),
        "rpc-serve outlived its tunnel: {}",
        rpc.log()
    );
}

#[test]
fn an_rpc_server_takes_no_more_memory_than_its_node_offered() {
    // Allowed 1 MiB (and its slack, 80 MiB for one thread), asked for every layer (about 94
    // MiB of weights): the server refuses the buffer, the worker says its model could not
    // load and ends.
    let mut rpc = RpcServe::start_with(&["--memory-limit", "1"]);
    let (port, _) = rpc.tunnel();
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("worker.out"), dir.path().join("worker.log"));
    let mut worker = Command::new(env!("CARGO_BIN_EXE_hearth-node"))
        .args([
            "serve",
            "--port",
            "0",
            "--key-storage",
            "file",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .arg("--model")
        .arg(common::model_path())
        .args(["--parallel", "1", "--threads", "1", "--split-layers", "30"])
        .args(["--split-remote", &format!("127.0.0.1:{port}")])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = worker.try_wait().unwrap() {
            break status;
        }
        if read(&out).contains("is ready") || Instant::now() > deadline {
            let _ = worker.kill();
            panic!("the worker loaded past its server's limit: {}", read(&out));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success(), "{status}");
    assert!(read(&err).contains("could not be loaded"), "{}", read(&err));
    assert!(
        rpc.log().contains("failed to allocate buffer"),
        "{}",
        rpc.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rpc_servers_port_refuses_every_connection_but_its_tunnels() {
    let mut rpc = RpcServe::start();
    let port = rpc.port();
    for _ in 0..3 {
        match TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(2),
        ) {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}"),
            Ok(_) => panic!("a connection to the RPC port was accepted: {}", rpc.log()),
        }
    }
    // Nothing to serve once its tunnel (standard input) closes.
    drop(rpc.child.stdin.take());
    assert!(
        rpc.ends_within(Duration::from_secs(20)),
        "rpc-serve outlived its tunnel: {}",
        rpc.log()
    );
}
