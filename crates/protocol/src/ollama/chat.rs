//! Validation of `/api/chat` bodies into [`OllamaChat`]: the model, the messages (tool calls
//! and results included), sampling parameters, streaming, `format`, `keep_alive`, `tools` and
//! `think`, and each message's `images`.

use super::keep_alive::KeepAlive;
use super::options::Format;
use super::request::ChatBody;
use super::{common, model_name, read_images, OllamaError};
use crate::generation::{ChatMessage, SamplingParams};
use crate::media::as_text;
use crate::tools::{Tool, ToolCall, ToolSet};

/// A validated `/api/chat` request.
#[derive(Debug, Clone, PartialEq)]
pub struct OllamaChat {
    pub model: String,
    /// Empty: only load (or unload) the model.
    pub messages: Vec<ChatMessage>,
    pub params: SamplingParams,
    /// Ollama's default is to stream.
    pub stream: bool,
    pub format: Option<Format>,
    /// `None`: the server's default ([`super::DEFAULT_KEEP_ALIVE`]).
    pub keep_alive: Option<KeepAlive>,
    /// The context the client asked for, no larger than the node's.
    pub num_ctx: Option<u32>,
    /// The tools the model may call (Ollama lets the model decide; Hearth also reads OpenAI's
    /// `tool_choice`).
    pub tools: Option<ToolSet>,
    /// See [`super::OllamaGenerate::think`].
    pub think: Option<bool>,
}

impl OllamaChat {
    /// No messages: Ollama loads the model and answers `done_reason: "load"`.
    pub fn is_load_only(&self) -> bool {
        self.messages.is_empty()
    }

    /// No messages and `keep_alive: 0`: unload the model (`done_reason: "unload"`).
    pub fn is_unload(&self) -> bool {
        self.is_load_only() && self.keep_alive.is_some_and(KeepAlive::is_unload)
    }
}

impl ChatBody {
    /// `max_context` is the context a request gets on this node, when known.
    pub fn validate(self, max_context: Option<u32>) -> Result<OllamaChat, OllamaError> {
        let model = model_name(&self.model, None)?;
        let c = common(
            self.options.as_ref(),
            self.format.as_ref(),
            self.keep_alive.as_ref(),
            self.think.as_ref(),
            max_context,
        )?;
        let mut tools = Vec::new();
        for (i, t) in self.tools.unwrap_or_default().into_iter().enumerate() {
            tools.push(
                serde_json::from_value::<Tool>(t)
                    .map_err(|e| OllamaError::bad_request(format!("tools[{i}]: {e}")))?,
            );
        }
        let tools = ToolSet::validate(tools, self.tool_choice.as_ref(), None)
            .map_err(|e| OllamaError::bad_request(e.message))?;
        if tools.is_some() && c.format.is_some() {
            return Err(OllamaError::bad_request(
                "format cannot be combined with tools: a tool call has its own format",
            ));
        }
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.into_iter().enumerate() {
            // Ollama lowercases roles as it reads them.
            let role = m.role.to_ascii_lowercase();
            if !["system", "user", "assistant", "tool"].contains(&role.as_str()) {
                return Err(OllamaError::bad_request(format!(
                    "messages[{i}]: unknown role {:?}; expected system, user, assistant or tool",
                    m.role
                )));
            }
            let images = read_images(&format!("messages[{i}].images"), m.images)?;
            let mut tool_calls = Vec::new();
            for (j, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
                let mut call: ToolCall = serde_json::from_value(call).map_err(|e| {
                    OllamaError::bad_request(format!("messages[{i}].tool_calls[{j}]: {e}"))
                })?;
                // Ollama's calls carry no id; the template may want one to pair results.
                if call.id.is_empty() {
                    call.id = format!("call_{i}_{j}");
                }
                tool_calls.push(call);
            }
            messages.push(ChatMessage {
                role,
                // Ollama's images stand before the words, which hold no places of their own.
                content: as_text(&m.content.unwrap_or_default()).into_owned(),
                tool_calls,
                tool_call_id: None,
                name: m.tool_name,
                images,
                audio: Vec::new(),
            });
        }
        Ok(OllamaChat {
            model,
            messages,
            params: c.params,
            stream: self.stream.unwrap_or(true),
            format: c.format,
            keep_alive: c.keep_alive,
            num_ctx: c.num_ctx,
            tools,
            think: c.think,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_body;
    use super::*;
    use std::time::Duration;

    fn chat(body: &str) -> Result<OllamaChat, OllamaError> {
        parse_body::<ChatBody>(body.as_bytes())?.validate(Some(4096))
    }

    #[test]
    fn chat_examples_from_the_docs() {
        let c = chat(r#"{"model": "llama3.2", "messages": [{"role": "user", "content": "why is the sky blue?"}]}"#)
            .unwrap();
        assert_eq!(c.model, "llama3.2");
        assert_eq!(
            c.messages,
            vec![ChatMessage::new("user", "why is the sky blue?")]
        );
        assert!(c.stream && !c.is_load_only());
        assert_eq!(c.params, crate::ollama::ollama_defaults());
        let c = chat(
            r#"{"model": "llama3.2", "messages": [
            {"role": "user", "content": "why is the sky blue?"},
            {"role": "assistant", "content": "due to rayleigh scattering.", "images": null},
            {"role": "user", "content": "how is that different than mie scattering?"}],
            "stream": false, "options": {"seed": 101, "temperature": 0}}"#,
        )
        .unwrap();
        assert_eq!(c.messages.len(), 3);
        assert!(!c.stream && c.params.is_greedy());
        assert_eq!(c.params.seed, Some(101));
        let c = chat(
            r#"{"model": "llama3.1", "messages": [{"role": "user", "content": "Ollama is 22"}],
            "stream": false, "format": {"type": "object", "properties": {"age": {"type": "integer"},
            "available": {"type": "boolean"}}, "required": ["age", "available"]},
            "options": {"temperature": 0}}"#,
        )
        .unwrap();
        assert!(matches!(c.format, Some(Format::Schema(_))));
        // A tool call and its result in the history.
        let c = chat(r#"{"model": "m", "messages": [{"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Toronto"}}}]},
            {"role": "tool", "content": "11 degrees celsius", "tool_name": "get_weather"}],
            "think": false, "tools": []}"#)
        .unwrap();
        assert_eq!(c.messages[0].tool_calls[0].name, "get_weather");
        assert_eq!(c.messages[0].tool_calls[0].arguments["city"], "Toronto");
        assert_eq!(c.messages[1].content, "11 degrees celsius");
        assert_eq!(c.messages[1].name.as_deref(), Some("get_weather"));
        assert_eq!(c.think, Some(false));
        assert!(c.tools.is_none());
        let c = chat(r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "think": "high",
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}"#)
        .unwrap();
        assert_eq!(c.think, Some(true));
        assert_eq!(c.tools.unwrap().tools[0].name, "get_weather");
    }

    #[test]
    fn chat_load_and_unload() {
        let c = chat(r#"{"model": "llama3.2", "messages": []}"#).unwrap();
        assert!(c.is_load_only() && !c.is_unload());
        let c = chat(r#"{"model": "llama3.2"}"#).unwrap();
        assert!(c.is_load_only());
        let c = chat(r#"{"model": "llama3.2", "messages": [], "keep_alive": 0}"#).unwrap();
        assert!(c.is_unload());
        let c = chat(r#"{"model": "m", "messages": [], "keep_alive": "1h"}"#).unwrap();
        assert_eq!(
            c.keep_alive,
            Some(KeepAlive::For(Duration::from_secs(3600)))
        );
        assert!(!c.is_unload());
    }

    #[test]
    fn chat_refusals() {
        let user = r#"[{"role": "user", "content": "x"}]"#;
        for (extra, says) in [
            (r#""model": """#, "model is required"),
            (
                r#""model": "m", "options": {"num_ctx": 8192}"#,
                "num_ctx 8192 is larger",
            ),
            (
                r#""model": "m", "options": {"temperature": -1}"#,
                "temperature",
            ),
            (r#""model": "m", "format": "yaml""#, "invalid format"),
            (r#""model": "m", "keep_alive": "forever""#, "keep_alive"),
            (r#""model": "m", "think": "very""#, "invalid think value"),
            (
                r#""model": "m", "tools": [{"type": "function"}]"#,
                "tools[0]: missing field `function`",
            ),
            (
                r#""model": "m", "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]"#,
                "JSON Schema",
            ),
        ] {
            let e = chat(&format!(r#"{{{extra}, "messages": {user}}}"#)).expect_err(extra);
            assert_eq!(e.status, 400);
            assert!(e.message.contains(says), "{extra}: {e}");
        }
        let c = chat(r#"{"model": "llava", "messages": [{"role": "user", "content": "what is in this image?", "images": ["iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg=="]}]}"#)
            .unwrap();
        assert_eq!(c.messages[0].images[0].probe(), Ok((1, 1)));
        let e = chat(r#"{"model": "llava", "messages": [{"role": "user", "content": "x", "images": ["%%"]}]}"#)
            .unwrap_err();
        assert!(
            e.message
                .contains("messages[0].images[0]: the image is not valid base64"),
            "{e}"
        );
        let e = chat(r#"{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}"#)
            .unwrap_err();
        assert!(e.message.contains("messages[0]"), "{e}");
        assert_eq!(
            chat(r#"{"model": "m", "messages": [{"role": "USER"}]}"#)
                .unwrap()
                .messages[0],
            ChatMessage::new("user", "")
        );
        for wrong in [
            r#"{"model": 1, "messages": []}"#,
            r#"{"model": "m", "messages": {}}"#,
            r#"{"model": "m", "messages": [{"role": "user", "content": ["x"]}]}"#,
            r#"{"model": "m", "stream": "false"}"#,
            r#"{"model": "m", "options": {"top_k": "40"}}"#,
            r#"{"model": "m", "options": [1]}"#,
            r#"{"model": "m", "messages": [["user", "x"]]}"#,
            r#"{"model": "m", "tools": {}}"#,
        ] {
            assert_eq!(chat(wrong).unwrap_err().status, 400, "{wrong}");
        }
    }
}
