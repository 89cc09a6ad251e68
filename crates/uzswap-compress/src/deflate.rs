//! deflate backend.
