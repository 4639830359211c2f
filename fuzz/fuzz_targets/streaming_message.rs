//! Fuzz target `streaming_message`: see `hearth_protocol::fuzzing::streaming_message`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::streaming_message(data);
});
