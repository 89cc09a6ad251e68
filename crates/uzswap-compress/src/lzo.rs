//! lzo backend.
