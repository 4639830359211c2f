//! The running generation's engine events as client messages: a `token` per released text
//! (with ids, logprobs and timing when asked for), `status` when a control takes effect, then
//! `completion` or an `error`.

use std::time::Duration;

use hearth_engine::{Done, Event, TokenEvent};
use hearth_protocol::streaming::{self as sw, ErrorKind, RecoveryAction, ServerMessage};

use super::messages::{error, failure, status};
use super::{Running, Session};

impl Session {
    pub(super) async fn on_event(&mut self, event: Option<Event>) {
        let Some(running) = self.running.as_mut() else {
            return;
        };
        match event {
            Some(Event::Token(t)) => {
                running.tokens += u32::from(t.id.is_some());
                running.text.push_str(&t.text);
                let msg = token_message(running, &t);
                if let Some(msg) = msg {
                    self.send(&msg).await;
                }
            }
            Some(Event::Paused) => {
                let p = running.progress();
                self.send(&status("pause", p, "Generation paused", None))
                    .await;
            }
            Some(Event::Resumed) => {
                let p = running.progress();
                self.send(&status("resume", p, "Generation resumed", None))
                    .await;
            }
            Some(Event::Modified) => {
                let p = running.progress();
                let what = running.modifications.pop_front().unwrap_or_default();
                self.send(&status("modify", p, format!("Updated {what}"), None))
                    .await;
            }
            Some(Event::Restarted) => {
                running.text.truncate(running.prefix_len);
                running.tokens = 0;
                self.send(&status(
                    "regenerate",
                    0,
                    "Generation restarted from the prompt",
                    None,
                ))
                .await;
            }
            Some(Event::Done(done)) => {
                let running = self.running.take().expect("running");
                self.send(&completion(running, &done)).await;
            }
            Some(Event::Error(f)) => {
                let running = self.running.take().expect("running");
                self.send(&failure(&f, running.request_id)).await;
            }
            None => {
                let running = self.running.take().expect("running");
                self.send(&error(
                    ErrorKind::InternalError,
                    "the engine stopped unexpectedly",
                    true,
                    RecoveryAction::Retry,
                    Some(running.request_id),
                ))
                .await;
            }
        }
    }
}

fn token_message(running: &Running, t: &TokenEvent) -> Option<ServerMessage> {
    let o = &running.options;
    if !o.stream {
        return None;
    }
    // Held-back text produces tokens without text; send them only when ids or logprobs were
    // asked for (every sampled token is then reported).
    let wants_every_token = (o.include_token_ids || o.include_logprobs) && t.id.is_some();
    if t.text.is_empty() && !wants_every_token {
        return None;
    }
    let logprobs = if o.include_logprobs {
        t.logprobs.as_ref().map(|lp| {
            let mut v = vec![sw::TokenLogprob {
                token: lp.token.text.clone(),
                logprob: lp.token.logprob,
            }];
            v.extend(
                lp.top
                    .iter()
                    .filter(|c| c.id != lp.token.id)
                    .take(lp.top.len().saturating_sub(1))
                    .map(|c| sw::TokenLogprob {
                        token: c.text.clone(),
                        logprob: c.logprob,
                    }),
            );
            v
        })
    } else {
        None
    };
    Some(ServerMessage::Token(sw::Token {
        token: t.text.clone(),
        token_id: if o.include_token_ids { t.id } else { None },
        generated_text: running.text.clone(),
        logprobs,
        timing: o.include_timing.then(|| sw::TokenTiming {
            token_ms: ms(t.since_prev),
            total_ms: ms(t.elapsed),
        }),
        finish_reason: None,
        finished: false,
    }))
}

fn completion(running: Running, done: &Done) -> ServerMessage {
    ServerMessage::Completion(sw::Completion {
        request_id: running.request_id,
        generated_text: running.text,
        finish_reason: done.reason.as_str().to_owned(),
        usage: done.usage,
        timing: running
            .options
            .include_timing
            .then(|| sw::CompletionTiming {
                first_token_ms: done.timing.first_token.map_or(0.0, ms),
                total_ms: ms(done.timing.total),
            }),
    })
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}
