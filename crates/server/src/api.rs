//! The UI's own API under `/api` (docs/API.md): conversations and their messages, models,
//! and this module's error shape `{"error": {"message", "code"}}`. The streaming chat lives in
//! `chat`, live status in `events`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use crate::state::AppState;
use hearth_store::{SettingsPatch, StoreError};

/// What a conversation's `tool_steps` (the answers with MCP calls one turn may chain) may be
/// at most.
pub(crate) const MAX_TOOL_STEPS: i64 = 50;

/// An `/api` error.
#[derive(Debug)]
pub(crate) struct ApiFailure {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiFailure {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub(crate) fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }
}

impl From<StoreError> for ApiFailure {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "database error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "database error",
        )
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": {"message": self.message, "code": self.code}})),
        )
            .into_response()
    }
}

/// Parse a JSON body into `T` with a clear message.
pub(crate) fn json_body<T: for<'de> Deserialize<'de>>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiFailure> {
    let body = body.map_err(|e| {
        ApiFailure::new(
            e.status(),
            "invalid_request",
            crate::error::body_rejection_text(&e),
        )
    })?;
    let body: &[u8] = if body.is_empty() { b"{}" } else { &body };
    serde_json::from_slice(body)
        .map_err(|e| ApiFailure::bad_request(format!("invalid JSON body: {e}")))
}

// ---------------------------------------------------------------------------------------------
// Conversations

#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    q: Option<String>,
}

pub(crate) async fn list_conversations(
    State(state): State<Arc<AppState>>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiFailure> {
    let conversations = state.store.list_conversations(query.q).await?;
    Ok(Json(json!({ "conversations": conversations })).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewConversation {
    #[serde(default)]
    title: Option<String>,
}

/// Titles are shown in a list: keep them to one line of reasonable length.
fn clean_title(t: &str) -> Result<String, ApiFailure> {
    let t = t.trim();
    if t.is_empty() {
        return Err(ApiFailure::bad_request("title must not be empty"));
    }
    if t.chars().count() > 200 {
        return Err(ApiFailure::bad_request(
            "title may be at most 200 characters",
        ));
    }
    Ok(t.replace(['\n', '\r'], " "))
}

pub(crate) async fn create_conversation(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let body: NewConversation = json_body(body)?;
    let title = match body.title {
        Some(t) => clean_title(&t)?,
        None => "New chat".to_owned(),
    };
    let conv = state.store.create_conversation(title).await?;
    Ok((StatusCode::CREATED, Json(conv)).into_response())
}

pub(crate) async fn get_conversation(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    let (conversation, messages) = state
        .store
        .conversation(id)
        .await?
        .ok_or_else(|| ApiFailure::not_found("conversation"))?;
    Ok(Json(json!({ "conversation": conversation, "messages": messages })).into_response())
}

/// `GET /api/images/{id}`: an image of a chat message, as the file it was sent as. Not kept by
/// the browser's cache: it goes when its conversation is deleted.
pub(crate) async fn get_image(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    let image = state
        .store
        .image(id)
        .await?
        .ok_or_else(|| ApiFailure::not_found("image"))?;
    Ok(private_file(image.mime, image.bytes))
}

/// `GET /api/audio/{id}`: an audio clip of a chat message, as the file it was sent as (kept
/// as images are).
pub(crate) async fn get_audio(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    let clip = state
        .store
        .audio(id)
        .await?
        .ok_or_else(|| ApiFailure::not_found("audio clip"))?;
    let mime = match clip.format.as_str() {
        "mp3" => "audio/mpeg",
        _ => "audio/wav",
    };
    Ok(private_file(mime.to_owned(), clip.bytes))
}

/// A stored file, of type `mime`: never sniffed as another, never kept by a shared cache.
fn private_file(mime: String, bytes: Vec<u8>) -> Response {
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::CACHE_CONTROL, "private, no-cache".to_owned()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        ],
        bytes,
    )
        .into_response()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConversationPatch {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    settings: Option<SettingsPatch>,
}

pub(crate) async fn update_conversation(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    let body: ConversationPatch = json_body(body)?;
    let title = body.title.as_deref().map(clean_title).transpose()?;
    if let Some(s) = &body.settings {
        // The rules every door applies, checked now: a bad value must not wait for the
        // conversation's next message to fail.
        hearth_protocol::generation::RawParams {
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens.flatten(),
            ..Default::default()
        }
        .validate_patch(None)
        .map_err(|e| ApiFailure::bad_request(format!("settings.{}: {}", e.param, e.message)))?;
        if let Some(steps) = s.tool_steps {
            if !(1..=MAX_TOOL_STEPS).contains(&steps) {
                return Err(ApiFailure::bad_request(format!(
                    "settings.tool_steps: {steps} is not between 1 and {}",
                    MAX_TOOL_STEPS
                )));
            }
        }
    }
    let conv = state
        .store
        .update_conversation(id, title, body.settings)
        .await?
        .ok_or_else(|| ApiFailure::not_found("conversation"))?;
    Ok(Json(conv).into_response())
}

pub(crate) async fn delete_conversation(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    if state.store.delete_conversation(id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiFailure::not_found("conversation"))
    }
}

// ---------------------------------------------------------------------------------------------
// API keys (for clients on the LAN). Managed only from this machine.

pub(crate) fn local_only(peer: std::net::SocketAddr) -> Result<(), ApiFailure> {
    if peer.ip().to_canonical().is_loopback() {
        Ok(())
    } else {
        Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            "local_only",
            "this can only be done on the machine that runs the node",
        ))
    }
}

pub(crate) async fn list_keys(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let keys = state.store.list_keys().await?;
    Ok(Json(json!({"keys": keys, "exposed": state.exposure.is_exposed()})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewKey {
    name: String,
    /// `use` (the default) or `manage`.
    #[serde(default)]
    scope: hearth_store::KeyScope,
}

pub(crate) async fn create_key(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let body: NewKey = json_body(body)?;
    let name = clean_title(&body.name)?;
    let (key, secret) = state.store.create_key(name, body.scope).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"key": key, "secret": secret})),
    )
        .into_response())
}

pub(crate) async fn revoke_key(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    Path(id): Path<String>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    // The keys it names (by id or by the secret's visible prefix), as `revoke_key` finds them.
    let named: Vec<String> = state
        .store
        .list_keys()
        .await?
        .into_iter()
        .filter(|k| !k.revoked && (k.id == id || k.prefix == id))
        .map(|k| k.id)
        .collect();
    if state.store.revoke_key(id).await? {
        // Nothing can ask for their cached prompts again: they go now (a key's id names them,
        // as `Caller::Key` does).
        let owners: Vec<_> = named
            .into_iter()
            .map(|id| crate::caller::Caller::Key(id).cache_owner())
            .collect();
        let host = state.host.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for owner in owners {
                host.forget_cache_owner(owner);
            }
        })
        .await;
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiFailure::not_found("key"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_trimmed_and_bounded() {
        assert_eq!(clean_title("  a\nb ").unwrap(), "a b");
        assert!(clean_title("   ").is_err());
        assert!(clean_title(&"x".repeat(201)).is_err());
    }
}
