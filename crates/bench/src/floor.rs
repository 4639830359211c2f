//! The floor: llama.cpp driven directly through llama-cpp-2 with the least code possible —
//! one context sized like the node's (same slots, per-slot context, batch and threads),
//! greedy sampling, no server. Every node figure is divided by the matching floor figure.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use crate::cpu::process_cpu_seconds;

/// Tokens per second of wall-clock time and per CPU-second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    pub(crate) wall: f64,
    pub(crate) cpu: f64,
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
        // The libraries Hearth's engine loads (the same CPU variant), before llama.cpp starts.
        hearth_engine::load_backend_libraries();
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

    /// Prefill tokens/s: one decode of `tokens` (capped at one batch) into a fresh context.
    pub(crate) fn prefill(&self, tokens: &[LlamaToken]) -> Result<f64> {
        let mut ctx = self.context()?;
        let mut batch = LlamaBatch::new(self.n_batch as usize, 1);
        let n = tokens.len().min(self.n_batch as usize);
        for (i, t) in tokens[..n].iter().enumerate() {
            batch.add(*t, i as i32, &[0], i + 1 == n)?;
        }
        let t0 = Instant::now();
        ctx.decode(&mut batch)?;
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    }

    /// Embedding inputs per second: `rounds` decodes of all `inputs` together (one sequence
    /// each) in an embedding context made as the node makes its own (mean pooling, one cache
    /// for every sequence, 2048 tokens), reading every pooled vector.
    pub(crate) fn embed_rate(&self, inputs: &[Vec<LlamaToken>], rounds: usize) -> Result<f64> {
        let n_ctx = 2048;
        let params = LlamaContextParams::default()
            .with_embeddings(true)
            .with_pooling_type(LlamaPoolingType::Mean)
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(n_ctx)
            .with_n_ubatch(n_ctx)
            .with_n_seq_max(inputs.len() as u32)
            .with_kv_unified(true)
            .with_n_threads(self.threads)
            .with_n_threads_batch(self.threads);
        let mut ctx = self.model.new_context(&self.backend, params)?;
        let mut batch = LlamaBatch::new(n_ctx as usize, inputs.len() as i32);
        let mut width = 0;
        let t0 = Instant::now();
        for _ in 0..rounds {
            batch.clear();
            for (seq, input) in inputs.iter().enumerate() {
                for (pos, t) in input.iter().enumerate() {
                    batch.add(*t, pos as i32, &[seq as i32], true)?;
                }
            }
            ctx.clear_kv_cache();
            ctx.decode(&mut batch)?;
            for seq in 0..inputs.len() {
                width += ctx.embeddings_seq_ith(seq as i32)?.to_vec().len();
            }
        }
        anyhow::ensure!(width > 0, "no vectors");
        Ok((rounds * inputs.len()) as f64 / t0.elapsed().as_secs_f64())
    }

    /// A context with `prompt` prefilled into every sequence, ready for decode measurements.
    pub(crate) fn session(&self, prompt: &[LlamaToken]) -> Result<Session<'_>> {
        let mut ctx = self.context()?;
        let mut batch = LlamaBatch::new(self.n_batch as usize, 1);
        let mut first = Vec::with_capacity(self.slots as usize);
        for seq in 0..self.slots as i32 {
            batch.clear();
            for (i, t) in prompt.iter().enumerate() {
                batch.add(*t, i as i32, &[seq], i + 1 == prompt.len())?;
            }
            ctx.decode(&mut batch)?;
            first.push(LlamaSampler::greedy().sample(&ctx, batch.n_tokens() - 1));
        }
        Ok(Session {
            ctx,
            batch,
            prompt_len: prompt.len(),
            first,
        })
    }
}

/// One context with the prompt in every sequence's KV cache. Each measurement decodes from
/// the end of the prompt and then drops what it generated, so measurements need no prefill
/// and can be short (a short pair of floor and node runs sees the machine in one state).
pub(crate) struct Session<'a> {
    ctx: LlamaContext<'a>,
    batch: LlamaBatch<'static>,
    prompt_len: usize,
    /// Each sequence's first token, sampled from the prompt's logits (as the node's first
    /// token comes from its prefill).
    first: Vec<LlamaToken>,
}

impl Session<'_> {
    /// Time `steps - 1` decode steps of one token for each of `n` sequences together in one
    /// batch. Aggregate tokens per wall-clock second and per CPU-second of this process.
    pub(crate) fn decode(&mut self, n: usize, steps: usize) -> Result<Rate> {
        let n = n.min(self.first.len());
        let (ctx, batch) = (&mut self.ctx, &mut self.batch);
        let mut samplers: Vec<LlamaSampler> = (0..n).map(|_| LlamaSampler::greedy()).collect();
        let mut next = self.first[..n].to_vec();
        let start = Instant::now();
        let cpu_start = process_cpu_seconds(std::process::id())?;
        for step in 0..steps.saturating_sub(1) {
            batch.clear();
            let pos = (self.prompt_len + step) as i32;
            for (seq, t) in next.iter().enumerate() {
                batch.add(*t, pos, &[seq as i32], true)?;
            }
            ctx.decode(batch)?;
            for (seq, t) in next.iter_mut().enumerate() {
                *t = samplers[seq].sample(ctx, seq as i32);
            }
        }
        let tokens = (n * steps.saturating_sub(1)) as f64;
        let wall = start.elapsed().as_secs_f64();
        let cpu = process_cpu_seconds(std::process::id())? - cpu_start;
        for seq in 0..n as u32 {
            let removed = ctx.clear_kv_cache_seq(Some(seq), Some(self.prompt_len as u32), None)?;
            anyhow::ensure!(
                removed,
                "llama.cpp could not drop the generated tokens of sequence {seq}"
            );
        }
        Ok(Rate {
            wall: tokens / wall,
            cpu: tokens / cpu.max(0.01),
        })
    }
}
