//! The library half of the `uzswap` command: what other crates (the fuzz
//! targets) use of it. The command itself is `main.rs`.

pub mod parse;
pub mod redis_servers;
