//! The agent doors' stream writers as fuzzing drives them: any sequence of an answer's pieces,
//! calls and ends (read from a script of lines) fed to Anthropic's [`Blocks`] and the
//! Responses [`Writer`], every event serialized, and the events read back as a client reads
//! them: in order, and saying what the whole answer of the same parts says.

use serde_json::{json, Value};

use crate::anthropic::{self, Blocks, ErrorDetail, Message, StreamEvent};
use crate::generation::{FinishReason, Piece};
use crate::responses::{self, Echo, OutputItem, Response, Writer};
use crate::tools::{arguments_value, ToolCall};

/// `\n`, `\t` and `\\` in a script's text; any other backslash stays.
pub(super) fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// `ID<TAB>NAME<TAB>ARGUMENTS` as a call the answer's reader read (`call_<n>` without an id;
/// the arguments are JSON, or text as a broken call's are).
pub(super) fn call_line(rest: &str, n: usize) -> ToolCall {
    let mut fields = rest.splitn(3, '\t');
    let id = unescape(fields.next().unwrap_or(""));
    let name = unescape(fields.next().unwrap_or(""));
    let arguments = fields.next().unwrap_or("{}");
    ToolCall {
        id: if id.is_empty() {
            format!("call_{n}")
        } else {
            id
        },
        name,
        arguments: arguments_value(Value::String(arguments.to_owned())),
    }
}

/// `PROMPT COMPLETION CACHED REASONING`: the token figures (any that is missing 0; past
/// 32 bits, the most 32 bits hold, as a peer may claim).
pub(super) fn figures(rest: &str) -> [u32; 4] {
    let mut out = [0; 4];
    for (slot, word) in out.iter_mut().zip(rest.split(' ')) {
        *slot = word
            .parse::<u64>()
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
    }
    out
}

/// `stop`, `length` or `cancelled`, then a tab and the stop sequence that ended it.
pub(super) fn reason(rest: &str) -> (FinishReason, Option<String>) {
    let (word, sequence) = match rest.split_once('\t') {
        Some((w, s)) => (w, Some(unescape(s))),
        None => (rest, None),
    };
    let reason = match word {
        "length" => FinishReason::Length,
        "cancelled" => FinishReason::Cancelled,
        _ => FinishReason::Stop,
    };
    (reason, sequence)
}

/// How the stream of a script ends.
#[derive(Debug, Clone, PartialEq)]
enum End {
    /// Generation ended; the reader's end gave the held pieces and the calls.
    Done(FinishReason, Option<String>),
    /// The reader could not read the calls (`x`), or generation failed (`f`).
    Failed(String),
    /// The stream closed without an end (the node shutting down).
    Closed,
}

/// An answer as a stream writer gets it, read from lines: `r`/`t` a thinking or text piece as
/// it streams (one a token), `R`/`T` one held back till the end, `cID<TAB>NAME<TAB>ARGUMENTS`
/// a call the end reads, `uPROMPT COMPLETION CACHED REASONING` the figures, and the end:
/// `eREASON[<TAB>STOP SEQUENCE]`, `xWHY` or `fWHY`; without one the stream closes. Lines after
/// the end are not read.
struct Script {
    streamed: Vec<Piece>,
    held: Vec<Piece>,
    calls: Vec<ToolCall>,
    figures: [u32; 4],
    end: End,
}

impl Script {
    fn read(data: &[u8]) -> Self {
        let text = String::from_utf8_lossy(data);
        let mut s = Self {
            streamed: vec![],
            held: vec![],
            calls: vec![],
            figures: [0; 4],
            end: End::Closed,
        };
        for line in text.split('\n') {
            let Some(op) = line.chars().next() else {
                continue;
            };
            let rest = &line[op.len_utf8()..];
            match op {
                'r' => s.streamed.push(Piece::Reasoning(unescape(rest))),
                't' => s.streamed.push(Piece::Content(unescape(rest))),
                'R' => s.held.push(Piece::Reasoning(unescape(rest))),
                'T' => s.held.push(Piece::Content(unescape(rest))),
                'c' => s.calls.push(call_line(rest, s.calls.len())),
                'u' => s.figures = figures(rest),
                'e' => {
                    let (r, sequence) = reason(rest);
                    s.end = End::Done(r, sequence);
                    break;
                }
                'x' | 'f' => {
                    s.end = End::Failed(unescape(rest));
                    break;
                }
                _ => {}
            }
        }
        s
    }

    /// The whole answer's thinking and text: every piece, streamed and held, in order.
    fn joined(&self) -> (Option<String>, String) {
        let (mut thinking, mut text) = (None::<String>, String::new());
        for p in self.streamed.iter().chain(&self.held) {
            match p {
                Piece::Reasoning(r) => thinking.get_or_insert_with(String::new).push_str(r),
                Piece::Content(c) => text.push_str(c),
            }
        }
        (thinking, text)
    }
}

fn kind(v: &Value) -> &str {
    v["type"].as_str().expect("every event has its type")
}

/// The Messages door's stream: `message_start` and `ping`, the pieces as they stream, then
/// the end as `Blocks::end` writes it (or an error event).
pub fn anthropic_events(data: &[u8]) {
    let s = Script::read(data);
    let mut events = vec![
        StreamEvent::MessageStart {
            message: Message::new("msg_1".into(), "m".into()),
        },
        StreamEvent::Ping,
    ];
    let mut blocks = Blocks::default();
    for p in &s.streamed {
        blocks.pieces(vec![p.clone()], &mut events);
    }
    let ended = match &s.end {
        End::Done(reason, sequence) => {
            let [prompt, completion, cached, _] = s.figures;
            let ended = anthropic::Ended {
                reason: *reason,
                stop_sequence: sequence.clone(),
                usage: anthropic::Usage::new(prompt, completion, cached),
            };
            blocks.end(s.held.clone(), &s.calls, &ended, &mut events);
            Some(ended)
        }
        End::Failed(why) => {
            events.push(StreamEvent::Error {
                error: ErrorDetail::for_status(500, why.clone()),
            });
            None
        }
        End::Closed => {
            events.push(StreamEvent::Error {
                error: ErrorDetail::for_status(503, "shutting down"),
            });
            None
        }
    };
    let events: Vec<Value> = events
        .iter()
        .map(|e| serde_json::to_value(e).expect("an event serializes"))
        .collect();
    assert_eq!(kind(&events[0]), "message_start");
    assert_eq!(kind(&events[1]), "ping");
    // Read as a client reads them: blocks (type, text, id, name) opened, filled, closed in turn.
    let mut read: Vec<(String, String, Value)> = Vec::new();
    let mut open = false;
    let mut last = None;
    for (i, e) in events.iter().enumerate().skip(2) {
        assert!(last.is_none(), "{e} after the end");
        match kind(e) {
            "content_block_start" => {
                assert!(!open);
                assert_eq!(e["index"], read.len());
                let block = &e["content_block"];
                read.push((kind(block).to_owned(), String::new(), block.clone()));
                open = true;
            }
            "content_block_delta" => {
                assert!(open);
                assert_eq!(e["index"], read.len() - 1);
                let (block, text, _) = read.last_mut().expect("an open block");
                let d = &e["delta"];
                let (of, field) = match kind(d) {
                    "text_delta" => ("text", "text"),
                    "thinking_delta" => ("thinking", "thinking"),
                    "signature_delta" => ("thinking", "signature"),
                    "input_json_delta" => ("tool_use", "partial_json"),
                    other => panic!("delta {other}"),
                };
                assert_eq!(block.as_str(), of);
                if field != "signature" {
                    text.push_str(d[field].as_str().expect("a delta's text"));
                }
            }
            "content_block_stop" => {
                assert!(open);
                assert_eq!(e["index"], read.len() - 1);
                open = false;
            }
            "message_delta" => {
                assert!(!open && !read.is_empty());
                assert_eq!(kind(&events[i + 1]), "message_stop");
            }
            "message_stop" | "error" => last = Some(e),
            other => panic!("event {other}"),
        }
    }
    let (Some(ended), Some(last)) = (ended, last) else {
        return;
    };
    assert_eq!(kind(last), "message_stop");
    let (thinking, text) = s.joined();
    let whole = anthropic::whole("msg_1".into(), "m".into(), thinking, text, &s.calls, &ended);
    let joined = |of: &str| -> Option<String> {
        let mut parts = read.iter().filter(|(k, _, _)| k == of).peekable();
        parts.peek()?;
        Some(parts.map(|(_, t, _)| t.as_str()).collect())
    };
    let mut uses = read.iter().filter(|(k, _, _)| k == "tool_use");
    let mut whole_text = None::<String>;
    let mut whole_thinking = None::<String>;
    for b in &whole.content {
        match b {
            anthropic::Block::Text { text } => {
                whole_text.get_or_insert_with(String::new).push_str(text)
            }
            anthropic::Block::Thinking { thinking, .. } => whole_thinking
                .get_or_insert_with(String::new)
                .push_str(thinking),
            anthropic::Block::ToolUse { id, name, input } => {
                let (_, json, start) = uses.next().expect("each call streamed");
                assert_eq!((&start["id"], &start["name"]), (&json!(id), &json!(name)));
                let streamed: Value = serde_json::from_str(json).expect("a call's input is JSON");
                assert_eq!(&streamed, input);
            }
        }
    }
    assert!(
        uses.next().is_none(),
        "a call streamed that the whole has not"
    );
    assert_eq!(joined("thinking"), whole_thinking);
    assert_eq!(
        joined("text").unwrap_or_default(),
        whole_text.unwrap_or_default()
    );
    let delta = &events[events.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], json!(whole.stop_reason));
    assert_eq!(delta["delta"]["stop_sequence"], json!(whole.stop_sequence));
    assert_eq!(delta["usage"], json!(whole.usage));
}

/// The Responses door's stream: the writer's first events, the pieces as they stream, then
/// the end (the items, the finished response as its last event) or `response.failed`.
pub fn responses_events(data: &[u8]) {
    let s = Script::read(data);
    let echo = Echo {
        tools: vec![],
        tool_choice: json!("auto"),
        parallel_tool_calls: false,
        temperature: 1.0,
        top_p: 1.0,
        max_output_tokens: None,
        text: json!({"format": {"type": "text"}}),
        reasoning: json!({"effort": null, "summary": null}),
        metadata: json!({}),
        user: None,
    };
    let base = Response::start("resp_1".into(), 0, "m".into(), None, None, true, &echo);
    let (mut w, mut events) = Writer::start(base);
    for p in &s.streamed {
        w.pieces(vec![p.clone()], &mut events);
    }
    let [prompt_tokens, completion_tokens, cached_tokens, reasoning] = s.figures;
    let done = match &s.end {
        End::Done(reason, _) => {
            let items = w.end(s.held.clone(), &s.calls, *reason, &mut events);
            let ended = responses::Ended {
                reason: *reason,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
            };
            let answer = w
                .base()
                .clone()
                .finished(items, &ended, &s.calls, reasoning);
            events.push(w.last(answer));
            Some(*reason)
        }
        End::Failed(why) => {
            events.push(w.failed("server_error", why));
            None
        }
        End::Closed => {
            events.push(w.failed("server_error", "shutting down"));
            None
        }
    };
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i);
    }
    assert_eq!(kind(&events[0]), "response.created");
    assert_eq!(kind(&events[1]), "response.in_progress");
    // Read as a client reads them: each item added, filled and done in turn.
    let mut items: Vec<Value> = Vec::new();
    let mut open: Option<(Value, String)> = None;
    let (last, between) = events[2..].split_last().expect("a last event");
    for e in between {
        let at = |e: &Value| {
            let (item, _) = open.as_ref().expect("an open item");
            assert_eq!(e["output_index"], items.len());
            if e.get("item_id").is_some() {
                assert_eq!(e["item_id"], item["id"]);
            }
        };
        match kind(e) {
            "response.output_item.added" => {
                assert!(open.is_none());
                assert_eq!(e["output_index"], items.len());
                open = Some((e["item"].clone(), String::new()));
            }
            "response.content_part.added" | "response.reasoning_summary_part.added" => at(e),
            "response.output_text.delta"
            | "response.reasoning_summary_text.delta"
            | "response.function_call_arguments.delta" => {
                at(e);
                let (_, text) = open.as_mut().expect("an open item");
                text.push_str(e["delta"].as_str().expect("a delta's text"));
            }
            "response.output_text.done"
            | "response.reasoning_summary_text.done"
            | "response.content_part.done"
            | "response.reasoning_summary_part.done"
            | "response.function_call_arguments.done" => {
                at(e);
                let (_, text) = open.as_ref().expect("an open item");
                let done = e
                    .get("text")
                    .or_else(|| e.get("arguments"))
                    .or_else(|| e["part"].get("text"))
                    .expect("a done event's text");
                assert_eq!(done, text);
            }
            "response.output_item.done" => {
                at(e);
                let (added, text) = open.take().expect("an open item");
                let item = &e["item"];
                assert_eq!((&item["id"], &item["type"]), (&added["id"], &added["type"]));
                let whole = match kind(item) {
                    "message" => &item["content"][0]["text"],
                    "reasoning" => &item["summary"][0]["text"],
                    _ => &item["arguments"],
                };
                assert_eq!(whole, &json!(text));
                items.push(item.clone());
            }
            other => panic!("event {other} before the end"),
        }
    }
    let response = &last["response"];
    assert_eq!(response["output"], json!(items));
    let Some(reason) = done else {
        assert_eq!(kind(last), "response.failed");
        return;
    };
    assert!(open.is_none());
    let cut = responses::cut_short(reason, &s.calls);
    let status = if cut { "incomplete" } else { "completed" };
    assert_eq!(kind(last), format!("response.{status}"));
    assert_eq!(response["status"], status);
    let usage = &response["usage"];
    assert_eq!(
        usage["total_tokens"],
        u64::from(prompt_tokens)
            .saturating_add(u64::from(completion_tokens))
            .min(u64::from(u32::MAX))
    );
    // The whole answer of the same parts says the same.
    let streamed: Vec<OutputItem> = serde_json::from_value(json!(items)).expect("items read back");
    let (thinking, text) = s.joined();
    let whole = responses::whole_items("resp_1", thinking, text, &s.calls, reason);
    assert_eq!(responses::texts(&streamed), responses::texts(&whole));
    let calls = |items: &[OutputItem]| -> Vec<OutputItem> {
        items
            .iter()
            .filter(|i| matches!(i, OutputItem::FunctionCall { .. }))
            .cloned()
            .collect()
    };
    assert_eq!(calls(&streamed), calls(&whole));
}
