//! Validation of `/api/generate` bodies into [`OllamaGenerate`]: the model, the prompt (raw or
//! for the chat template, with `system` and `context`), sampling parameters, streaming, `format`
//! `keep_alive` and `think`, its `images`, with what a node cannot do (`suffix`, `template`) refused.

use super::keep_alive::KeepAlive;
use super::options::Format;
use super::request::GenerateBody;
use super::{common, model_name, read_images, OllamaError};
use crate::generation::{ChatMessage, SamplingParams};
use crate::media::as_text;

/// A validated `/api/generate` request.
#[derive(Debug, Clone, PartialEq)]
pub struct OllamaGenerate {
    pub model: String,
    /// Empty: only load (or unload) the model.
    pub prompt: String,
    /// Replaces the model's default system prompt (never set with `raw`).
    pub system: Option<String>,
    /// The prompt is sent to the model as is, without the chat template.
    pub raw: bool,
    /// Token ids of an earlier answer's `context`, to continue from (never set with `raw`).
    pub context: Vec<u32>,
    pub params: SamplingParams,
    pub stream: bool,
    pub format: Option<Format>,
    pub keep_alive: Option<KeepAlive>,
    pub num_ctx: Option<u32>,
    /// `think`: the answer's thinking apart (`true`), or thinking turned off where the template
    /// can (`false`); `None` leaves it to the model.
    pub think: Option<bool>,
    /// Images the prompt shows the model (before its text, as Ollama places them).
    pub images: Vec<crate::media::Image>,
}

impl OllamaGenerate {
    pub fn is_load_only(&self) -> bool {
        self.prompt.is_empty()
    }

    pub fn is_unload(&self) -> bool {
        self.is_load_only() && self.keep_alive.is_some_and(KeepAlive::is_unload)
    }

    /// The conversation the chat template formats when not `raw`: the system prompt, if
    /// any, then the prompt as the user's turn.
    pub fn messages(&self) -> Vec<ChatMessage> {
        let system = self
            .system
            .iter()
            .map(|s| ChatMessage::new("system", s.as_str()));
        // The images stand before the words, which hold no places of their own.
        let mut user = ChatMessage::new("user", as_text(&self.prompt));
        user.images = self.images.clone();
        system.chain([user]).collect()
    }
}

impl GenerateBody {
    /// `max_context` is the context a request gets on this node, when known.
    pub fn validate(self, max_context: Option<u32>) -> Result<OllamaGenerate, OllamaError> {
        let model = model_name(&self.model, None)?;
        let c = common(
            self.options.as_ref(),
            self.format.as_ref(),
            self.keep_alive.as_ref(),
            self.think.as_ref(),
            max_context,
        )?;
        let images = read_images("images", self.images)?;
        if self.raw.unwrap_or(false) && !images.is_empty() {
            return Err(OllamaError::bad_request(
                "raw mode does not support images: send them with raw false, and the model's template places them",
            ));
        }
        // Fill-in-the-middle needs the model's insert capability, which a node does not offer.
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(OllamaError::bad_request(format!(
                "{model:?} does not support insert"
            )));
        }
        let template = self.template.filter(|t| !t.is_empty());
        let system = self.system.filter(|s| !s.is_empty());
        let context = self.context.unwrap_or_default();
        let raw = self.raw.unwrap_or(false);
        if raw && (template.is_some() || system.is_some() || !context.is_empty()) {
            return Err(OllamaError::bad_request(
                "raw mode does not support template, system, or context",
            ));
        }
        // Ollama's templates are Go templates; a node formats with the model's own template.
        if template.is_some() {
            return Err(OllamaError::bad_request(
                "template is not supported: prompts are formatted with the model's own chat template (use raw to send a formatted prompt)",
            ));
        }
        let context = context
            .into_iter()
            .map(|t| {
                u32::try_from(t).map_err(|_| {
                    OllamaError::bad_request(format!("context holds {t}, which is not a token id"))
                })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        Ok(OllamaGenerate {
            model,
            prompt: self.prompt.unwrap_or_default(),
            system,
            raw,
            context,
            params: c.params,
            stream: self.stream.unwrap_or(true),
            format: c.format,
            keep_alive: c.keep_alive,
            num_ctx: c.num_ctx,
            think: c.think,
            images,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_body;
    use super::*;

    fn generate(body: &str) -> Result<OllamaGenerate, OllamaError> {
        parse_body::<GenerateBody>(body.as_bytes())?.validate(Some(4096))
    }

    #[test]
    fn generate_examples_from_the_docs() {
        let g = generate(r#"{"model": "llama3.2", "prompt": "Why is the sky blue?"}"#).unwrap();
        assert_eq!(
            (g.prompt.as_str(), g.stream, g.raw),
            ("Why is the sky blue?", true, false)
        );
        assert_eq!(
            g.messages(),
            vec![ChatMessage::new("user", "Why is the sky blue?")]
        );
        let g = generate(r#"{"model": "llama3.2", "prompt": "What color is the sky?", "format": "json", "stream": false}"#)
            .unwrap();
        assert_eq!((g.format, g.stream), (Some(Format::Json), false));
        let g = generate(r#"{"model": "mistral", "prompt": "[INST] why is the sky blue? [/INST]", "raw": true, "stream": false}"#)
            .unwrap();
        assert!(g.raw);
        assert_eq!(g.prompt, "[INST] why is the sky blue? [/INST]");
        let g = generate(
            r#"{"model": "m", "prompt": "hi", "system": "Be brief", "context": [1, 2, 3]}"#,
        )
        .unwrap();
        assert_eq!(g.messages()[0], ChatMessage::new("system", "Be brief"));
        assert_eq!(g.context, vec![1, 2, 3]);
        let g = generate(
            r#"{"model": "llama3.2", "prompt": "Why is the sky blue?", "stream": false,
            "options": {"num_keep": 5, "seed": 42, "num_predict": 100, "top_k": 20, "top_p": 0.9,
            "min_p": 0.0, "typical_p": 0.7, "repeat_last_n": 33, "temperature": 0.8,
            "repeat_penalty": 1.2, "presence_penalty": 1.5, "frequency_penalty": 1.0,
            "penalize_newline": true, "stop": ["\n", "user:"], "numa": false, "num_ctx": 1024,
            "num_batch": 2, "num_gpu": 1, "main_gpu": 0, "use_mmap": true, "num_thread": 8}}"#,
        )
        .unwrap();
        assert_eq!(
            (g.params.max_tokens, g.params.top_k, g.num_ctx),
            (Some(100), 20, Some(1024))
        );
        assert_eq!(g.params.repetition_penalty, 1.2);
    }

    #[test]
    fn generate_load_and_unload() {
        let g = generate(r#"{"model": "llama3.2"}"#).unwrap();
        assert!(g.is_load_only() && !g.is_unload());
        let g = generate(r#"{"model": "llama3.2", "keep_alive": 0}"#).unwrap();
        assert!(g.is_unload());
        let g = generate(r#"{"model": "llama3.2", "prompt": "", "keep_alive": "0"}"#).unwrap();
        assert!(g.is_unload());
        let g = generate(r#"{"model": "m", "prompt": "x", "keep_alive": 0}"#).unwrap();
        assert!(!g.is_unload());
    }

    #[test]
    fn generate_refusals() {
        for (body, says) in [
            (r#"{"prompt": "x"}"#, "model is required"),
            (
                r#"{"model": "codellama:code", "prompt": "def f():", "suffix": "    return result"}"#,
                "does not support insert",
            ),
            (
                r#"{"model": "m", "prompt": "x", "raw": true, "system": "s"}"#,
                "raw mode does not support",
            ),
            (
                r#"{"model": "m", "prompt": "x", "raw": true, "context": [1]}"#,
                "raw mode does not support",
            ),
            (
                r#"{"model": "m", "prompt": "x", "template": "{{ .Prompt }}"}"#,
                "template is not supported",
            ),
            (
                r#"{"model": "llava", "prompt": "x", "images": ["not base64!"]}"#,
                "images[0]: the image is not valid base64",
            ),
            (
                r#"{"model": "llava", "prompt": "x", "raw": true, "images": ["iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg=="]}"#,
                "raw mode does not support images",
            ),
            (
                r#"{"model": "llava", "prompt": "x", "images": [7]}"#,
                "images[0]: an image is a base64 string, not a number",
            ),
            (
                r#"{"model": "m", "prompt": "x", "context": [-1]}"#,
                "not a token id",
            ),
            (
                r#"{"model": "m", "prompt": "x", "options": {"num_ctx": 4097}}"#,
                "num_ctx",
            ),
            (
                r#"{"model": "m", "prompt": "x", "format": 7}"#,
                "invalid format",
            ),
        ] {
            let e = generate(body).expect_err(body);
            assert_eq!(e.status, 400);
            assert!(e.message.contains(says), "{body}: {e}");
        }
        // Empty values are Ollama's zero values, not requests for the feature.
        let g = generate(r#"{"model": "m", "prompt": "x", "suffix": "", "template": "", "images": [], "system": ""}"#)
            .unwrap();
        assert_eq!(g.system, None);
        // Images are read, and stand in the user's turn.
        let g =
            generate(r#"{"model": "llava", "prompt": "x", "images": ["iVBORw0KGgoAAAANSUhEUgAAAAEAAAABAQMAAAAl21bKAAAAA1BMVEX/AAAZ4gk3AAAACklEQVQI12NgAAAAAgAB4iG8MwAAAABJRU5ErkJggg=="]}"#).unwrap();
        assert_eq!(g.images[0].probe(), Ok((1, 1)));
        assert_eq!(g.messages()[0].images, g.images);
        for wrong in [
            r#"{"model": "m", "prompt": 5}"#,
            r#"{"model": "m", "raw": "yes"}"#,
            r#"{"model": "m", "context": [1.5]}"#,
            r#"{"model": "m", "images": "abc"}"#,
        ] {
            assert_eq!(generate(wrong).unwrap_err().status, 400, "{wrong}");
        }
    }
}
