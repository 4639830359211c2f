//! The draft model (`--draft-model`): a smaller model of the same vocabulary that guesses the
//! next tokens of generating slots, greedily, one decode per guessed token for all of them at
//! once, in its own context with a sequence per slot. It keeps what it decoded, so each step
//! feeds it only what changed (the tokens taken, the guesses that did not hold are cut), and it
//! catches up with a long prompt a bounded chunk per step, guessing once it has.

use std::num::NonZeroU32;
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// A guessed token is kept only while the draft model gives it at least this probability among
/// its top candidates (llama-server's `--draft-p-min`): past an unsure token the rest rarely
/// hold.
const P_MIN: f32 = 0.75;

/// How much each measured draft step moves the cost.
const COST_WEIGHT: f64 = 0.1;

/// Load the draft model in `path` for `main`: on the GPU when `main` is wholly there, else on
/// the CPU. Why not, when it cannot be loaded or does not share `main`'s vocabulary.
pub(crate) fn load(
    backend: &LlamaBackend,
    path: &std::path::Path,
    main: &LlamaModel,
    on_gpu: bool,
) -> Result<LlamaModel, String> {
    let params = LlamaModelParams::default().with_n_gpu_layers(if on_gpu { u32::MAX } else { 0 });
    let draft = LlamaModel::load_from_file(backend, path, &params)
        .map_err(|e| format!("llama.cpp could not load it: {e}"))?;
    compatible(main, &draft)?;
    if draft.is_recurrent() || draft.is_hybrid() {
        return Err("a recurrent model cannot take guesses back".into());
    }
    Ok(draft)
}

/// Whether `draft` can guess for `main`: the same kind of vocabulary with the same tokens (a
/// few more or fewer at the end, as padded vocabularies have) and the same start and end.
pub(crate) fn compatible(main: &LlamaModel, draft: &LlamaModel) -> Result<(), String> {
    let (m, d) = (main.vocab(), draft.vocab());
    if m.vocab_type() != d.vocab_type() {
        return Err(format!(
            "its vocabulary is of another kind ({:?}, the model's is {:?})",
            d.vocab_type(),
            m.vocab_type()
        ));
    }
    let (nm, nd) = (main.n_vocab(), draft.n_vocab());
    if nm.abs_diff(nd) > 128 {
        return Err(format!("its vocabulary has {nd} tokens, the model's {nm}"));
    }
    if m.bos() != d.bos() || m.eos() != d.eos() {
        return Err("its vocabulary starts or ends with other tokens".into());
    }
    for t in (0..nm.min(nd)).map(LlamaToken::new) {
        if m.text(t) != d.text(t) {
            return Err(format!("its token {} is not the model's", t.0));
        }
    }
    Ok(())
}

/// One slot's request for guesses: its sequence, the tokens so far (prompt then answer, the
/// last one sampled and not yet decoded), and the most tokens to guess.
pub(super) struct Ask<'a> {
    pub(super) seq: i32,
    pub(super) prompt: &'a [LlamaToken],
    pub(super) answer: &'a [LlamaToken],
    pub(super) most: usize,
}

impl Ask<'_> {
    fn len(&self) -> usize {
        self.prompt.len() + self.answer.len()
    }

    fn at(&self, i: usize) -> LlamaToken {
        if i < self.prompt.len() {
            self.prompt[i]
        } else {
            self.answer[i - self.prompt.len()]
        }
    }
}

/// The draft model's context and what each of its sequences holds.
pub(super) struct DraftModel<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Per sequence, the tokens in the draft's cache, at positions 0.. in order.
    held: Vec<Vec<LlamaToken>>,
    n_batch: usize,
    cells: usize,
    /// The model's vocabulary size: guesses are among its tokens.
    n_vocab: usize,
    /// Seconds one guessing step takes (0: not measured yet).
    step_secs: f64,
    /// The draft's size over the model's: a first estimate of a step's cost against the
    /// model's.
    pub(super) size_ratio: f64,
}

impl<'m> DraftModel<'m> {
    /// A context for `model` made with `params` (the model's own, for a pool of `cells`
    /// tokens), one sequence per slot.
    pub(super) fn new(
        model: &'m LlamaModel,
        backend: &LlamaBackend,
        params: LlamaContextParams,
        cells: u32,
        slots: usize,
        n_vocab: usize,
        size_ratio: f64,
    ) -> Result<Self, String> {
        let ctx = model
            .new_context(backend, params.with_n_ctx(NonZeroU32::new(cells)))
            .map_err(|e| format!("llama.cpp could not make its context: {e}"))?;
        let (n_batch, cells) = (ctx.n_batch() as usize, ctx.n_ctx() as usize);
        Ok(Self {
            ctx,
            batch: LlamaBatch::new(n_batch, 1),
            held: vec![Vec::new(); slots],
            n_batch,
            cells,
            n_vocab,
            step_secs: 0.0,
            size_ratio,
        })
    }

    /// Seconds one guessed token costs, once measured.
    pub(super) fn token_cost(&self) -> Option<f64> {
        (self.step_secs > 0.0).then_some(self.step_secs)
    }

    /// Forget every sequence (after a failed decode: the pool may hold anything).
    fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        for h in &mut self.held {
            h.clear();
        }
    }

    /// Forget what sequence `seq` holds: it goes to another caller, who must not catch up
    /// faster on the last one's prompt.
    pub(super) fn forget(&mut self, seq: usize) {
        if self.held.get(seq).is_some_and(|h| !h.is_empty()) {
            let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
            self.held[seq].clear();
        }
    }

    /// Make room for the asking sequences' `demand` (their tokens and guesses): when the pool
    /// would overflow, sequences nobody asks for now (finished requests') leave it.
    fn make_room(&mut self, asks: &[Ask<'_>], demand: usize) {
        let asking = |seq: usize| asks.iter().any(|a| a.seq as usize == seq);
        let others: usize = (0..self.held.len())
            .filter(|&s| !asking(s))
            .map(|s| self.held[s].len())
            .sum();
        if others + demand <= self.cells {
            return;
        }
        for seq in 0..self.held.len() {
            if !self.held[seq].is_empty() && !asking(seq) {
                let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
                self.held[seq].clear();
            }
        }
    }

    /// For each ask, up to `most` guessed tokens (fewer where the draft is unsure, none when
    /// unsure from the first), or `None` where the draft has no answer yet: it is still
    /// catching up with a long prompt, or its decode failed.
    pub(super) fn guess(&mut self, asks: &[Ask<'_>]) -> Vec<Option<Vec<LlamaToken>>> {
        let mut out = vec![None; asks.len()];
        let demand: usize = asks.iter().map(|a| a.len() + a.most).sum();
        self.make_room(asks, demand);
        // First: what each sequence lacks, its last token with logits; a bounded catch-up.
        self.batch.clear();
        let mut budget = self.n_batch;
        let mut live = Vec::new();
        for (a, ask) in asks.iter().enumerate() {
            let seq = ask.seq as usize;
            let total = ask.len();
            if total == 0 || seq >= self.held.len() {
                continue;
            }
            let held = &self.held[seq];
            // What it holds of these tokens, never the last one: its logits are wanted.
            let mut common = held
                .iter()
                .enumerate()
                .take_while(|&(i, t)| i < total && ask.at(i) == *t)
                .count()
                .min(total - 1);
            if common < held.len()
                && !matches!(
                    self.ctx
                        .clear_kv_cache_seq(Some(seq as u32), Some(common as u32), None),
                    Ok(true)
                )
            {
                let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
                common = 0;
            }
            self.held[seq].truncate(common);
            let caught_up = total - common <= budget;
            let feed = (total - common).min(budget);
            for i in common..common + feed {
                let last = caught_up && i + 1 == total;
                if self
                    .batch
                    .add(ask.at(i), i as i32, &[ask.seq], last)
                    .is_err()
                {
                    // Never: the budget is the batch's size. Start over rather than keep
                    // tokens that were never decoded.
                    self.reset();
                    return out;
                }
                self.held[seq].push(ask.at(i));
            }
            budget -= feed;
            if caught_up {
                live.push((a, self.batch.n_tokens() - 1));
            }
        }
        if self.batch.n_tokens() == 0 || self.decode().is_err() {
            return out;
        }
        for &(a, _) in &live {
            out[a] = Some(Vec::new());
        }
        // Then one token for each sequence per decode, while it is sure and wants more.
        while !live.is_empty() {
            self.batch.clear();
            let mut next = Vec::new();
            for &(a, idx) in &live {
                // Only tokens the model has too (a padded draft vocabulary may have more).
                let logits = self.ctx.get_logits_ith(idx);
                let (token, p) = most_likely(&logits[..logits.len().min(self.n_vocab)]);
                if p < P_MIN {
                    continue;
                }
                let Some(guess) = out[a].as_mut() else {
                    continue;
                };
                guess.push(token);
                if guess.len() >= asks[a].most {
                    continue;
                }
                let seq = asks[a].seq;
                let pos = self.held[seq as usize].len() as i32;
                if self.batch.add(token, pos, &[seq], true).is_err() {
                    continue;
                }
                self.held[seq as usize].push(token);
                next.push((a, self.batch.n_tokens() - 1));
            }
            if next.is_empty() {
                break;
            }
            let started = Instant::now();
            if self.decode().is_err() {
                // The guesses made so far stand: each came from logits decoded whole.
                break;
            }
            let secs = started.elapsed().as_secs_f64();
            self.step_secs = if self.step_secs > 0.0 {
                self.step_secs + COST_WEIGHT * (secs - self.step_secs)
            } else {
                secs
            };
            live = next;
        }
        out
    }

    fn decode(&mut self) -> Result<(), ()> {
        self.ctx.decode(&mut self.batch).map_err(|e| {
            tracing::debug!(%e, "the draft model's decode failed; it starts over");
            self.reset();
        })
    }
}

/// Candidates a draft token's probability is taken among (llama-server's draft sampler keeps
/// the top 10 before it judges `p_min`).
const TOP: usize = 10;

/// The token with the highest logit, and its probability among the [`TOP`] most likely.
fn most_likely(logits: &[f32]) -> (LlamaToken, f32) {
    let mut top = [f32::NEG_INFINITY; TOP];
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > top[TOP - 1] {
            if l > top[0] {
                best = i;
            }
            // Keep `top` sorted, highest first.
            let at = top.iter().position(|&t| l > t).unwrap_or(TOP - 1);
            top.copy_within(at..TOP - 1, at + 1);
            top[at] = l;
        }
    }
    let max = top[0];
    let sum: f32 = top
        .iter()
        .filter(|t| t.is_finite())
        .map(|&t| (t - max).exp())
        .sum();
    (LlamaToken::new(best as i32), 1.0 / sum.max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_likely_token_and_its_probability_among_the_top() {
        let (t, p) = most_likely(&[0.0, 3.0, 1.0]);
        assert_eq!(t, LlamaToken::new(1));
        let expected = 1.0 / (1.0 + (-3.0f32).exp() + (-2.0f32).exp());
        assert!((p - expected).abs() < 1e-6);
        let (_, flat) = most_likely(&[1.0; 4]);
        assert!((flat - 0.25).abs() < 1e-6);
        // A long tail beyond the top ten does not count.
        let mut logits = vec![0.0f32; 1000];
        logits[500] = 2.0;
        let (t, p) = most_likely(&logits);
        assert_eq!(t, LlamaToken::new(500));
        let expected = 1.0 / (1.0 + 9.0 * (-2.0f32).exp());
        assert!((p - expected).abs() < 1e-6, "{p} {expected}");
    }
}
