//! The Messages door's answer from the parts the answer's reader split (thinking, text, calls)
//! and how generation ended: the whole message, or the same streamed as content blocks opened,
//! filled and closed in Anthropic's order ([`Blocks`]). The door adds only the first events
//! (`message_start`, `ping`) and its errors.

use serde_json::json;

use super::{Block, BlockDelta, Message, MessageDelta, StreamEvent, Usage};
use crate::generation::{FinishReason, Piece};
use crate::tools::ToolCall;

/// How generation ended, in the figures the Messages door reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub reason: FinishReason,
    /// The stop string that ended the answer, when one did.
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

/// A call as a `tool_use` block (ids as Anthropic writes them).
pub fn tool_use(c: &ToolCall) -> Block {
    Block::ToolUse {
        id: c.id.replacen("call_", "toolu_", 1),
        name: c.name.clone(),
        input: c.arguments.clone(),
    }
}

/// Why the answer ended, in Anthropic's words, and the stop sequence that ended it.
pub fn stop_reason(ended: &Ended, calls: &[ToolCall]) -> (&'static str, Option<String>) {
    if !calls.is_empty() {
        return ("tool_use", None);
    }
    match ended.reason {
        FinishReason::Length => ("max_tokens", None),
        FinishReason::Stop if ended.stop_sequence.is_some() => {
            ("stop_sequence", ended.stop_sequence.clone())
        }
        FinishReason::Stop | FinishReason::Cancelled => ("end_turn", None),
    }
}

/// The whole answer: its thinking, its text (an empty one when there is nothing else), its
/// calls as `tool_use` blocks.
pub fn whole(
    id: String,
    model: String,
    thinking: Option<String>,
    text: String,
    calls: &[ToolCall],
    ended: &Ended,
) -> Message {
    let mut message = Message::new(id, model);
    if let Some(t) = thinking {
        message.content.push(Block::Thinking {
            thinking: t,
            signature: String::new(),
        });
    }
    if !text.is_empty() || calls.is_empty() {
        message.content.push(Block::Text { text });
    }
    message.content.extend(calls.iter().map(tool_use));
    let (reason, sequence) = stop_reason(ended, calls);
    message.stop_reason = Some(reason);
    message.stop_sequence = sequence;
    message.usage = ended.usage;
    message
}

/// Which block is streaming: a block opens when the kind of text changes, and closes
/// before the next one or the calls.
#[derive(Debug, Default)]
pub struct Blocks {
    /// The index of the open block, or of the next one.
    index: usize,
    open: Option<Kind>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
}

impl Blocks {
    /// The events of pieces as they stream.
    pub fn pieces(&mut self, pieces: Vec<Piece>, out: &mut Vec<StreamEvent>) {
        for p in pieces {
            let (kind, delta) = match p {
                Piece::Content(text) => (Kind::Text, BlockDelta::TextDelta { text }),
                Piece::Reasoning(thinking) => {
                    (Kind::Thinking, BlockDelta::ThinkingDelta { thinking })
                }
            };
            if self.open != Some(kind) {
                self.close(out);
                let content_block = match kind {
                    Kind::Text => Block::Text {
                        text: String::new(),
                    },
                    Kind::Thinking => Block::Thinking {
                        thinking: String::new(),
                        signature: String::new(),
                    },
                };
                out.push(StreamEvent::ContentBlockStart {
                    index: self.index,
                    content_block,
                });
                self.open = Some(kind);
            }
            out.push(StreamEvent::ContentBlockDelta {
                index: self.index,
                delta,
            });
        }
    }

    /// The last events, once the answer ended: the pieces held back till then, an (empty)
    /// text block when there was nothing at all, as the whole answer has one, the calls,
    /// `message_delta` and `message_stop`.
    pub fn end(
        &mut self,
        pieces: Vec<Piece>,
        calls: &[ToolCall],
        ended: &Ended,
        out: &mut Vec<StreamEvent>,
    ) {
        self.pieces(pieces, out);
        if calls.is_empty() {
            self.at_least_one(out);
        }
        self.calls(calls, out);
        let (reason, sequence) = stop_reason(ended, calls);
        out.push(StreamEvent::MessageDelta {
            delta: MessageDelta {
                stop_reason: reason,
                stop_sequence: sequence,
            },
            usage: ended.usage,
        });
        out.push(StreamEvent::MessageStop);
    }

    fn at_least_one(&mut self, out: &mut Vec<StreamEvent>) {
        if self.index == 0 && self.open.is_none() {
            out.push(StreamEvent::ContentBlockStart {
                index: 0,
                content_block: Block::Text {
                    text: String::new(),
                },
            });
            self.open = Some(Kind::Text);
        }
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(kind) = self.open.take() {
            if kind == Kind::Thinking {
                out.push(StreamEvent::ContentBlockDelta {
                    index: self.index,
                    delta: BlockDelta::SignatureDelta {
                        signature: String::new(),
                    },
                });
            }
            out.push(StreamEvent::ContentBlockStop { index: self.index });
            self.index += 1;
        }
    }

    /// Close what is open, then each call as a `tool_use` block whose input comes in one
    /// `input_json_delta`.
    fn calls(&mut self, calls: &[ToolCall], out: &mut Vec<StreamEvent>) {
        self.close(out);
        for c in calls {
            let Block::ToolUse { id, name, input } = tool_use(c) else {
                continue;
            };
            out.push(StreamEvent::ContentBlockStart {
                index: self.index,
                content_block: Block::ToolUse {
                    id,
                    name,
                    input: json!({}),
                },
            });
            out.push(StreamEvent::ContentBlockDelta {
                index: self.index,
                delta: BlockDelta::InputJsonDelta {
                    partial_json: input.to_string(),
                },
            });
            out.push(StreamEvent::ContentBlockStop { index: self.index });
            self.index += 1;
        }
    }
}
