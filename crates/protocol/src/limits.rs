//! Size limits for untrusted input, named so every door enforces the same numbers.
//! Each constant says why it has its value.

/// Largest WebSocket message accepted on any door. A prompt of a full 128k-token context is
/// well under 1 MiB of text; 4 MiB leaves room for JSON escaping while bounding what one
/// client can make the node buffer (DESIGN.md §3).
pub const MAX_WS_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// What the WebSocket library itself will buffer for one message. Messages between
/// [`MAX_WS_MESSAGE_BYTES`] and this are read to the end so the client gets a clean error and
/// close (instead of a reset while it is still sending); beyond this the connection is dropped.
/// The library grows its buffer as bytes arrive, never from the announced length.
pub const WS_READ_LIMIT_BYTES: usize = 2 * MAX_WS_MESSAGE_BYTES;

/// Largest cluster frame (its JSON after the 4-byte length) read from a LAN peer: a model
/// transfer chunk is 1 MiB of data, 1.4 MiB in base64; an inference request holds at most an
/// HTTP body's worth of prompt. A longer announced length closes that connection before
/// anything is allocated for it (DESIGN.md §3).
pub const MAX_CLUSTER_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Largest HTTP request body accepted by the doors, for the same reason as
/// [`MAX_WS_MESSAGE_BYTES`]: room for an image at its limit ([`crate::media::MAX_IMAGE_BYTES`],
/// a third more in base64) beside a long prompt, and less than a cluster frame
/// ([`MAX_CLUSTER_FRAME_BYTES`]), so that any request a door takes can go to a peer.
pub const MAX_HTTP_BODY_BYTES: usize = 12 * 1024 * 1024;

/// Most stop strings per request. OpenAI allows 4; llama-server allows more. 16 keeps the
/// per-token stop scan cheap while accepting every client we know of.
pub const MAX_STOP_STRINGS: usize = 16;

/// Longest single stop string, in bytes. Held-back text is at most this long, so it also
/// bounds how far the stream can lag behind generation.
pub const MAX_STOP_STRING_BYTES: usize = 256;

/// Most alternatives reported per token when log-probabilities are requested (OpenAI: 20).
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// Longest feedback text stored from a client.
pub const MAX_FEEDBACK_TEXT_BYTES: usize = 16 * 1024;

/// Inputs in one embeddings request (OpenAI's own limit for `input` arrays).
pub const MAX_EMBEDDING_INPUTS: usize = 2048;

/// Most model names one cluster message may list (`loadedModels` of `hello`, `helloAck`,
/// `heartbeat`, `heartbeatAck` and their `deviceInfo`). A node has a handful loaded; each name
/// becomes a provider of the route, so a peer listing 100,000 (2 MB, under the frame limit)
/// would pin a core: such a message is refused whole.
pub const MAX_PEER_MODELS: usize = 256;

/// Longest model name a peer may list, in bytes (GGUF file names are far shorter).
pub const MAX_PEER_MODEL_NAME_BYTES: usize = 256;

/// Most files of one model a peer may list in `modelQueryResponse.files`: a split GGUF's
/// shards are numbered with five digits.
pub const MAX_MODEL_FILES: usize = 99_999;

/// Longest file name in a peer's list of a model's files, in bytes.
pub const MAX_MODEL_FILE_NAME_BYTES: usize = 512;

/// Most transports a Hearth `hello` may offer beside its own (`noiseAlso`): there are two.
pub const MAX_NOISE_OFFERS: usize = 8;

/// Most tools one request may offer (OpenAI's own limit is 128). Each is rendered into the
/// prompt and into the grammar of a call.
pub const MAX_TOOLS: usize = 128;

/// Longest function name, in bytes (OpenAI's limit is 64 characters).
pub const MAX_TOOL_NAME_BYTES: usize = 64;

/// Documents one rerank request may score (Cohere's limit): the rerank door's, and a
/// `hearthRerank` message's between Hearth nodes.
pub const MAX_RERANK_DOCUMENTS: usize = 1000;
