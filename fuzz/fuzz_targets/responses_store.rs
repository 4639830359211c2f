//! Fuzz target `responses_store`: see `hearth_protocol::fuzzing::responses_store`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::responses_store(data);
});
