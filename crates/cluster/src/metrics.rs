//! The cluster's figures for `/metrics`: peers connected (by kind), each peer's throttle,
//! queue depth, thermal level (0 nominal to 3 critical) and silence, labelled by name and
//! address, the bytes on cluster connections, and the answers continued on another node after
//! their provider was lost.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::peers::PeerView;
use hearth_protocol::cluster::ThermalLevel;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    name: String,
    addr: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// Register the peers' figures, the bytes sent and received on cluster connections, and
/// `redispatched`: answers moved to another provider.
pub fn register(
    registry: &mut Registry,
    peers: &[PeerView],
    traffic: (u64, u64),
    redispatched: u64,
) {
    registry.register(
        "hearth_cluster_sent_bytes",
        "Bytes written to cluster peers, frame headers included",
        ConstCounter::new(traffic.0),
    );
    registry.register(
        "hearth_cluster_received_bytes",
        "Bytes read from cluster peers, frame headers included",
        ConstCounter::new(traffic.1),
    );
    let count = Family::<KindLabels, Gauge>::default();
    for kind in ["hearth", "tealenet"] {
        let n = peers.iter().filter(|p| p.kind == kind).count();
        count
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    registry.register("hearth_cluster_peers", "Cluster peers connected now", count);
    let throttle = Family::<PeerLabels, Gauge>::default();
    let queue = Family::<PeerLabels, Gauge>::default();
    let thermal = Family::<PeerLabels, Gauge>::default();
    let silent = Family::<PeerLabels, Gauge>::default();
    for p in peers {
        let labels = PeerLabels {
            name: p.name.clone(),
            addr: p.addr.clone(),
            kind: p.kind.into(),
        };
        throttle.get_or_create(&labels).set(i64::from(p.throttle));
        queue.get_or_create(&labels).set(i64::from(p.queue_depth));
        thermal.get_or_create(&labels).set(match p.thermal_level {
            ThermalLevel::Nominal => 0,
            ThermalLevel::Fair => 1,
            ThermalLevel::Serious => 2,
            ThermalLevel::Critical => 3,
        });
        silent
            .get_or_create(&labels)
            .set(i64::try_from(p.silent_ms).unwrap_or(i64::MAX));
    }
    registry.register(
        "hearth_cluster_peer_throttle",
        "A peer's throttle from its latest heartbeat, 0-100",
        throttle,
    );
    registry.register(
        "hearth_cluster_peer_queue_depth",
        "Requests waiting on a peer, from its latest heartbeat",
        queue,
    );
    registry.register(
        "hearth_cluster_peer_thermal_level",
        "A peer's thermal level from its latest heartbeat: 0 nominal, 1 fair, 2 serious, 3 critical",
        thermal,
    );
    registry.register(
        "hearth_cluster_peer_silent_ms",
        "Milliseconds since the peer's last frame",
        silent,
    );
    registry.register(
        "hearth_route_redispatched",
        "Answers continued on another node after their provider (worker or peer) was lost",
        ConstCounter::new(redispatched),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_counted_by_kind_and_labelled() {
        let peer = PeerView {
            name: "studio".into(),
            device_id: "X".into(),
            addr: "10.0.0.2:8421".into(),
            kind: "hearth",
            outbound: true,
            degraded: false,
            loaded_models: vec![],
            thermal_level: ThermalLevel::Serious,
            throttle: 25,
            queue_depth: 3,
            is_generating: true,
            silent_ms: 120,
            listens_at: None,
        };
        let mut registry = Registry::default();
        register(&mut registry, &[peer], (1000, 2000), 2);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(
            out.contains("hearth_cluster_peers{kind=\"hearth\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("hearth_cluster_peers{kind=\"tealenet\"} 0\n"),
            "{out}"
        );
        let l = "{name=\"studio\",addr=\"10.0.0.2:8421\",kind=\"hearth\"}";
        assert!(
            out.contains(&format!("hearth_cluster_peer_throttle{l} 25\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!("hearth_cluster_peer_queue_depth{l} 3\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!("hearth_cluster_peer_thermal_level{l} 2\n")),
            "{out}"
        );
        assert!(out.contains("hearth_route_redispatched_total 2\n"), "{out}");
        assert!(
            out.contains("hearth_cluster_sent_bytes_total 1000\n"),
            "{out}"
        );
        assert!(
            out.contains("hearth_cluster_received_bytes_total 2000\n"),
            "{out}"
        );
    }
}
