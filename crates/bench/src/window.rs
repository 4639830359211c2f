//! What a client saw of decoding over a span of time ([`Window`]): the span in which every
//! stream decoded, its tokens, and their rate by the wall clock and by the node's CPU time.

use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::client::Trace;
use crate::cpu::CpuSampler;
use crate::floor::Rate;

/// Decoding seen by the client over a span of time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// Tokens decoded in the span (the aggregate rate times its length).
    tokens: f64,
    from: Instant,
    to: Instant,
}

impl Window {
    /// Streams: the span in which every one was decoding, from the last stream's first token
    /// to the first stream's last. Its rate is the sum of each stream's own rate inside it
    /// (tokens after its first in the span, over the time between them): the messages of one
    /// step reach the client one stream after another, so counting every stream's tokens
    /// between two edges set by different streams would drop up to one token per stream at
    /// each edge (several percent of a short run of 8 streams). For one stream: the tokens
    /// after the first over the time they took.
    pub(crate) fn overlap(traces: &[Trace]) -> Result<Self> {
        let from = *traces
            .iter()
            .filter_map(|t| t.tokens.first())
            .max()
            .context("a stream got no tokens")?;
        let to = *traces
            .iter()
            .filter_map(|t| t.tokens.last())
            .min()
            .context("a stream got no tokens")?;
        if to <= from {
            bail!("the streams never decoded at the same time");
        }
        let mut rate = 0.0;
        for t in traces {
            let inside: Vec<Instant> = t
                .tokens
                .iter()
                .copied()
                .filter(|x| *x >= from && *x <= to)
                .collect();
            // Tokens that came in one network chunk share its arrival time: the rate counts
            // the tokens that arrived after the stream's first arrival in the window.
            let (Some(a), Some(b)) = (inside.first(), inside.last()) else {
                bail!("a stream got no tokens while every stream was decoding: use more --tokens");
            };
            if b <= a {
                bail!("a stream's tokens in the window all came in one chunk: use more --tokens");
            }
            let after = inside.iter().filter(|x| *x > a).count();
            rate += after as f64 / (*b - *a).as_secs_f64();
        }
        Ok(Self {
            tokens: rate * (to - from).as_secs_f64(),
            from,
            to,
        })
    }

    /// Tokens per second by the wall clock.
    pub(crate) fn wall_rate(&self) -> f64 {
        self.tokens / (self.to - self.from).as_secs_f64()
    }

    pub(crate) fn rate(&self, node_cpu: &CpuSampler) -> Rate {
        Rate {
            wall: self.wall_rate(),
            cpu: self.tokens / node_cpu.between(self.from, self.to).max(0.01),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn trace(start: Instant, offset_ms: u64, steps: std::ops::Range<u64>) -> Trace {
        Trace {
            sent: start,
            tokens: steps
                .map(|s| start + Duration::from_millis(s * 10 + offset_ms))
                .collect(),
            prefill_ms: 0.0,
            prompt_tokens: 0,
        }
    }

    #[test]
    fn the_aggregate_is_exact_when_a_steps_messages_arrive_one_stream_after_another() {
        // Four streams decode one token each per 10 ms step, together from step 2 to step 30;
        // each step's message reaches the client 0, 2, 4 and 6 ms after the step.
        let t0 = Instant::now();
        let traces = vec![
            trace(t0, 0, 0..31),
            trace(t0, 2, 1..33),
            trace(t0, 4, 2..40),
            trace(t0, 6, 0..35),
        ];
        let w = Window::overlap(&traces).unwrap();
        let rate = w.wall_rate();
        assert!((rate - 400.0).abs() < 1e-6, "{rate} tokens/s, not 400");
        // One stream: 30 tokens after the first over 300 ms.
        let w = Window::overlap(&traces[..1]).unwrap();
        assert!((w.wall_rate() - 100.0).abs() < 1e-6);
        // Two tokens in one chunk at the window's start: one gap, not two, over 10 ms.
        let mut burst = trace(t0, 0, 0..3);
        burst.tokens[1] = burst.tokens[0];
        let w = Window::overlap(&[burst]).unwrap();
        assert!((w.wall_rate() - 50.0).abs() < 1e-6);
        // Streams that never decoded together are an error, not a rate.
        assert!(Window::overlap(&[trace(t0, 0, 0..5), trace(t0, 0, 6..9)]).is_err());
    }
}
