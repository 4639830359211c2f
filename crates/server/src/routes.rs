//! Every route of the node as one axum app: each path to its door's handler, the fallbacks
//! that answer unknown paths and methods in the door's own error shape (the web UI for any
//! other `GET`), and the layers around them (body limit and timeout, CORS, the guard).

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::Uri;
use axum::routing::{delete, get, post};
use axum::Router;
use hearth_protocol::limits::MAX_HTTP_BODY_BYTES;

use crate::{
    agents_api, anthropic, api, auth, batch, chat, cluster_api, documents_api, downloads_api,
    error, events, generate, hub_door, mcp_api, metrics, models_api, node_settings, ollama, openai,
    rerank, responses, search_api, security, split_api, state::AppState, status, ui,
};

/// Unknown API paths answer in the OpenAI error format; everything else is the web UI.
async fn fallback(method: axum::http::Method, uri: Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = uri.path();
    if anthropic::owns(path) {
        return anthropic::AnthropicError(error::not_found(uri).await).into_response();
    }
    if method != axum::http::Method::GET || path.starts_with("/v1/") || path.starts_with("/api/") {
        return error::not_found(uri).await.into_response();
    }
    ui::serve(uri).await
}

/// A method a path does not take, in the door's own error shape.
async fn not_allowed(method: axum::http::Method, uri: Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let messages = anthropic::owns(uri.path());
    let e = error::method_not_allowed(method, uri).await;
    if messages {
        return anthropic::AnthropicError(e).into_response();
    }
    e.into_response()
}

/// Every route of the node, as one axum app (the route that places requests is `state.router`).
/// Tests drive it with `oneshot` or over a real socket.
pub fn app(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{*id}", get(openai::model))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/", get(auth::root))
        .route("/api/auth/register", post(auth::register))
        .route("/generate", get(generate::upgrade))
        .route("/node", get(hub_door::upgrade))
        .route("/metrics", get(metrics::metrics))
        .route("/ws", get(batch::upgrade))
        .route("/api/ws", get(batch::upgrade))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/embed", post(ollama::embed))
        .route("/api/embeddings", post(ollama::embeddings))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version))
        .route("/api/pull", post(ollama::pull))
        .route("/api/delete", axum::routing::delete(ollama::delete))
        .route("/api/status", get(status::status))
        .route("/api/events", get(events::upgrade))
        .route("/api/models", get(models_api::list_models))
        .route("/api/models/load", post(models_api::load_model))
        .route("/api/models/unload", post(models_api::unload_model))
        .route("/api/models/importable", get(models_api::importable))
        .route("/api/models/search", get(search_api::search))
        .route("/api/models/import", post(models_api::import))
        .route(
            "/api/models/split",
            get(split_api::list).post(split_api::split),
        )
        .route("/api/models/split/{id}", delete(split_api::unsplit))
        .route("/api/models/{id}", delete(models_api::remove))
        .route(
            "/api/models/downloads",
            get(downloads_api::list).post(downloads_api::start),
        )
        .route("/api/models/downloads/{id}", delete(downloads_api::cancel))
        .route(
            "/api/conversations",
            get(api::list_conversations).post(api::create_conversation),
        )
        .route(
            "/api/conversations/{id}",
            get(api::get_conversation)
                .patch(api::update_conversation)
                .delete(api::delete_conversation),
        )
        .route("/api/conversations/{id}/chat", post(chat::chat))
        .route(
            "/api/conversations/{id}/documents",
            get(documents_api::list)
                .post(documents_api::add)
                .layer(DefaultBodyLimit::max(documents_api::MAX_FILE_BYTES)),
        )
        .route(
            "/api/conversations/{id}/documents/{document}",
            delete(documents_api::remove),
        )
        .route("/api/messages/{id}/stop", post(chat::stop))
        .route("/api/images/{id}", get(api::get_image))
        .route("/api/audio/{id}", get(api::get_audio))
        .route("/api/keys", get(api::list_keys).post(api::create_key))
        .route("/api/agents", get(agents_api::list))
        .route(
            "/api/cluster",
            get(cluster_api::get).patch(cluster_api::patch),
        )
        .route("/api/cluster/peers", post(cluster_api::add_peer))
        .route(
            "/api/node",
            get(node_settings::get).patch(node_settings::patch),
        )
        .route(
            "/api/cluster/peers/{address}",
            axum::routing::delete(cluster_api::remove_peer),
        )
        .route("/api/keys/{id}", axum::routing::delete(api::revoke_key))
        .route("/api/mcp/servers", get(mcp_api::list).post(mcp_api::add))
        .route(
            "/api/mcp/servers/{name}",
            axum::routing::put(mcp_api::replace).delete(mcp_api::remove),
        )
        .route("/api/mcp/servers/{name}/tools", get(mcp_api::tools))
        .route("/api/mcp/servers/{name}/log", get(mcp_api::log))
        .route("/api/mcp/import", post(mcp_api::import))
        .route("/api/mcp/allowed", get(mcp_api::allowed))
        .route("/api/mcp/allowed/{tool}", delete(mcp_api::disallow))
        .route(
            "/api/conversations/{id}/tool_calls/{call_id}",
            post(chat::decide),
        )
        .fallback(fallback)
        .method_not_allowed_fallback(not_allowed)
        // Our own limit sits above axum's default so the OpenAI door reports it in its format.
        .layer(DefaultBodyLimit::max(MAX_HTTP_BODY_BYTES))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            state.limits.header_timeout,
        ))
        // Inside the guard, so the Host and Origin checks run first.
        .layer(security::cors())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::guard,
        ))
        .with_state(state)
}
