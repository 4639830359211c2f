//! The floor: llama.cpp driven directly through llama-cpp-2 with the least code possible —
//! one context sized like the node's (same slots, per-slot context, batch and threads),
//! greedy sampling, no server. Every node figure is divided by the matching floor figure.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

/// What one floor run measured, in tokens per second.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct FloorRun {
    pub(crate) prefill_tps: f64,
    pub(crate) decode_tps: f64,
    /// (sequences decoded together, aggregate tokens per second)
    pub(crate) batched_tps: Vec<(usize, f64)>,
}

pub(crate) struct Floor {
    backend: LlamaBackend,
    model: LlamaModel,
    pub(crate) slots: u32,
    pub(crate) ctx_per_slot: u32,
    pub(crate) n_batch: u32,
    pub(crate) threads: i32,
}

impl Floor {
    pub(crate) fn new(
        model_path: &Path,
        slots: u32,
        ctx_per_slot: u32,
        threads: i32,
    ) -> Result<Self> {
        let mut backend = LlamaBackend::init().context("llama.cpp backend")?;
        backend.void_logs();
        let model = LlamaModel::load_from_file(&backend, model_path, &LlamaModelParams::default())
            .context("loading the model for the floor")?;
        Ok(Self {
            backend,
            model,
            slots,
            ctx_per_slot,
            n_batch: 512,
            threads,
        })
    }

    fn context(&self) -> Result<LlamaContext<'_>> {
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(self.slots * self.ctx_per_slot))
            .with_n_batch(self.n_batch)
            .with_n_ubatch(self.n_batch)
            .with_n_seq_max(self.slots)
            .with_n_threads(self.threads)
            .with_n_threads_batch(self.threads);
        Ok(self.model.new_context(&self.backend, params)?)
    }

    pub(crate) fn tokenize(&self, text: &str) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), true, true)
    }

    /// The model's chat template source, for rendering the same prompt the node renders.
    pub(crate) fn template(&self) -> Option<(String, String, String)> {
        let vocab = self.model.vocab();
        let piece = |t| {
            let mut b = Vec::new();
            vocab.token_to_piece_into(t, &mut b, true, None);
            String::from_utf8_lossy(&b).into_owned()
        };
        let src = self.model.chat_template(None).ok()?.to_string().ok()?;
        Some((src, piece(vocab.bos()), piece(vocab.eos())))
    }

    /// One measurement of everything: prefill of `long_prompt` (as one chunk), single-sequence
    /// decode of `steps` tokens after `prompt`, and `steps` batched steps for each batch size.
    pub(crate) fn run(
        &self,
        long_prompt: &[LlamaToken],
        prompt: &[LlamaToken],
        steps: usize,
        batch_sizes: &[usize],
    ) -> Result<FloorRun> {
        let mut ctx = self.context()?;
        let mut batch = LlamaBatch::new(self.n_batch as usize, 1);

        // Prefill: one decode of the whole prompt into sequence 0.
        let long = &long_prompt[..long_prompt.len().min(self.n_batch as usize)];
        for (i, t) in long.iter().enumerate() {
            batch.add(*t, i as i32, &[0], i + 1 == long.len())?;
        }
        let t0 = Instant::now();
        ctx.decode(&mut batch)?;
        let prefill_tps = long.len() as f64 / t0.elapsed().as_secs_f64();
        ctx.clear_kv_cache();

        let decode_tps = self.decode(&mut ctx, &mut batch, prompt, 1, steps)?;
        let mut batched_tps = Vec::new();
        for &n in batch_sizes {
            ctx.clear_kv_cache();
            batched_tps.push((n, self.decode(&mut ctx, &mut batch, prompt, n, steps)?));
        }
        Ok(FloorRun {
            prefill_tps,
            decode_tps,
            batched_tps,
        })
    }

    /// Prefill `prompt` into `n` sequences, then time `steps - 1` decode steps of one token per
    /// sequence (the first token comes from prefill, as in the node). Aggregate tokens/s.
    fn decode(
        &self,
        ctx: &mut LlamaContext<'_>,
        batch: &mut LlamaBatch<'_>,
        prompt: &[LlamaToken],
        n: usize,
        steps: usize,
    ) -> Result<f64> {
        batch.clear();
        let mut logit_idx = Vec::with_capacity(n);
        for seq in 0..n {
            for (i, t) in prompt.iter().enumerate() {
                let last = i + 1 == prompt.len();
                batch.add(*t, i as i32, &[seq as i32], last)?;
                if last {
                    logit_idx.push(batch.n_tokens() - 1);
                }
            }
        }
        ctx.decode(batch)?;
        let mut samplers: Vec<LlamaSampler> = (0..n).map(|_| LlamaSampler::greedy()).collect();
        let mut next: Vec<LlamaToken> = (0..n)
            .map(|s| samplers[s].sample(ctx, logit_idx[s]))
            .collect();
        let start = Instant::now();
        for step in 0..steps.saturating_sub(1) {
            batch.clear();
            let pos = (prompt.len() + step) as i32;
            for (seq, t) in next.iter().enumerate() {
                batch.add(*t, pos, &[seq as i32], true)?;
            }
            ctx.decode(batch)?;
            for (seq, t) in next.iter_mut().enumerate() {
                *t = samplers[seq].sample(ctx, seq as i32);
            }
        }
        Ok((n * steps.saturating_sub(1)) as f64 / start.elapsed().as_secs_f64())
    }
}
