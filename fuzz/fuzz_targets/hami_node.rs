#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gshare::fuzzing::hami_node(data));
