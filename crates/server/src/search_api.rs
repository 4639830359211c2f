//! `GET /api/models/search?q=WORDS[&limit=N]`: the hub's GGUF repositories matching the words,
//! the most downloaded first, each file with its size and quantisation, marked by whether it
//! fits this machine (memory, and video memory, its vision projector counted) at the context
//! this node gives a request, and whether it is here already. The Models page's search; `hearth-node models search` prints it.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use hearth_models::model_hub::ModelHubError;
use hearth_models::model_hub_search::{FoundFile, DEFAULT_LIMIT};
use serde::{Deserialize, Serialize};

use super::api::ApiFailure;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub(crate) struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SearchAnswer {
    query: String,
    hub: String,
    /// The context a model gets here, in tokens: what the fit marks assume.
    context: u64,
    repos: Vec<Repo>,
}

#[derive(Debug, Serialize)]
struct Repo {
    id: String,
    downloads: u64,
    likes: u64,
    last_modified: Option<String>,
    files: Vec<File>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct File {
    #[serde(flatten)]
    file: FoundFile,
    /// The memory it is expected to take here, in bytes.
    needs: u64,
    fits: bool,
    /// It fits whole in video memory.
    on_gpu: bool,
    /// A file of that name is in the models folder already.
    here: bool,
}

pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    Query(q): Query<SearchQuery>,
) -> Result<Json<SearchAnswer>, ApiFailure> {
    let found = state
        .downloads
        .search(&q.q, q.limit.unwrap_or(DEFAULT_LIMIT))
        .await
        .map_err(|e| match e {
            ModelHubError::BadQuery(_) => ApiFailure::bad_request(e.to_string()),
            e => ApiFailure::new(StatusCode::BAD_GATEWAY, "hub_unavailable", e.to_string()),
        })?;
    let host = state.router.host();
    let context = host.default_context();
    // Read once: the machine's memory and the GPUs' are the same for every file.
    let room = host.room_for_new();
    let repos = found
        .into_iter()
        .map(|r| Repo {
            files: r
                .files
                .into_iter()
                .map(|file| {
                    let fit = hearth_models::memory::fit(file.bytes_to_load(), &room);
                    File {
                        here: state.models_dir.join(&file.name).is_file(),
                        needs: fit.needs,
                        fits: fit.fits,
                        on_gpu: fit.on_gpu,
                        file,
                    }
                })
                .collect(),
            id: r.id,
            downloads: r.downloads,
            likes: r.likes,
            last_modified: r.last_modified,
            error: r.error,
        })
        .collect();
    Ok(Json(SearchAnswer {
        query: q.q.trim().to_owned(),
        hub: state.downloads.hub_url().to_owned(),
        context,
        repos,
    }))
}
