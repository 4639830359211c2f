//! Models on this node: the registry of GGUF files it can load (`registry`), the memory a
//! model takes and the budget for all of them (`memory`), and the host of the loaded models'
//! engines, which loads on demand, unloads the least recently used and the idle (`host`); and
//! models of Ollama and LM Studio linked in without a copy (`import`); downloads from a
//! Hugging Face-style hub or from peers (`hub`, `download`, `sharing`), and the hub's model
//! search (`model_hub_search`); and the machine's
//! telemetry, sampled beside the loaded models (`telemetry`).
//!
//! Architecture invariant: `hearth-models` knows files, engines and the machine, never where a
//! request comes from: no HTTP route, no placement, no cluster connection (the cluster hands
//! `sharing` the connections it opens). It reaches llama.cpp only through `hearth-engine`.

pub mod digest;
mod disk;
pub mod download;
mod download_error;
pub mod host;
pub mod import;
pub mod memory;
pub mod model_hub;
mod model_hub_download;
pub mod model_hub_search;
mod partial;
mod peer_download;
pub mod registry;
mod shards;
pub mod sharing;
pub mod telemetry;

pub use download::{DownloadState, Downloads, Progress};
pub use download_error::DownloadError;
pub use host::{model_id_of, EngineSettings, ModelHost, DEFAULT_KEEP_ALIVE};
pub use registry::{ModelFile, Registry};
