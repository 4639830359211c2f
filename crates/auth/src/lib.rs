//! Who may use a node: its own Ed25519 identity kept in the OS keyring or a 0600 file
//! ([`identity`]), the public keys of the signed-challenge door's clients and how their
//! signatures are checked ([`clients`]), the limit on failed authentications ([`limiter`]), and
//! small secrets kept for others by the identity's rules ([`secrets`]).
//!
//! Architecture invariant: `hearth-auth` knows keys and signatures only. It stores no rows
//! (API keys and client keys live in `hearth-store`), speaks no protocol and knows no HTTP:
//! the doors that check a key are in `hearth-server`.

pub mod clients;
pub mod identity;
pub mod limiter;
pub mod secrets;
