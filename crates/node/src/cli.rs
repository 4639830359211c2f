//! The `serve` flags, shared by the `hearth-node` binary and the desktop app: every flag is
//! also read from a `HEARTH_<FLAG>` environment variable (DESIGN.md §8), so tests and
//! packagers can point either program anywhere the same way.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::config::{self, NodeConfig};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "HEARTH_HOST", default_value = "127.0.0.1")]
    host: IpAddr,
    /// HTTP port for every door (0 picks a free one).
    #[arg(long, env = "HEARTH_PORT", default_value_t = config::DEFAULT_PORT)]
    port: u16,
    /// Model file name in the models folder (with or without .gguf), or a path.
    #[arg(long, env = "HEARTH_MODEL")]
    model: Option<String>,
    /// Folder of GGUF models [default: <data-dir>/models].
    #[arg(long, env = "HEARTH_MODELS_DIR")]
    models_dir: Option<PathBuf>,
    /// Where hearth.db lives [default: the OS data dir + hearth].
    #[arg(long, env = "HEARTH_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Parallel generation slots (continuous batching).
    #[arg(long, env = "HEARTH_PARALLEL", default_value_t = hearth_engine::config::DEFAULT_SLOTS)]
    parallel: usize,
    /// llama.cpp threads [default: physical cores].
    #[arg(long, env = "HEARTH_THREADS")]
    threads: Option<usize>,
    /// Each model's context in tokens: one KV pool its --parallel slots share, one request
    /// taking up to all of it [default: the model's training context, as far as half the
    /// memory beside its weights holds].
    #[arg(long, env = "HEARTH_CTX")]
    ctx: Option<u32>,
    /// The KV cache's element type: f16, q8_0 (half the memory) or q4_0.
    #[arg(long, env = "HEARTH_KV_TYPE", default_value = "f16")]
    kv_type: hearth_engine::KvType,
    /// MiB of host memory each model's prompt cache may take: the KV state of sequences whose
    /// slot was reused, restored when a prompt starts the same way again; 0 turns it off
    /// [default: a quarter of the memory left beside the models, at most 8 GiB].
    #[arg(long, env = "HEARTH_CACHE_RAM")]
    cache_ram: Option<u64>,
    /// A folder where the prompt cache also keeps its sequences, so that they outlive a
    /// restart (a folder per model, holding one per KV type and placement; each file
    /// checksummed, a damaged one deleted unread) [default: none].
    #[arg(long, env = "HEARTH_CACHE_DISK")]
    cache_disk: Option<PathBuf>,
    /// MiB each model's prompt cache may take in --cache-disk, all its folders together; the
    /// oldest files go first.
    #[arg(long, env = "HEARTH_CACHE_DISK_MAX", default_value_t = hearth_engine::config::DEFAULT_CACHE_DISK_MAX >> 20)]
    cache_disk_max: u64,
    /// Whose cached prompts a request may reuse. caller: only its own caller's (this
    /// machine's owner, each API key, each peer's caller), so that no caller learns what
    /// another sent; node: every caller's, which lets any key holder tell, from
    /// `cached_tokens` and how fast an answer starts, whether another sent a prompt.
    #[arg(long, env = "HEARTH_CACHE_SCOPE", default_value = "caller", value_parser = ["caller", "node"])]
    cache_scope: String,
    /// Speculative decoding: guess tokens ahead from n-grams of the prompt and the answer, or
    /// with --draft-model, and check them in one decode, each token taken by the sampler's own
    /// rule. auto: where the measured cost of a decode and how often guesses hold say it pays;
    /// none; ngram or draft: always. A request may say otherwise (`speculative`).
    #[arg(long, env = "HEARTH_SPEC", default_value = "auto")]
    spec: hearth_protocol::Speculation,
    /// A smaller model with the same vocabulary (a path, or a name in the models folder) that
    /// guesses ahead for every loaded model that shares it; others go without [default: none].
    #[arg(long, env = "HEARTH_DRAFT_MODEL")]
    draft_model: Option<String>,
    /// The projector (an mmproj GGUF file) through which --model sees images or hears audio,
    /// where it is not beside the model as mmproj-<model file name> [default: found beside it].
    #[arg(long, env = "HEARTH_PROJECTOR", requires = "model")]
    projector: Option<PathBuf>,
    /// Layers of each model on the GPU: auto (as many as its free memory holds, less
    /// --gpu-margin: llama.cpp's fitting), a number, all, or 0 (the CPU only).
    #[arg(long, env = "HEARTH_GPU_LAYERS", default_value = "auto")]
    gpu_layers: hearth_engine::GpuLayers,
    /// The GPU to use: its name (Vulkan0, CUDA1) or part of its description (4090), or none
    /// for the CPU only [default: every GPU found].
    #[arg(long, env = "HEARTH_DEVICE", default_value = "any")]
    device: hearth_engine::DeviceChoice,
    /// MiB of each GPU's free memory that fitting (--gpu-layers auto) leaves free.
    #[arg(long, env = "HEARTH_GPU_MARGIN", default_value_t = hearth_engine::config::DEFAULT_GPU_MARGIN >> 20)]
    gpu_margin: u64,
    /// llama.cpp threads for a model whose every layer is on the GPU (--threads otherwise).
    #[arg(long, env = "HEARTH_GPU_THREADS", default_value_t = hearth_engine::config::DEFAULT_GPU_THREADS)]
    gpu_threads: usize,
    /// How long a model loaded for a request stays loaded without requests: seconds, or a
    /// duration like 5m or 1h (as Ollama's keep_alive; 0 unloads it once idle).
    #[arg(long, env = "HEARTH_KEEP_ALIVE", value_parser = parse_keep_alive, default_value = "5m")]
    keep_alive: Duration,
    /// MiB all loaded models may take together; the least recently used one is unloaded to
    /// make room [default: the memory free when a model loads].
    #[arg(long, env = "HEARTH_MEMORY_LIMIT")]
    memory_limit: Option<u64>,
    /// The Hugging Face-style hub models are downloaded from (`OWNER/REPO/FILE.gguf`).
    #[arg(long, env = "HEARTH_HUB_URL", default_value = hearth_models::model_hub::DEFAULT_HUB_URL)]
    hub_url: String,
    /// Requests that may wait for a slot before new ones are refused.
    #[arg(long, env = "HEARTH_QUEUE", default_value_t = hearth_engine::config::DEFAULT_QUEUE_CAPACITY)]
    queue: usize,
    /// Fetch images that requests name by http(s) URL (OpenAI's image_url, Responses'
    /// input_image, Anthropic's url source): public addresses only, never this machine's own
    /// nor its interfaces' networks, 8 MiB and 10 s each, within the request's body limit,
    /// 16 at once on the node [default: off, data URIs only].
    #[arg(long, env = "HEARTH_IMAGE_URLS")]
    image_urls: bool,
    /// Share this node on the LAN: listen on all interfaces; other machines need an API key
    /// (`hearth-node keys create`).
    #[arg(long, env = "HEARTH_LAN")]
    lan: bool,
    /// Extra Host names to answer to (besides localhost, IP addresses and the node's name).
    #[arg(long = "allow-host", env = "HEARTH_ALLOW_HOST", value_delimiter = ',')]
    allow_host: Vec<String>,
    /// This node's name, shown with every answer it gives [default: the host name].
    #[arg(long, env = "HEARTH_NAME")]
    name: Option<String>,
    /// Pause this many milliseconds after each model chunk served to a peer (to stop a
    /// transfer part way in tests).
    #[arg(long, env = "HEARTH_TRANSFER_PACE_MS", hide = true)]
    transfer_pace_ms: Option<u64>,
    /// Let peers' split models place layers on this machine: each gets a process of its own
    /// (`hearth-node rpc-serve`), reached only through the encrypted cluster connection. Up
    /// to MIB mebibytes in all when given, else what the machine has free.
    #[arg(
        long,
        env = "HEARTH_SHARE_MEMORY",
        value_name = "MIB",
        num_args = 0..=1,
        default_missing_value = "all",
        value_parser = parse_share_memory
    )]
    share_memory: Option<u64>,
    /// A split model's worker: the RPC servers (HOST:PORT, reached through the node's tunnels)
    /// that the model's last --split-layers layers go to.
    #[arg(
        long = "split-remote",
        env = "HEARTH_SPLIT_REMOTE",
        hide = true,
        value_delimiter = ','
    )]
    split_remote: Vec<String>,
    /// Stop when standard input closes (a split model's worker: the node that started it
    /// holds it, so the worker never outlives that node).
    #[arg(long, env = "HEARTH_UNTIL_STDIN_CLOSES", hide = true)]
    until_stdin_closes: bool,
    /// A split model's worker: how many of the model's layers go to the RPC servers.
    #[arg(long, env = "HEARTH_SPLIT_LAYERS", hide = true, default_value_t = 0)]
    split_layers: u32,
    /// A split model's worker: how many of those each RPC server takes, in --split-remote's
    /// order (llama.cpp's tensor split) [default: by the memory each server reports].
    #[arg(
        long = "split-shares",
        env = "HEARTH_SPLIT_SHARES",
        hide = true,
        value_delimiter = ','
    )]
    split_shares: Vec<u32>,
    /// Make model loading last at least this many milliseconds (to watch loading progress).
    #[arg(long, env = "HEARTH_MIN_LOAD_MS", hide = true)]
    min_load_ms: Option<u64>,
    /// The batch door's generation_config defaults, as JSON: keys given replace NOTES.md's
    /// defaults, e.g. '{"temperature":0.7,"max_new_tokens":512}'.
    #[arg(long, env = "HEARTH_BATCH_DEFAULTS", value_parser = parse_batch_defaults)]
    batch_defaults: Option<hearth_protocol::batch::BatchDefaults>,
    /// Where the node's Ed25519 key is kept: the OS keyring when it answers (auto), or only a
    /// 0600 file in the data dir (file).
    #[arg(long, env = "HEARTH_KEY_STORAGE", value_enum, default_value_t = hearth_auth::identity::KeyStorage::Auto)]
    key_storage: hearth_auth::identity::KeyStorage,
    /// How long the signed-challenge door waits for `authenticate`, in ms (tests shorten it).
    #[arg(long, env = "HEARTH_AUTH_TIMEOUT_MS", hide = true)]
    auth_timeout_ms: Option<u64>,
    /// Worker mode: serve the tasks of a hub at ws://HOST:PORT/PATH (protocols/worker-node.md).
    #[arg(long, env = "HEARTH_JOIN", requires = "join_token")]
    join: Option<String>,
    /// The hub's token for --join.
    #[arg(long, env = "HEARTH_JOIN_TOKEN", hide_env_values = true)]
    join_token: Option<String>,
    /// Tasks at once in worker mode [default: --parallel].
    #[arg(long, env = "HEARTH_JOIN_CONCURRENCY")]
    join_concurrency: Option<usize>,
    /// Hub mode: accept workers on WebSocket /node that present this token.
    #[arg(long, env = "HEARTH_HUB_TOKEN", hide_env_values = true)]
    hub_token: Option<String>,
    /// In hub mode, whether this node's own engine takes requests too.
    #[arg(long, env = "HEARTH_HUB_LOCAL", default_value_t = true, action = clap::ArgAction::Set)]
    hub_local: bool,
    /// Seconds a client has to send a request's headers; also how long an idle keep-alive
    /// connection stays open (and how long a request body may stall).
    #[arg(long, env = "HEARTH_HEADER_TIMEOUT", value_parser = parse_seconds, default_value_t = hearth_base::connections::DEFAULT_HEADER_TIMEOUT.as_secs_f64())]
    header_timeout: f64,
    /// Seconds a client may take nothing the node writes to it before its connection is closed.
    #[arg(long, env = "HEARTH_WRITE_TIMEOUT", value_parser = parse_seconds, default_value_t = hearth_base::connections::DEFAULT_WRITE_TIMEOUT.as_secs_f64())]
    write_timeout: f64,
    /// Seconds an SSE answer (the OpenAI door, the UI's chat) may stay silent, waiting for a
    /// slot or a long prefill, before it sends a comment line: a proxy's idle timeout then
    /// does not cut it.
    #[arg(long, env = "HEARTH_SSE_KEEP_ALIVE", value_parser = parse_seconds, default_value_t = hearth_base::connections::DEFAULT_SSE_KEEP_ALIVE.as_secs_f64())]
    sse_keep_alive: f64,
    /// Open connections one machine on the LAN may hold (loopback is never limited).
    #[arg(long, env = "HEARTH_CONNECTIONS_PER_ADDRESS", default_value_t = hearth_base::connections::DEFAULT_PER_ADDRESS)]
    connections_per_address: usize,
    /// Read the thermal level from this one sensor file, in the kernel's millidegree format
    /// (e.g. /sys/class/thermal/thermal_zone0/temp) instead of every sensor.
    #[arg(long, env = "HEARTH_THERMAL_ZONE", value_parser = parse_thermal_zone)]
    thermal_zone: Option<PathBuf>,
    /// Also listen on this port, with the same rules as the main one: Ollama's clients expect
    /// 11434 (off by default, so it never collides with an installed Ollama).
    #[arg(long, env = "HEARTH_OLLAMA_PORT")]
    ollama_port: Option<u16>,
    /// The LAN cluster's TCP port (0 picks a free one) [default: 8421, or a free one when
    /// another program holds 8421].
    #[arg(long, env = "HEARTH_CLUSTER_PORT")]
    cluster_port: Option<u16>,
    /// The cluster passcode: peers must have the same one.
    #[arg(long, env = "HEARTH_PASSCODE", hide_env_values = true)]
    passcode: Option<String>,
    /// Take TealeNet peers, whose traffic is not encrypted.
    #[arg(long, env = "HEARTH_TEALENET_COMPAT")]
    tealenet_compat: bool,
    /// A cluster peer to connect to and keep connected (HOST:PORT; repeatable).
    #[arg(long = "peer", env = "HEARTH_PEER", value_delimiter = ',')]
    peers: Vec<String>,
    /// Do not advertise or browse for peers on the LAN (mDNS `_teale._tcp`).
    #[arg(long, env = "HEARTH_NO_DISCOVERY")]
    no_discovery: bool,
    /// Serve scripted tokens instead of running the model (door benchmarks only).
    #[arg(long, env = "HEARTH_SCRIPTED", hide = true)]
    scripted: bool,
    /// The scripted engine's answer, one token per `|`-separated piece (tests of answer shapes:
    /// a thinking block, a tool call); `||` separates answers given in turn, one per request
    /// (a tool call, then the answer that reads its result). Implies --scripted.
    #[arg(long, env = "HEARTH_SCRIPTED_ANSWER", hide = true)]
    scripted_answer: Option<String>,
}

impl ServeArgs {
    /// The node's configuration from these flags (and `HEARTH_*` variables).
    pub fn into_config(self) -> NodeConfig {
        let data_dir = self
            .data_dir
            .unwrap_or_else(hearth_base::data_dir::default_data_dir);
        let mut c = NodeConfig::new(data_dir);
        if let Some(m) = self.models_dir {
            c.models_dir = m;
        }
        c.hub_url = self.hub_url;
        c.transfer_pace = self.transfer_pace_ms.map(Duration::from_millis);
        c.host = self.host;
        c.lan = self.lan;
        c.allowed_hosts = self.allow_host;
        c.image_urls = self.image_urls;
        if let Some(n) = self.name {
            c.name = n;
        }
        c.port = self.port;
        c.model = self.model;
        c.parallel = self.parallel;
        if let Some(t) = self.threads {
            c.threads = t;
        }
        c.ctx = self.ctx;
        c.kv_type = self.kv_type;
        c.cache_ram = self.cache_ram.map(|mib| mib.saturating_mul(1 << 20));
        c.cache_disk = self.cache_disk;
        c.cache_disk_max = self.cache_disk_max.saturating_mul(1 << 20);
        c.shared_cache = self.cache_scope == "node";
        c.spec = self.spec;
        c.draft_model = self.draft_model;
        c.projector = self.projector;
        c.offload = hearth_engine::Offload {
            layers: self.gpu_layers,
            device: self.device,
            margin: self.gpu_margin.saturating_mul(1 << 20),
            gpu_threads: self.gpu_threads.max(1),
        };
        c.queue = self.queue;
        c.keep_alive = self.keep_alive;
        c.memory_limit = self.memory_limit.map(|mib| mib << 20);
        c.min_load_time = self.min_load_ms.map(Duration::from_millis);
        c.script = match self.scripted_answer {
            Some(a) => {
                let tokens = |answer: &str| answer.split('|').map(str::to_owned).collect();
                let mut rounds: Vec<Vec<String>> = a.split("||").map(tokens).collect();
                Some(hearth_engine::Script {
                    answer: rounds.first().cloned().unwrap_or_default(),
                    // One answer: the same for every request, as before.
                    rounds: if rounds.len() > 1 {
                        std::mem::take(&mut rounds)
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                })
            }
            None => self.scripted.then(hearth_engine::Script::default),
        };
        c.remote = (!self.split_remote.is_empty()).then_some(hearth_engine::Remote {
            endpoints: self.split_remote,
            layers: self.split_layers,
            shares: self.split_shares,
        });
        c.share_memory = self.share_memory;
        c.until_stdin_closes = self.until_stdin_closes;
        c.key_storage = self.key_storage;
        c.thermal_zone = self.thermal_zone;
        c.ollama_port = self.ollama_port;
        c.cluster = Some(hearth_cluster::ClusterConfig {
            port: self.cluster_port,
            passcode: self.passcode.filter(|p| !p.is_empty()),
            tealenet_compat: self.tealenet_compat,
            peers: self.peers,
            discovery: !self.no_discovery,
        });
        c.hub = self
            .hub_token
            .map(|token| hearth_hub::HubConfig::new(token, self.hub_local));
        c.join = self.join.map(|url| hearth_route::join::JoinConfig {
            url,
            token: self.join_token.unwrap_or_default(),
            name: c.name.clone(),
            max_concurrency: self.join_concurrency,
        });
        if let Some(ms) = self.auth_timeout_ms {
            c.auth_timeout = Duration::from_millis(ms);
        }
        if let Some(d) = self.batch_defaults {
            c.batch_defaults = d;
        }
        c.limits = hearth_base::connections::Limits {
            header_timeout: Duration::from_secs_f64(self.header_timeout),
            per_address: self.connections_per_address.max(1),
            write_timeout: Duration::from_secs_f64(self.write_timeout),
            sse_keep_alive: Duration::from_secs_f64(self.sse_keep_alive),
        };
        c
    }
}

/// A sensor file that reads as a temperature now.
fn parse_thermal_zone(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    match std::fs::read_to_string(&path) {
        Ok(text) if hearth_models::telemetry::parse_millidegrees(&text).is_some() => Ok(path),
        Ok(_) => Err(format!(
            "{s} does not hold a temperature in millidegrees (an integer such as 45000)"
        )),
        Err(e) => Err(format!("{s} cannot be read: {e}")),
    }
}

/// A timeout in seconds: a number from 0.1 to 3600.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds from 0.1 to 3600")),
    }
}

/// `--share-memory`'s limit: `all` (what is free; also `true`, `yes` or `on`, as the flag's
/// environment variable was once a switch) or a number of MiB, in bytes.
fn parse_share_memory(s: &str) -> Result<u64, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "all" | "" | "true" | "yes" | "on" => Ok(u64::MAX),
        n => n
            .parse::<u64>()
            .ok()
            .filter(|&mib| mib > 0)
            .and_then(|mib| mib.checked_mul(1 << 20))
            .ok_or_else(|| {
                format!("--share-memory takes a number of MiB or `all` (leave it out not to share), not {n:?}")
            }),
    }
}

/// Seconds (`300`) or a duration (`5m`, `1h30m`), at most a week.
pub fn parse_keep_alive(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match s.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(s)
            .map_err(|e| format!("`{s}` is not seconds or a duration like 5m: {e}"))?,
    };
    if d > Duration::from_secs(7 * 24 * 3600) {
        return Err(format!("`{s}` is longer than a week"));
    }
    Ok(d)
}

fn parse_batch_defaults(s: &str) -> Result<hearth_protocol::batch::BatchDefaults, String> {
    let defaults: hearth_protocol::batch::BatchDefaults = serde_json::from_str(s)
        .map_err(|e| format!("not a JSON object of generation_config defaults: {e}"))?;
    defaults
        .validate()
        .map_err(|e| format!("{}: {}", e.param, e.message))?;
    Ok(defaults)
}

/// Only the environment, for programs without these flags on their command line (the
/// desktop app): `HEARTH_PORT`, `HEARTH_DATA_DIR`, `HEARTH_MODEL`, ...
#[derive(Debug, Parser)]
#[command(name = "hearth")]
pub struct EnvOnly {
    #[command(flatten)]
    pub serve: ServeArgs,
}

impl EnvOnly {
    pub fn read() -> Result<NodeConfig, clap::Error> {
        Self::try_parse_from(["hearth"]).map(|e| e.serve.into_config())
    }
}
