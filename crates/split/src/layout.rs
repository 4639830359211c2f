//! Placing a split model's layers: how many stay on this machine and go to each peer
//! ([`place`], [`divide`] as llama.cpp divides them), and the layout reported for it
//! ([`SplitLayout`], [`PeerShare`]).

use serde::Serialize;

use hearth_cluster::tunnel::Offer;

/// Where a split model's layers are.
#[derive(Debug, Clone, Serialize)]
pub struct SplitLayout {
    pub model: String,
    /// Layers on this machine, and about the bytes of weights they take.
    pub local_layers: u32,
    pub local_bytes: u64,
    /// Each peer's name, address and layers.
    pub peers: Vec<PeerShare>,
    /// `loading`, `ready`, or `failed` with why.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeerShare {
    pub name: String,
    pub addr: String,
    pub layers: u32,
    /// Whether it also holds the model's output layer (the last peer that has layers).
    pub output: bool,
    /// About the bytes of weights its layers take there.
    pub bytes: u64,
}

/// About the bytes of weights `layers` of a model's `n` take: its file's share.
pub(crate) fn weight_bytes(size: u64, layers: u32, n: u32) -> u64 {
    size.saturating_mul(u64::from(layers)) / u64::from(n.max(1))
}

/// Where a split model's layers go: this machine's, each peer's, and which peer also holds
/// the output layer (llama.cpp offloads the last layers and then the output, as one more
/// unit of `n_gpu_layers`: `remote_units`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shares {
    pub(crate) local: u32,
    pub(crate) peers: Vec<u32>,
    pub(crate) output_on: usize,
    pub(crate) remote_units: u32,
}

/// `n` layers of a model that needs `need` bytes, of which `here` stay on this machine
/// whatever its layers (its projector), between this machine (offering `local_offer` bytes)
/// and its peers.
///
/// llama.cpp counts `n + 1` units (the layers and the output layer) and offloads the last
/// ones; the units this machine gives away are in proportion to what the peers offer against
/// what all offer for layers. Among the peers they are divided in proportion to each one's offer too,
/// as llama.cpp divides units by a tensor split (which the worker is given: each peer's count,
/// so llama.cpp places exactly these), and the output goes with the last unit (the owner lists
/// the peers by offer, the largest last, so it holds the output). Then the count
/// nearest the proportion (more given away on a tie) with which no machine holds more than it
/// offers is taken (each unit, the output too, taken as `need - here` over `n`), or none when
/// there is no such count. This machine keeps a layer, and each split gives away at least one.
pub(crate) fn place(
    n: u32,
    (need, here): (u64, u64),
    local_offer: u64,
    peers: &[Offer],
) -> Result<Shares, String> {
    let offered: u64 = peers.iter().map(|p| p.memory).fold(0, u64::saturating_add);
    let all = offered.saturating_add(local_offer);
    let mib = |b: u64| b >> 20;
    if peers.is_empty() || n < 2 || all < need {
        return Err(format!(
            "it needs about {} MiB; this machine gives {} MiB and its peers {} MiB",
            mib(need),
            mib(local_offer),
            mib(offered)
        ));
    }
    let units = n + 1;
    let per_unit = need.saturating_sub(here).div_ceil(u64::from(n));
    let fits = |count: u32, offer: u64| u64::from(count).saturating_mul(per_unit) <= offer;
    let local_room = local_offer.saturating_sub(here);
    let offers: Vec<u64> = peers.iter().map(|p| p.memory).collect();
    let for_layers = offered.saturating_add(local_room);
    let proportion = f64::from(units) * offered as f64 / for_layers.max(1) as f64;
    (2..units)
        .map(|remote| (remote, divide(remote, &offers)))
        .filter(|(remote, each)| {
            fits(units - remote, local_room)
                && each.iter().zip(peers).all(|(&u, p)| fits(u, p.memory))
        })
        .min_by(|(a, _), (b, _)| {
            let off = |r: &u32| (f64::from(*r) - proportion).abs();
            off(a).total_cmp(&off(b)).then(b.cmp(a))
        })
        .map(|(remote, mut each)| {
            // The last unit, the output layer, is on the last device that got any.
            let output_on = each.iter().rposition(|&u| u > 0).unwrap_or(0);
            each[output_on] -= 1;
            Shares {
                local: units - remote,
                peers: each,
                output_on,
                remote_units: remote,
            }
        })
        .ok_or_else(|| {
            format!(
                "no placement keeps each machine within its offer (about {} MiB a layer; this machine gives {} MiB, {} MiB of it kept for the projector, its peers {})",
                mib(per_unit),
                mib(local_offer),
                mib(here),
                peers
                    .iter()
                    .map(|p| format!("{} MiB", mib(p.memory)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// How llama.cpp divides `layers` offloaded units among devices by a tensor split of
/// `memory` (each device's weight: here what each peer offers): unit `k` goes to the first
/// device whose running share passes `k / layers`. (In `f32`, as llama.cpp computes it, so a
/// count on a boundary lands where it does there; weights that are all zero count as equal.)
/// Given the counts it returns as the split, llama.cpp places exactly those counts.
fn divide(layers: u32, memory: &[u64]) -> Vec<u32> {
    let equal = memory.iter().all(|&m| m == 0);
    let mut running = 0f32;
    let mut bounds: Vec<f32> = memory
        .iter()
        .map(|&m| {
            running += if equal { 1.0 } else { m as f32 };
            running
        })
        .collect();
    for b in &mut bounds {
        *b /= running;
    }
    let mut counts = vec![0u32; memory.len()];
    if memory.is_empty() {
        return counts;
    }
    for k in 0..layers {
        let at = k as f32 / layers as f32;
        let device = bounds.partition_point(|&b| b <= at).min(memory.len() - 1);
        counts[device] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn peer(memory_mib: u64, device_gib: u64) -> Offer {
        Offer {
            memory: memory_mib * MIB,
            device_memory: device_gib << 30,
        }
    }

    /// `place`'s shares as (this machine's layers, each peer's, which peer has the output).
    fn placed(
        n: u32,
        need: u64,
        local: u64,
        peers: &[Offer],
    ) -> Result<(u32, Vec<u32>, usize), String> {
        place(n, (need, 0), local, peers).map(|s| {
            // Every unit is somewhere: the layers, and the output once.
            assert_eq!(s.local + s.peers.iter().sum::<u32>(), n);
            assert_eq!(s.remote_units, s.peers.iter().sum::<u32>() + 1);
            (s.local, s.peers, s.output_on)
        })
    }

    #[test]
    fn layers_follow_what_each_machine_offers() {
        // Equal offers: 31 units (30 layers and the output) halved, more given away on a tie.
        assert_eq!(
            placed(30, 300 * MIB, 1024 * MIB, &[peer(1024, 24)]),
            Ok((15, vec![15], 0))
        );
        // Three machines: 31 * 2/3 = 20.7 units away, which llama.cpp divides 11 and 10, the
        // output with the second peer.
        assert_eq!(
            placed(30, 300 * MIB, 1024 * MIB, &[peer(1024, 24), peer(1024, 24)]),
            Ok((10, vec![11, 9], 1))
        );
        // A peer offering twice as much takes twice the layers.
        assert_eq!(
            placed(30, 300 * MIB, 1024 * MIB, &[peer(2048, 24)]),
            Ok((10, vec![20], 0))
        );
        // A machine too small for the model keeps what it offers room for.
        assert_eq!(
            placed(30, 300 * MIB, 50 * MIB, &[peer(1024, 24)]),
            Ok((1, vec![29], 0))
        );
        // Too little memory in all, or no peer: no placement, and the figures say why.
        let short = place(30, (3000 * MIB, 0), 1024 * MIB, &[peer(1024, 24)]).unwrap_err();
        assert!(
            short.contains("3000 MiB") && short.contains("1024 MiB"),
            "{short}"
        );
        assert!(place(30, (300 * MIB, 0), 1024 * MIB, &[]).is_err());
        // Offers a peer makes up cannot overflow the sum.
        let huge = Offer {
            memory: u64::MAX,
            device_memory: u64::MAX,
        };
        assert!(place(30, (300 * MIB, 0), 1024 * MIB, &[huge, huge]).is_ok());
        // A projector (30 MiB) stays here whole: its memory is not spread over the layers (10
        // MiB each, not 11, which no placement would fit) and only this machine counts it.
        let with_projector = place(30, (330 * MIB, 30 * MIB), 100 * MIB, &[peer(240, 24)]);
        assert_eq!(
            with_projector.map(|s| (s.local, s.peers)),
            Ok((7, vec![23]))
        );
        assert!(place(30, (330 * MIB, 0), 100 * MIB, &[peer(240, 24)]).is_err());
    }

    #[test]
    fn counts_given_as_the_tensor_split_are_placed_exactly() {
        for counts in [
            vec![11u64, 10],
            vec![3, 17, 1],
            vec![0, 5],
            vec![1, 1, 1, 28],
            vec![20, 11],
        ] {
            let n = u32::try_from(counts.iter().sum::<u64>()).unwrap();
            let want: Vec<u32> = counts.iter().map(|&c| c as u32).collect();
            assert_eq!(divide(n, &counts), want, "{counts:?}");
        }
    }

    #[test]
    fn peers_get_layers_as_llama_cpp_divides_them_and_never_past_their_offer() {
        // llama.cpp divides by a tensor split's weights: a peer with twice the weight gets
        // twice the units.
        assert_eq!(divide(30, &[8 << 30, 16 << 30]), vec![10, 20]);
        assert_eq!(divide(31, &[1, 1]), vec![16, 15]);
        assert_eq!(divide(3, &[1, 1, 1, 1]), vec![1, 1, 1, 0]);
        // Devices that report nothing are taken as equal.
        assert_eq!(divide(4, &[0, 0]), vec![2, 2]);
        // Peers take units in proportion to their offers whatever their devices' memory (about
        // 10 MiB a unit): the one offering 40 MiB one, the one offering 2 GiB 14 and the
        // output; this machine, offering as much as the latter, 15.
        let (local, peers, output_on) =
            placed(30, 300 * MIB, 2048 * MIB, &[peer(40, 24), peer(2048, 24)]).unwrap();
        assert_eq!((local, peers, output_on), (15, vec![1, 14], 1));
        // The last layers fit nowhere: refused with each machine's offer.
        assert!(place(30, (300 * MIB, 0), 10 * MIB, &[peer(10, 24)]).is_err());
    }
}
