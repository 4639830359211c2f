//! TealeNet's cluster messages (`protocols/cluster-messages.md`, and NOTES.md for how the
//! Swift app and the Rust node really behave): every message of the document in both
//! directions, read from one frame's JSON ([`decode`]) and written back ([`encode`]). Pure:
//! the LAN transport (4-byte big-endian length, then the JSON, at most
//! [`crate::limits::MAX_CLUSTER_FRAME_BYTES`]) belongs to the node.
//!
//! ## Decisions (NOTES.md)
//! - A message is a single-key object, `{"hello": ...}`. Its payload comes in two shapes:
//!   wrapped, `{"hello":{"_0":{...}}}` (Swift's Codable, what the real peers send), and plain,
//!   `{"hello":{...}}` (the document). Both are read; [`Shape`] says which, so a reply can use
//!   the peer's; Hearth opens a connection with the wrapped shape.
//! - UUIDs of either case are read, and a peer's are written back exactly ([`PeerUuid`]).
//! - Dates are seconds since 2001-01-01 ([`AppleTime`]). Optional fields that are null are
//!   left out when written, and read as missing; only the OpenAI chunk inside an
//!   `inferenceChunk` keeps OpenAI's own `"finish_reason": null`.
//! - A message name the document does not have is [`ClusterError::UnknownMessage`]: a newer
//!   peer's message, which the connection skips.
//! - A list past its bound (model names, a model's files, transports: [`crate::limits`]) makes
//!   the whole message [`ClusterError::Invalid`], refused as it is read.
//! - Some messages are Hearth's own, sent only between Hearth nodes (inside their encrypted
//!   transport): `hearthControl`, which pauses or resumes a running request; the binary model
//!   chunk ([`HearthChunk`], not JSON: [`decode_owned`] tells it by its first byte); and
//!   `hearthRerank` with its `hearthRerankResult` ([`HearthRerank`]).

mod binary_chunk;
mod bounds;
mod handshake;
mod health;
mod ids;
mod inference;
mod models;
mod rerank;

pub use binary_chunk::{HearthChunk, BINARY_CHUNK_MARK, BINARY_CHUNK_VERSION};
pub use handshake::{
    DeviceInfo, Hardware, HearthHello, Hello, HEARTH_NOISE, HEARTH_NOISE_AES, PROTOCOL_VERSION,
    RPC_TUNNEL,
};
pub use health::{Heartbeat, ThermalLevel};
pub use ids::{AppleTime, PeerUuid};
pub use inference::{
    Chunk, ChunkChoice, ChunkDelta, ErrorCode, InferenceChunk, InferenceComplete, InferenceError,
    InferenceRequest,
};
pub use inference::{ControlAction, HearthControl};
pub use models::{
    ModelFileOffer, ModelQuery, ModelQueryResponse, ModelTransferChunk, ModelTransferComplete,
    ModelTransferRequest,
};
pub use rerank::{HearthRerank, HearthRerankResult};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

/// The key of the wrapped payload shape.
const WRAPPED_KEY: &str = "_0";

/// One cluster message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Hello(Hello),
    HelloAck(Hello),
    Heartbeat(Heartbeat),
    HeartbeatAck(Heartbeat),
    InferenceRequest(InferenceRequest),
    InferenceChunk(InferenceChunk),
    InferenceComplete(InferenceComplete),
    InferenceError(InferenceError),
    ModelQuery(ModelQuery),
    ModelQueryResponse(ModelQueryResponse),
    ModelTransferRequest(ModelTransferRequest),
    ModelTransferChunk(ModelTransferChunk),
    ModelTransferComplete(ModelTransferComplete),
    /// Hearth's own, between Hearth nodes only: pause or resume a running request.
    HearthControl(HearthControl),
    /// Hearth's own, between Hearth nodes only: a model chunk in binary.
    HearthChunk(HearthChunk),
    /// Hearth's own, between Hearth nodes only: score documents with the peer's reranker.
    HearthRerank(HearthRerank),
    HearthRerankResult(HearthRerankResult),
}

/// How a message's payload is laid out (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// `{"name":{"_0":{...}}}`: the real peers' shape, and Hearth's when it starts.
    Wrapped,
    /// `{"name":{...}}`: the document's shape.
    Plain,
}

/// Why a frame is not a cluster message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("a cluster frame must be a JSON object: {0}")]
    NotJson(String),
    #[error("a cluster message is an object with exactly one key, got {0} keys")]
    NotOneKey(usize),
    #[error("unknown cluster message '{0}'")]
    UnknownMessage(String),
    #[error("{name}: {message}")]
    Invalid { name: &'static str, message: String },
}

impl Message {
    /// The message's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Hello(_) => "hello",
            Self::HelloAck(_) => "helloAck",
            Self::Heartbeat(_) => "heartbeat",
            Self::HeartbeatAck(_) => "heartbeatAck",
            Self::InferenceRequest(_) => "inferenceRequest",
            Self::InferenceChunk(_) => "inferenceChunk",
            Self::InferenceComplete(_) => "inferenceComplete",
            Self::InferenceError(_) => "inferenceError",
            Self::ModelQuery(_) => "modelQuery",
            Self::ModelQueryResponse(_) => "modelQueryResponse",
            Self::ModelTransferRequest(_) => "modelTransferRequest",
            Self::ModelTransferChunk(_) => "modelTransferChunk",
            Self::ModelTransferComplete(_) => "modelTransferComplete",
            Self::HearthControl(_) => "hearthControl",
            Self::HearthChunk(_) => "hearthChunk",
            Self::HearthRerank(_) => "hearthRerank",
            Self::HearthRerankResult(_) => "hearthRerankResult",
        }
    }
}

/// Read one frame as a cluster message, and the shape it came in: its JSON, or a binary chunk
/// (whose bytes stay in `bytes`, not copied).
pub fn decode_owned(bytes: Vec<u8>) -> Result<(Message, Shape), ClusterError> {
    if bytes.first() == Some(&BINARY_CHUNK_MARK) {
        return Ok((
            Message::HearthChunk(HearthChunk::decode(bytes)?),
            Shape::Wrapped,
        ));
    }
    decode(&bytes)
}

/// Read one frame's JSON (or a binary chunk, copied) as a cluster message, and the shape it
/// came in.
pub fn decode(bytes: &[u8]) -> Result<(Message, Shape), ClusterError> {
    if bytes.first() == Some(&BINARY_CHUNK_MARK) {
        return decode_owned(bytes.to_vec());
    }
    let object: Map<String, Value> =
        serde_json::from_slice(bytes).map_err(|e| ClusterError::NotJson(e.to_string()))?;
    if object.len() != 1 {
        return Err(ClusterError::NotOneKey(object.len()));
    }
    let Some((name, body)) = object.into_iter().next() else {
        return Err(ClusterError::NotOneKey(0));
    };
    let (payload, shape) = match body {
        Value::Object(mut m) if m.len() == 1 && m.contains_key(WRAPPED_KEY) => {
            (m.remove(WRAPPED_KEY).unwrap_or(Value::Null), Shape::Wrapped)
        }
        other => (other, Shape::Plain),
    };
    let message = match name.as_str() {
        "hello" => Message::Hello(read("hello", payload)?),
        "helloAck" => Message::HelloAck(read("helloAck", payload)?),
        "heartbeat" => Message::Heartbeat(read("heartbeat", payload)?),
        "heartbeatAck" => Message::HeartbeatAck(read("heartbeatAck", payload)?),
        "inferenceRequest" => Message::InferenceRequest(read("inferenceRequest", payload)?),
        "inferenceChunk" => Message::InferenceChunk(read("inferenceChunk", payload)?),
        "inferenceComplete" => Message::InferenceComplete(read("inferenceComplete", payload)?),
        "inferenceError" => Message::InferenceError(read("inferenceError", payload)?),
        "modelQuery" => Message::ModelQuery(read("modelQuery", payload)?),
        "modelQueryResponse" => Message::ModelQueryResponse(read("modelQueryResponse", payload)?),
        "modelTransferRequest" => {
            Message::ModelTransferRequest(read("modelTransferRequest", payload)?)
        }
        "modelTransferChunk" => Message::ModelTransferChunk(read("modelTransferChunk", payload)?),
        "hearthControl" => Message::HearthControl(read("hearthControl", payload)?),
        "hearthRerank" => Message::HearthRerank(read("hearthRerank", payload)?),
        "hearthRerankResult" => Message::HearthRerankResult(read("hearthRerankResult", payload)?),
        "modelTransferComplete" => {
            Message::ModelTransferComplete(read("modelTransferComplete", payload)?)
        }
        _ => {
            return Err(ClusterError::UnknownMessage(
                name.chars().take(64).collect(),
            ))
        }
    };
    bounds::check(&message).map_err(|message_error| ClusterError::Invalid {
        name: message.name(),
        message: message_error,
    })?;
    Ok((message, shape))
}

fn read<T: DeserializeOwned>(name: &'static str, payload: Value) -> Result<T, ClusterError> {
    serde_json::from_value(payload).map_err(|e| ClusterError::Invalid {
        name,
        message: e.to_string(),
    })
}

/// Write a message as one frame's JSON, in `shape`: serialized straight into the bytes (it is
/// on the path of every streamed token).
pub fn encode(message: &Message, shape: Shape) -> Vec<u8> {
    match message {
        Message::Hello(p) | Message::HelloAck(p) => write(message.name(), p, shape),
        Message::Heartbeat(p) | Message::HeartbeatAck(p) => write(message.name(), p, shape),
        Message::InferenceRequest(p) => write(message.name(), p, shape),
        Message::InferenceChunk(p) => write(message.name(), p, shape),
        Message::InferenceComplete(p) => write(message.name(), p, shape),
        Message::InferenceError(p) => write(message.name(), p, shape),
        Message::ModelQuery(p) => write(message.name(), p, shape),
        Message::ModelQueryResponse(p) => write(message.name(), p, shape),
        Message::ModelTransferRequest(p) => write(message.name(), p, shape),
        Message::ModelTransferChunk(p) => write_chunk(message.name(), p, shape),
        Message::ModelTransferComplete(p) => write(message.name(), p, shape),
        Message::HearthControl(p) => write(message.name(), p, shape),
        Message::HearthRerank(p) => write(message.name(), p, shape),
        Message::HearthRerankResult(p) => write(message.name(), p, shape),
        Message::HearthChunk(c) => c.wire().to_vec(),
    }
}

/// [`encode`], taking the message: a binary chunk is its bytes as they are (not copied).
pub fn encode_owned(message: Message, shape: Shape) -> Vec<u8> {
    match message {
        Message::HearthChunk(c) => c.into_wire().0,
        other => encode(&other, shape),
    }
}

fn write<T: Serialize>(name: &str, payload: &T, shape: Shape) -> Vec<u8> {
    // Every payload is plain data (strings, numbers, maps): serializing cannot fail.
    match shape {
        Shape::Wrapped => serde_json::to_vec(&Entry(name, &Entry(WRAPPED_KEY, payload))),
        Shape::Plain => serde_json::to_vec(&Entry(name, payload)),
    }
    .unwrap_or_default()
}

/// A model chunk's JSON: as [`write`] gives it, without running a megabyte of base64 through
/// the string escaper byte by byte (base64 has nothing to escape): the chunk is written with
/// empty `data`, and the data, once found to need no escape, put between its quotes.
fn write_chunk(name: &str, chunk: &ModelTransferChunk, shape: Shape) -> Vec<u8> {
    /// The key is the only place where the quotes of `"data":""` stand bare: inside a string
    /// they would be escaped.
    const KEY: &[u8] = br#""data":"""#;
    // Nothing JSON escapes (a quote, a backslash, a control byte), checked 64 bytes at a time
    // without branches so the compiler vectorizes it.
    let bare = chunk.data.as_bytes().chunks(64).all(|c| {
        c.iter()
            .fold(true, |ok, &b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'))
    });
    if !bare {
        return write(name, chunk, shape);
    }
    let hollow = ModelTransferChunk {
        transfer_id: chunk.transfer_id.clone(),
        file_name: chunk.file_name.clone(),
        offset: chunk.offset,
        data: String::new(),
        is_last_chunk: chunk.is_last_chunk,
    };
    let out = write(name, &hollow, shape);
    match out.windows(KEY.len()).position(|w| w == KEY) {
        Some(at) => {
            let quote = at + KEY.len() - 1;
            let mut whole = Vec::with_capacity(out.len() + chunk.data.len());
            whole.extend_from_slice(&out[..quote]);
            whole.extend_from_slice(chunk.data.as_bytes());
            whole.extend_from_slice(&out[quote..]);
            whole
        }
        None => write(name, chunk, shape),
    }
}

/// `{key: value}`, written without building a JSON tree first.
struct Entry<'a, T>(&'a str, &'a T);

impl<T: Serialize> Serialize for Entry<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.0, self.1)?;
        m.end()
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use proptest::prelude::*;

    fn both(chunk: &ModelTransferChunk, shape: Shape) -> (Vec<u8>, Vec<u8>) {
        let m = Message::ModelTransferChunk(chunk.clone());
        (encode(&m, shape), write(m.name(), chunk, shape))
    }

    proptest! {
        #[test]
        fn a_chunk_is_written_as_serde_writes_it(
            name in ".{0,40}",
            data in "[A-Za-z0-9+/=]{0,300}|.{0,40}",
            offset in any::<u64>(),
            last in any::<bool>(),
            wrapped in any::<bool>(),
        ) {
            let chunk = ModelTransferChunk {
                transfer_id: PeerUuid::from_bytes([7; 16]),
                file_name: name,
                offset,
                data,
                is_last_chunk: last,
            };
            let shape = if wrapped { Shape::Wrapped } else { Shape::Plain };
            let (fast, serde) = both(&chunk, shape);
            prop_assert_eq!(fast, serde);
        }
    }

    #[test]
    fn a_name_that_looks_like_the_data_key_stays_escaped() {
        let chunk = ModelTransferChunk {
            transfer_id: PeerUuid::from_bytes([1; 16]),
            file_name: r#""data":"" .gguf"#.into(),
            offset: 0,
            data: "QUJD".into(),
            is_last_chunk: true,
        };
        let (fast, serde) = both(&chunk, Shape::Plain);
        assert_eq!(fast, serde);
    }
}
