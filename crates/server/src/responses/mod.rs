//! OpenAI's Responses API (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`): what
//! Codex speaks. A request is validated by `hearth_protocol::responses`, continued from a
//! stored answer when it names `previous_response_id`, placed by the route like every other
//! door's, and its answer split by `hearth_engine::answer` into output items (`reasoning`,
//! `message`, `function_call`) by `hearth_protocol::responses`' writer: whole, or streamed as
//! numbered events (`events`). Answers are stored in
//! `hearth.db` unless `store: false`, each under the API key that made it (a key reads,
//! continues and deletes only its own; loopback requests share the owner "").

mod events;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::StreamExt as _;
use hearth_engine::{Chat, Done};
use hearth_protocol::openai::parse_body;
use hearth_protocol::responses::{
    self as wire, stored, Ended, OutputItem, Response as Answer, ResponsesBody,
};
use hearth_protocol::{ChatMessage, ToolCall};
use hearth_store::responses::StoredResponse;

use crate::caller::Caller;
use crate::door::submit_chat;
use crate::door::{body_bytes, collect, fetch_image_urls, now_secs, resolve};
use crate::error::ApiError;
use crate::security::VerifiedKey;
use crate::state::AppState;
use hearth_engine::answer;

/// Whose stored answers a request may use: its API key's, or the loopback user's ("").
fn owner(verified: Option<Extension<VerifiedKey>>) -> String {
    verified
        .map(|Extension(VerifiedKey(id))| id)
        .unwrap_or_default()
}

fn not_found(id: &str, param: Option<&str>) -> ApiError {
    let what = if param.is_some() {
        "Previous response"
    } else {
        "Response"
    };
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        None,
        param.map(str::to_owned),
        format!(
            "{what} with id '{}' not found.",
            id.chars().take(100).collect::<String>()
        ),
    )
}

fn store_error(e: hearth_store::StoreError) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        Some("internal_error"),
        None,
        e.to_string(),
    )
}

/// The conversation a stored answer ends, for a continuation.
async fn history(state: &AppState, owner: &str, id: &str) -> Result<Vec<ChatMessage>, ApiError> {
    let stored = state
        .store
        .response(owner.to_owned(), id.to_owned())
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(id, Some("previous_response_id")))?;
    stored::read_history(&stored.history).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            Some("internal_error"),
            None,
            format!("the stored response {id} cannot be read: {e}"),
        )
    })
}

/// `POST /v1/responses`.
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    verified: Option<Extension<VerifiedKey>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let owner = owner(verified);
    let body = body_bytes(body)?;
    let body = fetch_image_urls(&state, body).await?;
    let wire: ResponsesBody = parse_body(&body).map_err(ApiError::bad_request)?;
    let target = resolve(&state, wire.model.as_deref()).await?;
    let mut req = wire.validate(target.ctx()).map_err(ApiError::bad_request)?;
    if let Some(t) = &req.tools {
        hearth_engine::tools::check(t).map_err(|e| {
            ApiError::bad_request(hearth_protocol::openai::RequestError {
                message: e.to_string(),
                param: Some("tools".into()),
            })
        })?;
    }
    answer::constrain(&mut req.params, req.format.take()).map_err(|e| {
        ApiError::bad_request(hearth_protocol::openai::RequestError {
            message: format!("invalid text.format: {e}"),
            param: Some("text.format".into()),
        })
    })?;
    let previous = match &req.previous_response_id {
        Some(prev) => history(&state, &owner, prev).await?,
        None => vec![],
    };
    let continued = stored::continued(previous, req.input, req.instructions.as_deref());
    let chat = Chat {
        messages: continued.messages,
        tools: req.tools,
        think: req.think,
    };
    let (mut gen, splitter) = submit_chat(
        &state.router,
        &target,
        chat,
        req.params,
        true,
        caller.cache_owner(),
    )?;
    let splitter = splitter.broken_calls_as_text();
    let base = Answer::start(
        format!("resp_{}", uuid::Uuid::new_v4().simple()),
        now_secs(),
        target.model.to_string(),
        req.instructions,
        req.previous_response_id,
        req.store,
        &req.echo,
    );
    let save = Saver {
        owner,
        store: req.store,
        conversation: continued.conversation,
        reasoning_tokens: target.local.clone(),
    };
    if !req.stream {
        let c = collect(&mut gen, &state.shutdown, false).await?;
        let (thinking, text, calls) = answer::split_whole(splitter, &c.text, c.done.reason)
            .map_err(|e| ApiError::from_call(&e))?;
        let items = wire::whole_items(&base.id, thinking, text, &calls, c.done.reason);
        let (answer, record) = save.finish(base, &c.done, items, &calls);
        if let Some(r) = record {
            state.store.put_response(r).await.map_err(store_error)?;
        }
        return Ok(Json(answer).into_response());
    }
    let pending: Arc<Mutex<Option<StoredResponse>>> = Arc::default();
    let events = events::stream(gen, &state, base, splitter, save, pending.clone());
    // A stored answer is saved before its last event leaves, so a client that asks for it as
    // soon as it has read the stream finds it.
    let store = state.store.clone();
    let events = events.then(move |batch| {
        let (pending, store) = (pending.clone(), store.clone());
        async move {
            let record = pending.lock().ok().and_then(|mut p| p.take());
            if let Some(r) = record {
                if let Err(e) = store.put_response(r).await {
                    tracing::warn!(error = %e, "storing a response failed");
                }
            }
            batch
        }
    });
    let events = crate::stream::sse_events(events, |e| e);
    Ok(crate::stream::sse(events, state.limits.sse_keep_alive))
}

/// How generation ended, in the figures a response reports.
fn ended(d: &Done) -> Ended {
    Ended {
        reason: d.reason,
        prompt_tokens: d.usage.prompt_tokens,
        cached_tokens: d.timing.cached_tokens,
        completion_tokens: d.usage.completion_tokens,
    }
}

/// What the end of an answer needs to finish the response and keep it.
struct Saver {
    owner: String,
    store: bool,
    /// The conversation before this answer (without the instructions).
    conversation: Vec<ChatMessage>,
    /// This node's model, to count the reasoning's tokens when it ran here.
    reasoning_tokens: Option<Arc<hearth_engine::ModelInfo>>,
}

impl Saver {
    /// The finished response, and its row when it is to be stored (the conversation then
    /// ends with the answer's text and calls; its thinking is left out, as templates drop it).
    fn finish(
        self,
        answer: Answer,
        done: &Done,
        items: Vec<OutputItem>,
        calls: &[ToolCall],
    ) -> (Answer, Option<StoredResponse>) {
        let (text, thinking) = wire::texts(&items);
        let reasoning = match (thinking, &self.reasoning_tokens) {
            (Some(t), Some(info)) => u32::try_from(info.count_tokens(&t)).unwrap_or(0),
            _ => 0,
        };
        let answer = answer.finished(items, &ended(done), calls, reasoning);
        if !self.store {
            return (answer, None);
        }
        let record = StoredResponse {
            id: answer.id.clone(),
            owner: self.owner,
            body: serde_json::to_string(&answer).unwrap_or_default(),
            history: stored::history_row(self.conversation, text, calls),
        };
        (answer, Some(record))
    }
}

/// `GET /v1/responses/{id}`: a stored answer, as it was sent.
pub(crate) async fn retrieve(
    State(state): State<Arc<AppState>>,
    verified: Option<Extension<VerifiedKey>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let stored = state
        .store
        .response(owner(verified), id.clone())
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(&id, None))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], stored.body).into_response())
}

/// `DELETE /v1/responses/{id}`.
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    verified: Option<Extension<VerifiedKey>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !state
        .store
        .delete_response(owner(verified), id.clone())
        .await
        .map_err(store_error)?
    {
        return Err(not_found(&id, None));
    }
    Ok(Json(
        serde_json::json!({"id": id, "object": "response.deleted", "deleted": true}),
    ))
}
