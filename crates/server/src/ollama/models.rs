//! Ollama's model listings, from what the route serves so that `/api/tags` and `/v1/models`
//! agree: `/api/tags` (every model this node answers for), `/api/ps` (the model loaded here),
//! `/api/show` (GGUF metadata, template, the parameters requests default to), `/api/version`,
//! `/api/delete` (the models folder's file). A model's `digest` is the SHA-256 of its file,
//! computed once per file (a listing waits a moment for it), or an Ollama blob's name.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::Json;
use hearth_engine::ModelInfo;
use hearth_protocol::ollama::{
    ollama_defaults, parse_body, DeleteBody, ModelDetails, PsModel, PsResponse, ShowBody,
    ShowResponse, TagsModel, TagsResponse, VersionResponse,
};
use serde_json::{Map, Value};

use super::chat::{read_body, resolve};
use super::{error, Reply};
use crate::state::AppState;

/// What `/api/ps` says about a model that unloads only when the user unloads it.
const NEVER: &str = "9999-12-31T23:59:59Z";

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn rfc3339(t: Option<SystemTime>) -> String {
    humantime::format_rfc3339_seconds(t.unwrap_or(SystemTime::UNIX_EPOCH)).to_string()
}

/// How long `/api/tags` waits for a file's SHA-256 before answering without it (the hash goes
/// on in the background, so a later listing has it): a folder of big models is listed at once.
const DIGEST_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

async fn digest(state: &AppState, path: &Path) -> String {
    hearth_models::digest::sha256(&state.store, path, Some(DIGEST_WAIT)).await
}

/// A model's details from its GGUF header; served by a peer or worker, nothing but its name.
fn details(gguf: Option<&hearth_protocol::gguf::GgufInfo>) -> ModelDetails {
    match gguf {
        Some(g) => ModelDetails::gguf(
            g.architecture.clone(),
            g.size_label.clone(),
            g.quantization.clone(),
        ),
        None => ModelDetails::gguf("", None, None),
    }
}

pub(crate) async fn tags(State(state): State<Arc<AppState>>) -> Json<TagsResponse> {
    let registry = state.router.registry().clone();
    let files = tokio::task::spawn_blocking(move || registry.scan())
        .await
        .unwrap_or_default();
    let mut models = Vec::new();
    for id in state.router.models() {
        let loaded = state.router.host().model_info(&id);
        let file = files.iter().find(|f| f.id == id);
        let path = loaded
            .as_ref()
            .map(|i| i.path.clone())
            .or_else(|| file.map(|f| f.path.clone()));
        models.push(TagsModel {
            name: id.to_string(),
            model: id.to_string(),
            modified_at: rfc3339(path.as_deref().and_then(modified)),
            size: loaded
                .as_ref()
                .map(|i| i.size_bytes)
                .or(file.map(|f| f.size_bytes))
                .unwrap_or(0),
            digest: match &path {
                Some(p) => digest(&state, p).await,
                None => String::new(),
            },
            details: details(
                loaded
                    .as_ref()
                    .map(|i| &i.gguf)
                    .or(file.and_then(|f| f.gguf.as_ref())),
            ),
        });
    }
    Json(TagsResponse { models })
}

/// Every model loaded here, with when it unloads unless used.
pub(crate) async fn ps(State(state): State<Arc<AppState>>) -> Json<PsResponse> {
    let host = state.router.host();
    let mut models = Vec::new();
    for id in host.loaded_models() {
        let Some(info) = host.model_info(&id) else {
            continue;
        };
        let expires_at = match host.expires_in(&id) {
            Some(left) => SystemTime::now()
                .checked_add(left)
                .map_or_else(|| NEVER.into(), |t| rfc3339(Some(t))),
            None => NEVER.into(),
        };
        models.push(PsModel {
            name: info.id.to_string(),
            model: info.id.to_string(),
            size: info.size_bytes,
            digest: digest(&state, &info.path).await,
            details: details(Some(&info.gguf)),
            expires_at,
            // What `ollama ps` shows as the share on the GPU.
            size_vram: info.placement.vram_bytes,
            context_length: Some(info.context),
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
/// Ollama's sampling defaults, as `/api/show`'s parameter lines.
fn default_parameters() -> Vec<String> {
    let d = ollama_defaults();
    vec![
        format!("temperature {}", d.temperature),
        format!("top_k {}", d.top_k),
        format!("top_p {}", d.top_p),
        format!("repeat_penalty {}", d.repetition_penalty),
    ]
}

/// What `/api/show` tells of a model: a loaded one's facts from its engine, a file in the
/// models folder's from its GGUF header (without loading it, as Ollama does: clients show
/// every model of a list), a peer's only its name.
struct Described {
    name: String,
    path: Option<PathBuf>,
    gguf: Option<hearth_protocol::gguf::GgufInfo>,
    n_params: Option<u64>,
    /// The training context: the header's, or the engine's.
    n_ctx_train: Option<u64>,
    /// A slot's context, once loaded.
    context: Option<u32>,
    /// What its projector takes in: the one loaded, or (not loaded) the one beside its file.
    senses: hearth_engine::Senses,
}

impl Described {
    fn loaded(name: String, i: &ModelInfo) -> Self {
        Self {
            name,
            path: Some(i.path.clone()),
            gguf: Some(i.gguf.clone()),
            n_params: Some(i.n_params),
            n_ctx_train: Some(u64::from(i.n_ctx_train)),
            context: Some(i.context),
            senses: hearth_engine::Senses {
                vision: i.vision,
                audio: i.audio,
            },
        }
    }

    /// The model `requested` names, when it is loaded here or in the models folder.
    async fn here(state: &AppState, requested: &str) -> Option<Self> {
        let host = state.router.host();
        if let Some(id) = host
            .models_here()
            .into_iter()
            .find(|m| m.matches(super::model_name(requested)))
        {
            if let Some(i) = host.model_info(&id) {
                return Some(Self::loaded(id.to_string(), &i));
            }
        }
        let registry = state.router.registry().clone();
        let wanted = super::model_name(requested).to_owned();
        let (id, path, gguf, senses) = tokio::task::spawn_blocking(move || {
            let (id, path) = registry.find(&wanted)?;
            let gguf = hearth_engine::gguf::read(&path).ok();
            let senses = hearth_engine::projector_senses(&path);
            Some((id, path, gguf, senses))
        })
        .await
        .ok()??;
        if let Some(i) = host.model_info(&id) {
            return Some(Self::loaded(id.to_string(), &i));
        }
        Some(Self {
            name: id.to_string(),
            path: Some(path),
            n_ctx_train: gguf.as_ref().and_then(|g| g.context_length),
            gguf,
            n_params: None,
            context: None,
            senses,
        })
    }
}

pub(crate) async fn show(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ShowResponse>, Reply> {
    // The file's path only for this machine; a LAN client is told the model's name.
    let here = peer.ip().to_canonical().is_loopback();
    let body = read_body(body)?;
    let wire: ShowBody = parse_body(&body)?;
    let requested = wire.model_name()?;
    let d = match Described::here(&state, &requested).await {
        Some(d) => d,
        None => {
            // A peer's or a worker's model (or the door's unknown-model error).
            let (target, _) = resolve(&state, &requested).await?;
            match target.local.as_deref() {
                Some(i) => Described::loaded(target.model.to_string(), i),
                None => Described {
                    name: target.model.to_string(),
                    path: None,
                    gguf: None,
                    n_params: None,
                    n_ctx_train: None,
                    context: None,
                    senses: hearth_engine::Senses::default(),
                },
            }
        }
    };
    let g = d.gguf.as_ref();
    let template = g.and_then(|g| g.chat_template.clone()).unwrap_or_default();
    let mut lines = default_parameters();
    if let Some(n) = d.context {
        lines.push(format!("num_ctx {n}"));
    }
    let parameters = lines.join("\n");
    let mut modelfile = format!(
        "# Modelfile of {}, as Hearth serves it\nFROM {}\n",
        d.name,
        d.path
            .as_ref()
            .filter(|_| here)
            .map_or_else(|| d.name.clone(), |p| p.display().to_string())
    );
    if !template.is_empty() {
        modelfile.push_str(&format!("TEMPLATE \"\"\"{template}\"\"\"\n"));
    }
    for p in parameters.lines() {
        modelfile.push_str(&format!("PARAMETER {p}\n"));
    }
    let mut model_info = Map::new();
    let mut capabilities = vec!["completion".to_owned()];
    if let Some(g) = g {
        let arch = &g.architecture;
        model_info.insert("general.architecture".into(), Value::from(arch.clone()));
        if let Some(n) = d.n_params {
            model_info.insert("general.parameter_count".into(), Value::from(n));
        }
        if let Some(name) = &g.name {
            model_info.insert("general.name".into(), Value::from(name.clone()));
        }
        if let Some(n) = g.block_count {
            model_info.insert(format!("{arch}.block_count"), Value::from(n));
        }
        if let Some(n) = d.n_ctx_train {
            model_info.insert(format!("{arch}.context_length"), Value::from(n));
        }
        // Embeddings are made by this node's own models (mean pooling when it names none).
        capabilities.push("embedding".into());
    }
    // Every model takes tools: in its template's own format, or the generic one.
    capabilities.push("tools".into());
    if template.contains("<think>") || template.contains("enable_thinking") {
        capabilities.push("thinking".into());
    }
    if d.senses.vision {
        capabilities.push("vision".into());
    }
    if d.senses.audio {
        capabilities.push("audio".into());
    }
    Ok(Json(ShowResponse {
        modelfile,
        parameters,
        template,
        details: details(g),
        model_info,
        capabilities,
        modified_at: rfc3339(d.path.as_deref().and_then(modified)),
    }))
}

/// `DELETE /api/delete`: the model's files leave the models folder (an imported model's link
/// only), as `ollama rm` expects; refused while it is loaded, and from other machines.
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, Reply> {
    let parsed = read_body(body).and_then(|b| parse_body::<DeleteBody>(&b));
    let name = parsed.and_then(|p| p.model_name())?;
    let id = super::model_name(&name).to_owned();
    if !peer.ip().to_canonical().is_loopback() {
        return Err(Reply(error(
            StatusCode::FORBIDDEN,
            "models can only be deleted on the machine that runs the node",
        )));
    }
    let host = state.router.host();
    if let Some(loaded) = host.holds(&id).await {
        return Err(Reply(error(
            StatusCode::CONFLICT,
            format!("model '{loaded}' is loaded: unload it first (keep_alive 0), then delete it"),
        )));
    }
    let registry = state.router.registry().clone();
    let removed = tokio::task::spawn_blocking(move || registry.remove(&id)).await;
    match removed {
        Ok(Ok(_)) => Ok(StatusCode::OK),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Err(Reply(error(
            StatusCode::NOT_FOUND,
            format!("model '{name}' not found"),
        ))),
        Ok(Err(e)) => Err(Reply(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.to_string(),
        ))),
        Err(e) => Err(Reply(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.to_string(),
        ))),
    }
}
