//! `/api/mcp/*` (docs/API.md, "Tools (MCP)"): the chat's MCP servers listed, added, changed and
//! removed, their tools and logs, the `mcpServers` import, and the tools always allowed. Only
//! this machine's owner reads it ([`owner_only`]: loopback, or a `manage` key), and only this
//! machine changes it ([`this_machine_only`]): nothing from the LAN chooses a command to run.
//! Every change is kept in `hearth.db` first, then given to the running `McpServers`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_tools::{McpServerError, McpServerSpec, McpServerView};
use serde::Deserialize;
use serde_json::json;

use crate::api::{json_body, ApiFailure};
use crate::caller::Caller;
use crate::mcp_secrets;
use crate::state::AppState;

/// The largest `mcpServers` file the import reads.
const MAX_IMPORT_BYTES: u64 = 1 << 20;

/// MCP servers run programs as this machine's user: only its owner (loopback, the desktop app)
/// or a `manage` key (the guard lets no `use` key past the model doors) may configure or run
/// them.
pub(crate) fn owner_only(caller: &Caller) -> Result<(), ApiFailure> {
    match caller {
        Caller::Owner | Caller::Key(_) => Ok(()),
        Caller::Host(_) => Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            "local_only",
            "MCP servers are configured and run only by this machine's owner (or with a 'manage' key)",
        )),
    }
}

/// Changing what runs (a server's command, URL, env; the consent kept) is this machine's only,
/// as API keys are: a `manage` key from the LAN may list servers and use their tools in the
/// chat, never make this machine run a command of its choosing.
pub(crate) fn this_machine_only(caller: &Caller) -> Result<(), ApiFailure> {
    match caller {
        Caller::Owner => Ok(()),
        _ => Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            "local_only",
            "MCP servers are added, changed and removed only on the machine that runs the node",
        )),
    }
}

fn view(state: &AppState, name: &str) -> Result<McpServerView, ApiFailure> {
    state
        .mcp
        .servers()
        .into_iter()
        .find(|v| v.spec.name == name)
        .ok_or_else(|| ApiFailure::not_found("MCP server"))
}

fn server_failure(e: McpServerError) -> ApiFailure {
    match e {
        McpServerError::Unknown(_) => ApiFailure::not_found("MCP server"),
        other => ApiFailure::new(StatusCode::BAD_GATEWAY, "mcp_failed", other.to_string()),
    }
}

/// Keep `spec` in `hearth.db`, its env and header values apart (`mcp_secrets`): sealed first,
/// the row written, and only then the values of the spec it replaces that it no longer names
/// forgotten. The spec to run comes back, with the values kept (one sent empty keeps its own).
async fn keep(
    state: &AppState,
    spec: &McpServerSpec,
    replaces: Option<McpServerSpec>,
) -> Result<McpServerSpec, ApiFailure> {
    let failed = |why: String| {
        tracing::error!(error = %why, "an MCP server's secrets could not be kept");
        ApiFailure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "the server's env and header values could not be kept",
        )
    };
    let (secrets, spec2) = (state.secrets.clone(), spec.clone());
    let sealed = tokio::task::spawn_blocking(move || mcp_secrets::seal(&spec2, &secrets))
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| failed(e.to_string()))?;
    let text =
        serde_json::to_string(&sealed).map_err(|e| ApiFailure::bad_request(e.to_string()))?;
    state.store.put_mcp_server(spec.name.clone(), text).await?;
    let (secrets, spec2) = (state.secrets.clone(), spec.clone());
    tokio::task::spawn_blocking(move || {
        if let Some(old) = replaces {
            mcp_secrets::forget_removed(&old, &spec2, &secrets);
        }
        mcp_secrets::unseal(sealed, &secrets)
    })
    .await
    .map_err(|e| failed(e.to_string()))
}

fn spec_body(body: Result<Bytes, BytesRejection>) -> Result<McpServerSpec, ApiFailure> {
    let spec: McpServerSpec = json_body(body)?;
    spec.validate()
        .map_err(|e| ApiFailure::bad_request(e.to_string()))?;
    Ok(spec)
}

pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Response, ApiFailure> {
    owner_only(&caller)?;
    let mut servers = state.mcp.servers();
    // Env and header values (tokens) are this machine's: a `manage` key sees their names.
    if caller != Caller::Owner {
        for v in &mut servers {
            v.spec = mcp_secrets::without_values(&v.spec);
        }
    }
    Ok(Json(json!({"servers": servers})).into_response())
}

pub(crate) async fn add(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    this_machine_only(&caller)?;
    let spec = spec_body(body)?;
    if state.mcp.spec(&spec.name).is_some() {
        return Err(ApiFailure::new(
            StatusCode::CONFLICT,
            "exists",
            format!(
                "an MCP server named {} exists: change it with PUT",
                spec.name
            ),
        ));
    }
    let spec = keep(&state, &spec, None).await?;
    let name = spec.name.clone();
    state
        .mcp
        .upsert(spec)
        .await
        .map_err(|e| ApiFailure::bad_request(e.to_string()))?;
    Ok((StatusCode::CREATED, Json(view(&state, &name)?)).into_response())
}

pub(crate) async fn replace(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    this_machine_only(&caller)?;
    let spec = spec_body(body)?;
    if spec.name != name {
        return Err(ApiFailure::bad_request(format!(
            "the spec names {}, the path {name}: a server is renamed by removing it and adding it again",
            spec.name
        )));
    }
    let Some(old) = state.mcp.spec(&name) else {
        return Err(ApiFailure::not_found("MCP server"));
    };
    let spec = keep(&state, &spec, Some(old)).await?;
    state
        .mcp
        .upsert(spec)
        .await
        .map_err(|e| ApiFailure::bad_request(e.to_string()))?;
    Ok(Json(view(&state, &name)?).into_response())
}

pub(crate) async fn remove(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Response, ApiFailure> {
    this_machine_only(&caller)?;
    let prefix = hearth_tools::mcp_tool_prefix(&name);
    let kept = state.store.delete_mcp_server(name.clone(), prefix).await?;
    let running = state.mcp.remove(&name).await;
    if let Ok(spec) = &running {
        let (spec, secrets) = (spec.clone(), state.secrets.clone());
        let _ = tokio::task::spawn_blocking(move || mcp_secrets::forget(&spec, &secrets)).await;
    }
    let running = running.is_ok();
    if !kept && !running {
        return Err(ApiFailure::not_found("MCP server"));
    }
    Ok(Json(json!({"removed": name})).into_response())
}

pub(crate) async fn tools(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiFailure> {
    owner_only(&caller)?;
    // Listing starts the server: a GET another page makes (an `<img>`, which sends no Origin
    // the guard could check) must not. Browsers name such a request's site.
    // Only the node's own pages (`same-origin`) and a user's own navigation (`none`): a page
    // on another port of this machine is `same-site`, and may not either.
    if headers.get("sec-fetch-site").is_some_and(|v| {
        !v.as_bytes().eq_ignore_ascii_case(b"same-origin")
            && !v.as_bytes().eq_ignore_ascii_case(b"none")
    }) {
        return Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            "cross_site",
            "another site's page may not start an MCP server",
        ));
    }
    let tools = state.mcp.tools(&name).await.map_err(server_failure)?;
    Ok(Json(json!({"tools": tools})).into_response())
}

pub(crate) async fn log(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Response, ApiFailure> {
    owner_only(&caller)?;
    let lines = state
        .mcp
        .log(&name)
        .ok_or_else(|| ApiFailure::not_found("MCP server"))?;
    Ok(Json(json!({"lines": lines})).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportBody {
    #[serde(default)]
    json: Option<String>,
    #[serde(default)]
    path: Option<std::path::PathBuf>,
}

pub(crate) async fn import(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiFailure> {
    this_machine_only(&caller)?;
    let body: ImportBody = json_body(body)?;
    let text =
        match (body.json, body.path) {
            (Some(json), None) => json,
            (None, Some(path)) => read_import_file(&path).await?,
            _ => return Err(ApiFailure::bad_request(
                "send {\"json\": \"<the mcpServers JSON>\"} or {\"path\": \"<a file holding it>\"}",
            )),
        };
    let specs = hearth_tools::import_mcp_servers_json(&text)
        .map_err(|e| ApiFailure::bad_request(e.to_string()))?;
    let (mut added, mut skipped) = (Vec::new(), Vec::new());
    for spec in specs {
        if state.mcp.spec(&spec.name).is_some() {
            skipped.push(
                json!({"name": spec.name, "reason": "a server of this name is kept already"}),
            );
            continue;
        }
        let spec = keep(&state, &spec, None).await?;
        let name = spec.name.clone();
        match state.mcp.upsert(spec).await {
            Ok(()) => added.push(name),
            Err(e) => skipped.push(json!({"name": name, "reason": e.to_string()})),
        }
    }
    Ok(Json(json!({"added": added, "skipped": skipped})).into_response())
}

async fn read_import_file(path: &std::path::Path) -> Result<String, ApiFailure> {
    let failed =
        |e: std::io::Error| ApiFailure::bad_request(format!("cannot read {}: {e}", path.display()));
    let meta = tokio::fs::metadata(path).await.map_err(failed)?;
    if meta.len() > MAX_IMPORT_BYTES {
        return Err(ApiFailure::bad_request(format!(
            "{} is {} bytes: an mcpServers file is at most {MAX_IMPORT_BYTES}",
            path.display(),
            meta.len()
        )));
    }
    tokio::fs::read_to_string(path).await.map_err(failed)
}

pub(crate) async fn allowed(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Response, ApiFailure> {
    owner_only(&caller)?;
    let always = state.store.mcp_always_allowed().await?;
    Ok(Json(json!({"always": always})).into_response())
}

pub(crate) async fn disallow(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(tool): Path<String>,
) -> Result<Response, ApiFailure> {
    this_machine_only(&caller)?;
    state
        .store
        .set_mcp_always_allowed(tool.clone(), false)
        .await?;
    Ok(Json(json!({"removed": tool})).into_response())
}
