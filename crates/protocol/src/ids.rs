//! Newtype identifiers, so a request id can never be passed where a model id belongs.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One generation, unique within a node's lifetime. Rendered with a door-specific prefix
/// (`gen_`, `chatcmpl-`, `cmpl-`) by the door that created it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A model as clients name it: the GGUF file name without `.gguf`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ModelId(pub String);

impl ModelId {
    /// The id of a GGUF file name (`SmolLM2-135M-Instruct.Q4_1.gguf` ->
    /// `SmolLM2-135M-Instruct.Q4_1`); a split model's shard names the model (`big-00001-of-00003.gguf`
    /// -> `big`).
    pub fn from_file_name(name: &str) -> Self {
        if let Some((model, _, _)) = split_shard(name) {
            return Self(model.to_owned());
        }
        Self(name.strip_suffix(".gguf").unwrap_or(name).to_owned())
    }

    /// Whether a client's name for a model refers to this one. Clients write the id with or
    /// without the `.gguf` suffix.
    pub fn matches(&self, requested: &str) -> bool {
        requested == self.0 || requested.strip_suffix(".gguf") == Some(self.0.as_str())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The file name of shard `index` of `count` of split model `name` (as [`split_shard`] reads).
pub fn shard_file(name: &str, index: u32, count: u32) -> String {
    format!("{name}-{index:05}-of-{count:05}.gguf")
}

/// The file a model is named by: a split model's first shard for any of its shards, else
/// `file` itself.
pub fn first_file(file: &str) -> String {
    match split_shard(file) {
        Some((name, _, count)) => shard_file(name, 1, count),
        None => file.to_owned(),
    }
}

/// A shard of a split model, named as llama.cpp's `gguf-split` names them:
/// `NAME-00001-of-00003.gguf` -> (`NAME`, 1, 3).
pub fn split_shard(file: &str) -> Option<(&str, u32, u32)> {
    let stem = file.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (name, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(count) || name.is_empty() {
        return None;
    }
    let (index, count) = (index.parse().ok()?, count.parse().ok()?);
    (1..=count).contains(&index).then_some((name, index, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_model_is_named_by_its_first_shard() {
        assert_eq!(
            first_file("big-00003-of-00005.gguf"),
            "big-00001-of-00005.gguf"
        );
        assert_eq!(
            first_file("big-00001-of-00005.gguf"),
            "big-00001-of-00005.gguf"
        );
        assert_eq!(first_file("small.gguf"), "small.gguf");
    }

    #[test]
    fn split_shards_are_read_like_llama_cpp() {
        assert_eq!(split_shard("big-00001-of-00003.gguf"), Some(("big", 1, 3)));
        assert_eq!(split_shard("a-b-00002-of-00002.gguf"), Some(("a-b", 2, 2)));
        assert_eq!(split_shard("big-00004-of-00003.gguf"), None);
        assert_eq!(split_shard("big-1-of-3.gguf"), None);
        assert_eq!(split_shard("plain.gguf"), None);
        assert_eq!(
            ModelId::from_file_name("big-00001-of-00003.gguf").as_str(),
            "big"
        );
    }

    #[test]
    fn model_id_strips_suffix_and_matches_both_forms() {
        let id = ModelId::from_file_name("SmolLM2-135M-Instruct.Q4_1.gguf");
        assert_eq!(id.as_str(), "SmolLM2-135M-Instruct.Q4_1");
        assert!(id.matches("SmolLM2-135M-Instruct.Q4_1"));
        assert!(id.matches("SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert!(!id.matches("SmolLM2"));
    }
}
