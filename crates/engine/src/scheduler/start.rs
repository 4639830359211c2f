//! The engine thread's start: load the model as the offload plan places it (fewer layers on
//! the GPU after a failure there), make the context, report the model ready, and hand both to
//! the [`Scheduler`] until the engine stops.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use tokio::sync::watch;

use super::Scheduler;
use crate::commands::{Command, Courier};
use crate::config::{EngineConfig, KvType, DEFAULT_CONTEXT};
use crate::cpu_share::Governor;
use crate::embedder::Embedder;
use crate::engine_loop::{self, final_state, Shared};
use crate::events::FailureKind;
use crate::loader;
use crate::media::Projector;
use crate::model::ModelState;

/// The context a model gets, in tokens: the configured one, else its training context
/// (`n_ctx_train`, [`DEFAULT_CONTEXT`] when unknown), never more than that.
pub(crate) fn context_for(config: &EngineConfig, n_ctx_train: u32) -> u32 {
    let trained = match n_ctx_train {
        0 | u32::MAX => DEFAULT_CONTEXT,
        n => n,
    };
    config.context.unwrap_or(trained).min(trained).max(64)
}

fn cache_type(kv: KvType) -> llama_cpp_2::context::params::KvCacheType {
    use llama_cpp_2::context::params::KvCacheType;
    match kv {
        KvType::F16 => KvCacheType::F16,
        KvType::Q8_0 => KvCacheType::Q8_0,
        KvType::Q4_0 => KvCacheType::Q4_0,
    }
}

/// Thread entry: load the model, then serve until shutdown or until every handle is gone. A
/// model or context that fails on the GPU is tried again with fewer layers there.
pub(crate) fn run(
    config: EngineConfig,
    commands: Receiver<Command>,
    state: watch::Sender<ModelState>,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Handle>,
) {
    let mut plan = crate::offload::Plan::new();
    loop {
        let retry = match serve_with(&config, &commands, &state, &shared, runtime.as_ref(), &plan) {
            Ok(()) => return,
            Err(retry) => retry,
        };
        if !plan.fewer(&retry.placement, retry.why.clone()) {
            return loader::fail(&state, &model_id_of(&config), retry.why);
        }
    }
}

/// Load the model as `plan` places it and serve it; a [`loader::Retry`] when it failed on
/// this machine's GPU.
fn serve_with(
    config: &EngineConfig,
    commands: &Receiver<Command>,
    state: &watch::Sender<ModelState>,
    shared: &Arc<Shared>,
    runtime: Option<&tokio::runtime::Handle>,
    plan: &crate::offload::Plan,
) -> Result<(), loader::Retry> {
    let slots = config.slots.max(1);
    let configured = config.threads.max(1) as i32;
    // One KV pool the slots share (llama.cpp's unified cache), each request up to all of it;
    // the sliding-window layers keep every token too, so that a cut-back prefix keeps its
    // window (the prompt cache's reuse needs it).
    let ctx_for = |n_ctx_train: u32, threads: i32| {
        let kv = cache_type(config.kv_type);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(context_for(config, n_ctx_train)))
            .with_n_batch(config.n_batch)
            .with_n_ubatch(config.n_batch)
            .with_n_seq_max(slots as u32)
            .with_kv_unified(true)
            .with_swa_full(true)
            .with_type_k(kv)
            .with_type_v(kv)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        if config.kv_type == KvType::F16 {
            params
        } else {
            // A quantized V cache needs flash attention.
            params.with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED)
        }
    };
    let from_header = |g: &crate::gguf::GgufInfo| {
        let n_ctx_train = g.context_length.and_then(|c| u32::try_from(c).ok());
        ctx_for(n_ctx_train.unwrap_or(u32::MAX), configured)
    };
    let mut loaded = match loader::load(config, state, false, plan, &from_header) {
        Ok(l) => l,
        Err(Some(retry)) => return Err(retry),
        Err(None) => return Ok(()),
    };
    let model = loaded.model.clone();
    let model_id = loaded.id.clone();
    let backend = loaded.backend;
    // With every layer on the GPU the CPU only feeds it: a few threads do as well, and a pool
    // of spinning ones would only take cores from the doors and the rest of the machine.
    let threads = if loaded.placement.on_gpu_whole() {
        configured.min(config.offload.gpu_threads.max(1) as i32)
    } else {
        configured
    };
    let ctx = match model.new_context(backend, ctx_for(model.n_ctx_train(), threads)) {
        Ok(c) => c,
        Err(e) if loaded.placement.layers > 0 && config.remote.is_none() => {
            return Err(loader::Retry {
                why: format!("llama.cpp could not create a context there: {e}"),
                placement: Box::new(loaded.placement),
            })
        }
        Err(e) => {
            loader::fail(
                state,
                &model_id,
                format!("llama.cpp could not create a context: {e}"),
            );
            return Ok(());
        }
    };
    loaded.placement.vram_bytes =
        crate::offload::taken_since(&loaded.devices_before, &loaded.placement.devices);
    let context = ctx.n_ctx();
    let kv_bytes = config
        .kv_type
        .bytes_per_token(&loaded.gguf)
        .unwrap_or(0)
        .saturating_mul(u64::from(context));
    // The draft model, when one is set and shares this model's vocabulary (never in a split
    // model's worker: its layers are elsewhere).
    let draft_id = config.draft_model.as_deref().map(loader::model_id);
    let draft_model = match (&config.draft_model, &config.remote) {
        (Some(path), None) => {
            super::draft::load(backend, path, &model, loaded.placement.on_gpu_whole()).map(Some)
        }
        _ => Ok(None),
    };
    let draft = match &draft_model {
        Ok(Some(m)) => super::draft::DraftModel::new(
            m,
            backend,
            ctx_for(m.n_ctx_train(), threads),
            context,
            slots,
            model.n_vocab().max(0) as usize,
            m.size() as f64 / model.size().max(1) as f64,
        )
        .map(Some),
        Ok(None) => Ok(None),
        Err(why) => Err(why.clone()),
    };
    let draft_state = match (&draft, draft_id) {
        (Ok(Some(_)), id) => (id, None),
        (Err(why), Some(id)) => {
            tracing::warn!(model = %model_id, draft = %id, %why, "the draft model cannot guess for this model");
            (None, Some(format!("draft model {id}: {why}")))
        }
        _ => (None, None),
    };
    let media = load_projector(config, &model, loaded.placement.on_gpu_whole(), threads);
    let info = loader::info(
        &loaded,
        config,
        context,
        kv_bytes,
        draft_state,
        media.clone(),
    );
    tracing::info!(
        model = %model_id,
        seconds = loaded.started.elapsed().as_secs_f32(),
        slots,
        context,
        kv_type = %config.kv_type,
        kv_mib = kv_bytes >> 20,
        cache_ram_mib = config.cache_ram >> 20,
        threads,
        backend = %loaded.placement.backend,
        layers = loaded.placement.layers,
        layers_total = loaded.placement.layers_total,
        vram_mib = loaded.placement.vram_bytes >> 20,
        note = loaded.placement.note.as_deref().unwrap_or(""),
        "model ready"
    );
    // The threads the model decodes with, shown before its first decode.
    shared.threads.store(threads as usize, Ordering::Relaxed);
    state.send_replace(ModelState::Ready(info));

    let eog: Vec<LlamaToken> = {
        let vocab = model.vocab();
        (0..model.n_vocab())
            .map(LlamaToken::new)
            .filter(|t| vocab.is_eog(*t))
            .collect()
    };
    let mut sched = Scheduler {
        eog,
        model: &model,
        ctx,
        batch: LlamaBatch::new(config.n_batch as usize, 1),
        slots: (0..slots).map(|_| None).collect(),
        queue: VecDeque::new(),
        draining: Vec::new(),
        n_batch: config.n_batch as usize,
        prefill_chunk: (config.prefill_chunk as usize).clamp(1, config.n_batch as usize),
        context: context as usize,
        n_swa: model.n_swa(),
        shared: shared.clone(),
        piece: Vec::with_capacity(64),
        prefill_cursor: 0,
        cached: vec![Vec::new(); slots],
        cached_owner: vec![crate::CacheOwner::NODE; slots],
        forgotten: Default::default(),
        cached_used: vec![0; slots],
        clock: 0,
        cache: super::PromptCache::new(config.cache_ram),
        disk: config.cache_disk.as_ref().and_then(|root| {
            // A state loads into the layout it came from: the KV type, and where the cache is.
            let mut layout = format!(
                "{}-{}-{}",
                config.kv_type.name(),
                loaded.placement.backend,
                loaded.placement.layers
            );
            // Images' KV is the projector's work: another projector, another folder.
            if let (Some(_), Some(path)) = (&media.0, &config.projector) {
                layout.push('-');
                layout.push_str(&crate::media::fingerprint(path));
            }
            let dir = super::disk_cache::folder(root, &config.model_path, &layout);
            super::disk_cache::DiskCache::open(dir, config.cache_disk_max)
                .map_err(|e| tracing::warn!(%e, "the prompt cache's folder cannot be used"))
                .ok()
        }),
        courier: Courier::new(runtime),
        governor: Governor::new(threads as usize),
        overlap: loaded.placement.on_gpu_whole(),
        embedder: Embedder::new(&model, backend, threads),
        draft: draft.ok().flatten(),
        media: media.0,
        media_cursor: 0,
        spec: super::speculate::EngineSpec::new(
            config.spec,
            // A recurrent state cannot take guesses back.
            !model.is_recurrent() && !model.is_hybrid(),
        ),
    };
    engine_loop::serve(&mut sched, commands);
    let reason = shared.stop_reason().unwrap_or(FailureKind::ShuttingDown);
    sched.shutdown(reason);
    // Every event is in its channel before anyone sees the final state.
    sched.courier.close();
    state.send_replace(final_state(reason));
    tracing::info!(model = %model_id, "engine stopped");
    Ok(())
}

/// The model's projector when it has one, or why the one configured cannot be used: the model
/// then serves text alone. A split model's worker runs it on this machine's CPU: mtmd would
/// take the first GPU-type device, which may be a peer's RPC server.
fn load_projector(
    config: &EngineConfig,
    model: &Arc<llama_cpp_2::model::LlamaModel>,
    on_gpu: bool,
    threads: i32,
) -> (Option<Arc<Projector>>, Option<String>) {
    let Some(path) = &config.projector else {
        return (None, None);
    };
    let on_gpu = on_gpu && config.remote.is_none();
    match Projector::load(path, model, on_gpu, threads) {
        Ok(p) => {
            tracing::info!(projector = %path.display(), vision = p.vision, audio = p.audio, "projector loaded");
            (Some(Arc::new(p)), None)
        }
        Err(why) => {
            tracing::warn!(projector = %path.display(), %why, "the model serves text only");
            (None, Some(why))
        }
    }
}

fn model_id_of(config: &EngineConfig) -> hearth_protocol::ModelId {
    loader::model_id(&config.model_path)
}
