//! Fuzz target `worker_frames`: see `hearth_protocol::fuzzing::worker_frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::worker_frames(data);
});
