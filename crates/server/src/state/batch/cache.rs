//! The batch door's continuation cache (NOTES.md "batch-ws"): unfinished batches by their
//! caller and ordered request ids, each prompt's token ids (prompt + generated) and text, so
//! that the same caller sending the same ids again continues where they stopped. Shared by all
//! sockets of a caller, bounded in entries and bytes, entries expire an hour after they were
//! stored.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hearth_protocol::ModelId;

/// Where one prompt's generation stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Saved {
    /// The prompt's tokens and every token generated for it so far, as the engine saw them.
    pub(crate) tokens: Vec<u32>,
    /// The original prompt followed by all text generated so far.
    pub(crate) text: String,
    /// It ended at end-of-sequence: there is nothing to continue.
    pub(crate) eos: bool,
}

impl Saved {
    fn bytes(&self) -> usize {
        self.tokens.len() * std::mem::size_of::<u32>() + self.text.len()
    }
}

/// Who stored a batch and its ordered request ids (a `Vec`, so no joining can make two
/// different id lists collide). Clients number their requests alike (0, 1, 2...): the caller
/// keeps one client's prompts and answers from another's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey {
    /// The API key's id, or the owner (see `batch::caller`).
    pub(crate) caller: String,
    pub(crate) ids: Vec<String>,
}

impl CacheKey {
    fn bytes(&self) -> usize {
        self.caller.len() + self.ids.iter().map(String::len).sum::<usize>()
    }
}

#[derive(Debug)]
struct CacheEntry {
    /// Token ids only mean something to the model that made them.
    model: ModelId,
    prompts: HashMap<String, Saved>,
    stored: Instant,
    bytes: usize,
}

/// Unfinished batches by their [`CacheKey`]. Bounded in entries and bytes (the oldest go
/// first); entries expire `ttl` after they were stored.
#[derive(Debug)]
pub(crate) struct ContinuationCache {
    entries: Mutex<HashMap<CacheKey, CacheEntry>>,
    capacity: usize,
    ttl: Duration,
    max_bytes: usize,
}

impl ContinuationCache {
    pub(crate) fn new(capacity: usize, ttl: Duration, max_bytes: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            ttl,
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<CacheKey, CacheEntry>> {
        // The map stays consistent even if a holder panicked: every change is one call.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The saved prompts for `key`, if they were made by `model` and have not expired. The
    /// entry stays (a batch cut short by a disconnect can be continued again).
    pub(crate) fn get(
        &self,
        key: &CacheKey,
        model: &ModelId,
        now: Instant,
    ) -> Option<HashMap<String, Saved>> {
        let mut entries = self.lock();
        let usable = {
            let entry = entries.get(key)?;
            now.saturating_duration_since(entry.stored) < self.ttl && entry.model == *model
        };
        if usable {
            entries.get(key).map(|e| e.prompts.clone())
        } else {
            entries.remove(key);
            None
        }
    }

    /// Store (or replace) `key`, evicting expired entries and then the oldest ones as needed.
    pub(crate) fn put(
        &self,
        key: CacheKey,
        model: ModelId,
        prompts: HashMap<String, Saved>,
        now: Instant,
    ) {
        let bytes: usize = prompts.values().map(Saved::bytes).sum::<usize>() + key.bytes();
        let mut entries = self.lock();
        entries.remove(&key);
        if bytes > self.max_bytes {
            return;
        }
        let ttl = self.ttl;
        entries.retain(|_, e| now.saturating_duration_since(e.stored) < ttl);
        let mut total: usize = entries.values().map(|e| e.bytes).sum();
        while !entries.is_empty()
            && (entries.len() >= self.capacity || total + bytes > self.max_bytes)
        {
            let oldest = entries
                .iter()
                .min_by_key(|(_, e)| e.stored)
                .map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { break };
            if let Some(e) = entries.remove(&oldest) {
                total = total.saturating_sub(e.bytes);
            }
        }
        entries.insert(
            key,
            CacheEntry {
                model,
                prompts,
                stored: now,
                bytes,
            },
        );
    }

    pub(crate) fn remove(&self, key: &CacheKey) {
        self.lock().remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ids: &[&str]) -> CacheKey {
        key_of("owner", ids)
    }

    fn key_of(caller: &str, ids: &[&str]) -> CacheKey {
        CacheKey {
            caller: caller.to_owned(),
            ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn model(name: &str) -> ModelId {
        ModelId(name.to_owned())
    }

    fn saved(tokens: &[u32], text: &str, eos: bool) -> Saved {
        Saved {
            tokens: tokens.to_vec(),
            text: text.to_owned(),
            eos,
        }
    }

    fn prompts(entries: &[(&str, Saved)]) -> HashMap<String, Saved> {
        entries
            .iter()
            .map(|(id, s)| ((*id).to_owned(), s.clone()))
            .collect()
    }

    fn cache() -> ContinuationCache {
        ContinuationCache::new(3, Duration::from_secs(3600), 1 << 20)
    }

    #[test]
    fn stores_and_returns_by_ordered_ids() {
        let c = cache();
        let t0 = Instant::now();
        let p = prompts(&[
            ("a", saved(&[1, 2, 3], "hi there", false)),
            ("b", saved(&[1, 4], "yo", true)),
        ]);
        c.put(key(&["a", "b"]), model("m"), p.clone(), t0);
        assert_eq!(c.get(&key(&["a", "b"]), &model("m"), t0), Some(p.clone()));
        // Another order is another key.
        assert_eq!(c.get(&key(&["b", "a"]), &model("m"), t0), None);
        // Ids are not joined into one string, so these do not collide.
        assert_eq!(c.get(&key(&["ab"]), &model("m"), t0), None);
        c.put(key(&["a", "bc"]), model("m"), p.clone(), t0);
        assert_eq!(c.get(&key(&["ab", "c"]), &model("m"), t0), None);
        // Reading leaves the entry in place.
        assert_eq!(c.get(&key(&["a", "b"]), &model("m"), t0), Some(p.clone()));
        // Another caller with the same ids sees nothing, and keeps its own apart.
        assert_eq!(c.get(&key_of("key 2", &["a", "b"]), &model("m"), t0), None);
        let theirs = prompts(&[("a", saved(&[9], "theirs", false))]);
        c.put(key_of("key 2", &["a", "b"]), model("m"), theirs.clone(), t0);
        assert_eq!(c.get(&key(&["a", "b"]), &model("m"), t0), Some(p));
        assert_eq!(
            c.get(&key_of("key 2", &["a", "b"]), &model("m"), t0),
            Some(theirs)
        );
    }

    #[test]
    fn another_model_misses_and_drops_the_entry() {
        let c = cache();
        let t0 = Instant::now();
        c.put(
            key(&["a"]),
            model("m1"),
            prompts(&[("a", saved(&[1], "x", false))]),
            t0,
        );
        assert_eq!(c.get(&key(&["a"]), &model("m2"), t0), None);
        assert_eq!(c.len(), 0);
        assert_eq!(c.get(&key(&["a"]), &model("m1"), t0), None);
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let c = cache();
        let t0 = Instant::now();
        c.put(
            key(&["a"]),
            model("m"),
            prompts(&[("a", saved(&[1], "x", false))]),
            t0,
        );
        let almost = t0 + Duration::from_secs(3599);
        assert!(c.get(&key(&["a"]), &model("m"), almost).is_some());
        let later = t0 + Duration::from_secs(3600);
        assert!(c.get(&key(&["a"]), &model("m"), later).is_none());
        assert_eq!(c.len(), 0);
        // Expired entries are also swept when something new is stored.
        c.put(
            key(&["b"]),
            model("m"),
            prompts(&[("b", saved(&[1], "x", false))]),
            t0,
        );
        c.put(
            key(&["c"]),
            model("m"),
            prompts(&[("c", saved(&[1], "x", false))]),
            later + Duration::from_secs(1),
        );
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn the_oldest_entry_goes_when_full() {
        let c = cache();
        let t0 = Instant::now();
        for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            c.put(
                key(&[id]),
                model("m"),
                prompts(&[(id, saved(&[1], "x", false))]),
                t0 + Duration::from_secs(i as u64),
            );
        }
        let now = t0 + Duration::from_secs(10);
        assert_eq!(c.len(), 3);
        assert!(c.get(&key(&["a"]), &model("m"), now).is_none());
        for id in ["b", "c", "d"] {
            assert!(c.get(&key(&[id]), &model("m"), now).is_some(), "{id}");
        }
        // Replacing an entry does not evict another.
        c.put(
            key(&["c"]),
            model("m"),
            prompts(&[("c", saved(&[1, 2], "xy", false))]),
            now,
        );
        assert_eq!(c.len(), 3);
        assert_eq!(
            c.get(&key(&["c"]), &model("m"), now).unwrap()["c"].tokens,
            vec![1, 2]
        );
    }

    #[test]
    fn the_byte_budget_evicts_and_refuses_oversized_entries() {
        let c = ContinuationCache::new(100, Duration::from_secs(3600), 1000);
        let t0 = Instant::now();
        let big = "x".repeat(600);
        c.put(
            key(&["a"]),
            model("m"),
            prompts(&[("a", saved(&[], &big, false))]),
            t0,
        );
        c.put(
            key(&["b"]),
            model("m"),
            prompts(&[("b", saved(&[], &big, false))]),
            t0 + Duration::from_secs(1),
        );
        assert_eq!(c.len(), 1, "two 600-byte entries do not fit in 1000 bytes");
        assert!(c.get(&key(&["b"]), &model("m"), t0).is_some());
        let huge = "x".repeat(2000);
        c.put(
            key(&["b"]),
            model("m"),
            prompts(&[("b", saved(&[], &huge, false))]),
            t0,
        );
        assert_eq!(
            c.len(),
            0,
            "an entry over the whole budget replaces nothing and is not kept"
        );
    }

    #[test]
    fn remove_forgets_a_key() {
        let c = cache();
        let t0 = Instant::now();
        c.put(
            key(&["a"]),
            model("m"),
            prompts(&[("a", saved(&[1], "x", false))]),
            t0,
        );
        c.remove(&key(&["a"]));
        assert_eq!(c.len(), 0);
        c.remove(&key(&["zzz"]));
    }
}
