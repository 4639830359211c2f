//! What the batch door (`crate::batch`) keeps between messages and sockets: the defaults for
//! `generation_config` keys a message leaves out, and the continuation cache ([`cache`]). Held
//! here, apart from the door, because [`AppState`](super::AppState) holds it and the door
//! reads `AppState`.

pub(crate) mod cache;

use std::time::Duration;

use hearth_protocol::batch::BatchDefaults;

use cache::ContinuationCache;

/// Continuation cache bounds: entries, age, and bytes held (token ids + text).
const CACHE_CAPACITY: usize = 256;
const CACHE_TTL: Duration = Duration::from_secs(60 * 60);
const CACHE_MAX_BYTES: usize = 256 << 20;

/// What the batch door keeps between messages and sockets.
#[derive(Debug)]
pub struct BatchDoor {
    /// `generation_config` values for keys a message leaves out.
    pub(crate) defaults: BatchDefaults,
    pub(crate) cache: ContinuationCache,
}

impl Default for BatchDoor {
    fn default() -> Self {
        Self::new(BatchDefaults::default())
    }
}

impl BatchDoor {
    pub(crate) fn new(defaults: BatchDefaults) -> Self {
        Self {
            defaults,
            cache: ContinuationCache::new(CACHE_CAPACITY, CACHE_TTL, CACHE_MAX_BYTES),
        }
    }
}
