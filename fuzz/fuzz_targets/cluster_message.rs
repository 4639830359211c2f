//! Fuzz target `cluster_message`: see `hearth_protocol::fuzzing::cluster_message`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::cluster_message(data);
});
