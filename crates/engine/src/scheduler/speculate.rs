//! Speculation in the batch: after each generating slot's next token, the tokens its n-gram
//! drafter guesses follow (as many as the measured step cost and its acceptance say pay, or
//! all under `ngram`), each with logits; after the decode the slot's own sampler takes its
//! tokens one by one and keeps going while each is the guess, so answers are those it would
//! have given without guessing. Guesses that did not hold leave the KV cache at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hearth_protocol::Speculation;
use llama_cpp_2::token::LlamaToken;

use super::Scheduler;
use crate::engine_loop::Shared;
use crate::sampling::logprobs;
use crate::speculation::{expected_gain, Acceptance, Drafter, Explore, StepCost, MAX_DRAFT};

/// The acceptance a request is believed to have before any request's guesses were counted.
const FIRST_PRIOR: f64 = 0.5;

/// One request's speculation.
pub(super) struct SlotSpec {
    mode: Speculation,
    drafter: Drafter,
    acceptance: Acceptance,
    /// This step's guesses, and the batch index of the first.
    guess: Vec<LlamaToken>,
    guess_at: i32,
}

impl SlotSpec {
    pub(super) fn new(mode: Speculation) -> Self {
        Self {
            mode,
            drafter: Drafter::default(),
            acceptance: Acceptance::default(),
            guess: Vec::new(),
            guess_at: 0,
        }
    }

    /// The answer was taken back (regenerate): index it anew.
    pub(super) fn restart(&mut self) {
        self.drafter = Drafter::default();
    }
}

/// The engine's side: its setting, what its steps cost, how often guesses held.
pub(super) struct EngineSpec {
    pub(super) mode: Speculation,
    /// The model's cache can take guesses back (not a recurrent or hybrid model).
    can_rewind: bool,
    cost: StepCost,
    acceptance: Acceptance,
    /// The last batch's answer tokens (next tokens and guesses) and prompt tokens.
    pub(super) filled: (usize, usize),
    /// Guessed tokens in the last batch.
    guessed: usize,
    explore: Explore,
}

impl EngineSpec {
    pub(super) fn new(mode: Speculation, can_rewind: bool) -> Self {
        Self {
            mode,
            can_rewind,
            cost: StepCost::default(),
            acceptance: Acceptance::default(),
            filled: (0, 0),
            guessed: 0,
            explore: Explore::default(),
        }
    }

    /// The step just decoded took `took` and gave `yielded` tokens: its cost is measured, and
    /// with guesses in it, how much faster it was than the same step without.
    pub(super) fn stepped(&mut self, took: Duration, yielded: usize, shared: &Shared) {
        let secs = took.as_secs_f64();
        match self.filled {
            (0, prompt) => self.cost.record_prefill(prompt, secs),
            (answer, 0) => {
                self.cost.record_step(answer, secs);
                let plain = answer - self.guessed;
                if self.guessed > 0 && plain > 0 {
                    if let Some(without) = self.cost.cost(plain) {
                        let speedup = (yielded as f64 / secs) / (plain as f64 / without);
                        shared.spec.record_speedup(speedup);
                    }
                }
            }
            _ => {}
        }
    }
}

impl Scheduler<'_> {
    /// After the `used` next tokens of generating slots, put their guesses in the batch where
    /// they pay. The batch's tokens then.
    pub(super) fn add_guesses(&mut self, mut used: usize) -> usize {
        self.spec.guessed = 0;
        if used == 0 || !self.spec.can_rewind {
            return used;
        }
        // Cells the pool has beyond this step's next tokens.
        let mut spare = self.free_cells().saturating_sub(used);
        let prior = self.spec.acceptance.rate(FIRST_PRIOR);
        let (mut tokens, mut yielded) = (used, used as f64);
        let context = self.context;
        for i in 0..self.slots.len() {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            if slot.batch_idx.is_none() || slot.spec.mode == Speculation::None {
                continue;
            }
            let next_pos = slot.n_past as usize + 1;
            let room = MAX_DRAFT
                .min(spare)
                .min(self.n_batch - used)
                .min(context.saturating_sub(next_pos));
            let auto = slot.spec.mode == Speculation::Auto;
            let rate = slot.spec.acceptance.rate(prior);
            if room == 0 {
                continue;
            }
            // Not even guesses that always hold would pay: nothing to look up, but now and then
            // one token to measure again.
            let hopeless = auto && self.spec.cost.best_guess(tokens, yielded, 1.0, room) == 0;
            let exploring = hopeless && self.spec.explore.declined();
            if hopeless && !exploring {
                continue;
            }
            let mut guess = slot.spec.drafter.draft(&slot.prompt, &slot.generated, room);
            let k = match (auto, exploring) {
                (false, _) => guess.len(),
                (true, true) => guess.len().min(1),
                (true, false) => {
                    let k = self
                        .spec
                        .cost
                        .best_guess(tokens, yielded, rate, guess.len());
                    if k == 0 && !guess.is_empty() && self.spec.explore.declined() {
                        1
                    } else {
                        k
                    }
                }
            };
            if k == 0 {
                continue;
            }
            guess.truncate(k);
            slot.spec.guess_at = used as i32;
            for (j, &t) in guess.iter().enumerate() {
                // Room was counted: the batch takes them.
                let _ = self.batch.add(t, (next_pos + j) as i32, &[slot.seq], true);
            }
            slot.spec.guess = guess;
            used += k;
            spare -= k;
            tokens += k;
            yielded += expected_gain(rate, k);
            self.spec.guessed += k;
        }
        used
    }

    /// Slot `i`'s tokens from the logits at batch index `idx`: the next one, then one more for
    /// each guess that was what its sampler chose. How many it took.
    pub(super) fn take_tokens(&mut self, i: usize, mut idx: i32) -> usize {
        let (guess, at) = match self.slots[i].as_mut() {
            Some(slot) => (std::mem::take(&mut slot.spec.guess), slot.spec.guess_at),
            None => return 0,
        };
        let mut held = 0;
        let mut taken = 0;
        // Until the request ends, or a token is not the guess.
        while let Some(slot) = self.slots[i].as_mut() {
            let token = slot.sampler.sample(&self.ctx, idx, &self.eog);
            let lp = slot
                .params
                .top_logprobs
                .map(|n| logprobs(self.ctx.get_logits_ith(idx), token.0 as usize, n as usize));
            self.on_token(i, token, lp);
            taken += 1;
            if held == guess.len() || guess[held] != token {
                break;
            }
            // The guess held: the logits after it say the next token.
            idx = at + held as i32;
            held += 1;
        }
        if guess.is_empty() {
            return taken;
        }
        let mut record = Acceptance::default();
        record.record(guess.len(), held);
        self.spec.acceptance.fold(record);
        let counters = &self.shared.spec;
        counters
            .guessed
            .fetch_add(guess.len() as u64, Ordering::Relaxed);
        counters.held.fetch_add(held as u64, Ordering::Relaxed);
        if let Some(slot) = self.slots[i].as_mut() {
            slot.spec.acceptance.record(guess.len(), held);
            if held < guess.len() {
                // The guesses that did not hold leave the cache (a finished request's go when
                // its slot is released).
                let _ = self
                    .ctx
                    .kv_cache_seq_rm(slot.seq, Some(slot.n_past as u32), None);
            }
        }
        taken
    }
}
