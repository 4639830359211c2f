//! A model split across machines with llama.cpp's RPC backend (DESIGN.md §5): the process that
//! serves this machine's CPU to a peer's split model ([`rpc_serve`]).
//!
//! ggml's RPC server has no authentication and a lost one aborts its client, so each side runs
//! in a process of its own and the server's port never accepts any connection but the tunnel's.

pub mod rpc_serve;
