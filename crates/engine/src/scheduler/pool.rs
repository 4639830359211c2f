//! The KV pool the slots share: which free sequence a request takes (the one whose idle cache
//! of the same owner shares its longest prefix, or one the prompt cache restores from that
//! owner's entries: never another's), room made by dropping idle
//! caches (saved to the prompt cache first) and, when growing answers fill the pool, by
//! parking the youngest request until there is room again. No request fails for another's.

use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::token::LlamaToken;
use std::sync::atomic::Ordering;

use super::prompt_cache::{common_prefix, MIN_TOKENS};
use super::{images, Scheduler, Slot};
use crate::media::MediaChunk;
use crate::CacheOwner;

/// Free cells a parked request waits for beyond its own before it resumes, so that it does not
/// park again at the next token.
const RESUME_HEADROOM: usize = 64;

impl Slot {
    /// The tokens this slot's sequence holds in the KV cache: the first `n_past` of the prompt
    /// and the answer.
    pub(super) fn kv_tokens(&self, n: usize) -> Vec<LlamaToken> {
        self.prompt
            .iter()
            .chain(self.generated.iter())
            .take(n)
            .copied()
            .collect()
    }

    /// Cells this slot still takes for tokens it has to prefill (its prompt, or the tokens it
    /// replays after parking).
    fn promised(&self) -> usize {
        if self.parked {
            return 0;
        }
        if !self.replay.is_empty() {
            return self.replay.len().saturating_sub(self.prefilled);
        }
        self.prompt.len().saturating_sub(self.prefilled)
    }

    /// It decodes its next token in the coming step.
    pub(super) fn generating(&self) -> bool {
        !self.parked
            && !self.paused
            && self.replay.is_empty()
            && self.pending.is_some()
            && self.out.pending.is_empty()
    }
}

impl Scheduler<'_> {
    /// Cells the pool holds and has promised: requests' tokens, prompt tokens still to come,
    /// and free sequences' idle caches.
    fn cells_taken(&self) -> usize {
        let mut taken = 0;
        for (i, slot) in self.slots.iter().enumerate() {
            taken += match slot {
                Some(s) if s.parked => 0,
                Some(s) => s.n_past.max(0) as usize + s.promised(),
                None => self.cached[i].len(),
            };
        }
        taken
    }

    pub(super) fn free_cells(&self) -> usize {
        self.context.saturating_sub(self.cells_taken())
    }

    /// Cells that dropping free sequences' idle caches (but `keep`'s) would free.
    fn idle_cells(&self, keep: Option<usize>) -> usize {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_none() && Some(i) != keep)
            .map(|i| self.cached[i].len())
            .sum()
    }

    /// The next queued request could be admitted now ([`Self::room_for`], without dropping
    /// anything).
    pub(super) fn could_admit(&self) -> bool {
        let Some(next) = self.queue.front() else {
            return false;
        };
        // As `room_for` judges: requests parked for room go first.
        if self.slots.iter().all(Option::is_some) || self.next_parked().is_some() {
            return false;
        }
        let seq = self.pick_seq(next.owner, &next.tokens);
        // The sequence's idle cache makes room for it, reused (its owner's) or dropped.
        let need = next.tokens.len().saturating_sub(self.cached[seq].len());
        self.free_cells() + self.idle_cells(Some(seq)) + self.paused_cells() >= need
    }

    /// Cells that parking the paused requests would free: a paused answer does not hold the
    /// pool from the others.
    fn paused_cells(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|s| s.paused && !s.parked)
            .map(|s| s.n_past.max(0) as usize + s.promised())
            .sum()
    }

    /// Park the youngest paused request, if one holds cells. Whether one was.
    fn park_paused(&mut self) -> bool {
        let Some(i) = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .as_ref()
                    .is_some_and(|s| s.paused && !s.parked)
            })
            .max_by_key(|&i| self.slots[i].as_ref().map(|s| s.started))
        else {
            return false;
        };
        self.park(i);
        true
    }

    /// Make `need` free cells, never dropping `keep`'s idle cache: idle caches first, then
    /// paused requests parked. Nothing is dropped when even that would not do.
    fn make_free(&mut self, need: usize, keep: Option<usize>) -> bool {
        if self.free_cells() + self.idle_cells(keep) + self.paused_cells() < need {
            return false;
        }
        while !self.free_up(need, keep) {
            if !self.park_paused() {
                return false;
            }
        }
        true
    }

    /// The parked request to resume first: the oldest not paused (a paused one waits until
    /// it is resumed by its reader).
    fn next_parked(&self) -> Option<usize> {
        (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .as_ref()
                    .is_some_and(|s| s.parked && !s.paused)
            })
            .min_by_key(|&i| self.slots[i].as_ref().map(|s| s.started))
    }

    /// No request holds cells: every one is parked.
    fn all_parked(&self) -> bool {
        self.slots.iter().flatten().all(|s| s.parked)
    }

    /// A parked request could resume now ([`Self::resume_parked`]).
    pub(super) fn could_resume(&self) -> bool {
        let Some(i) = self.next_parked() else {
            return false;
        };
        let slot = self.slots[i].as_ref().expect("slot present");
        self.all_parked()
            || self.free_cells() + self.idle_cells(None) + self.paused_cells()
                >= self.resume_need(slot)
    }

    /// The free cells a parked request waits for.
    fn resume_need(&self, slot: &Slot) -> usize {
        (slot.park_len.max(slot.prompt.len()) + RESUME_HEADROOM).min(self.context)
    }

    /// Drop idle caches, least recently used first and never `keep`'s, until `need` cells are
    /// free. Whether they are.
    fn free_up(&mut self, need: usize, keep: Option<usize>) -> bool {
        loop {
            if self.free_cells() >= need {
                return true;
            }
            let Some(seq) = (0..self.slots.len())
                .filter(|&i| {
                    self.slots[i].is_none() && !self.cached[i].is_empty() && Some(i) != keep
                })
                .min_by_key(|&i| self.cached_used[i])
            else {
                return false;
            };
            let tokens = std::mem::take(&mut self.cached[seq]);
            self.save(seq, self.cached_owner[seq], &tokens);
            self.clear(seq);
        }
    }

    /// Keep sequence `seq`'s KV state (it holds `owner`'s `tokens`) in the prompt cache, if it
    /// is worth it.
    fn save(&mut self, seq: usize, owner: CacheOwner, tokens: &[LlamaToken]) {
        if tokens.len() < MIN_TOKENS || self.forgotten.contains(&owner) {
            return;
        }
        let flags = LlamaStateSeqFlags::empty();
        let disk = self.disk.as_ref().is_some_and(|d| !d.covers(owner, tokens));
        let ram = self.cache.wants(owner, tokens);
        if !ram && !disk {
            return;
        }
        let bytes = self.ctx.state_seq_get_size_ext(seq as i32, flags) as u64;
        let ram = ram && self.cache.fits(bytes);
        if !ram && !disk {
            return;
        }
        match self.ctx.state_seq_get(seq as i32, flags) {
            Ok(state) => {
                if let Some(d) = self.disk.as_mut() {
                    d.save(owner, tokens, &state, false);
                }
                if ram {
                    self.cache.insert(owner, tokens.to_vec(), state, bytes);
                }
                tracing::debug!(
                    tokens = tokens.len(),
                    bytes,
                    "sequence kept in the prompt cache"
                );
            }
            Err(e) => tracing::warn!(%e, "a sequence's KV state could not be saved"),
        }
        self.publish_cache();
    }

    /// The engine stops: the idle sequences (the latest conversations) go to disk too, and
    /// what is queued there is written before the engine is gone.
    pub(super) fn keep_on_disk(&mut self) {
        let Some(mut disk) = self.disk.take() else {
            return;
        };
        for seq in 0..self.slots.len() {
            let tokens = std::mem::take(&mut self.cached[seq]);
            let owner = self.cached_owner[seq];
            if tokens.len() < MIN_TOKENS
                || self.forgotten.contains(&owner)
                || disk.covers(owner, &tokens)
            {
                continue;
            }
            match self
                .ctx
                .state_seq_get(seq as i32, LlamaStateSeqFlags::empty())
            {
                Ok(state) => disk.save(owner, &tokens, &state, true),
                Err(e) => tracing::warn!(%e, "a sequence's KV state could not be saved"),
            }
        }
        disk.close();
    }

    /// How many of `owner`'s `tokens` the prompt cache (in memory or on disk) could restore.
    fn saved(&self, owner: CacheOwner, tokens: &[LlamaToken]) -> usize {
        let disk = self.disk.as_ref().map_or(0, |d| d.longest(owner, tokens));
        self.cache.longest(owner, tokens).max(disk)
    }

    /// Drop every cache entry of `owner`: its idle sequences, in memory and on disk; and keep
    /// none of theirs again.
    pub(super) fn forget(&mut self, owner: CacheOwner) {
        self.forgotten.insert(owner);
        for seq in 0..self.slots.len() {
            if self.slots[seq].is_none() && self.cached_owner[seq] == owner {
                self.cached[seq].clear();
                self.clear(seq);
                if let Some(d) = self.draft.as_mut() {
                    d.forget(seq);
                }
            }
        }
        self.cache.forget(owner);
        if let Some(d) = self.disk.as_mut() {
            d.forget(owner);
        }
        self.publish_cache();
        tracing::debug!(?owner, "a cache owner's entries dropped");
    }

    pub(super) fn publish_cache(&self) {
        let pool = &self.shared.pool;
        pool.cache_entries
            .store(self.cache.len() as u64, Ordering::Relaxed);
        pool.cache_bytes
            .store(self.cache.bytes(), Ordering::Relaxed);
        pool.kv_used
            .store(self.cells_taken() as u64, Ordering::Relaxed);
    }

    pub(super) fn clear(&mut self, seq: usize) {
        let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
    }

    /// The free sequence a request of `owner` for `tokens` goes to: the one whose idle cache
    /// (of `owner`'s) shares the longest prefix with it when that is a tenth of the prompt or
    /// more (llama-server's slot similarity), else the least recently used (an empty one
    /// first), so that a long idle cache is not given up for a shared template opening.
    pub(super) fn pick_seq(&self, owner: CacheOwner, tokens: &[LlamaToken]) -> usize {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_none())
            .max_by_key(|&i| {
                let common = if self.cached_owner[i] == owner {
                    common_prefix(&self.cached[i], tokens)
                } else {
                    0
                };
                let worth = common > 0 && common * 10 >= tokens.len();
                (
                    worth,
                    if worth { common } else { 0 },
                    std::cmp::Reverse(self.cached_used[i]),
                )
            })
            .expect("a free slot exists")
    }

    /// Whether a request for `tokens` fits in the pool now if it takes `seq`, idle caches
    /// dropped for it if need be. Requests parked for room go first.
    pub(super) fn room_for(&mut self, seq: usize, tokens: &[LlamaToken]) -> bool {
        if self.next_parked().is_some() {
            return false;
        }
        // The sequence's idle cache makes room for it, reused (its owner's) or dropped.
        let need = tokens.len().saturating_sub(self.cached[seq].len());
        self.make_free(need, Some(seq))
    }

    /// Give `seq` to a request of `owner` for `tokens` (with `media`): keep the longest prefix
    /// its idle cache (when `owner`'s) or `owner`'s prompt cache entries hold, drop the rest.
    /// How many tokens are kept; at least the last one is decoded again, for fresh logits.
    pub(super) fn take_seq(
        &mut self,
        seq: usize,
        owner: CacheOwner,
        tokens: &[LlamaToken],
        media: &[MediaChunk],
    ) -> usize {
        let cached = std::mem::take(&mut self.cached[seq]);
        let before = std::mem::replace(&mut self.cached_owner[seq], owner);
        if before != owner {
            // Another caller's: kept for them (when worth it), never read for this one; nor
            // the draft model's copy of it.
            self.save(seq, before, &cached);
            self.clear(seq);
            if let Some(d) = self.draft.as_mut() {
                d.forget(seq);
            }
            let most = tokens.len().saturating_sub(1);
            if self.saved(owner, tokens).min(most) > MIN_TOKENS {
                return self.restore(seq, owner, tokens, most, media);
            }
            return 0;
        }
        let most = tokens.len().saturating_sub(1);
        let idle = common_prefix(&cached, tokens).min(most);
        let saved = self.saved(owner, tokens).min(most);
        if cached.len() > idle + MIN_TOKENS || saved > idle + MIN_TOKENS {
            // Its tail (or all of it) would be lost.
            self.save(seq, owner, &cached);
        }
        if saved > idle + MIN_TOKENS {
            self.clear(seq);
            return self.restore(seq, owner, tokens, most, media);
        }
        self.trim(seq, idle, media)
    }

    /// Load into `seq` `owner`'s prompt cache entry sharing the longest prefix with `tokens`
    /// (with `media`), cut to at most `most` of them. How many tokens `seq` holds then.
    fn restore(
        &mut self,
        seq: usize,
        owner: CacheOwner,
        tokens: &[LlamaToken],
        most: usize,
        media: &[MediaChunk],
    ) -> usize {
        let on_disk = self.disk.as_ref().map_or(0, |d| d.longest(owner, tokens));
        if on_disk > self.cache.longest(owner, tokens) {
            if let Some((state, held)) = self.disk.as_mut().and_then(|d| d.load(owner, tokens)) {
                let bytes = state.byte_len() as u64;
                if let Err(e) = self.ctx.state_seq_set(&state, seq as i32) {
                    // Whole and checked, yet this pool does not take it (a smaller context
                    // now): it never will, so it goes.
                    tracing::debug!(%e, bytes, "a sequence from disk did not load");
                    if let Some(d) = self.disk.as_mut() {
                        d.reject(owner, &held);
                    }
                    self.clear(seq);
                    return 0;
                }
                let common = common_prefix(&held, tokens);
                if self.cache.enabled() {
                    // In memory from now on.
                    self.cache.insert(owner, held, state, bytes);
                }
                tracing::debug!(common, "prompt read from the prompt cache on disk");
                return self.restored(seq, common.min(most), media);
            }
        }
        let Some((state, common)) = self.cache.best(owner, tokens) else {
            return 0;
        };
        let held = state.byte_len();
        if let Err(e) = self.ctx.state_seq_set(state, seq as i32) {
            tracing::debug!(%e, bytes = held, "a cached sequence did not fit the pool now");
            self.clear(seq);
            return 0;
        }
        self.restored(seq, common.min(most), media)
    }

    /// `seq` holds a restored sequence: cut it to `keep` tokens, and count them.
    fn restored(&mut self, seq: usize, keep: usize, media: &[MediaChunk]) -> usize {
        let kept = self.trim(seq, keep, media);
        self.shared
            .pool
            .cache_restored
            .fetch_add(kept as u64, Ordering::Relaxed);
        tracing::debug!(kept, "prompt restored from the prompt cache");
        kept
    }

    /// Cut `seq` back to its first `keep` tokens (of a prompt with `media`, which places
    /// them), or to the start of an image `keep` would split; how many it keeps: 0 when it
    /// cannot be cut there (a recurrent model) or the cut left less than the sliding window
    /// the next token attends to.
    pub(super) fn trim(&mut self, seq: usize, keep: usize, media: &[MediaChunk]) -> usize {
        // Never into an image: it is evaluated whole.
        let keep = images::floor(media, keep);
        if keep == 0 {
            self.clear(seq);
            return 0;
        }
        let at = images::position(media, keep);
        let held = (self.ctx.kv_cache_seq_pos_max(seq as i32) + 1).max(0) as usize;
        if at < held
            && self
                .ctx
                .kv_cache_seq_rm(seq as i32, Some(at as u32), None)
                .is_err()
        {
            self.clear(seq);
            return 0;
        }
        if self.n_swa > 0 {
            let first = self.ctx.kv_cache_seq_pos_min(seq as i32);
            if first > (at as i32 - self.n_swa as i32).max(0) {
                self.clear(seq);
                return 0;
            }
        }
        keep
    }

    /// Before a step: parked requests back when there is room for them, then room for every
    /// generating request's next token, by dropping idle caches and then by parking the
    /// youngest requests (never the oldest: it always gets on).
    pub(super) fn make_room(&mut self) {
        self.resume_parked();
        let growing = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.generating())
            .count();
        if growing == 0 || self.free_up(growing, None) {
            return;
        }
        loop {
            let running: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].as_ref().is_some_and(|s| !s.parked))
                .collect();
            if running.len() < 2 {
                return;
            }
            let growing = running
                .iter()
                .filter(|&&i| self.slots[i].as_ref().is_some_and(Slot::generating))
                .count();
            if self.free_cells() >= growing {
                return;
            }
            // A paused request first, else the youngest.
            let youngest = *running
                .iter()
                .max_by_key(|&&i| self.slots[i].as_ref().map(|s| (s.paused, s.started)))
                .expect("two requests run");
            self.park(youngest);
        }
    }

    /// Set request `i` aside: its sequence to the prompt cache, its cells freed.
    fn park(&mut self, i: usize) {
        let slot = self.slots[i].as_ref().expect("slot present");
        let (seq, n, owner) = (slot.seq as usize, slot.n_past.max(0) as usize, slot.owner);
        let tokens = slot.kv_tokens(n);
        self.save(seq, owner, &tokens);
        self.clear(seq);
        let slot = self.slots[i].as_mut().expect("slot present");
        tracing::debug!(id = %slot.id, tokens = n, "the KV pool is full: request parked");
        slot.parked = true;
        slot.park_len = if slot.replay.is_empty() {
            n
        } else {
            slot.replay.len()
        };
        slot.replay.clear();
        slot.n_past = 0;
        slot.prefilled = 0;
        slot.batch_idx = None;
        self.shared.pool.parked.fetch_add(1, Ordering::Relaxed);
    }

    /// Bring parked requests back, oldest first, while there is room for them: their sequence
    /// from the prompt cache where it is still there, the rest decoded again.
    fn resume_parked(&mut self) {
        loop {
            let Some(i) = self.next_parked() else {
                return;
            };
            let need = self.resume_need(self.slots[i].as_ref().expect("slot present"));
            if !self.all_parked() && !self.make_free(need, None) {
                return;
            }
            // Alone, it has the whole pool.
            self.free_up(need, None);
            let slot = self.slots[i].as_mut().expect("slot present");
            let (seq, owner) = (slot.seq as usize, slot.owner);
            let target = slot.kv_tokens(slot.park_len);
            let answering = slot.pending.is_some();
            let most = if answering {
                target.len()
            } else {
                target.len().min(slot.prompt.len().saturating_sub(1))
            };
            let media = std::mem::take(&mut slot.media);
            let kept = self.restore(seq, owner, &target, most, &media);
            let slot = self.slots[i].as_mut().expect("slot present");
            slot.media = media;
            slot.parked = false;
            slot.n_past = kept as i32;
            if !answering {
                slot.prefilled = kept;
            } else if kept == target.len() {
                slot.prefilled = slot.prompt.len();
            } else {
                slot.replay = target;
                slot.prefilled = kept;
            }
            tracing::debug!(id = %slot.id, kept, "parked request resumed");
        }
    }
}
