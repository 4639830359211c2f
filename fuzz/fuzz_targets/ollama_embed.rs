//! Fuzz target `ollama_embed`: see `hearth_protocol::fuzzing::ollama_embed`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::ollama_embed(data);
});
