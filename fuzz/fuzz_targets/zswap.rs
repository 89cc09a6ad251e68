//! libFuzzer entry of the `zswap` target (`uzswap_fuzz::zswap` says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uzswap_fuzz::zswap(data));
