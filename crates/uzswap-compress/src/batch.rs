//! The batch compression engine (seed 002): one API that runs many page
//! compressions at once on parallel workers, batch size 1..=32.

use crate::{CompressCtx, Compressor};
use std::sync::Arc;

/// The largest batch the engine accepts (seed 002: vm.compress-batchsize).
pub const MAX_BATCH: usize = 32;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Worker threads; 0 means one per online CPU.
    pub workers: usize,
    /// Pages per batch, 1..=MAX_BATCH.
    pub batch_size: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { workers: 0, batch_size: MAX_BATCH }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("batch size {0} out of range 1..={MAX_BATCH}")]
    BatchSize(usize),
    #[error("worker count {0} out of range")]
    Workers(usize),
}

/// Parallel compression engine. `Send + Sync`; many callers may submit at once.
pub struct BatchEngine {
    compressor: Arc<dyn Compressor>,
}

impl BatchEngine {
    pub fn new(compressor: Arc<dyn Compressor>, cfg: EngineConfig) -> Result<Self, BatchError> {
        let _ = cfg;
        Ok(BatchEngine { compressor })
    }

    pub fn compressor(&self) -> &Arc<dyn Compressor> {
        &self.compressor
    }

    pub fn batch_size(&self) -> usize {
        todo!("compress helper")
    }

    pub fn workers(&self) -> usize {
        todo!("compress helper")
    }

    /// Run `f(i, ctx)` for every `i` in `0..n`, spread over the workers (the
    /// caller participates), `batch_size` items per submitted batch. Returns
    /// when all `n` calls have returned. `f` must not panic.
    pub fn for_each<F>(&self, n: usize, f: F)
    where
        F: Fn(usize, &mut dyn CompressCtx) + Sync,
    {
        let _ = (n, f);
        todo!("compress helper")
    }

    /// Borrow a context on the calling thread (for loads and single stores).
    pub fn with_ctx<R>(&self, f: impl FnOnce(&mut dyn CompressCtx) -> R) -> R {
        let _ = f;
        todo!("compress helper")
    }
}
