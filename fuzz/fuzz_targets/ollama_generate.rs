//! Fuzz target `ollama_generate`: see `hearth_protocol::fuzzing::ollama_generate`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::ollama_generate(data);
});
