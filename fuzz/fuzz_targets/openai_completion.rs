//! Fuzz target `openai_completion`: see `hearth_protocol::fuzzing::openai_completion`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::openai_completion(data);
});
