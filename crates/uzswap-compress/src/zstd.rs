//! zstd backend.
