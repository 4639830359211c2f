//! Fuzz target `responses_request`: see `hearth_protocol::fuzzing::responses_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::responses_request(data);
});
