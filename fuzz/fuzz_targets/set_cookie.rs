#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gshare::fuzzing::set_cookie(data));
