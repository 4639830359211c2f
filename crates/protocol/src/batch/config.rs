//! `generation_config` and the node's defaults for it: how a message's sampling fields are
//! read field by field ([`GenerationConfig`]) and validated on top of [`BatchDefaults`] into the
//! engine's [`SamplingParams`] (greedy for `do_sample: false`, no beam search, capped length).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{field, kind};
use crate::generation::{ParamError, RawParams, SamplingParams};

/// `generation_config` values used when a message leaves a key out (NOTES.md), overridable
/// in the node's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchDefaults {
    pub num_beams: i64,
    pub do_sample: bool,
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i64,
    /// Capped at the model's context per request.
    pub max_new_tokens: i64,
    pub repetition_penalty: f64,
    pub length_penalty: f64,
}

impl Default for BatchDefaults {
    fn default() -> Self {
        Self {
            num_beams: 1,
            do_sample: true,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 50,
            max_new_tokens: 4096,
            repetition_penalty: 1.0,
            length_penalty: 1.0,
        }
    }
}

impl BatchDefaults {
    /// Whether a message that leaves every key out could run: checked when the defaults are
    /// set, so a bad default fails the node's start, not every later batch.
    pub fn validate(&self) -> Result<(), ParamError> {
        GenerationConfig::default().validate(self, None).map(|_| ())
    }
}

/// `generation_config` as sent, with the widest types so that out-of-range values reach
/// validation and get a message naming the field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_beams: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub do_sample: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// Accepted and unused: it only changes how beam search ranks beams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_penalty: Option<f64>,
    /// Hearth extension: a fixed sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

impl GenerationConfig {
    /// Read `generation_config` field by field, so a wrong type names its field.
    pub(super) fn from_json(value: &Value) -> Result<Self, String> {
        let map = match value {
            Value::Null => return Ok(Self::default()),
            Value::Object(map) => map,
            other => {
                return Err(format!(
                    "generation_config must be an object, got {}",
                    kind(other)
                ))
            }
        };
        let p = "generation_config.";
        Ok(Self {
            num_beams: field(map, "num_beams", p)?,
            do_sample: field(map, "do_sample", p)?,
            temperature: field(map, "temperature", p)?,
            top_p: field(map, "top_p", p)?,
            top_k: field(map, "top_k", p)?,
            max_new_tokens: field(map, "max_new_tokens", p)?,
            repetition_penalty: field(map, "repetition_penalty", p)?,
            length_penalty: field(map, "length_penalty", p)?,
            seed: field(map, "seed", p)?,
        })
    }

    /// Validate on top of `defaults` into the engine's sampling parameters. `max_context`
    /// (the model's context per request, when known) caps `max_new_tokens`; NOTES.md caps
    /// rather than refuses, because clients of the reference send 4096 routinely.
    pub fn validate(
        &self,
        defaults: &BatchDefaults,
        max_context: Option<u32>,
    ) -> Result<SamplingParams, ParamError> {
        let num_beams = self.num_beams.unwrap_or(defaults.num_beams);
        if num_beams < 1 {
            return Err(ParamError::new(
                "num_beams",
                format!("num_beams must be at least 1, got {num_beams}"),
            ));
        }
        if num_beams > 1 {
            return Err(ParamError::new(
                "num_beams",
                format!("beam search is not supported: set num_beams to 1 (got {num_beams})"),
            ));
        }
        let mut max_new_tokens = self.max_new_tokens.unwrap_or(defaults.max_new_tokens);
        if max_new_tokens < 1 {
            return Err(ParamError::new(
                "max_new_tokens",
                format!("max_new_tokens must be at least 1, got {max_new_tokens}"),
            ));
        }
        if let Some(ctx) = max_context {
            max_new_tokens = max_new_tokens.min(i64::from(ctx));
        }
        let raw = RawParams {
            temperature: Some(self.temperature.unwrap_or(defaults.temperature)),
            top_p: Some(self.top_p.unwrap_or(defaults.top_p)),
            top_k: Some(self.top_k.unwrap_or(defaults.top_k)),
            repetition_penalty: Some(
                self.repetition_penalty
                    .unwrap_or(defaults.repetition_penalty),
            ),
            seed: self.seed,
            max_tokens: Some(max_new_tokens),
            ..RawParams::default()
        };
        let mut params = raw
            .validate(&SamplingParams::default(), max_context)
            .map_err(|e| {
                // Name the field as this protocol spells it.
                if e.param == "max_tokens" {
                    ParamError::new(
                        "max_new_tokens",
                        e.message.replace("max_tokens", "max_new_tokens"),
                    )
                } else {
                    e
                }
            })?;
        if !self.do_sample.unwrap_or(defaults.do_sample) {
            params.temperature = 0.0;
        }
        Ok(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: Value) -> GenerationConfig {
        GenerationConfig::from_json(&v).unwrap()
    }

    #[test]
    fn do_sample_false_is_greedy() {
        let p = config(json!({"do_sample": false, "temperature": 0.9}))
            .validate(&BatchDefaults::default(), Some(512))
            .unwrap();
        assert!(p.is_greedy());
        let p = config(json!({"temperature": 0}))
            .validate(&BatchDefaults::default(), Some(512))
            .unwrap();
        assert!(p.is_greedy());
    }

    #[test]
    fn beam_search_is_refused_and_length_penalty_accepted() {
        let e = config(json!({"num_beams": 4}))
            .validate(&BatchDefaults::default(), None)
            .unwrap_err();
        assert_eq!(e.param, "num_beams");
        assert!(e.message.contains("beam search is not supported"), "{e}");
        let e = config(json!({"num_beams": 0}))
            .validate(&BatchDefaults::default(), None)
            .unwrap_err();
        assert_eq!(e.param, "num_beams");
        assert!(config(json!({"num_beams": 1, "length_penalty": 2.5}))
            .validate(&BatchDefaults::default(), None)
            .is_ok());
        assert!(config(json!({"length_penalty": -3}))
            .validate(&BatchDefaults::default(), None)
            .is_ok());
    }

    #[test]
    fn max_new_tokens_is_capped_at_the_context_and_must_be_positive() {
        let d = BatchDefaults::default();
        let p = config(json!({})).validate(&d, Some(1024)).unwrap();
        assert_eq!(p.max_tokens, Some(1024), "the 4096 default is capped");
        let p = config(json!({"max_new_tokens": 100000}))
            .validate(&d, Some(1024))
            .unwrap();
        assert_eq!(p.max_tokens, Some(1024));
        let p = config(json!({"max_new_tokens": 7}))
            .validate(&d, Some(1024))
            .unwrap();
        assert_eq!(p.max_tokens, Some(7));
        for bad in [0, -5] {
            let e = config(json!({ "max_new_tokens": bad }))
                .validate(&d, Some(1024))
                .unwrap_err();
            assert_eq!(e.param, "max_new_tokens");
            assert!(e.message.contains("max_new_tokens"), "{e}");
        }
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        for (v, name) in [
            (json!({"temperature": -1}), "temperature"),
            (json!({"top_p": 0}), "top_p"),
            (json!({"top_p": 1.5}), "top_p"),
            (json!({"top_k": -1}), "top_k"),
            (json!({"repetition_penalty": 0}), "repetition_penalty"),
            (json!({"seed": -2}), "seed"),
        ] {
            let e = config(v.clone())
                .validate(&BatchDefaults::default(), Some(512))
                .unwrap_err();
            assert_eq!(e.param, name, "{v}: {e}");
        }
    }

    #[test]
    fn node_defaults_override_the_notes_defaults() {
        let d = BatchDefaults {
            do_sample: false,
            max_new_tokens: 64,
            ..BatchDefaults::default()
        };
        let p = config(json!({})).validate(&d, Some(1024)).unwrap();
        assert!(p.is_greedy());
        assert_eq!(p.max_tokens, Some(64));
        let p = config(json!({"do_sample": true, "max_new_tokens": 10}))
            .validate(&d, Some(1024))
            .unwrap();
        assert!(!p.is_greedy());
        assert_eq!(p.max_tokens, Some(10));
        let d: BatchDefaults = serde_json::from_value(json!({"top_k": 20})).unwrap();
        assert_eq!(d.top_k, 20);
        assert_eq!(d.max_new_tokens, 4096);
    }
}
