//! Fuzz target `audio_decode`: see `hearth_protocol::fuzzing::audio_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::audio_decode(data);
});
