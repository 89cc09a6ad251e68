//! libFuzzer entry of the `zpool` target (`uzswap_fuzz::zpool` says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uzswap_fuzz::zpool(data));
