//! How a slot picks its tokens ([`Sampler`]): sampler chains from [`SamplingParams`] (in
//! llama-server's order: grammar, penalties, top-k, top-p, temperature, then a seeded draw;
//! greedy at temperature 0), or the logits' argmax for a plain greedy request; and
//! log-probabilities computed from the raw logits, as OpenAI reports them. A chain's draw
//! accepts its token through llama-cpp-2's C++ shim: llama.cpp throws when a lazy grammar,
//! switched on mid-token, cannot follow what the model wrote, and an exception must not
//! cross into Rust (it aborts the process).

use std::borrow::Borrow;

use hearth_protocol::SamplingParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::token::LlamaToken;

use crate::grammar::{self, GrammarError};

/// How many recent tokens repetition penalties look at (llama-server's `repeat_last_n`).
const PENALTY_LAST_N: i32 = 64;

/// How a slot picks its next token, chosen when its parameters are set.
pub(crate) enum Sampler {
    /// A plain greedy request (no grammar, no penalties): the logits' [`argmax`], the ends of
    /// generation banned under `ignore_eos`. What the chain would choose, without the chain's
    /// candidate list of the whole vocabulary built for every token (about a tenth of a
    /// millisecond, which a GPU that decodes a token a millisecond notices).
    Argmax { ban_eog: bool },
    /// llama.cpp's sampler chain.
    Chain {
        chain: LlamaSampler,
        /// The candidates it draws from (the vocabulary's), kept between tokens as llama.cpp's
        /// own draw keeps them.
        cur: Vec<LlamaTokenData>,
        /// The ends of generation are banned (`ignore_eos`), in the chain and in a fallback.
        ban_eog: bool,
    },
}

/// The model wrote what the request's grammar cannot follow (a lazy grammar's trigger came
/// with text the grammar does not allow, in the same token), or the chain allowed nothing (a
/// finished grammar whose only way on is an end of generation `ignore_eos` bans): the token
/// the model drew with no grammar applied. The grammar cannot be used again: llama.cpp
/// asserts, uncatchably, when a grammar left with no way on is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffGrammar(pub(crate) LlamaToken);

impl Sampler {
    /// The token for the logits at batch index `idx`; `eog` lists the model's ends of
    /// generation.
    pub(crate) fn sample(
        &mut self,
        ctx: &LlamaContext<'_>,
        idx: i32,
        eog: &[LlamaToken],
    ) -> Result<LlamaToken, OffGrammar> {
        self.draw(ctx.get_logits_ith(idx), eog)
    }

    /// The token for `logits`, accepted by the chain: llama.cpp's `llama_sampler_sample`
    /// (apply, then accept) with the accept's exception caught.
    fn draw(&mut self, logits: &[f32], eog: &[LlamaToken]) -> Result<LlamaToken, OffGrammar> {
        match self {
            Self::Argmax { ban_eog } => Ok(argmax(logits, if *ban_eog { eog } else { &[] })),
            Self::Chain {
                chain,
                cur,
                ban_eog,
            } => {
                let banned = if *ban_eog { eog } else { &[] };
                cur.clear();
                cur.extend(
                    (0..)
                        .zip(logits)
                        .map(|(i, &l)| LlamaTokenData::new(LlamaToken::new(i), l, 0.0)),
                );
                let mut array = LlamaTokenDataArray::new(std::mem::take(cur), false);
                array.apply_sampler(chain);
                // A draw among candidates all at -inf is no draw: accepting it could end the
                // answer where `ignore_eos` forbids, or abort in the grammar.
                let drawn = array
                    .selected
                    .map(|i| array.data[i])
                    .filter(|d| d.logit() > f32::NEG_INFINITY)
                    .map(|d| d.id());
                *cur = array.data;
                let Some(token) = drawn else {
                    return Err(OffGrammar(argmax(logits, banned)));
                };
                chain.try_accept(token).map(|()| token).map_err(|_| {
                    tracing::debug!(token = token.0, "the grammar cannot follow the token drawn");
                    OffGrammar(token)
                })
            }
        }
    }

    /// Tokens already generated, which penalties and a grammar must see (the argmax needs
    /// none). False when the grammar could not follow them: the sampler must not draw again
    /// (see [`OffGrammar`]), and [`without_grammar`] takes its place.
    #[must_use]
    pub(crate) fn accept_many(
        &mut self,
        tokens: impl IntoIterator<Item = impl Borrow<LlamaToken>>,
    ) -> bool {
        match self {
            Self::Argmax { .. } => true,
            Self::Chain { chain, .. } => tokens
                .into_iter()
                .all(|t| chain.try_accept(*t.borrow()).is_ok()),
        }
    }
}

/// `eog` lists the model's end-of-generation tokens, banned when `ignore_eos` is set. Fails
/// only on a grammar the model cannot use (requests are checked for that before they queue).
pub(crate) fn build_sampler(
    model: &LlamaModel,
    params: &SamplingParams,
    seed: u32,
    eog: &[LlamaToken],
) -> Result<Sampler, GrammarError> {
    let grammar = match &params.grammar {
        Some(g) => Some(grammar::sampler(model, g, &params.grammar_triggers)?),
        None => None,
    };
    Ok(assemble(model, params, grammar, seed, eog))
}

/// [`build_sampler`]'s sampler around `grammar`, already made (the one part that can fail).
fn assemble(
    model: &LlamaModel,
    params: &SamplingParams,
    grammar: Option<LlamaSampler>,
    seed: u32,
    eog: &[LlamaToken],
) -> Sampler {
    if grammar.is_none() && plain_greedy(params) {
        return Sampler::Argmax {
            ban_eog: params.ignore_eos,
        };
    }
    let n_vocab = model.n_vocab();
    let mut chain = Vec::with_capacity(7);
    // First, so every later sampler sees only the tokens the grammar allows.
    chain.extend(grammar);
    if params.ignore_eos && !eog.is_empty() {
        let bans: Vec<LlamaLogitBias> = eog
            .iter()
            .map(|t| LlamaLogitBias::new(*t, f32::NEG_INFINITY))
            .collect();
        chain.push(LlamaSampler::logit_bias(n_vocab, &bans));
    }
    if params.repetition_penalty != 1.0
        || params.frequency_penalty != 0.0
        || params.presence_penalty != 0.0
    {
        chain.push(LlamaSampler::penalties(
            n_vocab,
            PENALTY_LAST_N,
            params.repetition_penalty,
            params.frequency_penalty,
            params.presence_penalty,
        ));
    }
    if params.is_greedy() {
        chain.push(LlamaSampler::greedy());
    } else {
        if params.top_k > 0 {
            chain.push(LlamaSampler::top_k(params.top_k.min(i32::MAX as u32) as i32));
        }
        if params.top_p < 1.0 {
            chain.push(LlamaSampler::top_p(params.top_p, 1));
        }
        chain.push(LlamaSampler::temp(params.temperature));
        chain.push(LlamaSampler::dist(seed));
    }
    Sampler::Chain {
        chain: LlamaSampler::chain_simple(chain),
        cur: Vec::with_capacity(n_vocab.max(0) as usize),
        ban_eog: params.ignore_eos,
    }
}

/// What a slot's sampler becomes when its grammar could not follow the model
/// ([`OffGrammar`], or [`Sampler::accept_many`] false): `params` without their grammar, having
/// seen `generated` (penalties count them). The answer goes on as the model writes it; the
/// door reads what it can of it.
pub(crate) fn without_grammar(
    model: &LlamaModel,
    params: &SamplingParams,
    seed: u32,
    eog: &[LlamaToken],
    generated: impl IntoIterator<Item = impl Borrow<LlamaToken>>,
) -> Sampler {
    let mut sampler = assemble(model, params, None, seed, eog);
    // With no grammar every token is taken.
    let _ = sampler.accept_many(generated);
    sampler
}

/// Whether `params` take the most likely token with nothing else applied (no penalties; the
/// caller knows whether a grammar is): then [`argmax`] over the logits is what the sampler
/// chain would choose.
fn plain_greedy(params: &SamplingParams) -> bool {
    params.is_greedy()
        && params.repetition_penalty == 1.0
        && params.frequency_penalty == 0.0
        && params.presence_penalty == 0.0
}

/// The most likely token but `banned` ones (the ends of generation under `ignore_eos`), the
/// first of equal ones, as llama.cpp's greedy sampler takes it ([`argmax_in_order`]'s rule).
/// Two passes the compiler vectorises: the largest value in lanes (one `max` instruction per
/// vector), then the first token that holds it, a lane's width at a time. A token at a time,
/// each stream, while the GPU waits: over 49,152 logits, 5 µs here against 13 µs in lanes that
/// kept where each maximum was and 32 µs for a plain scan.
pub(crate) fn argmax(logits: &[f32], banned: &[LlamaToken]) -> LlamaToken {
    let is_banned = |i: usize| banned.contains(&LlamaToken::new(i as i32));
    // The rule's start: the first token not banned. From a NaN there, nothing is larger.
    match (0..logits.len()).find(|&i| !is_banned(i)) {
        Some(first) if !logits[first].is_nan() => {}
        _ => return argmax_in_order(logits, banned),
    }
    // A comparison with NaN is false: NaNs are passed over, as in the rule.
    let larger = |x: f32, m: f32| if x > m { x } else { m };
    let mut best = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for k in 0..LANES {
            best[k] = larger(chunk[k], best[k]);
        }
    }
    let top = tail
        .iter()
        .chain(&best)
        .fold(f32::NEG_INFINITY, |m, &x| larger(x, m));
    if top > f32::NEG_INFINITY {
        // The first token that holds the largest value and is not banned is the rule's.
        for (n, chunk) in logits.chunks(LANES).enumerate() {
            if chunk.iter().fold(false, |any, &x| any | (x == top)) {
                let hit = (0..chunk.len())
                    .map(|k| n * LANES + k)
                    .find(|&i| logits[i] == top && !is_banned(i));
                if let Some(i) = hit {
                    return LlamaToken::new(i as i32);
                }
            }
        }
    }
    // Nothing above -inf, or every token that holds the largest value is banned: the rule
    // decides.
    argmax_in_order(logits, banned)
}

/// Lanes of [`argmax`]: enough independent maxima to hide each one's latency.
const LANES: usize = 32;

/// llama.cpp's greedy rule, token by token: the first token not banned, then each later one
/// that is larger (so a NaN taken first stays).
fn argmax_in_order(logits: &[f32], banned: &[LlamaToken]) -> LlamaToken {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in logits.iter().enumerate() {
        if best.is_none_or(|(_, b)| x > b) && !banned.contains(&LlamaToken::new(i as i32)) {
            best = Some((i, x));
        }
    }
    LlamaToken::new(best.map_or(0, |(i, _)| i) as i32)
}

/// The chosen token's log-probability and the `top_n` most likely tokens (descending), from
/// raw logits via a numerically stable log-sum-exp.
pub(crate) fn logprobs(logits: &[f32], chosen: usize, top_n: usize) -> (f32, Vec<(usize, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
    let lse = f64::from(max) + sum.ln();
    let lp = |x: f32| (f64::from(x) - lse) as f32;
    let mut top: Vec<(usize, f32)> = Vec::with_capacity(top_n + 1);
    if top_n > 0 {
        for (i, &x) in logits.iter().enumerate() {
            if top.len() < top_n || x > top[top.len() - 1].1 {
                let at = top.partition_point(|&(_, y)| y >= x);
                top.insert(at, (i, x));
                top.truncate(top_n);
            }
        }
    }
    let chosen_lp = logits.get(chosen).map_or(f32::NEG_INFINITY, |&x| lp(x));
    (
        chosen_lp,
        top.into_iter().map(|(i, x)| (i, lp(x))).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use llama_cpp_2::model::params::LlamaModelParams;

    /// The default model's vocabulary: `HEARTH_TEST_MODEL`, else where `scripts/setup.sh`
    /// puts it (`make test` fetches it).
    fn default_vocabulary() -> LlamaModel {
        let path = std::env::var("HEARTH_TEST_MODEL").unwrap_or_else(|_| {
            let setup = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/setup.sh");
            let out = std::process::Command::new(setup)
                .arg("--model-path")
                .output()
                .expect("scripts/setup.sh runs");
            String::from_utf8(out.stdout)
                .expect("a path")
                .trim()
                .to_owned()
        });
        let backend = crate::backend::backend().expect("llama.cpp's backend");
        let params = LlamaModelParams::default().with_vocab_only(true);
        LlamaModel::load_from_file(backend, path, &params).expect("the model's vocabulary")
    }

    #[test]
    fn a_grammar_that_cannot_follow_the_model_lets_the_answer_go_on_without_it() {
        // A tool call's lazy grammar: free text until `<tool_call>`, then a newline must follow.
        let model = default_vocabulary();
        let params = SamplingParams {
            temperature: 0.0,
            grammar: Some(r#"root ::= "<tool_call>\n{}""#.into()),
            grammar_triggers: vec!["<tool_call>".into()],
            ..SamplingParams::default()
        };
        let mut sampler = build_sampler(&model, &params, 7, &[]).expect("a valid grammar");
        let vocab = model.vocab();
        let n = model.n_vocab() as usize;
        let favour = |t: LlamaToken| {
            let mut logits = vec![0.0f32; n];
            logits[t.0 as usize] = 10.0;
            logits
        };
        let opening = vocab.tokenize(b"<tool_call", false, false);
        for &t in &opening {
            assert_eq!(
                sampler.draw(&favour(t), &[]),
                Ok(t),
                "free text before the trigger"
            );
        }
        // The trigger completed by a token that brings more than the grammar allows after it
        // (llama.cpp throws from its accept: this aborted the node).
        let wrong = (0..n as i32)
            .map(LlamaToken::new)
            .find(|&t| {
                let piece = vocab.token_to_piece(t, false, None);
                piece.len() == 2 && piece[0] == b'>' && piece[1].is_ascii_punctuation()
            })
            .expect("a token of '>' and a sign");
        assert_eq!(sampler.draw(&favour(wrong), &[]), Err(OffGrammar(wrong)));
        // The slot goes on with the same parameters but the grammar.
        let mut generated = opening.clone();
        generated.push(wrong);
        let mut loose = without_grammar(&model, &params, 7, &[], &generated);
        let next = vocab.tokenize(b" x", false, false)[0];
        assert_eq!(loose.draw(&favour(next), &[]), Ok(next));

        // A grammar that is still followed draws as before.
        let mut kept = build_sampler(&model, &params, 7, &[]).expect("a valid grammar");
        let call = vocab.tokenize(b"<tool_call>\n{}", false, false);
        for &t in &call {
            assert_eq!(kept.draw(&favour(t), &[]), Ok(t));
        }

        // The history replayed into a new chain (a `modify` mid-answer) says when its grammar
        // cannot follow it: drawing from that grammar would abort in llama.cpp.
        let mut replayed = build_sampler(&model, &params, 7, &[]).expect("a valid grammar");
        assert!(!replayed.accept_many(&generated));
        let mut replayed = build_sampler(&model, &params, 7, &[]).expect("a valid grammar");
        assert!(replayed.accept_many(&call));

        // A finished grammar allows only an end of generation, which `ignore_eos` bans: nothing
        // is left to draw, and the model's own choice but the end is taken instead.
        let eog: Vec<LlamaToken> = (0..n as i32)
            .map(LlamaToken::new)
            .filter(|&t| vocab.is_eog(t))
            .collect();
        let endless = SamplingParams {
            ignore_eos: true,
            ..params.clone()
        };
        let mut sampler = build_sampler(&model, &endless, 7, &eog).expect("a valid grammar");
        for &t in &call {
            assert_eq!(sampler.draw(&favour(t), &eog), Ok(t));
        }
        let mut logits = favour(vocab.eos());
        logits[next.0 as usize] = 5.0;
        assert_eq!(sampler.draw(&logits, &eog), Err(OffGrammar(next)));
    }

    #[test]
    fn argmax_takes_the_first_largest_but_the_banned() {
        let t = |i| LlamaToken::new(i);
        assert_eq!(argmax(&[0.1, 2.0, -1.0, 2.0], &[]), t(1));
        assert_eq!(argmax(&[0.1, 2.0, -1.0, 2.0], &[t(1)]), t(3));
        assert_eq!(argmax(&[0.1, 2.0, 1.5], &[t(1)]), t(2));
        // As llama.cpp's: a comparison with NaN is false, so a NaN first stays first.
        assert_eq!(argmax(&[f32::NAN, 1.0, 0.5], &[]), t(0));
        assert_eq!(argmax(&[0.5, f32::NAN, 1.0], &[]), t(2));
        assert_eq!(
            argmax(&[-3.0, -2.0], &[t(0), t(1)]),
            t(0),
            "all banned: the first"
        );
    }

    #[test]
    fn argmax_with_nothing_above_minus_infinity_takes_the_first_allowed() {
        // A lane's width of banned NaNs, then -inf first allowed in the second pass, NaNs
        // after it and in the tail.
        let mut logits = vec![f32::NAN; 2 * LANES + 1];
        logits[LANES] = f32::NEG_INFINITY;
        let banned: Vec<LlamaToken> = (0..LANES as i32).map(LlamaToken::new).collect();
        assert_eq!(argmax(&logits, &banned), LlamaToken::new(LANES as i32));
    }

    #[test]
    fn argmax_in_lanes_follows_the_rule_token_by_token() {
        // Vectors of every length around the lanes, with ties, NaN, infinities and banned
        // tokens in many places, against the rule applied one token at a time.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let specials = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, 3.0, -0.0, 0.0];
        for case in 0..20_000 {
            let len = (next() % (3 * LANES as u64 + 2)) as usize;
            // One case in eight holds nothing above -inf.
            let empty = next() % 8 == 0;
            let logits: Vec<f32> = (0..len)
                .map(|_| match next() % 10 {
                    r if empty => [f32::NAN, f32::NEG_INFINITY][(r % 2) as usize],
                    0 => specials[(next() % specials.len() as u64) as usize],
                    // Few distinct values, so ties are common.
                    r => (r % 4) as f32 - 1.5,
                })
                .collect();
            // Up to a lane's width and more banned, mostly among the first tokens.
            let banned: Vec<LlamaToken> = (0..next() % (LANES as u64 + 4))
                .map(|_| LlamaToken::new((next() % (len as u64 / 2 + 2)) as i32))
                .collect();
            assert_eq!(
                argmax(&logits, &banned),
                argmax_in_order(&logits, &banned),
                "case {case}: {logits:?} banning {banned:?}"
            );
        }
    }

    #[test]
    fn logprobs_match_a_direct_softmax() {
        let logits = [1.0f32, 3.0, 2.0, -1.0, 3.0];
        let (chosen, top) = logprobs(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&x| f64::from(x).exp()).sum();
        let expect = |x: f32| (f64::from(x).exp() / z).ln() as f32;
        assert!((chosen - expect(2.0)).abs() < 1e-5);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 4, 2]);
        for (i, l) in top {
            assert!((l - expect(logits[i])).abs() < 1e-5);
        }
        let total: f64 = logits
            .iter()
            .map(|&x| f64::from(logprobs(&logits, 0, 0).0 - logits[0] + x).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5, "probabilities sum to {total}");
    }

    #[test]
    fn large_logits_do_not_overflow() {
        let logits = [1000.0f32, 999.0];
        let (lp, top) = logprobs(&logits, 0, 1);
        assert!(lp.is_finite() && lp < 0.0 && lp > -1.0);
        assert_eq!(top[0].0, 0);
    }
}
