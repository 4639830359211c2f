//! The Models page's API: the registry's models with their state here (`GET /api/models`),
//! load and unload, what Ollama and LM Studio have that can be imported without a copy, import,
//! and delete (refused for a loaded model). Those three read or change this user's files:
//! they answer only this machine.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{ModelState, SubmitError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::api::{json_body, local_only, ApiFailure};
use super::status::ModelStatus;
use crate::state::AppState;
use hearth_models::{import, ModelFile, ModelHost};

fn internal(e: impl std::fmt::Display) -> ApiFailure {
    ApiFailure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        e.to_string(),
    )
}

/// A model of the registry as the Models page shows it: its file and header, and whether it
/// is loaded here.
#[derive(Debug, Serialize)]
struct ModelRow {
    #[serde(flatten)]
    file: ModelFile,
    loaded: bool,
    /// `loaded`, `loading`, `failed` or `available` (on disk, not loaded).
    state: &'static str,
    /// While it loads: how far (0 to 1, llama.cpp's loader), whichever model it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    load_progress: Option<f32>,
    /// Why its last load failed (`state` `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    load_error: Option<String>,
    /// Loaded: where its layers are (the GPU, how many, its video memory; or the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    placement: Option<hearth_engine::Placement>,
    /// Loaded: its context in tokens (one KV pool its slots share), the KV cache's element
    /// type and the pool's memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_bytes: Option<u64>,
    /// Times it was loaded since the node started.
    loads: u64,
    /// Seconds until it unloads unless used (absent: not by time).
    #[serde(skip_serializing_if = "Option::is_none")]
    unloads_in_s: Option<u64>,
    /// The cluster's peers that have it loaded.
    on_peers: Vec<String>,
    /// Imported from another app: a link to its file (whose path, `linked_to`, only this
    /// machine is shown).
    imported: bool,
    /// Loaded from outside the models folder (`--model PATH`): listed while it is loaded, its
    /// path in `linked_to` (this machine only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    outside: bool,
}

/// `text` with each of `folders` taken out of the paths it names (file names stay).
fn without_folders(text: &str, folders: &[std::path::PathBuf]) -> String {
    folders.iter().fold(text.to_owned(), |t, f| {
        t.replace(&format!("{}{}", f.display(), std::path::MAIN_SEPARATOR), "")
    })
}

/// Each model the cluster's peers have loaded, and which peers.
fn peers_models(state: &AppState) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for p in state.cluster.peers.list() {
        for m in &p.loaded_models {
            match out.iter_mut().find(|(id, _)| id == m) {
                Some((_, names)) => names.push(p.name.clone()),
                None => out.push((m.clone(), vec![p.name.clone()])),
            }
        }
    }
    out
}

fn model_row(host: &ModelHost, mut file: ModelFile, peers: &[(String, Vec<String>)]) -> ModelRow {
    let model_state = host
        .engine_of(&file.id)
        .map(|e| e.model_state().borrow().clone());
    let ready = match &model_state {
        Some(ModelState::Ready(info)) => Some(info.clone()),
        _ => None,
    };
    // Loaded, what its projector really does (one found may not have loaded).
    if let Some(i) = &ready {
        file.vision = i.vision;
        file.audio = i.audio;
    }
    let (state, load_progress, load_error, placement) = match model_state {
        Some(ModelState::Ready(info)) => ("loaded", None, None, Some(info.placement.clone())),
        Some(ModelState::Loading { progress, .. }) => {
            ("loading", Some(progress.clamp(0.0, 1.0)), None, None)
        }
        Some(ModelState::Failed { message, .. }) => ("failed", None, Some(message), None),
        _ => ("available", None, None, None),
    };
    let on_peers = peers
        .iter()
        .find(|(id, _)| file.id.matches(id))
        .map(|(_, names)| names.clone())
        .unwrap_or_default();
    ModelRow {
        on_peers,
        imported: file.linked_to.is_some(),
        outside: false,
        loaded: state == "loaded",
        state,
        load_progress,
        load_error,
        placement,
        context: ready.as_ref().map(|i| i.context),
        kv_type: ready.as_ref().map(|i| i.kv_type.name()),
        kv_bytes: ready.as_ref().map(|i| i.kv_bytes),
        loads: host.loads(&file.id),
        unloads_in_s: (state == "loaded")
            .then(|| host.expires_in(&file.id).map(|d| d.as_secs()))
            .flatten(),
        file,
    }
}

pub(crate) async fn list_models(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
) -> Result<Response, ApiFailure> {
    // Paths on this machine (its user's home, often) are for this machine only.
    let here = peer.ip().to_canonical().is_loopback();
    let model_state = state.host.state().borrow().clone();
    let status = ModelStatus::of(&model_state);
    let registry = state.router.registry().clone();
    let files = tokio::task::spawn_blocking(move || registry.scan())
        .await
        .map_err(internal)?;
    let peers = peers_models(&state);
    // Loaded models whose file is not in the folder (`--model PATH`) are listed too.
    let outside: Vec<ModelFile> = state
        .host
        .loaded_models()
        .iter()
        .filter(|id| !files.iter().any(|f| &f.id == *id))
        .filter_map(|id| state.host.model_info(id))
        .filter(|info| info.path.parent() != Some(state.models_dir.as_path()))
        .map(|info| ModelFile::of_loaded(&info))
        .collect();
    // What the folder takes: its files, not the files an imported model links to.
    let disk_bytes: u64 = files
        .iter()
        .filter(|f| f.linked_to.is_none())
        .map(|f| f.size_bytes)
        .sum();
    let models: Vec<ModelRow> = files
        .into_iter()
        .map(|f| (f, false))
        .chain(outside.into_iter().map(|f| (f, true)))
        .map(|(f, outside)| {
            let mut row = model_row(&state.host, f, &peers);
            if outside {
                row.imported = false;
                row.outside = true;
            }
            if !here {
                let mut folders = vec![state.models_dir.clone()];
                folders.extend(
                    row.file
                        .linked_to
                        .take()
                        .and_then(|l| l.parent().map(Into::into)),
                );
                if let Some(e) = row.file.error.as_mut() {
                    *e = without_folders(e, &folders);
                }
            }
            row
        })
        .collect();
    // Models only peers have: offered for a transfer.
    let from_peers: Vec<serde_json::Value> = peers
        .iter()
        .filter(|(id, _)| !models.iter().any(|m| m.file.id.matches(id)))
        .map(|(id, names)| json!({"id": id, "peers": names}))
        .collect();
    let mut body = json!({
        "models": models,
        "disk_bytes": disk_bytes,
        "from_peers": from_peers,
        "loaded": status.id,
        "loaded_models": state.host.loaded_models(),
        "state": status.state,
    });
    if here {
        body["models_dir"] = state.models_dir.display().to_string().into();
    }
    Ok(Json(body).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadBody {
    id: String,
}

pub(crate) async fn load_model(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let body: LoadBody = json_body(body)?;
    // Only plain names in the models folder: no paths, no `..`.
    if !hearth_models::registry::plain_name(&body.id) {
        return Err(ApiFailure::bad_request(
            "id must be a model name from GET /api/models",
        ));
    }
    let Some((id, path)) = state.router.registry().find(&body.id) else {
        return Err(ApiFailure::not_found("model"));
    };
    tracing::info!(model = %id, "loading requested through the API");
    match state.host.load(path).await {
        // A split model's worker loads it.
        Ok(()) | Err(SubmitError::ModelLoading { .. }) => {}
        Err(e @ SubmitError::ShuttingDown) => {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            return Err(ApiFailure::new(status, "shutting_down", e.to_string()));
        }
        Err(e) => {
            let status = StatusCode::CONFLICT;
            return Err(ApiFailure::new(status, "model_load_failed", e.to_string()));
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "state": "loading"})),
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UnloadBody {
    id: Option<String>,
}

/// Unload one model (`{"id": ...}`), or the focus model without a body.
pub(crate) async fn unload_model(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let body: UnloadBody = match &body {
        Ok(b) if b.is_empty() => UnloadBody::default(),
        _ => json_body(body)?,
    };
    let id = match body.id.as_deref() {
        Some(name) => Some(
            state
                .host
                .models_here()
                .into_iter()
                .find(|m| m.matches(name))
                .ok_or_else(|| ApiFailure::not_found("loaded model"))?,
        ),
        None => None,
    };
    tracing::info!(model = ?id, "unloading requested through the API");
    state.host.unload(id.as_ref()).await;
    let status = ModelStatus::of(&state.host.state().borrow());
    Ok(
        Json(json!({"state": status.state, "loaded_models": state.host.loaded_models()}))
            .into_response(),
    )
}

/// What Ollama and LM Studio have, each marked when it is imported already.
pub(crate) async fn importable(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
) -> Result<Response, ApiFailure> {
    // It names files in this user's home: only for this machine.
    local_only(peer)?;
    let (roots, dir) = (state.import_roots.clone(), state.models_dir.clone());
    let found = tokio::task::spawn_blocking(move || import::find(&roots, &dir))
        .await
        .map_err(internal)?;
    Ok(Json(json!({"models": found})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportBody {
    /// One model by id; absent: every one not imported yet.
    id: Option<String>,
}

/// Link models of Ollama or LM Studio into the models folder; they are listed at once.
pub(crate) async fn import(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let body: ImportBody = json_body(body)?;
    let (roots, dir) = (state.import_roots.clone(), state.models_dir.clone());
    let done = tokio::task::spawn_blocking(move || {
        let found = import::find(&roots, &dir);
        let chosen: Vec<_> = match &body.id {
            Some(id) => found.into_iter().filter(|m| m.id.matches(id)).collect(),
            None => found.into_iter().filter(|m| !m.imported).collect(),
        };
        if chosen.is_empty() && body.id.is_some() {
            return Err(ApiFailure::not_found("importable model"));
        }
        // Each on its own: one that cannot be linked (its name taken) leaves the others be.
        let (mut ids, mut failed) = (Vec::new(), Vec::new());
        for m in &chosen {
            match import::import(m, &dir) {
                Ok(()) => ids.push(m.id.clone()),
                Err(e) => failed.push(json!({"id": m.id, "error": e.to_string()})),
            }
        }
        if ids.is_empty() && !failed.is_empty() {
            let why: Vec<&str> = failed.iter().filter_map(|f| f["error"].as_str()).collect();
            return Err(ApiFailure::new(
                StatusCode::CONFLICT,
                "import_failed",
                why.join("; "),
            ));
        }
        Ok((ids, failed))
    })
    .await
    .map_err(internal)??;
    let (imported, failed) = done;
    Ok(Json(json!({"imported": imported, "failed": failed})).into_response())
}

/// Delete a model's files from the folder (only the link of an imported one); refused while
/// it is loaded.
pub(crate) async fn remove(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    if !hearth_models::registry::plain_name(&id) {
        return Err(ApiFailure::bad_request(
            "id must be a model name from GET /api/models",
        ));
    }
    if let Some(loaded) = state.host.holds(&id).await {
        return Err(ApiFailure::new(
            StatusCode::CONFLICT,
            "model_loaded",
            format!("{loaded} is loaded: unload it first, then delete it"),
        ));
    }
    let registry = state.router.registry().clone();
    let removed = tokio::task::spawn_blocking(move || registry.remove(&id))
        .await
        .map_err(internal)?;
    match removed {
        Ok(files) => Ok(Json(json!({"removed": files})).into_response()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ApiFailure::not_found("model")),
        Err(e) => Err(internal(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_shown_to_the_lan_names_files_without_their_folders() {
        let folders = [
            std::path::PathBuf::from("/home/me/.local/share/hearth/models"),
            std::path::PathBuf::from("/home/me/.ollama/models/blobs"),
        ];
        let text = "cannot read /home/me/.local/share/hearth/models/a.gguf: denied; \
                    /home/me/.ollama/models/blobs/sha256-1 too";
        assert_eq!(
            without_folders(text, &folders),
            "cannot read a.gguf: denied; sha256-1 too"
        );
        assert_eq!(without_folders("no path", &folders), "no path");
    }
}
