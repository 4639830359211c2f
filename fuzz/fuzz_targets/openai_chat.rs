//! Fuzz target `openai_chat`: see `hearth_protocol::fuzzing::openai_chat`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::openai_chat(data);
});
