//! The internal vocabulary of one generation: sampling parameters, finish reasons and usage,
//! plus the validation every door runs on its wire values before a request reaches the engine.
//! Doors fill a [`RawParams`] from their own field names; [`RawParams::validate`] is the one rule set.

use serde::{Deserialize, Serialize};

use crate::limits::{MAX_STOP_STRINGS, MAX_STOP_STRING_BYTES, MAX_TOP_LOGPROBS};
use crate::tools::ToolCall;

/// The highest temperature any door accepts (OpenAI's bound).
pub const MAX_TEMPERATURE: f64 = 2.0;

/// Sampling parameters after validation. Temperature 0 means greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Nucleus sampling, in (0, 1]; 1 disables it.
    pub top_p: f32,
    /// 0 disables top-k.
    pub top_k: u32,
    /// Multiplicative penalty on repeated tokens; 1 disables it.
    pub repetition_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// `None` draws a fresh seed per generation.
    pub seed: Option<u32>,
    /// `None` generates until end of sequence or the end of the context.
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    /// Alternatives to report per token; `None` reports no log-probabilities.
    pub top_logprobs: Option<u8>,
    /// Never end at end-of-sequence (llama-server's `ignore_eos`): generation runs to
    /// `max_tokens` or the end of the context. Benchmarks use it for fixed-length runs.
    pub ignore_eos: bool,
    /// A GBNF grammar (llama.cpp's grammar sampling) every generated token must follow: what
    /// a door makes of a JSON format or schema. Doors build it; the engine checks it.
    pub grammar: Option<String>,
    /// Words that switch `grammar` on (llama.cpp's lazy grammar, which starts at the word):
    /// free text until a tool call opens. Empty: the grammar holds from the first token.
    pub grammar_triggers: Vec<String>,
    /// Guessing ahead for this request (a Hearth extension, `speculative`); `None`: the
    /// node's setting (`--spec`).
    pub speculation: Option<Speculation>,
}

/// Speculative decoding: tokens guessed ahead, then checked in one decode, kept while they are
/// what the sampler would have chosen. Answers are the same with it on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speculation {
    /// Guess where the measured cost of a decode and the request's acceptance say it pays.
    #[default]
    Auto,
    /// Never guess.
    None,
    /// Guess from n-grams of the prompt and the answer whenever one matches (prompt lookup),
    /// whatever it costs: for tests and comparisons.
    Ngram,
    /// Guess with the node's draft model (`--draft-model`) at every step, whatever it costs.
    Draft,
}

impl Speculation {
    pub const NAMES: &'static str = "auto, none, ngram or draft";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::None => "none",
            Self::Ngram => "ngram",
            Self::Draft => "draft",
        }
    }
}

impl std::str::FromStr for Speculation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "none" | "off" => Ok(Self::None),
            "ngram" => Ok(Self::Ngram),
            "draft" => Ok(Self::Draft),
            other => Err(format!(
                "speculative must be {}, got {other:?}",
                Self::NAMES
            )),
        }
    }
}

impl Default for SamplingParams {
    /// llama-server's defaults, which is what users of local runners expect.
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_p: 0.95,
            top_k: 40,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: None,
            max_tokens: None,
            stop: Vec::new(),
            top_logprobs: None,
            ignore_eos: false,
            grammar: None,
            grammar_triggers: Vec::new(),
            speculation: None,
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// Apply a validated patch (a `modify` control) on top of these parameters.
    pub fn apply(&mut self, patch: &SamplingPatch) {
        if let Some(t) = patch.temperature {
            self.temperature = t;
        }
        if let Some(p) = patch.top_p {
            self.top_p = p;
        }
        if let Some(k) = patch.top_k {
            self.top_k = k;
        }
        if let Some(r) = patch.repetition_penalty {
            self.repetition_penalty = r;
        }
        if let Some(s) = patch.seed {
            self.seed = Some(s);
        }
        if let Some(m) = patch.max_tokens {
            self.max_tokens = Some(m);
        }
        if let Some(stop) = &patch.stop {
            self.stop = stop.clone();
        }
    }
}

/// A validated change to a running generation's parameters; only the fields that are set change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SamplingPatch {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub repetition_penalty: Option<f32>,
    pub seed: Option<u32>,
    pub max_tokens: Option<u32>,
    pub stop: Option<Vec<String>>,
}

impl SamplingPatch {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// One turn of a conversation, after a door has flattened its wire form to text. It
/// serializes as Hugging Face's chat templates read a message (the tool fields only when set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// The calls an assistant turn made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Which call a `tool` turn answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The function a `tool` turn's result comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Images the turn shows the model, in order; each stands where the content holds the
    /// media marker (`<__media__>`), or before the text when it holds none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::media::Image>,
    /// Audio clips the turn lets the model hear, in order, before its images and its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audio: Vec<crate::audio::Audio>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            images: Vec::new(),
            audio: Vec::new(),
        }
    }
}

/// Join the system messages at the start of a conversation into one (`\n\n` between them):
/// agents send their instructions and a `developer` or `system` turn besides, and many chat
/// templates (Gemma's, Mistral's) take one leading system message only.
pub fn merge_leading_system(messages: &mut Vec<ChatMessage>) {
    let n = messages
        .iter()
        // A clip stands before its message's text: joined, it would move; such messages stay.
        .take_while(|m| m.role == "system" && m.tool_calls.is_empty() && m.audio.is_empty())
        .count();
    if n < 2 {
        return;
    }
    let mut images = Vec::new();
    let joined = messages
        .drain(..n)
        .map(|m| {
            // Their images in order, each where its marker stands in the joined text (or
            // before its message's text, as a message without markers has them).
            let marked = m.content.matches(crate::media::MEDIA_MARKER).count();
            let content = if m.images.is_empty() {
                // Joined with images, a marker of its own words would become a place.
                crate::media::as_text(&m.content).into_owned()
            } else if marked == 0 {
                format!(
                    "{}{}",
                    crate::media::MEDIA_MARKER.repeat(m.images.len()),
                    m.content
                )
            } else {
                m.content
            };
            images.extend(m.images);
            content
        })
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut merged = ChatMessage::new("system", joined);
    merged.images = images;
    messages.insert(0, merged);
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End of sequence, or a stop string.
    Stop,
    /// `max_tokens` reached, or the end of the context.
    Length,
    /// The client stopped it.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A piece of a model's answer as the answer's reader splits it (`hearth_engine::answer`):
/// thinking, or the reply's text. What the agent doors' stream writers take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
}

/// Real token counts from the engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
}

impl Usage {
    /// The counts may be a peer's or a hub worker's, as they sent them: the total holds at
    /// the most 32 bits hold rather than overflow.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

/// A parameter that failed validation: which one, and why, in words a client can act on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ParamError {
    pub param: &'static str,
    pub message: String,
}

impl From<crate::tools::ToolError> for ParamError {
    fn from(e: crate::tools::ToolError) -> Self {
        Self::new(e.param, e.message)
    }
}

impl ParamError {
    pub fn new(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            param,
            message: message.into(),
        }
    }
}

/// `stop` as clients send it: one string or a list.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

impl StopField {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// Wire values before validation, with the widest types so that out-of-range values reach
/// validation (and get a clear message) instead of failing in the JSON parser.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawParams {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub repetition_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub max_tokens: Option<i64>,
    pub stop: Option<StopField>,
    pub top_logprobs: Option<i64>,
    pub ignore_eos: Option<bool>,
    /// `auto`, `none`, `ngram` or `draft` ([`Speculation`]).
    pub speculative: Option<String>,
}

impl RawParams {
    /// Validate on top of `defaults`. `max_context` is the per-request context of the loaded
    /// model when known; `max_tokens` larger than it is capped to it.
    pub fn validate(
        &self,
        defaults: &SamplingParams,
        max_context: Option<u32>,
    ) -> Result<SamplingParams, ParamError> {
        let patch = self.validate_patch(max_context)?;
        let mut params = defaults.clone();
        params.apply(&patch);
        params.frequency_penalty = match self.frequency_penalty {
            Some(v) => penalty("frequency_penalty", v)?,
            None => defaults.frequency_penalty,
        };
        params.presence_penalty = match self.presence_penalty {
            Some(v) => penalty("presence_penalty", v)?,
            None => defaults.presence_penalty,
        };
        params.ignore_eos = self.ignore_eos.unwrap_or(defaults.ignore_eos);
        params.speculation = match &self.speculative {
            None => defaults.speculation,
            Some(s) => Some(
                s.parse::<Speculation>()
                    .map_err(|m| ParamError::new("speculative", m))?,
            ),
        };
        params.top_logprobs = match self.top_logprobs {
            None => defaults.top_logprobs,
            Some(n) if (0..=i64::from(MAX_TOP_LOGPROBS)).contains(&n) => Some(n as u8),
            Some(n) => {
                return Err(ParamError::new(
                    "top_logprobs",
                    format!("top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {n}"),
                ))
            }
        };
        Ok(params)
    }

    /// Validate only the fields a running generation may change (`modify`).
    ///
    /// Temperature is bounded as OpenAI bounds it: above 2 sampling is noise.
    pub fn validate_patch(&self, max_context: Option<u32>) -> Result<SamplingPatch, ParamError> {
        let temperature = self
            .temperature
            .map(|t| {
                if t.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&t) {
                    Ok(t as f32)
                } else {
                    Err(ParamError::new(
                        "temperature",
                        format!("temperature must be between 0 and {MAX_TEMPERATURE}, got {t}"),
                    ))
                }
            })
            .transpose()?;
        let top_p = self
            .top_p
            .map(|p| {
                if p.is_finite() && p > 0.0 && p <= 1.0 {
                    Ok(p as f32)
                } else {
                    Err(ParamError::new(
                        "top_p",
                        format!("top_p must be in (0, 1], got {p}"),
                    ))
                }
            })
            .transpose()?;
        let top_k = self
            .top_k
            .map(|k| {
                u32::try_from(k).map_err(|_| {
                    ParamError::new(
                        "top_k",
                        format!("top_k must be >= 0 (0 disables it), got {k}"),
                    )
                })
            })
            .transpose()?;
        let repetition_penalty = self
            .repetition_penalty
            .map(|r| {
                if r.is_finite() && r > 0.0 {
                    Ok(r as f32)
                } else {
                    Err(ParamError::new(
                        "repetition_penalty",
                        format!("repetition_penalty must be > 0 (1 disables it), got {r}"),
                    ))
                }
            })
            .transpose()?;
        let seed = self
            .seed
            .map(|s| {
                // OpenAI clients send 64-bit seeds; llama.cpp takes 32 bits. Negative values
                // are refused rather than silently wrapped.
                if s < 0 {
                    Err(ParamError::new(
                        "seed",
                        format!("seed must be >= 0, got {s}"),
                    ))
                } else {
                    Ok((s as u64 % (u64::from(u32::MAX))) as u32)
                }
            })
            .transpose()?;
        let max_tokens = self
            .max_tokens
            .map(|m| {
                if m <= 0 {
                    return Err(ParamError::new(
                        "max_tokens",
                        format!("max_tokens must be at least 1, got {m}"),
                    ));
                }
                // A ceiling, not an error: agents send large fixed values (32000), and the
                // answer ends where the context does (`length`), as llama-server and Ollama
                // have it. Only a prompt that does not fit is refused.
                let m = max_context.map_or(m, |ctx| m.min(i64::from(ctx)));
                Ok(u32::try_from(m).unwrap_or(u32::MAX))
            })
            .transpose()?;
        let stop = self
            .stop
            .clone()
            .map(|s| validate_stop(s.into_vec()))
            .transpose()?;
        Ok(SamplingPatch {
            temperature,
            top_p,
            top_k,
            repetition_penalty,
            seed,
            max_tokens,
            stop,
        })
    }
}

fn penalty(param: &'static str, v: f64) -> Result<f32, ParamError> {
    if v.is_finite() && (-2.0..=2.0).contains(&v) {
        Ok(v as f32)
    } else {
        Err(ParamError::new(
            param,
            format!("{param} must be between -2 and 2, got {v}"),
        ))
    }
}

fn validate_stop(stop: Vec<String>) -> Result<Vec<String>, ParamError> {
    if stop.len() > MAX_STOP_STRINGS {
        return Err(ParamError::new(
            "stop",
            format!(
                "at most {MAX_STOP_STRINGS} stop strings are allowed, got {}",
                stop.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(stop.len());
    for s in stop {
        if s.len() > MAX_STOP_STRING_BYTES {
            return Err(ParamError::new(
                "stop",
                format!("a stop string may be at most {MAX_STOP_STRING_BYTES} bytes long"),
            ));
        }
        // An empty stop string would match everywhere; clients send it meaning "none".
        if !s.is_empty() {
            out.push(s);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawParams {
        RawParams::default()
    }

    #[test]
    fn leading_system_messages_merge_with_their_images() {
        use crate::media::{Image, MEDIA_MARKER};
        let mut a = ChatMessage::new("system", "Be brief.");
        a.images = vec![Image(vec![1])];
        let mut b = ChatMessage::new("system", format!("See {MEDIA_MARKER}."));
        b.images = vec![Image(vec![2])];
        let mut messages = vec![a, b, ChatMessage::new("user", "Hi")];
        merge_leading_system(&mut messages);
        assert_eq!(messages.len(), 2);
        assert_eq!(
            messages[0].content,
            format!("{MEDIA_MARKER}Be brief.\n\nSee {MEDIA_MARKER}.")
        );
        assert_eq!(messages[0].images, [Image(vec![1]), Image(vec![2])]);
        // A message without images that names the marker (Anthropic's `system` string, the
        // Responses `instructions`): joined with images, its marker stays words.
        let mut b = ChatMessage::new("system", "mtmd splits on <__media__>.");
        let mut c = ChatMessage::new("system", "");
        c.images = vec![Image(vec![3])];
        b.images.clear();
        let mut messages = vec![b, c, ChatMessage::new("user", "Hi")];
        merge_leading_system(&mut messages);
        assert_eq!(
            messages[0].content,
            format!(
                "mtmd splits on {}.\n\n{MEDIA_MARKER}",
                crate::media::MARKER_AS_TEXT
            )
        );
    }

    #[test]
    fn defaults_pass_through() {
        let p = raw()
            .validate(&SamplingParams::default(), Some(512))
            .unwrap();
        assert_eq!(p, SamplingParams::default());
    }

    #[test]
    fn each_out_of_range_value_names_its_parameter() {
        let cases: Vec<(RawParams, &str)> = vec![
            (
                RawParams {
                    temperature: Some(-0.1),
                    ..raw()
                },
                "temperature",
            ),
            (
                RawParams {
                    temperature: Some(f64::NAN),
                    ..raw()
                },
                "temperature",
            ),
            (
                RawParams {
                    temperature: Some(f64::INFINITY),
                    ..raw()
                },
                "temperature",
            ),
            (
                RawParams {
                    temperature: Some(2.01),
                    ..raw()
                },
                "temperature",
            ),
            (
                RawParams {
                    top_p: Some(0.0),
                    ..raw()
                },
                "top_p",
            ),
            (
                RawParams {
                    top_p: Some(1.01),
                    ..raw()
                },
                "top_p",
            ),
            (
                RawParams {
                    top_k: Some(-1),
                    ..raw()
                },
                "top_k",
            ),
            (
                RawParams {
                    repetition_penalty: Some(0.0),
                    ..raw()
                },
                "repetition_penalty",
            ),
            (
                RawParams {
                    max_tokens: Some(0),
                    ..raw()
                },
                "max_tokens",
            ),
            (
                RawParams {
                    max_tokens: Some(-5),
                    ..raw()
                },
                "max_tokens",
            ),
            (
                RawParams {
                    seed: Some(-1),
                    ..raw()
                },
                "seed",
            ),
            (
                RawParams {
                    frequency_penalty: Some(3.0),
                    ..raw()
                },
                "frequency_penalty",
            ),
            (
                RawParams {
                    top_logprobs: Some(21),
                    ..raw()
                },
                "top_logprobs",
            ),
            (
                RawParams {
                    stop: Some(StopField::Many(vec!["x".into(); 17])),
                    ..raw()
                },
                "stop",
            ),
            (
                RawParams {
                    stop: Some(StopField::One("y".repeat(257))),
                    ..raw()
                },
                "stop",
            ),
        ];
        for (params, name) in cases {
            let err = params
                .validate(&SamplingParams::default(), Some(512))
                .expect_err(name);
            assert_eq!(err.param, name, "{err}");
            assert!(!err.message.is_empty());
        }
    }

    #[test]
    fn boundary_values_are_accepted() {
        let hot = RawParams {
            temperature: Some(MAX_TEMPERATURE),
            ..raw()
        };
        assert!(hot.validate(&SamplingParams::default(), Some(512)).is_ok());
        let p = RawParams {
            temperature: Some(0.0),
            top_p: Some(1.0),
            top_k: Some(0),
            max_tokens: Some(512),
            seed: Some(u32::MAX as i64 + 7),
            stop: Some(StopField::Many(vec!["".into(), "END".into()])),
            ..raw()
        }
        .validate(&SamplingParams::default(), Some(512))
        .unwrap();
        assert!(p.is_greedy());
        assert_eq!(p.top_k, 0);
        assert_eq!(p.max_tokens, Some(512));
        assert_eq!(p.stop, vec!["END".to_string()]);
        assert!(p.seed.is_some());
    }

    #[test]
    fn max_tokens_beyond_the_context_is_a_ceiling() {
        let p = RawParams {
            max_tokens: Some(32_000),
            ..raw()
        }
        .validate(&SamplingParams::default(), Some(512))
        .unwrap();
        assert_eq!(p.max_tokens, Some(512));
    }

    #[test]
    fn max_tokens_is_unbounded_when_context_unknown() {
        let p = RawParams {
            max_tokens: Some(100_000),
            ..raw()
        }
        .validate(&SamplingParams::default(), None)
        .unwrap();
        assert_eq!(p.max_tokens, Some(100_000));
    }

    #[test]
    fn patch_changes_only_given_fields() {
        let mut p = SamplingParams::default();
        let patch = RawParams {
            temperature: Some(0.3),
            ..raw()
        }
        .validate_patch(None)
        .unwrap();
        p.apply(&patch);
        assert_eq!(p.temperature, 0.3);
        assert_eq!(p.top_p, SamplingParams::default().top_p);
        assert!(!patch.is_empty());
        assert!(raw().validate_patch(None).unwrap().is_empty());
    }
}
