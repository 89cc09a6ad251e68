//! What the CLI's integration tests share: the binary, the preload library
//! beside it, and whether userfaultfd can be opened here. Each test file
//! uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn uzswap() -> &'static str {
    env!("CARGO_BIN_EXE_uzswap")
}

/// The preload library next to the binary. `cargo test` builds the
/// workspace's libraries too; a lone `-p uzswap-cli` run does not, so it
/// is built here then.
pub fn preload() -> PathBuf {
    let p = Path::new(uzswap()).with_file_name("libuzswap_preload.so");
    if !p.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", "uzswap-preload"])
            .status()
            .expect("cargo");
        assert!(st.success(), "building the preload library failed");
        assert!(p.exists(), "{} missing after the build", p.display());
    }
    p
}

/// Whether a uzswap instance (and so userfaultfd) can be made here; the
/// reason is printed when not.
pub fn userfaultfd_works() -> bool {
    match uzswap::Uzswap::new(uzswap::UzswapConfig::default()) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipping: {e}");
            false
        }
    }
}
