//! Images in a slot's prompt: the text around them is prefilled in the batched steps as any
//! prompt's, and each image chunk, once the prefill reaches it, is evaluated alone into the
//! slot's sequence between two steps (an encode cannot be split), one image a step, the slots
//! taking turns, so that an image holds the other slots up by one encode at most.
//!
//! Tokens and KV positions go one for one, except under M-RoPE (Qwen2-VL and its kin), where
//! an image of `len` tokens takes only `n_pos` positions (its rows and columns are positions
//! of their own): [`position`] and [`tokens_below`] map between the two.

use crate::events::FailureKind;
use crate::media::MediaChunk;

use super::{Scheduler, Slot};

/// `n` prompt tokens kept from a cache, cut back to the start of an image they would split.
pub(super) fn floor(media: &[MediaChunk], n: usize) -> usize {
    media
        .iter()
        .find(|m| m.at < n && n < m.at + m.len)
        .map_or(n, |m| m.at)
}

/// The KV position of prompt token `index` (or of the answer's tokens after it).
pub(super) fn position(media: &[MediaChunk], index: usize) -> usize {
    position_in(media.iter().map(span), index)
}

/// How many tokens lie wholly below KV position `pos` (an image cut by it counts for none).
pub(super) fn tokens_below(media: &[MediaChunk], pos: usize) -> usize {
    tokens_below_in(media.iter().map(span), pos)
}

/// An image's first token, its tokens and its positions.
fn span(m: &MediaChunk) -> (usize, usize, usize) {
    (m.at, m.len, m.n_pos)
}

fn position_in(spans: impl Iterator<Item = (usize, usize, usize)>, index: usize) -> usize {
    let mut skipped = 0;
    for (at, len, n_pos) in spans {
        if at >= index {
            break;
        }
        if index < at + len {
            // Inside an image: never a place to cut, taken as its start.
            return at - skipped;
        }
        skipped += len - n_pos;
    }
    index - skipped
}

fn tokens_below_in(spans: impl Iterator<Item = (usize, usize, usize)>, pos: usize) -> usize {
    let mut skipped = 0;
    for (at, len, n_pos) in spans {
        let start = at - skipped;
        if pos <= start {
            break;
        }
        if pos < start + n_pos {
            return at;
        }
        skipped += len - n_pos;
    }
    pos + skipped
}

impl Slot {
    /// The KV position of this slot's token `index` (prompt, then answer).
    pub(super) fn pos(&self, index: usize) -> i32 {
        position(&self.media, index) as i32
    }

    /// The first image of its prompt not yet wholly in the KV cache.
    pub(super) fn next_image(&self) -> Option<&MediaChunk> {
        self.media.iter().find(|m| m.at + m.len > self.prefilled)
    }
}

impl Scheduler<'_> {
    /// Evaluate the image of one slot whose prefill has reached it (the slots in turn).
    /// Whether one was.
    pub(super) fn eval_image(&mut self) -> bool {
        let Some(projector) = self.media.clone() else {
            return false;
        };
        let n = self.slots.len();
        for k in 0..n {
            let i = (self.media_cursor + k) % n;
            let Some(slot) = self.slots[i].as_ref() else {
                continue;
            };
            if slot.paused || slot.parked {
                continue;
            }
            let Some(image) = slot.next_image().filter(|m| m.at == slot.prefilled) else {
                continue;
            };
            let end = image.at + image.len;
            let (at, expected) = (slot.pos(image.at), slot.pos(end));
            let result = projector.eval(image, at, &mut self.ctx, slot.seq, self.n_batch as u32);
            self.media_cursor = (i + 1) % n;
            match result {
                Ok(next) if next as i32 == expected => {
                    let slot = self.slots[i].as_mut().expect("slot present");
                    slot.prefilled = end;
                    slot.n_past = end as i32;
                }
                Ok(next) => self.fail(
                    i,
                    FailureKind::Decode,
                    format!("the image took positions up to {next}, not {expected}"),
                ),
                Err(why) => {
                    tracing::error!(%why);
                    self.fail(i, FailureKind::Decode, why);
                }
            }
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m_rope_images_take_fewer_positions_than_tokens() {
        // Tokens 2..18 are an image of 16 tokens on 4 positions (a 4x4 grid); 20..24 one of
        // 4 tokens on 4 positions (as every image is without M-RoPE).
        let spans = || [(2, 16, 4), (20, 4, 4)].into_iter();
        let pos = |i| position_in(spans(), i);
        assert_eq!(
            [pos(0), pos(2), pos(18), pos(19), pos(20), pos(24), pos(30)],
            [0, 2, 6, 7, 8, 12, 18]
        );
        // Inside an image: its start.
        assert_eq!(pos(5), 2);
        assert_eq!(pos(22), 8);
        let below = |p| tokens_below_in(spans(), p);
        assert_eq!(
            [
                below(0),
                below(2),
                below(6),
                below(7),
                below(8),
                below(12),
                below(18)
            ],
            [0, 2, 18, 19, 20, 24, 30]
        );
        // A cache that ends within an image's positions holds none of it.
        assert_eq!(below(3), 2);
        assert_eq!(below(10), 20);
        // Without images, one for one.
        assert_eq!(position_in(std::iter::empty(), 7), 7);
        assert_eq!(tokens_below_in(std::iter::empty(), 7), 7);
    }
}
