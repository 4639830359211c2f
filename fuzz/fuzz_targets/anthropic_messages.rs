//! Fuzz target `anthropic_messages`: see `hearth_protocol::fuzzing::anthropic_messages`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::anthropic_messages(data);
});
