//! What the engine tells a caller about one generation: a stream of [`Event`]s ending with
//! exactly one `Done` or `Error`. Token counts and timings here are the engine's real figures;
//! doors translate them and never recount.

use std::time::Duration;

use hearth_protocol::{FinishReason, Usage};

/// One event of a generation's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// One sampled token and the text it released (possibly empty: a split character, or
    /// text held back because it could be the start of a stop string). `id` is `None` for the
    /// final release of held-back text at the end.
    Token(TokenEvent),
    /// A `regenerate` control took effect: everything streamed so far is void and generation
    /// starts again from the prompt.
    Restarted,
    /// A `pause` took effect: no token follows until `Resumed`.
    Paused,
    /// A `resume` took effect.
    Resumed,
    /// A `modify` took effect: tokens after this use the new parameters.
    Modified,
    /// The generation finished; the stream ends here.
    Done(Done),
    /// The generation failed; the stream ends here.
    Error(Failure),
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub text: String,
    pub id: Option<i32>,
    pub logprobs: Option<TokenLogprobs>,
    /// Since the request was submitted.
    pub elapsed: Duration,
    /// Since the previous token (for the first token: since prefill started).
    pub since_prev: Duration,
}

/// The sampled token's log-probability under the model (before sampling transforms) and the
/// most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub token: TokenCandidate,
    pub top: Vec<TokenCandidate>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokenCandidate {
    pub id: i32,
    /// The token's text, lossily decoded on its own (a piece may be part of a character).
    pub text: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    pub reason: FinishReason,
    pub usage: Usage,
    pub timing: Timing,
    /// The stop string that ended the answer (reason `Stop`), when one did (Anthropic's
    /// `stop_sequence`).
    pub stop_sequence: Option<String>,
}

impl Done {
    /// Tokens per second after the first token (which came from prefill), from the counts and
    /// timing; `None` for fewer than two tokens or no time between them.
    pub fn decode_speed(&self) -> Option<f64> {
        let first = self.timing.first_token?;
        let decoding = self.timing.total.checked_sub(first)?.as_secs_f64();
        let tokens = self.usage.completion_tokens.checked_sub(1)?;
        (tokens > 0 && decoding > 0.0).then(|| f64::from(tokens) / decoding)
    }
}

/// Where a generation's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timing {
    /// Waiting for a free slot.
    pub queued: Duration,
    /// From taking a slot to the first sampled token: the engine's own prefill time.
    pub prefill: Duration,
    /// From submission to the first sampled token.
    pub first_token: Option<Duration>,
    /// From submission to the end.
    pub total: Duration,
    /// Prompt tokens whose KV cache was kept from the previous generation in the same slot
    /// (llama-server's `cache_n`): they were not prefilled again.
    pub cached_tokens: u32,
}

/// Why a generation could not finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// llama.cpp refused the batch (for example no room left in the KV cache). Retrying can work.
    Decode,
    /// The engine is shutting down.
    ShuttingDown,
    /// The model was unloaded (another model is being loaded, or none).
    Unloaded,
    /// The request itself was refused where it ran (another node: an image its side could not
    /// decode, a prompt over its context): the client's to fix, never retried elsewhere.
    Invalid,
}
