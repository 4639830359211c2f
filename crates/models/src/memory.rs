//! How much memory a model takes once loaded, estimated from its GGUF header before loading
//! it (the weights, the key/value cache of every slot, llama.cpp's compute buffers), and how
//! much the node may give to models: `--memory-limit`, else what the machine has free.

use hearth_engine::KvType;
use hearth_protocol::gguf::GgufInfo;

/// llama.cpp's compute buffers and the embedding context, beside weights and cache: a
/// generous allowance for small models, a small share of a big one.
const OVERHEAD_BYTES: u64 = 64 << 20;

/// The memory a model is expected to take: its file (weights are mapped, and every page is
/// read while decoding), plus a `kv`-typed key/value cache for `ctx_tokens` (the pool the
/// slots share) when the header says the model's shape, plus fixed buffers.
pub fn estimate(size_bytes: u64, gguf: Option<&GgufInfo>, ctx_tokens: u64, kv: KvType) -> u64 {
    let kv = gguf
        .and_then(|g| kv.bytes_per_token(g))
        .map(|per_token| per_token.saturating_mul(ctx_tokens));
    // Without the shape: a quarter of the weights is a usual cache at these contexts.
    let kv = kv.unwrap_or(size_bytes / 4);
    size_bytes.saturating_add(kv).saturating_add(OVERHEAD_BYTES)
}

/// What a model's projector (`mmproj`, [`hearth_engine::find_projector`]) takes beside it
/// ([`hearth_engine::projector_bytes`]); 0 without one.
pub fn projector_need(model: &std::path::Path) -> u64 {
    hearth_engine::find_projector(model).map_or(0, |p| hearth_engine::projector_bytes(&p))
}

/// The video memory models may still take on the GPUs `offload` places them on, besides `held`
/// (what loaded ones are expected to hold there): each device's free memory less the margin,
/// and never more than their total less the margin and `held` (a driver that reports no use,
/// a software one, still fills up).
pub fn gpu_room(offload: &hearth_engine::Offload, held: u64) -> u64 {
    let gpus = hearth_engine::offload::chosen_gpus(offload);
    let free: u64 = gpus
        .iter()
        .map(|g| g.memory_free.saturating_sub(offload.margin))
        .sum();
    let total: u64 = gpus
        .iter()
        .map(|g| g.memory_total.saturating_sub(offload.margin))
        .sum();
    free.min(total.saturating_sub(held))
}

/// Whether a model file not yet here would fit ([`fit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Fit {
    /// The memory it is expected to take, in bytes.
    pub needs: u64,
    /// It fits: in system memory, after what the GPUs would hold of it.
    pub fits: bool,
    /// It fits whole in the GPUs' memory.
    pub on_gpu: bool,
}

/// The room a model not yet here would have: what [`fit`] judges files by, read once for many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Every slot's context together, in tokens.
    pub ctx_tokens: u64,
    /// System memory models may take.
    pub budget: u64,
    /// Video memory models may take.
    pub gpu: u64,
}

/// Whether a model file of `size` bytes (its header unread: the usual cache for its size) fits
/// in `room`.
pub fn fit(size: u64, room: &Room) -> Fit {
    let needs = estimate(size, None, room.ctx_tokens, KvType::F16);
    Fit {
        needs,
        fits: needs.saturating_sub(room.gpu) <= room.budget,
        on_gpu: room.gpu > 0 && needs <= room.gpu,
    }
}

/// The memory models may take: the limit given, else [`budget_of`] the machine's memory now.
/// `loaded_estimates` is what the loaded models are expected to hold, `loaded_weights` the part
/// of it that is their mapped files.
pub fn budget(limit: Option<u64>, loaded_estimates: u64, loaded_weights: u64) -> u64 {
    budget_with(limit, machine(), loaded_estimates, loaded_weights)
}

/// [`budget`] with the machine's available and total memory given (none: unknown).
fn budget_with(
    limit: Option<u64>,
    machine: Option<(u64, u64)>,
    loaded_estimates: u64,
    loaded_weights: u64,
) -> u64 {
    if let Some(l) = limit {
        return l;
    }
    // Memory cannot be read here: only the limit given bounds the models.
    let Some((available, total)) = machine else {
        return u64::MAX;
    };
    // A loaded model's mapped weights sit in the page cache, which Linux counts as available
    // already: only the rest of what it holds (its cache, its buffers) comes back on unloading.
    // Elsewhere that is not known to hold, and the whole estimate counts.
    let counted = if cfg!(target_os = "linux") {
        loaded_weights
    } else {
        0
    };
    budget_of(available, total, loaded_estimates.saturating_sub(counted))
}

/// The machine's available and total memory now, in bytes.
pub fn machine() -> Option<(u64, u64)> {
    let mut sys = sysinfo::System::new().ok()?;
    sys.refresh_memory();
    Some((sys.available_memory(), sys.total_memory()))
}

/// The memory available plus what the loaded models hold besides their mapped weights (it is
/// theirs), never more than the machine has, less a tenth kept for everything else.
pub fn budget_of(available: u64, total: u64, loaded_besides_weights: u64) -> u64 {
    available.saturating_add(loaded_besides_weights).min(total) / 10 * 9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_follows_the_models_shape() {
        let g = GgufInfo {
            block_count: Some(30),
            embedding_length: Some(576),
            head_count: Some(9),
            head_count_kv: Some(3),
            ..GgufInfo::default()
        };
        // 30 layers * 8192 tokens * 576 * 3/9 * 2 (k, v) * 2 bytes = 188,743,680
        assert_eq!(
            estimate(0, Some(&g), 8192, KvType::F16),
            188_743_680 + OVERHEAD_BYTES
        );
        // q8_0: 34 bytes a block of 32 elements instead of 64.
        assert_eq!(
            estimate(0, Some(&g), 8192, KvType::Q8_0),
            188_743_680 / 64 * 34 + OVERHEAD_BYTES
        );
        // A head wider than the width over the heads (Gemma 3: 256, not 640 / 4).
        let wide = GgufInfo {
            block_count: Some(18),
            embedding_length: Some(640),
            head_count: Some(4),
            head_count_kv: Some(1),
            key_length: Some(256),
            value_length: Some(256),
            ..GgufInfo::default()
        };
        assert_eq!(
            estimate(0, Some(&wide), 1, KvType::F16),
            18 * 512 * 2 + OVERHEAD_BYTES
        );
        assert_eq!(estimate(400, None, 8192, KvType::F16), 500 + OVERHEAD_BYTES);
        // A header's absurd numbers give a huge estimate, never an overflow.
        let absurd = GgufInfo {
            block_count: Some(u64::MAX),
            embedding_length: Some(u64::MAX),
            head_count: Some(1),
            ..GgufInfo::default()
        };
        assert_eq!(estimate(0, Some(&absurd), 8192, KvType::F16), u64::MAX);
    }

    #[test]
    fn the_budget_never_passes_the_machines_memory() {
        const GIB: u64 = 1 << 30;
        // Available counts the cached weights of the loaded models: capped at the machine's.
        assert_eq!(budget_of(10 * GIB, 16 * GIB, 8 * GIB), 16 * GIB / 10 * 9);
        assert_eq!(budget_of(4 * GIB, 16 * GIB, 2 * GIB), 6 * GIB / 10 * 9);
        assert_eq!(budget(Some(123), 0, 0), 123);
        assert_eq!(budget(Some(7), u64::MAX, 0), 7);
        assert!(budget(None, 0, 0) > 0);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_loaded_models_weights_count_once() {
        const GIB: u64 = 1 << 30;
        // 4 GiB available, 2 GiB of it the loaded model's weights in the page cache; the model
        // holds half a GiB more (its cache): unloading it gives back that half only.
        let machine = Some((4 * GIB, 16 * GIB));
        let (estimate, weights) = (GIB * 5 / 2, 2 * GIB);
        assert_eq!(
            budget_with(None, machine, estimate, weights),
            GIB * 9 / 2 / 10 * 9
        );
        // Nothing loaded: what is available.
        assert_eq!(budget_with(None, machine, 0, 0), 4 * GIB / 10 * 9);
        // A limit is the limit, whatever the machine; without memory figures, no bound.
        assert_eq!(budget_with(Some(GIB), machine, estimate, weights), GIB);
        assert_eq!(budget_with(None, None, estimate, weights), u64::MAX);
    }
}
