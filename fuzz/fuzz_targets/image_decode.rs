//! Fuzz target `image_decode`: see `hearth_protocol::fuzzing::image_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::image_decode(data);
});
