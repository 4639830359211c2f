//! `PATCH /api/node`: how much of this machine the user gives, made on the Settings page: the
//! throttle cap (0-100), kept in `hearth.db` and applied at once. The throttle in force is the
//! lowest of the cap, what the temperature allows and "Pause serving"; peers see it in the
//! next heartbeat. Changes only from this machine.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::api::{json_body, local_only, ApiFailure};
use crate::state::AppState;

/// The stored setting.
pub const SETTING_THROTTLE_CAP: &str = "throttle_cap";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodePatch {
    throttle_cap: u8,
}

pub(crate) async fn patch(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    local_only(peer)?;
    let body: NodePatch = json_body(body)?;
    if body.throttle_cap > 100 {
        return Err(ApiFailure::bad_request(format!(
            "throttle_cap must be 0 to 100, got {}",
            body.throttle_cap
        )));
    }
    state
        .store
        .set_node_setting(SETTING_THROTTLE_CAP, Some(body.throttle_cap.to_string()))
        .await?;
    state.host.set_throttle_cap(body.throttle_cap);
    Ok(Json(json!({
        "throttle_cap": state.host.throttle_cap(),
        "throttle": state.host.throttle(),
    }))
    .into_response())
}
