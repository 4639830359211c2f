//! A request's prompt made into tokens on the caller's thread, never the engine's: a
//! conversation rendered with the model's template (its tools' grammar taken into the
//! sampling parameters), its images and audio placed and cut into chunks by the projector, text
//! tokenized; a prompt judged by its length first, so one that cannot fit is never tokenized.

use hearth_protocol::SamplingParams;
use llama_cpp_2::token::LlamaToken;

use hearth_protocol::media::check_count;

use crate::media::{MediaChunk, MediaError};
use crate::model::{Chat, ModelInfo, PromptError};

/// Prompts longer than this are tokenized with the async runtime told that this thread blocks
/// (tokio's `block_in_place`), so the runtime's other tasks move to another thread meanwhile.
const HEAVY_PROMPT_BYTES: usize = 64 << 10;

/// Run `work` (tokenizing `bytes` of text), handing this thread's async tasks to the runtime's
/// others first when it is heavy and the runtime has others.
fn off_the_runtime<R>(bytes: usize, work: impl FnOnce() -> R) -> R {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi && bytes > HEAVY_PROMPT_BYTES {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// The tokens `chat` takes as `model` reads it: its text, and each image or clip as the
/// projector cuts it (decoded for that: slow, call it off the async threads), as a submit
/// counts them. A prompt too long for the context is counted as its text alone.
pub fn count_chat_tokens(model: &ModelInfo, chat: &Chat) -> Result<usize, PromptError> {
    let media = chat
        .messages
        .iter()
        .any(|m| !m.images.is_empty() || !m.audio.is_empty());
    if media {
        match chat_tokens(model, chat, &mut SamplingParams::default()) {
            Ok((tokens, _)) => return Ok(tokens.len()),
            Err(Unfit::Prompt(e)) => return Err(e),
            Err(Unfit::TooLong(_)) => {}
        }
    }
    Ok(model.count_tokens(&model.render_chat(chat)?))
}

/// Why a prompt was not made into tokens.
#[derive(Debug)]
pub(crate) enum Unfit {
    Prompt(PromptError),
    /// Its text alone takes at least this many tokens, more than the context holds.
    TooLong(usize),
}

impl From<PromptError> for Unfit {
    fn from(e: PromptError) -> Self {
        Self::Prompt(e)
    }
}

/// The tokens of a text sent as it is.
pub(crate) fn text_tokens(model: &ModelInfo, text: &str) -> Result<Vec<LlamaToken>, Unfit> {
    fits(model, text)?;
    Ok(off_the_runtime(text.len(), || {
        model.prompter.tokenize(text)
    }))
}

/// Judged by its length: the fewest tokens `text` can take already exceed the context.
fn fits(model: &ModelInfo, text: &str) -> Result<(), Unfit> {
    let least = model.prompter.least_tokens(text);
    if least >= model.context as usize {
        return Err(Unfit::TooLong(least));
    }
    Ok(())
}

/// The tokens of a conversation (images as stand-in ids) and its image chunks; the grammar of
/// its tools goes into `params`.
pub(crate) fn chat_tokens(
    model: &ModelInfo,
    chat: &Chat,
    params: &mut SamplingParams,
) -> Result<(Vec<LlamaToken>, Vec<MediaChunk>), Unfit> {
    let with_images = chat.messages.iter().any(|m| !m.images.is_empty());
    let with_audio = chat.messages.iter().any(|m| !m.audio.is_empty());
    let projector = match (with_images || with_audio, &model.media) {
        (false, _) => None,
        (true, Some(p)) if (!with_images || p.vision) && (!with_audio || p.audio) => Some(p),
        (true, found) => {
            let why = model.projector_refused.clone();
            let model = model.id.clone();
            // What the projector lacks: one that hears may not see, and the other way round.
            let sees = found.as_ref().is_some_and(|p| p.vision);
            return Err(if with_images && !sees {
                PromptError::NoVision { model, why }
            } else {
                PromptError::NoAudio { model, why }
            }
            .into());
        }
    };
    // Images and clips stand in the text where the template puts their messages, in this order.
    let (_, media) = crate::media::placed(&chat.messages);
    // Every door checks its own; this is the request's whole count, whatever its messages.
    let images = chat.messages.iter().map(|m| m.images.len()).sum();
    check_count(images).map_err(|e| PromptError::Media(MediaError::Limit(e)))?;
    let clips = chat.messages.iter().map(|m| m.audio.len()).sum();
    hearth_protocol::audio::check_count(clips)
        .map_err(|e| PromptError::Media(MediaError::AudioLimit(e)))?;
    let rendered = model.prompter.render(chat)?;
    if let Some(g) = rendered.grammar {
        if params.grammar.is_some() {
            return Err(PromptError::FormatWithTools.into());
        }
        params.grammar = Some(g);
        params.grammar_triggers = rendered.triggers;
    }
    fits(model, &rendered.text)?;
    match projector {
        None => {
            let tokens = off_the_runtime(rendered.text.len(), || {
                model.prompter.tokenize(&rendered.text)
            });
            Ok((tokens, Vec::new()))
        }
        Some(p) => {
            // Decoding images and clips is heavy whatever their count.
            let prepared = off_the_runtime(usize::MAX, || p.prepare(&rendered.text, &media))
                .map_err(PromptError::from)?;
            Ok((prepared.tokens, prepared.media))
        }
    }
}
