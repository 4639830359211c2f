//! A chat turn's prompt fitted to the model's context when tool results overflow it: every
//! result longer than a level is cut to it (the shorter ones kept whole), each with a note the
//! model reads. The levels are a fixed ladder, and the highest that leaves room to grow is
//! taken, so the loop's next steps keep the same cut (and read it from the cache) until the
//! conversation outgrows it. Only tool results are cut: what the user and the model wrote is
//! never changed here.

use std::sync::Arc;

use hearth_engine::{Chat, ModelInfo};

/// Bytes a token of text takes at the most, as far as cutting goes: a result longer than this
/// many times the budget cannot fit, and no prompt holding it is tokenized (which takes about
/// a second a megabyte).
pub(super) const MAX_BYTES_PER_TOKEN: usize = 16;

/// Below this a result is never cut (its note would be about as long).
const FLOOR: usize = 300;

/// Each level of the ladder is this share of the one above it.
const STEP: f64 = 0.8;

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
    let fitting = tokio::task::spawn_blocking(move || {
        fit_tool_results(&info, &mut chat, room);
        chat
    });
    match fitting.await {
        Ok(chat) => chat,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: the runtime is shutting down, and the turn with it.
        Err(e) => panic!("fitting a prompt was cancelled: {e}"),
    }
}

/// Cut the chat's tool results so that its prompt fits the context with `room` tokens to
/// spare, measured by the model's template and tokenizer.
pub(super) fn fit_tool_results(info: &ModelInfo, chat: &mut Chat, room: usize) {
    let budget = (info.context as usize).saturating_sub(room);
    fit(chat, budget, |chat| {
        let text = info.render_chat(chat).ok()?;
        // A token is at least a byte: fewer bytes than the budget fit without tokenizing.
        Some(if text.len() < budget {
            text.len()
        } else {
            info.count_tokens(&text)
        })
    });
}

/// [`fit_tool_results`] with `measure` giving a chat's tokens (`None`: it cannot be rendered,
/// and is left as it is). A chat that fits `budget` is left alone; else results are cut to the
/// highest level of the ladder at which the prompt takes at most seven eighths of the budget
/// (room for the loop's next steps), or to the lowest, for the engine to refuse what still
/// does not fit in its own words.
fn fit(chat: &mut Chat, budget: usize, mut measure: impl FnMut(&Chat) -> Option<usize>) {
    let originals: Vec<(usize, String)> = chat
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == "tool")
        .map(|(i, m)| (i, m.content.clone()))
        .collect();
    if originals.iter().all(|(_, c)| c.len() <= FLOOR) {
        return;
    }
    let most = budget * MAX_BYTES_PER_TOKEN;
    let too_long = originals.iter().any(|(_, c)| c.len() > most);
    if !too_long && measure(chat).is_none_or(|t| t <= budget) {
        return;
    }
    let target = budget - budget / 8;
    let ladder = ladder(most);
    // The first level (from the top) that fits: levels lower down fit too.
    let (mut lo, mut hi) = (0, ladder.len() - 1);
    cut_to(chat, &originals, ladder[hi]);
    if measure(chat).is_none_or(|t| t > target) {
        return;
    }
    while lo < hi {
        let mid = (lo + hi) / 2;
        cut_to(chat, &originals, ladder[mid]);
        if measure(chat).is_some_and(|t| t <= target) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    cut_to(chat, &originals, ladder[lo]);
}

/// The levels, from `most` bytes down by [`STEP`] to [`FLOOR`]: the same for every step of a
/// conversation (they depend on the budget alone).
fn ladder(most: usize) -> Vec<usize> {
    let mut levels = Vec::new();
    let mut level = most as f64;
    while level > FLOOR as f64 {
        levels.push(level as usize);
        level *= STEP;
    }
    levels.push(FLOOR);
    levels
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

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_protocol::ChatMessage;

    fn chat(results: &[String]) -> Chat {
        let mut messages = vec![ChatMessage::new("user", "Look")];
        for r in results {
            messages.push(ChatMessage::new("assistant", "calling"));
            messages.push(ChatMessage::new("tool", r.clone()));
        }
        Chat {
            messages,
            tools: None,
            think: None,
        }
    }

    /// A tokenizer of one token per two bytes, over every message's text.
    fn tokens(chat: &Chat) -> Option<usize> {
        Some(chat.messages.iter().map(|m| m.content.len()).sum::<usize>() / 2)
    }

    #[test]
    fn a_cut_stays_the_same_while_the_loop_grows_then_steps_down() {
        let big = "0123456789".repeat(100_000);
        let mut first = chat(std::slice::from_ref(&big));
        fit(&mut first, 3000, tokens);
        let cut = first.messages[2].content.clone();
        let used = tokens(&first).unwrap();
        assert!(used <= 3000 - 375, "{used} tokens: room left to grow");
        assert!(cut.ends_with("bytes were left out.]"), "{cut}");
        // The next steps add a call and a result each: the big one is cut the same.
        let mut results = vec![big.clone()];
        for step in 0..3 {
            // About 110 tokens a step: more than a cut to just under the budget would leave.
            results.push(format!("Echo: step {step} {}", "w".repeat(200)));
            let mut next = chat(&results);
            fit(&mut next, 3000, tokens);
            assert_eq!(next.messages[2].content, cut, "step {step}");
        }
        // Outgrown: the next level down.
        results.push("x".repeat(1000));
        let mut grown = chat(&results);
        fit(&mut grown, 3000, tokens);
        assert!(grown.messages[2].content.len() < cut.len());
        assert!(tokens(&grown).unwrap() <= 3000 - 375);
    }

    #[test]
    fn what_fits_and_short_results_are_left_alone() {
        let mut fits = chat(&["y".repeat(4000)]);
        fit(&mut fits, 3000, tokens);
        assert_eq!(fits.messages[2].content.len(), 4000);
        let mut short = chat(&["z".repeat(FLOOR)]);
        let mut asked = 0;
        fit(&mut short, 10, |c| {
            asked += 1;
            tokens(c)
        });
        assert_eq!((short.messages[2].content.len(), asked), (FLOOR, 0));
    }

    #[test]
    fn cutting_keeps_whole_characters_and_says_what_went() {
        let mut chat = Chat {
            messages: vec![
                ChatMessage::new("user", "Look"),
                ChatMessage::new("tool", "é".repeat(1_000)),
                ChatMessage::new("tool", "short"),
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

    #[test]
    fn the_ladder_goes_down_by_a_fifth_to_the_floor() {
        let l = ladder(10_000);
        assert_eq!(&l[..3], &[10_000, 8_000, 6_400]);
        assert_eq!(*l.last().unwrap(), FLOOR);
        assert!(l.windows(2).all(|w| w[0] > w[1]));
    }
}
