//! OpenAI's embeddings API (`POST /v1/embeddings`): the request body (`input` as a string, an
//! array of strings, an array of token ids or an array of token-id arrays), its validation
//! into [`EmbeddingRequest`], and the response with vectors as floats or base64 (little-endian
//! `f32`, as OpenAI encodes them).

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::limits::MAX_EMBEDDING_INPUTS;
use crate::openai::RequestError;

/// `input` as it arrives: JSON decides which of OpenAI's four shapes it is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum WireInput {
    One(String),
    Many(Vec<String>),
    Tokens(Vec<i64>),
    ManyTokens(Vec<Vec<i64>>),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EmbeddingBody {
    #[serde(default)]
    pub model: Option<String>,
    pub input: serde_json::Value,
    #[serde(default)]
    pub encoding_format: Option<String>,
    #[serde(default)]
    pub dimensions: Option<i64>,
}

/// One input, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Text(String),
    Tokens(Vec<u32>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

/// A validated embeddings request.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingRequest {
    pub model: Option<String>,
    pub inputs: Vec<Input>,
    pub encoding: Encoding,
    /// The vector length asked for, when given (a node serves only its model's own length).
    pub dimensions: Option<u32>,
}

impl EmbeddingBody {
    pub fn validate(self) -> Result<EmbeddingRequest, RequestError> {
        let bad = |message: String| RequestError {
            message,
            param: Some("input".into()),
        };
        let wire: WireInput = serde_json::from_value(self.input).map_err(|_| {
            bad("input must be a string, an array of strings, an array of token ids or an array of token-id arrays".into())
        })?;
        let tokens = |ids: Vec<i64>, at: usize| -> Result<Input, RequestError> {
            if ids.is_empty() {
                return Err(bad(format!("input[{at}] is empty")));
            }
            ids.into_iter()
                .map(|id| {
                    u32::try_from(id).map_err(|_| {
                        bad(format!(
                            "input[{at}] has the token id {id}, which is not a token"
                        ))
                    })
                })
                .collect::<Result<Vec<u32>, _>>()
                .map(Input::Tokens)
        };
        let inputs: Vec<Input> = match wire {
            WireInput::One(s) => vec![Input::Text(s)],
            WireInput::Many(v) => v.into_iter().map(Input::Text).collect(),
            WireInput::Tokens(ids) => vec![tokens(ids, 0)?],
            WireInput::ManyTokens(v) => v
                .into_iter()
                .enumerate()
                .map(|(i, ids)| tokens(ids, i))
                .collect::<Result<_, _>>()?,
        };
        if inputs.is_empty() {
            return Err(bad("input must not be an empty array".into()));
        }
        if inputs.len() > MAX_EMBEDDING_INPUTS {
            return Err(bad(format!(
                "input has {} items; at most {MAX_EMBEDDING_INPUTS} are allowed",
                inputs.len()
            )));
        }
        if let Some(i) = inputs
            .iter()
            .position(|x| matches!(x, Input::Text(s) if s.is_empty()))
        {
            return Err(bad(format!("input[{i}] is an empty string")));
        }
        let encoding = match self.encoding_format.as_deref() {
            None | Some("float") => Encoding::Float,
            Some("base64") => Encoding::Base64,
            Some(other) => {
                return Err(RequestError {
                    message: format!("encoding_format must be 'float' or 'base64', got '{other}'"),
                    param: Some("encoding_format".into()),
                })
            }
        };
        let dimensions = match self.dimensions {
            None => None,
            Some(d) => Some(
                u32::try_from(d)
                    .ok()
                    .filter(|d| *d > 0)
                    .ok_or(RequestError {
                        message: format!("dimensions must be a positive integer, got {d}"),
                        param: Some("dimensions".into()),
                    })?,
            ),
        };
        Ok(EmbeddingRequest {
            model: self.model,
            inputs,
            encoding,
            dimensions,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Response

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingList {
    pub object: &'static str,
    pub data: Vec<EmbeddingItem>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingItem {
    pub object: &'static str,
    pub embedding: Vector,
    pub index: usize,
}

/// A vector as floats or as base64 of its little-endian `f32` bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

impl Vector {
    pub fn encode(v: Vec<f32>, encoding: Encoding) -> Self {
        match encoding {
            Encoding::Float => Self::Float(v),
            Encoding::Base64 => {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Self::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EmbeddingUsage {
    pub prompt_tokens: u32,
    pub total_tokens: u32,
}

impl EmbeddingList {
    pub fn new(model: String, vectors: Vec<Vec<f32>>, encoding: Encoding, tokens: u32) -> Self {
        Self {
            object: "list",
            data: vectors
                .into_iter()
                .enumerate()
                .map(|(index, v)| EmbeddingItem {
                    object: "embedding",
                    embedding: Vector::encode(v, encoding),
                    index,
                })
                .collect(),
            model,
            usage: EmbeddingUsage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validate(v: serde_json::Value) -> Result<EmbeddingRequest, RequestError> {
        serde_json::from_value::<EmbeddingBody>(v)
            .unwrap()
            .validate()
    }

    #[test]
    fn every_input_shape_is_read() {
        let r = validate(json!({"model": "m", "input": "hello"})).unwrap();
        assert_eq!(r.inputs, vec![Input::Text("hello".into())]);
        assert_eq!(r.encoding, Encoding::Float);
        let r = validate(json!({"input": ["a", "b"], "encoding_format": "base64"})).unwrap();
        assert_eq!(r.inputs.len(), 2);
        assert_eq!(r.encoding, Encoding::Base64);
        let r = validate(json!({"input": [1, 2, 3]})).unwrap();
        assert_eq!(r.inputs, vec![Input::Tokens(vec![1, 2, 3])]);
        let r = validate(json!({"input": [[1], [2, 3]]})).unwrap();
        assert_eq!(r.inputs[1], Input::Tokens(vec![2, 3]));
    }

    #[test]
    fn bad_inputs_name_their_field() {
        for bad in [
            json!({"input": []}),
            json!({"input": ""}),
            json!({"input": ["a", ""]}),
            json!({"input": [[]]}),
            json!({"input": [-1]}),
            json!({"input": 5}),
            json!({"input": [1, "a"]}),
            json!({"input": {"text": "a"}}),
        ] {
            let e = validate(bad.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("input"), "{bad}: {e:?}");
        }
        let e = validate(json!({"input": "a", "encoding_format": "int8"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("encoding_format"));
        let e = validate(json!({"input": "a", "dimensions": 0})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("dimensions"));
        let many = vec!["x"; MAX_EMBEDDING_INPUTS + 1];
        assert!(validate(json!({"input": many})).is_err());
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let list = EmbeddingList::new("m".into(), vec![vec![1.0, -0.5]], Encoding::Base64, 3);
        let v = serde_json::to_value(&list).unwrap();
        let text = v["data"][0]["embedding"].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap();
        assert_eq!(
            bytes,
            [1.0f32.to_le_bytes(), (-0.5f32).to_le_bytes()].concat()
        );
        assert_eq!(v["usage"], json!({"prompt_tokens": 3, "total_tokens": 3}));
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["object"], "embedding");
        assert_eq!(v["data"][0]["index"], 0);
    }
}
