//! Fuzz target `auth_ws_message`: see `hearth_protocol::fuzzing::auth_ws_message`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hearth_protocol::fuzzing::auth_ws_message(data);
});
