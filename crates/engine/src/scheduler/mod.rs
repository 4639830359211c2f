//! The engine thread: it owns the llama.cpp model, context and batch, and runs continuous
//! batching over `slots` sequences sharing one KV pool (`pool`) — each step is one
//! `llama_decode` holding the next token of every generating slot plus a bounded chunk of
//! pending prompt prefill — then samples, turns tokens into text, and sends events. Nothing
//! here parses JSON, renders templates or takes a lock on the per-token path.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hearth_protocol::{FinishReason, RequestId, SamplingParams, Usage};
use llama_cpp_2::context::session::SeqState;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::cache_owner::CacheOwner;
use crate::commands::{Command, Courier, Outbox, Submission};
use crate::cpu_share::Governor;
use crate::embedder::Embedder;
use crate::engine_loop;
use crate::engine_loop::{stop_message, Shared};
use crate::events::{
    Done, Event, Failure, FailureKind, Timing, TokenCandidate, TokenEvent, TokenLogprobs,
};
use crate::media::{MediaChunk, Projector};
use crate::omp;
use crate::sampling::{build_sampler, Sampler};
use crate::text::{StopMatcher, StopScan};
use hearth_protocol::utf8::Utf8Stream;

mod control;
mod disk_cache;
mod draft;
mod images;
mod pool;
mod prompt_cache;
mod speculate;
mod start;
pub(crate) use start::{context_for, run};

/// Delete `owner`'s prompt cache files in `--cache-disk` (`root`), every model's.
pub fn forget_on_disk(root: &std::path::Path, owner: CacheOwner) {
    disk_cache::forget_owner(root, owner);
}

use prompt_cache::PromptCache;

/// The request a slot is working on.
struct Slot {
    id: RequestId,
    seq: i32,
    /// Whose prompt cache it reads and adds to.
    owner: CacheOwner,
    prompt: Vec<LlamaToken>,
    /// Prompt tokens already in the KV cache.
    prefilled: usize,
    /// Prompt tokens whose KV cache a previous tenant of this sequence left (not prefilled).
    reused: usize,
    /// Tokens of this sequence in the KV cache (the next one's position is `pos(n_past)`).
    n_past: i32,
    /// Sampled but not yet decoded.
    pending: Option<LlamaToken>,
    /// Set aside while the pool was full: its sequence holds nothing until it resumes.
    parked: bool,
    /// Parked: how many of its prompt and answer tokens it had in the KV cache.
    park_len: usize,
    /// Resumed without its whole sequence in the prompt cache: the prompt and answer tokens
    /// to decode again before its pending token (`prefilled` counts them then).
    replay: Vec<LlamaToken>,
    /// The prompt's images, in order: each evaluated alone when the prefill reaches it.
    media: Vec<MediaChunk>,
    params: SamplingParams,
    /// Guessing ahead for this request, and what it has guessed.
    spec: speculate::SlotSpec,
    fixed_seed: Option<u32>,
    sampler: Sampler,
    generated: Vec<LlamaToken>,
    utf8: Utf8Stream,
    stop: StopMatcher,
    out: Outbox,
    paused: bool,
    batch_idx: Option<i32>,
    submitted: Instant,
    started: Instant,
    first_token: Option<Instant>,
    last_token: Instant,
}

struct Scheduler<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    slots: Vec<Option<Slot>>,
    queue: VecDeque<Box<Submission>>,
    /// Finished generations whose last events still wait for their reader.
    draining: Vec<Outbox>,
    /// End-of-generation tokens, for `ignore_eos`.
    eog: Vec<LlamaToken>,
    n_batch: usize,
    prefill_chunk: usize,
    /// Cells of the KV pool the slots share: the most tokens one request may hold.
    context: usize,
    /// The model's sliding attention window (0: none).
    n_swa: u32,
    shared: Arc<Shared>,
    piece: Vec<u8>,
    prefill_cursor: usize,
    /// Per free sequence, the tokens whose KV the last tenant left there: a new prompt that
    /// starts the same way skips prefilling that part (llama-server's `cache_prompt`).
    cached: Vec<Vec<LlamaToken>>,
    /// Whose each idle cache is: only its owner's requests reuse it.
    cached_owner: Vec<CacheOwner>,
    /// Owners forgotten ([`Command::Forget`]): nothing of theirs is kept again, from a request
    /// still running or an idle sequence at the stop.
    forgotten: std::collections::HashSet<CacheOwner>,
    /// When each sequence's idle cache was last used (`clock`'s value).
    cached_used: Vec<u64>,
    clock: u64,
    /// Sequences the pool gave up, in host memory, and on disk (`--cache-disk`).
    cache: PromptCache<SeqState>,
    disk: Option<disk_cache::DiskCache>,
    /// Hands each step's events to their readers at once.
    courier: Courier,
    /// How many of the context's threads a decode may use (fewer while other programs keep
    /// cores busy).
    governor: Governor,
    /// Embedding requests, computed in their own context between generation steps.
    embedder: Embedder<'m>,
    /// The model is wholly on a GPU, where `llama_decode` returns once the work is queued:
    /// each step's events go out while the GPU computes the next one (waking the runtime that
    /// takes them costs the engine thread tens of microseconds, a few percent of a token a GPU
    /// decodes in a millisecond), not between two decodes. On the CPU, decoding is done when
    /// `llama_decode` returns, and events go out as soon as they are made.
    overlap: bool,
    /// Speculation: the node's setting, what steps cost here, how often guesses held.
    spec: speculate::EngineSpec,
    /// The draft model that guesses ahead (`--draft-model`), when it shares this vocabulary.
    draft: Option<draft::DraftModel<'m>>,
    /// The model's projector, which evaluates prompts' images; and which slot's image goes
    /// next.
    media: Option<Arc<Projector>>,
    media_cursor: usize,
}

/// What [`Scheduler::fill_batch`] put in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filled {
    Nothing,
    /// Only the next token of generating slots.
    Tokens,
    /// Prompt tokens too.
    Prompts,
}

fn fresh_seed() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(0);
    nanos.wrapping_mul(0x9E37_79B9)
}

impl engine_loop::Backend for Scheduler<'_> {
    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn courier(&mut self) -> &mut Courier {
        &mut self.courier
    }

    fn handle(&mut self, command: Command) {
        Scheduler::handle(self, command);
    }

    fn has_runnable_work(&self) -> bool {
        Scheduler::has_runnable_work(self)
    }

    fn has_stalled_work(&self) -> bool {
        Scheduler::has_stalled_work(self)
    }

    fn step(&mut self) -> bool {
        Scheduler::step(self)
    }

    fn housekeeping(&mut self) {
        Scheduler::housekeeping(self);
    }
}

impl Scheduler<'_> {
    fn has_runnable_work(&self) -> bool {
        self.embedder.has_work()
            || self.could_admit()
            || self.could_resume()
            || self
                .slots
                .iter()
                .flatten()
                .any(|s| !s.paused && !s.parked && s.out.pending.is_empty())
    }

    fn has_stalled_work(&self) -> bool {
        !self.draining.is_empty()
            || self
                .slots
                .iter()
                .flatten()
                .any(|s| !s.out.pending.is_empty())
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Submit(s) => self.queue.push_back(s),
            Command::Control { id, op } => self.control(id, op),
            Command::Embed(job) => self.embedder.push(*job),
            Command::Forget(owner) => self.forget(owner),
            Command::Wake => {}
        }
    }

    /// Free abandoned work and hand waiting events to their readers.
    fn housekeeping(&mut self) {
        self.drop_abandoned();
        self.draining.retain_mut(|o| !o.flush());
        for slot in self.slots.iter_mut().flatten() {
            slot.out.flush();
        }
    }

    /// One scheduling step: admit, build one batch, decode it, sample. False when there
    /// was nothing to decode.
    fn step(&mut self) -> bool {
        self.housekeeping();
        self.admit();
        self.make_room();
        // An image the prefill has reached: evaluated alone, one a step.
        let imaged = self.eval_image();
        let filled = self.fill_batch();
        if filled == Filled::Nothing {
            self.courier.deliver();
            if imaged {
                return true;
            }
            // Nothing generates: embeddings may take the whole engine.
            return self.embedder.step(false, &mut self.governor);
        }
        if !self.overlap || filled == Filled::Prompts {
            // Events of the commands just handled and of readers that caught up go out now,
            // not after a decode that may be a long prefill chunk (on a GPU too: a new batch
            // shape holds the decode up while the backend builds its kernels).
            self.courier.deliver();
        }
        let threads = self.governor.limit(Instant::now());
        self.shared.threads.store(threads, Ordering::Relaxed);
        self.shared
            .cpu_others
            .store(self.governor.others().to_bits(), Ordering::Relaxed);
        let started = Instant::now();
        let decoded = if threads < self.governor.configured() {
            omp::with_thread_limit(threads, || self.ctx.decode(&mut self.batch))
        } else {
            self.ctx.decode(&mut self.batch)
        };
        if self.overlap {
            // The GPU computes: the last step's events and the commands' go out meanwhile.
            self.courier.deliver();
        }
        let now = Instant::now();
        self.governor.decoded(now);
        if !self.overlap {
            self.embedder.earn(now - started);
        }
        if let Err(e) = decoded {
            let message = format!("llama.cpp decode failed: {e}");
            tracing::error!(%message);
            for i in 0..self.slots.len() {
                if self.slots[i]
                    .as_ref()
                    .is_some_and(|s| s.batch_idx.is_some())
                {
                    self.fail(i, FailureKind::Decode, message.clone());
                }
            }
            self.courier.deliver();
            return true;
        }
        let mut yielded = 0;
        for i in 0..self.slots.len() {
            let Some(idx) = self.slots[i].as_mut().and_then(|s| s.batch_idx.take()) else {
                continue;
            };
            yielded += self.take_tokens(i, idx);
        }
        self.spec.stepped(started.elapsed(), yielded, &self.shared);
        if !self.overlap {
            self.courier.deliver();
        } else {
            // On a GPU the decode ended when its logits were read.
            self.embedder.earn(started.elapsed());
            if self.embedder.has_work() {
                // Embeddings run now: the tokens just made go out first, not after them.
                self.courier.deliver();
            }
        }
        // A share of the time decoding took.
        self.embedder.step(true, &mut self.governor);
        true
    }

    /// Free slots whose reader went away, and queued requests nobody waits for.
    fn drop_abandoned(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(|s| s.out.closed()) {
                let slot = self.slots[i].take().expect("slot present");
                tracing::debug!(id = %slot.id, "reader gone; slot freed");
                self.release(slot);
            }
        }
        let before = self.queue.len();
        self.queue.retain(|s| !s.events.is_closed());
        let dropped = before - self.queue.len();
        if dropped > 0 {
            self.shared.admission.release(dropped);
        }
    }

    /// Give waiting requests free slots, in order, while the pool has room for their prompts.
    fn admit(&mut self) {
        while let Some(next) = self.queue.front() {
            if self.slots.iter().all(Option::is_some) {
                return;
            }
            let seq = self.pick_seq(next.owner, &next.tokens);
            let tokens = std::mem::take(&mut self.queue[0].tokens);
            let fits = self.room_for(seq, &tokens);
            self.queue[0].tokens = tokens;
            if !fits {
                return;
            }
            let s = self.queue.pop_front().expect("queue is not empty");
            let seed = s.params.seed.unwrap_or_else(fresh_seed);
            let sampler = match build_sampler(self.model, &s.params, seed, &self.eog) {
                Ok(sampler) => sampler,
                Err(e) => {
                    let mut out = Outbox::new(s.events, s.stalled, &self.courier);
                    out.send(Event::Error(Failure {
                        kind: FailureKind::Decode,
                        message: e.to_string(),
                    }));
                    self.shared.admission.release(1);
                    self.retire(out);
                    continue;
                }
            };
            // Never into an image: `trim` cuts before one it would split.
            let reused = self.take_seq(seq, s.owner, &s.tokens, &s.media);
            // Guesses come from the prompt's tokens, which images' stand-in ids are not.
            let speculation = if s.media.is_empty() {
                s.params.speculation.unwrap_or(self.spec.mode)
            } else {
                hearth_protocol::Speculation::None
            };
            let now = Instant::now();
            self.slots[seq] = Some(Slot {
                id: s.id,
                seq: seq as i32,
                owner: s.owner,
                prefilled: reused,
                n_past: reused as i32,
                reused,
                pending: None,
                parked: false,
                park_len: 0,
                replay: Vec::new(),
                media: s.media,
                spec: speculate::SlotSpec::new(speculation),
                sampler,
                fixed_seed: s.params.seed,
                stop: StopMatcher::new(s.params.stop.clone()),
                params: s.params,
                prompt: s.tokens,
                generated: Vec::new(),
                utf8: Utf8Stream::default(),
                out: Outbox::new(s.events, s.stalled, &self.courier),
                paused: s.paused,
                batch_idx: None,
                submitted: s.submitted,
                started: now,
                first_token: None,
                last_token: now,
            });
            self.shared.active.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Put every generating slot's next token in the batch, then prompt chunks with what room
    /// is left, and say what went in.
    fn fill_batch(&mut self) -> Filled {
        self.batch.clear();
        let mut prompts = false;
        let mut used = 0usize;
        let context = self.context as i32;
        for i in 0..self.slots.len() {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            if !slot.generating() {
                continue;
            }
            let Some(token) = slot.pending else {
                continue;
            };
            if slot.n_past >= context {
                // No room for even one more token in the whole pool.
                self.finish(i, FinishReason::Length, true);
                continue;
            }
            let pos = slot.pos(slot.n_past as usize);
            if self.batch.add(token, pos, &[slot.seq], true).is_err() {
                break;
            }
            slot.batch_idx = Some(used as i32);
            used += 1;
        }
        used = self.add_guesses(used);
        let answer_tokens = used;
        let mut budget = if used > 0 {
            self.prefill_chunk.min(self.n_batch - used)
        } else {
            self.n_batch
        };
        let n = self.slots.len();
        for k in 0..n {
            if budget == 0 {
                break;
            }
            let i = (self.prefill_cursor + k) % n;
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            // A resumed request decodes its replay, then its pending token; no logits before.
            let replaying = !slot.replay.is_empty();
            let feed = if replaying {
                &slot.replay
            } else {
                &slot.prompt
            };
            if slot.paused || slot.parked || slot.prefilled >= feed.len() {
                continue;
            }
            // Text up to the next image, which `eval_image` takes alone.
            let end = match slot.next_image() {
                Some(m) if m.at <= slot.prefilled => continue,
                Some(m) => m.at,
                None => feed.len(),
            };
            let take = budget.min(end - slot.prefilled);
            let last = slot.prefilled + take == feed.len();
            for j in 0..take {
                let index = slot.prefilled + j;
                let logits = last && j + 1 == take && !replaying;
                let pos = images::position(&slot.media, index) as i32;
                if self
                    .batch
                    .add(feed[index], pos, &[slot.seq], logits)
                    .is_err()
                {
                    break;
                }
                if logits {
                    slot.batch_idx = Some(used as i32);
                }
                used += 1;
            }
            slot.prefilled += take;
            slot.n_past = slot.prefilled as i32;
            if replaying && last {
                slot.replay.clear();
                slot.prefilled = slot.prompt.len();
            }
            prompts = true;
            budget -= take;
            if !last {
                // Give the next prompt a turn first next time.
                self.prefill_cursor = (i + 1) % n;
            }
        }
        self.spec.filled = (answer_tokens, used - answer_tokens);
        match (used, prompts) {
            (0, _) => Filled::Nothing,
            (_, false) => Filled::Tokens,
            (_, true) => Filled::Prompts,
        }
    }

    fn on_token(&mut self, i: usize, token: LlamaToken, lp: Option<(f32, Vec<(usize, f32)>)>) {
        let vocab = self.model.vocab();
        let context = self.context as i32;
        let slot = self.slots[i].as_mut().expect("slot present");
        // The token that produced these logits is now in the KV cache.
        if slot.pending.take().is_some() {
            slot.n_past += 1;
        }
        let now = Instant::now();
        let since_prev = now - slot.last_token;
        slot.last_token = now;
        if slot.first_token.is_none() {
            slot.first_token = Some(now);
        }
        if vocab.is_eog(token) {
            self.finish(i, FinishReason::Stop, true);
            return;
        }
        slot.generated.push(token);
        self.shared.tokens_generated.fetch_add(1, Ordering::Relaxed);
        self.piece.clear();
        vocab.token_to_piece_into(token, &mut self.piece, false, None);
        let mut text = String::with_capacity(self.piece.len());
        slot.utf8.push_into(&self.piece, &mut text);
        let (text, stopped) = match slot.stop.push(text) {
            StopScan::Release(t) => (t, false),
            StopScan::Stopped(t) => (t, true),
        };
        let logprobs = lp.map(|(chosen, top)| TokenLogprobs {
            token: self.candidate(token.0, chosen),
            top: top
                .into_iter()
                .map(|(id, l)| self.candidate(id as i32, l))
                .collect(),
        });
        let slot = self.slots[i].as_mut().expect("slot present");
        let at_max = slot
            .params
            .max_tokens
            .is_some_and(|m| slot.generated.len() >= m as usize);
        let ctx_full = slot.n_past >= context;
        let mut event = TokenEvent {
            text,
            id: Some(token.0),
            logprobs,
            elapsed: now - slot.submitted,
            since_prev,
        };
        if stopped {
            slot.out.send(Event::Token(event));
            self.finish(i, FinishReason::Stop, false);
        } else if at_max || ctx_full {
            let (tail, tail_stopped) = Self::final_text(slot);
            event.text.push_str(&tail);
            slot.out.send(Event::Token(event));
            let reason = if tail_stopped {
                FinishReason::Stop
            } else {
                FinishReason::Length
            };
            self.finish(i, reason, false);
        } else {
            slot.out.send(Event::Token(event));
            slot.pending = Some(token);
        }
    }

    fn candidate(&self, id: i32, logprob: f32) -> TokenCandidate {
        let mut bytes = Vec::new();
        self.model
            .vocab()
            .token_to_piece_into(LlamaToken::new(id), &mut bytes, false, None);
        TokenCandidate {
            id,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
            logprob,
        }
    }

    /// Everything still held back (an incomplete character, a possible stop-string start).
    fn final_text(slot: &mut Slot) -> (String, bool) {
        let mut rest = String::new();
        slot.utf8.finish_into(&mut rest);
        match slot.stop.push(rest) {
            StopScan::Release(mut t) => {
                t.push_str(&slot.stop.flush());
                (t, false)
            }
            StopScan::Stopped(t) => (t, true),
        }
    }

    fn emit_tail(&mut self, i: usize, text: String) {
        if text.is_empty() {
            return;
        }
        let slot = self.slots[i].as_mut().expect("slot present");
        let now = Instant::now();
        slot.out.send(Event::Token(TokenEvent {
            text,
            id: None,
            logprobs: None,
            elapsed: now - slot.submitted,
            since_prev: now - slot.last_token,
        }));
    }

    /// End a generation: optionally release held-back text, send `Done`, free the slot.
    fn finish(&mut self, i: usize, reason: FinishReason, flush: bool) {
        let mut reason = reason;
        if flush {
            let slot = self.slots[i].as_mut().expect("slot present");
            let (tail, stopped) = Self::final_text(slot);
            if stopped && reason != FinishReason::Cancelled {
                reason = FinishReason::Stop;
            }
            self.emit_tail(i, tail);
        }
        let mut slot = self.slots[i].take().expect("slot present");
        let now = Instant::now();
        let done = Done {
            reason,
            usage: Usage::new(slot.prompt.len() as u32, slot.generated.len() as u32),
            timing: Timing {
                queued: slot.started - slot.submitted,
                prefill: slot
                    .first_token
                    .map_or(Duration::ZERO, |t| t - slot.started),
                first_token: slot.first_token.map(|t| t - slot.submitted),
                total: now - slot.submitted,
                cached_tokens: slot.reused as u32,
            },
            stop_sequence: (reason == FinishReason::Stop)
                .then(|| slot.stop.matched().map(str::to_owned))
                .flatten(),
        };
        // Counted before the event goes out: whoever sees `Done` sees it counted.
        self.shared
            .requests_finished
            .fetch_add(1, Ordering::Relaxed);
        if let Some(speed) = done.decode_speed() {
            self.shared.record_decode(speed);
        }
        slot.out.send(Event::Done(done));
        self.release(slot);
    }

    fn fail(&mut self, i: usize, kind: FailureKind, message: String) {
        let mut slot = self.slots[i].take().expect("slot present");
        slot.out.send(Event::Error(Failure { kind, message }));
        self.release(slot);
    }

    /// Give a slot back: remember which tokens its KV cache holds (the next tenant may share
    /// a prefix with them), keep its undelivered events draining.
    fn release(&mut self, slot: Slot) {
        let seq = slot.seq as usize;
        // No more than the cache holds (positions): a failed decode leaves out the tokens it
        // was given.
        let held = (self.ctx.kv_cache_seq_pos_max(seq as i32) + 1).max(0) as usize;
        let mut n_past = slot.n_past.max(0) as usize;
        if held < images::position(&slot.media, n_past) {
            n_past = images::tokens_below(&slot.media, held);
        }
        let end = images::position(&slot.media, n_past);
        // Guesses past its end that had no turn to leave (or half an image).
        if held > end
            && self
                .ctx
                .kv_cache_seq_rm(seq as i32, Some(end as u32), None)
                .is_err()
        {
            self.clear(seq);
            n_past = 0;
        }
        self.cached[seq] = slot.kv_tokens(n_past);
        self.cached_owner[seq] = slot.owner;
        self.clock += 1;
        self.cached_used[seq] = self.clock;
        self.publish_cache();
        self.shared.active.fetch_sub(1, Ordering::Relaxed);
        self.shared.admission.release(1);
        self.retire(slot.out);
    }

    fn retire(&mut self, mut out: Outbox) {
        if !out.flush() {
            self.draining.push(out);
        }
    }

    fn shutdown(&mut self, reason: FailureKind) {
        let message = stop_message(reason);
        for i in 0..self.slots.len() {
            if self.slots[i].is_some() {
                self.fail(i, reason, message.into());
            }
        }
        while let Some(s) = self.queue.pop_front() {
            let _ = s.events.try_send(Event::Error(Failure {
                kind: reason,
                message: message.into(),
            }));
            self.shared.admission.release(1);
        }
        self.keep_on_disk();
    }
}
