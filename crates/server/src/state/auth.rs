//! What the signed-challenge door (`crate::auth`) shares across connections: how long a
//! connection may stay unauthenticated, and the limit on failed authentications. Held here,
//! apart from the door, because [`AppState`](super::AppState) holds it and the door reads
//! `AppState`.

use std::sync::Mutex;
use std::time::Duration;

use hearth_auth::limiter::RateLimiter;

/// How long a connection may stay unauthenticated.
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// What the door shares across connections.
#[derive(Debug)]
pub struct AuthState {
    timeout: Duration,
    limiter: Mutex<RateLimiter>,
}

impl Default for AuthState {
    fn default() -> Self {
        Self::new(DEFAULT_AUTH_TIMEOUT)
    }
}

impl AuthState {
    /// `timeout`: how long a connection may stay unauthenticated (30 s; tests shorten it).
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            limiter: Mutex::new(RateLimiter::default()),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn limiter(&self) -> std::sync::MutexGuard<'_, RateLimiter> {
        // A panic while holding the lock leaves consistent data: keep using it.
        self.limiter.lock().unwrap_or_else(|p| p.into_inner())
    }
}
