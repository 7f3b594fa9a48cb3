#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gshare::fuzzing::relay_headers(data));
