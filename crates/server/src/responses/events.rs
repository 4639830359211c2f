//! A streamed response's events in OpenAI's order: `response.created`, `response.in_progress`,
//! then per output item `output_item.added`, its part's `added`, its deltas, `done`s, and
//! `output_item.done`; the calls at the end (`function_call_arguments.delta`/`.done`); last
//! `response.completed` (or `.incomplete`, `.failed`). Each carries its `sequence_number`.

use std::sync::{Arc, Mutex};

use axum::response::sse::Event as SseEvent;
use futures_util::Stream;
use hearth_engine::{Done, TokenEvent};
use hearth_protocol::responses::{Content, OutputItem, Response as Answer, StreamEvent, Summary};
use hearth_store::responses::StoredResponse;
use serde_json::json;

use super::{function_call, Saver};
use crate::error::ApiError;
use crate::state::AppState;
use crate::stream::{batches, typed_event, End};
use hearth_engine::answer::{Piece, Splitter};

/// The item being streamed.
#[derive(Debug)]
enum Open {
    Text { index: usize, text: String },
    Reasoning { index: usize, text: String },
}

/// The state of one streamed response.
struct Out {
    base: Answer,
    seq: u64,
    items: Vec<OutputItem>,
    open: Option<Open>,
    /// The status a message item closes with (`incomplete` once the answer was cut short).
    item_status: &'static str,
}

impl Out {
    fn event(&mut self, e: StreamEvent) -> SseEvent {
        let data = e.numbered(self.seq);
        self.seq += 1;
        typed_event(data)
    }

    fn item_id(&self, kind: &str, index: usize) -> String {
        format!("{kind}_{}_{index}", self.base.id)
    }

    fn pieces(&mut self, pieces: Vec<Piece>, out: &mut Vec<SseEvent>) {
        for p in pieces {
            let (reasoning, delta) = match p {
                Piece::Reasoning(t) => (true, t),
                Piece::Content(t) => (false, t),
            };
            let same = matches!(
                (&self.open, reasoning),
                (Some(Open::Reasoning { .. }), true) | (Some(Open::Text { .. }), false)
            );
            if !same {
                self.close(out);
                self.open_item(reasoning, out);
            }
            let event = match &mut self.open {
                Some(Open::Text { index, text }) => {
                    text.push_str(&delta);
                    let index = *index;
                    StreamEvent::TextDelta {
                        item_id: self.item_id("msg", index),
                        output_index: index,
                        content_index: 0,
                        delta,
                        logprobs: vec![],
                    }
                }
                Some(Open::Reasoning { index, text }) => {
                    text.push_str(&delta);
                    let index = *index;
                    StreamEvent::SummaryDelta {
                        item_id: self.item_id("rs", index),
                        output_index: index,
                        summary_index: 0,
                        delta,
                    }
                }
                None => continue,
            };
            out.push(self.event(event));
        }
    }

    fn open_item(&mut self, reasoning: bool, out: &mut Vec<SseEvent>) {
        let index = self.items.len();
        if reasoning {
            let item_id = self.item_id("rs", index);
            let added = StreamEvent::ItemAdded {
                output_index: index,
                item: OutputItem::Reasoning {
                    id: item_id.clone(),
                    summary: vec![],
                },
            };
            out.push(self.event(added));
            let part = StreamEvent::SummaryPartAdded {
                item_id,
                output_index: index,
                summary_index: 0,
                part: Summary::SummaryText {
                    text: String::new(),
                },
            };
            out.push(self.event(part));
            self.open = Some(Open::Reasoning {
                index,
                text: String::new(),
            });
        } else {
            let item_id = self.item_id("msg", index);
            let added = StreamEvent::ItemAdded {
                output_index: index,
                item: OutputItem::Message {
                    id: item_id.clone(),
                    status: "in_progress".into(),
                    role: "assistant".into(),
                    content: vec![],
                },
            };
            out.push(self.event(added));
            let part = StreamEvent::PartAdded {
                item_id,
                output_index: index,
                content_index: 0,
                part: Content::text(String::new()),
            };
            out.push(self.event(part));
            self.open = Some(Open::Text {
                index,
                text: String::new(),
            });
        }
    }

    fn close(&mut self, out: &mut Vec<SseEvent>) {
        match self.open.take() {
            None => {}
            Some(Open::Text { index, text }) => {
                let item_id = self.item_id("msg", index);
                let done = StreamEvent::TextDone {
                    item_id: item_id.clone(),
                    output_index: index,
                    content_index: 0,
                    text: text.clone(),
                    logprobs: vec![],
                };
                out.push(self.event(done));
                let part = StreamEvent::PartDone {
                    item_id: item_id.clone(),
                    output_index: index,
                    content_index: 0,
                    part: Content::text(text.clone()),
                };
                out.push(self.event(part));
                let item = OutputItem::Message {
                    id: item_id,
                    status: self.item_status.into(),
                    role: "assistant".into(),
                    content: vec![Content::text(text)],
                };
                self.finish_item(index, item, out);
            }
            Some(Open::Reasoning { index, text }) => {
                let item_id = self.item_id("rs", index);
                let done = StreamEvent::SummaryDone {
                    item_id: item_id.clone(),
                    output_index: index,
                    summary_index: 0,
                    text: text.clone(),
                };
                out.push(self.event(done));
                let part = StreamEvent::SummaryPartDone {
                    item_id: item_id.clone(),
                    output_index: index,
                    summary_index: 0,
                    part: Summary::SummaryText { text: text.clone() },
                };
                out.push(self.event(part));
                let item = OutputItem::Reasoning {
                    id: item_id,
                    summary: vec![Summary::SummaryText { text }],
                };
                self.finish_item(index, item, out);
            }
        }
    }

    fn finish_item(&mut self, index: usize, item: OutputItem, out: &mut Vec<SseEvent>) {
        let e = StreamEvent::ItemDone {
            output_index: index,
            item: item.clone(),
        };
        out.push(self.event(e));
        self.items.push(item);
    }

    fn calls(&mut self, calls: &[hearth_protocol::ToolCall], out: &mut Vec<SseEvent>) {
        self.close(out);
        for (i, c) in calls.iter().enumerate() {
            let index = self.items.len();
            let id = self.base.id.clone();
            let OutputItem::FunctionCall {
                id: item_id,
                call_id,
                name,
                arguments,
                ..
            } = function_call(&id, i, c, "in_progress")
            else {
                continue;
            };
            let added = StreamEvent::ItemAdded {
                output_index: index,
                item: OutputItem::FunctionCall {
                    id: item_id.clone(),
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                    status: "in_progress".into(),
                },
            };
            out.push(self.event(added));
            let delta = StreamEvent::ArgumentsDelta {
                item_id: item_id.clone(),
                output_index: index,
                delta: arguments.clone(),
            };
            out.push(self.event(delta));
            let done = StreamEvent::ArgumentsDone {
                item_id: item_id.clone(),
                output_index: index,
                name: name.clone(),
                arguments: arguments.clone(),
            };
            out.push(self.event(done));
            let item = OutputItem::FunctionCall {
                id: item_id,
                call_id,
                name,
                arguments,
                status: "completed".into(),
            };
            self.finish_item(index, item, out);
        }
    }

    fn failed(&mut self, e: &ApiError) -> SseEvent {
        let mut response = self.base.clone();
        response.status = "failed".into();
        response.output = std::mem::take(&mut self.items);
        response.error = Some(json!({
            "code": e.body.error.code.unwrap_or("server_error"),
            "message": e.body.error.message,
        }));
        self.event(StreamEvent::Failed { response })
    }
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
    let mut out = Out {
        base: base.clone(),
        seq: 0,
        items: vec![],
        open: None,
        item_status: "completed",
    };
    let first = vec![
        out.event(StreamEvent::Created {
            response: base.clone(),
        }),
        out.event(StreamEvent::InProgress { response: base }),
    ];
    let out = Arc::new(Mutex::new(out));
    let splitter = Arc::new(Mutex::new(Some(splitter)));
    let on_token = {
        let (out, splitter) = (out.clone(), splitter.clone());
        move |t: &TokenEvent| -> Vec<SseEvent> {
            let mut events = Vec::new();
            let pieces = match splitter.lock().ok().as_deref_mut().and_then(Option::as_mut) {
                Some(s) => s.push(&t.text),
                None => return events,
            };
            if let Ok(mut o) = out.lock() {
                o.pieces(pieces, &mut events);
            }
            events
        }
    };
    let on_done = {
        let out = out.clone();
        move |d: &Done| -> Vec<SseEvent> {
            let (Some(splitter), Ok(mut o)) =
                (splitter.lock().ok().and_then(|mut s| s.take()), out.lock())
            else {
                return vec![];
            };
            let ending = match splitter.finish(d.reason) {
                Ok(e) => e,
                Err(e) => return vec![o.failed(&ApiError::from_call(&e))],
            };
            let mut events = Vec::new();
            o.item_status = super::item_status(d, &ending.calls);
            o.pieces(ending.pieces, &mut events);
            if ending.calls.is_empty() && o.items.is_empty() && o.open.is_none() {
                // An empty answer still has its (empty) message, as the whole answer has.
                o.open_item(false, &mut events);
            }
            o.calls(&ending.calls, &mut events);
            let items = std::mem::take(&mut o.items);
            let (answer, record) = save.finish(o.base.clone(), d, items, &ending.calls);
            if let Ok(mut p) = pending.lock() {
                *p = record;
            }
            let last = if answer.status == "incomplete" {
                StreamEvent::Incomplete { response: answer }
            } else {
                StreamEvent::Completed { response: answer }
            };
            events.push(o.event(last));
            events
        }
    };
    let on_end = move |end: End<'_>| {
        let Ok(mut o) = out.lock() else {
            return vec![];
        };
        match end {
            End::Done => vec![],
            End::Failed(f) => vec![o.failed(&ApiError::from_failure(f))],
            End::ShuttingDown => vec![o.failed(&ApiError::shutting_down())],
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
