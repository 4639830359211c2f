//! `GET /api/agents` (docs/API.md, "Access from other machines"): for each coding agent, what
//! `hearth-node connect` prints for this node (its address as the caller reached it, the focus
//! model), the agent's own prompt size and whether the model's context is smaller than it.
//! Owner only, as the other settings; the text comes from [`crate::connect`].

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::api::ApiFailure;
use crate::caller::Caller;
use crate::connect::{settings, Agent, ANY_KEY};
use crate::state::AppState;

/// What stands for the key in the texts while the node is shared on the LAN: the page puts a
/// key it made in its place; pasted as it is, the agent is refused (401), never let in.
pub(crate) const KEY_PLACEHOLDER: &str = "YOUR_HEARTH_KEY";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentsQuery {
    /// The model the texts name [default: the first this node serves, the focus model first].
    #[serde(default)]
    model: Option<String>,
}

#[derive(Debug, Serialize)]
struct AgentEntry {
    id: &'static str,
    name: &'static str,
    text: String,
    prompt_tokens: u32,
    model_context: Option<u32>,
    too_small: bool,
}

#[derive(Debug, Serialize)]
struct Agents {
    url: String,
    model: String,
    /// The model's context in tokens when it is loaded here; `None`: not known (not loaded, or
    /// a peer's), and then no agent is marked too small.
    model_context: Option<u32>,
    shared: bool,
    /// The text that stands for the key in every `text` (`None`: any key passes this node).
    key_placeholder: Option<&'static str>,
    agents: Vec<AgentEntry>,
}

pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    Query(query): Query<AgentsQuery>,
) -> Result<Response, ApiFailure> {
    if let Caller::Host(_) = caller {
        return Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            "local_only",
            "the agents' settings are shown only to this machine's owner (or with a 'manage' key)",
        ));
    }
    // The guard let only a Host this node answers to through.
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiFailure::bad_request("no Host header"))?;
    let url = format!("http://{host}");
    let models = state.router.models();
    let model = match &query.model {
        Some(name) => models
            .into_iter()
            .find(|m| m.matches(name))
            .ok_or_else(|| ApiFailure::not_found("model"))?,
        None => models.into_iter().next().ok_or_else(|| {
            ApiFailure::new(
                StatusCode::CONFLICT,
                "no_model",
                "this node serves no model yet: load one on the Models page",
            )
        })?,
    };
    let model_context = state.host.model_info(&model).map(|i| i.context);
    let shared = state.exposure.is_exposed();
    let key = if shared { KEY_PLACEHOLDER } else { ANY_KEY };
    let agents = Agent::ALL
        .into_iter()
        .map(|a| AgentEntry {
            id: a.id(),
            name: a.name(),
            text: settings(a, &url, model.as_str(), key),
            prompt_tokens: a.prompt_tokens(),
            model_context,
            too_small: model_context.is_some_and(|c| a.too_small(c)),
        })
        .collect();
    Ok(Json(Agents {
        url,
        model: model.to_string(),
        model_context,
        shared,
        key_placeholder: shared.then_some(KEY_PLACEHOLDER),
        agents,
    })
    .into_response())
}
