//! `/api/events`: the live status WebSocket. It pushes a telemetry snapshot once a second
//! (and at once on connect) and model-loading progress as it happens; the client sends
//! nothing. Every socket reads the same sampler's `watch` channel.

use std::sync::Arc;

use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use hearth_engine::ModelState;
use serde_json::{json, Value};

use super::status::ModelStatus;
use crate::state::AppState;
use hearth_models::telemetry::Telemetry;

pub(crate) async fn upgrade(State(state): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(64 * 1024)
        .on_upgrade(move |socket| run(state, socket))
}

fn status_message(t: &Telemetry, model: &ModelStatus, node: &str) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or_else(|_| json!({}));
    v["type"] = json!("status");
    v["node"] = json!(node);
    v["model"] = json!({"id": model.id, "state": model.state, "progress": model.progress});
    if let Some(p) = &model.placement {
        v["model"]["placement"] = json!(p);
    }
    senses(&mut v["model"], model);
    v
}

/// What a ready model takes in (the chat offers images and clips by it).
fn senses(v: &mut Value, model: &ModelStatus) {
    if let Some(s) = model.vision {
        v["vision"] = json!(s);
    }
    if let Some(h) = model.audio {
        v["audio"] = json!(h);
    }
}

fn model_message(model: &ModelStatus) -> Value {
    let mut v =
        json!({"type": "model", "id": model.id, "state": model.state, "progress": model.progress});
    if let Some(e) = &model.error {
        v["error"] = json!(e);
    }
    // Where a ready model computes, as in the status: a client that takes the model from this
    // message keeps it.
    if let Some(p) = &model.placement {
        v["placement"] = json!(p);
    }
    senses(&mut v, model);
    v
}

async fn send(socket: &mut WebSocket, v: &Value) -> bool {
    socket
        .send(Message::Text(Utf8Bytes::from(v.to_string())))
        .await
        .is_ok()
}

async fn run(state: Arc<AppState>, mut socket: WebSocket) {
    let mut telemetry = state.telemetry.clone();
    let mut model_rx = state.host.state();
    let shutdown = state.shutdown.clone();
    let mut model = ModelStatus::of(&model_rx.borrow_and_update());
    let first = status_message(&telemetry.borrow_and_update(), &model, &state.node_name);
    if !send(&mut socket, &first).await || !send(&mut socket, &model_message(&model)).await {
        return;
    }
    let mut last_percent = (model.progress * 100.0).floor() as i32;
    loop {
        tokio::select! {
            changed = telemetry.changed() => {
                if changed.is_err() {
                    return;
                }
                let msg = status_message(&telemetry.borrow_and_update(), &model, &state.node_name);
                if !send(&mut socket, &msg).await {
                    return;
                }
            }
            changed = model_rx.changed() => {
                if changed.is_err() {
                    return;
                }
                let next = ModelStatus::of(&model_rx.borrow_and_update());
                let percent = (next.progress * 100.0).floor() as i32;
                let loading = matches!(*model_rx.borrow(), ModelState::Loading { .. });
                // Progress only when the whole percent moves; every change of state.
                let tell = next.state != model.state || next.id != model.id || (loading && percent != last_percent);
                model = next;
                last_percent = percent;
                if tell && !send(&mut socket, &model_message(&model)).await {
                    return;
                }
            }
            msg = socket.recv() => match msg {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            () = shutdown.cancelled() => {
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
        }
    }
}
