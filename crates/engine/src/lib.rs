//! # hearth-engine
//!
//! Runs GGUF models with llama.cpp (the only crate that names `llama-cpp-2`; no llama type
//! appears in this crate's public API). One engine thread per loaded model owns the backend's
//! model, context and batch and runs continuous batching over `slots` sequences; the rest of
//! the program talks to it through an [`Engine`] handle.
//!
//! ## Layout
//! - [`handle`]: [`Engine`] (start, model state, submit, stats, shutdown), [`Generation`],
//!   [`Controller`] (stop / pause / resume / modify / regenerate).
//! - `embedder`: embeddings in a second context on the same weights, beside generation.
//! - `engine_loop`: the loop every engine thread runs, over a `Backend`: `scheduler` (llama.cpp:
//!   slots sharing one KV pool, the prompt cache in memory and on disk, chunked prefill, one
//!   decode per step, sampling) or `scripted` (scripted tokens
//!   instead of a model, for door benchmarks, fault and timing tests); `commands`: what handle
//!   and threads exchange;
//!   `loader`: loading with progress; `admission`: the in-flight limit.
//! - [`answer`]: what the doors make of a model's raw text: thinking and tool calls apart from
//!   the answer, while it streams and at its end, and a client's format as a grammar.
//! - [`cache_owner`]: whose prompt cache a request may read ([`CacheOwner`]): each tier keeps
//!   its entries' owner, and a request restores only its own.
//! - [`events`]: what a generation streams back: tokens, `Done` with real usage and timing.
//! - [`model`]: [`ModelInfo`], [`ModelState`], the template and tokenizer (`Prompter`);
//!   `prompt`: a request's prompt made into tokens and image chunks on the caller's thread.
//! - `media`: a model's projector (`mmproj`, llama.cpp's mtmd): images decoded, cut into the
//!   prompt as chunks the scheduler evaluates into a slot's sequence.
//! - [`template`]: the GGUF's Jinja chat template rendered with minijinja.
//! - [`tools`]: tools in the prompt (the template's own format or the generic one) and the
//!   grammar of a call.
//! - [`gguf`]: a GGUF file's header metadata, read without loading a model (the parser is
//!   `hearth_protocol::gguf`).
//! - [`grammar`]: JSON formats and schemas as llama.cpp grammars, checked before a request
//!   queues.
//! - `speculation`: what to guess ahead (n-grams of the prompt and answer) and whether it pays
//!   (measured step costs, acceptance); the scheduler's `speculate` applies it.
//! - `text`: UTF-8 assembly and stop-string hold-back; `sampling`: sampler chains, logprobs.
//! - [`config`]: [`EngineConfig`] and physical-core detection.
//! - [`devices`]: the devices the backends loaded at start offer (the GPU backends whose driver
//!   exists); `cpu`: the CPU variant picked and its features; `backend`: loading them and
//!   llama.cpp once.
//! - [`offload`]: how many layers go to the GPU (`auto`: llama.cpp's fitting), and fewer when
//!   a load fails there.
//! - `cpu_share`: fewer llama.cpp threads while other programs keep cores busy; `omp`: the
//!   OpenMP thread limit it applies to a decode (`unsafe`, with its C shim).
//! - [`rpc`]: llama.cpp's RPC backend: serving this CPU to a split model elsewhere, and the
//!   remote devices a split model places layers on (the crate's other `unsafe`).
//!
//! Architecture invariant: `hearth-engine` is the only crate that names llama.cpp, and it
//! knows no Hearth crate but `hearth-protocol`: no HTTP, no cluster, no store.
//!
//! ## Invariants
//! - Every generation's stream ends with exactly one `Done` or `Error`.
//! - Text is released only on UTF-8 boundaries; a stop string never reaches a reader.
//! - No decode ever holds more than `n_batch` tokens (llama.cpp aborts the process otherwise).
//! - A reader that drops its receiver cancels its generation at the next step; a slow reader
//!   holds back only its own slot.
//! - Templating and tokenization run on the caller's thread, never on the engine thread.

mod admission;
pub mod answer;
mod backend;
pub mod cache_owner;
mod commands;
pub mod config;
mod cpu;
mod cpu_share;
pub mod devices;
mod embedder;
mod engine_loop;
pub mod events;
pub mod gguf;
pub mod grammar;
pub mod handle;
mod loader;
mod media;
pub mod model;
pub mod offload;
mod omp;
mod prompt;
mod rerank;
pub mod rpc;
mod sampling;
mod scheduler;
mod scripted;
mod speculation;
pub mod template;
mod text;
pub mod tools;

pub use backend::backend as llama_backend;
pub use backend::libraries as load_backend_libraries;
pub use backend::loaded as backends;
pub use cache_owner::CacheOwner;
pub use config::{DeviceChoice, EngineConfig, GpuLayers, KvType, Offload, Remote, Script};
pub use cpu::Backends;
pub use cpu_share::GIVE_UP_AT;
pub use devices::{Device, DeviceKind};
pub use embedder::{normalize, EmbedError, Embeddings, EMBED_MAX_TOKENS};
pub use events::{
    Done, Event, Failure, FailureKind, Timing, TokenCandidate, TokenEvent, TokenLogprobs,
};
pub use handle::{
    ControlError, Controller, EmbedFailure, EmbedInput, Engine, EngineStats, Events, Generation,
    PoolStats, Prompt, Request, SpecStats, SubmitError,
};
pub use media::{
    find_projector, name_projector, projector_bytes, projector_sees, projector_senses, MediaError,
    Senses,
};
pub use model::{Chat, ModelInfo, ModelState, PromptError};
pub use offload::Placement;
pub use prompt::count_chat_tokens;
pub use rerank::Ranking;
pub use scheduler::forget_on_disk;
pub use tools::ToolFormat;
