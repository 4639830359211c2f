//! Hearth's lowest layer: what every part of a node shares and nothing of Hearth's own sits
//! under (reconnect delays, the data dir and its lock, connection limits, thermal levels).
//!
//! Architecture invariant: `hearth-base` depends on no other Hearth crate and knows no
//! protocol, HTTP route, model or engine; a type lands here only when two parts above need it.

pub mod backoff;
pub mod connections;
pub mod data_dir;
pub mod thermal;
