//! Ollama's model listings, from what the route serves so that `/api/tags` and `/v1/models`
//! agree: `/api/tags` (every model this node answers for), `/api/ps` (the model loaded here),
//! `/api/show` (GGUF metadata, template, the parameters requests default to), `/api/version`;
//! and `/api/pull` and `/api/delete`, refused with the reason until downloads exist. A model's
//! `digest` is the SHA-256 of its file, computed once per file (the first listing waits for it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hearth_engine::ModelInfo;
use hearth_protocol::ollama::{
    ollama_defaults, parse_body, DeleteBody, ModelDetails, PsModel, PsResponse, PullBody, ShowBody,
    ShowResponse, TagsModel, TagsResponse, VersionResponse,
};
use hearth_protocol::ModelId;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tokio::sync::OnceCell;

use super::chat::{read_body, resolve};
use super::{error, Reply};
use crate::server::AppState;

/// What `/api/ps` says about when a model unloads: models stay loaded until the UI unloads
/// them, so never.
const NEVER: &str = "9999-12-31T23:59:59Z";

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn rfc3339(t: Option<SystemTime>) -> String {
    humantime::format_rfc3339_seconds(t.unwrap_or(SystemTime::UNIX_EPOCH)).to_string()
}

/// The file's SHA-256 (hex), computed once per file (by path, size and modification time, so
/// a replaced file is hashed again) off the runtime's threads; callers asking while it is
/// computed wait for the same result. `""` when the file cannot be read.
async fn digest(path: &Path) -> String {
    type Key = (PathBuf, u64, Option<SystemTime>);
    static DIGESTS: OnceLock<Mutex<HashMap<Key, Arc<OnceCell<String>>>>> = OnceLock::new();
    let Ok(meta) = std::fs::metadata(path) else {
        return String::new();
    };
    let key = (path.to_owned(), meta.len(), meta.modified().ok());
    let cell = match DIGESTS.get_or_init(Mutex::default).lock() {
        Ok(mut known) => known.entry(key).or_default().clone(),
        Err(_) => return String::new(),
    };
    let path = path.to_owned();
    let hashed = cell
        .get_or_try_init(|| async move {
            tokio::task::spawn_blocking(move || -> std::io::Result<String> {
                let mut file = std::fs::File::open(&path)?;
                let mut hasher = Sha256::new();
                std::io::copy(&mut file, &mut hasher)?;
                Ok(hex::encode(hasher.finalize()))
            })
            .await
            .map_err(std::io::Error::other)?
        })
        .await;
    match hashed {
        Ok(d) => d.clone(),
        Err(e) => {
            tracing::warn!(error = %e, "model digest failed");
            String::new()
        }
    }
}

fn details(local: Option<&ModelInfo>) -> ModelDetails {
    match local {
        Some(info) => ModelDetails::gguf(
            info.gguf.architecture.clone(),
            info.gguf.size_label.clone(),
            info.gguf.quantization.clone(),
        ),
        // Served by a peer or worker: nothing known but its name.
        None => ModelDetails::gguf("", None, None),
    }
}

/// This node's own model, when it is the one named `id`.
fn local(state: &AppState, id: &ModelId) -> Option<Arc<ModelInfo>> {
    state.router.host().model().filter(|i| &i.id == id)
}

pub(crate) async fn tags(State(state): State<Arc<AppState>>) -> Json<TagsResponse> {
    let mut models = Vec::new();
    for id in state.router.models() {
        let info = local(&state, &id);
        models.push(TagsModel {
            name: id.to_string(),
            model: id.to_string(),
            modified_at: rfc3339(info.as_ref().and_then(|i| modified(&i.path))),
            size: info.as_ref().map_or(0, |i| i.size_bytes),
            digest: match &info {
                Some(i) => digest(&i.path).await,
                None => String::new(),
            },
            details: details(info.as_deref()),
        });
    }
    Json(TagsResponse { models })
}

pub(crate) async fn ps(State(state): State<Arc<AppState>>) -> Json<PsResponse> {
    let mut models = Vec::new();
    if let Some(info) = state.router.host().model() {
        models.push(PsModel {
            name: info.id.to_string(),
            model: info.id.to_string(),
            size: info.size_bytes,
            digest: digest(&info.path).await,
            details: details(Some(&info)),
            expires_at: NEVER.into(),
            size_vram: 0,
            context_length: Some(info.ctx_per_slot),
        });
    }
    Json(PsResponse { models })
}

pub(crate) async fn version() -> Json<VersionResponse> {
    Json(VersionResponse {
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// The defaults a request gets, as Modelfile `PARAMETER` lines.
fn parameters(info: Option<&ModelInfo>) -> String {
    let d = ollama_defaults();
    let mut lines = vec![
        format!("temperature {}", d.temperature),
        format!("top_k {}", d.top_k),
        format!("top_p {}", d.top_p),
        format!("repeat_penalty {}", d.repetition_penalty),
    ];
    if let Some(info) = info {
        lines.push(format!("num_ctx {}", info.ctx_per_slot));
    }
    lines.join("\n")
}

pub(crate) async fn show(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ShowResponse>, Reply> {
    let body = read_body(body)?;
    let wire: ShowBody = parse_body(&body)?;
    let (target, _) = resolve(&state, &wire.model_name()?).await?;
    let info = target.local.as_deref();
    let template = info
        .and_then(|i| i.gguf.chat_template.clone())
        .unwrap_or_default();
    let parameters = parameters(info);
    let mut modelfile = format!(
        "# Modelfile of {}, as Hearth serves it\nFROM {}\n",
        target.model,
        info.map_or_else(
            || target.model.to_string(),
            |i| i.path.display().to_string()
        )
    );
    if !template.is_empty() {
        modelfile.push_str(&format!("TEMPLATE \"\"\"{template}\"\"\"\n"));
    }
    for p in parameters.lines() {
        modelfile.push_str(&format!("PARAMETER {p}\n"));
    }
    let mut model_info = Map::new();
    let mut capabilities = vec!["completion".to_owned()];
    if let Some(i) = info {
        let arch = &i.gguf.architecture;
        model_info.insert("general.architecture".into(), Value::from(arch.clone()));
        model_info.insert("general.parameter_count".into(), Value::from(i.n_params));
        if let Some(name) = &i.gguf.name {
            model_info.insert("general.name".into(), Value::from(name.clone()));
        }
        if let Some(n) = i.gguf.block_count {
            model_info.insert(format!("{arch}.block_count"), Value::from(n));
        }
        model_info.insert(format!("{arch}.context_length"), Value::from(i.n_ctx_train));
        // Embeddings are made by this node's own model (mean pooling when it names none).
        capabilities.push("embedding".into());
    }
    Ok(Json(ShowResponse {
        modelfile,
        parameters,
        template,
        details: details(info),
        model_info,
        capabilities,
        modified_at: rfc3339(info.and_then(|i| modified(&i.path))),
    }))
}

/// Where GGUF files go, for the refusals below.
fn not_yet(state: &AppState, what: &str) -> Reply {
    Reply(error(
        StatusCode::NOT_IMPLEMENTED,
        format!(
            "{what} is not supported by Hearth yet: put GGUF files in {} and load them in Hearth's UI",
            state.models_dir.display()
        ),
    ))
}

pub(crate) async fn pull(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Reply {
    let parsed = read_body(body).and_then(|b| parse_body::<PullBody>(&b));
    match parsed.and_then(|p| p.model_name()) {
        Ok(_) => not_yet(&state, "downloading models"),
        Err(e) => Reply(e),
    }
}

pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Reply {
    let parsed = read_body(body).and_then(|b| parse_body::<DeleteBody>(&b));
    let name = match parsed.and_then(|p| p.model_name()) {
        Ok(name) => name,
        Err(e) => return Reply(e),
    };
    let served = state
        .router
        .models()
        .iter()
        .any(|m| m.matches(super::model_name(&name)));
    if !served {
        return Reply(error(
            StatusCode::NOT_FOUND,
            format!("model '{name}' not found"),
        ));
    }
    not_yet(&state, "deleting models")
}
