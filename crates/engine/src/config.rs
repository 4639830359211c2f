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
    /// The context in tokens: one KV pool that the slots share, one request taking up to all
    /// of it; `None` = the model's training context.
    pub context: Option<u32>,
    /// The element type of the KV cache (`--kv-type`).
    pub kv_type: KvType,
    /// Bytes of host memory that evicted sequences' KV state may take (`--cache-ram`); 0 turns
    /// the prompt cache off.
    pub cache_ram: u64,
    /// A folder where the prompt cache's sequences are also kept across restarts
    /// (`--cache-disk`), and the most bytes they may take there.
    pub cache_disk: Option<PathBuf>,
    pub cache_disk_max: u64,
    /// Every caller reads every other's cached prompts (`--cache-scope node`): each request
    /// gets [`crate::CacheOwner::NODE`] instead of its own owner.
    pub shared_cache: bool,
    /// Guessing ahead (`--spec`); a request may say otherwise.
    pub spec: hearth_protocol::Speculation,
    /// A smaller model of the same vocabulary that guesses ahead (`--draft-model`); a model
    /// whose vocabulary it does not share goes without.
    pub draft_model: Option<PathBuf>,
    /// The model's projector (`mmproj`), through which it sees images ([`crate::find_projector`]).
    pub projector: Option<PathBuf>,
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
    /// How much of the model goes to this machine's GPU, and which one.
    pub offload: Offload,
}

/// How much of a model goes to this machine's GPU, and which one (DESIGN.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offload {
    pub layers: GpuLayers,
    pub device: DeviceChoice,
    /// Bytes of each device's free memory that fitting leaves free (llama.cpp's margin).
    pub margin: u64,
    /// llama.cpp's CPU threads for a model whose every layer is on the GPU (fewer than
    /// `EngineConfig::threads`: the CPU only feeds the GPU then).
    pub gpu_threads: usize,
}

impl Default for Offload {
    fn default() -> Self {
        Self {
            layers: GpuLayers::Auto,
            device: DeviceChoice::Any,
            margin: DEFAULT_GPU_MARGIN,
            gpu_threads: DEFAULT_GPU_THREADS,
        }
    }
}

/// What fitting leaves free on each device by default (llama.cpp's own default).
pub const DEFAULT_GPU_MARGIN: u64 = 1 << 30;

/// llama.cpp's CPU threads for a model wholly on the GPU. On an H200 with 16 cores 1, 2 and 16
/// threads decoded alike (docs/PERFORMANCE.md): fewer leave the cores to the doors and to
/// the rest of the machine instead of spinning while the GPU works.
pub const DEFAULT_GPU_THREADS: usize = 2;

/// How many of a model's layers go to the GPU (`--gpu-layers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuLayers {
    /// As many as the free video memory holds, less the margin (llama.cpp's fitting).
    #[default]
    Auto,
    /// This many (past the model's count: all of them); 0 keeps the model on the CPU.
    Count(u32),
}

impl std::str::FromStr for GpuLayers {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "all" | "max" => Ok(Self::Count(u32::MAX)),
            n => n.parse().map(Self::Count).map_err(|_| {
                format!(
                    "'{}' is not a layer count: auto, all, or a number (0: the CPU only)",
                    n.chars().take(40).collect::<String>()
                )
            }),
        }
    }
}

/// The element type of the KV cache (`--kv-type`): f16, or q8_0 / q4_0 (half and about a
/// quarter of the memory per token; llama.cpp needs flash attention for a quantized V cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F16,
    Q8_0,
    Q4_0,
}

impl KvType {
    /// Bytes one key or value element takes (a block of 32 elements and its f16 scale).
    pub fn bytes_per_element(self) -> f64 {
        match self {
            Self::F16 => 2.0,
            Self::Q8_0 => 34.0 / 32.0,
            Self::Q4_0 => 18.0 / 32.0,
        }
    }

    /// KV cache bytes one token takes in a model of this shape (keys and values of every
    /// layer), when its header says the shape. Saturating: the header's numbers are the file's
    /// word.
    pub fn bytes_per_token(self, g: &crate::gguf::GgufInfo) -> Option<u64> {
        let layers = g.block_count?;
        let heads = g.head_count.filter(|h| *h > 0)?;
        let kv_heads = g.head_count_kv.unwrap_or(heads);
        let head = g.embedding_length? / heads;
        let width = g
            .key_length
            .unwrap_or(head)
            .saturating_add(g.value_length.unwrap_or(head));
        let elements = layers.saturating_mul(kv_heads).saturating_mul(width);
        Some((elements as f64 * self.bytes_per_element()) as u64)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f16" => Ok(Self::F16),
            "q8_0" | "q8" => Ok(Self::Q8_0),
            "q4_0" | "q4" => Ok(Self::Q4_0),
            other => Err(format!(
                "'{}' is not a KV cache type: f16, q8_0 or q4_0",
                other.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// Which GPU a model goes to (`--device`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// Every GPU ggml finds (llama.cpp divides the layers between several).
    #[default]
    Any,
    /// None: the CPU only.
    None,
    /// The device of this name (`Vulkan0`, `CUDA1`) or whose description has it in (`4090`).
    Named(String),
}

impl std::str::FromStr for DeviceChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "auto" | "any" => Ok(Self::Any),
            "none" | "cpu" => Ok(Self::None),
            name => Ok(Self::Named(name.to_owned())),
        }
    }
}

/// Where a split model's remote layers go: the last `layers` of llama.cpp's offloaded units
/// (`n_gpu_layers`: the model's last `layers - 1` layers and its output layer), on the devices
/// of the RPC servers at `endpoints` (HOST:PORT), `shares[i]` of them on server `i` (the last
/// units, the output among them, on the last server with any; empty: llama.cpp divides them
/// by the memory the servers report). A lost server aborts the process, so only a worker
/// process of the node sets this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub endpoints: Vec<String>,
    pub layers: u32,
    pub shares: Vec<u32>,
}

/// How the scripted engine produces tokens: a fixed word list, one token per active slot per
/// step, each step after `token_delay` (zero: as fast as readers take them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    pub token_delay: Duration,
    /// An answer to give instead of the word list, one token per entry, ending (`stop`) after
    /// the last: a model's output in a given shape (a thinking block, a tool call).
    pub answer: Vec<String>,
    /// Answers given in turn instead, one per request in the order they start (the last
    /// repeats): a conversation's steps (a tool call, then the answer that reads its result).
    pub rounds: Vec<Vec<String>>,
}

/// The most bytes the prompt cache takes on disk by default (`--cache-disk-max`).
pub const DEFAULT_CACHE_DISK_MAX: u64 = 8 << 30;

/// The context when the model's header does not say its training context.
pub const DEFAULT_CONTEXT: u32 = 4096;
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
            context: None,
            kv_type: KvType::default(),
            cache_ram: 0,
            cache_disk: None,
            cache_disk_max: DEFAULT_CACHE_DISK_MAX,
            shared_cache: false,
            spec: hearth_protocol::Speculation::default(),
            draft_model: None,
            projector: None,
            n_batch: DEFAULT_N_BATCH,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            min_load_time: None,
            script: None,
            remote: None,
            offload: Offload::default(),
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
    fn layers_and_devices_are_read_as_the_flags_say() {
        assert_eq!("auto".parse(), Ok(GpuLayers::Auto));
        assert_eq!("0".parse(), Ok(GpuLayers::Count(0)));
        assert_eq!("33".parse(), Ok(GpuLayers::Count(33)));
        assert_eq!("all".parse(), Ok(GpuLayers::Count(u32::MAX)));
        assert!("-1".parse::<GpuLayers>().is_err());
        assert!("many".parse::<GpuLayers>().unwrap_err().contains("auto"));
        assert_eq!("none".parse(), Ok(DeviceChoice::None));
        assert_eq!("auto".parse(), Ok(DeviceChoice::Any));
        assert_eq!("Vulkan1".parse(), Ok(DeviceChoice::Named("Vulkan1".into())));
        assert_eq!("Q8_0".parse(), Ok(KvType::Q8_0));
        assert_eq!("f16".parse(), Ok(KvType::F16));
        assert!("q5_1".parse::<KvType>().unwrap_err().contains("q8_0"));
    }

    #[test]
    fn hyperthreads_count_once() {
        let info = "processor\t: 0\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 1\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 2\nphysical id\t: 0\ncore id\t: 1\n\nprocessor\t: 3\nphysical id\t: 1\ncore id\t: 0\n";
        assert_eq!(count_physical_cores(info), Some(3));
        assert_eq!(count_physical_cores("processor: 0\n"), None);
        assert!(physical_cores() >= 1);
    }
}
