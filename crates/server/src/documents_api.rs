//! A conversation's documents, `/api/conversations/{id}/documents` (docs/API.md): a file posted
//! as it is (its name in `?name=`) is read in a child process (`hearth_docs::Reader`), cut
//! into passages and kept with its word index in `hearth.db`, once per digest; listed; taken
//! out. They go with their conversation. What a turn is given of them is `chat::documents`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_docs::{Kind, ReadError, PASSAGE_WORDS};
use hearth_store::documents::{Added, NewDocument, NewPassage};
use serde::Deserialize;
use serde_json::json;
use sha2::Digest as _;

use crate::api::ApiFailure;
use crate::state::AppState;

/// The most bytes one posted file may have.
pub(crate) const MAX_FILE_BYTES: usize = 50 << 20;
/// The most documents one conversation keeps.
pub(crate) const MAX_DOCUMENTS: usize = 20;
/// The most bytes of files one conversation keeps, together.
pub(crate) const MAX_CONVERSATION_BYTES: u64 = 200 << 20;
/// The longest file name kept.
const MAX_NAME_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Named {
    name: String,
}

/// `POST /api/conversations/{id}/documents?name=NAME`, the file's bytes as the body: 201 with
/// `{document, added}` (`added: false` when the same file was attached before).
pub(crate) async fn add(
    State(state): State<Arc<AppState>>,
    Path(conversation_id): Path<String>,
    named: Result<Query<Named>, axum::extract::rejection::QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let Query(Named { name }) = named.map_err(|_| {
        ApiFailure::bad_request("name the file: POST .../documents?name=FILE with its bytes")
    })?;
    let name = file_name(&name)?;
    let bytes = body.map_err(|e| {
        let message = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            format!(
                "{name}: a file may have {} MiB at most",
                MAX_FILE_BYTES >> 20
            )
        } else {
            format!("{name}: {}", crate::error::body_rejection_text(&e))
        };
        ApiFailure::new(e.status(), "document_too_large", message)
    })?;
    if bytes.is_empty() {
        return Err(ApiFailure::bad_request(format!(
            "{name}: the file is empty"
        )));
    }
    known(&state, &conversation_id).await?;
    let kept = state.store.documents(conversation_id.clone()).await?;
    let hashed = bytes.clone();
    let digest = tokio::task::spawn_blocking(move || hex::encode(sha2::Sha256::digest(&hashed)))
        .await
        .map_err(internal)?;
    if let Some(row) = kept.iter().find(|d| d.digest == digest) {
        return Ok(created(json!({"document": row, "added": false})));
    }
    let held: u64 = kept.iter().map(|d| d.bytes).sum();
    // Checked again where it is added, for uploads side by side.
    if kept.len() >= MAX_DOCUMENTS || held + bytes.len() as u64 > MAX_CONVERSATION_BYTES {
        return Err(full(&name));
    }
    let started = std::time::Instant::now();
    let doc = state
        .documents
        .read(&name, &bytes)
        .await
        .map_err(|e| refused(&name, e))?;
    let kind = doc.kind.as_str();
    let pages = (doc.kind == Kind::Pdf).then(|| u32::try_from(doc.pages.len()).unwrap_or(u32::MAX));
    let passages = tokio::task::spawn_blocking(move || hearth_docs::passages(&doc, PASSAGE_WORDS))
        .await
        .map_err(internal)?;
    if passages.is_empty() {
        return Err(ApiFailure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "empty_document",
            format!("{name}: the document holds no text"),
        ));
    }
    let count = passages.len();
    let added = state
        .store
        .add_document(NewDocument {
            conversation_id: conversation_id.clone(),
            name: name.clone(),
            kind: kind.to_owned(),
            digest,
            bytes: bytes.len() as u64,
            pages,
            passages: passages
                .into_iter()
                .map(|p| NewPassage {
                    page: p.page,
                    heading: p.heading,
                    text: p.text,
                })
                .collect(),
            within: Some((MAX_DOCUMENTS, MAX_CONVERSATION_BYTES)),
        })
        .await?;
    let (id, added) = match added {
        Added::New(id) => (id, true),
        Added::Kept(id) => (id, false),
        Added::Full => return Err(full(&name)),
    };
    if added {
        // The embedding model named in Settings gets to the new passages now, not in the
        // first turn that asks.
        let state = state.clone();
        let conversation = conversation_id.clone();
        tokio::spawn(
            async move { crate::chat::vectors::embed_missing(&state, &conversation).await },
        );
    }
    tracing::info!(%name, kind, passages = count, ms = started.elapsed().as_millis() as u64, "document attached");
    let row = state
        .store
        .documents(conversation_id)
        .await?
        .into_iter()
        .find(|d| d.id == id)
        .ok_or_else(|| ApiFailure::not_found("document"))?;
    Ok(created(json!({"document": row, "added": added})))
}

/// `GET /api/conversations/{id}/documents`: `{documents}`, oldest first.
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    Path(conversation_id): Path<String>,
) -> Result<Response, ApiFailure> {
    known(&state, &conversation_id).await?;
    let documents = state.store.documents(conversation_id).await?;
    Ok(Json(json!({"documents": documents})).into_response())
}

/// `DELETE /api/conversations/{id}/documents/{document}`: 204; the answers given before keep
/// the passages they cited.
pub(crate) async fn remove(
    State(state): State<Arc<AppState>>,
    Path((conversation_id, document_id)): Path<(String, String)>,
) -> Result<Response, ApiFailure> {
    if state
        .store
        .delete_document(conversation_id, document_id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiFailure::not_found("document in this conversation"))
    }
}

/// A 404 unless the conversation exists.
async fn known(state: &AppState, conversation_id: &str) -> Result<(), ApiFailure> {
    match state.store.conversation(conversation_id.to_owned()).await? {
        Some(_) => Ok(()),
        None => Err(ApiFailure::not_found("conversation")),
    }
}

fn internal(e: impl std::fmt::Display) -> ApiFailure {
    ApiFailure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        e.to_string(),
    )
}

fn full(name: &str) -> ApiFailure {
    ApiFailure::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_many_documents",
        format!(
            "{name}: a conversation keeps {MAX_DOCUMENTS} documents and {} MiB of them at most; take one out or start a new conversation",
            MAX_CONVERSATION_BYTES >> 20
        ),
    )
}

fn created(body: serde_json::Value) -> Response {
    (StatusCode::CREATED, Json(body)).into_response()
}

/// The name kept: its last path part, without control characters, not empty, not too long.
fn file_name(name: &str) -> Result<String, ApiFailure> {
    let last = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let clean: String = last.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    if clean.is_empty() {
        return Err(ApiFailure::bad_request(
            "the file needs a name (?name=FILE)",
        ));
    }
    if clean.chars().count() > MAX_NAME_CHARS {
        return Err(ApiFailure::bad_request(format!(
            "a file name may have {MAX_NAME_CHARS} characters at most"
        )));
    }
    Ok(clean.to_owned())
}

/// Why a file was refused, with its status and code.
fn refused(name: &str, e: ReadError) -> ApiFailure {
    let (status, code) = match &e {
        ReadError::TooLarge { .. } | ReadError::TooManyPages { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, "document_too_large")
        }
        ReadError::NoTextLayer { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "no_text_layer"),
        ReadError::Unsupported(_) | ReadError::NotText => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_document")
        }
        ReadError::Bomb { .. }
        | ReadError::TooDeep { .. }
        | ReadError::Damaged(_)
        | ReadError::TimedOut { .. }
        | ReadError::Crashed(_) => (StatusCode::UNPROCESSABLE_ENTITY, "document_damaged"),
        ReadError::Reader(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
    };
    ApiFailure::new(status, code, format!("{name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_last_part_and_no_control_characters() {
        assert_eq!(file_name("C:\\docs\\a.pdf").unwrap(), "a.pdf");
        assert_eq!(file_name("../../etc/pass\nwd").unwrap(), "passwd");
        assert!(file_name("dir/").is_err());
        assert!(file_name(&"x".repeat(201)).is_err());
    }
}
