//! Who may use the node: this node's own Ed25519 identity ([`identity`]), the public keys of
//! the signed-challenge door's clients and how their signatures are checked ([`clients`]), and
//! the limit on failed authentications ([`limiter`]). API keys for LAN clients are rows of
//! `hearth.db` (`crate::store`), checked at the door by `server::security`.

pub mod clients;
pub mod identity;
pub mod limiter;
