//! Whether the node is shared on the LAN and the `Host` names it answers to, which the guard
//! (`crate::security`) checks on every request and the UI's API switches. Held here, apart
//! from the guard, because [`AppState`](super::AppState) holds it and the guard reads
//! `AppState`.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the node listens beyond loopback, and the names it answers to.
#[derive(Debug)]
pub struct Exposure {
    exposed: AtomicBool,
    /// Extra `Host` names accepted besides loopback names and IP addresses.
    allowed_hosts: Vec<String>,
}

impl Exposure {
    pub fn new(exposed: bool, allowed_hosts: Vec<String>) -> Self {
        Self {
            exposed: AtomicBool::new(exposed),
            allowed_hosts: allowed_hosts
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        }
    }

    pub fn is_exposed(&self) -> bool {
        self.exposed.load(Ordering::Acquire)
    }

    pub fn set_exposed(&self, exposed: bool) {
        self.exposed.store(exposed, Ordering::Release);
    }

    /// The host part of a `Host` header (port and IPv6 brackets removed), if acceptable.
    pub(crate) fn host_allowed(&self, host_header: &str) -> bool {
        let host = strip_port(host_header).to_ascii_lowercase();
        if host.is_empty() {
            return false;
        }
        host == "localhost"
            || host.ends_with(".localhost")
            || host.parse::<IpAddr>().is_ok()
            || self.allowed_hosts.contains(&host)
    }
}

/// `example.com:8420` -> `example.com`; `[::1]:8420` -> `::1`.
pub(crate) fn strip_port(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match host.rsplit_once(':') {
        // A bare IPv6 address has several colons; only strip a port from name:port.
        Some((h, port)) if !h.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_loopback_ips_and_configured_names_pass() {
        let e = Exposure::new(false, vec!["Hearth.Lan".into()]);
        for ok in [
            "localhost",
            "localhost:8420",
            "app.localhost:1",
            "127.0.0.1:8420",
            "192.168.1.20:8420",
            "[::1]:8420",
            "[fe80::1]",
            "hearth.lan:8420",
        ] {
            assert!(e.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8420",
            "localhost.evil.example",
            "",
            "127.0.0.1.nip.io",
        ] {
            assert!(!e.host_allowed(bad), "{bad}");
        }
    }
}
