//! The scripted engine: the same handle, commands, admission, controls and back-pressure
//! as the llama.cpp scheduler, but tokens come from a fixed word list instead of a model, as
//! fast as readers take them (or one step per `token_delay`). It exists to measure the doors
//! without the model in the way and for fault and timing tests; the model's real vocabulary
//! is still loaded so prompts are templated and tokenized for real.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_protocol::{FinishReason, RequestId, Usage};
use tokio::sync::watch;

use crate::commands::{Command, ControlOp, Courier, Outbox, Submission};
use crate::config::{EngineConfig, Script};
use crate::embedder::EmbedError;
use crate::engine_loop;
use crate::engine_loop::{final_state, stop_message, Shared};
use crate::events::{Done, Event, Failure, FailureKind, Timing, TokenEvent};
use crate::loader;
use crate::model::ModelState;

/// The words scripted tokens cycle through (ids are their index).
const WORDS: [&str; 8] = [
    " lorem", " ipsum", " dolor", " sit", " amet", ",", " hearth", ".",
];

struct Slot {
    id: RequestId,
    prompt_tokens: u32,
    generated: u32,
    max_tokens: u32,
    paused: bool,
    out: Outbox,
    submitted: Instant,
    started: Instant,
    first_token: Option<Instant>,
    last_token: Instant,
    /// Which of the script's rounds this request answers with.
    round: usize,
}

pub(crate) fn run(
    config: EngineConfig,
    script: Script,
    commands: Receiver<Command>,
    state: watch::Sender<ModelState>,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Handle>,
) {
    let plan = crate::offload::Plan::new();
    let no_context =
        |_: &crate::gguf::GgufInfo| llama_cpp_2::context::params::LlamaContextParams::default();
    let Ok(loaded) = loader::load(&config, &state, true, &plan, &no_context) else {
        return;
    };
    let slots = config.slots.max(1);
    let context = crate::scheduler::context_for(&config, loader::n_ctx_train(&loaded));
    state.send_replace(ModelState::Ready(loader::info(
        &loaded,
        &config,
        context,
        0,
        (None, None),
        (None, None),
    )));
    tracing::info!(model = %loaded.id, slots, "scripted engine ready");
    let mut engine = Scripted {
        script,
        context,
        slots: (0..slots).map(|_| None).collect(),
        queue: VecDeque::new(),
        draining: Vec::new(),
        shared,
        courier: Courier::new(runtime.as_ref()),
        started: 0,
    };
    engine_loop::serve(&mut engine, &commands);
    let reason = engine
        .shared
        .stop_reason()
        .unwrap_or(FailureKind::ShuttingDown);
    engine.shutdown(reason);
    engine.courier.close();
    state.send_replace(final_state(reason));
}

struct Scripted {
    script: Script,
    context: u32,
    slots: Vec<Option<Slot>>,
    queue: VecDeque<Box<Submission>>,
    draining: Vec<Outbox>,
    shared: Arc<Shared>,
    courier: Courier,
    /// Requests started so far (the next one's round).
    started: usize,
}

impl engine_loop::Backend for Scripted {
    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn courier(&mut self) -> &mut Courier {
        &mut self.courier
    }

    fn handle(&mut self, command: Command) {
        Scripted::handle(self, command);
    }

    fn has_runnable_work(&self) -> bool {
        Scripted::has_runnable_work(self)
    }

    fn has_stalled_work(&self) -> bool {
        Scripted::has_stalled_work(self)
    }

    fn step(&mut self) -> bool {
        Scripted::step(self)
    }

    fn housekeeping(&mut self) {
        self.draining.retain_mut(|o| !o.flush());
    }
}

impl Scripted {
    fn handle(&mut self, command: Command) {
        match command {
            Command::Submit(s) => self.queue.push_back(s),
            // No prompt cache here.
            Command::Wake | Command::Forget(_) => {}
            // Scripted words have no vectors behind them.
            Command::Embed(job) => {
                let _ = job.reply.send(Err(EmbedError::Unsupported(
                    "the scripted engine computes no embeddings".into(),
                )));
            }
            Command::Control { id, op } => {
                if let Some(i) = self
                    .slots
                    .iter()
                    .position(|s| s.as_ref().is_some_and(|s| s.id == id))
                {
                    let slot = self.slots[i].as_mut().expect("slot just found");
                    match op {
                        ControlOp::Stop => self.finish(i, FinishReason::Cancelled),
                        ControlOp::Pause => {
                            slot.paused = true;
                            slot.out.send(Event::Paused);
                        }
                        ControlOp::Resume => {
                            slot.paused = false;
                            slot.out.send(Event::Resumed);
                        }
                        ControlOp::Regenerate => {
                            slot.generated = 0;
                            slot.first_token = None;
                            slot.out.send(Event::Restarted);
                        }
                        ControlOp::Modify(patch) => {
                            slot.out.send(Event::Modified);
                            if let Some(m) = patch.max_tokens {
                                slot.max_tokens = m;
                            }
                        }
                    }
                } else if let Some(q) = self.queue.iter().position(|s| s.id == id) {
                    if let ControlOp::Stop = op {
                        let s = self.queue.remove(q).expect("queued request just found");
                        let _ = s.events.try_send(Event::Done(Done {
                            reason: FinishReason::Cancelled,
                            usage: Usage::new(s.tokens.len() as u32, 0),
                            timing: Timing::default(),
                            stop_sequence: None,
                        }));
                        self.shared.admission.release(1);
                    }
                }
            }
        }
    }

    /// One step: one token for every slot that can take one. True when any got one.
    fn step(&mut self) -> bool {
        let mut produced = false;
        self.draining.retain_mut(|o| !o.flush());
        for i in 0..self.slots.len() {
            let closed = self.slots[i].as_ref().is_some_and(|s| s.out.closed());
            if closed {
                self.slots[i] = None;
                self.shared.active.fetch_sub(1, Ordering::Relaxed);
                self.shared.admission.release(1);
            }
        }
        let before = self.queue.len();
        self.queue.retain(|s| !s.events.is_closed());
        self.shared.admission.release(before - self.queue.len());
        while let Some(free) = self.slots.iter().position(Option::is_none) {
            let Some(s) = self.queue.pop_front() else {
                break;
            };
            let now = Instant::now();
            let prompt_tokens = s.tokens.len() as u32;
            let room = self.context.saturating_sub(prompt_tokens).max(1);
            self.slots[free] = Some(Slot {
                id: s.id,
                prompt_tokens,
                generated: 0,
                max_tokens: s.params.max_tokens.unwrap_or(room).min(room),
                paused: s.paused,
                out: Outbox::new(s.events, s.stalled, &self.courier),
                submitted: s.submitted,
                started: now,
                first_token: None,
                last_token: now,
                round: self.started,
            });
            self.started += 1;
            self.shared.active.fetch_add(1, Ordering::Relaxed);
        }
        self.courier.deliver();
        if !self.script.token_delay.is_zero() {
            std::thread::sleep(self.script.token_delay);
        }
        for i in 0..self.slots.len() {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            if !slot.out.flush() || slot.paused {
                continue;
            }
            let now = Instant::now();
            let answer = match self.script.rounds.len() {
                0 => &self.script.answer,
                n => &self.script.rounds[slot.round.min(n - 1)],
            };
            let (word, text) = if answer.is_empty() {
                let w = (slot.generated as usize) % WORDS.len();
                (w, WORDS[w])
            } else {
                let w = (slot.generated as usize).min(answer.len() - 1);
                (w, answer[w].as_str())
            };
            slot.first_token.get_or_insert(now);
            slot.out.send(Event::Token(TokenEvent {
                text: text.to_owned(),
                id: Some(word as i32),
                logprobs: None,
                elapsed: now - slot.submitted,
                since_prev: now - slot.last_token,
            }));
            slot.last_token = now;
            slot.generated += 1;
            produced = true;
            self.shared.tokens_generated.fetch_add(1, Ordering::Relaxed);
            let answered = !answer.is_empty() && slot.generated as usize >= answer.len();
            if slot.generated >= slot.max_tokens {
                self.finish(i, FinishReason::Length);
            } else if answered {
                self.finish(i, FinishReason::Stop);
            }
        }
        self.courier.deliver();
        produced
    }

    fn has_runnable_work(&self) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|s| !s.paused && s.out.pending.is_empty())
            || (!self.queue.is_empty() && self.slots.iter().any(Option::is_none))
    }

    fn has_stalled_work(&self) -> bool {
        !self.draining.is_empty()
            || self
                .slots
                .iter()
                .flatten()
                .any(|s| !s.out.pending.is_empty())
    }

    fn finish(&mut self, i: usize, reason: FinishReason) {
        let Some(mut slot) = self.slots[i].take() else {
            return;
        };
        let now = Instant::now();
        // Counted before the event goes out: whoever sees `Done` sees it counted.
        self.shared
            .requests_finished
            .fetch_add(1, Ordering::Relaxed);
        let done = Done {
            reason,
            usage: Usage::new(slot.prompt_tokens, slot.generated),
            timing: Timing {
                queued: slot.started - slot.submitted,
                prefill: slot
                    .first_token
                    .map_or(Duration::ZERO, |t| t - slot.started),
                first_token: slot.first_token.map(|t| t - slot.submitted),
                total: now - slot.submitted,
                cached_tokens: 0,
            },
            stop_sequence: None,
        };
        if let Some(speed) = done.decode_speed() {
            self.shared.record_decode(speed);
        }
        slot.out.send(Event::Done(done));
        self.shared.active.fetch_sub(1, Ordering::Relaxed);
        self.shared.admission.release(1);
        if !slot.out.flush() {
            self.draining.push(slot.out);
        }
    }

    fn shutdown(&mut self, reason: FailureKind) {
        let message = stop_message(reason);
        for slot in self.slots.iter_mut().filter_map(Option::take) {
            let mut out = slot.out;
            out.send(Event::Error(Failure {
                kind: reason,
                message: message.into(),
            }));
            self.shared.admission.release(1);
        }
        while let Some(s) = self.queue.pop_front() {
            let _ = s.events.try_send(Event::Error(Failure {
                kind: reason,
                message: message.into(),
            }));
            self.shared.admission.release(1);
        }
    }
}
