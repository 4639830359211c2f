//! A network namespace joined to this host by a veth pair, with addresses the test assigns:
//! a "LAN machine" for the tests that expose a node (`lan.rs`). Needs root and iproute2, as CI
//! has; never aims at any address but the pair's own.

use std::process::{Command, Output};

/// A namespace and veth pair that exist for this test only.
pub struct Netns {
    pub name: String,
    pub host_if: String,
    /// This host's end of the pair.
    pub host_ip: String,
    /// The namespace's end: the "other machine".
    pub ns_ip: String,
}

pub fn run(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    out
}

pub fn must(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?} failed (this test needs root and iproute2): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    /// A "LAN machine": the pair in a private /24 (10.231.N.0).
    pub fn create() -> Self {
        Self::create_with(|id| (format!("10.231.{id}.1"), format!("10.231.{id}.2"), 24))
    }

    /// A "machine on the internet": a namespace at `198.51.100.N` (a documentation range:
    /// never routed anywhere, and not a private one), reached through its private pair as a
    /// router, so that the address is on none of this host's networks. `ns_ip` is the public
    /// address.
    pub fn create_public() -> Self {
        let mut me = Self::create();
        let id: u32 = me.host_if.trim_start_matches("hth").parse().unwrap();
        let public = format!("198.51.100.{id}");
        let gateway = me.ns_ip.clone();
        must(&[
            "ip",
            "netns",
            "exec",
            &me.name,
            "ip",
            "addr",
            "add",
            &format!("{public}/32"),
            "dev",
            "lo",
        ]);
        must(&[
            "ip",
            "route",
            "add",
            &format!("{public}/32"),
            "via",
            &gateway,
            "dev",
            &me.host_if,
        ]);
        me.ns_ip = public;
        me
    }

    /// A namespace whose pair has the addresses `plan` gives for a number unique to it.
    fn create_with(plan: impl Fn(u32) -> (String, String, u8)) -> Self {
        // Unique per test too: tests of this file may run at once.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() % 100 + n * 100) % 230 + 20;
        let name = format!("hearth-lan-{}-{n}", std::process::id());
        let host_if = format!("hth{id}");
        let ns_if = format!("hns{id}");
        let (host_ip, ns_ip, prefix) = plan(id);
        let me = Self {
            name: name.clone(),
            host_if: host_if.clone(),
            host_ip: host_ip.clone(),
            ns_ip: ns_ip.clone(),
        };
        must(&["ip", "netns", "add", &name]);
        must(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        must(&["ip", "link", "set", &ns_if, "netns", &name]);
        must(&[
            "ip",
            "addr",
            "add",
            &format!("{host_ip}/{prefix}"),
            "dev",
            &host_if,
        ]);
        must(&["ip", "link", "set", &host_if, "up"]);
        must(&[
            "ip",
            "netns",
            "exec",
            &name,
            "ip",
            "addr",
            "add",
            &format!("{ns_ip}/{prefix}"),
            "dev",
            &ns_if,
        ]);
        must(&[
            "ip", "netns", "exec", &name, "ip", "link", "set", &ns_if, "up",
        ]);
        must(&[
            "ip", "netns", "exec", &name, "ip", "link", "set", "lo", "up",
        ]);
        me
    }

    /// Start `args` inside the namespace in the background, killed after 300 s at most (the
    /// caller kills it sooner).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        let mut full = vec!["netns", "exec", &self.name, "timeout", "300"];
        full.extend_from_slice(args);
        Command::new("ip")
            .args(&full)
            .spawn()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Run `args` inside the namespace (the "other machine"), killed after 60 s.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name, "timeout", "60"];
        full.extend_from_slice(args);
        run(&full)
    }

    /// HTTP status seen from inside the namespace, or None when nothing answers.
    pub fn http_status(&self, url: &str, key: Option<&str>) -> Option<u16> {
        let mut args = vec![
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-m",
            "3",
        ];
        let header;
        if let Some(k) = key {
            header = format!("Authorization: Bearer {k}");
            args.extend_from_slice(&["-H", &header]);
        }
        args.push(url);
        let out = self.exec(&args);
        let code: u16 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        (code != 0).then_some(code)
    }

    /// `curl` from inside the namespace: the status and the JSON answer (Null if not JSON).
    pub fn curl(
        &self,
        url: &str,
        key: Option<&str>,
        post: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let mut args = vec!["curl", "-s", "-m", "10", "-w", "\n%{http_code}"];
        let header;
        if let Some(k) = key {
            header = format!("Authorization: Bearer {k}");
            args.extend_from_slice(&["-H", &header]);
        }
        if let Some(body) = post {
            args.extend_from_slice(&["-H", "content-type: application/json", "-d", body]);
        }
        args.push(url);
        let out = self.exec(&args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (
            code.trim().parse().unwrap_or(0),
            serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
        )
    }

    pub fn get(&self, url: &str, key: Option<&str>) -> (u16, serde_json::Value) {
        self.curl(url, key, None)
    }

    pub fn post(&self, url: &str, key: Option<&str>, body: &str) -> (u16, serde_json::Value) {
        self.curl(url, key, Some(body))
    }

    /// Open a WebSocket from inside the namespace; the close code the server sends first.
    pub fn websocket_close_code(&self, port: u16, path: &str) -> String {
        let script = format!(
            r#"
import socket, base64, os, struct
s = socket.create_connection(("{ip}", {port}), timeout=5)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
data = b""
while b"\r\n\r\n" not in data:
    chunk = s.recv(4096)
    if not chunk:
        print("closed"); raise SystemExit
    data += chunk
head, rest = data.split(b"\r\n\r\n", 1)
status = head.split(b" ")[1].decode()
if status != "101":
    print("http " + status); raise SystemExit
while len(rest) < 4:
    chunk = s.recv(4096)
    if not chunk:
        print("closed"); raise SystemExit
    rest += chunk
opcode = rest[0] & 0x0F
print("close %d" % struct.unpack(">H", rest[2:4])[0] if opcode == 8 else "opcode %d" % opcode)
"#,
            ip = self.host_ip,
        );
        let out = self.exec(&["python3", "-c", &script]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )
    }
}

impl Netns {
    /// One batch on the batch door from inside the namespace (the official `websockets`
    /// package): every event until each prompt is complete or failed.
    pub fn batch(&self, url: &str, message: &serde_json::Value) -> Vec<serde_json::Value> {
        const CLIENT: &str = r#"
import json, sys
from websockets.sync.client import connect
message = json.loads(sys.argv[2])
ids = {p["request_id"] for p in message["prompts"]}
events, ended = [], set()
with connect(sys.argv[1], open_timeout=10) as ws:
    ws.send(sys.argv[2])
    while ended != ids:
        for e in json.loads(ws.recv(timeout=60)):
            events.append(e)
            if e.get("type") in ("COMPLETE", "ERROR"):
                ended.add(e.get("request_id"))
print(json.dumps(events))
"#;
        let python = super::process::venv_python();
        let out = self.exec(&[
            python.to_str().unwrap(),
            "-c",
            CLIENT,
            url,
            &message.to_string(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.host_if]);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// A loopback port free now (another program may take it before it is used).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
