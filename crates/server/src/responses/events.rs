//! A streamed response's events, written by `hearth_protocol::responses::Writer` in OpenAI's
//! order (`response.created`, `response.in_progress`, per output item its `added`, deltas and
//! `done`s, the calls at the end, last `response.completed`, `.incomplete` or `.failed`), fed
//! here from the generation's tokens and end, and its row left to be stored.

use std::sync::{Arc, Mutex};

use axum::response::sse::Event as SseEvent;
use futures_util::Stream;
use hearth_engine::{Done, TokenEvent};
use hearth_protocol::responses::{Response as Answer, Writer};
use hearth_store::responses::StoredResponse;

use super::Saver;
use crate::error::ApiError;
use crate::state::AppState;
use crate::stream::{batches, typed_event, End};
use hearth_engine::answer::Splitter;

/// `response.failed` for a door's error.
fn failed(w: &mut Writer, e: &ApiError) -> SseEvent {
    typed_event(w.failed(
        e.body.error.code.unwrap_or("server_error"),
        &e.body.error.message,
    ))
}

/// The SSE events of a streamed response; the row to store is left in `pending` before
/// the batch with the final event is yielded.
pub(super) fn stream(
    gen: hearth_route::Generation,
    state: &AppState,
    base: Answer,
    splitter: Splitter,
    save: Saver,
    pending: Arc<Mutex<Option<StoredResponse>>>,
) -> impl Stream<Item = Vec<SseEvent>> + Send {
    let (writer, first) = Writer::start(base);
    let first = first.into_iter().map(typed_event).collect();
    let writer = Arc::new(Mutex::new(writer));
    let splitter = Arc::new(Mutex::new(Some(splitter)));
    let on_token = {
        let (writer, splitter) = (writer.clone(), splitter.clone());
        move |t: &TokenEvent| -> Vec<SseEvent> {
            let mut events = Vec::new();
            let pieces = match splitter.lock().ok().as_deref_mut().and_then(Option::as_mut) {
                Some(s) => s.push(&t.text),
                None => return vec![],
            };
            if let Ok(mut w) = writer.lock() {
                w.pieces(pieces, &mut events);
            }
            events.into_iter().map(typed_event).collect()
        }
    };
    let on_done = {
        let writer = writer.clone();
        move |d: &Done| -> Vec<SseEvent> {
            let (Some(splitter), Ok(mut w)) = (
                splitter.lock().ok().and_then(|mut s| s.take()),
                writer.lock(),
            ) else {
                return vec![];
            };
            let ending = match splitter.finish(d.reason) {
                Ok(e) => e,
                Err(e) => return vec![failed(&mut w, &ApiError::from_call(&e))],
            };
            let mut events = Vec::new();
            let items = w.end(ending.pieces, &ending.calls, d.reason, &mut events);
            let (answer, record) = save.finish(w.base().clone(), d, items, &ending.calls);
            if let Ok(mut p) = pending.lock() {
                *p = record;
            }
            events.push(w.last(answer));
            events.into_iter().map(typed_event).collect()
        }
    };
    let on_end = move |end: End<'_>| {
        let Ok(mut w) = writer.lock() else {
            return vec![];
        };
        match end {
            End::Done => vec![],
            End::Failed(f) => vec![failed(&mut w, &ApiError::from_failure(f))],
            End::ShuttingDown => vec![failed(&mut w, &ApiError::shutting_down())],
        }
    };
    batches(
        gen,
        state.shutdown.clone(),
        first,
        on_token,
        on_done,
        on_end,
    )
}
