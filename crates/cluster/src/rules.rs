//! What a connection is admitted by ([`Rules`]): the passcode's hash and key, and whether
//! plain-text TealeNet peers are taken. [`crate::me::Me`] holds the rules in force now.

use std::sync::Arc;

use crate::config::passcode_hash;
use crate::secure;

/// What a connection is admitted by: the passcode (its hash for TealeNet peers, its key for
/// Hearth peers) and whether plain-text TealeNet peers are taken.
#[derive(Debug)]
pub struct Rules {
    pub passcode_hash: Option<String>,
    pub(crate) keys: Arc<secure::Keys>,
    pub compat: bool,
}

impl Rules {
    /// Slow: the passcode's key derivation.
    pub(crate) fn new(
        passcode: Option<&str>,
        compat: bool,
        identity: &Arc<hearth_auth::identity::Identity>,
    ) -> Self {
        Self {
            passcode_hash: passcode.map(passcode_hash),
            keys: Arc::new(secure::Keys::new(passcode, identity.clone())),
            compat,
        }
    }
}
