//! # hearth-protocol
//!
//! Every wire type Hearth speaks, and the validation that turns wire values into the one
//! internal vocabulary of a generation. Pure: no I/O, no tokio, no llama.cpp, so it can be
//! unit-tested and fuzzed on its own.
//!
//! Architecture invariant: `hearth-protocol` depends on no other Hearth crate; a door's wire
//! format is written here once, and every crate that speaks it uses these types.
//!
//! ## Layout
//! - [`limits`]: named size limits, each with the reason for its value.
//! - [`ids`]: newtype identifiers shared by every door.
//! - [`generation`]: the internal sampling parameters, finish reasons and usage, and their
//!   validation (every door validates through here so the rules are the same everywhere).
//! - [`openai`]: the OpenAI HTTP API (chat completions, completions, models, errors, SSE chunks).
//! - [`anthropic`]: Anthropic's Messages API (`/v1/messages`): content blocks, tools, thinking,
//!   its stream events and error body.
//! - [`responses`]: OpenAI's Responses API (`/v1/responses`): input items, output items, its
//!   stream events, and what a stored response keeps to be continued.
//! - [`embeddings`]: OpenAI's embeddings API (`/v1/embeddings`): inputs, float or base64 vectors.
//! - [`ollama`]: Ollama's HTTP API (`/api/chat`, `/api/generate`, `/api/embed`, tags, show, ps,
//!   pull, errors): request bodies, their validation, and response lines.
//! - [`media`]: images a message carries (base64 on the wire) and their limits.
//! - [`tools`]: tool calling's tools, choice and calls, in the shape chat templates read.
//! - [`streaming`]: the `/generate` streaming WebSocket protocol (`protocols/streaming-ws.md`).
//! - `value_kind`: a JSON value's kind in error messages' words.
//! - [`utf8`]: the one streaming UTF-8 decoder (engine tokens, worker frames).
//! - [`worker`]: the worker protocol's task frames and binary result frames (`protocols/worker-node.md`).
//! - [`auth_ws`]: the signed-challenge protocol's client messages (`protocols/auth-ws.md`).
//! - [`batch`]: the batch WebSocket protocol on `/ws` and `/api/ws` (`protocols/batch-ws.md`).
//! - [`cluster`]: TealeNet's cluster messages between LAN peers (`protocols/cluster-messages.md`).
//! - [`gguf`]: the header of a GGUF model file (metadata without loading the model).
//! - [`fuzzing`]: every decoder of untrusted input as one function per fuzz target.
//!
//! ## Invariants
//! - Field names and casing follow each protocol document exactly, even where documents differ.
//! - Parsing is tolerant of unknown fields; validation is strict about values.

pub mod anthropic;
pub mod audio;
pub mod auth_ws;
pub mod batch;
pub mod cluster;
pub mod embeddings;
pub mod fuzzing;
pub mod generation;
pub mod gguf;
pub mod ids;
pub mod limits;
pub mod media;
pub mod ollama;
pub mod openai;
pub mod responses;
pub mod streaming;
pub mod tools;
pub mod utf8;
pub mod value_kind;
pub mod worker;

pub use generation::{
    ChatMessage, FinishReason, ParamError, SamplingParams, SamplingPatch, Speculation, Usage,
};
pub use ids::{ModelId, RequestId};
pub use tools::{Tool, ToolCall, ToolChoice, ToolSet};
