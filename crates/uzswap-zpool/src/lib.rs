//! A zsmalloc-style allocator for compressed objects.
//!
//! (Module comment with the design, lock order and span state machine: zpool helper.)

/// The page size the pool's spans are built from.
pub const PAGE_SIZE: usize = 4096;

/// An opaque handle to one object. Stable across compaction (the pool moves
/// objects, never handles).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub u64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    #[error("object size {0} out of range 1..={PAGE_SIZE}")]
    BadSize(usize),
    #[error("out of memory")]
    NoMemory,
}

/// Per-class and whole-pool figures.
#[derive(Clone, Debug, Default)]
pub struct PoolStats {
    /// Bytes of memory the pool holds (spans), the figure zswap charges.
    pub pool_total_size: u64,
    /// Bytes handed out to live objects (their requested sizes).
    pub used_bytes: u64,
    pub objects: u64,
    pub spans: u64,
    pub classes: Vec<ClassStats>,
}

#[derive(Clone, Debug, Default)]
pub struct ClassStats {
    pub size: u32,
    pub pages_per_span: u32,
    pub objs_per_span: u32,
    pub objects: u64,
    pub spans: u64,
}

/// Result of one compaction pass.
#[derive(Clone, Debug, Default)]
pub struct CompactStats {
    pub objects_moved: u64,
    pub spans_freed: u64,
}

/// The pool. `Send + Sync`: all methods take `&self`.
pub struct ZsPool {}

impl ZsPool {
    pub fn new() -> Self {
        todo!("zpool helper")
    }
    /// Allocate an object of `size` bytes (1..=PAGE_SIZE) and copy `data`
    /// (`data.len() == size`) into it.
    pub fn store(&self, data: &[u8]) -> Result<Handle, AllocError> {
        let _ = data;
        todo!("zpool helper")
    }
    /// Run `f` on the object's bytes (exactly the stored length).
    pub fn read<R>(&self, h: Handle, f: impl FnOnce(&[u8]) -> R) -> R {
        let _ = (h, f);
        todo!("zpool helper")
    }
    /// Free an object. The handle must be live.
    pub fn free(&self, h: Handle) {
        let _ = h;
        todo!("zpool helper")
    }
    /// Move objects out of sparse spans and free the emptied spans.
    pub fn compact(&self) -> CompactStats {
        todo!("zpool helper")
    }
    pub fn total_size(&self) -> u64 {
        todo!("zpool helper")
    }
    pub fn stats(&self) -> PoolStats {
        todo!("zpool helper")
    }
}

impl Default for ZsPool {
    fn default() -> Self {
        Self::new()
    }
}
