//! Ollama's `options` object (the Modelfile parameters a request may override) and `format`:
//! the wire form, Ollama's defaults, and their validation into [`SamplingParams`] through the
//! one rule set every door shares ([`RawParams::validate`]).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Number, Value};

use super::OllamaError;
use crate::generation::{RawParams, SamplingParams, StopField};

/// `options` as it arrives. Integers are [`Number`]s because Ollama reads every JSON number as a
/// float and truncates (so `40.0` is a valid `top_k`); validation, not serde, then says what is
/// wrong with a value. Ollama's other options (`num_keep`, `typical_p`, `min_p`,
/// `repeat_last_n`, `penalize_newline`, `mirostat*`, `num_batch`, `num_gpu`, `main_gpu`,
/// `use_mmap`, `use_mlock`, `num_thread`, `numa`, `low_vram`, `draft_num_predict`, ...) are
/// accepted and ignored, as Ollama ignores options it does not know: they tune its runner.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Options {
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<Number>,
    #[serde(default)]
    pub repeat_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub seed: Option<Number>,
    #[serde(default)]
    pub num_predict: Option<Number>,
    #[serde(default)]
    pub stop: Option<StopField>,
    #[serde(default)]
    pub num_ctx: Option<Number>,
    /// Hearth's (llama-server's) `ignore_eos`, not Ollama's: generate to `num_predict` even past
    /// the end of sequence. Benchmarks use it for fixed-length runs.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Hearth extension: `auto`, `none`, `ngram` or `draft` speculation for this request.
    #[serde(default)]
    pub speculative: Option<String>,
}

/// Read `options` only from an object (or `null`): a derived struct would also take an array
/// and read its items as fields by position.
pub(crate) fn deserialize_options<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Options>, D::Error> {
    match Option::<Map<String, Value>>::deserialize(d)? {
        None => Ok(None),
        Some(map) => serde_path_to_error::deserialize(Value::Object(map))
            .map(Some)
            .map_err(|e| D::Error::custom(format!("options.{}: {}", e.path(), e.inner()))),
    }
}

/// Ollama's sampling defaults (`api.DefaultOptions`): temperature 0.8, top_p 0.9, top_k 40,
/// no repeat penalty (Ollama's default was 1.1 until August 2026, now 1.0), a random seed
/// and no token limit.
pub fn ollama_defaults() -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        top_p: 0.9,
        top_k: 40,
        repetition_penalty: 1.0,
        ..SamplingParams::default()
    }
}

impl Options {
    /// The sampling parameters on top of [`ollama_defaults`], and `num_ctx` when given.
    ///
    /// `max_context` is the context a request gets on this node, when known: a larger
    /// `num_ctx` is refused (the node cannot grow its context per request). Ollama's
    /// `num_predict` semantics are kept: a negative value (-1 "infinite", -2 "fill the
    /// context") and 0 (which Ollama's own runner also treats as unset) all mean "until the
    /// end of sequence or of the context", and a value larger than the context is capped to
    /// it rather than refused, since that is where Ollama's generation ends too. A negative
    /// `seed` (Ollama's default is -1) draws a random one.
    pub fn validate(
        &self,
        max_context: Option<u32>,
    ) -> Result<(SamplingParams, Option<u32>), OllamaError> {
        let num_ctx = match integer("num_ctx", self.num_ctx.as_ref())? {
            None => None,
            Some(n) if n < 1 => {
                return Err(OllamaError::bad_request(format!(
                    "num_ctx must be at least 1, got {n}"
                )))
            }
            Some(n) => match max_context {
                Some(ctx) if n > i64::from(ctx) => {
                    return Err(OllamaError::bad_request(format!(
                        "num_ctx {n} is larger than the context of {ctx} tokens this node serves for the model"
                    )))
                }
                _ => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            },
        };
        let context = num_ctx.or(max_context);
        let max_tokens = match integer("num_predict", self.num_predict.as_ref())? {
            Some(n) if n > 0 => Some(context.map_or(n, |ctx| n.min(i64::from(ctx)))),
            _ => None,
        };
        let raw = RawParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: integer("top_k", self.top_k.as_ref())?,
            repetition_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: integer("seed", self.seed.as_ref())?.filter(|s| *s >= 0),
            max_tokens,
            stop: self.stop.clone(),
            top_logprobs: None,
            ignore_eos: self.ignore_eos,
            speculative: self.speculative.clone(),
        };
        let params = raw.validate(&ollama_defaults(), context)?;
        Ok((params, num_ctx))
    }
}

/// An integer option: a JSON integer, or a float with nothing after the point (Ollama reads
/// both). Anything else is refused rather than truncated.
fn integer(name: &str, n: Option<&Number>) -> Result<Option<i64>, OllamaError> {
    let Some(n) = n else { return Ok(None) };
    if let Some(i) = n.as_i64() {
        return Ok(Some(i));
    }
    match n.as_f64() {
        Some(f) if f.fract() != 0.0 => Err(OllamaError::bad_request(format!(
            "option {name:?} must be an integer, got {n}"
        ))),
        Some(f) if f.abs() < 9.0e18 => Ok(Some(f as i64)),
        _ => Err(OllamaError::bad_request(format!(
            "option {name:?} is out of range, got {n}"
        ))),
    }
}

/// What `format` asks the answer to be.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    /// `"json"`: any JSON value.
    Json,
    /// A JSON schema the answer must match (structured outputs).
    Schema(Value),
}

impl Format {
    /// `"json"` is JSON mode, an object is a schema, `""` and `null` mean none (Ollama's
    /// zero value); anything else is refused in Ollama's words.
    pub fn parse(value: Option<&Value>) -> Result<Option<Format>, OllamaError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) if s == "json" => Ok(Some(Format::Json)),
            Some(Value::Object(schema)) => Ok(Some(Format::Schema(Value::Object(schema.clone())))),
            Some(other) => Err(OllamaError::bad_request(format!(
                "invalid format: {other}; expected \"json\" or a valid JSON Schema"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(v: Value) -> Options {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn no_options_give_ollamas_defaults() {
        let (p, ctx) = Options::default().validate(Some(2048)).unwrap();
        assert_eq!(p, ollama_defaults());
        assert_eq!((p.temperature, p.top_p, p.top_k), (0.8, 0.9, 40));
        assert_eq!(p.max_tokens, None);
        assert_eq!(ctx, None);
    }

    #[test]
    fn options_map_to_sampling_params() {
        let (p, ctx) = options(json!({"temperature": 0, "top_p": 0.5, "top_k": 20.0,
            "repeat_penalty": 1.2, "seed": 42, "num_predict": 100, "stop": ["\n", "user:"],
            "num_ctx": 1024, "frequency_penalty": 1.0, "presence_penalty": 1.5}))
        .validate(Some(4096))
        .unwrap();
        assert!(p.is_greedy());
        assert_eq!((p.top_p, p.top_k, p.repetition_penalty), (0.5, 20, 1.2));
        assert_eq!(
            (p.seed, p.max_tokens, ctx),
            (Some(42), Some(100), Some(1024))
        );
        assert_eq!(p.stop, vec!["\n".to_string(), "user:".to_string()]);
        assert_eq!((p.frequency_penalty, p.presence_penalty), (1.0, 1.5));
        let (p, _) = options(json!({"stop": "END"})).validate(None).unwrap();
        assert_eq!(p.stop, vec!["END".to_string()]);
        assert!(!p.ignore_eos);
        let (p, _) = options(json!({"ignore_eos": true})).validate(None).unwrap();
        assert!(p.ignore_eos);
    }

    #[test]
    fn docs_example_with_every_option_is_accepted() {
        let o = options(json!({"num_keep": 5, "seed": 42, "num_predict": 100,
            "draft_num_predict": 4, "top_k": 20, "top_p": 0.9, "min_p": 0.0, "typical_p": 0.7,
            "repeat_last_n": 33, "temperature": 0.8, "repeat_penalty": 1.2,
            "presence_penalty": 1.5, "frequency_penalty": 1.0, "penalize_newline": true,
            "stop": ["\n", "user:"], "numa": false, "num_ctx": 1024, "num_batch": 2,
            "num_gpu": 1, "main_gpu": 0, "use_mmap": true, "num_thread": 8}));
        assert!(o.validate(Some(2048)).is_ok());
    }

    #[test]
    fn num_predict_semantics() {
        for (n, want) in [(-1, None), (-2, None), (0, None), (-7, None), (5, Some(5))] {
            let (p, _) = options(json!({"num_predict": n}))
                .validate(Some(512))
                .unwrap();
            assert_eq!(p.max_tokens, want, "num_predict {n}");
        }
        // Capped to the context rather than refused; to num_ctx when it is smaller.
        let (p, _) = options(json!({"num_predict": 100000}))
            .validate(Some(512))
            .unwrap();
        assert_eq!(p.max_tokens, Some(512));
        let (p, _) = options(json!({"num_predict": 1000, "num_ctx": 256}))
            .validate(Some(512))
            .unwrap();
        assert_eq!(p.max_tokens, Some(256));
        let (p, _) = options(json!({"num_predict": 100000}))
            .validate(None)
            .unwrap();
        assert_eq!(p.max_tokens, Some(100000));
    }

    #[test]
    fn seed_negative_is_random() {
        let (p, _) = options(json!({"seed": -1})).validate(None).unwrap();
        assert_eq!(p.seed, None);
    }

    #[test]
    fn bad_values_are_400s_naming_the_option() {
        for (o, word) in [
            (json!({"num_ctx": 4097}), "num_ctx"),
            (json!({"num_ctx": 0}), "num_ctx"),
            (json!({"top_k": 1.5}), "top_k"),
            (json!({"top_k": -1}), "top_k"),
            (json!({"temperature": 3}), "temperature"),
            (json!({"top_p": 0}), "top_p"),
            (json!({"repeat_penalty": 0}), "repeat_penalty"),
            (json!({"presence_penalty": 9}), "presence_penalty"),
            (json!({"stop": vec!["x"; 17]}), "stop"),
        ] {
            let e = options(o.clone()).validate(Some(4096)).expect_err(word);
            assert_eq!(e.status, 400);
            assert!(e.message.contains(word), "{o}: {e}");
        }
        // Wrong JSON types never reach validation.
        for o in [
            json!({"temperature": "hot"}),
            json!({"top_k": "40"}),
            json!({"stop": 3}),
        ] {
            assert!(serde_json::from_value::<Options>(o).is_err());
        }
    }

    #[test]
    fn format_values() {
        assert_eq!(Format::parse(None).unwrap(), None);
        assert_eq!(Format::parse(Some(&json!(null))).unwrap(), None);
        assert_eq!(Format::parse(Some(&json!(""))).unwrap(), None);
        assert_eq!(
            Format::parse(Some(&json!("json"))).unwrap(),
            Some(Format::Json)
        );
        let schema = json!({"type": "object", "properties": {"age": {"type": "integer"}},
            "required": ["age"]});
        assert_eq!(
            Format::parse(Some(&schema)).unwrap(),
            Some(Format::Schema(schema))
        );
        for bad in [json!("xml"), json!(1), json!(["json"]), json!(true)] {
            let e = Format::parse(Some(&bad)).expect_err("refused");
            assert_eq!(e.status, 400);
            assert!(e.message.starts_with("invalid format"), "{e}");
        }
    }
}
