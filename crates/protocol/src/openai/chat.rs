//! `/v1/chat/completions` requests: the wire body, and its validation into a [`ChatRequest`]
//! with the messages (tool calls and tool results included), the sampling parameters, the
//! tools the model may call and the format its answer must take (`response_format`).

use serde::Deserialize;
use serde_json::Value;

use super::{check_n, RequestError, StreamOptions};
use crate::audio::{Audio, AudioError};
use crate::generation::{ChatMessage, RawParams, SamplingParams, StopField};
use crate::media::{as_text, check_count, Image, MEDIA_MARKER};
use crate::ollama::Format;
use crate::tools::{arguments_value, Tool, ToolCall, ToolSet};

/// A message's content: a string, or a list of typed parts (text, images and audio).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    /// `{"url": "data:image/png;base64,...", "detail": ...}` of an `image_url` part.
    #[serde(default)]
    pub image_url: Option<ImageUrl>,
    /// `{"data": "<base64>", "format": "wav" | "mp3"}` of an `input_audio` part.
    #[serde(default)]
    pub input_audio: Option<InputAudio>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InputAudio {
    pub data: String,
    pub format: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ImageUrl {
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// An assistant turn's calls, arguments as JSON text.
    #[serde(default)]
    pub tool_calls: Option<Vec<Value>>,
    /// The call a `tool` turn answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ChatCompletionBody {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default, alias = "repeat_penalty")]
    pub repetition_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<StopField>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Hearth extension: `auto`, `none`, `ngram` or `draft` speculation for this request.
    #[serde(default)]
    pub speculative: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub response_format: Option<Value>,
}

/// A validated chat completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub params: SamplingParams,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: bool,
    /// The tools the model is shown (none with `tool_choice: "none"`).
    pub tools: Option<ToolSet>,
    /// `response_format` `json_object` or `json_schema`, as the grammar path reads it.
    pub format: Option<Format>,
}

impl ChatCompletionBody {
    pub fn validate(self, max_context: Option<u32>) -> Result<ChatRequest, RequestError> {
        check_n(self.n)?;
        let format = response_format(self.response_format.as_ref())?;
        let tools = tools(
            self.tools.unwrap_or_default(),
            self.tool_choice.as_ref(),
            self.parallel_tool_calls,
        )?;
        if tools.is_some() && format.is_some() {
            return Err(RequestError::new(
                "response_format",
                "response_format cannot be combined with tools: a tool call has its own format",
            ));
        }
        if self.messages.is_empty() {
            return Err(RequestError::new("messages", "messages must not be empty"));
        }
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| message(i, m))
            .collect::<Result<Vec<_>, _>>()?;
        check_count(messages.iter().map(|m| m.images.len()).sum())
            .map_err(|e| RequestError::new("messages", e.to_string()))?;
        crate::audio::check_count(messages.iter().map(|m| m.audio.len()).sum())
            .map_err(|e| RequestError::new("messages", e.to_string()))?;
        let logprobs = self.logprobs.unwrap_or(false);
        if self.top_logprobs.is_some() && !logprobs {
            return Err(RequestError::new(
                "top_logprobs",
                "top_logprobs requires logprobs to be true",
            ));
        }
        let raw = RawParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            stop: self.stop,
            top_logprobs: if logprobs {
                Some(self.top_logprobs.unwrap_or(0))
            } else {
                None
            },
            ignore_eos: self.ignore_eos,
            speculative: self.speculative,
        };
        let params = raw.validate(&SamplingParams::default(), max_context)?;
        Ok(ChatRequest {
            model: self.model,
            messages,
            params,
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
            logprobs,
            tools,
            format,
        })
    }
}

fn message(i: usize, m: WireMessage) -> Result<ChatMessage, RequestError> {
    let role = match m.role.as_str() {
        "system" | "user" | "assistant" | "tool" => m.role,
        // OpenAI's newer name for the system role.
        "developer" => "system".to_owned(),
        other => {
            return Err(RequestError::new(
                &format!("messages[{i}].role"),
                format!(
                    "unknown role '{other}'; expected system, user, assistant, tool or developer"
                ),
            ))
        }
    };
    let mut images = Vec::new();
    let mut audio = Vec::new();
    let content = match m.content {
        None => String::new(),
        Some(MessageContent::Text(t)) => t,
        Some(MessageContent::Parts(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.into_iter().enumerate() {
                match (p.kind.as_str(), p.image_url) {
                    ("text", _) => text.push_str(&as_text(p.text.as_deref().unwrap_or(""))),
                    ("image_url", Some(image)) => {
                        let image = Image::from_url(&image.url).map_err(|e| {
                            RequestError::new(
                                &format!("messages[{i}].content[{j}].image_url.url"),
                                e.to_string(),
                            )
                        })?;
                        // The image stands where its part was, between the texts.
                        text.push_str(MEDIA_MARKER);
                        images.push(image);
                    }
                    ("image_url", None) => {
                        return Err(RequestError::new(
                            &format!("messages[{i}].content[{j}].image_url"),
                            "an image_url part needs image_url.url",
                        ))
                    }
                    ("input_audio", _) => {
                        let param = format!("messages[{i}].content[{j}].input_audio");
                        let clip = p.input_audio.ok_or_else(|| {
                            RequestError::new(&param, "an input_audio part needs input_audio.data and input_audio.format")
                        })?;
                        audio.push(read_audio(&param, &clip)?);
                    }
                    (other, _) => {
                        return Err(RequestError::new(
                            &format!("messages[{i}].content[{j}]"),
                            format!(
                                "content part type '{other}' is not supported; only 'text', 'image_url' and 'input_audio' are"
                            ),
                        ))
                    }
                }
            }
            text
        }
    };
    let mut tool_calls = Vec::new();
    for (j, c) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
        let param = format!("messages[{i}].tool_calls[{j}]");
        if role != "assistant" {
            return Err(RequestError::new(
                &param,
                "only assistant messages carry tool_calls",
            ));
        }
        let mut call: ToolCall = serde_json::from_value(c)
            .map_err(|e| RequestError::new(&param, format!("not a tool call: {e}")))?;
        call.arguments = arguments_value(call.arguments);
        tool_calls.push(call);
    }
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        tool_call_id: m.tool_call_id,
        name: m.name,
        images,
        audio,
    })
}

/// An `input_audio` part's clip: its bytes in the format it names, WAV or MP3.
fn read_audio(param: &str, clip: &InputAudio) -> Result<Audio, RequestError> {
    let said = clip.format.to_ascii_lowercase();
    if !["wav", "mp3"].contains(&said.as_str()) {
        return Err(RequestError::new(
            &format!("{param}.format"),
            format!(
                "audio format '{}' is not read here: wav and mp3 are",
                clip.format
            ),
        ));
    }
    let audio = Audio::from_base64(&clip.data)
        .map_err(|e| RequestError::new(&format!("{param}.data"), e.to_string()))?;
    let found = audio
        .probe()
        .map_err(|e| RequestError::new(&format!("{param}.data"), e.to_string()))?;
    if found.name() != said {
        let e = AudioError::NotWhatItSays {
            said,
            found: found.name().to_owned(),
        };
        return Err(RequestError::new(&format!("{param}.data"), e.to_string()));
    }
    Ok(audio)
}

fn tools(
    wire: Vec<Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<ToolSet>, RequestError> {
    let mut tools = Vec::with_capacity(wire.len());
    for (i, t) in wire.into_iter().enumerate() {
        tools.push(
            serde_json::from_value::<Tool>(t)
                .map_err(|e| RequestError::new("tools", format!("tools[{i}]: {e}")))?,
        );
    }
    Ok(ToolSet::validate(tools, choice, parallel).map_err(crate::generation::ParamError::from)?)
}

/// `{"type": "text"}`, `{"type": "json_object"}` or
/// `{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}`.
fn response_format(v: Option<&Value>) -> Result<Option<Format>, RequestError> {
    let bad = |m: String| RequestError::new("response_format", m);
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let kind = v.get("type").and_then(Value::as_str).ok_or_else(|| {
        bad("response_format needs a type: \"text\", \"json_object\" or \"json_schema\"".into())
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(Format::Json)),
        "json_schema" => {
            let spec = v
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| bad("response_format.json_schema must be an object with a name and a schema".into()))?;
            if !spec.get("name").is_some_and(Value::is_string) {
                return Err(bad("response_format.json_schema.name is required".into()));
            }
            match spec.get("schema") {
                None | Some(Value::Null) => Ok(Some(Format::Json)),
                Some(s @ (Value::Object(_) | Value::Bool(_))) => Ok(Some(Format::Schema(s.clone()))),
                Some(_) => Err(bad("response_format.json_schema.schema must be a JSON Schema object".into())),
            }
        }
        other => Err(bad(format!(
            "response_format type '{other}' is not supported; expected 'text', 'json_object' or 'json_schema'"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_body;
    use super::*;
    use crate::tools::ToolChoice;

    fn chat(json: &str) -> Result<ChatRequest, RequestError> {
        parse_body::<ChatCompletionBody>(json.as_bytes())?.validate(Some(1024))
    }

    #[test]
    fn minimal_chat_request() {
        let r = chat(r#"{"model":"m","messages":[{"role":"user","content":"Hello"}]}"#).unwrap();
        assert_eq!(r.messages, vec![ChatMessage::new("user", "Hello")]);
        assert!(!r.stream);
        assert_eq!(r.params.max_tokens, None);
    }

    #[test]
    fn content_parts_developer_role_and_stream_options() {
        let r = chat(
            r#"{"messages":[{"role":"developer","content":"Be brief"},
            {"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}],
            "stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":7,
            "stop":"END","logprobs":true,"top_logprobs":3,"tools":[]}"#,
        )
        .unwrap();
        assert_eq!(r.messages[0].role, "system");
        assert_eq!(r.messages[1].content, "Hi there");
        assert!(r.stream && r.include_usage && r.logprobs);
        assert_eq!(r.params.max_tokens, Some(7));
        assert_eq!(r.params.stop, vec!["END".to_string()]);
        assert_eq!(r.params.top_logprobs, Some(3));
    }

    #[test]
    fn chat_rejections_name_the_parameter() {
        for (body, param) in [
            (r#"{"messages":[]}"#, "messages"),
            (
                r#"{"messages":[{"role":"wizard","content":"x"}]}"#,
                "messages[0].role",
            ),
            (r#"{"messages":[{"role":"user","content":"x"}],"n":2}"#, "n"),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
                "max_tokens",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"temperature":-1}"#,
                "temperature",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"top_p":0}"#,
                "top_p",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"top_k":-3}"#,
                "top_k",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}"#,
                "tools",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}"#,
                "response_format",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}"#,
                "response_format",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}"#,
                "tool_choice",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}"#,
                "tools",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}]}"#,
                "messages[0].tool_calls[0]",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#,
                "top_logprobs",
            ),
        ] {
            let e = chat(body).expect_err(body);
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
        }
        // A max_tokens beyond the context is a ceiling (agents send 32000), not an error.
        let big =
            chat(r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":5000}"#).unwrap();
        assert_eq!(big.params.max_tokens, Some(1024));
        let e = chat("{").unwrap_err();
        assert!(e.message.contains("parse the JSON"), "{e}");
        let e = chat(r#"{"messages":"hello"}"#).unwrap_err();
        assert!(e.message.contains("invalid type"), "{e}");
    }

    #[test]
    fn tools_tool_turns_and_formats_are_read() {
        let r = chat(
            r#"{"messages":[{"role":"user","content":"weather?"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
            {"role":"tool","tool_call_id":"call_1","content":"-3 C"}],
            "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
            "tool_choice":"required","parallel_tool_calls":true}"#,
        )
        .unwrap();
        let set = r.tools.unwrap();
        assert_eq!(set.choice, ToolChoice::Required);
        assert!(set.parallel);
        assert_eq!(r.messages[1].tool_calls[0].arguments["city"], "Oslo");
        assert_eq!(r.messages[2].tool_call_id.as_deref(), Some("call_1"));
        let none = chat(r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}"#).unwrap();
        assert!(none.tools.is_none());
        let j = chat(r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}"#).unwrap();
        assert_eq!(j.format, Some(Format::Json));
        let s = chat(r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object"}}}}"#).unwrap();
        assert_eq!(
            s.format,
            Some(Format::Schema(serde_json::json!({"type": "object"})))
        );
        let t = chat(
            r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}}"#,
        )
        .unwrap();
        assert_eq!(t.format, None);
    }
}
