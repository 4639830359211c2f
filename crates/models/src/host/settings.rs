//! The settings every engine of the host is started with ([`EngineSettings`]): the node's
//! engine flags, and the configuration of one model's engine made from them.

use std::path::PathBuf;
use std::time::Duration;

use hearth_engine::EngineConfig;

/// How this host runs engines: every engine's configuration but the model path, and how many
/// models it keeps and for how long.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub slots: usize,
    pub threads: usize,
    /// The context of each model (`--ctx`): one KV pool its slots share; `None`: the model's
    /// training context, as far as memory holds ([`ModelHost::context_of`]).
    pub context: Option<u32>,
    /// The KV cache's element type (`--kv-type`).
    pub kv_type: hearth_engine::KvType,
    /// Host memory each model's prompt cache may take (`--cache-ram`); `None`: a share of the
    /// memory left beside the models ([`ModelHost::cache_ram_of`]), 0: off.
    pub cache_ram: Option<u64>,
    /// A folder where each model's prompt cache also keeps its sequences across restarts
    /// (`--cache-disk`), and the most bytes each may take there.
    pub cache_disk: Option<PathBuf>,
    pub cache_disk_max: u64,
    /// Every caller reads every other's cached prompts (`--cache-scope node`).
    pub shared_cache: bool,
    /// Guessing ahead (`--spec`), and the draft model that guesses for models sharing its
    /// vocabulary (`--draft-model`).
    pub spec: hearth_protocol::Speculation,
    pub draft_model: Option<PathBuf>,
    pub queue_capacity: usize,
    pub min_load_time: Option<std::time::Duration>,
    pub script: Option<hearth_engine::Script>,
    /// A split model's remote layers (only in a split model's worker process).
    pub remote: Option<hearth_engine::Remote>,
    /// How much of each model goes to this machine's GPU.
    pub offload: hearth_engine::Offload,
    /// How long a model loaded on demand stays loaded without requests (`--keep-alive`).
    pub keep_alive: Duration,
    /// The memory all loaded models may take (`--memory-limit`); `None`: what is free.
    pub memory_limit: Option<u64>,
}

impl EngineSettings {
    pub(super) fn config(&self, path: PathBuf, context: u32, cache_ram: u64) -> EngineConfig {
        EngineConfig {
            slots: self.slots.max(1),
            threads: self.threads.max(1),
            context: Some(context),
            kv_type: self.kv_type,
            cache_ram,
            cache_disk: self.cache_disk.clone(),
            cache_disk_max: self.cache_disk_max,
            shared_cache: self.shared_cache,
            spec: self.spec,
            draft_model: self.draft_model.clone(),
            // A split model's worker too: the layers on peers take the image's embeddings as
            // any others.
            projector: hearth_engine::find_projector(&path),
            queue_capacity: self.queue_capacity,
            min_load_time: self.min_load_time,
            script: self.script.clone(),
            remote: self.remote.clone(),
            offload: self.offload.clone(),
            ..EngineConfig::new(path)
        }
    }
}
