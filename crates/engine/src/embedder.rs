//! Embeddings on the engine thread: a second llama.cpp context on the same weights, made on
//! first use with embeddings on and the model's pooling (mean pooling for a model whose GGUF
//! names none, such as a chat model), fed whole inputs, many at once with one sequence each,
//! between generation steps. While streams are generating, embedding work gets at most
//! [`EMBED_SHARE`] of the engine's time (time earned by decoding, and a debt when an input
//! took longer than earned), so decoding keeps most of its speed; when nothing generates it
//! runs back to back, in batches of about [`IDLE_BATCH`] so a new stream waits little.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use tokio::sync::oneshot;

use crate::cpu_share::Governor;

/// The most tokens one input may have (and one decode holds): the embedding context's size,
/// capped by the model's training context.
pub const EMBED_MAX_TOKENS: u32 = 2048;
/// Inputs decoded together in one batch, one sequence each.
pub(crate) const EMBED_SEQS: u32 = 16;
/// The share of the engine's time embeddings may take while streams generate: decoding keeps
/// 1 / (1 + 0.15) = 87% of its speed (a little less, for the doors' own work on the requests).
pub(crate) const EMBED_SHARE: f64 = 0.15;
/// The most time credit embeddings save up while streams generate, so a long wait is not
/// followed by a long stall.
const MAX_CREDIT: f64 = 0.1;
/// How long one batch may take (at the measured speed) when nothing generates: what a stream
/// that arrives meanwhile waits at most for its first step.
pub(crate) const IDLE_BATCH: Duration = Duration::from_millis(250);

/// What a caller gets back: one vector per input, in order, as the model's pooling made it
/// (not normalized: each API normalizes as it documents).
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of every input together.
    pub prompt_tokens: u32,
    /// From submission to the last vector.
    pub total: Duration,
    /// Waiting before the first input was decoded.
    pub queued: Duration,
}

/// Why embeddings were not computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    #[error("input {index} is empty")]
    EmptyInput { index: usize },
    #[error("input {index} has {tokens} tokens; at most {max} fit (truncate it or split it)")]
    TooLong {
        index: usize,
        tokens: usize,
        max: u32,
    },
    #[error("no input was given")]
    NoInput,
    #[error("this model cannot compute embeddings: {0}")]
    Unsupported(String),
    #[error("{0} is not a reranker: its GGUF has no rank pooling (a reranker such as bge-reranker or Qwen3-Reranker has)")]
    NotReranker(String),
    #[error("computing embeddings failed: {0}")]
    Failed(String),
}

/// One embedding request as the engine thread sees it: tokenized inputs and where to answer.
pub(crate) struct EmbedJob {
    pub(crate) inputs: Vec<Vec<LlamaToken>>,
    pub(crate) reply: oneshot::Sender<Result<Embeddings, EmbedError>>,
    pub(crate) submitted: Instant,
}

/// A job part way through.
struct Running {
    job: EmbedJob,
    vectors: Vec<Vec<f32>>,
    started: Option<Instant>,
}

impl Running {
    fn done(&self) -> bool {
        self.vectors.len() == self.job.inputs.len()
    }
}

/// The engine thread's embedding work. The context exists once the first job arrives.
pub(crate) struct Embedder<'m> {
    model: &'m LlamaModel,
    backend: &'static LlamaBackend,
    threads: i32,
    n_ctx: u32,
    ctx: Option<LlamaContext<'m>>,
    batch: Option<LlamaBatch<'static>>,
    /// Why this model cannot embed, once making the context failed.
    unusable: Option<EmbedError>,
    jobs: VecDeque<Running>,
    /// Seconds of embedding time earned by decoding (a share of it) and not spent yet;
    /// negative while an input that took longer than earned is paid back.
    credit: f64,
    /// Measured decode speed of embedding batches, tokens per second (0: not measured yet).
    rate: f64,
}

impl<'m> Embedder<'m> {
    pub(crate) fn new(model: &'m LlamaModel, backend: &'static LlamaBackend, threads: i32) -> Self {
        Self {
            model,
            backend,
            threads,
            n_ctx: max_tokens(model.n_ctx_train()),
            ctx: None,
            batch: None,
            unusable: None,
            jobs: VecDeque::new(),
            credit: 0.0,
            rate: 0.0,
        }
    }

    pub(crate) fn push(&mut self, job: EmbedJob) {
        if let Some(e) = &self.unusable {
            let _ = job.reply.send(Err(e.clone()));
            return;
        }
        let vectors = Vec::with_capacity(job.inputs.len());
        self.jobs.push_back(Running {
            job,
            vectors,
            started: None,
        });
    }

    pub(crate) fn has_work(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Earn embedding time for `decoded`, a generation step's decode, while inputs wait (time
    /// decoded with nothing to embed is not saved up for later).
    pub(crate) fn earn(&mut self, decoded: Duration) {
        if self.jobs.is_empty() {
            self.credit = self.credit.min(0.0);
            return;
        }
        self.credit = (self.credit + decoded.as_secs_f64() * EMBED_SHARE).min(MAX_CREDIT);
    }

    /// Run one batch of embedding inputs. With `generating`, only when time was earned (and
    /// as many inputs as that time allows, at least one); otherwise about [`IDLE_BATCH`] of
    /// them. Answers every job it completes. False when nothing ran.
    /// Its decodes use the threads `governor` allows, as generation's do.
    pub(crate) fn step(&mut self, generating: bool, governor: &mut Governor) -> bool {
        self.jobs.retain(|r| !r.job.reply.is_closed());
        if self.jobs.is_empty() {
            return false;
        }
        if generating && self.credit <= 0.0 {
            return false;
        }
        if self.ctx.is_none() {
            if let Err(e) = self.make_context() {
                for r in self.jobs.drain(..) {
                    let _ = r.job.reply.send(Err(e.clone()));
                }
                self.unusable = Some(e);
                return false;
            }
        }
        let seconds = if generating {
            self.credit
        } else {
            IDLE_BATCH.as_secs_f64()
        };
        let (planned, tokens) = self.plan(self.token_budget(seconds));
        if planned.is_empty() {
            return false;
        }
        let started = Instant::now();
        let threads = governor.limit(started);
        let result = if threads < governor.configured() {
            crate::omp::with_thread_limit(threads, || self.decode(&planned))
        } else {
            self.decode(&planned)
        };
        governor.decoded(Instant::now());
        let spent = started.elapsed();
        if generating {
            self.credit -= spent.as_secs_f64();
        }
        if tokens > 0 && !spent.is_zero() {
            let measured = tokens as f64 / spent.as_secs_f64();
            self.rate = if self.rate == 0.0 {
                measured
            } else {
                0.7 * self.rate + 0.3 * measured
            };
        }
        match result {
            Ok(vectors) => {
                for ((job, _), v) in planned.iter().zip(vectors) {
                    self.jobs[*job].vectors.push(v);
                }
            }
            Err(message) => {
                tracing::error!(%message, "embedding decode failed");
                let mut failed: Vec<usize> = planned.iter().map(|(j, _)| *j).collect();
                failed.dedup();
                for &j in failed.iter().rev() {
                    if let Some(r) = self.jobs.remove(j) {
                        let _ = r.job.reply.send(Err(EmbedError::Failed(message.clone())));
                    }
                }
            }
        }
        self.answer_finished();
        true
    }

    /// Tokens `seconds` pay for at the measured speed; before any measurement, none (one
    /// input is always taken).
    fn token_budget(&self, seconds: f64) -> usize {
        if self.rate == 0.0 {
            return 0;
        }
        (seconds.max(0.0) * self.rate) as usize
    }

    /// The next inputs to decode, in order: (job index, input index) and their tokens. Within
    /// `budget` tokens, but always one input when nothing else fits.
    fn plan(&mut self, budget: usize) -> (Vec<(usize, usize)>, usize) {
        let limit = budget.min(self.n_ctx as usize);
        let mut planned = Vec::new();
        let mut tokens = 0usize;
        let now = Instant::now();
        'jobs: for (j, r) in self.jobs.iter_mut().enumerate() {
            let mut next = r.vectors.len();
            while next < r.job.inputs.len() {
                let n = r.job.inputs[next].len();
                let fits = tokens + n <= limit && planned.len() < EMBED_SEQS as usize;
                if !(fits || planned.is_empty()) {
                    break 'jobs;
                }
                r.started.get_or_insert(now);
                planned.push((j, next));
                tokens += n;
                next += 1;
                if !fits {
                    break 'jobs;
                }
            }
        }
        (planned, tokens)
    }

    /// Decode the planned inputs together, one sequence each, and read their pooled vectors.
    fn decode(&mut self, planned: &[(usize, usize)]) -> Result<Vec<Vec<f32>>, String> {
        let ctx = self.ctx.as_mut().expect("context made before decoding");
        let batch = self.batch.as_mut().expect("batch made with the context");
        batch.clear();
        for (seq, &(j, i)) in planned.iter().enumerate() {
            let input = &self.jobs[j].job.inputs[i];
            for (pos, t) in input.iter().enumerate() {
                batch
                    .add(*t, pos as i32, &[seq as i32], true)
                    .map_err(|e| e.to_string())?;
            }
        }
        // Each batch starts from an empty cache: inputs never see each other.
        ctx.clear_kv_cache();
        ctx.decode(batch).map_err(|e| e.to_string())?;
        (0..planned.len())
            .map(|seq| {
                ctx.embeddings_seq_ith(seq as i32)
                    .map(<[f32]>::to_vec)
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    fn answer_finished(&mut self) {
        let now = Instant::now();
        while self.jobs.front().is_some_and(Running::done) {
            let r = self.jobs.pop_front().expect("front job exists");
            let Running {
                job,
                vectors,
                started,
            } = r;
            let prompt_tokens = job.inputs.iter().map(Vec::len).sum::<usize>() as u32;
            let _ = job.reply.send(Ok(Embeddings {
                vectors,
                prompt_tokens,
                total: now - job.submitted,
                queued: started.unwrap_or(now) - job.submitted,
            }));
        }
    }

    fn make_context(&mut self) -> Result<(), EmbedError> {
        let pooling = pooling_for(self.model)?;
        let params = LlamaContextParams::default()
            .with_embeddings(true)
            .with_pooling_type(pooling)
            .with_n_ctx(NonZeroU32::new(self.n_ctx))
            // Every input is decoded whole, so pooling sees all of it in one micro-batch.
            .with_n_batch(self.n_ctx)
            .with_n_ubatch(self.n_ctx)
            .with_n_seq_max(EMBED_SEQS)
            // One cache for all sequences: with a cache per sequence, an input batched with
            // others got a different vector than alone (cosine 0.96 on the default model).
            .with_kv_unified(true)
            .with_n_threads(self.threads)
            .with_n_threads_batch(self.threads);
        let ctx = self
            .model
            .new_context(self.backend, params)
            .map_err(|e| EmbedError::Unsupported(format!("no embedding context: {e}")))?;
        tracing::info!(tokens = self.n_ctx, ?pooling, "embedding context ready");
        self.batch = Some(LlamaBatch::new(self.n_ctx as usize, EMBED_SEQS as i32));
        self.ctx = Some(ctx);
        Ok(())
    }
}

/// The most tokens an input may have for a model trained on `n_ctx_train`.
pub(crate) fn max_tokens(n_ctx_train: u32) -> u32 {
    EMBED_MAX_TOKENS.min(n_ctx_train.max(1)).max(8)
}

/// The GGUF's pooling when it names one (an embedding model, or a reranker's rank pooling:
/// its outputs are a pair's scores), mean pooling otherwise.
fn pooling_for(model: &LlamaModel) -> Result<LlamaPoolingType, EmbedError> {
    match named_pooling(model) {
        Some(
            p @ (LlamaPoolingType::Mean
            | LlamaPoolingType::Cls
            | LlamaPoolingType::Last
            | LlamaPoolingType::Rank),
        ) => Ok(p),
        _ => Ok(LlamaPoolingType::Mean),
    }
}

/// The pooling the GGUF names (`{arch}.pooling_type`), if it names one.
fn named_pooling(model: &LlamaModel) -> Option<LlamaPoolingType> {
    let arch = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    model
        .meta_val_str(&format!("{arch}.pooling_type"))
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .map(LlamaPoolingType::from)
}

/// Whether the GGUF's pooling is rank: a reranker (see `rerank`).
pub(crate) fn is_reranker(model: &LlamaModel) -> bool {
    named_pooling(model) == Some(LlamaPoolingType::Rank)
}

/// Scale `v` to unit length (Euclidean), as OpenAI's and Ollama's embeddings are. A zero
/// vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_vectors_have_unit_length() {
        let mut v = vec![3.0f32, 4.0];
        normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        let mut zero = vec![0.0f32; 3];
        normalize(&mut zero);
        assert_eq!(zero, vec![0.0; 3]);
    }

    #[test]
    fn inputs_are_capped_by_the_training_context() {
        assert_eq!(max_tokens(8192), EMBED_MAX_TOKENS);
        assert_eq!(max_tokens(512), 512);
    }
}
