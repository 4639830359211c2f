//! What a stored response keeps to be continued, and how a request continues it: the row's
//! `history` is the whole conversation up to and including its answer (so a
//! `previous_response_id` is one row read, never a walk back through earlier rows), written
//! when the answer is stored and read back when a later request names it.

use crate::generation::{merge_leading_system, ChatMessage};
use crate::tools::ToolCall;

/// The row's `history`: `conversation` (without the instructions), then the answer as an
/// assistant turn of its text and calls; its thinking is left out, as templates drop it.
pub fn history_row(mut conversation: Vec<ChatMessage>, text: String, calls: &[ToolCall]) -> String {
    let mut reply = ChatMessage::new("assistant", text);
    reply.tool_calls = calls.to_vec();
    conversation.push(reply);
    serde_json::to_string(&conversation).unwrap_or_default()
}

/// A row's `history` read back; an error names what is wrong with it.
pub fn read_history(row: &str) -> Result<Vec<ChatMessage>, serde_json::Error> {
    serde_json::from_str(row)
}

/// A request's conversation: what it continues, then its input.
#[derive(Debug, Clone, PartialEq)]
pub struct Continued {
    /// What the answer's row will keep (the instructions not among it: they are not carried
    /// to a continuation, as OpenAI has it).
    pub conversation: Vec<ChatMessage>,
    /// What the model is shown: the instructions first, the leading system turns as one.
    pub messages: Vec<ChatMessage>,
}

/// The conversation of a request with `input` that continues `previous` (a stored row's
/// history, or nothing).
pub fn continued(
    previous: Vec<ChatMessage>,
    input: Vec<ChatMessage>,
    instructions: Option<&str>,
) -> Continued {
    let mut conversation = previous;
    conversation.extend(input);
    let mut messages = Vec::with_capacity(conversation.len() + 1);
    if let Some(i) = instructions {
        messages.push(ChatMessage::new("system", i));
    }
    messages.extend(conversation.iter().cloned());
    merge_leading_system(&mut messages);
    Continued {
        conversation,
        messages,
    }
}
