//! A loaded model as the rest of the program sees it: [`ModelInfo`] (identity, metadata,
//! context per slot) and the prompt preparation that runs on the caller's thread — chat
//! template rendering and tokenization — so the engine thread never templates or tokenizes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hearth_protocol::{ChatMessage, ModelId, ToolSet};
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use crate::gguf::GgufInfo;
use crate::template::{ChatTemplate, Extras};
use crate::tools::ToolFormat;

/// A conversation, and what its template may be told beside the messages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chat {
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call; the engine renders them in the model's own format and
    /// constrains a call with a grammar.
    pub tools: Option<ToolSet>,
    /// Thinking on or off, for templates that can switch it (`enable_thinking`).
    pub think: Option<bool>,
}

impl From<Vec<ChatMessage>> for Chat {
    fn from(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }
}

/// A rendered conversation: the prompt text, and the grammar its tools ask of the answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Rendered {
    pub text: String,
    pub grammar: Option<String>,
    pub triggers: Vec<String>,
}

/// Where the engine is with its model.
#[derive(Debug, Clone)]
pub enum ModelState {
    Loading {
        model: ModelId,
        /// 0.0 ..= 1.0, from llama.cpp's loader.
        progress: f32,
        elapsed: Duration,
    },
    Ready(Arc<ModelInfo>),
    Failed {
        model: ModelId,
        message: String,
    },
    /// The engine has shut down.
    Stopped,
    /// No model is loaded: it was unloaded, or none was ever loaded.
    Unloaded,
}

impl ModelState {
    /// Seconds left at the current loading rate, when it can be estimated.
    pub fn eta_seconds(&self) -> Option<f64> {
        match self {
            Self::Loading {
                progress, elapsed, ..
            } if *progress > 0.01 => {
                let total = elapsed.as_secs_f64() / f64::from(*progress);
                Some((total - elapsed.as_secs_f64()).max(0.0))
            }
            _ => None,
        }
    }
}

/// A model that is loaded and serving.
pub struct ModelInfo {
    pub id: ModelId,
    pub path: PathBuf,
    pub gguf: GgufInfo,
    pub n_params: u64,
    pub size_bytes: u64,
    pub n_ctx_train: u32,
    /// The context in tokens: one KV pool the slots share, one request taking up to all of it.
    pub context: u32,
    pub slots: usize,
    /// The KV cache's element type and the memory the whole pool takes.
    pub kv_type: crate::KvType,
    pub kv_bytes: u64,
    /// Host memory evicted sequences' KV may take (the prompt cache; 0: off).
    pub cache_ram: u64,
    /// The most tokens one embedding input may have.
    pub embed_max_tokens: u32,
    /// A reranker: its GGUF's pooling is rank (a classification head scores a query and a
    /// document together); it serves `rerank`, not embeddings.
    pub reranker: bool,
    /// The prompt its GGUF gives a query and a document (`tokenizer.chat_template.rerank`).
    pub(crate) rerank_template: Option<String>,
    /// Where its layers are: this machine's GPU (how many, how much video memory), or the CPU.
    pub placement: crate::offload::Placement,
    /// The draft model guessing for it (`--draft-model`), or why the one configured does not.
    pub draft: Option<ModelId>,
    pub draft_refused: Option<String>,
    /// What its projector lets it take besides text (`mmproj`), or why the one found does not.
    pub vision: bool,
    pub audio: bool,
    pub projector: Option<PathBuf>,
    pub projector_refused: Option<String>,
    pub(crate) media: Option<Arc<crate::media::Projector>>,
    pub(crate) prompter: Prompter,
}

impl std::fmt::Debug for ModelInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelInfo")
            .field("id", &self.id)
            .field("path", &self.path)
            .field("context", &self.context)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl ModelInfo {
    /// The conversation as the model will see it: its chat template applied (with the tools),
    /// ending with the assistant's turn opening.
    pub fn render_chat(&self, chat: &Chat) -> Result<String, PromptError> {
        Ok(self.prompter.render(chat)?.text)
    }

    /// Whether this model's template opens the thinking block itself (its assistant turn ends
    /// with `<think>`, as DeepSeek R1's and QwQ's do): the model's text then starts inside the
    /// thinking, and only its end is written. `think` as the request sets it.
    pub fn opens_thinking(&self, think: Option<bool>) -> bool {
        self.prompter.opens_thinking[thinking_index(think)]
    }

    /// How this model writes a tool call: its template's format, or the generic one.
    pub fn tool_format(&self) -> ToolFormat {
        self.prompter.tool_format
    }

    /// The fewest tokens `text` can take (see `Prompter::least_tokens`): a prompt longer than
    /// the context by this count alone is refused without tokenizing it.
    pub fn least_tokens(&self, text: &str) -> usize {
        self.prompter.least_tokens(text)
    }

    /// Token count of a text as the engine will tokenize it.
    pub fn count_tokens(&self, text: &str) -> usize {
        self.prompter.tokenize(text).len()
    }

    /// The token ids of `text` as the engine would see it in a `Prompt::Text` (special tokens
    /// parsed, BOS added when the model wants one).
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.prompter
            .tokenize(text)
            .into_iter()
            .map(|t| t.0 as u32)
            .collect()
    }

    /// The token ids of `text` to follow earlier ids (Ollama's `context`): as [`Self::tokenize`]
    /// without the BOS, which belongs only at the start.
    pub fn tokenize_after(&self, text: &str) -> Vec<u32> {
        self.prompter
            .model
            .vocab()
            .tokenize(text.as_bytes(), false, true)
            .into_iter()
            .map(|t| t.0 as u32)
            .collect()
    }

    /// Decode token ids back to text (special tokens hidden), for doors that echo prompts.
    pub fn detokenize(&self, ids: &[i32]) -> String {
        let vocab = self.prompter.model.vocab();
        let mut bytes = Vec::new();
        for id in ids {
            vocab.token_to_piece_into(LlamaToken::new(*id), &mut bytes, false, None);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Why a prompt could not be prepared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromptError {
    #[error("the model's chat template could not render these messages: {0}")]
    Template(String),
    #[error("the prompt is empty")]
    Empty,
    #[error("token id {0} is not in the model's vocabulary")]
    InvalidToken(u32),
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// A grammar ends only where the model may end: banning the end tokens would leave llama.cpp
    /// no token to choose once the grammar is complete (it aborts the process).
    #[error("a format (grammar) cannot be combined with ignore_eos: the answer must be able to end where the format ends")]
    GrammarWithoutEnd,
    #[error("a format cannot be combined with tools: a tool call has its own format")]
    FormatWithTools,
    /// Images for a model without a projector that reads them.
    #[error("model {model} cannot see images: no projector that reads images is loaded with it (an mmproj file beside it){}", why.as_deref().map(|w| format!(" ({w})")).unwrap_or_default())]
    NoVision { model: ModelId, why: Option<String> },
    /// Audio for a model without a projector that hears it.
    #[error("model {model} cannot hear audio: no projector that reads audio is loaded with it (an mmproj file beside it){}", why.as_deref().map(|w| format!(" ({w})")).unwrap_or_default())]
    NoAudio { model: ModelId, why: Option<String> },
    #[error(transparent)]
    Media(#[from] crate::media::MediaError),
    /// `speculative: "draft"` for a model no draft model guesses for.
    #[error("model {model} has no draft model: start the node with --draft-model (one sharing its vocabulary) to use speculative \"draft\"{}", why.as_deref().map(|w| format!(" ({w})")).unwrap_or_default())]
    NoDraftModel { model: ModelId, why: Option<String> },
}

/// Template + tokenizer, usable from any thread (llama.cpp's vocabulary is read-only after
/// loading, and llama-server tokenizes on its HTTP threads the same way).
pub(crate) struct Prompter {
    pub(crate) model: Arc<LlamaModel>,
    jinja: Option<ChatTemplate>,
    /// The template source for llama.cpp's built-in fallback (`chatml` when the GGUF has none).
    builtin: String,
    tool_format: ToolFormat,
    /// The most bytes of text one token of the vocabulary covers.
    max_piece_bytes: usize,
    /// Whether the template's assistant turn opens a thinking block, for `think` unset, false
    /// and true ([`thinking_index`]).
    opens_thinking: [bool; 3],
}

/// Where `think`'s answer is kept in `Prompter::opens_thinking`.
fn thinking_index(think: Option<bool>) -> usize {
    match think {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    }
}

impl Prompter {
    pub(crate) fn new(model: Arc<LlamaModel>, template_source: Option<String>) -> Self {
        let vocab = model.vocab();
        let token_text = |t: LlamaToken| {
            let mut b = Vec::new();
            vocab.token_to_piece_into(t, &mut b, true, None);
            String::from_utf8_lossy(&b).into_owned()
        };
        let bos = token_text(vocab.bos());
        let eos = token_text(vocab.eos());
        // The longest text one token stands for (special tokens' text too: prompts parse them).
        let mut piece = Vec::new();
        let max_piece_bytes = (0..model.n_vocab())
            .map(|t| {
                piece.clear();
                vocab.token_to_piece_into(LlamaToken::new(t), &mut piece, true, None);
                piece.len()
            })
            .max()
            .unwrap_or(1)
            .max(1);
        let jinja = template_source.as_deref().and_then(|src| {
            ChatTemplate::new(src, &bos, &eos)
                .map_err(|e| tracing::warn!(error = %e, "GGUF chat template unusable with Jinja; using llama.cpp's built-in templates"))
                .ok()
        });
        // Only a template rendered here can be given tools in its own format.
        let tool_format = match (&jinja, &template_source) {
            (Some(_), Some(src)) => ToolFormat::of_template(src),
            _ => ToolFormat::Generic,
        };
        let mut prompter = Self {
            model,
            jinja,
            builtin: template_source.unwrap_or_else(|| "chatml".to_owned()),
            tool_format,
            max_piece_bytes,
            opens_thinking: [false; 3],
        };
        // Rendered once here: the doors ask it of every request.
        for think in [None, Some(false), Some(true)] {
            let probe = Chat {
                messages: vec![ChatMessage::new("user", "Hi")],
                tools: None,
                think,
            };
            prompter.opens_thinking[thinking_index(think)] = prompter
                .render(&probe)
                .is_ok_and(|r| r.text.trim_end().ends_with("<think>"));
        }
        prompter
    }

    /// The prompt of a conversation, with its tools in the model's format and their grammar.
    /// Images are rendered as their markers, where they stand (their bytes never go into the
    /// template's context).
    pub(crate) fn render(&self, chat: &Chat) -> Result<Rendered, PromptError> {
        if chat
            .messages
            .iter()
            .any(|m| !m.images.is_empty() || !m.audio.is_empty())
        {
            let (messages, _) = crate::media::placed(&chat.messages);
            let rendered = self.render(&Chat {
                messages,
                tools: chat.tools.clone(),
                think: chat.think,
            })?;
            return Ok(Rendered {
                text: crate::media::marked(&rendered.text),
                ..rendered
            });
        }
        let Some(tools) = &chat.tools else {
            // Earlier calls and results, for a template that cannot show them itself.
            let generic = (self.tool_format == ToolFormat::Generic)
                .then(|| crate::tools::generic_history(&chat.messages))
                .flatten();
            let messages = generic.as_deref().unwrap_or(&chat.messages);
            return Ok(Rendered {
                text: self.render_messages(messages, None, chat.think)?,
                ..Rendered::default()
            });
        };
        let prepared = crate::tools::prepare(self.tool_format, &chat.messages, tools)?;
        Ok(Rendered {
            text: self.render_messages(
                &prepared.messages,
                prepared.template_tools.as_deref(),
                chat.think,
            )?,
            grammar: prepared.grammar,
            triggers: prepared.triggers,
        })
    }

    fn render_messages(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[hearth_protocol::Tool]>,
        think: Option<bool>,
    ) -> Result<String, PromptError> {
        if let Some(t) = &self.jinja {
            match t.render_with(messages, Extras { tools, think }, true) {
                Ok(s) => return Ok(s),
                Err(e) => {
                    tracing::debug!(error = %e, "Jinja rendering failed; trying llama.cpp's built-in template")
                }
            }
        }
        let tmpl = LlamaChatTemplate::new(&self.builtin)
            .map_err(|e| PromptError::Template(e.to_string()))?;
        let chat = messages
            .iter()
            .map(|m| LlamaChatMessage::new(m.role.clone(), m.content.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PromptError::Template(e.to_string()))?;
        self.model
            .apply_chat_template(&tmpl, &chat, true)
            .map_err(|e| PromptError::Template(e.to_string()))
    }

    /// The fewest tokens `text` can take: no token covers more than the vocabulary's longest
    /// piece. What a prompt is judged by before it is tokenized, which for megabytes takes
    /// seconds of a core.
    pub(crate) fn least_tokens(&self, text: &str) -> usize {
        text.len().div_ceil(self.max_piece_bytes)
    }

    /// Tokenize as llama-server does: BOS when the vocabulary asks for it, special tokens parsed.
    pub(crate) fn tokenize(&self, text: &str) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), true, true)
    }

    /// A grammar this model's vocabulary can follow (built once here and dropped; the engine
    /// builds its own).
    pub(crate) fn check_grammar(
        &self,
        grammar: &str,
        triggers: &[String],
    ) -> Result<(), PromptError> {
        crate::grammar::sampler(&self.model, grammar, triggers)?;
        Ok(())
    }

    /// Ids from outside, checked against the vocabulary: an id beyond it would crash llama.cpp.
    pub(crate) fn tokens_from_ids(&self, ids: &[u32]) -> Result<Vec<LlamaToken>, PromptError> {
        let n_vocab = self.model.n_vocab() as u32;
        ids.iter()
            .map(|&id| {
                if id < n_vocab {
                    Ok(LlamaToken::new(id as i32))
                } else {
                    Err(PromptError::InvalidToken(id))
                }
            })
            .collect()
    }
}
