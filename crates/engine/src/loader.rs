//! Loading a GGUF model with llama.cpp while reporting progress on the engine's state
//! channel, its layers placed as [`crate::offload`] plans (this machine's GPU, a split model's
//! remote devices, or the CPU), and turning a loaded model into the [`ModelInfo`] callers see.
//! Shared by the llama.cpp scheduler and the scripted engine (which loads only the
//! vocabulary).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hearth_protocol::ModelId;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use tokio::sync::watch;

use crate::config::EngineConfig;
use crate::gguf::GgufInfo;
use crate::model::{ModelInfo, ModelState, Prompter};
use crate::offload::{Placement, Plan};

pub(crate) struct Loaded {
    pub(crate) id: ModelId,
    pub(crate) model: Arc<LlamaModel>,
    pub(crate) gguf: GgufInfo,
    pub(crate) backend: &'static LlamaBackend,
    pub(crate) started: Instant,
    /// Where its layers went.
    pub(crate) placement: Placement,
    /// The devices as they were before it loaded (what it took of their memory is the
    /// difference once its context is made too).
    pub(crate) devices_before: Vec<crate::devices::Device>,
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

/// A load that failed with layers on this machine's GPU: tried again with fewer.
#[derive(Debug)]
pub(crate) struct Retry {
    pub(crate) why: String,
    pub(crate) placement: Box<Placement>,
}

/// Load the model (only its vocabulary when `vocab_only`), publishing progress, its layers
/// where `plan` says for a context like `ctx` (made from the model's header). A failure with
/// layers on this machine's GPU is a [`Retry`]; any other is on the state, and `Err(None)`.
pub(crate) fn load(
    config: &EngineConfig,
    state: &watch::Sender<ModelState>,
    vocab_only: bool,
    plan: &Plan,
    ctx: &dyn Fn(&GgufInfo) -> LlamaContextParams,
) -> Result<Loaded, Option<Retry>> {
    let id = model_id(&config.model_path);
    let backend = match crate::backend::backend() {
        Ok(b) => b,
        Err(e) => {
            fail(state, &id, format!("llama.cpp backend: {e}"));
            return Err(None);
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
            return Err(None);
        }
    };
    let started = Instant::now();
    let progress_state = state.clone();
    let progress_id = id.clone();
    let min_load = config.min_load_time;
    // Parameters with the progress callback: made anew for each try of a placement.
    let base = || {
        let (progress_state, progress_id) = (progress_state.clone(), progress_id.clone());
        LlamaModelParams::default()
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
            })
    };
    let layers_total = gguf
        .block_count
        .and_then(|n| u32::try_from(n).ok())
        .map_or(0, |n| n.saturating_add(1));
    let devices_before = crate::devices::devices();
    let (params, placement) = match (&config.remote, vocab_only) {
        (_, true) => (Box::pin(base()), Placement::cpu(layers_total, None)),
        (Some(remote), false) => match remote_params(base(), remote, layers_total) {
            Ok(p) => p,
            Err(e) => {
                fail(state, &id, e);
                return Err(None);
            }
        },
        (None, false) => plan.params(config, &base, &ctx(&gguf), layers_total),
    };
    tracing::info!(model = %id, path = %config.model_path.display(), vocab_only, ?placement, "loading model");
    match LlamaModel::load_from_file(backend, &config.model_path, &params) {
        Ok(m) => Ok(Loaded {
            id,
            model: Arc::new(m),
            gguf,
            backend,
            started,
            placement,
            devices_before,
        }),
        Err(e) if placement.layers > 0 && config.remote.is_none() => Err(Some(Retry {
            why: format!("llama.cpp could not load it there: {e}"),
            placement: Box::new(placement),
        })),
        Err(e) => {
            let message = format!("llama.cpp could not load {file}: {e}");
            fail(state, &id, message);
            Err(None)
        }
    }
}

/// A split model's parameters: its last `remote.layers` units on the RPC servers' devices.
fn remote_params(
    base: LlamaModelParams,
    remote: &crate::config::Remote,
    layers_total: u32,
) -> Result<(std::pin::Pin<Box<LlamaModelParams>>, Placement), String> {
    let mut devices = Vec::new();
    // Each server's share goes to its first device (an RPC server of Hearth's has one).
    let mut split = Vec::new();
    for (i, at) in remote.endpoints.iter().enumerate() {
        let theirs = crate::rpc::add_server(at).map_err(|e| e.to_string())?;
        let share = remote.shares.get(i).copied().unwrap_or(0) as f32;
        split.extend((0..theirs.len()).map(|d| if d == 0 { share } else { 0.0 }));
        devices.extend(theirs);
    }
    let mut params = base
        .with_devices(&devices)
        .map_err(|e| format!("the remote devices: {e}"))?
        .with_n_gpu_layers(remote.layers);
    if remote.shares.len() == remote.endpoints.len() {
        params = params
            .with_tensor_split(&split)
            .map_err(|e| format!("the remote devices' shares: {e}"))?;
    }
    tracing::info!(?remote, ?devices, "placing layers on RPC servers");
    let placement = Placement {
        backend: "RPC".into(),
        devices: remote.endpoints.clone(),
        device_descriptions: Vec::new(),
        layers: remote.layers,
        layers_total,
        vram_bytes: 0,
        note: None,
    };
    Ok((Box::pin(params), placement))
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
    context: u32,
    kv_bytes: u64,
    draft: (Option<ModelId>, Option<String>),
    media: (Option<Arc<crate::media::Projector>>, Option<String>),
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
        context,
        slots: config.slots.max(1),
        kv_type: config.kv_type,
        kv_bytes,
        cache_ram: config.cache_ram,
        embed_max_tokens: crate::embedder::max_tokens(n_ctx_train(loaded)),
        reranker: crate::embedder::is_reranker(model),
        rerank_template: model
            .chat_template(Some("rerank"))
            .ok()
            .and_then(|t| t.to_string().ok()),
        gguf: loaded.gguf.clone(),
        placement: loaded.placement.clone(),
        draft: draft.0,
        draft_refused: draft.1,
        vision: media.0.as_ref().is_some_and(|p| p.vision),
        audio: media.0.as_ref().is_some_and(|p| p.audio),
        projector: media.0.as_ref().and(config.projector.clone()),
        projector_refused: media.1,
        media: media.0,
        prompter: Prompter::new(model.clone(), template_source),
    })
}
