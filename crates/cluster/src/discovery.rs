//! DNS-SD discovery on the LAN through `mdns-sd`: this node advertises `_teale._tcp` with the
//! TXT records of NOTES.md (`deviceID`, `chip`, `ram`, `version=1`) plus `app=hearth`, and
//! browses the same type. A Hearth node found there is handed to the [`Dialer`] when this
//! node's id is the lower of the two (NOTES.md keeps that side's outbound connection, so the
//! other side only accepts); TealeNet peers connect to this node themselves. Runs only while
//! the cluster listens on the LAN; stopped (and the advertisement withdrawn) when dropped.

use std::sync::Arc;
use std::time::Duration;

use hearth_protocol::cluster::PeerUuid;
use mdns_sd::{ServiceDaemon, ServiceEvent, ServiceInfo};

use super::dial::Dialer;
use crate::me::Me;

/// The service type TealeNet nodes advertise and browse.
pub(crate) const SERVICE_TYPE: &str = "_teale._tcp.local.";

/// Why discovery could not start.
#[derive(Debug, thiserror::Error)]
#[error("LAN discovery (mDNS) could not start: {0}")]
pub struct DiscoveryError(#[from] mdns_sd::Error);

/// Discovery while it runs.
pub struct Discovery {
    daemon: ServiceDaemon,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

impl Discovery {
    /// Advertise this node's cluster `port` and browse for peers.
    pub fn start(me: &Me, dialer: Arc<Dialer>, port: u16) -> Result<Self, DiscoveryError> {
        let daemon = ServiceDaemon::new()?;
        let id = me.id.to_string();
        // Instance names must be unique on the link: the name and the start of the id.
        let instance = format!("{}-{}", me.state.node_name, &id[..8]);
        let ram = format!("{:.0}", me.hardware.total_ram_gb);
        let props = [
            ("deviceID", id.as_str()),
            ("chip", me.hardware.chip_name.as_str()),
            ("ram", ram.as_str()),
            ("version", "1"),
            ("app", "hearth"),
        ];
        let host = format!("{}.local.", id.to_lowercase());
        let info = ServiceInfo::new(SERVICE_TYPE, &instance, &host, "", port, &props[..])?
            .enable_addr_auto();
        daemon.register(info)?;
        let events = daemon.browse(SERVICE_TYPE)?;
        let mine = me.id.clone();
        std::thread::Builder::new()
            .name("hearth-discovery".into())
            .spawn(move || browse(&events, &mine, &dialer))
            .map_err(|e| mdns_sd::Error::Msg(e.to_string()))?;
        tracing::info!(port, "advertising and browsing {SERVICE_TYPE} on the LAN");
        Ok(Self { daemon })
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        // Ends the browse channel too, which ends the browsing thread.
        let _ = self.daemon.shutdown();
    }
}

/// Hand each Hearth node found to the dialer, until the daemon stops.
fn browse(events: &mdns_sd::Receiver<ServiceEvent>, mine: &PeerUuid, dialer: &Arc<Dialer>) {
    loop {
        let event = match events.recv_timeout(Duration::from_secs(1)) {
            Ok(e) => e,
            Err(_) if events.is_disconnected() => return,
            Err(_) => continue,
        };
        let ServiceEvent::ServiceResolved(info) = event else {
            continue;
        };
        // A device that announces itself as a Hearth node is never taken in plain text, from
        // whichever side the connection comes.
        if let Some(id) = hearth_device(&info) {
            if &id != mine {
                dialer.me().remember_hearth(&id);
            }
        }
        for addr in to_dial(&info, mine) {
            if dialer.add_discovered(&addr) {
                tracing::info!(peer = %addr, name = info.get_fullname(), "found a Hearth node on the LAN");
            }
        }
    }
}

/// The device id of a service announced as a Hearth node's (`app=hearth`).
fn hearth_device(info: &ServiceInfo) -> Option<PeerUuid> {
    if info.get_property_val_str("app") != Some("hearth") {
        return None;
    }
    info.get_property_val_str("deviceID")
        .and_then(PeerUuid::parse)
}

/// The addresses to dial for a resolved service: a Hearth node's (`app=hearth`), not this
/// one, with a higher id than this node's, at each of its IPv4 addresses that can be another
/// machine (not loopback, link-local or unspecified). Each is tried: one may be a private
/// bridge (a container host's), and the duplicate-connection rule keeps one connection.
fn to_dial(info: &ServiceInfo, mine: &PeerUuid) -> Vec<String> {
    let Some(theirs) = hearth_device(info) else {
        return Vec::new();
    };
    if &theirs == mine || theirs < *mine {
        return Vec::new();
    }
    let mut ips: Vec<_> = info
        .get_addresses_v4()
        .into_iter()
        .filter(|ip| !(ip.is_loopback() || ip.is_link_local() || ip.is_unspecified()))
        .collect();
    ips.sort();
    ips.into_iter()
        .map(|ip| format!("{ip}:{}", info.get_port()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(props: &[(&str, &str)], ip: &str) -> ServiceInfo {
        ServiceInfo::new(SERVICE_TYPE, "n", "h.local.", ip, 8421, props).unwrap()
    }

    #[test]
    fn only_hearth_nodes_with_a_higher_id_are_dialled() {
        let low = "11111111-1111-4111-8111-111111111111";
        let high = "EEEEEEEE-EEEE-4EEE-8EEE-EEEEEEEEEEEE";
        let mine = PeerUuid::parse("88888888-8888-4888-8888-888888888888").unwrap();
        let hearth = |id| [("deviceID", id), ("app", "hearth")];
        assert_eq!(
            to_dial(&info(&hearth(high), "10.0.0.7"), &mine),
            vec!["10.0.0.7:8421"]
        );
        // Every address that can be another machine, none that cannot.
        assert_eq!(
            to_dial(
                &info(
                    &hearth(high),
                    "192.168.1.9,127.0.0.1,169.254.3.4,172.17.0.1"
                ),
                &mine
            ),
            vec!["172.17.0.1:8421", "192.168.1.9:8421"]
        );
        let none: Vec<String> = Vec::new();
        assert_eq!(to_dial(&info(&hearth(low), "10.0.0.7"), &mine), none);
        // Either case of the same id is this node.
        let me_again = hearth("88888888-8888-4888-8888-888888888888");
        assert_eq!(to_dial(&info(&me_again, "10.0.0.7"), &mine), none);
        // A TealeNet node (no app=hearth) connects to us itself.
        assert_eq!(
            to_dial(&info(&[("deviceID", high)], "10.0.0.7"), &mine),
            none
        );
        assert_eq!(
            to_dial(&info(&hearth("not-a-uuid"), "10.0.0.7"), &mine),
            none
        );
    }
}
