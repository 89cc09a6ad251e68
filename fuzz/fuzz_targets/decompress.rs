//! libFuzzer entry of the `decompress` target (`uzswap_fuzz::decompress` says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uzswap_fuzz::decompress(data));
