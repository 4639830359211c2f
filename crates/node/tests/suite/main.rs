//! The node's black-box tests, one program: each module starts real nodes (the real default
//! model, real TCP, real peers) and checks one part from outside. One binary instead of one per
//! file: the shared helpers compile once and the suite links once (about 4 GB less on disk and
//! minutes less of a cold `make test`). Run one part with `cargo test --workspace --test suite
//! -- MODULE::`.

mod common;

mod agent_doors;
mod agents;
mod api;
mod architecture;
mod audio;
mod auth_ws;
mod bad_input;
mod batch_ws;
mod cache_privacy;
mod cluster;
mod cluster_api;
mod cluster_dial;
mod cluster_generate;
mod cluster_lan;
mod cluster_nodes;
mod crash;
mod csrf;
mod data_dir;
mod documents;
mod downloads;
mod flash_attention;
mod generate_ws;
mod gpu;
mod hub_faults;
mod image_urls;
mod images;
mod images_cluster;
mod interop;
mod kv_pool;
mod lan;
mod lifecycle;
mod load;
mod long_context;
mod m_rope;
mod mcp;
mod mcp_loop;
mod models;
mod module_circles;
mod ollama;
mod openai;
mod placement;
mod python_client;
mod reference;
mod rerank;
mod route;
mod rpc_serve;
mod search;
mod sharing;
mod slow_clients;
mod small_defects;
mod speculation;
mod split;
mod thermal;
mod tools;
mod transfers;
mod worker;
mod worker_protocol;
