//! Where a request runs: [`place`], a pure function over one [`Candidate`] record per place
//! that could run it (this node's engine, each hub worker, each LAN peer). No I/O: the route
//! builds the records from what it knows now and acts on the [`Choice`].
//!
//! ## Rules (DESIGN.md §5, NOTES.md "cluster-messages")
//! 1. Only candidates with the model, and for a raw prompt or a continuation only those that
//!    can continue text (this node, Hearth workers).
//! 2. A candidate that is paused (throttle 0) or hot (thermal serious or critical) is never
//!    chosen while another one fits.
//! 3. Among the rest, the one expected to finish first ([`finish_s`]): the requests queued
//!    there and this one, each at that place's measured decode speed; a network hop costs a
//!    little, and the place that served the conversation's previous turn saves the prefill its
//!    prompt cache holds. So a free slot on a node three times faster wins over a free slot
//!    here, and this node wins a tie. A speed not measured yet counts as the slowest measured.
//! 4. Then this node, then the most free slots, then the first listed.
//! 5. When the one expected to finish first has no free slot: this node's own queue if it is
//!    that one, else wait for the first slot that frees; nobody at all when no candidate has
//!    the model.

use hearth_protocol::ModelId;

use hearth_base::thermal::ThermalLevel;

/// What placement knows of one place that could run a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<Id> {
    pub id: Id,
    /// Models loaded there.
    pub models: Vec<ModelId>,
    pub free_slots: usize,
    /// Requests waiting there for a slot.
    pub queue_depth: usize,
    /// 0 (paused) to 100.
    pub throttle: u8,
    pub thermal: ThermalLevel,
    /// Measured decode speed of one stream there, tokens/s (0 until measured).
    pub tokens_per_s: f64,
    /// This node's own engine.
    pub local: bool,
    /// It can continue from text already generated and take raw prompts (Hearth's extension).
    pub continues: bool,
    /// It served the conversation's previous turn: its prompt cache holds the conversation.
    pub preferred: bool,
    /// Its copy of the model sees images (a projector is loaded with it).
    pub vision: bool,
}

impl<Id> Candidate<Id> {
    /// The same record under another id.
    pub fn with_id<New>(self, id: New) -> Candidate<New> {
        Candidate {
            id,
            models: self.models,
            free_slots: self.free_slots,
            queue_depth: self.queue_depth,
            throttle: self.throttle,
            thermal: self.thermal,
            tokens_per_s: self.tokens_per_s,
            local: self.local,
            continues: self.continues,
            preferred: self.preferred,
            vision: self.vision,
        }
    }

    fn has(&self, model: &ModelId) -> bool {
        self.models.iter().any(|m| m == model)
    }

    /// Neither paused nor hot.
    fn fits(&self) -> bool {
        self.throttle > 0 && matches!(self.thermal, ThermalLevel::Nominal | ThermalLevel::Fair)
    }
}

/// What a request needs of its place.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub model: &'a ModelId,
    /// A raw prompt, or text already delivered that the place must continue.
    pub needs_continuation: bool,
    /// Images: only a place whose copy of the model sees them.
    pub needs_vision: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice<Id> {
    /// Run it there now (or, for this node, in its queue).
    Run(Id),
    /// Candidates have the model but none has a free slot: wait for one.
    Wait,
    /// No candidate has the model.
    Nobody,
}

/// Decode tokens a request is costed at: its length is not known when it is placed.
const NOMINAL_TOKENS: f64 = 128.0;
/// What a network hop adds, in seconds.
const HOP_S: f64 = 0.02;
/// What a prompt cache that holds the conversation saves, in decode tokens' time: half an
/// answer, so another place takes a conversation only when it is twice as fast. Speeds measured
/// from a few answers differ by a fifth or more between two identical nodes, and a conversation
/// moved for that noise loses its cache for nothing; a GPU node five times faster still wins.
const AFFINITY_TOKENS: f64 = 64.0;

/// When `c` would finish the request, in seconds from now, at `speed` tokens/s for a stream
/// there (its own when measured, else `unmeasured`).
fn finish_s<Id>(c: &Candidate<Id>, unmeasured: f64) -> f64 {
    let speed = if c.tokens_per_s > 0.0 && c.tokens_per_s.is_finite() {
        c.tokens_per_s
    } else {
        unmeasured
    };
    let one = NOMINAL_TOKENS / speed;
    let queued = c.queue_depth as f64 + if c.free_slots > 0 { 0.0 } else { 1.0 };
    let hop = if c.local { 0.0 } else { HOP_S };
    let saved = if c.preferred {
        AFFINITY_TOKENS / speed
    } else {
        0.0
    };
    queued * one + one + hop - saved
}

pub fn place<Id: Copy>(ask: Ask<'_>, candidates: &[Candidate<Id>]) -> Choice<Id> {
    let eligible: Vec<&Candidate<Id>> = candidates
        .iter()
        .filter(|c| c.has(ask.model) && (c.continues || !ask.needs_continuation))
        .filter(|c| c.vision || !ask.needs_vision)
        .collect();
    if eligible.is_empty() {
        return Choice::Nobody;
    }
    let any_fit = eligible.iter().any(|c| c.fits());
    let pool: Vec<&Candidate<Id>> = eligible
        .into_iter()
        .filter(|c| c.fits() || !any_fit)
        .collect();
    // A speed not measured yet: the slowest measured (1 token/s when none is, so that the
    // queues and the hop still decide).
    let unmeasured = pool
        .iter()
        .map(|c| c.tokens_per_s)
        .filter(|s| *s > 0.0 && s.is_finite())
        .min_by(f64::total_cmp)
        .unwrap_or(1.0);
    let best = pool.iter().enumerate().min_by(|(ia, a), (ib, b)| {
        finish_s(a, unmeasured)
            .total_cmp(&finish_s(b, unmeasured))
            .then(b.local.cmp(&a.local))
            .then(b.free_slots.cmp(&a.free_slots))
            .then(ia.cmp(ib))
    });
    match best {
        Some((_, c)) if c.free_slots > 0 || c.local => Choice::Run(c.id),
        _ => Choice::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(name: &str) -> ModelId {
        ModelId::from_file_name(name)
    }

    fn cand(id: u32, local: bool, free: usize) -> Candidate<u32> {
        Candidate {
            id,
            models: vec![m("a")],
            free_slots: free,
            queue_depth: 0,
            throttle: 100,
            thermal: ThermalLevel::Nominal,
            tokens_per_s: 0.0,
            local,
            continues: true,
            preferred: false,
            vision: false,
        }
    }

    fn ask(model: &ModelId) -> Ask<'_> {
        Ask {
            model,
            needs_continuation: false,
            needs_vision: false,
        }
    }

    #[test]
    fn the_rules_in_order() {
        let a = m("a");
        let b = m("b");
        let local = cand(0, true, 1);
        let w1 = cand(1, false, 2);
        let hot = Candidate {
            thermal: ThermalLevel::Serious,
            free_slots: 8,
            ..cand(2, false, 8)
        };
        let paused_local = Candidate {
            throttle: 0,
            ..cand(0, true, 4)
        };
        let fast = Candidate {
            tokens_per_s: 90.0,
            ..cand(3, false, 1)
        };
        let slow = Candidate {
            tokens_per_s: 40.0,
            ..cand(4, false, 3)
        };
        let queued = Candidate {
            queue_depth: 2,
            tokens_per_s: 200.0,
            ..cand(5, false, 1)
        };
        let reference = Candidate {
            continues: false,
            ..cand(6, false, 4)
        };
        let no_b = Candidate {
            models: vec![b.clone()],
            ..cand(7, false, 4)
        };
        // (what it shows, the candidates, needs a continuation, the choice)
        type Case<'a> = (&'a str, Vec<Candidate<u32>>, bool, Choice<u32>);
        let table: Vec<Case<'_>> = vec![
            ("nobody has it", vec![no_b.clone()], false, Choice::Nobody),
            (
                "local with a slot first",
                vec![w1.clone(), local.clone()],
                false,
                Choice::Run(0),
            ),
            (
                "a hot worker never while another fits",
                vec![hot.clone(), w1.clone()],
                false,
                Choice::Run(1),
            ),
            (
                "a hot one is better than nothing",
                vec![hot.clone()],
                false,
                Choice::Run(2),
            ),
            (
                "a paused local engine yields to a worker",
                vec![paused_local.clone(), w1.clone()],
                false,
                Choice::Run(1),
            ),
            (
                "faster among equal queues",
                vec![slow.clone(), fast.clone()],
                false,
                Choice::Run(3),
            ),
            (
                "a queue counts at its place's speed: fast enough, it still wins",
                vec![queued.clone(), slow.clone()],
                false,
                Choice::Run(5),
            ),
            (
                "a queue counts at its place's speed: not fast enough",
                vec![
                    Candidate {
                        tokens_per_s: 60.0,
                        ..queued.clone()
                    },
                    slow.clone(),
                ],
                false,
                Choice::Run(4),
            ),
            (
                "a free slot on a node three times faster beats a free slot here",
                vec![
                    Candidate {
                        tokens_per_s: 30.0,
                        ..local.clone()
                    },
                    Candidate {
                        tokens_per_s: 90.0,
                        ..w1.clone()
                    },
                ],
                false,
                Choice::Run(1),
            ),
            (
                "a node barely faster does not pay for the hop",
                vec![
                    Candidate {
                        tokens_per_s: 100.0,
                        ..local.clone()
                    },
                    Candidate {
                        tokens_per_s: 100.5,
                        ..w1.clone()
                    },
                ],
                false,
                Choice::Run(0),
            ),
            (
                "a speed not measured yet counts as the slowest measured",
                vec![
                    local.clone(),
                    Candidate {
                        tokens_per_s: 50.0,
                        ..w1.clone()
                    },
                ],
                false,
                Choice::Run(0),
            ),
            (
                "the fast node's queue ends sooner than a slot here: wait for it",
                vec![
                    Candidate {
                        tokens_per_s: 30.0,
                        ..local.clone()
                    },
                    Candidate {
                        tokens_per_s: 300.0,
                        queue_depth: 3,
                        ..cand(11, false, 0)
                    },
                ],
                false,
                Choice::Wait,
            ),
            (
                "a hot fast node is still skipped",
                vec![
                    Candidate {
                        tokens_per_s: 30.0,
                        ..local.clone()
                    },
                    Candidate {
                        tokens_per_s: 300.0,
                        thermal: ThermalLevel::Serious,
                        ..cand(11, false, 4)
                    },
                ],
                false,
                Choice::Run(0),
            ),
            (
                "a paused fast node is still skipped",
                vec![
                    Candidate {
                        tokens_per_s: 30.0,
                        ..local.clone()
                    },
                    Candidate {
                        tokens_per_s: 300.0,
                        throttle: 0,
                        ..cand(11, false, 4)
                    },
                ],
                false,
                Choice::Run(0),
            ),
            (
                "the previous turn's place, unless a node much faster finishes first anyway",
                vec![
                    Candidate {
                        tokens_per_s: 90.0,
                        ..local.clone()
                    },
                    Candidate {
                        preferred: true,
                        tokens_per_s: 30.0,
                        ..cand(10, false, 1)
                    },
                ],
                false,
                Choice::Run(0),
            ),
            (
                "the previous turn's place, though another measured 1.6 times as fast",
                vec![
                    Candidate {
                        tokens_per_s: 80.0,
                        ..cand(9, false, 1)
                    },
                    Candidate {
                        preferred: true,
                        tokens_per_s: 50.0,
                        ..cand(10, false, 1)
                    },
                ],
                false,
                Choice::Run(10),
            ),
            (
                "more free slots break a tie",
                vec![cand(8, false, 1), cand(9, false, 3)],
                false,
                Choice::Run(9),
            ),
            (
                "continuations need a place that continues",
                vec![reference.clone()],
                true,
                Choice::Nobody,
            ),
            (
                "a reference worker takes plain requests",
                vec![reference.clone()],
                false,
                Choice::Run(6),
            ),
            (
                "the previous turn's place before this node",
                vec![
                    local.clone(),
                    Candidate {
                        preferred: true,
                        ..cand(10, false, 1)
                    },
                ],
                false,
                Choice::Run(10),
            ),
            (
                "not when it is busier than another with room",
                vec![
                    w1.clone(),
                    Candidate {
                        preferred: true,
                        queue_depth: 1,
                        ..cand(10, false, 1)
                    },
                ],
                false,
                Choice::Run(1),
            ),
            (
                "nor when it has no free slot",
                vec![
                    local.clone(),
                    Candidate {
                        preferred: true,
                        ..cand(10, false, 0)
                    },
                ],
                false,
                Choice::Run(0),
            ),
            (
                "nor when it is hot",
                vec![
                    w1.clone(),
                    Candidate {
                        preferred: true,
                        thermal: ThermalLevel::Critical,
                        ..cand(10, false, 4)
                    },
                ],
                false,
                Choice::Run(1),
            ),
            (
                "full workers: wait",
                vec![cand(1, false, 0), cand(2, false, 0)],
                false,
                Choice::Wait,
            ),
            (
                "full everywhere: this node's queue",
                vec![cand(1, false, 0), cand(0, true, 0)],
                false,
                Choice::Run(0),
            ),
            (
                "full everywhere, a longer queue here: wait for a slot",
                vec![
                    cand(1, false, 0),
                    Candidate {
                        queue_depth: 1,
                        ..cand(0, true, 0)
                    },
                ],
                false,
                Choice::Wait,
            ),
        ];
        for (name, cands, cont, want) in table {
            let got = place(
                Ask {
                    model: &a,
                    needs_continuation: cont,
                    needs_vision: false,
                },
                &cands,
            );
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(place(ask(&b), &[no_b]), Choice::Run(7));
        // Images go only where the model sees them, however busy the others are.
        let seeing = Candidate {
            vision: true,
            queue_depth: 3,
            ..cand(8, false, 0)
        };
        let images = Ask {
            model: &a,
            needs_continuation: false,
            needs_vision: true,
        };
        assert_eq!(
            place(images, &[local.clone(), w1.clone(), seeing]),
            Choice::Wait
        );
        assert_eq!(place(images, &[local, w1]), Choice::Nobody);
    }

    fn arb_candidate() -> impl Strategy<Value = Candidate<u32>> {
        (
            0u32..8,
            prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]), 0..3),
            0usize..4,
            0usize..4,
            prop::sample::select(vec![0u8, 25, 75, 100]),
            prop::sample::select(vec![
                ThermalLevel::Nominal,
                ThermalLevel::Fair,
                ThermalLevel::Serious,
                ThermalLevel::Critical,
            ]),
            0.0f64..200.0,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(
                    id,
                    models,
                    free_slots,
                    queue_depth,
                    throttle,
                    thermal,
                    tps,
                    local,
                    continues,
                    preferred,
                )| {
                    Candidate {
                        id,
                        models: models.into_iter().map(m).collect(),
                        free_slots,
                        queue_depth,
                        throttle,
                        thermal,
                        tokens_per_s: tps,
                        local,
                        continues,
                        preferred,
                        vision: false,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn never_a_place_without_the_model_nor_a_paused_or_hot_one_while_one_fits(
            cands in prop::collection::vec(arb_candidate(), 0..8),
            model in prop::sample::select(vec!["a", "b", "c"]),
            needs_continuation in any::<bool>(),
        ) {
            let model = m(model);
            let choice = place(Ask { model: &model, needs_continuation, needs_vision: false }, &cands);
            let eligible: Vec<&Candidate<u32>> = cands
                .iter()
                .filter(|c| c.has(&model) && (c.continues || !needs_continuation))
                .collect();
            match choice {
                Choice::Nobody => prop_assert!(eligible.is_empty()),
                Choice::Wait => {
                    prop_assert!(!eligible.is_empty());
                    // What is expected to finish first (among those that fit) is elsewhere,
                    // and busy now.
                    let any_fit = eligible.iter().any(|c| c.fits());
                    let pool: Vec<&&Candidate<u32>> =
                        eligible.iter().filter(|c| c.fits() || !any_fit).collect();
                    let unmeasured = pool
                        .iter()
                        .map(|c| c.tokens_per_s)
                        .filter(|s| *s > 0.0)
                        .min_by(f64::total_cmp)
                        .unwrap_or(1.0);
                    let soonest = pool
                        .iter()
                        .map(|c| finish_s(c, unmeasured))
                        .min_by(f64::total_cmp)
                        .unwrap();
                    prop_assert!(pool
                        .iter()
                        .filter(|c| finish_s(c, unmeasured) <= soonest + 1e-9)
                        .any(|c| c.free_slots == 0 && !c.local));
                }
                Choice::Run(id) => {
                    // Some eligible candidate with that id; ids may repeat, so look for one
                    // that justifies the choice.
                    let chosen: Vec<&&Candidate<u32>> = eligible.iter().filter(|c| c.id == id).collect();
                    prop_assert!(!chosen.is_empty(), "chose {id} without the model");
                    let any_fit = eligible.iter().any(|c| c.fits());
                    if any_fit {
                        prop_assert!(chosen.iter().any(|c| c.fits()), "chose a paused or hot {id}");
                    }
                    // It runs now or in this node's queue, and nothing that fits is expected
                    // to finish before it.
                    prop_assert!(chosen.iter().any(|c| c.free_slots > 0 || c.local));
                    let pool: Vec<&&Candidate<u32>> =
                        eligible.iter().filter(|c| c.fits() || !any_fit).collect();
                    let unmeasured = pool
                        .iter()
                        .map(|c| c.tokens_per_s)
                        .filter(|s| *s > 0.0)
                        .min_by(f64::total_cmp)
                        .unwrap_or(1.0);
                    let soonest = pool
                        .iter()
                        .map(|c| finish_s(c, unmeasured))
                        .min_by(f64::total_cmp)
                        .unwrap();
                    prop_assert!(
                        chosen.iter().any(|c| finish_s(c, unmeasured) <= soonest + 1e-9),
                        "chose {id}, which is not expected to finish first"
                    );
                }
            }
        }
    }
}
