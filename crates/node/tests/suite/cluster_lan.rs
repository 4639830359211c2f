//! The cluster across a real LAN boundary: the test makes three network namespaces (three
//! "machines") joined by a bridge in a fourth, with addresses it assigns, and runs one node in
//! each, shared on that LAN with a passcode and no `--peer`: mDNS discovery (`_teale._tcp`)
//! finds the peers, a request to a node without the model is served by the one with it, and
//! cutting that node's link (`ip link set ... down`) takes it out of its peers' lists within
//! seconds. A model split between two machines answers across the LAN, while the RPC server
//! holding its layers is reachable from neither the other machine nor its own (only through
//! the encrypted tunnel). Needs root (`ip netns`), as CI does. Never aims at any other address.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::process::{venv_python, NodeProcess};
use common::MODEL_ID;
use serde_json::{json, Value};

fn must(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed (this test needs root and iproute2): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bridge in a namespace of its own, and a namespace per machine joined to it.
struct Lan {
    bridge: String,
    machines: Vec<String>,
    subnet: String,
}

impl Lan {
    fn create(machines: usize) -> Self {
        // Unique per test too: the tests of this file may run at once in one process.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let subnet = format!("10.{}.{}", 234 + n, pid % 200 + 20);
        let pid = format!("{pid}-{n}");
        let bridge = format!("hearth-br-{pid}");
        must(&["ip", "netns", "add", &bridge]);
        let mut lan = Self {
            bridge: bridge.clone(),
            machines: Vec::new(),
            subnet: subnet.clone(),
        };
        must(&["ip", "-n", &bridge, "link", "add", "br0", "type", "bridge"]);
        must(&["ip", "-n", &bridge, "link", "set", "br0", "up"]);
        for i in 1..=machines {
            let ns = format!("hearth-m{i}-{pid}");
            must(&["ip", "netns", "add", &ns]);
            lan.machines.push(ns.clone());
            let port = format!("p{i}");
            must(&[
                "ip", "-n", &bridge, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ]);
            must(&["ip", "-n", &bridge, "link", "set", &port, "master", "br0"]);
            must(&["ip", "-n", &bridge, "link", "set", &port, "up"]);
            let addr = format!("{subnet}.{i}/24");
            must(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            must(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
            must(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        lan
    }

    /// Cut machine `i`'s cable (1-based): its port on the bridge goes down.
    fn cut(&self, i: usize) {
        must(&[
            "ip",
            "-n",
            &self.bridge,
            "link",
            "set",
            &format!("p{i}"),
            "down",
        ]);
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in self.machines.iter().chain(std::iter::once(&self.bridge)) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A node on one machine of the LAN.
struct Machine {
    ns: String,
    port: u16,
    node: NodeProcess,
    _dir: tempfile::TempDir,
}

impl Machine {
    fn start(ns: &str, name: &str, model: bool) -> Self {
        Self::start_with(ns, name, model, &[])
    }

    fn start_with(ns: &str, name: &str, model: bool, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--lan",
            "--passcode",
            "lan test",
            "--name",
            name,
            "--cluster-port",
            "8421",
        ];
        args.extend(extra);
        let node = NodeProcess::start_in_netns(ns, &dir.path().join("data"), model, &args);
        let port = node.url.rsplit(':').next().unwrap().parse().unwrap();
        Self {
            ns: ns.to_owned(),
            port,
            node,
            _dir: dir,
        }
    }

    /// An HTTP request to the node from its own machine (loopback: no API key needed).
    fn http(&self, path: &str, body: Option<&Value>) -> Value {
        const SCRIPT: &str = "import sys, urllib.request, urllib.error\n\
            body = sys.argv[2].encode() if len(sys.argv) > 2 else None\n\
            req = urllib.request.Request(sys.argv[1], data=body, headers={'content-type': 'application/json'})\n\
            try:\n    print(urllib.request.urlopen(req, timeout=60).read().decode())\n\
            except urllib.error.HTTPError as e:\n    sys.exit(f'{e}: {e.read().decode()}')";
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let python = venv_python();
        let mut args = vec![
            "netns".to_owned(),
            "exec".to_owned(),
            self.ns.clone(),
            python.to_string_lossy().into_owned(),
            "-c".to_owned(),
            SCRIPT.to_owned(),
            url,
        ];
        if let Some(b) = body {
            args.push(b.to_string());
        }
        let out = Command::new("ip").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Whether a TCP connection from this machine to `host:port` is taken: `connected`,
    /// `refused` or `unreachable`.
    fn connect(&self, host: &str, port: u16) -> String {
        const SCRIPT: &str = "import socket, sys\n\
            try:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print('connected')\n\
            except ConnectionRefusedError:\n    print('refused')\n\
            except OSError:\n    print('unreachable')";
        let python = venv_python();
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(python)
            .args(["-c", SCRIPT, host, &port.to_string()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn peers(&self) -> Vec<String> {
        self.http("/api/status", None)["cluster"]["peers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// Wait up to `limit` for `cond`.
fn wait(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

#[test]
fn nodes_on_a_lan_find_each_other_serve_each_other_and_notice_a_cut_link() {
    let lan = Lan::create(3);
    let alpha = Machine::start(&lan.machines[0], "alpha", true);
    let beta = Machine::start(&lan.machines[1], "beta", false);
    let gamma = Machine::start(&lan.machines[2], "gamma", false);
    // No --peer anywhere: discovery finds them all.
    for (m, others) in [
        (&alpha, ["beta", "gamma"]),
        (&beta, ["alpha", "gamma"]),
        (&gamma, ["alpha", "beta"]),
    ] {
        wait(Duration::from_secs(60), "discovery", || {
            let peers = m.peers();
            others.iter().all(|o| peers.iter().any(|p| p == o))
        });
    }
    let status = beta.http("/api/status", None);
    for p in status["cluster"]["peers"].as_array().unwrap() {
        assert_eq!(p["kind"], "hearth", "{p}");
        assert!(p["addr"].as_str().unwrap().starts_with(&lan.subnet), "{p}");
    }
    // beta has no model: alpha answers.
    let answer = beta.http(
        "/v1/chat/completions",
        Some(&json!({"model": MODEL_ID, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}]})),
    );
    assert_eq!(answer["model"], MODEL_ID, "{answer}");
    assert_eq!(
        alpha.http("/api/status", None)["requests_finished"],
        1,
        "alpha served it"
    );
    // alpha's cable is cut: beta and gamma no longer list it, long before TealeNet's 30 s.
    lan.cut(1);
    wait(
        Duration::from_secs(10),
        "the cut peer leaving the lists",
        || {
            !beta.peers().iter().any(|p| p == "alpha")
                && !gamma.peers().iter().any(|p| p == "alpha")
        },
    );
    drop(alpha.node);
}

#[test]
fn a_model_split_across_the_lan_keeps_its_rpc_server_off_the_network() {
    let lan = Lan::create(2);
    let sharer = Machine::start_with(
        &lan.machines[0],
        "sharer",
        false,
        &["--share-memory", "1024"],
    );
    let owner = Machine::start(&lan.machines[1], "owner", true);
    wait(Duration::from_secs(60), "discovery", || {
        owner.peers().iter().any(|p| p == "sharer")
    });
    let split = owner.http("/api/models/split", Some(&json!({"model": MODEL_ID})));
    assert_eq!(split["peers"][0]["name"], "sharer", "{split}");
    wait(Duration::from_secs(120), "the split serving", || {
        owner.http("/api/models/split", None)["splits"][0]["state"] == "ready"
    });
    let answer = owner.http(
        "/v1/chat/completions",
        Some(&json!({"model": MODEL_ID, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}]})),
    );
    assert_eq!(answer["model"], MODEL_ID, "{answer}");
    // The RPC server's port, from the sharer's log.
    let log = sharer.node.stderr();
    let port: u16 = log
        .split("at=127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no RPC port in the sharer's log: {log}"));
    let sharer_ip = format!("{}.1", lan.subnet);
    // Not from the other machine, not on the sharer's LAN address, not even on its loopback.
    assert_eq!(owner.connect(&sharer_ip, port), "refused");
    assert_eq!(sharer.connect(&sharer_ip, port), "refused");
    assert_eq!(sharer.connect("127.0.0.1", port), "refused");
    // The split still serves: those attempts reached nothing.
    let again = owner.http(
        "/v1/chat/completions",
        Some(&json!({"model": MODEL_ID, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}]})),
    );
    assert_eq!(again["model"], MODEL_ID, "{again}");
}
