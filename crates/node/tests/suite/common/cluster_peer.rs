//! A raw TealeNet-shaped peer for the cluster tests: a node with TealeNet compatibility and a
//! passcode, and the document's frames (a 4-byte big-endian length, then JSON) written and
//! read by hand over TCP.

use serde_json::Value;

use super::TestNode;
use hearth_cluster::ClusterConfig;

pub const PASSCODE: &str = "open sesame";

pub async fn compat_node() -> (TestNode, tempfile::TempDir) {
    compat_node_with(|_| {}).await
}

pub async fn compat_node_with(
    f: impl FnOnce(&mut hearth_node::NodeConfig),
) -> (TestNode, tempfile::TempDir) {
    // A cool machine, whatever this one's sensors say.
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("temp");
    std::fs::write(&zone, "40000\n").unwrap();
    let t = TestNode::start_with(|c| {
        f(c);
        c.parallel = 2;
        c.thermal_zone = Some(zone);
        c.name = "hearth-under-test".into();
        c.cluster = Some(ClusterConfig {
            port: Some(0),
            passcode: Some(PASSCODE.into()),
            tealenet_compat: true,
            peers: Vec::new(),
            discovery: false,
        });
    })
    .await;
    (t, dir)
}

/// One frame: a 4-byte big-endian length, then the message's JSON.
pub async fn write_frame(tcp: &mut tokio::net::TcpStream, m: &Value) {
    use tokio::io::AsyncWriteExt;
    let body = m.to_string().into_bytes();
    let mut frame = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    tcp.write_all(&frame).await.unwrap();
}

/// The next frame as JSON, or None once the node closed the connection (15 s at most).
pub async fn read_frame(tcp: &mut tokio::net::TcpStream) -> Option<Value> {
    use tokio::io::AsyncReadExt;
    let read = async {
        let mut len = [0u8; 4];
        tcp.read_exact(&mut len).await.ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        tcp.read_exact(&mut body).await.ok()?;
        Some(serde_json::from_slice(&body).unwrap())
    };
    tokio::time::timeout(std::time::Duration::from_secs(15), read)
        .await
        .expect("an answer or a close within 15 s")
}

/// A `hello` in the `_0` shape from device `id`; `hearth` offers Hearth's transport.
pub fn hello(id: &str, passcode: Option<&str>, hearth: bool) -> Value {
    let mut h = serde_json::json!({
        "deviceInfo": {"id": id, "name": "raw", "hardware": {"chipFamily": "intelCPU",
            "chipName": "x", "totalRAMGB": 8.0, "gpuCoreCount": 0, "memoryBandwidthGBs": 10.0},
            "registeredAt": 0.0, "lastSeenAt": 0.0, "isCurrentDevice": true, "loadedModels": []},
        "protocolVersion": 1, "loadedModels": []});
    if let Some(p) = passcode {
        h["clusterPasscodeHash"] = hearth_cluster::passcode_hash(p).into();
    }
    if hearth {
        h["hearth"] = serde_json::json!({"noise": hearth_protocol::cluster::HEARTH_NOISE});
    }
    serde_json::json!({"hello": {"_0": h}})
}

/// Whether this machine has AES instructions (the node then offers and takes AES-256-GCM).
pub fn aes_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("aes")
        && std::arch::is_x86_feature_detected!("pclmulqdq");
    #[cfg(target_arch = "aarch64")]
    return std::arch::is_aarch64_feature_detected!("aes")
        && std::arch::is_aarch64_feature_detected!("pmull");
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return false;
}

pub async fn connect(t: &TestNode) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(t.node().cluster_addr().unwrap())
        .await
        .unwrap()
}

/// The independent Python TealeNet peer (`tests/tealenet_peer.py`) running beside a test: its
/// lines read one at a time, and a line on its stdin ends it.
pub struct PythonPeer {
    pub child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl PythonPeer {
    /// `tealenet_peer.py ARGS...`, killed when dropped.
    pub fn spawn(args: &[&str]) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(super::process::venv_python())
            .arg(super::process::repo_root().join("tests/tealenet_peer.py"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    /// Its next line, within 60 s.
    pub async fn next_line(&mut self) -> String {
        tokio::time::timeout(std::time::Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the peer says something within 60 s")
            .unwrap()
            .expect("a line from the peer")
    }

    /// Its next line, as JSON.
    pub async fn next_json(&mut self) -> Value {
        let line = self.next_line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Keep reading its lines in the background (an unread pipe would block it).
    pub fn drain(mut self) -> tokio::process::Child {
        tokio::spawn(async move { while let Ok(Some(_)) = self.lines.next_line().await {} });
        self.child
    }

    /// Ask it to leave ("bye") and wait until it has.
    pub async fn bye(mut self) {
        bye(&mut self.child).await;
    }
}

/// Ask a peer process to leave ("bye" on its stdin) and wait until it has.
pub async fn bye(child: &mut tokio::process::Child) {
    use tokio::io::AsyncWriteExt;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"bye\n").await;
    }
    let _ = child.wait().await;
}

/// Wait until this node lists `id` among its models (`/v1/models`).
pub async fn until_listed(t: &TestNode, id: &str) {
    super::wait_for(
        async || {
            t.get_json("/v1/models").await["data"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["id"] == id))
        },
        "the peer's model among this node's models",
    )
    .await;
}
