//! Every wire parser on arbitrary bytes (body: `uet::fuzzing::wire_parse`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uet::fuzzing::wire_parse(data));
