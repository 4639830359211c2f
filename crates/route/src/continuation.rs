//! The prompt that continues an answer from the text already delivered: the one place
//! continuations are made, for the supervisor and for worker mode alike.

use hearth_engine::{ModelInfo, Prompt};

/// The prompt that continues an answer from `delivered`, the text already sent: the
/// conversation rendered by the model's chat template (or the raw prompt) followed by that
/// text. With nothing delivered, the prompt itself. The one place continuations are made: the
/// supervisor continuing here an answer lost elsewhere, and worker mode continuing one for a
/// Hearth hub.
pub fn continuation(info: &ModelInfo, prompt: Prompt, delivered: &str) -> Result<Prompt, String> {
    if delivered.is_empty() {
        return Ok(prompt);
    }
    Ok(match prompt {
        Prompt::Chat(chat) => {
            if chat.tools.is_some() {
                return Err("an answer with tools cannot be continued from part of it".into());
            }
            // Its rendered text would hold the images' places, not the images.
            if chat
                .messages
                .iter()
                .any(|m| !m.images.is_empty() || !m.audio.is_empty())
            {
                return Err(
                    "an answer about images or audio cannot be continued from part of it".into(),
                );
            }
            let rendered = info.render_chat(&chat).map_err(|e| e.to_string())?;
            Prompt::Text(rendered + delivered)
        }
        Prompt::Text(text) => Prompt::Text(text + delivered),
        // Token ids never leave this node, so they are never continued from text.
        Prompt::Tokens(tokens) => Prompt::Tokens(tokens),
    })
}
