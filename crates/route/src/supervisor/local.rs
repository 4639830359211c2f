//! A supervised answer on this node's own engine (where it started, or continued here after
//! its provider was lost), and waiting for a provider's free slot.

use hearth_engine::{Event, Request, TokenEvent};
use hearth_protocol::Usage;
use std::time::Instant;

use super::{Job, Outcome, DISPATCH_WAIT};
use crate::generation::RemoteOp;
use crate::placement::Destination;

impl Job {
    /// Run (or continue) the job on this node's engine and forward its events.
    pub(super) async fn on_local(&mut self) -> Outcome {
        self.pausable
            .store(true, std::sync::atomic::Ordering::Release);
        self.answerer.send_replace(None);
        let continuing = !self.delivered.is_empty();
        let prior = self.settle();
        if let Some(done) = self.complete_already(prior) {
            let _ = self.emit(Event::Done(done)).await;
            return Outcome::Finished;
        }
        let request = match self.local_request(continuing, prior) {
            Ok(r) => r,
            Err(msg) => {
                self.fail(msg).await;
                return Outcome::Finished;
            }
        };
        let mut gen = match self.host.submit(&self.model, request) {
            Ok(g) => g,
            Err(e) => {
                self.fail(e.to_string()).await;
                return Outcome::Finished;
            }
        };
        if self.paused {
            let _ = gen.control.pause();
        }
        loop {
            tokio::select! {
                ev = gen.events.recv() => match ev {
                    Some(Event::Token(t)) => {
                        let now = Instant::now();
                        if self.first_token.is_none() && !t.text.is_empty() {
                            self.first_token = Some(now.duration_since(self.submitted));
                        }
                        self.delivered.push_str(&t.text);
                        // Flushed held-back text (no id) is not a token of its own.
                        self.counted(u32::from(t.id.is_some()));
                        self.last_token = now;
                        let event = Event::Token(TokenEvent {
                            elapsed: now.duration_since(self.submitted),
                            ..t
                        });
                        // On failure `gen` is dropped, which cancels the generation.
                        if !self.emit(event).await {
                            return Outcome::Finished;
                        }
                    }
                    Some(Event::Done(mut d)) => {
                        if continuing {
                            d.usage = Usage::new(
                                self.local_prompt_tokens().unwrap_or(d.usage.prompt_tokens),
                                prior.saturating_add(d.usage.completion_tokens),
                            );
                        }
                        d.timing.first_token = self.first_token;
                        d.timing.total = self.submitted.elapsed();
                        let _ = self.emit(Event::Done(d)).await;
                        return Outcome::Finished;
                    }
                    Some(Event::Error(f)) => {
                        let _ = self.emit(Event::Error(f)).await;
                        return Outcome::Finished;
                    }
                    Some(other) => {
                        if !self.emit(other).await {
                            return Outcome::Finished;
                        }
                    }
                    None => {
                        self.shutting_down().await;
                        return Outcome::Finished;
                    }
                },
                op = self.ops.recv(), if self.ops_open => match op {
                    // The engine answers with `Done { reason: Cancelled }`.
                    Some(RemoteOp::Stop) => {
                        let _ = gen.control.stop();
                    }
                    // From the original prompt, not from a continuation: place it again.
                    Some(RemoteOp::Regenerate) => return Outcome::Restart,
                    // The engine answers with `Paused` / `Resumed`.
                    Some(RemoteOp::Pause) => {
                        self.paused = true;
                        let _ = gen.control.pause();
                    }
                    Some(RemoteOp::Resume) => {
                        self.paused = false;
                        let _ = gen.control.resume();
                    }
                    None => self.ops_open = false,
                },
                () = self.events.closed() => return Outcome::Finished,
            }
        }
    }

    /// The request for this node's engine; a continuation renders the prompt and appends the
    /// text already delivered.
    pub(super) fn local_request(&self, continuing: bool, prior: u32) -> Result<Request, String> {
        let mut params = self.params.clone();
        if !continuing {
            return Ok(Request {
                prompt: self.prompt.to_prompt(),
                params,
                owner: self.owner,
            });
        }
        params.max_tokens = params.max_tokens.map(|m| m.saturating_sub(prior).max(1));
        let info = self
            .host
            .model_info(&self.model)
            .ok_or_else(|| format!("'{}' is not loaded on this node", self.model))?;
        let prompt =
            crate::continuation::continuation(&info, self.prompt.to_prompt(), &self.delivered)?;
        Ok(Request {
            prompt,
            params,
            owner: self.owner,
        })
    }

    /// Wait (bounded) until a slot frees up, then place the job there.
    pub(super) async fn wait(&mut self) -> Outcome {
        let Some(_slot) = self.hub.enter_queue() else {
            self.hub.count_unserved();
            let msg = format!(
                "every worker serving {} is busy and the hub's queue is full",
                self.model
            );
            self.fail(msg).await;
            return Outcome::Finished;
        };
        let deadline = tokio::time::Instant::now() + DISPATCH_WAIT;
        let hub = self.hub.clone();
        loop {
            let notified = hub.capacity_changed();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // This node's engine freeing a slot counts too, when it may take the request.
            let local = self.local_candidate() && self.host.engine_of(&self.model).is_some();
            let room = self.host.room(&self.model);
            match self.place() {
                Destination::Wait => {}
                p => return Outcome::Place(p),
            }
            tokio::select! {
                () = &mut notified => {}
                () = room, if local => {}
                () = tokio::time::sleep_until(deadline) => {
                    self.hub.count_unserved();
                    let msg = format!(
                        "no worker serving {} had a free slot within {} s",
                        self.model,
                        DISPATCH_WAIT.as_secs()
                    );
                    self.fail(msg).await;
                    return Outcome::Finished;
                }
                op = self.ops.recv(), if self.ops_open => match op {
                    Some(RemoteOp::Stop) => {
                        let done = self.cancelled();
                        let _ = self.emit(Event::Done(done)).await;
                        return Outcome::Finished;
                    }
                    Some(RemoteOp::Regenerate) => {} // nothing generated yet
                    // Kept for wherever it is placed.
                    Some(RemoteOp::Pause) => {
                        self.paused = true;
                        let _ = self.emit(Event::Paused).await;
                    }
                    Some(RemoteOp::Resume) => {
                        self.paused = false;
                        let _ = self.emit(Event::Resumed).await;
                    }
                    None => self.ops_open = false,
                },
                () = self.events.closed() => return Outcome::Finished,
                () = self.shutdown.cancelled() => {
                    self.shutting_down().await;
                    return Outcome::Finished;
                }
            }
        }
    }
}
