//! The controls a running or queued request takes (stop, pause, resume, modify, regenerate),
//! applied on the engine thread between steps.

use std::time::Instant;

use hearth_protocol::{FinishReason, RequestId, Usage};

use super::{fresh_seed, Scheduler};
use crate::commands::{ControlOp, Outbox};
use crate::events::{Done, Event, FailureKind, Timing, TokenEvent};
use crate::sampling::{build_sampler, without_grammar};
use crate::text::StopScan;

impl Scheduler<'_> {
    pub(super) fn control(&mut self, id: RequestId, op: ControlOp) {
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.id == id))
        {
            let slot = self.slots[i].as_mut().expect("slot just found");
            match op {
                ControlOp::Stop => self.finish(i, FinishReason::Cancelled, true),
                ControlOp::Pause => {
                    slot.paused = true;
                    slot.out.send(Event::Paused);
                }
                ControlOp::Resume => {
                    slot.paused = false;
                    slot.out.send(Event::Resumed);
                }
                ControlOp::Modify(patch) => {
                    slot.out.send(Event::Modified);
                    slot.params.apply(&patch);
                    if patch.seed.is_some() {
                        slot.fixed_seed = patch.seed;
                    }
                    let seed = slot.fixed_seed.unwrap_or_else(fresh_seed);
                    match build_sampler(self.model, &slot.params, seed, &self.eog) {
                        Ok(sampler) => slot.sampler = sampler,
                        Err(e) => return self.fail(i, FailureKind::Decode, e.to_string()),
                    }
                    // Penalties (and a grammar) must see the history they would have seen; a
                    // grammar that cannot follow it (it broke while drawing) is left out again.
                    if !slot.sampler.accept_many(slot.generated.iter()) {
                        slot.sampler = without_grammar(
                            self.model,
                            &slot.params,
                            seed,
                            &self.eog,
                            slot.generated.iter(),
                        );
                    }
                    if let Some(stops) = patch.stop {
                        match slot.stop.set_stops(stops) {
                            StopScan::Release(text) if !text.is_empty() => {
                                let now = Instant::now();
                                slot.out.send(Event::Token(TokenEvent {
                                    text,
                                    id: None,
                                    logprobs: None,
                                    elapsed: now - slot.submitted,
                                    since_prev: now - slot.last_token,
                                }));
                            }
                            StopScan::Release(_) => {}
                            StopScan::Stopped(text) => {
                                self.emit_tail(i, text);
                                self.finish(i, FinishReason::Stop, false);
                                return;
                            }
                        }
                    }
                    let slot = self.slots[i].as_ref().expect("slot present");
                    if slot
                        .params
                        .max_tokens
                        .is_some_and(|m| slot.generated.len() >= m as usize)
                    {
                        self.finish(i, FinishReason::Length, true);
                    }
                }
                ControlOp::Regenerate => self.restart(i),
            }
            return;
        }
        if let Some(q) = self.queue.iter().position(|s| s.id == id) {
            match op {
                ControlOp::Stop => {
                    let s = self.queue.remove(q).expect("queued request just found");
                    let now = Instant::now();
                    let mut out = Outbox::new(s.events, s.stalled, &self.courier);
                    out.send(Event::Done(Done {
                        reason: FinishReason::Cancelled,
                        usage: Usage::new(s.tokens.len() as u32, 0),
                        timing: Timing {
                            queued: now - s.submitted,
                            total: now - s.submitted,
                            ..Timing::default()
                        },
                        stop_sequence: None,
                    }));
                    self.retire(out);
                }
                ControlOp::Modify(patch) => {
                    let s = &mut self.queue[q];
                    s.params.apply(&patch);
                    let _ = s.events.try_send(Event::Modified);
                }
                ControlOp::Pause => {
                    let s = &mut self.queue[q];
                    s.paused = true;
                    let _ = s.events.try_send(Event::Paused);
                }
                ControlOp::Resume => {
                    let s = &mut self.queue[q];
                    s.paused = false;
                    let _ = s.events.try_send(Event::Resumed);
                }
                // Nothing generated yet: it starts from the prompt anyway.
                ControlOp::Regenerate => {
                    let _ = self.queue[q].events.try_send(Event::Restarted);
                }
            }
        }
    }

    /// `regenerate`: drop everything generated, keep the prompt's KV cache, and decode the
    /// last prompt token again to get fresh logits.
    fn restart(&mut self, i: usize) {
        let slot = self.slots[i].as_mut().expect("slot present");
        slot.out.send(Event::Restarted);
        let seed = slot.fixed_seed.unwrap_or_else(fresh_seed);
        match build_sampler(self.model, &slot.params, seed, &self.eog) {
            Ok(sampler) => slot.sampler = sampler,
            Err(e) => return self.fail(i, FailureKind::Decode, e.to_string()),
        }
        slot.generated.clear();
        slot.spec.restart();
        slot.utf8.reset();
        slot.stop.reset();
        slot.first_token = None;
        let now = Instant::now();
        slot.started = now;
        slot.last_token = now;
        let last = slot.prompt.len() - 1;
        if slot.parked {
            // It resumes from its prompt alone.
            slot.pending = None;
            slot.park_len = slot.park_len.min(last);
            return;
        }
        // Keep what of the prompt the sequence holds (but its last token, decoded again for
        // fresh logits), prefill the rest.
        let keep = if !slot.replay.is_empty() {
            // Replaying after a park: its first tokens are the prompt's.
            slot.prefilled.min(last)
        } else if slot.prefilled < slot.prompt.len() {
            // Still prefilling: nothing was generated yet.
            return;
        } else {
            last
        };
        slot.replay.clear();
        slot.pending = None;
        let seq = slot.seq as usize;
        let media = std::mem::take(&mut slot.media);
        // A model that cannot cut its cache there starts the prompt over.
        let kept = self.trim(seq, keep, &media);
        let slot = self.slots[i].as_mut().expect("slot present");
        slot.media = media;
        slot.prefilled = kept;
        slot.n_past = kept as i32;
    }
}
