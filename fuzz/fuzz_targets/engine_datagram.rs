//! The engine's datagram input after a valid exchange (body:
//! `uet::fuzzing::engine_datagram`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uet::fuzzing::engine_datagram(data));
