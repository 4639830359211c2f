//! The batch WebSocket protocol, `/ws` and `/api/ws` (`protocols/batch-ws.md`): one message
//! carries several prompts with client-chosen `request_id`s and one shared `generation_config`;
//! every server message is a JSON array of events for that batch. Field names are exactly the
//! document's. Parsing is two-staged so that one bad entry fails only itself: [`parse_message`]
//! refuses a whole message only when it is not JSON or has no usable `prompts`.
//!
//! Decisions where the document is silent (NOTES.md decides the rest; also in the README):
//! - Events: ACCEPTED (always first: the prompt passed validation), STARTED (handed to the
//!   engine, which queues it for a slot), INITIALIZED (the prompt is prefilled and the first
//!   token sampled), PROGRESS (text released by one token), then COMPLETE, or ERROR ending the
//!   request. Each array holds one event type, in prompt order; prompts that finished are left
//!   out of later arrays. `stream_response: false` sends only ACCEPTED, STARTED and COMPLETE.
//!   A token that releases no text (part of a multi-byte character) sends no PROGRESS.
//! - Invalid entries get their ERROR in an array after the ACCEPTED array of the valid ones.
//!   A bad shared field (`only_new_tokens`, `stream_response`, `generation_config`) fails every
//!   entry with its own ERROR, so each `request_id` always gets an ending.
//! - Whole-message failures are `[{"type":"ERROR","request_id":null,"error":"..."}]`.
//! - `stream_response` and `only_new_tokens` default to true. `null` means the default for
//!   every field. Unknown fields are ignored.
//! - `generation_config`: NOTES.md defaults (overridable in the node's config); `do_sample:
//!   false` is greedy, as is `temperature: 0`; `num_beams` above 1 is refused per request
//!   (beam search is not supported); `length_penalty` is accepted and unused (it only affects
//!   beam search); `max_new_tokens` larger than the model's context is capped at the context.
//!   Hearth extension: `seed`.
//! - `request_id`s are strings, unique within a message; at most [`MAX_BATCH_PROMPTS`] entries.
//! - Continuation (key: the message's request ids in order): a prompt with saved unfinished
//!   state ignores its `prompt` and continues; one that already reached end-of-sequence
//!   completes at once with `new_tokens_count: 0`. With `only_new_tokens: false`, INITIALIZED
//!   and COMPLETE `text` start with the original prompt plus everything generated before.
//!   `new_tokens_count` and `execution_time` count this message's work only.

mod config;
mod events;
mod request;

use crate::value_kind::kind;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub use config::{BatchDefaults, GenerationConfig};
pub use events::{message_error, to_json, BatchEvent};
pub use request::{
    parse_message, BatchRequest, EntryError, MessageError, Options, Payload, PromptEntry,
};

/// Most prompts in one message. The engine queues what it cannot run at once; this bounds
/// what one message can make the node hold (a home node's slots are a handful).
pub const MAX_BATCH_PROMPTS: usize = 256;

/// One optional field; `null` counts as absent. Errors name the field.
fn field<T: DeserializeOwned>(
    map: &Map<String, Value>,
    name: &str,
    prefix: &str,
) -> Result<Option<T>, String> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(|e| format!("{prefix}{name}: {e}")),
    }
}
