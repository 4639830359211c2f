//! How much memory a model needs here and how much models here may take: the estimate (a
//! split model's worker counts only its own layers), the room left in system memory and on
//! the GPUs (each counted apart), and why a model does not fit.

use std::path::Path;

use hearth_engine::config::DEFAULT_CONTEXT;
use hearth_engine::SubmitError;
use hearth_protocol::gguf::GgufInfo;
use hearth_protocol::ModelId;

use super::ModelHost;
use crate::memory;

/// The most host memory a prompt cache takes by default (llama-server's `--cache-ram`).
const DEFAULT_CACHE_RAM_MAX: u64 = 8 << 30;

/// What a model needs here ([`ModelHost::need_of`]).
pub(super) struct Need {
    /// The memory it is expected to take.
    pub(super) estimate: u64,
    /// The part of it that is its mapped weights.
    pub(super) weights: u64,
    /// The context it gets, in tokens.
    pub(super) context: u32,
    /// The part of `estimate` that is the draft model (`--draft-model`) beside it.
    pub(super) draft: u64,
}

impl ModelHost {
    /// The video memory models may still take on the GPUs this host places them on, besides
    /// `held` (what the loaded ones are expected to hold there): each device's free memory
    /// less the margin, and never more than their total less the margin and `held` (a driver
    /// that reports no use, a software one, still fills up).
    pub(super) fn gpu_room(&self, held: u64) -> u64 {
        if self.settings.remote.is_some() || self.settings.script.is_some() {
            return 0;
        }
        memory::gpu_room(&self.settings.offload, held)
    }

    /// The memory the model in `path` is expected to take here: all of it, or in a split
    /// model's worker only the share of the layers not on the RPC servers.
    pub fn estimate_of(&self, path: &Path) -> u64 {
        self.need_of(path).estimate
    }

    /// What a split of the model in `path` needs in all machines together: [`Self::estimate_of`]
    /// without a draft model, which a split's worker does not load.
    pub fn split_estimate_of(&self, path: &Path) -> u64 {
        let need = self.need_of(path);
        need.estimate.saturating_sub(need.draft)
    }

    /// What the model in `path` needs here: [`Self::estimate_of`], the part of it that is its
    /// mapped weights, and the context it gets.
    pub(super) fn need_of(&self, path: &Path) -> Need {
        let gguf = hearth_engine::gguf::read(path).ok();
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let size = match path.file_name().and_then(|f| f.to_str()) {
            Some(f) if hearth_protocol::ids::split_shard(f).is_some() => shards_size(path, size),
            _ => size,
        };
        let context = self.context_of(gguf.as_ref(), size);
        let whole = memory::estimate(
            size,
            gguf.as_ref(),
            u64::from(context),
            self.settings.kv_type,
        );
        let (estimate, weights) = match (&self.settings.remote, gguf.and_then(|g| g.block_count)) {
            (Some(remote), Some(n)) if n > 0 => {
                // `remote.layers` counts the output layer too (llama.cpp's offloaded units).
                let here = (n + 1).saturating_sub(u64::from(remote.layers)).min(n);
                let share = |b: u64| {
                    u64::try_from(u128::from(b) * u128::from(here) / u128::from(n))
                        .unwrap_or(u64::MAX)
                };
                (share(whole), share(size))
            }
            _ => (whole, size.min(whole)),
        };
        // The draft model (`--draft-model`) loads beside it with a pool of the same context
        // (the same file drafting for itself shares its mapped weights, not its pool).
        let before_draft = estimate;
        let (estimate, weights) = match &self.settings.draft_model {
            Some(draft) if self.settings.remote.is_none() => {
                let size = std::fs::metadata(draft).map(|m| m.len()).unwrap_or(0);
                let gguf = hearth_engine::gguf::read(draft).ok();
                let more = memory::estimate(
                    size,
                    gguf.as_ref(),
                    u64::from(context),
                    self.settings.kv_type,
                );
                if draft == path {
                    (estimate + more.saturating_sub(size), weights)
                } else {
                    (estimate + more, weights + size.min(more))
                }
            }
            _ => (estimate, weights),
        };
        // Its projector, beside it (a split model's worker loads it too, on this machine).
        let draft = estimate.saturating_sub(before_draft);
        let estimate = estimate.saturating_add(crate::memory::projector_need(path));
        Need {
            estimate,
            weights,
            context,
            draft,
        }
    }

    /// The context a model of header `gguf` and `size` bytes of weights gets here: `--ctx`,
    /// else its training context as far as a KV cache of half the memory left beside its
    /// weights holds (on the GPUs when their free memory holds the weights, else what models
    /// may take here besides the loaded ones), in steps of 256 tokens, and never less than
    /// min(its training context, 4096); never more than its training context.
    pub(super) fn context_of(&self, gguf: Option<&GgufInfo>, size: u64) -> u32 {
        let trained = gguf
            .and_then(|g| g.context_length)
            .and_then(|c| u32::try_from(c).ok())
            .filter(|c| *c > 0)
            .unwrap_or(DEFAULT_CONTEXT);
        if let Some(c) = self.settings.context {
            return c.clamp(1, trained);
        }
        let floor = trained.min(DEFAULT_CONTEXT);
        let Some(per_token) = gguf
            .and_then(|g| self.settings.kv_type.bytes_per_token(g))
            .filter(|b| *b > 0)
        else {
            return floor;
        };
        let held = self.memory_for_context(size) / 2 / per_token;
        let held = u32::try_from(held / 256 * 256).unwrap_or(u32::MAX);
        trained.min(held.max(floor))
    }

    /// The memory a model of `size` bytes of weights may give its KV cache here now: what the
    /// GPUs it goes to have free besides the loaded models' share and its weights, when that
    /// holds the weights, else the memory models may take here besides the loaded ones and
    /// its weights.
    fn memory_for_context(&self, size: u64) -> u64 {
        let vram_held: u64 = self.lock().entries.iter().map(|e| e.vram).sum();
        let gpu = self.gpu_room(vram_held);
        if gpu > size {
            return gpu - size;
        }
        self.free_for_models(None).saturating_sub(size)
    }

    /// The context the model in `path` gets here, in tokens ([`Self::context_of`]).
    pub fn context_for(&self, path: &Path) -> u32 {
        self.need_of(path).context
    }

    /// The host memory a model's prompt cache may take: `--cache-ram`, else a quarter of what
    /// models may take here besides the loaded ones (`free`), at most 8 GiB (llama-server's).
    pub(super) fn cache_ram_of(&self, free: u64) -> u64 {
        self.settings
            .cache_ram
            .unwrap_or_else(|| (free / 4).min(DEFAULT_CACHE_RAM_MAX))
    }

    /// The memory the loaded models (but `besides`) are expected to hold, and the part of it
    /// that is their mapped weights.
    fn used(&self, besides: Option<&ModelId>) -> (u64, u64) {
        held(
            self.lock()
                .entries
                .iter()
                .filter(|e| Some(&e.id) != besides),
        )
    }

    /// The memory models may take here, given the loaded models (but `besides`).
    fn budget(&self, besides: Option<&ModelId>) -> (u64, u64) {
        let (used, weights) = self.used(besides);
        (
            memory::budget(self.settings.memory_limit, used, weights),
            used,
        )
    }

    /// The memory models may take here that the loaded ones (but `besides`) do not hold.
    pub fn free_for_models(&self, besides: Option<&ModelId>) -> u64 {
        let (budget, used) = self.budget(besides);
        budget.saturating_sub(used)
    }

    /// The room a model not yet here would have ([`memory::fit`] judges files by it): the
    /// context this node gives its slots, system memory with every other model unloaded, and
    /// the GPUs' free memory as it is now.
    pub fn room_for_new(&self) -> memory::Room {
        memory::Room {
            ctx_tokens: u64::from(self.context_of(None, 0)),
            budget: self.budget(None).0,
            gpu: self.gpu_room(0),
        }
    }

    /// The context a request gets here when its model's header does not say otherwise, in
    /// tokens.
    pub fn default_context(&self) -> u64 {
        u64::from(self.context_of(None, 0))
    }

    /// Whether the model in `path` needs more memory than models here may take even with
    /// every other one unloaded (in system memory, after what the GPUs would hold of it): what
    /// it needs there and what they may take, when it does.
    pub fn too_large(&self, path: &Path) -> Option<(u64, u64)> {
        let need = self.estimate_of(path);
        let need = need - need.min(self.gpu_room(0));
        let (budget, _) = self.budget(None);
        (need > budget).then_some((need, budget))
    }
}

/// What `entries` are expected to hold in system memory, and the part of it that is their
/// mapped weights.
pub(super) fn held<'a>(entries: impl Iterator<Item = &'a super::Entry>) -> (u64, u64) {
    entries.fold((0, 0), |(all, w), e| {
        (all + in_ram(e), w + e.weights.saturating_sub(e.vram))
    })
}

/// What `e` is expected to hold in system memory (its estimate but what is on the GPU).
pub(super) fn in_ram(e: &super::Entry) -> u64 {
    e.estimate.saturating_sub(e.vram)
}

/// The idle models (`idle`, least recently used first) to unload from the GPU so that a model
/// needing `need` goes there whole, and how much of it is expected there: all of it when
/// `room` (the video memory models may still take) with those unloaded holds it, else what
/// `room` holds with none unloaded.
pub(super) fn on_gpu(
    entries: &[super::Entry],
    idle: &[usize],
    need: u64,
    room: u64,
) -> (Vec<usize>, u64) {
    if need <= room {
        return (Vec::new(), need);
    }
    let mut freed = room;
    let mut victims = Vec::new();
    for &i in idle.iter().filter(|&&i| entries[i].vram > 0) {
        if freed >= need {
            break;
        }
        freed += entries[i].vram;
        victims.push(i);
    }
    if freed >= need {
        (victims, need)
    } else {
        (Vec::new(), room)
    }
}

/// Why a model was not loaded: it is larger than models here may take, or the memory it needs
/// is held by models that are busy.
pub(super) fn no_room(model: &ModelId, needed: u64, budget: u64) -> SubmitError {
    let message = if needed > budget {
        format!(
            "not enough memory: it needs about {} MiB and models here may use {} MiB; peers started with --share-memory can hold part of it (a split model)",
            needed >> 20,
            budget >> 20
        )
    } else {
        format!(
            "not enough memory: it needs about {} MiB, models here may use {} MiB and the ones loaded are busy; try again when they finish",
            needed >> 20,
            budget >> 20
        )
    };
    SubmitError::LoadFailed {
        model: model.clone(),
        message,
    }
}

/// A split model's size: every shard beside its first one.
fn shards_size(first: &Path, first_size: u64) -> u64 {
    let Some((name, _, count)) = first
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(hearth_protocol::ids::split_shard)
    else {
        return first_size;
    };
    let dir = first.parent().unwrap_or(std::path::Path::new("."));
    (2..=count)
        .filter_map(|i| {
            std::fs::metadata(dir.join(format!("{name}-{i:05}-of-{count:05}.gguf"))).ok()
        })
        .map(|m| m.len())
        .sum::<u64>()
        + first_size
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::{EngineSettings, ModelHost, DEFAULT_KEEP_ALIVE};

    fn settings(draft_model: Option<PathBuf>) -> EngineSettings {
        EngineSettings {
            slots: 1,
            threads: 1,
            context: Some(1024),
            kv_type: hearth_engine::KvType::F16,
            cache_ram: Some(0),
            cache_disk: None,
            cache_disk_max: 0,
            shared_cache: false,
            spec: hearth_protocol::Speculation::None,
            draft_model,
            queue_capacity: 4,
            min_load_time: None,
            script: None,
            remote: None,
            offload: hearth_engine::Offload::default(),
            keep_alive: DEFAULT_KEEP_ALIVE,
            memory_limit: Some(1 << 30),
        }
    }

    #[test]
    fn a_split_needs_no_room_for_the_draft_model_its_worker_does_not_load() {
        let dir = tempfile::tempdir().unwrap();
        let (model, draft) = (dir.path().join("m.gguf"), dir.path().join("d.gguf"));
        std::fs::write(&model, vec![0u8; 1 << 20]).unwrap();
        std::fs::write(&draft, vec![0u8; 2 << 20]).unwrap();
        let plain = ModelHost::new(settings(None));
        let drafted = ModelHost::new(settings(Some(draft)));
        assert!(drafted.estimate_of(&model) > plain.estimate_of(&model));
        assert_eq!(drafted.split_estimate_of(&model), plain.estimate_of(&model));
    }
}
