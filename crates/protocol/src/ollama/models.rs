//! Ollama's model listings: `/api/tags` (models on disk), `/api/ps` (models loaded),
//! `/api/show` (one model), and the `details` object they share, which the signed-challenge
//! socket's `models_result` also sends ([`crate::auth_ws::server::ModelEntry`]).

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

/// A model's `details`. Hearth serves GGUF files directly, so a model has no parent and one
/// family: on the wire `parent_model` is `""` and `families` is `[family]`, and an unknown
/// size or quantization is `""`, as in Ollama's answers.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelDetails {
    pub format: &'static str,
    pub family: String,
    pub parameter_size: Option<String>,
    pub quantization_level: Option<String>,
}

impl ModelDetails {
    /// Details of a GGUF model from its header's architecture, size label and quantization.
    pub fn gguf(
        family: impl Into<String>,
        parameter_size: Option<String>,
        quantization_level: Option<String>,
    ) -> Self {
        Self {
            format: "gguf",
            family: family.into(),
            parameter_size,
            quantization_level,
        }
    }
}

impl Serialize for ModelDetails {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            parent_model: &'a str,
            format: &'a str,
            family: &'a str,
            families: Vec<&'a str>,
            parameter_size: &'a str,
            quantization_level: &'a str,
        }
        Wire {
            parent_model: "",
            format: self.format,
            family: &self.family,
            families: if self.family.is_empty() {
                Vec::new()
            } else {
                vec![self.family.as_str()]
            },
            parameter_size: self.parameter_size.as_deref().unwrap_or(""),
            quantization_level: self.quantization_level.as_deref().unwrap_or(""),
        }
        .serialize(s)
    }
}

/// `/api/tags`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TagsResponse {
    pub models: Vec<TagsModel>,
}

/// One model of `/api/tags`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TagsModel {
    pub name: String,
    pub model: String,
    /// RFC 3339.
    pub modified_at: String,
    /// Bytes on disk.
    pub size: u64,
    /// Hex SHA-256 of the model.
    pub digest: String,
    pub details: ModelDetails,
}

/// `/api/ps`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PsResponse {
    pub models: Vec<PsModel>,
}

/// One loaded model of `/api/ps`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PsModel {
    pub name: String,
    pub model: String,
    /// Bytes in memory.
    pub size: u64,
    pub digest: String,
    pub details: ModelDetails,
    /// RFC 3339: when the model unloads unless used again.
    pub expires_at: String,
    /// Of `size`, the bytes in GPU memory.
    pub size_vram: u64,
    /// The context it was loaded with (Ollama sends it though its document does not list it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u32>,
}

/// `/api/show`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShowResponse {
    pub modelfile: String,
    /// Modelfile `PARAMETER`s, one `name value` per line.
    pub parameters: String,
    /// The chat template.
    pub template: String,
    pub details: ModelDetails,
    /// GGUF metadata by key (`general.architecture`, `llama.context_length`, ...).
    pub model_info: Map<String, Value>,
    /// `completion`, `embedding`, ...
    pub capabilities: Vec<String>,
    pub modified_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn details() -> ModelDetails {
        ModelDetails::gguf("llama", Some("3.2B".into()), Some("Q4_K_M".into()))
    }

    fn details_json() -> Value {
        json!({"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
               "parameter_size": "3.2B", "quantization_level": "Q4_K_M"})
    }

    #[test]
    fn tags_match_the_docs() {
        let tags = TagsResponse {
            models: vec![TagsModel {
                name: "llama3.2:latest".into(),
                model: "llama3.2:latest".into(),
                modified_at: "2025-05-04T17:37:44.706015396-07:00".into(),
                size: 2_019_393_189,
                digest: "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72".into(),
                details: details(),
            }],
        };
        assert_eq!(
            serde_json::to_value(&tags).unwrap(),
            json!({"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest",
                "modified_at": "2025-05-04T17:37:44.706015396-07:00", "size": 2019393189u64,
                "digest": "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
                "details": details_json()}]})
        );
    }

    #[test]
    fn unknown_details_are_empty_strings() {
        let d = ModelDetails::gguf("", None, None);
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            json!({"parent_model": "", "format": "gguf", "family": "", "families": [],
                   "parameter_size": "", "quantization_level": ""})
        );
    }

    #[test]
    fn ps_matches_the_docs() {
        let mut ps = PsModel {
            name: "mistral:latest".into(),
            model: "mistral:latest".into(),
            size: 5_137_025_024,
            digest: "2ae6f6dd7a3dd734790bbbf58b8909a606e0e7e97e94b7604e0aa7ae4490e6d8".into(),
            details: details(),
            expires_at: "2024-06-04T14:38:31.83753-07:00".into(),
            size_vram: 5_137_025_024,
            context_length: None,
        };
        let want = json!({"name": "mistral:latest", "model": "mistral:latest",
            "size": 5137025024u64,
            "digest": "2ae6f6dd7a3dd734790bbbf58b8909a606e0e7e97e94b7604e0aa7ae4490e6d8",
            "details": details_json(), "expires_at": "2024-06-04T14:38:31.83753-07:00",
            "size_vram": 5137025024u64});
        assert_eq!(
            serde_json::to_value(PsResponse {
                models: vec![ps.clone()]
            })
            .unwrap(),
            json!({"models": [want]})
        );
        ps.context_length = Some(4096);
        assert_eq!(serde_json::to_value(&ps).unwrap()["context_length"], 4096);
    }

    #[test]
    fn show_matches_the_docs() {
        let mut info = Map::new();
        info.insert("general.architecture".into(), json!("llama"));
        info.insert("llama.context_length".into(), json!(8192));
        let show = ShowResponse {
            modelfile: "FROM /models/llama.gguf".into(),
            parameters: "num_keep                       24".into(),
            template: "{{ .Prompt }}".into(),
            details: details(),
            model_info: info,
            capabilities: vec!["completion".into()],
            modified_at: "2025-05-04T17:37:44.706015396-07:00".into(),
        };
        assert_eq!(
            serde_json::to_value(&show).unwrap(),
            json!({"modelfile": "FROM /models/llama.gguf",
                "parameters": "num_keep                       24", "template": "{{ .Prompt }}",
                "details": details_json(),
                "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
                "capabilities": ["completion"],
                "modified_at": "2025-05-04T17:37:44.706015396-07:00"})
        );
    }
}
