//! Speculation in the batch: after each generating slot's next token, the tokens its n-gram
//! drafter or the draft model guesses follow (as many as the measured step cost and its
//! acceptance say pay, or all under `ngram` and `draft`), each with logits; after the decode the slot's own sampler takes its
//! tokens one by one and keeps going while each is the guess, so answers are those it would
//! have given without guessing. Guesses that did not hold leave the KV cache at once.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hearth_protocol::Speculation;
use llama_cpp_2::token::LlamaToken;

use super::{draft, fresh_seed, Scheduler};
use crate::engine_loop::Shared;
use crate::sampling::{logprobs, without_grammar, OffGrammar};
use crate::speculation::{expected_gain, Acceptance, Drafter, Explore, StepCost, MAX_DRAFT};

/// The acceptance a request is believed to have before any request's guesses were counted.
const FIRST_PRIOR: f64 = 0.5;

/// One request's speculation.
pub(super) struct SlotSpec {
    mode: Speculation,
    drafter: Drafter,
    /// How often its n-gram guesses held, and its draft model's.
    acceptance: Acceptance,
    draft_acceptance: Acceptance,
    /// This step's guesses, the batch index of the first, and whether the draft model made
    /// them.
    guess: Vec<LlamaToken>,
    guess_at: i32,
    from_draft: bool,
}

impl SlotSpec {
    pub(super) fn new(mode: Speculation) -> Self {
        Self {
            mode,
            drafter: Drafter::default(),
            acceptance: Acceptance::default(),
            draft_acceptance: Acceptance::default(),
            guess: Vec::new(),
            guess_at: 0,
            from_draft: false,
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
    /// How often n-gram guesses held over recent requests, and the draft model's.
    acceptance: Acceptance,
    draft_acceptance: Acceptance,
    /// The last batch's answer tokens (next tokens and guesses) and prompt tokens.
    pub(super) filled: (usize, usize),
    /// Guessed tokens in the last batch, and the seconds the draft model took to guess them.
    guessed: usize,
    draft_secs: f64,
    explore: Explore,
}

impl EngineSpec {
    pub(super) fn new(mode: Speculation, can_rewind: bool) -> Self {
        Self {
            mode,
            can_rewind,
            cost: StepCost::default(),
            acceptance: Acceptance::default(),
            draft_acceptance: Acceptance::default(),
            filled: (0, 0),
            guessed: 0,
            draft_secs: 0.0,
            explore: Explore::default(),
        }
    }

    /// A guess of `guessed` tokens (n-grams' or the draft's) of which `held` held: counted for
    /// its request, while it runs, and over all requests.
    fn judged(
        &mut self,
        slot: Option<&mut SlotSpec>,
        from_draft: bool,
        guessed: usize,
        held: usize,
    ) {
        let mut record = Acceptance::default();
        record.record(guessed, held);
        if from_draft {
            self.draft_acceptance.fold(record);
        } else {
            self.acceptance.fold(record);
        }
        if let Some(slot) = slot {
            let own = if from_draft {
                &mut slot.draft_acceptance
            } else {
                &mut slot.acceptance
            };
            own.record(guessed, held);
        }
    }

    /// The step just decoded took `took` and gave `yielded` tokens: its cost is measured, and
    /// with guesses in it, how much faster it was than the same step without.
    pub(super) fn stepped(&mut self, took: Duration, yielded: usize, shared: &Shared) {
        let secs = took.as_secs_f64();
        match self.filled {
            (0, prompt) => self.cost.record_prefill(prompt, secs),
            (answer, 0) => {
                // A step right after the draft model's decodes runs with the caches full of
                // the draft's weights: slower than the same step alone, it would make every
                // guess look dear. Steps that follow no draft are the table.
                if self.draft_secs == 0.0 {
                    self.cost.record_step(answer, secs);
                }
                let plain = answer - self.guessed;
                if self.guessed > 0 && plain > 0 {
                    if let Some(without) = self.cost.cost(plain) {
                        let speedup =
                            (yielded as f64 / (secs + self.draft_secs)) / (plain as f64 / without);
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
    /// they pay: n-grams first (free to look up), else the draft model's. The batch's tokens
    /// then.
    pub(super) fn add_guesses(&mut self, mut used: usize) -> usize {
        self.spec.guessed = 0;
        self.spec.draft_secs = 0.0;
        if used == 0 || !self.spec.can_rewind {
            return used;
        }
        // Cells the pool has beyond this step's next tokens.
        let mut spare = self.free_cells().saturating_sub(used);
        let prior = self.spec.acceptance.rate(FIRST_PRIOR);
        let draft_prior = self.spec.draft_acceptance.rate(FIRST_PRIOR);
        // What one token guessed by the draft model costs: measured, else its size's share of
        // a step here.
        let draft_cost = self.draft.as_ref().and_then(|d| {
            d.token_cost()
                .or_else(|| self.spec.cost.cost(1).map(|c| c * d.size_ratio))
        });
        let has_draft = self.draft.is_some();
        let (mut tokens, mut yielded) = (used, used as f64);
        // Slots that ask the draft model, and for how many tokens (their room is held).
        let mut asks: Vec<(usize, usize)> = Vec::new();
        let mut held_back = 0;
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
                .min(self.n_batch - used - held_back)
                .min(context.saturating_sub(next_pos));
            if room == 0 {
                continue;
            }
            let rate = slot.spec.acceptance.rate(prior);
            let draft_rate = slot.spec.draft_acceptance.rate(draft_prior);
            let (guess, ask) = match slot.spec.mode {
                Speculation::None => continue,
                Speculation::Ngram => (
                    slot.spec.drafter.draft(&slot.prompt, &slot.generated, room),
                    0,
                ),
                Speculation::Draft => (Vec::new(), if has_draft { room } else { 0 }),
                Speculation::Auto => {
                    let cost = &self.spec.cost;
                    // Not even guesses that always hold would pay: nothing to look up.
                    let hopeless = cost.best_guess(tokens, yielded, 1.0, room) == 0;
                    let mut guess = if hopeless {
                        Vec::new()
                    } else {
                        slot.spec.drafter.draft(&slot.prompt, &slot.generated, room)
                    };
                    let k = cost.best_guess(tokens, yielded, rate, guess.len());
                    // The draft model where n-grams have nothing that pays, if a draft whose
                    // guesses always held would pay at all (its catch-up with the prompt is a
                    // prefill: never spent on a draft that cannot pay).
                    let (mut ask, draft_can_pay) = match (k, draft_cost) {
                        (0, Some(each)) => (
                            cost.best_guess_paying(tokens, yielded, draft_rate, room, each),
                            cost.best_guess_paying(tokens, yielded, 1.0, room, each) > 0,
                        ),
                        _ => (0, false),
                    };
                    guess.truncate(k);
                    if k == 0 && ask == 0 && self.spec.explore.declined() {
                        // Now and then one token anyway, to measure again.
                        guess = slot.spec.drafter.draft(&slot.prompt, &slot.generated, 1);
                        if guess.is_empty() && draft_can_pay {
                            ask = 1;
                        }
                    }
                    (guess, ask)
                }
            };
            if ask > 0 {
                asks.push((i, ask));
                held_back += ask;
                spare -= ask;
                tokens += ask;
                yielded += expected_gain(draft_rate, ask);
                continue;
            }
            let k = guess.len();
            if k == 0 {
                continue;
            }
            slot.spec.guess_at = used as i32;
            slot.spec.from_draft = false;
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
        if !asks.is_empty() {
            used = self.add_draft_guesses(&asks, used);
        }
        used
    }

    /// The draft model's guesses for `asks` (slot, most tokens), into the batch after its
    /// `used` tokens. The batch's tokens then.
    fn add_draft_guesses(&mut self, asks: &[(usize, usize)], mut used: usize) -> usize {
        let Some(draft) = self.draft.as_mut() else {
            return used;
        };
        let started = Instant::now();
        let (asked, guesses) = {
            let slots = &self.slots;
            let (asked, asks): (Vec<usize>, Vec<draft::Ask<'_>>) = asks
                .iter()
                .filter_map(|&(i, most)| {
                    let slot = slots[i].as_ref()?;
                    let ask = draft::Ask {
                        seq: slot.seq,
                        prompt: &slot.prompt,
                        answer: &slot.generated,
                        most,
                    };
                    Some((i, ask))
                })
                .unzip();
            (asked, draft.guess(&asks))
        };
        self.spec.draft_secs = started.elapsed().as_secs_f64();
        for (i, guess) in asked.into_iter().zip(guesses) {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            // No answer yet (a prompt still catching up): nothing to judge the draft by.
            let Some(guess) = guess else {
                continue;
            };
            if guess.is_empty() {
                // The draft was unsure from the first token: its decode bought nothing, which
                // counts against drafting as a miss would.
                self.spec.judged(Some(&mut slot.spec), true, 1, 0);
                continue;
            }
            let next_pos = slot.n_past as usize + 1;
            slot.spec.guess_at = used as i32;
            slot.spec.from_draft = true;
            for (j, &t) in guess.iter().enumerate() {
                // Room was held for each ask's most.
                let _ = self.batch.add(t, (next_pos + j) as i32, &[slot.seq], true);
            }
            used += guess.len();
            self.spec.guessed += guess.len();
            slot.spec.guess = guess;
        }
        used
    }

    /// Slot `i`'s tokens from the logits at batch index `idx`: the next one, then one more for
    /// each guess that was what its sampler chose. How many it took.
    pub(super) fn take_tokens(&mut self, i: usize, mut idx: i32) -> usize {
        let (guess, at, from_draft) = match self.slots[i].as_mut() {
            Some(slot) => (
                std::mem::take(&mut slot.spec.guess),
                slot.spec.guess_at,
                slot.spec.from_draft,
            ),
            None => return 0,
        };
        let (mut held, mut taken, mut missed) = (0, 0, false);
        // Until the request ends, or a token is not the guess.
        while let Some(slot) = self.slots[i].as_mut() {
            let token = match slot.sampler.sample(&self.ctx, idx, &self.eog) {
                Ok(token) => token,
                Err(OffGrammar(token)) => {
                    tracing::warn!(
                        "the model wrote what its grammar cannot follow; the rest of the answer \
                         goes on without it"
                    );
                    let seed = slot.fixed_seed.unwrap_or_else(fresh_seed);
                    let seen = slot.generated.iter().chain([&token]);
                    slot.sampler = without_grammar(self.model, &slot.params, seed, &self.eog, seen);
                    token
                }
            };
            let lp = slot
                .params
                .top_logprobs
                .map(|n| logprobs(self.ctx.get_logits_ith(idx), token.0 as usize, n as usize));
            self.on_token(i, token, lp);
            taken += 1;
            if held == guess.len() {
                break;
            }
            if guess[held] != token {
                missed = true;
                break;
            }
            // The guess held: the logits after it say the next token.
            idx = at + held as i32;
            held += 1;
        }
        if guess.is_empty() {
            return taken;
        }
        // A request that ended (a stop, its length) on a guess that held says nothing against
        // the guesses after its end: only a miss counts as one.
        let judged = if missed { guess.len() } else { held };
        let slot = self.slots[i].as_mut().map(|s| &mut s.spec);
        self.spec.judged(slot, from_draft, judged, held);
        let counters = &self.shared.spec;
        counters
            .guessed
            .fetch_add(guess.len() as u64, Ordering::Relaxed);
        counters.held.fetch_add(held as u64, Ordering::Relaxed);
        if let Some(slot) = self.slots[i].as_mut() {
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
