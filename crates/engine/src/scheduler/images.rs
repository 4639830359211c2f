//! Images in a slot's prompt: the text around them is prefilled in the batched steps as any
//! prompt's, and each image chunk, once the prefill reaches it, is evaluated alone into the
//! slot's sequence between two steps (an encode cannot be split), one image a step, the slots
//! taking turns, so that an image holds the other slots up by one encode at most.

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

impl Slot {
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
            let result = projector.eval(image, &mut self.ctx, slot.seq, self.n_batch as u32);
            self.media_cursor = (i + 1) % n;
            match result {
                Ok(next) if next == end => {
                    let slot = self.slots[i].as_mut().expect("slot present");
                    slot.prefilled = end;
                    slot.n_past = end as i32;
                }
                Ok(next) => self.fail(
                    i,
                    FailureKind::Decode,
                    format!("the image took positions up to {next}, not {end}"),
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
