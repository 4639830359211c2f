//! Loading a GGUF model with llama.cpp while reporting progress on the engine's state
//! channel, and turning a loaded model into the [`ModelInfo`] callers see. Shared by the
//! llama.cpp scheduler and the scripted engine (which loads only the vocabulary).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hearth_protocol::ModelId;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use tokio::sync::watch;

use crate::config::EngineConfig;
use crate::gguf::GgufInfo;
use crate::model::{ModelInfo, ModelState, Prompter};

pub(crate) struct Loaded {
    pub(crate) id: ModelId,
    pub(crate) model: Arc<LlamaModel>,
    pub(crate) gguf: GgufInfo,
    pub(crate) backend: &'static LlamaBackend,
    pub(crate) started: Instant,
}

pub(crate) fn model_id(path: &Path) -> ModelId {
    ModelId::from_file_name(
        &path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
}

/// Record a failure on the state channel (and in the log).
pub(crate) fn fail(state: &watch::Sender<ModelState>, model: &ModelId, message: String) {
    tracing::error!(%model, %message, "model failed to load");
    state.send_replace(ModelState::Failed {
        model: model.clone(),
        message,
    });
}

/// Load the model (only its vocabulary when `vocab_only`), publishing progress. On failure
/// the state says why and `None` is returned.
pub(crate) fn load(
    config: &EngineConfig,
    state: &watch::Sender<ModelState>,
    vocab_only: bool,
) -> Option<Loaded> {
    let id = model_id(&config.model_path);
    let backend = match crate::backend::backend() {
        Ok(b) => b,
        Err(e) => {
            fail(state, &id, format!("llama.cpp backend: {e}"));
            return None;
        }
    };
    // The state's message reaches clients on other machines: it names the model's file, never
    // its folder (the log has the path).
    let file = config
        .model_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let gguf = match crate::gguf::read(&config.model_path) {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(path = %config.model_path.display(), error = %e, "the model's header cannot be read");
            let message = match e {
                crate::gguf::GgufError::Io { source, .. } => {
                    format!("cannot read {file}: {source}")
                }
                other => format!("{file}: {other}"),
            };
            fail(state, &id, message);
            return None;
        }
    };
    let started = Instant::now();
    let progress_state = state.clone();
    let progress_id = id.clone();
    let min_load = config.min_load_time;
    let mut params = LlamaModelParams::default();
    if let (Some(remote), false) = (&config.remote, vocab_only) {
        let mut devices = Vec::new();
        for at in &remote.endpoints {
            match crate::rpc::add_server(at) {
                Ok(mut d) => devices.append(&mut d),
                Err(e) => {
                    fail(state, &id, e.to_string());
                    return None;
                }
            }
        }
        params = match params.with_devices(&devices) {
            Ok(p) => p.with_n_gpu_layers(remote.layers),
            Err(e) => {
                fail(state, &id, format!("the remote devices: {e}"));
                return None;
            }
        };
        tracing::info!(model = %id, ?remote, ?devices, "placing layers on RPC servers");
    }
    let params = params
        .with_vocab_only(vocab_only)
        .with_progress_callback(move |p: f32| {
            if let Some(min) = min_load {
                // Pace loading so it lasts at least `min` (tests observe progress this way).
                let due = min.mul_f32(p.clamp(0.0, 1.0));
                let elapsed = started.elapsed();
                if due > elapsed {
                    std::thread::sleep(due - elapsed);
                }
            }
            progress_state.send_replace(ModelState::Loading {
                model: progress_id.clone(),
                progress: p.clamp(0.0, 1.0),
                elapsed: started.elapsed(),
            });
            true
        });
    tracing::info!(model = %id, path = %config.model_path.display(), vocab_only, "loading model");
    match LlamaModel::load_from_file(backend, &config.model_path, &params) {
        Ok(m) => Some(Loaded {
            id,
            model: Arc::new(m),
            gguf,
            backend,
            started,
        }),
        Err(e) => {
            let message = format!("llama.cpp could not load {file}: {e}");
            fail(state, &id, message);
            None
        }
    }
}

/// The model's training context. A vocabulary-only load has no hyperparameters, so the
/// GGUF header answers then.
pub(crate) fn n_ctx_train(loaded: &Loaded) -> u32 {
    match loaded.model.n_ctx_train() {
        0 => loaded
            .gguf
            .context_length
            .map_or(u32::MAX, |c| u32::try_from(c).unwrap_or(u32::MAX)),
        n => n,
    }
}

/// What callers see of a loaded model.
pub(crate) fn info(
    loaded: &Loaded,
    config: &EngineConfig,
    ctx_per_slot: u32,
    slots: usize,
) -> Arc<ModelInfo> {
    let model = &loaded.model;
    let template_source = model
        .chat_template(None)
        .ok()
        .and_then(|t| t.to_string().ok());
    Arc::new(ModelInfo {
        id: loaded.id.clone(),
        path: config.model_path.clone(),
        n_params: model.n_params(),
        size_bytes: model.size(),
        n_ctx_train: n_ctx_train(loaded),
        ctx_per_slot,
        slots,
        embed_max_tokens: crate::embedder::max_tokens(n_ctx_train(loaded)),
        gguf: loaded.gguf.clone(),
        prompter: Prompter::new(model.clone(), template_source),
    })
}
