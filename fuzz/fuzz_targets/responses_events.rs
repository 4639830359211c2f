//! Fuzz target `responses_events`: see `hearth_protocol::fuzzing::responses_events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::responses_events(data);
});
