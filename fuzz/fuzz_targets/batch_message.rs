//! Fuzz target `batch_message`: see `hearth_protocol::fuzzing::batch_message`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::batch_message(data);
});
