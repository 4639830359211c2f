//! Property tests of every decoder of untrusted input: valid messages (from the protocol
//! documents) with a byte flipped, cut short or extended never panic; what they decode to
//! still meets the fuzz targets' invariants (`hearth_protocol::fuzzing`), and what they do not
//! decode to is an error with a message for the door to send. A JSON message cut short is
//! always such an error.

use hearth_protocol::{auth_ws, batch, cluster, fuzzing, openai, streaming, worker};
use proptest::prelude::*;

/// How a valid message is damaged.
#[derive(Debug, Clone)]
enum Mutation {
    /// XOR the byte at (index modulo length) with a non-zero mask.
    Flip(usize, u8),
    /// Keep only the first 1 + (index modulo (length - 1)) bytes: never all of them, never none
    /// (an empty text frame is the worker protocol's keepalive).
    Cut(usize),
    /// Append these bytes.
    Extend(Vec<u8>),
}

impl Mutation {
    fn apply(&self, seed: &[u8]) -> Vec<u8> {
        let mut out = seed.to_vec();
        match self {
            Mutation::Flip(i, mask) => out[i % seed.len()] ^= *mask,
            Mutation::Cut(i) => out.truncate(1 + i % (seed.len() - 1)),
            Mutation::Extend(tail) => out.extend_from_slice(tail),
        }
        out
    }

    fn cuts_short(&self) -> bool {
        matches!(self, Mutation::Cut(_))
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        any::<usize>().prop_map(Mutation::Cut),
        proptest::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
    ]
}

/// Decode `bytes` as the door would and say what it made of them: `Ok(())` for a message,
/// `Err(message)` for the error the door sends.
type Decoder = fn(&[u8]) -> Result<(), String>;

fn text(bytes: &[u8]) -> Result<&str, String> {
    // A text frame that is not UTF-8 never reaches a decoder: the socket closes with 1007.
    std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))
}

fn streaming_decoder(bytes: &[u8]) -> Result<(), String> {
    streaming::parse_client_message(text(bytes)?)
        .map(drop)
        .map_err(|e| e.0)
}

fn batch_decoder(bytes: &[u8]) -> Result<(), String> {
    batch::parse_message(text(bytes)?)
        .map(drop)
        .map_err(|e| e.0)
}

fn auth_ws_decoder(bytes: &[u8]) -> Result<(), String> {
    auth_ws::parse_text(text(bytes)?)
        .map(drop)
        .map_err(|e| e.message)
}

fn registration_decoder(bytes: &[u8]) -> Result<(), String> {
    auth_ws::register::parse_registration(bytes)
        .map(drop)
        .map_err(|e| e.message)
}

fn openai_chat_decoder(bytes: &[u8]) -> Result<(), String> {
    openai::parse_body::<openai::ChatCompletionBody>(bytes)
        .map(drop)
        .map_err(|e| e.message)
}

fn openai_completion_decoder(bytes: &[u8]) -> Result<(), String> {
    openai::parse_body::<openai::CompletionBody>(bytes)
        .map(drop)
        .map_err(|e| e.message)
}

fn hub_text_decoder(bytes: &[u8]) -> Result<(), String> {
    worker::parse_hub_text(text(bytes)?)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn worker_text_decoder(bytes: &[u8]) -> Result<(), String> {
    worker::parse_worker_text(text(bytes)?)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn binary_frame_decoder(bytes: &[u8]) -> Result<(), String> {
    worker::decode_binary(bytes)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn cluster_decoder(bytes: &[u8]) -> Result<(), String> {
    cluster::decode(bytes).map(drop).map_err(|e| e.to_string())
}

/// One decoder, its fuzz target and valid messages to damage.
struct Door {
    name: &'static str,
    target: &'static str,
    decode: Decoder,
    /// Whether a message cut short can never decode (JSON objects; not binary frames).
    json: bool,
    seeds: &'static [&'static str],
}

const DOORS: &[Door] = &[
    Door {
        name: "streaming",
        target: "streaming_message",
        decode: streaming_decoder,
        json: true,
        seeds: &[
            r#"{"type":"config","model":"llama-7b","prompt":"Once upon a time","parameters":{"max_tokens":100,"temperature":0.7,"top_p":0.9,"top_k":40,"repetition_penalty":1.1,"stop":["\n\n","THE END"]},"options":{"stream":true,"echo_prompt":false,"include_token_ids":false,"include_logprobs":false,"include_timing":false}}"#,
            r#"{"type":"control","action":"stop"}"#,
            r#"{"type":"control","action":"modify","parameters":{"temperature":0.9,"top_p":0.95}}"#,
            r#"{"type":"feedback","rating":1,"text":"Great response!","position":120}"#,
        ],
    },
    Door {
        name: "batch",
        target: "batch_message",
        decode: batch_decoder,
        json: true,
        seeds: &[
            r#"{"prompts":[{"request_id":"2835f3c5","prompt":"[INST] Generate a very long poem about 1000 cats [/INST]\n\n"}],"only_new_tokens":true,"stream_response":true,"generation_config":{"num_beams":1,"do_sample":true,"temperature":1,"top_p":1,"top_k":50,"max_new_tokens":100,"repetition_penalty":1,"length_penalty":1}}"#,
            r#"{"prompts":[{"request_id":"a","prompt":"one"},{"request_id":"b","prompt":"two"}]}"#,
        ],
    },
    Door {
        name: "signed challenge",
        target: "auth_ws_message",
        decode: auth_ws_decoder,
        json: true,
        seeds: &[
            r#"{"type":"authenticate","clientId":"client-id-here","signature":"base64-signature-here"}"#,
            r#"{"type":"generate","id":"req-123","model":"llama2","prompt":"Hello","options":{"temperature":0.7}}"#,
            r#"{"type":"stop","id":"req-123"}"#,
            r#"{"type":"models"}"#,
            r#"{"type":"ping"}"#,
        ],
    },
    Door {
        name: "signed-challenge registration",
        target: "auth_ws_message",
        decode: registration_decoder,
        json: true,
        seeds: &[
            r#"{"name":"my-client","publicKey":"-----BEGIN PUBLIC KEY-----\nMIIBIjA...==\n-----END PUBLIC KEY-----","signatureAlgorithm":"SHA256"}"#,
        ],
    },
    Door {
        name: "OpenAI chat",
        target: "openai_chat",
        decode: openai_chat_decoder,
        json: true,
        seeds: &[
            r#"{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello!"}],"temperature":0.2,"max_tokens":16,"stream":true,"stream_options":{"include_usage":true},"stop":["\n"]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}"#,
        ],
    },
    Door {
        name: "OpenAI completions",
        target: "openai_completion",
        decode: openai_completion_decoder,
        json: true,
        seeds: &[r#"{"model":"m","prompt":"Say this is a test","max_tokens":7,"temperature":0}"#],
    },
    Door {
        name: "worker task (hub to worker)",
        target: "worker_frames",
        decode: hub_text_decoder,
        json: true,
        seeds: &[
            r#"{"state": 0, "id": 123, "system": "system_message", "messages": ["message1", "message2"], "max_new_tokens": 100, "temperature": 0.5, "created_at": 1633028302}"#,
            r#"{"id":7,"stop":true}"#,
        ],
    },
    Door {
        name: "worker reply (worker to hub)",
        target: "worker_frames",
        decode: worker_text_decoder,
        json: true,
        seeds: &[
            r#"{"id":7,"done":{"finish_reason":"stop","usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}}"#,
            r#"{"id":7,"error":{"message":"the model was unloaded","code":"worker_stopping"}}"#,
            r#"{"id":7,"tokens":3}"#,
        ],
    },
    Door {
        name: "worker data frame",
        target: "worker_frames",
        decode: binary_frame_decoder,
        json: false,
        // Task 123 with "héllo", and task 123's end frame.
        seeds: &["\0\0\0{h\u{e9}llo", "\0\0\0{"],
    },
    Door {
        name: "cluster message",
        target: "cluster_message",
        decode: cluster_decoder,
        json: true,
        seeds: &[
            r#"{"hello":{"_0":{"deviceInfo":{"id":"550E8400-E29B-41D4-A716-446655440000","name":"Linux Server","hardware":{"chipFamily":"nvidiaGPU","chipName":"NVIDIA RTX 4090","totalRAMGB":64.0,"gpuCoreCount":16384,"memoryBandwidthGBs":1008.0},"registeredAt":798134400.0,"lastSeenAt":798134400.0,"isCurrentDevice":true,"loadedModels":[]},"protocolVersion":1,"loadedModels":["mlx-community/Qwen3-8B-4bit"]}}}"#,
            r#"{"heartbeat":{"deviceID":"550e8400-e29b-41d4-a716-446655440000","timestamp":798134400.0,"thermalLevel":"nominal","throttleLevel":100,"loadedModels":[],"isGenerating":false,"queueDepth":0}}"#,
            r#"{"inferenceChunk":{"_0":{"requestID":"550e8400-e29b-41d4-a716-446655440000","chunk":{"id":"chatcmpl-xxx","object":"chat.completion.chunk","created":1713100000,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}}}}"#,
            r#"{"inferenceError":{"_0":{"requestID":"550e8400-e29b-41d4-a716-446655440000","errorMessage":"Model not loaded","code":"model_not_loaded"}}}"#,
            r#"{"modelTransferChunk":{"transferID":"550e8400-e29b-41d4-a716-446655440000","fileName":"model.gguf","offset":0,"data":"aGVhcnRo","isLastChunk":false}}"#,
        ],
    },
];

/// Every seed is a message its decoder takes: otherwise the mutations prove nothing.
#[test]
fn the_seeds_are_valid() {
    for door in DOORS {
        for seed in door.seeds {
            assert_eq!(
                (door.decode)(seed.as_bytes()),
                Ok(()),
                "{}: {seed}",
                door.name
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn damaged_messages_decode_or_give_the_doors_error(
        door in 0..DOORS.len(),
        seed in any::<usize>(),
        m in mutation(),
    ) {
        let door = &DOORS[door];
        let seed = door.seeds[seed % door.seeds.len()].as_bytes();
        let bytes = m.apply(seed);
        // The fuzz target's invariants hold on whatever decodes.
        fuzzing::run(door.target, &bytes);
        match (door.decode)(&bytes) {
            Ok(()) => prop_assert!(
                !(door.json && m.cuts_short()),
                "{}: a cut message decoded: {:?}", door.name, String::from_utf8_lossy(&bytes)
            ),
            Err(message) => prop_assert!(
                !message.trim().is_empty(),
                "{}: an error without a message for {:?}", door.name, String::from_utf8_lossy(&bytes)
            ),
        }
    }
}
