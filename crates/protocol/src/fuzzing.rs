//! The decoders of untrusted input, as fuzzing drives them: one function per target, taking
//! any bytes, that must return (never panic, never allocate from a claimed length) and checks
//! what every answer must satisfy. `fuzz/` (cargo fuzz) and the corpus replay test in
//! `tests/fuzz_corpus.rs` both call [`run`], so a crash the fuzzer found is replayed by
//! `make test` on stable Rust once its input is in the corpus.

mod agent;
mod writers;

pub use agent::{anthropic_count_tokens, anthropic_messages, responses_request, responses_store};
pub use writers::{anthropic_events, responses_events};

use crate::{audio, auth_ws, batch, cluster, gguf, media, ollama, openai, streaming, worker};

/// Every target, by the name of its corpus folder (`fuzz/corpus/<name>`).
pub const TARGETS: &[&str] = &[
    "worker_frames",
    "batch_message",
    "streaming_message",
    "auth_ws_message",
    "openai_chat",
    "openai_completion",
    "gguf_header",
    "cluster_message",
    "ollama_chat",
    "ollama_generate",
    "ollama_embed",
    "image_decode",
    "audio_decode",
    "anthropic_messages",
    "anthropic_count_tokens",
    "anthropic_events",
    "responses_request",
    "responses_events",
    "responses_store",
];

/// Run `target` on `data`. Unknown names are a programming error (they panic).
pub fn run(target: &str, data: &[u8]) {
    match target {
        "worker_frames" => worker_frames(data),
        "batch_message" => batch_message(data),
        "streaming_message" => streaming_message(data),
        "auth_ws_message" => auth_ws_message(data),
        "openai_chat" => openai_chat(data),
        "openai_completion" => openai_completion(data),
        "gguf_header" => gguf_header(data),
        "cluster_message" => cluster_message(data),
        "ollama_chat" => ollama_chat(data),
        "ollama_generate" => ollama_generate(data),
        "ollama_embed" => ollama_embed(data),
        "image_decode" => image_decode(data),
        "audio_decode" => audio_decode(data),
        "anthropic_messages" => anthropic_messages(data),
        "anthropic_count_tokens" => anthropic_count_tokens(data),
        "anthropic_events" => anthropic_events(data),
        "responses_request" => responses_request(data),
        "responses_events" => responses_events(data),
        "responses_store" => responses_store(data),
        other => panic!("no fuzz target {other}"),
    }
}

/// Binary frames both ways, and text frames from either side.
pub fn worker_frames(data: &[u8]) {
    if let Ok(frame) = worker::decode_binary(data) {
        assert_eq!(frame.payload.len() + 4, data.len());
        // A data frame made from what was decoded decodes to the same thing.
        if let Ok(text) = std::str::from_utf8(frame.payload) {
            let again = worker::encode_data(frame.id, text);
            if !text.is_empty() {
                assert_eq!(again, data);
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = worker::parse_hub_text(text);
        let _ = worker::parse_worker_text(text);
    }
}

pub fn batch_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(request) = batch::parse_message(text) {
        assert!(!request.entries.is_empty());
        assert!(request.entries.len() <= batch::MAX_BATCH_PROMPTS);
        // A request id names at most one entry.
        let mut ids = std::collections::HashSet::new();
        for entry in &request.entries {
            let id = match entry {
                Ok(p) => Some(&p.request_id),
                Err(e) => e.request_id.as_ref(),
            };
            if let Some(id) = id {
                assert!(ids.insert(id.clone()), "request id {id} twice");
            }
        }
        if let Ok(options) = &request.options {
            let _ = options
                .generation_config()
                .validate(&batch::BatchDefaults::default(), Some(512));
        }
    }
}

pub fn streaming_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(streaming::ClientMessage::Config(c)) = streaming::parse_client_message(text) {
        let _ = c
            .parameters
            .to_raw(None)
            .validate(&Default::default(), Some(512));
    }
}

pub fn auth_ws_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let check = |m: &auth_ws::ClientMessage| {
        if let auth_ws::ClientMessage::Generate(g) = m {
            let _ = g.options.raw.validate(&Default::default(), Some(512));
        }
        if let Some(id) = m.id() {
            assert!(
                id.key().len() <= auth_ws::MAX_ID_BYTES || matches!(id, auth_ws::WireId::Number(_))
            );
        }
    };
    match auth_ws::parse_text(text) {
        Ok(auth_ws::Frame::One(m)) => check(&m),
        Ok(auth_ws::Frame::Batch(Ok(items))) => {
            assert!(items.len() <= auth_ws::MAX_BATCH_MESSAGES);
            items.iter().flatten().for_each(check);
        }
        _ => {}
    }
}

pub fn openai_chat(data: &[u8]) {
    if let Ok(body) = openai::parse_body::<openai::ChatCompletionBody>(data) {
        if let Ok(req) = body.validate(Some(512)) {
            assert!(req.params.max_tokens.is_none_or(|m| (1..=512).contains(&m)));
            assert!((0.0..=2.0).contains(&req.params.temperature));
        }
    }
}

pub fn openai_completion(data: &[u8]) {
    if let Ok(body) = openai::parse_body::<openai::CompletionBody>(data) {
        let _ = body.validate(Some(512));
    }
}

/// `/api/chat`, and the input as a `keep_alive` duration string.
pub fn ollama_chat(data: &[u8]) {
    if let Ok(body) = ollama::parse_body::<ollama::ChatBody>(data) {
        if let Ok(chat) = body.validate(Some(512)) {
            assert!(!chat.model.trim().is_empty());
            assert!(chat
                .params
                .max_tokens
                .is_none_or(|m| (1..=512).contains(&m)));
            assert!(chat.num_ctx.is_none_or(|n| (1..=512).contains(&n)));
            assert!((0.0..=2.0).contains(&chat.params.temperature));
            for m in &chat.messages {
                assert!(["system", "user", "assistant", "tool"].contains(&m.role.as_str()));
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let value = serde_json::Value::String(text.to_owned());
        if let Ok(Some(ollama::KeepAlive::Forever)) = ollama::KeepAlive::parse(Some(&value)) {
            assert!(text.starts_with('-'));
        }
    }
}

pub fn ollama_generate(data: &[u8]) {
    if let Ok(body) = ollama::parse_body::<ollama::GenerateBody>(data) {
        if let Ok(generate) = body.validate(Some(512)) {
            assert!(generate
                .params
                .max_tokens
                .is_none_or(|m| (1..=512).contains(&m)));
            if generate.raw {
                assert!(generate.system.is_none() && generate.context.is_empty());
            }
            assert!(!generate.messages().is_empty());
        }
    }
}

/// `/api/embed` and the older `/api/embeddings`.
pub fn ollama_embed(data: &[u8]) {
    if let Ok(body) = ollama::parse_body::<ollama::EmbedBody>(data) {
        if let Ok(embed) = body.validate() {
            assert!(embed.inputs.len() <= crate::limits::MAX_EMBEDDING_INPUTS);
        }
    }
    if let Ok(body) = ollama::parse_body::<ollama::EmbeddingsBody>(data) {
        if let Ok(embed) = body.validate() {
            assert!(embed.inputs.len() <= 1);
        }
    }
}

pub fn gguf_header(data: &[u8]) {
    if let Ok(info) = gguf::GgufInfo::parse(data) {
        // Nothing read can be longer than the input.
        assert!(info.architecture.len() <= data.len());
        assert!(info
            .chat_template
            .as_ref()
            .is_none_or(|t| t.len() <= data.len()));
    }
}

/// An image's file as a client sent it (PNG, JPEG, GIF, WebP, or anything else): decoded
/// within the pixel limit, or refused.
pub fn image_decode(data: &[u8]) {
    if let Ok(p) = media::Image(data.to_vec()).decode() {
        let pixels = u64::from(p.width) * u64::from(p.height);
        assert!(pixels <= media::MAX_IMAGE_PIXELS);
        assert_eq!(p.rgb.len() as u64, pixels * 3);
    }
}

/// An audio clip as a client sent it (WAV, MP3, or anything else): decoded within the length
/// limit, or refused.
pub fn audio_decode(data: &[u8]) {
    if let Ok(samples) = audio::Audio(data.to_vec()).decode_mono(16_000) {
        assert!(samples.len() as u64 <= u64::from(audio::MAX_AUDIO_SECONDS) * 16_000 + 16_000);
    }
}

/// A LAN peer's frame: whatever decodes is written back, in the shape it came in, as the same
/// message.
pub fn cluster_message(data: &[u8]) {
    if let Ok((message, shape)) = cluster::decode(data) {
        let again = cluster::decode(&cluster::encode(&message, shape));
        assert_eq!(again, Ok((message, shape)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_takes_empty_and_random_input() {
        let mut x: u32 = 0x9E37_79B9;
        for target in TARGETS.iter() {
            run(target, b"");
            for len in [1, 3, 4, 7, 64, 300] {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u8
                    })
                    .collect();
                run(target, &bytes);
            }
        }
    }

    #[test]
    fn targets_awaiting_a_corpus_take_valid_requests() {
        for (target, body) in [
            (
                "ollama_chat",
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":-1,"num_ctx":256},"keep_alive":"5m"}"#,
            ),
            ("ollama_chat", "-1h30m"),
            (
                "ollama_generate",
                r#"{"model":"m","prompt":"[INST] hi [/INST]","raw":true,"format":"json"}"#,
            ),
            (
                "ollama_generate",
                r#"{"model":"m","prompt":"hi","system":"s","context":[1,2]}"#,
            ),
            (
                "ollama_embed",
                r#"{"model":"m","input":["a","b"],"dimensions":2}"#,
            ),
            ("ollama_embed", r#"{"model":"m","prompt":"a"}"#),
        ] {
            run(target, body.as_bytes());
        }
    }
}
