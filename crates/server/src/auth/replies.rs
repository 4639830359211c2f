//! What the signed-challenge door answers with: its `error` messages, echoed ids, the
//! sampling parameters a `generate` asks for (the door's defaults under the client's
//! options), `models_result` entries in Ollama's shape, and submit refusals.

use hearth_engine::SubmitError;
use hearth_protocol::auth_ws::server::{
    ErrorCode, ErrorMessage, ModelDetails, ModelEntry, ServerMessage,
};
use hearth_protocol::auth_ws::{GenerateOptions, WireId};
use hearth_protocol::SamplingParams;

use hearth_auth::limiter::retry_after_secs;
use hearth_route::ResolveError;

/// `max_tokens` when the client sends none (the document's default; capped at the context).
pub(super) const DEFAULT_MAX_TOKENS: u32 = 2048;

/// An `error` message's fields, for replies that add `retryAfter`.
pub(super) fn error_fields(
    code: ErrorCode,
    message: impl Into<String>,
    id: Option<&WireId>,
) -> ErrorMessage {
    ErrorMessage {
        error: message.into(),
        code,
        id: id.cloned(),
        retry_after: None,
    }
}

/// The sampling parameters of a `generate` message's options, on top of the door's defaults
/// (temperature 0.8, top_p 0.9, top_k 40, 2048 tokens capped at the context `ctx`).
pub(super) fn params_for(options: &GenerateOptions, ctx: u32) -> Result<SamplingParams, String> {
    let defaults = SamplingParams {
        temperature: 0.8,
        top_p: 0.9,
        top_k: 40,
        max_tokens: Some(DEFAULT_MAX_TOKENS.min(ctx.max(1))),
        ..SamplingParams::default()
    };
    let mut params = options
        .raw
        .validate(&defaults, Some(ctx))
        .map_err(|e| format!("options.{}: {}", e.param, e.message))?;
    if options.unlimited {
        params.max_tokens = None;
    }
    Ok(params)
}

/// One entry of `models_result`: Ollama's shape, as the reference server passes on
/// `/api/tags` and its client library reads `m.name` (NOTES.md); size, date and details for
/// this node's own model.
pub(super) fn model_entry(name: &str, local: Option<&hearth_engine::ModelInfo>) -> ModelEntry {
    ModelEntry {
        name: name.to_owned(),
        model: name.to_owned(),
        size: local.map(|info| info.size_bytes),
        modified_at: local.and_then(|info| {
            let modified = std::fs::metadata(&info.path)
                .and_then(|m| m.modified())
                .ok()?;
            Some(humantime::format_rfc3339_seconds(modified).to_string())
        }),
        details: local.map(|info| ModelDetails {
            format: "gguf",
            family: info.gguf.architecture.clone(),
            parameter_size: info.gguf.size_label.clone(),
            quantization_level: info.gguf.quantization.clone(),
        }),
    }
}

/// The door's error for a model name that cannot be served now.
pub(super) fn resolve_error(e: &ResolveError, id: &WireId) -> ServerMessage {
    match e {
        ResolveError::Unknown { requested, served } => {
            let served: Vec<String> = served.iter().map(|m| format!("'{m}'")).collect();
            let served = if served.is_empty() {
                "no model".to_owned()
            } else {
                served.join(", ")
            };
            ServerMessage::error(
                ErrorCode::InvalidModel,
                format!("model '{requested}' is not available on this node; it serves {served}"),
                Some(id),
            )
        }
        ResolveError::Engine(SubmitError::NoModel) => ServerMessage::error(
            ErrorCode::InvalidModel,
            "no model is loaded on this node",
            Some(id),
        ),
        ResolveError::Engine(SubmitError::LoadFailed { model, message }) => ServerMessage::error(
            ErrorCode::InternalError,
            format!("model {model} failed to load: {message}"),
            Some(id),
        ),
        ResolveError::Engine(e) => submit_error(e, id),
    }
}

/// The door's error for a request the engine did not accept.
pub(super) fn submit_error(e: &SubmitError, id: &WireId) -> ServerMessage {
    let code = match e {
        SubmitError::ModelLoading { .. } => ErrorCode::ModelLoading,
        SubmitError::LoadFailed { .. } | SubmitError::ShuttingDown => ErrorCode::InternalError,
        SubmitError::NoModel => ErrorCode::InvalidModel,
        SubmitError::ContextLengthExceeded { .. } | SubmitError::Prompt(_) => {
            ErrorCode::InvalidRequest
        }
        SubmitError::QueueFull { .. } => ErrorCode::RateLimited,
        SubmitError::Unavailable { .. } => ErrorCode::ModelLoading,
    };
    let retry_after = match e {
        SubmitError::QueueFull { retry_after, .. }
        | SubmitError::Unavailable { retry_after, .. } => Some(retry_after_secs(*retry_after)),
        _ => None,
    };
    ServerMessage::Error(ErrorMessage {
        retry_after,
        ..error_fields(code, e.to_string(), Some(id))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_protocol::auth_ws::{self, ClientMessage, Frame};
    use serde_json::{json, Value};

    fn options(v: Value) -> GenerateOptions {
        let text = json!({"type": "generate", "prompt": "x", "options": v}).to_string();
        match auth_ws::parse_text(&text) {
            Ok(Frame::One(ClientMessage::Generate(g))) => g.options,
            other => panic!("{other:?}"),
        }
    }

    /// The door's verdict on options: parse errors and validation errors alike.
    fn options_result(v: &Value) -> Result<SamplingParams, String> {
        let text = json!({"type": "generate", "prompt": "x", "options": v}).to_string();
        match auth_ws::parse_text(&text) {
            Ok(Frame::One(ClientMessage::Generate(g))) => params_for(&g.options, 1024),
            Err(e) => Err(e.message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_defaults_aliases_and_errors() {
        let p = params_for(&GenerateOptions::default(), 1024).unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k), (0.8, 0.9, 40));
        assert_eq!(
            p.max_tokens,
            Some(1024),
            "the default 2048 is capped at the context"
        );
        let p = params_for(&options(json!({"temperature": 0, "top_p": 0.5, "top_k": 3, "max_tokens": 7, "seed": 42, "stop": ["\n"]})), 1024)
        .unwrap();
        assert_eq!(p.temperature, 0.0);
        assert_eq!(p.max_tokens, Some(7));
        assert_eq!(p.seed, Some(42));
        assert_eq!(p.stop, vec!["\n".to_owned()]);
        let p = params_for(
            &options(json!({"num_predict": 5, "repeat_penalty": 1.1, "stop": "END"})),
            1024,
        )
        .unwrap();
        assert_eq!(p.max_tokens, Some(5));
        assert!((p.repetition_penalty - 1.1).abs() < 1e-6);
        assert_eq!(
            params_for(&options(json!({"num_predict": -1})), 1024)
                .unwrap()
                .max_tokens,
            None
        );
        assert_eq!(
            params_for(&options(json!({"max_tokens": 3.0})), 1024)
                .unwrap()
                .max_tokens,
            Some(3)
        );
        // Beyond the context: a ceiling, not an error.
        assert_eq!(
            options_result(&json!({"max_tokens": 5000}))
                .unwrap()
                .max_tokens,
            Some(1024)
        );
        for (bad, needle) in [
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"temperature": -1}), "temperature"),
            (json!({"top_k": 1.5}), "top_k"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"stop": [1]}), "stop"),
            (json!([1, 2]), "options"),
        ] {
            let e = options_result(&bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }
}
