//! Fuzz target `ollama_chat`: see `hearth_protocol::fuzzing::ollama_chat`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::ollama_chat(data);
});
