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
    /// `SmolLM2-135M-Instruct.Q4_1`).
    pub fn from_file_name(name: &str) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_id_strips_suffix_and_matches_both_forms() {
        let id = ModelId::from_file_name("SmolLM2-135M-Instruct.Q4_1.gguf");
        assert_eq!(id.as_str(), "SmolLM2-135M-Instruct.Q4_1");
        assert!(id.matches("SmolLM2-135M-Instruct.Q4_1"));
        assert!(id.matches("SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert!(!id.matches("SmolLM2"));
    }
}
