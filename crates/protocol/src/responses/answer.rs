//! The Responses door's answer from the parts the answer's reader split (thinking, text, calls)
//! and how generation ended: the output items of a whole answer, the finished response (status,
//! usage), and the same streamed as numbered events in OpenAI's order ([`Writer`]). The door
//! adds only what needs the node: the reasoning's token count, storing, and its errors' words.

use serde_json::{json, Value};

use super::{Content, Incomplete, OutputItem, Response, StreamEvent, Summary, Usage};
use crate::generation::{FinishReason, Piece};
use crate::tools::ToolCall;

/// How generation ended, in the figures a response reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub reason: FinishReason,
    pub prompt_tokens: u32,
    /// The prompt tokens the prompt cache served.
    pub cached_tokens: u32,
    pub completion_tokens: u32,
}

/// Whether the answer ended at `max_output_tokens` (or the context) rather than by itself.
pub fn cut_short(reason: FinishReason, calls: &[ToolCall]) -> bool {
    reason == FinishReason::Length && calls.is_empty()
}

/// A message item's status: `incomplete` when the answer was cut short.
pub fn item_status(reason: FinishReason, calls: &[ToolCall]) -> &'static str {
    if cut_short(reason, calls) {
        "incomplete"
    } else {
        "completed"
    }
}

/// A call as a `function_call` item (`fc_` ids; the call's own id is its `call_id`).
pub fn function_call(id: &str, i: usize, c: &ToolCall, status: &str) -> OutputItem {
    OutputItem::FunctionCall {
        id: format!("fc_{id}_{i}"),
        call_id: c.id.clone(),
        name: c.name.clone(),
        arguments: c.arguments.to_string(),
        status: status.into(),
    }
}

/// The items of a whole answer of response `id`, with ids as the streamed answer has them
/// (the kind, the response, the output index): its thinking, its text (an empty message
/// when there is nothing else), its calls.
pub fn whole_items(
    id: &str,
    thinking: Option<String>,
    text: String,
    calls: &[ToolCall],
    reason: FinishReason,
) -> Vec<OutputItem> {
    let mut items = Vec::new();
    if let Some(t) = thinking {
        items.push(OutputItem::Reasoning {
            id: format!("rs_{id}_{}", items.len()),
            summary: vec![Summary::SummaryText { text: t }],
        });
    }
    if !text.is_empty() || calls.is_empty() {
        items.push(OutputItem::Message {
            id: format!("msg_{id}_{}", items.len()),
            status: item_status(reason, calls).into(),
            role: "assistant".into(),
            content: vec![Content::text(text)],
        });
    }
    items.extend(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| function_call(id, i, c, "completed")),
    );
    items
}

/// The text of `items`' messages and of their reasoning (`None` without any): what a stored
/// conversation keeps, and what the reasoning tokens are counted from.
pub fn texts(items: &[OutputItem]) -> (String, Option<String>) {
    let (mut text, mut thinking) = (String::new(), None::<String>);
    for item in items {
        match item {
            OutputItem::Message { content, .. } => {
                for Content::OutputText { text: t, .. } in content {
                    text.push_str(t);
                }
            }
            OutputItem::Reasoning { summary, .. } => {
                for Summary::SummaryText { text: t } in summary {
                    thinking.get_or_insert_with(String::new).push_str(t);
                }
            }
            OutputItem::FunctionCall { .. } => {}
        }
    }
    (text, thinking)
}

impl Response {
    /// The response finished with `items`: its usage (`reasoning_tokens` of the answer's
    /// thinking), and `completed`, or `incomplete` when it was cut short.
    pub fn finished(
        mut self,
        items: Vec<OutputItem>,
        ended: &Ended,
        calls: &[ToolCall],
        reasoning_tokens: u32,
    ) -> Self {
        self.output = items;
        self.usage = Some(Usage::new(
            ended.prompt_tokens,
            ended.cached_tokens,
            ended.completion_tokens,
            reasoning_tokens,
        ));
        if cut_short(ended.reason, calls) {
            self.status = "incomplete".into();
            self.incomplete_details = Some(Incomplete {
                reason: "max_output_tokens".into(),
            });
        } else {
            self.status = "completed".into();
        }
        self
    }
}

/// The item being streamed.
#[derive(Debug)]
enum Open {
    Text { index: usize, text: String },
    Reasoning { index: usize, text: String },
}

/// Writes one streamed response's events, each numbered (`sequence_number`) as JSON.
#[derive(Debug)]
pub struct Writer {
    base: Response,
    seq: u64,
    items: Vec<OutputItem>,
    open: Option<Open>,
    /// The status a message item closes with (`incomplete` once the answer was cut short).
    item_status: &'static str,
}

impl Writer {
    /// The writer of `base`'s events, and its first two (`created`, `in_progress`).
    pub fn start(base: Response) -> (Self, Vec<Value>) {
        let mut w = Self {
            base: base.clone(),
            seq: 0,
            items: vec![],
            open: None,
            item_status: "completed",
        };
        let first = vec![
            w.event(StreamEvent::Created {
                response: base.clone(),
            }),
            w.event(StreamEvent::InProgress { response: base }),
        ];
        (w, first)
    }

    /// The response as it started.
    pub fn base(&self) -> &Response {
        &self.base
    }

    fn event(&mut self, e: StreamEvent) -> Value {
        let data = e.numbered(self.seq);
        self.seq += 1;
        data
    }

    fn item_id(&self, kind: &str, index: usize) -> String {
        format!("{kind}_{}_{index}", self.base.id)
    }

    /// The events of pieces as they stream.
    pub fn pieces(&mut self, pieces: Vec<Piece>, out: &mut Vec<Value>) {
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

    /// The events once the answer ended: the pieces held back till then, an (empty) message
    /// when there was nothing at all, as the whole answer has one, and the calls. Returns the
    /// items, for the finished response (see [`Writer::last`]).
    pub fn end(
        &mut self,
        pieces: Vec<Piece>,
        calls: &[ToolCall],
        reason: FinishReason,
        out: &mut Vec<Value>,
    ) -> Vec<OutputItem> {
        self.item_status = item_status(reason, calls);
        self.pieces(pieces, out);
        if calls.is_empty() && self.items.is_empty() && self.open.is_none() {
            self.open_item(false, out);
        }
        self.calls(calls, out);
        std::mem::take(&mut self.items)
    }

    /// The last event: the finished response, `response.completed` or `.incomplete`.
    pub fn last(&mut self, answer: Response) -> Value {
        let event = if answer.status == "incomplete" {
            StreamEvent::Incomplete { response: answer }
        } else {
            StreamEvent::Completed { response: answer }
        };
        self.event(event)
    }

    /// `response.failed`, with the items finished so far and the error's code and words.
    pub fn failed(&mut self, code: &str, message: &str) -> Value {
        let mut response = self.base.clone();
        response.status = "failed".into();
        response.output = std::mem::take(&mut self.items);
        response.error = Some(json!({"code": code, "message": message}));
        self.event(StreamEvent::Failed { response })
    }

    fn open_item(&mut self, reasoning: bool, out: &mut Vec<Value>) {
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

    fn close(&mut self, out: &mut Vec<Value>) {
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

    fn finish_item(&mut self, index: usize, item: OutputItem, out: &mut Vec<Value>) {
        let e = StreamEvent::ItemDone {
            output_index: index,
            item: item.clone(),
        };
        out.push(self.event(e));
        self.items.push(item);
    }

    /// Close what is open, then each call as a `function_call` item whose arguments come in
    /// one delta.
    fn calls(&mut self, calls: &[ToolCall], out: &mut Vec<Value>) {
        self.close(out);
        for (i, c) in calls.iter().enumerate() {
            let index = self.items.len();
            let OutputItem::FunctionCall {
                id: item_id,
                call_id,
                name,
                arguments,
                ..
            } = function_call(&self.base.id, i, c, "in_progress")
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
}
