//! Tool calls read back out of a model's text, in every format the engine may have asked for
//! (`crate::tools`): Hermes `<tool_call>` blocks, Mistral `[TOOL_CALLS]`, Llama 3's bare
//! or `<|python_tag|>` JSON, and the generic `{"tool_call"}`/`{"tool_calls"}`/`{"response"}`.
//! Reading every format means a door needs no word from the node that ran the answer.

use crate::tools::markers;
use hearth_protocol::tools::{arguments_value, ToolCall, ToolSet};
use serde_json::Value;

use super::reasoning::partial_suffix;
use super::reply::{opening, Opening, Reply};

const MARKERS: [&str; 3] = [
    markers::HERMES_OPEN,
    markers::MISTRAL,
    markers::LLAMA3_PYTHON_TAG,
];

/// What the held part of an answer turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Read {
    /// Calls, and any text beside them.
    Calls {
        content: String,
        calls: Vec<ToolCall>,
    },
    /// Plain text (a generic `{"response"}` unwrapped).
    Text(String),
    /// It began as a call but is not one: cut off, or not valid JSON.
    Broken(String),
}

/// Streams content through while it cannot be a call, and holds it once it may be one; a
/// generic reply (`{"response": "..."}`) streams its text as it comes.
#[derive(Debug, Default)]
pub(super) struct Scanner {
    pending: String,
    holding: bool,
    started: bool,
    /// The answer began with JSON: a generic reply or call, or a bare Llama 3 call.
    json_first: bool,
    /// Whether the JSON is a generic reply: unknown until enough of it came.
    reply: Option<Option<Reply>>,
}

impl Scanner {
    /// Text that is surely not part of a call, released now.
    pub(super) fn push(&mut self, text: &str) -> String {
        self.pending.push_str(text);
        if self.holding {
            return self.reply_text();
        }
        if !self.started {
            let t = self.pending.trim_start();
            if t.is_empty() {
                return String::new();
            }
            self.started = true;
            // JSON first: the generic format, or Llama 3's bare call.
            if t.starts_with('{') || t.starts_with('[') {
                self.holding = true;
                self.json_first = true;
                return self.reply_text();
            }
        }
        if let Some(at) = MARKERS.iter().filter_map(|m| self.pending.find(m)).min() {
            self.holding = true;
            let released = self.pending[..at].to_owned();
            self.pending.drain(..at);
            return released;
        }
        let keep = MARKERS
            .iter()
            .map(|m| partial_suffix(&self.pending, m))
            .max()
            .unwrap_or(0);
        let released = self.pending[..self.pending.len() - keep].to_owned();
        self.pending.drain(..released.len());
        released
    }

    /// What a generic reply's text has newly decoded (nothing for anything else).
    fn reply_text(&mut self) -> String {
        if !self.json_first {
            return String::new();
        }
        if self.reply.is_none() {
            self.reply = match opening(&self.pending) {
                Opening::NotYet => return String::new(),
                Opening::At(at) => Some(Some(Reply::new(at))),
                Opening::No => Some(None),
            };
        }
        match &mut self.reply {
            Some(Some(r)) => r.take(&self.pending),
            _ => String::new(),
        }
    }

    /// The held text, read, and the text itself. A streamed reply's text comes back without
    /// what already went out.
    pub(super) fn finish(self, tools: &ToolSet, id: &str) -> (Read, String) {
        let mut read = if self.holding {
            read(&self.pending, tools, id)
        } else {
            Read::Text(self.pending.clone())
        };
        if let (Read::Text(t), Some(Some(r))) = (&read, &self.reply) {
            // Text that does not go on from the streamed part (a reply that was not JSON after
            // all) adds nothing: the client has the reply as far as it read.
            read = Read::Text(t.strip_prefix(&r.emitted).unwrap_or_default().to_owned());
        }
        (read, self.pending)
    }
}

/// Read `text` (an answer, or its held end) for calls.
pub(super) fn read(text: &str, tools: &ToolSet, id: &str) -> Read {
    let calls = |found: Vec<Value>, content: &str| -> Read {
        let mut out = Vec::with_capacity(found.len());
        for (i, v) in found.into_iter().enumerate() {
            match call(v, tools, &format!("call_{id}_{i}")) {
                Ok(c) => out.push(c),
                Err(e) => return Read::Broken(e),
            }
        }
        if out.is_empty() {
            return Read::Broken("the model wrote an empty list of tool calls".into());
        }
        Read::Calls {
            content: content.trim().to_owned(),
            calls: out,
        }
    };
    if let Some(at) = text.find(markers::HERMES_OPEN) {
        let mut found = Vec::new();
        // Text around the blocks stays the answer's.
        let mut around = text[..at].to_owned();
        for block in text[at..].split(markers::HERMES_OPEN).skip(1) {
            let Some(end) = block.find(markers::HERMES_CLOSE) else {
                return Read::Broken(cut("<tool_call>"));
            };
            match serde_json::from_str(block[..end].trim()) {
                Ok(v) => found.push(v),
                Err(e) => return Read::Broken(format!("a <tool_call> holds no valid JSON: {e}")),
            }
            around.push_str(&block[end + markers::HERMES_CLOSE.len()..]);
        }
        return calls(found, &around);
    }
    for marker in [markers::MISTRAL, markers::LLAMA3_PYTHON_TAG] {
        if let Some(at) = text.find(marker) {
            return match serde_json::from_str::<Value>(text[at + marker.len()..].trim()) {
                Ok(Value::Array(a)) => calls(a, &text[..at]),
                Ok(v) => calls(vec![v], &text[..at]),
                Err(e) if e.is_eof() => Read::Broken(cut(marker)),
                Err(e) => Read::Broken(format!("the call after {marker} is not valid JSON: {e}")),
            };
        }
    }
    let t = text.trim();
    if !t.starts_with('{') && !t.starts_with('[') {
        return Read::Text(text.to_owned());
    }
    match serde_json::from_str::<Value>(t) {
        Ok(Value::Object(mut o)) => {
            if let Some(c) = o.remove("tool_call") {
                return calls(vec![c], "");
            }
            if let Some(Value::Array(a)) = o.remove("tool_calls") {
                return calls(a, "");
            }
            if o.len() == 1 {
                if let Some(Value::String(r)) = o.get("response") {
                    return Read::Text(r.clone());
                }
            }
            // Llama 3's bare call, when it names a tool offered.
            let named = o.get("name").and_then(Value::as_str);
            if named.is_some_and(|n| tools.callable().any(|t| t.name == n)) {
                return calls(vec![Value::Object(o)], "");
            }
            Read::Text(text.to_owned())
        }
        Ok(_) => Read::Text(text.to_owned()),
        Err(e) if e.is_eof() && t.contains("\"tool_call") => Read::Broken(cut("the JSON call")),
        // A generic answer cut short: the part of its text that came.
        Err(e) if e.is_eof() => Read::Text(partial_response(t).unwrap_or_else(|| text.to_owned())),
        Err(_) => Read::Text(text.to_owned()),
    }
}

fn cut(what: &str) -> String {
    format!("the model's tool call ({what}) ended before it was complete")
}

/// One call: `{"name", "arguments"}` (or Llama 3's `parameters`), naming an offered tool.
fn call(v: Value, tools: &ToolSet, id: &str) -> Result<ToolCall, String> {
    let Value::Object(mut o) = v else {
        return Err(format!("a tool call must be a JSON object, got {v}"));
    };
    let name = match o.remove("name") {
        Some(Value::String(n)) => n,
        _ => return Err("a tool call has no function name".into()),
    };
    if !tools.callable().any(|t| t.name == name) {
        return Err(format!(
            "the model called {name:?}, which is not among the tools offered"
        ));
    }
    let arguments = o
        .remove("arguments")
        .or_else(|| o.remove("parameters"))
        .map_or(Value::Object(Default::default()), arguments_value);
    // Clients read arguments as an object (Ollama's and the Vercel AI SDK's types require it).
    if !arguments.is_object() {
        return Err(format!(
            "the model's call to {name:?} has arguments that are not a JSON object: {arguments}"
        ));
    }
    Ok(ToolCall {
        id: id.to_owned(),
        name,
        arguments,
    })
}

/// The text of a generic `{"response": "...` cut before its end.
fn partial_response(t: &str) -> Option<String> {
    let rest = t.strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix("\"response\"")?.trim_start();
    let mut s = rest
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?
        .to_owned();
    // Drop a half-written escape, then close the string.
    while !s.is_empty() {
        if let Ok(Value::String(done)) = serde_json::from_str(&format!("\"{s}\"")) {
            return Some(done);
        }
        s.pop();
    }
    Some(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_protocol::tools::{Tool, ToolChoice};
    use serde_json::json;

    fn tools() -> ToolSet {
        ToolSet {
            tools: vec![Tool {
                name: "get_weather".into(),
                description: None,
                parameters: json!({"type": "object"}),
            }],
            choice: ToolChoice::Auto,
            parallel: true,
        }
    }

    fn calls(r: Read) -> (String, Vec<(String, Value)>) {
        match r {
            Read::Calls { content, calls } => (
                content,
                calls.into_iter().map(|c| (c.name, c.arguments)).collect(),
            ),
            other => panic!("no calls: {other:?}"),
        }
    }

    #[test]
    fn every_family_is_read() {
        let oslo = || vec![("get_weather".to_string(), json!({"city": "Oslo"}))];
        for text in [
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
            "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
            "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}}",
            "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}]}",
        ] {
            assert_eq!(calls(read(text, &tools(), "1")), (String::new(), oslo()), "{text}");
        }
        let (content, two) = calls(read(
            "Let me look.\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
            &tools(),
            "1",
        ));
        assert_eq!(content, "Let me look.");
        assert_eq!(two.len(), 2);
        let (after, _) = calls(read(
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>\nDone.",
            &tools(),
            "1",
        ));
        assert_eq!(after, "Done.", "text after the last call stays");
    }

    #[test]
    fn text_responses_and_broken_calls() {
        assert_eq!(
            read("{\"response\": \"Hi!\"}", &tools(), "1"),
            Read::Text("Hi!".into())
        );
        assert_eq!(
            read("{\"response\": \"Hi the", &tools(), "1"),
            Read::Text("Hi the".into())
        );
        assert_eq!(
            read("Just text", &tools(), "1"),
            Read::Text("Just text".into())
        );
        assert_eq!(
            read("{\"a\": 1}", &tools(), "1"),
            Read::Text("{\"a\": 1}".into())
        );
        for broken in [
            "<tool_call>{\"name\": \"get_weather\", \"argu",
            "{\"tool_call\": {\"name\": \"get_wea",
            "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"Oslo\"}</tool_call>",
            "[TOOL_CALLS] [{\"name\"",
        ] {
            assert!(
                matches!(read(broken, &tools(), "1"), Read::Broken(_)),
                "{broken}"
            );
        }
    }

    #[test]
    fn the_scanner_releases_text_until_a_call_may_start() {
        let mut s = Scanner::default();
        let mut out = String::new();
        for piece in [
            "Let me ",
            "check. <tool",
            "_call>{\"name\": \"get_weather\", ",
            "\"arguments\": {}}</tool_call>",
        ] {
            out.push_str(&s.push(piece));
        }
        assert_eq!(out, "Let me check. ");
        let (_, c) = calls(s.finish(&tools(), "1").0);
        assert_eq!(c.len(), 1);
        let mut s = Scanner::default();
        assert_eq!(s.push("Hello <"), "Hello ");
        assert_eq!(s.push("b>"), "<b>");
        assert_eq!(s.finish(&tools(), "1").0, Read::Text(String::new()));
        // A generic reply streams its text as it comes, and the end adds only what is left.
        let mut s = Scanner::default();
        assert_eq!(s.push("  {\"resp"), "");
        assert_eq!(s.push("onse\": \"Hi \\"), "Hi ");
        assert_eq!(s.push("\"you\\\" th"), "\"you\" th");
        assert_eq!(s.push("ere\"}"), "ere");
        assert_eq!(s.finish(&tools(), "1").0, Read::Text(String::new()));
        let mut s = Scanner::default();
        assert_eq!(s.push("{\"response\": \"Hi the"), "Hi the");
        assert_eq!(
            s.finish(&tools(), "1").0,
            Read::Text(String::new()),
            "cut: no repeat"
        );
        let mut s = Scanner::default();
        assert_eq!(
            s.push("{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {}}}"),
            ""
        );
        assert!(matches!(s.finish(&tools(), "1").0, Read::Calls { .. }));
    }
}
