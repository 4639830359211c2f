//! Engine settings and their defaults, including the physical-core count that llama.cpp's
//! thread pool must be sized to (its own default of 4 threads is ruinous on a 2-core machine).

use std::path::PathBuf;
use std::time::Duration;

/// How an engine runs one model.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model_path: PathBuf,
    /// Parallel sequences decoded together (continuous batching).
    pub slots: usize,
    /// llama.cpp threads for decode and prefill.
    pub threads: usize,
    /// Context per slot in tokens; `None` = min(4096, the model's training context).
    pub ctx_per_slot: Option<u32>,
    /// Largest single decode in tokens. A larger decode aborts llama.cpp, so prefill is chunked
    /// to at most this.
    pub n_batch: u32,
    /// Most prompt tokens prefilled in one step while other slots are generating, so that a
    /// long prompt delays running streams by one short step rather than by its whole prefill.
    pub prefill_chunk: u32,
    /// Requests that may wait for a slot; beyond this, submissions are refused.
    pub queue_capacity: usize,
    /// Make loading take at least this long by pacing llama.cpp's progress callback. Only for
    /// tests and demos that must observe loading progress; `None` in normal use.
    pub min_load_time: Option<Duration>,
    /// Run the scripted engine instead of llama.cpp (door benchmarks, fault and timing tests).
    pub script: Option<Script>,
    /// A split model: layers on RPC servers besides this machine's CPU.
    pub remote: Option<Remote>,
}

/// Where a split model's remote layers go: the last `layers` of llama.cpp's offloaded units
/// (`n_gpu_layers`: the model's last `layers - 1` layers and its output layer), on the devices
/// of the RPC servers at `endpoints` (HOST:PORT; llama.cpp divides them by the memory the
/// servers report). A lost server aborts the process, so only a worker process of the node sets this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub endpoints: Vec<String>,
    pub layers: u32,
}

/// How the scripted engine produces tokens: a fixed word list, one token per active slot per
/// step, each step after `token_delay` (zero: as fast as readers take them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    pub token_delay: Duration,
}

/// Default context per slot when the model allows it (what Ollama uses by default).
pub const DEFAULT_CTX_PER_SLOT: u32 = 4096;
pub const DEFAULT_SLOTS: usize = 4;
pub const DEFAULT_N_BATCH: u32 = 512;
pub const DEFAULT_PREFILL_CHUNK: u32 = 128;
pub const DEFAULT_QUEUE_CAPACITY: usize = 32;

impl EngineConfig {
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            slots: DEFAULT_SLOTS,
            threads: physical_cores(),
            ctx_per_slot: None,
            n_batch: DEFAULT_N_BATCH,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            min_load_time: None,
            script: None,
            remote: None,
        }
    }
}

/// Physical cores available to this process: distinct (package, core) pairs in
/// `/proc/cpuinfo`, capped by the CPUs this process may use; the logical count elsewhere.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let physical = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| count_physical_cores(&s))
        .unwrap_or(logical);
    physical.clamp(1, logical)
}

fn count_physical_cores(cpuinfo: &str) -> Option<usize> {
    let mut cores = std::collections::BTreeSet::new();
    let mut package = None;
    for line in cpuinfo.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "physical id" => package = Some(value.trim().to_owned()),
            "core id" => {
                cores.insert((package.clone(), value.trim().to_owned()));
            }
            _ => {}
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyperthreads_count_once() {
        let info = "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 1\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 2\nphysical id\t: 0\ncore id\t: 1\n\nprocessor\t: 3\nphysical id\t: 1\ncore id\t: 0\n";
        assert_eq!(count_physical_cores(info), Some(3));
        assert_eq!(count_physical_cores("processor: 0\n"), None);
        assert!(physical_cores() >= 1);
    }
}
