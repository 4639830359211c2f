//! The node's settings after the CLI and `HEARTH_*` variables are read: where it listens,
//! where its data and models live, and how the engine runs. Also resolves `--model NAME|PATH`
//! against the models folder.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The model `make run` fetches and every default points at (DESIGN.md §8).
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_PORT: u16 = 8420;

use hearth_auth::identity::KeyStorage;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub host: IpAddr,
    pub port: u16,
    pub data_dir: PathBuf,
    pub models_dir: PathBuf,
    /// This node's name (shown with every answer it gives); the host name by default.
    pub name: String,
    /// Start exposed to the LAN (all interfaces; API keys required from other machines).
    pub lan: bool,
    /// `Host` names accepted besides loopback names, IP addresses and the node's name.
    pub allowed_hosts: Vec<String>,
    /// Fetch images that requests name by http(s) URL, from public addresses only
    /// (`--image-urls`).
    pub image_urls: bool,
    /// A file name (with or without `.gguf`) in the models folder, or a path.
    pub model: Option<String>,
    pub parallel: usize,
    pub threads: usize,
    /// How much of a model goes to this machine's GPU, and which one (`--gpu-layers`,
    /// `--device`, `--gpu-margin`).
    pub offload: hearth_engine::Offload,
    /// Each model's context, in tokens: one KV pool its slots share (`--ctx`); `None`: the
    /// model's training context, as far as memory holds.
    pub ctx: Option<u32>,
    /// The KV cache's element type (`--kv-type`).
    pub kv_type: hearth_engine::KvType,
    /// Bytes of host memory each model's prompt cache may take (`--cache-ram`); `None`: a share
    /// of the memory left beside the models, 0: off.
    pub cache_ram: Option<u64>,
    /// Where the prompt cache also keeps sequences across restarts (`--cache-disk`), and the
    /// most bytes each model's may take there (`--cache-disk-max`).
    pub cache_disk: Option<PathBuf>,
    pub cache_disk_max: u64,
    /// `--cache-scope node`: every caller reads every other's cached prompts.
    pub shared_cache: bool,
    /// Guessing ahead (`--spec`): auto, none, ngram or draft.
    pub spec: hearth_protocol::Speculation,
    /// A smaller model of the same vocabulary that guesses ahead (`--draft-model`): a path or
    /// a name in the models folder.
    pub draft_model: Option<String>,
    /// The projector (`mmproj` GGUF) of `model`, where it is not found beside it
    /// (`--projector`).
    pub projector: Option<PathBuf>,
    pub queue: usize,
    /// The Hugging Face-style hub models are downloaded from (`--hub-url`).
    pub hub_url: String,
    /// A pause after each model chunk served to a peer (a hidden setting, for tests).
    pub transfer_pace: Option<Duration>,
    /// Where Ollama and LM Studio keep models, for importing them.
    pub import_roots: hearth_models::import::Roots,
    /// How long a model loaded for a request stays loaded idle (`--keep-alive`).
    pub keep_alive: Duration,
    /// Bytes all loaded models may take (`--memory-limit`); `None`: what is free.
    pub memory_limit: Option<u64>,
    /// See `EngineConfig::min_load_time`.
    pub min_load_time: Option<Duration>,
    /// Serve scripted tokens instead of running the model (door benchmarks, fault tests).
    pub script: Option<hearth_engine::Script>,
    /// The first wait before an MCP server that failed twice is started again (a hidden
    /// setting, for tests); `None`: the client's default.
    pub mcp_backoff_first: Option<Duration>,
    /// The program a chat's documents are read in (`hearth_docs::Reader`), which must call
    /// `read_document_if_asked` first; `None`: this program (a hidden setting, for tests, whose
    /// program is not hearth-node).
    pub document_reader: Option<PathBuf>,
    /// Place the model's last layers on these RPC servers (a split model's worker process).
    pub remote: Option<hearth_engine::Remote>,
    /// Let peers' split models place layers on this machine (`--share-memory`), up to this
    /// many bytes (`u64::MAX`: whatever is free); `None`: never.
    pub share_memory: Option<u64>,
    /// Stop when standard input closes (a split model's worker: its node holds it).
    pub until_stdin_closes: bool,
    /// How long shutdown waits for open streams to get their final message.
    pub shutdown_grace: Duration,
    /// The batch door's `generation_config` defaults (NOTES.md's, unless overridden).
    pub batch_defaults: hearth_protocol::batch::BatchDefaults,
    /// How long the signed-challenge door waits for `authenticate` (30 s by the document).
    pub auth_timeout: Duration,
    /// Where the node's Ed25519 key is kept.
    pub key_storage: KeyStorage,
    /// Hub mode (`--hub-token`): workers join on `/node`.
    pub hub: Option<hearth_hub::HubConfig>,
    /// Worker mode (`--join`): serve a hub's tasks.
    pub join: Option<hearth_route::join::JoinConfig>,
    /// Header and idle timeouts, connections per address (`hearth_base::connections`, applied
    /// by `hearth_server::listen`).
    pub limits: hearth_base::connections::Limits,
    /// Read the thermal level from this one sensor file (`--thermal-zone`, millidegrees).
    pub thermal_zone: Option<PathBuf>,
    /// The LAN cluster (`--cluster-port`, `--passcode`, `--tealenet-compat`).
    pub cluster: Option<hearth_cluster::ClusterConfig>,
    /// A second port serving every door (`--ollama-port`, Ollama's 11434 for its clients),
    /// bound where the main port is and moved with it on and off the LAN.
    pub ollama_port: Option<u16>,
}

impl NodeConfig {
    /// Defaults for a data dir: models in `<data_dir>/models`, loopback, port 8420.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        let data_dir = data_dir.into();
        Self {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            models_dir: data_dir.join("models"),
            data_dir,
            name: default_name(),
            lan: false,
            allowed_hosts: Vec::new(),
            image_urls: false,
            model: None,
            parallel: hearth_engine::config::DEFAULT_SLOTS,
            threads: hearth_engine::config::physical_cores(),
            offload: hearth_engine::Offload::default(),
            ctx: None,
            kv_type: hearth_engine::KvType::default(),
            cache_ram: None,
            cache_disk: None,
            cache_disk_max: hearth_engine::config::DEFAULT_CACHE_DISK_MAX,
            shared_cache: false,
            spec: hearth_protocol::Speculation::Auto,
            draft_model: None,
            projector: None,
            queue: hearth_engine::config::DEFAULT_QUEUE_CAPACITY,
            hub_url: hearth_models::model_hub::DEFAULT_HUB_URL.to_owned(),
            transfer_pace: None,
            import_roots: hearth_models::import::Roots::of_user(),
            keep_alive: hearth_models::DEFAULT_KEEP_ALIVE,
            memory_limit: None,
            min_load_time: None,
            script: None,
            mcp_backoff_first: None,
            document_reader: None,
            remote: None,
            share_memory: None,
            until_stdin_closes: false,
            shutdown_grace: Duration::from_secs(3),
            batch_defaults: Default::default(),
            auth_timeout: hearth_server::auth::DEFAULT_AUTH_TIMEOUT,
            key_storage: KeyStorage::Auto,
            hub: None,
            join: None,
            limits: hearth_base::connections::Limits::default(),
            thermal_zone: None,
            cluster: None,
            ollama_port: None,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }
}

/// The machine's host name, or `hearth` when it has none.
pub fn default_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "hearth".to_owned())
}

#[derive(Debug, thiserror::Error)]
pub enum ModelPathError {
    #[error("model {0} not found (looked for {1}); run `make run` once to fetch the default model, or pass --model PATH")]
    NotFound(String, PathBuf),
    #[error("no model given and no .gguf file in {0}; run `make run` once to fetch the default model, or pass --model PATH")]
    NoModels(PathBuf),
    #[error("cannot read the models folder {0}: {1}")]
    Unreadable(PathBuf, std::io::Error),
}

/// Resolve `--model`: an existing path, else a name in the models folder; with no name, the
/// default model, else the only `.gguf` in the folder.
pub fn resolve_model(models_dir: &Path, model: Option<&str>) -> Result<PathBuf, ModelPathError> {
    if let Some(m) = model {
        let as_path = Path::new(m);
        if as_path.is_file() {
            return Ok(as_path.to_path_buf());
        }
        let file = if m.ends_with(".gguf") {
            m.to_owned()
        } else {
            format!("{m}.gguf")
        };
        let candidate = models_dir.join(file);
        return if candidate.is_file() {
            Ok(candidate)
        } else {
            Err(ModelPathError::NotFound(m.to_owned(), candidate))
        };
    }
    let default = models_dir.join(DEFAULT_MODEL_FILE);
    if default.is_file() {
        return Ok(default);
    }
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(models_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ModelPathError::NoModels(models_dir.to_path_buf()))
        }
        Err(e) => return Err(ModelPathError::Unreadable(models_dir.to_path_buf(), e)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "gguf") && path.is_file() {
            found.push(path);
        }
    }
    found.sort();
    found
        .into_iter()
        .next()
        .ok_or_else(|| ModelPathError::NoModels(models_dir.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_names_paths_and_defaults() {
        let dir = std::env::temp_dir().join(format!("hearth-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(
            resolve_model(&dir, None),
            Err(ModelPathError::NoModels(_))
        ));
        std::fs::write(dir.join("b.gguf"), b"x").unwrap();
        std::fs::write(dir.join("a.gguf"), b"x").unwrap();
        assert_eq!(resolve_model(&dir, None).unwrap(), dir.join("a.gguf"));
        assert_eq!(resolve_model(&dir, Some("b")).unwrap(), dir.join("b.gguf"));
        assert_eq!(
            resolve_model(&dir, Some("b.gguf")).unwrap(),
            dir.join("b.gguf")
        );
        let p = dir.join("a.gguf");
        assert_eq!(resolve_model(&dir, Some(p.to_str().unwrap())).unwrap(), p);
        assert!(matches!(
            resolve_model(&dir, Some("zzz")),
            Err(ModelPathError::NotFound(..))
        ));
        std::fs::write(dir.join(DEFAULT_MODEL_FILE), b"x").unwrap();
        assert_eq!(
            resolve_model(&dir, None).unwrap(),
            dir.join(DEFAULT_MODEL_FILE)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
