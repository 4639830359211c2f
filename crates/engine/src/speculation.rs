//! Speculative decoding's two judgements, apart from the scheduler that applies them: which
//! tokens to guess ([`Drafter`]: prompt lookup, what followed the latest earlier occurrence of
//! the last three tokens in the prompt and the answer so far; a draft model's guesses are in
//! `scheduler/draft.rs`), and whether guessing pays ([`StepCost`]: what a decode of n tokens
//! costs on this device, measured, plus the draft's own decodes, against the tokens a request's
//! acceptance rate says a guess of k would add). Where it does not pay it is off.

use std::collections::HashMap;

use llama_cpp_2::token::LlamaToken;

/// Tokens a guess is looked up by.
const NGRAM: usize = 3;
/// The longest guess (llama-server's `--draft-max` default).
pub(crate) const MAX_DRAFT: usize = 16;
/// How much faster a step with guesses must be expected to be than one without.
const MARGIN: f64 = 1.05;
/// Batch sizes whose step time is kept.
const MAX_STEP: usize = 64;
/// How much each new measurement moves a step time.
const STEP_WEIGHT: f64 = 0.1;
/// The acceptance a request starts from before its own guesses are counted, and how many
/// guessed tokens' worth that belief weighs.
const PRIOR_WEIGHT: f64 = 4.0;

/// Every this many times `auto` declines to guess, it guesses one token anyway: a cost measured
/// once under load, or a request's early misses, would otherwise keep it off for good. Declines
/// are counted per slot and step, so with N slots generating about one step in 128/N carries
/// one token more.
const EXPLORE_EVERY: u32 = 128;

/// Counts `auto`'s declines and says when to guess anyway.
#[derive(Debug, Default)]
pub(crate) struct Explore {
    declined: u32,
}

impl Explore {
    /// `auto` declined once more: whether this time it guesses one token anyway.
    pub(crate) fn declined(&mut self) -> bool {
        self.declined += 1;
        if self.declined >= EXPLORE_EVERY {
            self.declined = 0;
            true
        } else {
            false
        }
    }
}

/// An n-gram index over one request's tokens (its prompt, then its answer), built as they
/// come: each n-gram maps to the position after its latest occurrence.
#[derive(Debug, Default)]
pub(crate) struct Drafter {
    index: HashMap<[i32; NGRAM], u32>,
    /// Tokens whose n-gram ending there is indexed.
    indexed: usize,
}

impl Drafter {
    /// Up to `most` tokens that followed the latest earlier occurrence of the last n-gram of
    /// `prompt` then `answer`; empty when there is none.
    pub(crate) fn draft(
        &mut self,
        prompt: &[LlamaToken],
        answer: &[LlamaToken],
        most: usize,
    ) -> Vec<LlamaToken> {
        let len = prompt.len() + answer.len();
        let at = |i: usize| {
            if i < prompt.len() {
                prompt[i].0
            } else {
                answer[i - prompt.len()].0
            }
        };
        let gram = |end: usize| -> [i32; NGRAM] { std::array::from_fn(|k| at(end - NGRAM + k)) };
        if len <= NGRAM || most == 0 {
            return Vec::new();
        }
        if self.indexed > len {
            // The answer was taken back (a regenerate): index it again.
            *self = Self::default();
        }
        // Every n-gram followed by a token, so never the last one: that is the query.
        for end in self.indexed.max(NGRAM)..len {
            self.index.insert(gram(end), end as u32);
        }
        self.indexed = len;
        let query = gram(len);
        let Some(&next) = self.index.get(&query) else {
            return Vec::new();
        };
        let next = next as usize;
        // Entries are only ever of these tokens, but a cheap check keeps a guess honest.
        if next >= len || gram(next) != query {
            return Vec::new();
        }
        (next..len.min(next + most))
            .map(|i| LlamaToken::new(at(i)))
            .collect()
    }
}

/// How often a request's guesses were right, token by token: a guess of k tokens of which the
/// first m held adds m acceptances and, when m < k, one rejection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Acceptance {
    pub(crate) accepted: f64,
    pub(crate) rejected: f64,
}

impl Acceptance {
    pub(crate) fn record(&mut self, guessed: usize, held: usize) {
        self.accepted += held as f64;
        if held < guessed {
            self.rejected += 1.0;
        }
    }

    /// The chance that the next guessed token holds, starting from `prior`.
    pub(crate) fn rate(&self, prior: f64) -> f64 {
        (self.accepted + PRIOR_WEIGHT * prior)
            / (self.accepted + self.rejected + PRIOR_WEIGHT).max(f64::MIN_POSITIVE)
    }

    /// The rate over all requests, kept recent: old counts fade.
    pub(crate) fn fold(&mut self, other: Acceptance) {
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        let total = self.accepted + self.rejected;
        if total > 256.0 {
            self.accepted *= 256.0 / total;
            self.rejected *= 256.0 / total;
        }
    }
}

/// Tokens a guess of `k` adds on average when each holds with chance `a`, given the ones
/// before it held: a + a² + … + aᵏ.
pub(crate) fn expected_gain(a: f64, k: usize) -> f64 {
    (1..=k as i32).map(|i| a.powi(i)).sum()
}

/// What a decode step costs on this device, by the tokens in it: seconds measured on steps of
/// generating tokens only, and the cost of one more token measured on prompt prefill.
#[derive(Debug, Clone)]
pub(crate) struct StepCost {
    /// Seconds per step by tokens in it (0: not measured).
    steps: [f64; MAX_STEP + 1],
    /// Seconds per token of a prompt prefilled alone (0: not measured).
    per_token: f64,
}

impl Default for StepCost {
    fn default() -> Self {
        Self {
            steps: [0.0; MAX_STEP + 1],
            per_token: 0.0,
        }
    }
}

fn fold(old: f64, new: f64) -> f64 {
    if old > 0.0 {
        old + STEP_WEIGHT * (new - old)
    } else {
        new
    }
}

impl StepCost {
    /// A step of `tokens` generating tokens took `secs`.
    pub(crate) fn record_step(&mut self, tokens: usize, secs: f64) {
        if (1..=MAX_STEP).contains(&tokens) && secs > 0.0 {
            self.steps[tokens] = fold(self.steps[tokens], secs);
        }
    }

    /// A step of `tokens` prompt tokens alone took `secs`.
    pub(crate) fn record_prefill(&mut self, tokens: usize, secs: f64) {
        if tokens >= 16 && secs > 0.0 {
            self.per_token = fold(self.per_token, secs / tokens as f64);
        }
    }

    /// Seconds a step of `n` tokens takes: measured, or the nearest smaller measured step plus
    /// a prefilled token's cost for each one more (a whole step's when no prefill was
    /// measured). `None` before any step of n or fewer was measured.
    pub(crate) fn cost(&self, n: usize) -> Option<f64> {
        let n = n.min(MAX_STEP);
        let m = (1..=n).rev().find(|&m| self.steps[m] > 0.0)?;
        let base = self.steps[m];
        let each = if self.per_token > 0.0 {
            self.per_token
        } else {
            base
        };
        Some(if m == n {
            base
        } else {
            base + each * (n - m) as f64
        })
    }

    /// How many of `offered` guessed tokens to add to a step that holds `tokens` tokens
    /// expected to yield `yielded` ones, for a request whose guesses hold with chance `a`:
    /// the most tokens per second, and 0 unless that beats the step without guesses by the
    /// margin.
    pub(crate) fn best_guess(&self, tokens: usize, yielded: f64, a: f64, offered: usize) -> usize {
        self.best_guess_paying(tokens, yielded, a, offered, 0.0)
    }

    /// [`Self::best_guess`] when each guessed token also costs `each` seconds to make (a draft
    /// model's decode).
    pub(crate) fn best_guess_paying(
        &self,
        tokens: usize,
        yielded: f64,
        a: f64,
        offered: usize,
        each: f64,
    ) -> usize {
        let Some(without) = self.cost(tokens) else {
            return 0;
        };
        let plain = yielded / without;
        let mut best = (0, plain * MARGIN);
        for k in 1..=offered.min(MAX_STEP.saturating_sub(tokens)) {
            let Some(with) = self.cost(tokens + k) else {
                break;
            };
            let speed = (yielded + expected_gain(a, k)) / (with + each * k as f64);
            if speed > best.1 {
                best = (k, speed);
            }
        }
        best.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(v: &[i32]) -> Vec<LlamaToken> {
        v.iter().copied().map(LlamaToken::new).collect()
    }

    #[test]
    fn drafts_what_followed_the_latest_earlier_occurrence() {
        let mut d = Drafter::default();
        let prompt = toks(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 7, 8]);
        // The answer ends with 1 2 3: the latest earlier 1 2 3 was followed by 7 8.
        assert_eq!(d.draft(&prompt, &toks(&[1, 2, 3]), 4), toks(&[7, 8, 1, 2]));
        assert_eq!(d.draft(&prompt, &toks(&[1, 2, 3]), 1), toks(&[7]));
        // Indexing goes on as the answer grows.
        assert_eq!(
            d.draft(&prompt, &toks(&[1, 2, 3, 7, 8, 1, 2]), 3),
            toks(&[3, 7, 8])
        );
        assert!(d.draft(&prompt, &toks(&[42, 43, 44]), 4).is_empty());
        assert!(d.draft(&toks(&[1, 2]), &[], 4).is_empty());
    }

    #[test]
    fn a_taken_back_answer_is_indexed_again() {
        let mut d = Drafter::default();
        let prompt = toks(&[5, 6, 7, 8]);
        assert_eq!(
            d.draft(&prompt, &toks(&[1, 2, 3, 4, 5, 6, 7]), 4),
            toks(&[8, 1, 2, 3])
        );
        // Regenerated: the answer is shorter and different; nothing stale is offered.
        assert!(d.draft(&prompt, &toks(&[9]), 4).is_empty());
        assert_eq!(
            d.draft(&prompt, &toks(&[9, 5, 6, 7]), 4),
            toks(&[8, 9, 5, 6])
        );
    }

    #[test]
    fn acceptance_counts_held_tokens_and_misses() {
        let mut a = Acceptance::default();
        assert!((a.rate(0.5) - 0.5).abs() < 1e-9, "the prior alone");
        a.record(4, 4);
        a.record(4, 1);
        assert_eq!(a.accepted, 5.0);
        assert_eq!(a.rejected, 1.0);
        assert!((a.rate(0.5) - 7.0 / 10.0).abs() < 1e-9);
        let mut all = Acceptance::default();
        for _ in 0..100 {
            all.fold(a);
        }
        assert!(all.accepted + all.rejected <= 256.0 + 1e-9);
        assert!((all.accepted / (all.accepted + all.rejected) - 5.0 / 6.0).abs() < 1e-9);
    }

    #[test]
    fn guesses_only_where_the_measured_cost_pays() {
        let mut c = StepCost::default();
        assert_eq!(c.best_guess(1, 1.0, 0.9, 8), 0, "nothing measured yet");
        // A CPU: a step of one token 10 ms, each more token 4 ms (as prefill measures).
        c.record_step(1, 0.010);
        c.record_prefill(512, 0.512 * 4.0 / 1000.0 * 1000.0);
        assert!((c.cost(3).unwrap() - 0.018).abs() < 1e-9);
        // Free chat: guesses rarely hold.
        assert_eq!(c.best_guess(1, 1.0, 0.2, 8), 0);
        // Copying: they mostly hold, a few tokens pay.
        let k = c.best_guess(1, 1.0, 0.9, 8);
        assert!((1..=8).contains(&k), "{k}");
        // A GPU: more tokens in a step cost almost nothing, a long guess pays.
        let mut g = StepCost::default();
        g.record_step(1, 0.001);
        g.record_prefill(512, 0.512 * 0.02 / 1000.0 * 1000.0);
        assert_eq!(g.best_guess(1, 1.0, 0.9, 8), 8);
        assert!(g.best_guess(1, 1.0, 0.05, 8) == 0);
        // Measured steps win over the estimate: here two tokens cost two steps.
        c.record_step(2, 0.020);
        assert_eq!(c.best_guess(1, 1.0, 0.9, 1), 0);
    }

    #[test]
    fn a_draft_model_pays_only_when_its_own_decode_is_cheap() {
        // A GPU step: more tokens cost almost nothing.
        let mut g = StepCost::default();
        g.record_step(1, 0.010);
        g.record_prefill(512, 0.512 * 0.05 / 1000.0 * 1000.0);
        // A draft a tenth of the model's cost, mostly right: a long guess pays.
        assert!(g.best_guess_paying(1, 1.0, 0.8, 8, 0.001) >= 4);
        // A draft as slow as the model itself never pays, however right.
        assert_eq!(g.best_guess_paying(1, 1.0, 1.0, 8, 0.010), 0);
        assert_eq!(
            g.best_guess_paying(1, 1.0, 0.8, 8, 0.0),
            g.best_guess(1, 1.0, 0.8, 8)
        );
    }

    #[test]
    fn a_declining_auto_guesses_once_in_a_while() {
        let mut e = Explore::default();
        let tries: Vec<bool> = (0..3 * EXPLORE_EVERY).map(|_| e.declined()).collect();
        assert_eq!(tries.iter().filter(|&&t| t).count(), 3);
        assert!(tries[EXPLORE_EVERY as usize - 1]);
    }

    #[test]
    fn expected_gain_is_the_geometric_sum() {
        assert!((expected_gain(0.5, 3) - 0.875).abs() < 1e-12);
        assert_eq!(expected_gain(1.0, 4), 4.0);
        assert_eq!(expected_gain(0.0, 4), 0.0);
    }
}
