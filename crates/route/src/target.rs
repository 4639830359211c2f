//! What a model name means on this node ([`Target`]: the model, and this node's copy of it
//! when it is loaded here) and why a name cannot be served now ([`ResolveError`]).

use std::sync::Arc;

use hearth_engine::{ModelInfo, SubmitError};
use hearth_protocol::ModelId;

/// What a model name means on this node.
#[derive(Debug, Clone)]
pub struct Target {
    /// The model as this node names it.
    pub model: ModelId,
    /// This node's model, when it is the one named (its context, template and tokenizer).
    pub local: Option<Arc<ModelInfo>>,
}

impl Target {
    /// This node's model, loaded.
    pub fn local(info: Arc<ModelInfo>) -> Self {
        Self {
            model: info.id.clone(),
            local: Some(info),
        }
    }

    /// Tokens of context per request, when this node knows it (its own model).
    pub fn ctx(&self) -> Option<u32> {
        self.local.as_ref().map(|i| i.context)
    }
}

/// Why a model name cannot be served now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    /// Nothing here serves that name: each door reports it in its own shape.
    #[error("model '{requested}' is not available on this node; it serves {}", served_list(.served))]
    Unknown {
        requested: String,
        served: Vec<ModelId>,
    },
    /// No model, one still loading, one that failed, or shutting down.
    #[error(transparent)]
    Engine(#[from] SubmitError),
}

fn served_list(served: &[ModelId]) -> String {
    if served.is_empty() {
        return "no model".into();
    }
    served
        .iter()
        .map(|m| format!("'{m}'"))
        .collect::<Vec<_>>()
        .join(", ")
}
