//! Fuzz target `gguf_header`: see `hearth_protocol::fuzzing::gguf_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::gguf_header(data);
});
