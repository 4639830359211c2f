//! Fuzz target `anthropic_count_tokens`: see `hearth_protocol::fuzzing::anthropic_count_tokens`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::anthropic_count_tokens(data);
});
