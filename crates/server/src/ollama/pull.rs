//! `POST /api/pull`: a model from the hub (`OWNER/REPO/FILE.gguf`, or with `hf.co/` in front as
//! Ollama's clients write hub models) downloaded into the models folder by the node's
//! downloads, answered with Ollama's progress lines (`pulling manifest`, `pulling <digest>`
//! with `total` and `completed` bytes, `verifying sha256 digest`, `writing manifest`,
//! `success`), or one object with `"stream": false`. A client that goes away leaves the
//! download running (the Models page shows it).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt as _;
use hearth_protocol::ollama::{parse_body, OllamaError, PullBody};
use serde_json::json;

use super::chat::{error_line, ndjson, read_body};
use super::{error, Reply};
use crate::state::AppState;
use hearth_models::{model_hub::ModelHubFile, DownloadError, DownloadState, Downloads, Progress};

fn refusal(e: &DownloadError) -> OllamaError {
    OllamaError::bad_request(e.to_string())
}

pub(crate) async fn pull(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Reply> {
    let req = parse_body::<PullBody>(&read_body(body)?)?;
    let name = req.model_name()?;
    // Pulls come from the hub only (a peer's model is fetched on the Models page).
    let file = ModelHubFile::parse(&name).map_err(|_| {
        OllamaError::bad_request(format!(
            "'{}' is not a model Hearth can pull: name a GGUF file on the hub as OWNER/REPO/FILE.gguf (hf.co/ in front is fine), e.g. bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_K_M.gguf",
            name.chars().take(200).collect::<String>()
        ))
    })?;
    let stream = req.stream.unwrap_or(true);
    // A model the folder has is pulled already, as Ollama answers for one it has (a split
    // model, named by any shard, when it has every shard of the same count).
    let first = hearth_protocol::ids::first_file(file.file_name());
    let model = hearth_protocol::ids::ModelId::from_file_name(&first);
    let here = state.router.registry().files_of(model.as_str());
    if here.is_some_and(|f| f.first().and_then(|p| p.file_name()) == Some(first.as_ref())) {
        let done = json!({"status": "success"});
        return Ok(if stream {
            ndjson(futures_util::stream::iter([vec![done.to_string()]]))
        } else {
            Json(done).into_response()
        });
    }
    let id = state.downloads.start(&name).map_err(|e| refusal(&e))?.id;
    if !stream {
        let end = state.downloads.wait(&id).await;
        return match end {
            Some(p) if p.state == DownloadState::Done => {
                Ok(Json(json!({"status": "success"})).into_response())
            }
            p => Err(Reply(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                p.and_then(|p| p.error)
                    .unwrap_or_else(|| "the download was cancelled".into()),
            ))),
        };
    }
    let lines = progress_lines(state.downloads.clone(), id);
    Ok(ndjson(lines))
}

/// Where a pull's lines are.
struct Lines {
    downloads: Arc<Downloads>,
    id: String,
    changed: tokio::sync::watch::Receiver<u64>,
    /// The last lines sent, so that a tick with nothing new sends nothing.
    last: Option<String>,
    verifying_sent: bool,
    over: bool,
}

/// The download's progress as Ollama's lines, until it is over.
fn progress_lines(
    downloads: Arc<Downloads>,
    id: String,
) -> impl futures_util::Stream<Item = Vec<String>> + Send + 'static {
    let first = vec![json!({"status": "pulling manifest"}).to_string()];
    let rest = Lines {
        changed: downloads.subscribe(),
        downloads,
        id,
        last: None,
        verifying_sent: false,
        over: false,
    };
    let rest = futures_util::stream::unfold(rest, |mut l| async move {
        loop {
            if l.over {
                return None;
            }
            let p = l.downloads.get(&l.id)?;
            let (mut lines, over) = lines_of(&p);
            // Verification can be over before a tick shows it; Ollama's clients see it always.
            if p.state == DownloadState::Verifying {
                l.verifying_sent = true;
            } else if p.state == DownloadState::Done && !l.verifying_sent {
                lines.insert(0, json!({"status": "verifying sha256 digest"}).to_string());
            }
            let key = lines.join("\n");
            if !lines.is_empty() && l.last.as_deref() != Some(key.as_str()) {
                l.last = Some(key);
                l.over = over;
                return Some((lines, l));
            }
            if l.changed.changed().await.is_err() {
                return None;
            }
        }
    });
    futures_util::stream::iter([first]).chain(rest)
}

/// The lines for a download's state, and whether it is over.
fn lines_of(p: &Progress) -> (Vec<String>, bool) {
    let digest = p.sha256.as_deref().unwrap_or_default();
    let short: String = digest.chars().take(12).collect();
    match p.state {
        DownloadState::Starting => (vec![], false),
        DownloadState::Downloading | DownloadState::Retrying => (
            vec![json!({
                "status": format!("pulling {short}"),
                "digest": format!("sha256:{digest}"),
                "total": p.total.unwrap_or(0),
                "completed": p.received,
            })
            .to_string()],
            false,
        ),
        DownloadState::Verifying => (
            vec![json!({"status": "verifying sha256 digest"}).to_string()],
            false,
        ),
        DownloadState::Done => (
            vec![
                json!({"status": "writing manifest"}).to_string(),
                json!({"status": "success"}).to_string(),
            ],
            true,
        ),
        DownloadState::Failed | DownloadState::Cancelled => (
            vec![error_line(
                p.error.as_deref().unwrap_or("the download was cancelled"),
            )],
            true,
        ),
    }
}
