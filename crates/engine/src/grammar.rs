//! Constrained output: a JSON format or JSON schema turned into a GBNF grammar by llama.cpp's
//! own converter (`json_schema_to_grammar`, from its `common` helpers), and a grammar checked
//! against a model's vocabulary before a request is queued, so a bad one is the caller's error
//! and never a failure on the engine thread.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;

/// The start symbol of every grammar Hearth builds.
pub(crate) const ROOT: &str = "root";

/// Why no grammar could be made or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("the JSON schema cannot be turned into a grammar: {0}")]
    Schema(String),
    #[error("the grammar is not valid for this model: {0}")]
    Invalid(String),
}

/// Any JSON object: what Ollama's `format: "json"` and OpenAI's `json_object` ask for (the
/// model's answer is one object, as llama.cpp's own `json.gbnf` root is).
pub fn json_object() -> Result<String, GrammarError> {
    from_json_schema(&serde_json::json!({"type": "object"}))
}

/// The grammar of the JSON values `schema` accepts.
pub fn from_json_schema(schema: &serde_json::Value) -> Result<String, GrammarError> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err(GrammarError::Schema("a JSON schema is an object".into()));
    }
    // llama.cpp's converter throws (reported as an error code) on what it cannot express.
    llama_cpp_2::json_schema_to_grammar(&schema.to_string())
        .map_err(|e| GrammarError::Schema(e.to_string()))
}

/// A sampler that enforces `grammar` for `model`, from the first token or (lazy) from the
/// first of `triggers` the model writes.
pub(crate) fn sampler(
    model: &LlamaModel,
    grammar: &str,
    triggers: &[String],
) -> Result<LlamaSampler, GrammarError> {
    let made = if triggers.is_empty() {
        LlamaSampler::grammar(model, grammar, ROOT)
    } else {
        LlamaSampler::grammar_lazy(model, grammar, ROOT, triggers, &[])
    };
    made.map_err(|e| GrammarError::Invalid(e.to_string()))
}
