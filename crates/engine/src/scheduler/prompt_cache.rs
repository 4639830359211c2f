//! The prompt cache that outlives its slot: KV state of sequences the pool gave up (a slot
//! reused by an unrelated prompt, an idle cache dropped for room, a request parked), kept in
//! host memory with the tokens it holds, within a byte limit, least recently used out first.
//! A new prompt restores the entry of its own owner sharing the longest prefix with it and
//! prefills the rest: another owner's entries are never read for it, nor replaced by its own.

use llama_cpp_2::token::LlamaToken;

use crate::CacheOwner;

/// Entries shorter than this are not worth a copy: prefilling them again costs as little.
pub(super) const MIN_TOKENS: usize = 64;

/// One saved sequence: the tokens whose KV `state` holds, and whose they are.
struct Entry<S> {
    owner: CacheOwner,
    tokens: Vec<LlamaToken>,
    state: S,
    bytes: u64,
    used: u64,
}

/// Saved sequences within `limit` bytes.
pub(super) struct PromptCache<S> {
    entries: Vec<Entry<S>>,
    limit: u64,
    bytes: u64,
    clock: u64,
}

/// How many leading tokens two sequences share.
pub(super) fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<S> PromptCache<S> {
    pub(super) fn new(limit: u64) -> Self {
        Self {
            entries: Vec::new(),
            limit,
            bytes: 0,
            clock: 0,
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.limit > 0
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    fn owned(&self, owner: CacheOwner) -> impl Iterator<Item = &Entry<S>> {
        self.entries.iter().filter(move |e| e.owner == owner)
    }

    /// Whether saving `tokens` would add nothing: an entry of `owner` holds them already (or
    /// more).
    pub(super) fn covers(&self, owner: CacheOwner, tokens: &[LlamaToken]) -> bool {
        self.owned(owner)
            .any(|e| e.tokens.len() >= tokens.len() && e.tokens.starts_with(tokens))
    }

    /// Whether saving `owner`'s `tokens` is worth a copy: the cache is on, they are long
    /// enough, and no entry of theirs holds them already.
    pub(super) fn wants(&self, owner: CacheOwner, tokens: &[LlamaToken]) -> bool {
        self.enabled() && tokens.len() >= MIN_TOKENS && !self.covers(owner, tokens)
    }

    /// Whether a state of `bytes` fits in the cache at all.
    pub(super) fn fits(&self, bytes: u64) -> bool {
        bytes <= self.limit
    }

    /// Keep `state`, the KV of `owner`'s `tokens`. Their entries it extends go (it holds what
    /// they hold); the least recently used go until it fits.
    pub(super) fn insert(
        &mut self,
        owner: CacheOwner,
        tokens: Vec<LlamaToken>,
        state: S,
        bytes: u64,
    ) {
        if bytes > self.limit || self.covers(owner, &tokens) {
            return;
        }
        let mut freed = 0;
        self.entries.retain(|e| {
            let superseded = e.owner == owner && tokens.starts_with(&e.tokens);
            if superseded {
                freed += e.bytes;
            }
            !superseded
        });
        self.bytes -= freed;
        while self.bytes + bytes > self.limit {
            let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used) else {
                break;
            };
            self.bytes -= self.entries.swap_remove(oldest).bytes;
        }
        self.clock += 1;
        self.bytes += bytes;
        self.entries.push(Entry {
            owner,
            tokens,
            state,
            bytes,
            used: self.clock,
        });
    }

    /// The entry of `owner` sharing the longest prefix with `tokens` (the most recent among
    /// equals), and how many tokens it shares; marked used.
    pub(super) fn best(&mut self, owner: CacheOwner, tokens: &[LlamaToken]) -> Option<(&S, usize)> {
        let (i, common) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.owner == owner)
            .map(|(i, e)| (i, common_prefix(&e.tokens, tokens)))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(i, n)| (n, self.entries[i].used))?;
        self.clock += 1;
        let e = &mut self.entries[i];
        e.used = self.clock;
        Some((&e.state, common))
    }

    /// How many tokens `owner`'s best entry for `tokens` shares with it, without marking it
    /// used.
    pub(super) fn longest(&self, owner: CacheOwner, tokens: &[LlamaToken]) -> usize {
        self.owned(owner)
            .map(|e| common_prefix(&e.tokens, tokens))
            .max()
            .unwrap_or(0)
    }

    /// Drop every entry of `owner`.
    pub(super) fn forget(&mut self, owner: CacheOwner) {
        let mut freed = 0;
        self.entries.retain(|e| {
            let theirs = e.owner == owner;
            if theirs {
                freed += e.bytes;
            }
            !theirs
        });
        self.bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(range: std::ops::Range<i32>) -> Vec<LlamaToken> {
        range.map(LlamaToken::new).collect()
    }

    #[test]
    fn the_longest_shared_prefix_wins_and_the_least_recently_used_goes_first() {
        let mut cache = PromptCache::new(300);
        let o = CacheOwner::NODE;
        cache.insert(o, toks(0..100), "a", 100);
        cache.insert(o, toks(1000..1100), "b", 100);
        cache.insert(o, toks(2000..2100), "c", 100);
        assert_eq!(cache.len(), 3);
        // "a" is used, so "b" is the least recently used when "d" needs room.
        let mut prompt = toks(0..80);
        prompt.extend(toks(5000..5010));
        assert_eq!(
            cache.best(o, &prompt).map(|(s, n)| (*s, n)),
            Some(("a", 80))
        );
        cache.insert(o, toks(3000..3100), "d", 100);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.bytes(), 300);
        assert_eq!(cache.longest(o, &toks(1000..1100)), 0);
        assert_eq!(cache.longest(o, &toks(0..100)), 100);
        // Nothing shared: nothing to restore.
        assert!(cache.best(o, &toks(9000..9100)).is_none());
    }

    #[test]
    fn an_entry_extending_another_replaces_it_and_a_covered_one_is_not_kept() {
        let mut cache = PromptCache::new(1000);
        let o = CacheOwner::NODE;
        cache.insert(o, toks(0..100), 1, 100);
        cache.insert(o, toks(0..200), 2, 200);
        assert_eq!((cache.len(), cache.bytes()), (1, 200));
        // Already held by the longer entry.
        assert!(!cache.wants(o, &toks(0..150)));
        cache.insert(o, toks(0..150), 3, 150);
        assert_eq!((cache.len(), cache.bytes()), (1, 200));
        // Too short, or larger than the whole cache: not kept.
        assert!(!cache.wants(o, &toks(500..510)));
        assert!(cache.wants(o, &toks(500..700)) && !cache.fits(2000));
        cache.insert(o, toks(500..700), 4, 2000);
        assert_eq!((cache.len(), cache.bytes()), (1, 200));
        // A limit of 0 turns it off.
        assert!(!PromptCache::<()>::new(0).wants(o, &toks(0..100)));
    }

    #[test]
    fn an_owner_reads_and_replaces_only_its_own_entries_and_forgetting_drops_them() {
        let (a, b) = (CacheOwner::caller("key a"), CacheOwner::caller("key b"));
        let mut cache = PromptCache::new(1000);
        cache.insert(a, toks(0..100), "a", 100);
        // The same prompt from b: neither read nor covered by a's entry.
        assert_eq!(cache.longest(b, &toks(0..100)), 0);
        assert!(cache.best(b, &toks(0..100)).is_none());
        assert!(cache.wants(b, &toks(0..100)));
        // b's longer copy does not replace a's shorter one.
        cache.insert(b, toks(0..200), "b", 200);
        assert_eq!((cache.len(), cache.bytes()), (2, 300));
        assert_eq!(
            cache.best(a, &toks(0..150)).map(|(s, n)| (*s, n)),
            Some(("a", 100))
        );
        assert_eq!(
            cache.best(b, &toks(0..150)).map(|(s, n)| (*s, n)),
            Some(("b", 150))
        );
        cache.forget(b);
        assert_eq!((cache.len(), cache.bytes()), (1, 100));
        assert_eq!(cache.longest(b, &toks(0..200)), 0);
        assert_eq!(cache.longest(a, &toks(0..200)), 100);
    }
}
