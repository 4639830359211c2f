//! What a door makes of a model's raw text before a client sees it: thinking apart from the
//! answer (`reasoning`), tool calls apart from text (`tool_calls`), both while it streams and
//! at its end; and a client's `format` as the grammar the engine enforces. One reader for every
//! chat door (OpenAI, Ollama, Anthropic's, Responses'), so all split an answer the same way;
//! it knows model output only, never a door's wire format.

mod reasoning;
mod reply;
mod tool_calls;

use hearth_protocol::ollama::Format;
use hearth_protocol::tools::{ToolCall, ToolSet};
use hearth_protocol::{FinishReason, SamplingParams};

pub use reasoning::Piece;
use reasoning::Thinking;
use tool_calls::{Read, Scanner};

/// Why the answer's calls could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("{0}: max_tokens was reached first; raise max_tokens")]
    Cut(String),
    #[error("{0}")]
    Invalid(String),
}

/// How the end of an answer reads.
#[derive(Debug, Default)]
pub struct Ending {
    /// Text still held back, released now.
    pub pieces: Vec<Piece>,
    pub calls: Vec<ToolCall>,
    /// A call the answer began that could not be read and was left in the text (where that is
    /// no error: [`Splitter::broken_calls_as_text`], or text that only looked like a call): why,
    /// for the user.
    pub unread: Option<CallError>,
}

/// Splits one answer as it streams.
#[derive(Debug)]
pub struct Splitter {
    thinking: Option<Thinking>,
    tools: Option<(ToolSet, Scanner)>,
    id: String,
    /// Calls that cannot be read end the answer as text rather than as an error (see
    /// [`Splitter::broken_calls_as_text`]).
    lenient: bool,
}

impl Splitter {
    /// `reasoning`: thinking goes apart (else it stays in the text). `tools`: calls are read.
    /// `id` makes the calls' ids (`call_{id}_{n}`).
    pub fn new(reasoning: bool, tools: Option<ToolSet>, id: impl Into<String>) -> Self {
        Self {
            thinking: reasoning.then(|| Thinking::new(false)),
            tools: tools.map(|t| (t, Scanner::default())),
            id: id.into(),
            lenient: false,
        }
    }

    /// A call cut short or not valid, or a required call that never came, is the answer's
    /// text: the agents' doors (Anthropic's, Responses') end such an answer as `max_tokens` /
    /// `incomplete` or as a plain reply, as their APIs do, where the OpenAI and Ollama doors
    /// answer with an error. Their clients (Claude Code, Codex) take a 400 as final and a 500 as
    /// a reason to run the whole turn again.
    pub fn broken_calls_as_text(mut self) -> Self {
        self.lenient = true;
        self
    }

    /// The text starts inside a thinking block the prompt opened (see
    /// `ModelInfo::opens_thinking`).
    pub fn opened_thinking(mut self, opened: bool) -> Self {
        if opened && self.thinking.is_some() {
            self.thinking = Some(Thinking::new(true));
        }
        self
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let mut pieces = Vec::new();
        match &mut self.thinking {
            Some(t) => t.push(text, &mut pieces),
            None => pieces.push(Piece::Content(text.to_owned())),
        }
        self.scan(pieces)
    }

    /// Everything held, and the calls, once the answer ended for `reason`.
    pub fn finish(mut self, reason: FinishReason) -> Result<Ending, CallError> {
        let mut pieces = Vec::new();
        if let Some(t) = self.thinking.take() {
            t.finish(&mut pieces);
        }
        let mut pieces = self.scan(pieces);
        let Some((tools, scanner)) = self.tools else {
            return Ok(Ending {
                pieces,
                ..Ending::default()
            });
        };
        let (read, held) = scanner.finish(&tools, &self.id);
        let mut unread = None;
        let calls = match read {
            Read::Calls { content, calls } => {
                push_content(&mut pieces, content);
                calls
            }
            Read::Text(text) => {
                if tools.must_call() && !self.lenient {
                    return Err(failure(
                        reason,
                        "the model answered without calling a tool".into(),
                    ));
                }
                push_content(&mut pieces, text);
                vec![]
            }
            // A call cut off, or one asked for: an error. Under `auto` with no grammar yet
            // (text that only looked like a call), the text is the answer, as llama-server has it.
            Read::Broken(why)
                if !self.lenient && (tools.must_call() || reason == FinishReason::Length) =>
            {
                return Err(failure(reason, why))
            }
            Read::Broken(why) => {
                unread = Some(failure(reason, why));
                push_content(&mut pieces, held);
                vec![]
            }
        };
        Ok(Ending {
            pieces,
            calls,
            unread,
        })
    }

    /// Content through the tool scanner, when there is one.
    fn scan(&mut self, pieces: Vec<Piece>) -> Vec<Piece> {
        let Some((_, scanner)) = &mut self.tools else {
            return pieces.into_iter().filter(|p| !is_empty(p)).collect();
        };
        let mut out = Vec::with_capacity(pieces.len());
        for p in pieces {
            match p {
                Piece::Content(t) => push_content(&mut out, scanner.push(&t)),
                r => out.push(r),
            }
        }
        out.retain(|p| !is_empty(p));
        out
    }
}

/// The whole of a finished answer: its thinking, its text and its calls.
pub fn split_whole(
    mut splitter: Splitter,
    text: &str,
    reason: FinishReason,
) -> Result<(Option<String>, String, Vec<ToolCall>), CallError> {
    let mut pieces = splitter.push(text);
    let end = splitter.finish(reason)?;
    pieces.extend(end.pieces);
    let (mut thinking, mut content) = (None::<String>, String::new());
    for p in pieces {
        match p {
            Piece::Reasoning(r) => thinking.get_or_insert_with(String::new).push_str(&r),
            Piece::Content(c) => content.push_str(&c),
        }
    }
    Ok((thinking, content, end.calls))
}

fn failure(reason: FinishReason, why: String) -> CallError {
    if reason == FinishReason::Length {
        CallError::Cut(why)
    } else {
        CallError::Invalid(why)
    }
}

fn push_content(out: &mut Vec<Piece>, text: String) {
    if !text.is_empty() {
        out.push(Piece::Content(text));
    }
}

fn is_empty(p: &Piece) -> bool {
    match p {
        Piece::Reasoning(t) | Piece::Content(t) => t.is_empty(),
    }
}

/// Whether an answer starts inside a thinking block the template of this node's model opened
/// (`ModelInfo::opens_thinking`): never when a grammar holds from the first token (a format, a
/// required call, the generic tool format), which leaves the model no way to close it.
pub fn starts_in_thinking(
    local: Option<&crate::model::ModelInfo>,
    think: Option<bool>,
    params: &SamplingParams,
    tools: Option<&ToolSet>,
) -> bool {
    let Some(info) = local else {
        return false;
    };
    let constrained_at_once = params.grammar.is_some()
        || tools.is_some_and(|t| {
            t.must_call() || info.tool_format() == crate::tools::ToolFormat::Generic
        });
    !constrained_at_once && info.opens_thinking(think)
}

/// A client's `format` (Ollama) or `response_format` (OpenAI) as a grammar on `params`.
pub fn constrain(
    params: &mut SamplingParams,
    format: Option<Format>,
) -> Result<(), crate::grammar::GrammarError> {
    let grammar = match format {
        None => return Ok(()),
        Some(Format::Json) => crate::grammar::json_object()?,
        Some(Format::Schema(schema)) => crate::grammar::from_json_schema(&schema)?,
    };
    params.grammar = Some(grammar);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_protocol::tools::{Tool, ToolChoice};
    use serde_json::json;

    fn tools(choice: ToolChoice) -> ToolSet {
        ToolSet {
            tools: vec![Tool {
                name: "f".into(),
                description: None,
                parameters: json!({"type": "object"}),
            }],
            choice,
            parallel: true,
        }
    }

    #[test]
    fn thinking_then_a_call() {
        let s = Splitter::new(true, Some(tools(ToolChoice::Auto)), "7");
        let (thinking, content, calls) = split_whole(
            s,
            "<think>Use f.</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
            FinishReason::Stop,
        )
        .unwrap();
        assert_eq!(thinking.as_deref(), Some("Use f."));
        assert_eq!(content, "");
        assert_eq!(calls[0].id, "call_7_0");
    }

    #[test]
    fn required_calls_that_do_not_come_are_errors_named_by_why_they_ended() {
        let s = Splitter::new(false, Some(tools(ToolChoice::Required)), "1");
        let e = split_whole(
            s,
            "{\"tool_call\": {\"name\": \"f\", \"argum",
            FinishReason::Length,
        )
        .unwrap_err();
        assert!(matches!(e, CallError::Cut(_)), "{e}");
        assert!(e.to_string().contains("max_tokens"), "{e}");
        let s = Splitter::new(false, Some(tools(ToolChoice::Required)), "1");
        let e = split_whole(s, "Hello", FinishReason::Stop).unwrap_err();
        assert!(matches!(e, CallError::Invalid(_)), "{e}");
        // Under auto, a would-be call that ended by itself is the answer's text.
        let s = Splitter::new(false, Some(tools(ToolChoice::Auto)), "1");
        let (_, content, calls) =
            split_whole(s, "[TOOL_CALLS] not json", FinishReason::Stop).unwrap();
        assert_eq!(
            (content.as_str(), calls.len()),
            ("[TOOL_CALLS] not json", 0)
        );
    }

    #[test]
    fn a_lenient_splitter_ends_broken_calls_as_text() {
        let s = Splitter::new(false, Some(tools(ToolChoice::Required)), "1").broken_calls_as_text();
        let (_, content, calls) = split_whole(
            s,
            "<tool_call>{\"name\": \"f\", \"argum",
            FinishReason::Length,
        )
        .unwrap();
        assert_eq!(
            (content.as_str(), calls.len()),
            ("<tool_call>{\"name\": \"f\", \"argum", 0)
        );
        let s = Splitter::new(false, Some(tools(ToolChoice::Required)), "1").broken_calls_as_text();
        let (_, content, _) = split_whole(s, "Hello", FinishReason::Stop).unwrap();
        assert_eq!(content, "Hello");
    }

    #[test]
    fn a_lenient_splitter_says_why_a_call_was_left_as_text() {
        let ending = |text: &str, reason| {
            let mut s =
                Splitter::new(false, Some(tools(ToolChoice::Auto)), "1").broken_calls_as_text();
            s.push(text);
            s.finish(reason).unwrap()
        };
        let cut = ending(
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</",
            FinishReason::Length,
        );
        assert_eq!(
            cut.unread,
            Some(CallError::Cut(
                "the model's tool call (<tool_call>) ended before it was complete".into()
            ))
        );
        let invalid = ending("<tool_call>\n{not json}\n</tool_call>", FinishReason::Stop);
        assert!(
            matches!(&invalid.unread, Some(CallError::Invalid(why)) if why.contains("no valid JSON")),
            "{invalid:?}"
        );
        let made = ending(
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
            FinishReason::Stop,
        );
        assert_eq!((made.calls.len(), made.unread), (1, None));
        assert_eq!(ending("Hello", FinishReason::Length).unread, None);
    }

    #[test]
    fn without_reasoning_thinking_stays_in_the_text() {
        let s = Splitter::new(false, None, "1");
        let (thinking, content, _) =
            split_whole(s, "<think>x</think>y", FinishReason::Stop).unwrap();
        assert_eq!((thinking, content.as_str()), (None, "<think>x</think>y"));
    }
}
