//! OpenAI's Responses API as Hearth serves it (`POST /v1/responses`, what Codex speaks): the
//! request body and its validation into a [`ResponsesRequest`] (input items flattened into the
//! one chat vocabulary: `function_call` items become an assistant turn's calls,
//! `function_call_output` items `tool` turns), the response object, its output items and
//! stream events (`response`), how an answer's parts become those (`answer`), and what a
//! stored response keeps to be continued (`stored`). Fields Hearth has no use for (`include`,
//! `prompt_cache_key`, `truncation`, `service_tier`, `client_metadata`) are accepted and
//! ignored; `user` and `metadata` are only repeated in the answer. Tools OpenAI runs itself
//! (web search, file search, code interpreter) are left out, since nothing here can run them.

mod answer;
mod response;
pub mod stored;

pub use answer::{cut_short, function_call, item_status, texts, whole_items, Ended, Writer};
pub use response::{
    Content, Incomplete, InputDetails, OutputDetails, OutputItem, Response, StreamEvent, Summary,
    Usage,
};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::generation::{ChatMessage, RawParams, SamplingParams};
use crate::media::{as_text, Image, MEDIA_MARKER};
use crate::ollama::Format;
use crate::openai::RequestError;
use crate::tools::{arguments_value, Tool, ToolCall, ToolSet};
use crate::value_kind::kind;

/// `POST /v1/responses` as sent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ResponsesBody {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub max_output_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub text: Option<Value>,
    #[serde(default)]
    pub reasoning: Option<Value>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub background: Option<bool>,
    #[serde(default)]
    pub user: Option<String>,
    /// Hearth extension: `auto`, `none`, `ngram` or `draft` speculation for this request.
    #[serde(default)]
    pub speculative: Option<String>,
}

/// A validated Responses request.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    /// This request's input as chat messages (`instructions` not among them: they are not
    /// carried to a continuation, as OpenAI has it).
    pub input: Vec<ChatMessage>,
    pub instructions: Option<String>,
    pub params: SamplingParams,
    pub tools: Option<ToolSet>,
    pub format: Option<Format>,
    /// `reasoning.effort`: `none`/`minimal` switch thinking off, any other effort on.
    pub think: Option<bool>,
    pub stream: bool,
    pub store: bool,
    pub previous_response_id: Option<String>,
    /// What the response object repeats of the request.
    pub echo: Echo,
}

/// The request's settings as the response object shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    pub tools: Vec<Value>,
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    pub temperature: f64,
    pub top_p: f64,
    pub max_output_tokens: Option<u32>,
    pub text: Value,
    pub reasoning: Value,
    pub metadata: Value,
    pub user: Option<String>,
}

impl ResponsesBody {
    /// Validate; `max_context` is the context a request gets on this node (a larger
    /// `max_output_tokens` is a ceiling).
    pub fn validate(self, max_context: Option<u32>) -> Result<ResponsesRequest, RequestError> {
        if self.background == Some(true) {
            return Err(RequestError::new(
                "background",
                "background responses are not supported here; send the request without it",
            ));
        }
        let input = match self.input {
            None | Some(Value::Null) => {
                return Err(RequestError::new(
                    "input",
                    "Missing required parameter: 'input'.",
                ))
            }
            Some(Value::String(s)) => vec![ChatMessage::new("user", s)],
            Some(Value::Array(items)) => items_to_messages(items)?,
            Some(other) => {
                return Err(RequestError::new(
                    "input",
                    format!(
                        "input must be a string or a list of items, got {}",
                        kind(&other)
                    ),
                ))
            }
        };
        if input.is_empty() && self.previous_response_id.is_none() {
            return Err(RequestError::new("input", "input must not be empty"));
        }
        let wire_tools = self.tools.unwrap_or_default();
        let tools = tools(
            &wire_tools,
            self.tool_choice.as_ref(),
            self.parallel_tool_calls,
        )?;
        let format = format(self.text.as_ref())?;
        if tools.is_some() && format.is_some() {
            return Err(RequestError::new(
                "text.format",
                "text.format cannot be combined with tools: a tool call has its own format",
            ));
        }
        let think = effort(self.reasoning.as_ref())?;
        let raw = RawParams {
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_output_tokens,
            speculative: self.speculative.clone(),
            ..RawParams::default()
        };
        let params = raw
            .validate(&SamplingParams::default(), max_context)
            .map_err(|e| {
                let param = match e.param {
                    "max_tokens" => "max_output_tokens",
                    p => p,
                };
                RequestError::new(param, e.message.replace("max_tokens", "max_output_tokens"))
            })?;
        let echo = Echo {
            tools: wire_tools,
            tool_choice: self.tool_choice.unwrap_or_else(|| json!("auto")),
            // What holds: one call a turn unless asked for more (see `ToolSet::parallel`).
            parallel_tool_calls: tools
                .as_ref()
                .map_or(self.parallel_tool_calls.unwrap_or(false), |t| t.parallel),
            temperature: self.temperature.unwrap_or(f64::from(params.temperature)),
            top_p: self.top_p.unwrap_or(f64::from(params.top_p)),
            max_output_tokens: params.max_tokens,
            text: self
                .text
                .unwrap_or_else(|| json!({"format": {"type": "text"}})),
            reasoning: self
                .reasoning
                .unwrap_or_else(|| json!({"effort": null, "summary": null})),
            metadata: self.metadata.unwrap_or_else(|| json!({})),
            user: self.user,
        };
        Ok(ResponsesRequest {
            model: self.model,
            input,
            instructions: self.instructions.filter(|i| !i.is_empty()),
            params,
            tools,
            format,
            think,
            stream: self.stream.unwrap_or(false),
            store: self.store.unwrap_or(true),
            previous_response_id: self.previous_response_id,
            echo,
        })
    }
}

/// Input items as chat messages, in order: consecutive assistant text and `function_call`
/// items make one assistant turn; `reasoning` items of earlier turns are dropped, as templates
/// drop earlier thinking.
fn items_to_messages(items: Vec<Value>) -> Result<Vec<ChatMessage>, RequestError> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("input[{i}]");
        let bad = |m: String| RequestError::new(&at, format!("{at}: {m}"));
        let kind_of = item.get("type").and_then(Value::as_str);
        match kind_of {
            None | Some("message") => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some(r @ ("user" | "assistant" | "system")) => r.to_owned(),
                    Some("developer") => "system".to_owned(),
                    Some(other) => {
                        return Err(bad(format!(
                            "unknown role '{other}'; expected user, assistant, system or developer"
                        )))
                    }
                    None => return Err(bad("a message item needs a role".into())),
                };
                let mut images = Vec::new();
                let text = content_text(item.get("content"), &format!("{at}.content"), Some(&mut images))?;
                let mut m = ChatMessage::new(role, text);
                m.images = images;
                out.push(m);
            }
            Some("function_call") => {
                let field = |n: &str| {
                    item.get(n)
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| bad(format!("a function_call item needs '{n}'")))
                };
                let call = ToolCall {
                    id: field("call_id")?,
                    name: field("name")?,
                    arguments: arguments_value(
                        item.get("arguments").cloned().unwrap_or(Value::Null),
                    ),
                };
                match out.last_mut() {
                    Some(last) if last.role == "assistant" => last.tool_calls.push(call),
                    _ => {
                        let mut m = ChatMessage::new("assistant", "");
                        m.tool_calls.push(call);
                        out.push(m);
                    }
                }
            }
            Some("function_call_output") => {
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("a function_call_output item needs 'call_id'".into()))?
                    .to_owned();
                // A tool's pictures (a screenshot, an image file read) come with its output.
                let mut images = Vec::new();
                let content = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => content_text(Some(v), &format!("{at}.output"), Some(&mut images))?,
                    _ => return Err(bad("a function_call_output item needs 'output'".into())),
                };
                out.push(ChatMessage {
                    role: "tool".into(),
                    content,
                    tool_calls: vec![],
                    tool_call_id: Some(call_id),
                    name: None,
                    images,
                    audio: Vec::new(),
                });
            }
            Some("reasoning") => {}
            Some(other) => {
                return Err(bad(format!(
                    "item type '{other}' is not supported; expected message, function_call, function_call_output or reasoning"
                )))
            }
        }
    }
    Ok(out)
}

/// A message's content or a tool's output (`at`: the field's path): a string, or parts: text,
/// and `input_image` parts (a data URI in `image_url`) where `images` takes them, each standing
/// where its part was.
fn content_text(
    v: Option<&Value>,
    at: &str,
    mut images: Option<&mut Vec<Image>>,
) -> Result<String, RequestError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text" | "refusal") => {
                        text.push_str(&as_text(
                            p.get("text")
                                .or_else(|| p.get("refusal"))
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                        ))
                    }
                    Some("input_image") if images.is_some() => {
                        let pat = format!("{at}[{j}]");
                        let url = p.get("image_url").and_then(Value::as_str).ok_or_else(|| {
                            RequestError::new(
                                &pat,
                                format!("{pat}.image_url: required (a data URI; file ids are not kept here)"),
                            )
                        })?;
                        let image = Image::from_url(url)
                            .map_err(|e| RequestError::new(&pat, format!("{pat}: {e}")))?;
                        text.push_str(MEDIA_MARKER);
                        if let Some(images) = images.as_deref_mut() {
                            images.push(image);
                        }
                    }
                    Some(t @ ("input_image" | "input_file" | "input_audio")) => {
                        return Err(RequestError::new(
                            &format!("{at}[{j}]"),
                            format!("{at}[{j}]: content type '{t}' is not supported here"),
                        ))
                    }
                    other => {
                        return Err(RequestError::new(
                            &format!("{at}[{j}]"),
                            format!(
                                "{at}[{j}]: unknown content type {}",
                                other.map_or("(none)".into(), |t| format!("'{t}'"))
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(RequestError::new(
            at,
            format!(
                "{at}.content must be a string or a list of parts, got {}",
                kind(other)
            ),
        )),
    }
}

/// Function tools in the flat form (`{"type": "function", "name", "description",
/// "parameters", "strict"}`); `tool_choice` `auto`, `none`, `required` or
/// `{"type": "function", "name": ...}`.
fn tools(
    wire: &[Value],
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<ToolSet>, RequestError> {
    let mut tools = Vec::with_capacity(wire.len());
    for (i, t) in wire.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") => tools.push(function(t, &format!("tools[{i}]"))?),
            // A group of functions (Codex's sub-agent tools): its functions, by their names.
            Some("namespace") => {
                let inner = t.get("tools").and_then(Value::as_array).ok_or_else(|| {
                    RequestError::new("tools", format!("tools[{i}].tools is required"))
                })?;
                for (j, f) in inner.iter().enumerate() {
                    tools.push(function(f, &format!("tools[{i}].tools[{j}]"))?);
                }
            }
            // Tools the provider runs itself (OpenAI's search, files, code): nothing here can
            // run them, so the model is not offered them; the response lists them as sent.
            Some(
                "web_search"
                | "web_search_preview"
                | "file_search"
                | "code_interpreter"
                | "image_generation"
                | "computer_use_preview"
                | "mcp"
                | "local_shell",
            ) => {}
            other => {
                return Err(RequestError::new(
                    "tools",
                    format!(
                        "tools[{i}]: tool type {} is not supported here; function tools are",
                        other.map_or("(none)".into(), |t| format!("'{t}'"))
                    ),
                ))
            }
        }
    }
    ToolSet::validate(tools, choice, parallel).map_err(|e| RequestError::new(e.param, e.message))
}

/// A function tool in the flat form.
fn function(t: &Value, at: &str) -> Result<Tool, RequestError> {
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(RequestError::new(
            "tools",
            format!("{at}: only function tools are supported here"),
        ));
    }
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RequestError::new("tools", format!("{at}.name is required")))?;
    Ok(Tool {
        name: name.to_owned(),
        description: t
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        parameters: match t.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p) => p.clone(),
        },
    })
}

/// `text.format`: `text`, `json_object`, or `json_schema` with its `name` and `schema` flat
/// on the format object.
fn format(text: Option<&Value>) -> Result<Option<Format>, RequestError> {
    let bad = |m: String| RequestError::new("text.format", m);
    let Some(f) = text.and_then(|t| t.get("format")).filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Format::Json)),
        Some("json_schema") => match f.get("schema") {
            Some(s @ (Value::Object(_) | Value::Bool(_))) => Ok(Some(Format::Schema(s.clone()))),
            _ => Err(bad("text.format.schema must be a JSON Schema object".into())),
        },
        other => Err(bad(format!(
            "text.format.type must be 'text', 'json_object' or 'json_schema', got {}",
            other.map_or("nothing".into(), |t| format!("'{t}'"))
        ))),
    }
}

/// `reasoning.effort` as the thinking switch.
fn effort(reasoning: Option<&Value>) -> Result<Option<bool>, RequestError> {
    match reasoning.and_then(|r| r.get("effort")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(e)) => match e.as_str() {
            "none" | "minimal" => Ok(Some(false)),
            "low" | "medium" | "high" | "xhigh" => Ok(Some(true)),
            other => Err(RequestError::new(
                "reasoning.effort",
                format!(
                    "reasoning.effort must be none, minimal, low, medium, high or xhigh, got '{other}'"
                ),
            )),
        },
        Some(other) => Err(RequestError::new(
            "reasoning.effort",
            format!("reasoning.effort must be a string, got {}", kind(other)),
        )),
    }
}

#[cfg(test)]
mod tests;
