//! A chat turn's prompt fitted to the model's context when tool results overflow it: the
//! longest results are cut (each to the same length, the shorter ones kept whole), each with a
//! note the model reads, until the rendered prompt leaves room for the answer. Only tool
//! results are cut: what the user and the model wrote is never changed here.

use std::sync::Arc;

use hearth_engine::{Chat, ModelInfo};

/// Rounds of cutting at most: each measures the prompt again with the model's tokenizer.
const ROUNDS: usize = 6;

/// Bytes a token of text takes at the most, as far as cutting goes: a result longer than this
/// many times the context cannot fit, and is cut to that before any tokenizing (which takes
/// about a second a megabyte).
const MAX_BYTES_PER_TOKEN: usize = 16;

/// Tokens asked beyond the overflow each round, so that the notes and the rounding of bytes to
/// tokens do not leave it a few tokens over.
const SLACK_TOKENS: usize = 64;

/// The tokens kept free for the answer: its `max_tokens` when set (at most half the context),
/// else a quarter of the context.
pub(super) fn answer_room(context: u32, max_tokens: Option<u32>) -> usize {
    let context = context as usize;
    max_tokens.map_or(context / 4, |m| (m as usize).min(context / 2))
}

/// [`fit_tool_results`] off the async threads (tokenizing a long prompt takes a while), for a
/// model of this node (`info`); a peer's model is sent the chat as it is.
pub(super) async fn fitted(
    info: Option<Arc<ModelInfo>>,
    mut chat: Chat,
    max_tokens: Option<u32>,
) -> Chat {
    let Some(info) = info else {
        return chat;
    };
    let room = answer_room(info.context, max_tokens);
    tokio::task::spawn_blocking(move || {
        fit_tool_results(&info, &mut chat, room);
        chat
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Cut the chat's tool results until its prompt fits `context` with `room` tokens to spare.
/// A prompt that fits is left alone (measured without tokenizing when its bytes alone show
/// it); one that still does not fit after the results are cut goes on as it is, for the
/// engine to refuse with its own words.
pub(super) fn fit_tool_results(info: &ModelInfo, chat: &mut Chat, room: usize) {
    let budget = (info.context as usize).saturating_sub(room);
    let originals: Vec<(usize, String)> = chat
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == "tool")
        .map(|(i, m)| (i, m.content.clone()))
        .collect();
    let most = budget * MAX_BYTES_PER_TOKEN;
    let mut level = originals
        .iter()
        .any(|(_, c)| c.len() > most)
        .then_some(most);
    for _ in 0..ROUNDS {
        if let Some(level) = level {
            cut_to(chat, &originals, level);
        }
        let Ok(text) = info.render_chat(chat) else {
            return;
        };
        // A token is at least a byte: a prompt of fewer bytes than the budget fits.
        if text.len() < budget {
            return;
        }
        let tokens = info.count_tokens(&text);
        if tokens <= budget {
            return;
        }
        let bytes_per_token = text.len() as f64 / tokens.max(1) as f64;
        let cut = ((tokens - budget + SLACK_TOKENS) as f64 * bytes_per_token).ceil() as usize;
        let lengths: Vec<usize> = originals
            .iter()
            .map(|(_, c)| level.map_or(c.len(), |l| c.len().min(l)))
            .collect();
        match level_for(&lengths, cut) {
            Some(lower) if level.is_none_or(|l| lower < l) => level = Some(lower),
            _ => return,
        }
    }
    if let Some(level) = level {
        cut_to(chat, &originals, level);
    }
}

/// Each tool result (at its index in the chat, as it was) longer than `level` bytes cut to
/// that, whole characters kept, with a note saying how much went.
fn cut_to(chat: &mut Chat, originals: &[(usize, String)], level: usize) {
    for (i, original) in originals {
        let was = original.len();
        let m = &mut chat.messages[*i];
        if was <= level {
            m.content.clone_from(original);
            continue;
        }
        let mut keep = level;
        while !original.is_char_boundary(keep) {
            keep -= 1;
        }
        m.content = format!(
            "{}\n[Hearth cut this tool result to fit the model's context: {} of its {was} bytes were left out.]",
            &original[..keep],
            was - keep
        );
    }
}

/// The length to cut every longer result down to so that about `cut` bytes go: the water
/// level over `lengths`. `None` when the results are already as short as they may get.
fn level_for(lengths: &[usize], cut: usize) -> Option<usize> {
    /// Below this a result is left as it is (the note alone would be about as long).
    const FLOOR: usize = 200;
    let mut sorted: Vec<usize> = lengths.iter().copied().filter(|&l| l > FLOOR).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    // Lower the level past each result in turn until enough is cut.
    let mut over = 0usize;
    for i in 0..sorted.len() {
        let next = sorted.get(i + 1).copied().unwrap_or(FLOOR).max(FLOOR);
        let width = i + 1;
        let between = (sorted[i] - next) * width;
        if over + between >= cut {
            let down = (cut - over).div_ceil(width);
            return Some(sorted[i] - down);
        }
        over += between;
    }
    Some(FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_cuts_the_longest_first_and_never_below_the_floor() {
        // One long result: only it is cut, by the bytes asked.
        assert_eq!(level_for(&[10_000, 300], 4_000), Some(6_000));
        // Two long ones end level; the short one is kept whole.
        assert_eq!(level_for(&[10_000, 8_000, 300], 6_000), Some(6_000));
        // More than there is: down to the floor.
        assert_eq!(level_for(&[1_000, 900], 1_000_000), Some(200));
        // Nothing long enough to cut.
        assert_eq!(level_for(&[150, 20], 100), None);
        assert_eq!(level_for(&[], 100), None);
    }

    #[test]
    fn cutting_keeps_whole_characters_and_says_what_went() {
        let mut chat = Chat {
            messages: vec![
                hearth_protocol::ChatMessage::new("user", "Look"),
                hearth_protocol::ChatMessage::new("tool", "é".repeat(1_000)),
                hearth_protocol::ChatMessage::new("tool", "short"),
            ],
            tools: None,
            think: None,
        };
        let originals = vec![
            (1, chat.messages[1].content.clone()),
            (2, "short".to_owned()),
        ];
        cut_to(&mut chat, &originals, 999);
        let cut = &chat.messages[1].content;
        let (kept, note) = cut.split_once('\n').unwrap();
        assert_eq!(kept, "é".repeat(499));
        assert_eq!(
            note,
            "[Hearth cut this tool result to fit the model's context: 1002 of its 2000 bytes were left out.]"
        );
        assert_eq!(chat.messages[0].content, "Look");
        assert_eq!(chat.messages[2].content, "short");
    }
}
