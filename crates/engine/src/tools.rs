//! Tools in the prompt: which tool-call format a model's chat template speaks, the conversation
//! as that format shows it (the template's own `tools`, or llama-server's generic format, the
//! tools described in a system message), and the grammar a call must follow. The doors read
//! calls back ([`crate::answer`]) by the strings in [`markers`].

use hearth_protocol::tools::{Tool, ToolCall, ToolSet};
use hearth_protocol::ChatMessage;
use serde_json::{json, Value};

use crate::grammar::{self, GrammarError};

/// How a model writes a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (Hermes, Qwen 2.5 and 3).
    Hermes,
    /// A bare `{"name": ..., "parameters": ...}` object (Llama 3.1 to 3.3).
    Llama3,
    /// `[TOOL_CALLS] [{"name": ..., "arguments": ...}]` (Mistral).
    Mistral,
    /// A template that knows no tools: llama-server's generic format, one JSON object,
    /// `{"tool_call": ...}`, `{"tool_calls": [...]}` or `{"response": "..."}`.
    Generic,
}

/// The strings that open a call in each format, for readers of the model's text.
pub mod markers {
    pub const HERMES_OPEN: &str = "<tool_call>";
    pub const HERMES_CLOSE: &str = "</tool_call>";
    pub const MISTRAL: &str = "[TOOL_CALLS]";
    pub const LLAMA3_PYTHON_TAG: &str = "<|python_tag|>";
}

impl ToolFormat {
    /// The format a chat template's source speaks, judged by the markers it writes.
    pub fn of_template(source: &str) -> Self {
        if !source.contains("tools") {
            Self::Generic
        } else if source.contains(markers::HERMES_OPEN) {
            Self::Hermes
        } else if source.contains(markers::MISTRAL) {
            Self::Mistral
        } else if source.contains("<|start_header_id|>") {
            Self::Llama3
        } else {
            Self::Generic
        }
    }
}

/// Whether every callable tool's schema can become a grammar: what a door checks before a
/// request leaves it, so a bad schema is refused wherever the answer would have run.
pub fn check(tools: &ToolSet) -> Result<(), GrammarError> {
    call_schema(tools, ToolFormat::Generic).map(drop)
}

/// A conversation with tools, ready for the template, and the grammar of the answer.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub messages: Vec<ChatMessage>,
    /// The tools for the template's `tools` variable (native formats only).
    pub template_tools: Option<Vec<Tool>>,
    pub grammar: Option<String>,
    /// Words that switch a lazy grammar on; empty: the grammar holds from the first token.
    pub triggers: Vec<String>,
}

pub(crate) fn prepare(
    format: ToolFormat,
    messages: &[ChatMessage],
    tools: &ToolSet,
) -> Result<Prepared, GrammarError> {
    let call = call_schema(tools, format)?;
    match format {
        ToolFormat::Generic => Ok(Prepared {
            messages: generic_messages(messages, tools),
            template_tools: None,
            grammar: Some(generic_grammar(tools, call)?),
            triggers: Vec::new(),
        }),
        native => {
            let (grammar, trigger) = native_grammar(native, tools, call)?;
            Ok(Prepared {
                messages: messages.to_vec(),
                template_tools: Some(tools.tools.clone()),
                triggers: match (tools.must_call(), trigger) {
                    (false, Some(t)) => vec![t.to_owned()],
                    _ => Vec::new(),
                },
                // A bare-JSON format has no word to wait for: `auto` is read, not constrained.
                grammar: (tools.must_call() || trigger.is_some()).then_some(grammar),
            })
        }
    }
}

/// The schema of one call to any callable tool: `name` fixed per tool, its arguments by the
/// tool's own schema (Llama 3 names them `parameters`).
fn call_schema(tools: &ToolSet, format: ToolFormat) -> Result<Value, GrammarError> {
    let args = if format == ToolFormat::Llama3 {
        "parameters"
    } else {
        "arguments"
    };
    let one: Vec<Value> = tools
        .callable()
        .map(|t| {
            json!({
                "type": "object",
                "properties": {"name": {"const": t.name}, args: t.parameters},
                "required": ["name", args],
            })
        })
        .collect();
    // Each tool's schema is checked on its own, so an error names the tool.
    for (t, s) in tools.callable().zip(&one) {
        grammar::from_json_schema(s).map_err(|e| match e {
            GrammarError::Schema(why) => {
                GrammarError::Schema(format!("function {:?}'s parameters: {why}", t.name))
            }
            other => other,
        })?;
    }
    Ok(match one.len() {
        1 => one.into_iter().next().unwrap_or(Value::Null),
        _ => json!({"anyOf": one}),
    })
}

fn generic_schema(tools: &ToolSet, call: Value) -> Value {
    let calls = if tools.parallel {
        json!({"type": "object", "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}}, "required": ["tool_calls"]})
    } else {
        json!({"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"]})
    };
    if tools.must_call() {
        calls
    } else {
        json!({"anyOf": [calls, {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}]})
    }
}

fn generic_grammar(tools: &ToolSet, call: Value) -> Result<String, GrammarError> {
    grammar::from_json_schema(&generic_schema(tools, call))
}

/// The grammar of a native call, and the word that starts one (for `auto`'s lazy grammar).
fn native_grammar(
    format: ToolFormat,
    tools: &ToolSet,
    call: Value,
) -> Result<(String, Option<&'static str>), GrammarError> {
    let call_rules = renamed_root(&grammar::from_json_schema(&call)?, "call");
    let repeat = |one: &str, sep: &str| {
        if tools.parallel {
            format!("{one} ({sep} {one})*")
        } else {
            one.to_owned()
        }
    };
    Ok(match format {
        ToolFormat::Hermes => {
            let one = format!(
                "{:?} call {:?}",
                format!("{}\n", markers::HERMES_OPEN),
                format!("\n{}", markers::HERMES_CLOSE)
            );
            (
                format!("root ::= {}\n{call_rules}", repeat(&one, "\"\\n\"")),
                Some(markers::HERMES_OPEN),
            )
        }
        ToolFormat::Mistral => (
            format!(
                "root ::= {:?} \"[\" {} \"]\"\n{call_rules}",
                markers::MISTRAL,
                repeat("call", "\", \"")
            ),
            Some(markers::MISTRAL),
        ),
        ToolFormat::Llama3 | ToolFormat::Generic => (format!("root ::= call\n{call_rules}"), None),
    })
}

/// A converter's grammar with its start rule named `name`, to be used inside another grammar.
fn renamed_root(grammar: &str, name: &str) -> String {
    grammar
        .lines()
        .map(|l| match l.strip_prefix(grammar::ROOT) {
            Some(rest) if rest.trim_start().starts_with("::=") => format!("{name}{rest}"),
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The conversation for a template without tools: the tools and the answer's format described
/// in the system message, earlier calls written as the JSON the model would have written, and
/// tool results as user turns (templates that know no tools may refuse a `tool` role).
fn generic_messages(messages: &[ChatMessage], tools: &ToolSet) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    let described = generic_system(tools);
    match messages.first() {
        Some(m) if m.role == "system" => {
            out.push(ChatMessage::new(
                "system",
                format!("{}\n\n{described}", m.content),
            ));
        }
        _ => out.push(ChatMessage::new("system", described)),
    }
    let skip = usize::from(messages.first().is_some_and(|m| m.role == "system"));
    out.extend(generic_turns(&messages[skip..], Some(tools.parallel)));
    out
}

/// A history with tool turns, for a template without tools when no tools are offered now
/// (the turn after the last call): the calls and results written as the generic format does.
/// `None` when the history has no tool turns.
pub(crate) fn generic_history(messages: &[ChatMessage]) -> Option<Vec<ChatMessage>> {
    messages
        .iter()
        .any(|m| m.role == "tool" || !m.tool_calls.is_empty())
        .then(|| generic_turns(messages, None).collect())
}

/// `json`: the calls as the JSON the model wrote (`Some(parallel)`), for a turn that may call
/// again; `None`: in words, for a turn that answers (a small model copies JSON it sees).
fn generic_turns(
    messages: &[ChatMessage],
    json: Option<bool>,
) -> impl Iterator<Item = ChatMessage> + '_ {
    messages.iter().map(move |m| match m.role.as_str() {
        "assistant" if !m.tool_calls.is_empty() => ChatMessage::new(
            "assistant",
            match json {
                Some(parallel) => generic_calls(&m.tool_calls, parallel),
                None => m
                    .tool_calls
                    .iter()
                    .map(|c| format!("I called {}({}).", c.name, c.arguments))
                    .collect::<Vec<_>>()
                    .join(" "),
            },
        ),
        "tool" => {
            // The function's name: the turn's own, or that of the call it answers.
            let name = m.name.clone().or_else(|| {
                messages
                    .iter()
                    .flat_map(|a| &a.tool_calls)
                    .find(|c| Some(&c.id) == m.tool_call_id.as_ref())
                    .map(|c| c.name.clone())
            });
            let from = name.unwrap_or_else(|| "The function".to_owned());
            ChatMessage::new("user", format!("{from} returned: {}", m.content))
        }
        _ => ChatMessage::new(m.role.clone(), m.content.clone()),
    })
}

fn generic_calls(calls: &[ToolCall], parallel: bool) -> String {
    let one = |c: &ToolCall| json!({"name": c.name, "arguments": c.arguments});
    match (parallel, calls) {
        (false, [c]) => json!({"tool_call": one(c)}).to_string(),
        _ => json!({"tool_calls": calls.iter().map(one).collect::<Vec<_>>()}).to_string(),
    }
}

fn generic_system(tools: &ToolSet) -> String {
    let list: Vec<Value> = tools
        .callable()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    let call = if tools.parallel {
        r#"{"tool_calls": [{"name": "<function name>", "arguments": {<its arguments>}}]}"#
    } else {
        r#"{"tool_call": {"name": "<function name>", "arguments": {<its arguments>}}}"#
    };
    let how = if tools.must_call() {
        format!("You must call a function. Answer with one JSON object and nothing else:\n{call}")
    } else {
        format!(
            "Answer with one JSON object and nothing else: to call a function,\n{call}\nor, to answer the user directly,\n{{\"response\": \"<your answer>\"}}"
        )
    };
    format!(
        "You can call these functions:\n{}\n\n{how}",
        Value::Array(list)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_protocol::tools::ToolChoice;

    fn weather(choice: ToolChoice, parallel: bool) -> ToolSet {
        ToolSet {
            tools: vec![Tool {
                name: "get_weather".into(),
                description: Some("Weather in a city".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            }],
            choice,
            parallel,
        }
    }

    #[test]
    fn formats_are_told_by_their_templates() {
        assert_eq!(
            ToolFormat::of_template("{{ messages }}"),
            ToolFormat::Generic
        );
        assert_eq!(
            ToolFormat::of_template("{% if tools %}<tool_call>{% endif %}"),
            ToolFormat::Hermes
        );
        assert_eq!(
            ToolFormat::of_template("{% if tools %}[TOOL_CALLS]{% endif %}"),
            ToolFormat::Mistral
        );
        assert_eq!(
            ToolFormat::of_template("<|start_header_id|>{% if tools %}{% endif %}"),
            ToolFormat::Llama3
        );
    }

    /// A question, a call to get_weather, and its result.
    fn history() -> [ChatMessage; 3] {
        let mut call = ChatMessage::new("assistant", "");
        call.tool_calls = vec![ToolCall {
            id: "c1".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Oslo"}),
        }];
        let mut result = ChatMessage::new("tool", "-3 C");
        result.tool_call_id = Some("c1".into());
        [ChatMessage::new("user", "weather?"), call, result]
    }

    #[test]
    fn generic_messages_describe_the_tools_and_rewrite_the_tool_turns() {
        let p = prepare(
            ToolFormat::Generic,
            &history(),
            &weather(ToolChoice::Required, false),
        )
        .unwrap();
        assert_eq!(p.messages[0].role, "system");
        assert!(p.messages[0].content.contains("get_weather"));
        assert!(p.messages[0].content.contains("You must call"));
        assert_eq!(
            p.messages[2].content,
            r#"{"tool_call":{"arguments":{"city":"Oslo"},"name":"get_weather"}}"#
        );
        assert_eq!(p.messages[3].role, "user");
        assert!(p.messages[3].content.contains("-3 C"));
        assert!(p.template_tools.is_none() && p.triggers.is_empty());
        assert!(p.grammar.unwrap().contains("tool_call"));
    }

    #[test]
    fn a_history_with_tool_turns_is_written_in_words_when_no_tools_are_offered() {
        assert!(generic_history(&[ChatMessage::new("user", "hi")]).is_none());
        let h = generic_history(&history()).unwrap();
        assert_eq!(h[1].content, r#"I called get_weather({"city":"Oslo"})."#);
        assert_eq!(
            (h[2].role.as_str(), h[2].content.as_str()),
            ("user", "get_weather returned: -3 C")
        );
    }

    #[test]
    fn native_auto_waits_for_the_marker_and_required_does_not() {
        let auto = prepare(ToolFormat::Hermes, &[], &weather(ToolChoice::Auto, true)).unwrap();
        assert_eq!(auto.triggers, ["<tool_call>"]);
        let g = auto.grammar.unwrap();
        assert!(g.starts_with("root ::= \"<tool_call>\\n\" call"), "{g}");
        assert!(g.contains("\ncall ::="), "{g}");
        let required = prepare(
            ToolFormat::Hermes,
            &[],
            &weather(ToolChoice::Required, false),
        )
        .unwrap();
        assert!(required.triggers.is_empty() && required.grammar.is_some());
        let llama_auto =
            prepare(ToolFormat::Llama3, &[], &weather(ToolChoice::Auto, true)).unwrap();
        assert!(llama_auto.grammar.is_none());
        assert!(llama_auto.template_tools.is_some());
    }

    #[test]
    fn a_schema_the_converter_cannot_read_names_its_function() {
        let mut set = weather(ToolChoice::Auto, true);
        set.tools[0].parameters =
            json!({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}});
        let e = prepare(ToolFormat::Generic, &[], &set).unwrap_err();
        assert!(e.to_string().contains("get_weather"), "{e}");
    }
}
