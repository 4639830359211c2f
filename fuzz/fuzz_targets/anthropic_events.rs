//! Fuzz target `anthropic_events`: see `hearth_protocol::fuzzing::anthropic_events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::anthropic_events(data);
});
