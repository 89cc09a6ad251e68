//! lz4 backend.
