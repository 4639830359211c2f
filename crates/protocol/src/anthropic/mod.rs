//! Anthropic's Messages API as Hearth serves it (`POST /v1/messages`, `/v1/messages/count_tokens`,
//! what Claude Code speaks): the request body and its validation into a [`MessagesRequest`]
//! (content blocks flattened into the one chat vocabulary: `tool_use` blocks become calls,
//! `tool_result` blocks `tool` turns), the answer and its stream events (`response`), how the
//! answer's parts become that message or those events (`answer`), and the error body. Fields that only steer Anthropic's service are accepted and ignored
//! (`metadata`, `cache_control`, `service_tier`, `context_management`, `output_config`, the
//! thinking budget); tools Anthropic runs on its own servers (web search, web fetch, code
//! execution) are left out, since nothing here can run them; `image` blocks in a turn's
//! content and in a tool result (Claude Code's Read of a picture) are read (base64, or a data
//! URI); documents and Anthropic-defined client tools (bash, text editor, computer) are refused.

mod answer;
mod response;

pub use answer::{stop_reason, tool_use, whole, Blocks, Ended};
pub use response::{
    Block, BlockDelta, ErrorBody, ErrorDetail, Message, MessageDelta, StreamEvent, TokenCount,
    Usage,
};

use serde::Deserialize;
use serde_json::Value;

use crate::generation::{ChatMessage, RawParams, SamplingParams, StopField};
use crate::media::{as_text, Image, MEDIA_MARKER};
use crate::openai::RequestError;
use crate::tools::{Tool, ToolCall, ToolSet};
use crate::value_kind::kind;

/// `POST /v1/messages` (and, without `max_tokens`, `count_tokens`) as sent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MessagesBody {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub system: Option<Value>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub thinking: Option<Value>,
    /// Hearth extension: `auto`, `none`, `ngram` or `draft` speculation for this request.
    #[serde(default)]
    pub speculative: Option<String>,
}

/// One turn as sent: a string or a list of content blocks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct WireMessage {
    pub role: String,
    pub content: Value,
}

/// A validated Messages request: what the route needs.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub params: SamplingParams,
    pub tools: Option<ToolSet>,
    /// `thinking` `enabled` (true) or `disabled` (false); absent leaves it to the template.
    pub think: Option<bool>,
    pub stream: bool,
}

impl MessagesBody {
    /// Validate a `/v1/messages` request; `max_context` is the context a request gets on this
    /// node (a larger `max_tokens` is a ceiling, not an error).
    pub fn validate(self, max_context: Option<u32>) -> Result<MessagesRequest, RequestError> {
        let max_tokens = match self.max_tokens {
            None => {
                return Err(RequestError::new(
                    "max_tokens",
                    "max_tokens: Field required",
                ))
            }
            Some(m) => m,
        };
        self.read(Some(max_tokens), max_context)
    }

    /// Validate a `count_tokens` request: the same body, `max_tokens` not needed.
    pub fn validate_count(self) -> Result<MessagesRequest, RequestError> {
        self.read(None, None)
    }

    fn read(
        self,
        max_tokens: Option<i64>,
        max_context: Option<u32>,
    ) -> Result<MessagesRequest, RequestError> {
        let model = match self.model.as_deref().map(str::trim) {
            Some(m) if !m.is_empty() => m.to_owned(),
            _ => return Err(RequestError::new("model", "model: Field required")),
        };
        if self.messages.is_empty() {
            return Err(RequestError::new(
                "messages",
                "messages: at least one message is required",
            ));
        }
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        if let Some(system) = self.system.filter(|s| !s.is_null()) {
            let text = text_of(&system, "system", None)?;
            if !text.is_empty() {
                messages.push(ChatMessage::new("system", text));
            }
        }
        for (i, m) in self.messages.into_iter().enumerate() {
            turn(i, m, &mut messages)?;
        }
        crate::generation::merge_leading_system(&mut messages);
        let tools = tools(self.tools.unwrap_or_default(), self.tool_choice.as_ref())?;
        let think = thinking(self.thinking.as_ref())?;
        let raw = RawParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_tokens,
            stop: Some(StopField::Many(self.stop_sequences.unwrap_or_default())),
            speculative: self.speculative,
            ..RawParams::default()
        };
        let params = raw
            .validate(&SamplingParams::default(), max_context)
            .map_err(|e| {
                let param = match e.param {
                    "stop" => "stop_sequences",
                    p => p,
                };
                RequestError::new(param, format!("{param}: {}", e.message))
            })?;
        Ok(MessagesRequest {
            model,
            messages,
            params,
            tools,
            think,
            stream: self.stream.unwrap_or(false),
        })
    }
}

/// The text of `system` or of a `tool_result`'s content: a string, or text blocks joined;
/// image blocks (a tool's picture: a screenshot, an image file read) go to `images` where they
/// are taken, a media place in the text for each.
fn text_of(
    v: &Value,
    at: &str,
    mut images: Option<&mut Vec<Image>>,
) -> Result<String, RequestError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut text = String::new();
            for (j, b) in blocks.iter().enumerate() {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&as_text(
                            b.get("text").and_then(Value::as_str).unwrap_or(""),
                        ));
                    }
                    Some("image") => {
                        let bat = format!("{at}[{j}]");
                        let Some(images) = images.as_deref_mut() else {
                            return Err(RequestError::new(
                                &bat,
                                format!("{bat}: image blocks are not supported here: put them in a user turn's content"),
                            ));
                        };
                        if !text.is_empty() && !text.ends_with('\n') {
                            text.push('\n');
                        }
                        text.push_str(MEDIA_MARKER);
                        images.push(image_block(b, &bat)?);
                    }
                    other => {
                        return Err(RequestError::new(
                            &format!("{at}[{j}]"),
                            format!(
                                "{at}[{j}]: block type {} is not supported here; only 'text' is",
                                other.map_or("(none)".into(), |t| format!("'{t}'"))
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        other => Err(RequestError::new(
            at,
            format!(
                "{at}: expected a string or a list of text blocks, got {}",
                kind(other)
            ),
        )),
    }
}

/// An `image` block's picture: `source` is `{"type": "base64", "media_type", "data"}` or
/// `{"type": "url", "url"}` (a data URI only: this node fetches nothing from the web).
fn image_block(b: &Value, at: &str) -> Result<Image, RequestError> {
    let source = b.get("source").unwrap_or(&Value::Null);
    let field = |name: &str| {
        source
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| RequestError::new(at, format!("{at}.source.{name}: Field required")))
    };
    let image = match source.get("type").and_then(Value::as_str) {
        Some("base64") => Image::from_base64(field("data")?),
        Some("url") => Image::from_url(field("url")?),
        other => {
            return Err(RequestError::new(
                at,
                format!(
                    "{at}.source.type: expected 'base64' or 'url', got {}",
                    other.map_or("(none)".into(), |t| format!("'{t}'"))
                ),
            ))
        }
    };
    image.map_err(|e| RequestError::new(at, format!("{at}: {e}")))
}

/// One wire turn into chat messages: a user turn's `tool_result` blocks become `tool` turns
/// (in their order, text around them its own user turn), an assistant turn's `tool_use`
/// blocks its calls. `thinking` blocks of earlier turns are dropped, as templates drop them.
fn turn(i: usize, m: WireMessage, out: &mut Vec<ChatMessage>) -> Result<(), RequestError> {
    let at = format!("messages[{i}]");
    // Claude Code's default prompt sends part of its system prompt as a `system` turn
    // after the user's: it stays a system message.
    let role = match m.role.as_str() {
        "user" | "assistant" | "system" => m.role,
        other => {
            return Err(RequestError::new(
                &format!("{at}.role"),
                format!("{at}.role: unknown role '{other}'; expected 'user' or 'assistant'"),
            ))
        }
    };
    let blocks = match m.content {
        Value::String(s) => {
            out.push(ChatMessage::new(role, s));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        other => {
            return Err(RequestError::new(
                &format!("{at}.content"),
                format!(
                    "{at}.content: expected a string or a list of content blocks, got {}",
                    kind(&other)
                ),
            ))
        }
    };
    let mut current = ChatMessage::new(role.clone(), "");
    let mut open = false;
    for (j, b) in blocks.into_iter().enumerate() {
        let bat = format!("{at}.content[{j}]");
        let kind_of = b.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind_of, role.as_str()) {
            ("text", _) => {
                let text = b.get("text").and_then(Value::as_str).ok_or_else(|| {
                    RequestError::new(&bat, format!("{bat}.text: Field required"))
                })?;
                // Blocks are separate paragraphs (Claude Code sends a reminder, then the prompt).
                if !current.content.is_empty() && !text.is_empty() {
                    current.content.push('\n');
                }
                current.content.push_str(&as_text(text));
                open = true;
            }
            ("thinking" | "redacted_thinking", "assistant") => {}
            ("tool_use", "assistant") => {
                let field = |name: &str| {
                    b.get(name)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            RequestError::new(&bat, format!("{bat}.{name}: Field required"))
                        })
                };
                let input = b
                    .get("input")
                    .cloned()
                    .unwrap_or(Value::Object(Default::default()));
                if !input.is_object() {
                    return Err(RequestError::new(
                        &bat,
                        format!("{bat}.input: expected an object, got {}", kind(&input)),
                    ));
                }
                current.tool_calls.push(ToolCall {
                    id: field("id")?,
                    name: field("name")?,
                    arguments: input,
                });
                open = true;
            }
            ("tool_result", "user") => {
                if open {
                    out.push(std::mem::replace(
                        &mut current,
                        ChatMessage::new(role.clone(), ""),
                    ));
                    open = false;
                }
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        RequestError::new(&bat, format!("{bat}.tool_use_id: Field required"))
                    })?
                    .to_owned();
                let mut images = Vec::new();
                let mut content = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(c) => text_of(c, &format!("{bat}.content"), Some(&mut images))?,
                };
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    content = format!("Error: {content}");
                }
                out.push(ChatMessage {
                    role: "tool".into(),
                    content,
                    tool_calls: vec![],
                    tool_call_id: Some(id),
                    name: None,
                    images,
                    audio: Vec::new(),
                });
            }
            ("image", _) => {
                current.content.push_str(MEDIA_MARKER);
                current.images.push(image_block(&b, &bat)?);
                open = true;
            }
            ("document", _) => {
                return Err(RequestError::new(
                    &bat,
                    format!("{bat}: document blocks are not supported: send the text, or images"),
                ))
            }
            (other, role) => {
                return Err(RequestError::new(
                    &bat,
                    format!(
                        "{bat}: content block type '{other}' is not supported in a {role} turn"
                    ),
                ))
            }
        }
    }
    if open {
        out.push(current);
    }
    Ok(())
}

/// The kinds of tool Anthropic's servers run (their type names carry a date after these).
const SERVER_TOOLS: [&str; 3] = ["web_search_", "web_fetch_", "code_execution_"];

/// `tools` (custom tools: `name`, `description`, `input_schema`) and `tool_choice` (`auto`,
/// `any`, `tool` with a name, `none`; `disable_parallel_tool_use`).
fn tools(wire: Vec<Value>, choice: Option<&Value>) -> Result<Option<ToolSet>, RequestError> {
    let mut tools = Vec::with_capacity(wire.len());
    for (i, t) in wire.into_iter().enumerate() {
        let at = format!("tools[{i}]");
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(k) if SERVER_TOOLS.iter().any(|s| k.starts_with(s)) => continue,
            Some(kind) => {
                return Err(RequestError::new(
                    "tools",
                    format!("{at}: tool type '{kind}' is not supported here; only custom tools (name, description, input_schema) are"),
                ))
            }
        }
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RequestError::new("tools", format!("{at}.name: Field required")))?;
        let parameters = t.get("input_schema").cloned().ok_or_else(|| {
            RequestError::new("tools", format!("{at}.input_schema: Field required"))
        })?;
        tools.push(Tool {
            name: name.to_owned(),
            description: t
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            parameters,
        });
    }
    let (choice, parallel) = match choice.filter(|c| !c.is_null()) {
        None => (None, None),
        Some(c) => {
            let kind = c.get("type").and_then(Value::as_str).ok_or_else(|| {
                RequestError::new("tool_choice", "tool_choice.type: Field required")
            })?;
            let mapped = match kind {
                "auto" => Value::from("auto"),
                "any" => Value::from("required"),
                "none" => Value::from("none"),
                "tool" => {
                    let name = c.get("name").and_then(Value::as_str).ok_or_else(|| {
                        RequestError::new("tool_choice", "tool_choice.name: Field required")
                    })?;
                    serde_json::json!({"type": "function", "function": {"name": name}})
                }
                other => {
                    return Err(RequestError::new(
                        "tool_choice",
                        format!(
                        "tool_choice.type '{other}' is not one of 'auto', 'any', 'tool', 'none'"
                    ),
                    ))
                }
            };
            // Parallel calls only when asked for (see `ToolSet::parallel`).
            let parallel = c
                .get("disable_parallel_tool_use")
                .and_then(Value::as_bool)
                .map(|d| !d);
            (Some(mapped), parallel)
        }
    };
    ToolSet::validate(tools, choice.as_ref(), parallel.filter(|p| *p))
        .map_err(|e| RequestError::new(e.param, e.message))
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` switches the model's reasoning on
/// (the budget is not enforced: small local models have no budget control), `disabled` off.
fn thinking(v: Option<&Value>) -> Result<Option<bool>, RequestError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.get("type").and_then(Value::as_str) {
        Some("enabled" | "adaptive") => Ok(Some(true)),
        Some("disabled") => Ok(Some(false)),
        other => Err(RequestError::new(
            "thinking",
            format!(
                "thinking.type must be 'enabled', 'adaptive' or 'disabled', got {}",
                other.map_or("nothing".into(), |t| format!("'{t}'"))
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
