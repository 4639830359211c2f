//! `GET` and `PATCH /api/node`: the node's own settings made on the Settings page, kept in
//! `hearth.db` and applied at once: how much of this machine the user gives (the throttle cap,
//! 0-100; the throttle in force is the lowest of the cap, what the temperature allows and
//! "Pause serving", and peers see it in the next heartbeat), and the embedding model a chat's
//! documents are searched with besides their words (`chat::vectors`). Changes only from this
//! machine.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::api::{json_body, local_only, ApiFailure};
use crate::chat::vectors;
use crate::state::AppState;

/// The stored setting.
pub const SETTING_THROTTLE_CAP: &str = "throttle_cap";

/// The longest model name kept.
const MAX_MODEL_NAME: usize = 300;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodePatch {
    #[serde(default)]
    throttle_cap: Option<u8>,
    /// A model's name, or `null` to search documents by their words alone (`Some(Null)`;
    /// absent: `None`).
    #[serde(default, deserialize_with = "present")]
    documents_embedding_model: Option<serde_json::Value>,
}

/// A field that is there, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// `GET /api/node`: the settings as they are.
pub(crate) async fn get(State(state): State<Arc<AppState>>) -> Result<Response, ApiFailure> {
    settings(&state).await
}

async fn settings(state: &AppState) -> Result<Response, ApiFailure> {
    let model = state.store.node_setting(vectors::SETTING).await?;
    Ok(Json(json!({
        "throttle_cap": state.host.throttle_cap(),
        "throttle": state.host.throttle(),
        "documents_embedding_model": model,
    }))
    .into_response())
}

pub(crate) async fn patch(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let body: NodePatch = json_body(body)?;
    if body.throttle_cap.is_none() && body.documents_embedding_model.is_none() {
        return Err(ApiFailure::bad_request(
            "send {\"throttle_cap\": 0-100} and/or {\"documents_embedding_model\": NAME | null}",
        ));
    }
    let model = match body.documents_embedding_model {
        None => None,
        Some(serde_json::Value::Null) => Some(None),
        Some(serde_json::Value::String(name))
            if !name.trim().is_empty() && name.len() <= MAX_MODEL_NAME =>
        {
            Some(Some(name.trim().to_owned()))
        }
        Some(other) => {
            return Err(ApiFailure::bad_request(format!(
                "documents_embedding_model must be a model's name or null, got {other}"
            )))
        }
    };
    if let Some(cap) = body.throttle_cap {
        if cap > 100 {
            return Err(ApiFailure::bad_request(format!(
                "throttle_cap must be 0 to 100, got {cap}"
            )));
        }
    }
    if let Some(model) = model {
        state
            .store
            .set_node_setting(vectors::SETTING, model)
            .await?;
    }
    if let Some(cap) = body.throttle_cap {
        state
            .store
            .set_node_setting(SETTING_THROTTLE_CAP, Some(cap.to_string()))
            .await?;
        state.host.set_throttle_cap(cap);
    }
    settings(&state).await
}
