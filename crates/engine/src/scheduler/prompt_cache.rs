//! The prompt cache that outlives its slot: KV state of sequences the pool gave up (a slot
//! reused by an unrelated prompt, an idle cache dropped for room, a request parked), kept in
//! host memory with the tokens it holds, within a byte limit, least recently used out first.
//! A new prompt restores the entry sharing the longest prefix with it and prefills the rest.

use llama_cpp_2::token::LlamaToken;

/// Entries shorter than this are not worth a copy: prefilling them again costs as little.
pub(super) const MIN_TOKENS: usize = 64;

/// One saved sequence: the tokens whose KV `state` holds.
struct Entry<S> {
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

    /// Whether saving `tokens` would add nothing: an entry holds them already (or more).
    pub(super) fn covers(&self, tokens: &[LlamaToken]) -> bool {
        self.entries
            .iter()
            .any(|e| e.tokens.len() >= tokens.len() && e.tokens.starts_with(tokens))
    }

    /// Whether saving `tokens` is worth a copy: the cache is on, they are long enough, and no
    /// entry holds them already.
    pub(super) fn wants(&self, tokens: &[LlamaToken]) -> bool {
        self.enabled() && tokens.len() >= MIN_TOKENS && !self.covers(tokens)
    }

    /// Whether a state of `bytes` fits in the cache at all.
    pub(super) fn fits(&self, bytes: u64) -> bool {
        bytes <= self.limit
    }

    /// Keep `state`, the KV of `tokens`. Entries it extends go (it holds what they hold); the
    /// least recently used go until it fits.
    pub(super) fn insert(&mut self, tokens: Vec<LlamaToken>, state: S, bytes: u64) {
        if bytes > self.limit || self.covers(&tokens) {
            return;
        }
        let mut freed = 0;
        self.entries.retain(|e| {
            let superseded = tokens.starts_with(&e.tokens);
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
            tokens,
            state,
            bytes,
            used: self.clock,
        });
    }

    /// The entry sharing the longest prefix with `tokens` (the most recent among equals), and
    /// how many tokens it shares; marked used.
    pub(super) fn best(&mut self, tokens: &[LlamaToken]) -> Option<(&S, usize)> {
        let (i, common) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, tokens)))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(i, n)| (n, self.entries[i].used))?;
        self.clock += 1;
        let e = &mut self.entries[i];
        e.used = self.clock;
        Some((&e.state, common))
    }

    /// How many tokens the best entry for `tokens` shares with it, without marking it used.
    pub(super) fn longest(&self, tokens: &[LlamaToken]) -> usize {
        self.entries
            .iter()
            .map(|e| common_prefix(&e.tokens, tokens))
            .max()
            .unwrap_or(0)
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
        cache.insert(toks(0..100), "a", 100);
        cache.insert(toks(1000..1100), "b", 100);
        cache.insert(toks(2000..2100), "c", 100);
        assert_eq!(cache.len(), 3);
        // "a" is used, so "b" is the least recently used when "d" needs room.
        let mut prompt = toks(0..80);
        prompt.extend(toks(5000..5010));
        assert_eq!(cache.best(&prompt).map(|(s, n)| (*s, n)), Some(("a", 80)));
        cache.insert(toks(3000..3100), "d", 100);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.bytes(), 300);
        assert_eq!(cache.longest(&toks(1000..1100)), 0);
        assert_eq!(cache.longest(&toks(0..100)), 100);
        // Nothing shared: nothing to restore.
        assert!(cache.best(&toks(9000..9100)).is_none());
    }

    #[test]
    fn an_entry_extending_another_replaces_it_and_a_covered_one_is_not_kept() {
        let mut cache = PromptCache::new(1000);
        cache.insert(toks(0..100), 1, 100);
        cache.insert(toks(0..200), 2, 200);
        assert_eq!((cache.len(), cache.bytes()), (1, 200));
        // Already held by the longer entry.
        assert!(!cache.wants(&toks(0..150)));
        cache.insert(toks(0..150), 3, 150);
        assert_eq!((cache.len(), cache.bytes()), (1, 200));
        // Too short, or larger than the whole cache: not kept.
        assert!(!cache.wants(&toks(500..510)));
        assert!(cache.wants(&toks(500..700)) && !cache.fits(2000));
        cache.insert(toks(500..700), 4, 2000);
        assert_eq!((cache.len(), cache.bytes()), (1, 200));
        // A limit of 0 turns it off.
        assert!(!PromptCache::<()>::new(0).wants(&toks(0..100)));
    }
}
