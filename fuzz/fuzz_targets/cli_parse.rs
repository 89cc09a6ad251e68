//! libFuzzer entry of the `cli_parse` target (`uzswap_fuzz::cli_parse` says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uzswap_fuzz::cli_parse(data));
