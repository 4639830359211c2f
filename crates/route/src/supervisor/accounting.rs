//! What a supervised answer reports: the tokens delivered so far (the providers' own counts,
//! this node's tokenizer for text no provider counted), its `usage` and timing when it ends on
//! a worker or is stopped, and the decode speed a finished task tells about its worker.

use std::time::Duration;

use hearth_engine::{Done, Timing};
use hearth_protocol::worker::TaskDone;
use hearth_protocol::{FinishReason, Usage};

use super::{Job, RemotePrompt};

impl Job {
    /// The text delivered so far is `tokens` more tokens, as its provider counted them.
    pub(super) fn counted(&mut self, tokens: u32) {
        self.counted = self.counted.saturating_add(tokens);
        self.counted_len = self.delivered.len();
        self.frames = 0;
    }

    /// Before a placement: count what was delivered so far (the providers' counts and this
    /// node's count of the rest) once, so later counts add to it; returns that count.
    pub(super) fn settle(&mut self) -> u32 {
        // Counts with no text behind them (a count before any text) are not delivered tokens.
        let prior = if self.delivered.is_empty() {
            0
        } else {
            self.delivered_tokens()
        };
        self.counted = prior;
        self.counted_len = self.delivered.len();
        self.frames = 0;
        prior
    }

    /// The `Done` of an answer whose delivered tokens already reach `max_tokens` (its provider
    /// was lost after the last token, before saying it was done): nothing is left to place.
    pub(super) fn complete_already(&self, prior: u32) -> Option<Done> {
        let max = self.params.max_tokens?;
        (prior > 0 && prior >= max).then(|| Done {
            reason: FinishReason::Length,
            usage: Usage::new(self.local_prompt_tokens().unwrap_or(0), prior),
            timing: self.timing(None),
            stop_sequence: None,
        })
    }

    /// The tokens delivered so far: the providers' counts, and for text no provider counted (a
    /// reference worker's) this node's tokenizer's count when it holds the same model, else
    /// the frame count (a lower bound).
    pub(super) fn delivered_tokens(&self) -> u32 {
        let tail = &self.delivered[self.counted_len..];
        let uncounted = if tail.is_empty() {
            0
        } else {
            match self.host.model_info(&self.model) {
                Some(info) => u32::try_from(info.count_tokens(tail)).unwrap_or(u32::MAX),
                _ => self.frames,
            }
        };
        self.counted.saturating_add(uncounted)
    }

    /// The prompt's tokens by this node's tokenizer, when it holds the same model.
    pub(super) fn local_prompt_tokens(&self) -> Option<u32> {
        let info = self.host.model_info(&self.model)?;
        let text = match &self.prompt {
            RemotePrompt::Chat(c) => info.render_chat(c).ok()?,
            RemotePrompt::Text(t) => t.clone(),
        };
        u32::try_from(info.count_tokens(&text)).ok()
    }

    pub(super) fn timing(&self, ext: Option<&TaskDone>) -> Timing {
        let ms = |v: f64| Duration::try_from_secs_f64(v / 1000.0).unwrap_or_default();
        Timing {
            queued: ext.map(|d| ms(d.queued_ms)).unwrap_or_default(),
            prefill: ext.map(|d| ms(d.prefill_ms)).unwrap_or_default(),
            first_token: self.first_token,
            total: self.submitted.elapsed(),
            cached_tokens: ext.map_or(0, |d| d.cached_tokens),
        }
    }

    /// The `Done` of a task that ended on a worker. `prior` is the tokens delivered before this
    /// placement (a continuation).
    pub(super) fn done(&self, ext: Option<TaskDone>, continuing: bool, prior: u32) -> Done {
        let timing = self.timing(ext.as_ref());
        let usage = match &ext {
            Some(d) if !continuing => d.usage,
            Some(d) => Usage::new(
                self.local_prompt_tokens().unwrap_or(d.usage.prompt_tokens),
                prior.saturating_add(d.usage.completion_tokens),
            ),
            None => Usage::new(
                self.local_prompt_tokens().unwrap_or(0),
                self.delivered_tokens(),
            ),
        };
        let reason = match &ext {
            Some(d) => d.finish_reason,
            None if self
                .params
                .max_tokens
                .is_some_and(|m| usage.completion_tokens >= m) =>
            {
                FinishReason::Length
            }
            None => FinishReason::Stop,
        };
        Done {
            reason,
            usage,
            timing,
            stop_sequence: ext.and_then(|d| d.stop_sequence),
        }
    }

    /// `Done` for a stopped remote generation.
    pub(super) fn cancelled(&self) -> Done {
        Done {
            reason: FinishReason::Cancelled,
            usage: Usage::new(
                self.local_prompt_tokens().unwrap_or(0),
                self.delivered_tokens(),
            ),
            timing: self.timing(None),
            stop_sequence: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_speed_counts_tokens_after_the_first() {
        let done = |tokens, first_ms, total_ms| Done {
            reason: FinishReason::Length,
            usage: Usage::new(5, tokens),
            timing: Timing {
                first_token: Some(Duration::from_millis(first_ms)),
                total: Duration::from_millis(total_ms),
                ..Timing::default()
            },
            stop_sequence: None,
        };
        assert_eq!(done(11, 100, 1100).decode_speed(), Some(10.0));
        assert_eq!(done(1, 100, 1100).decode_speed(), None);
        assert_eq!(done(11, 100, 100).decode_speed(), None);
    }
}
