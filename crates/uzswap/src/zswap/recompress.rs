//! recompress: give a cold entry a second, denser compression before it is
//! written back (zram: `recompress` with its `recomp_algorithm`).
//!
//! # Why
//! Stores sit on the fault-and-evict path, so they use a fast compressor
//! (lz4: ~1.8:1 on the benchmarks' pages). When the cold set does not fit
//! the pool at that density, the shrinker writes entries back, and each one
//! costs a device read on its next fault (300-400 µs here), while a page in
//! zstd form decodes in under 10 µs and takes a third to a half of the
//! space. So an entry that reaches the LRU's cold end is recompressed with
//! the dense compressor (`ZswapConfig::recompress`) and goes back to the
//! tail, a second generation; it is written back only when the walk meets
//! it again. An entry loaded soon after it was stored never pays for the
//! dense compressor; one that stays cold pays once.
//!
//! # Protocol (within a `writeback` LRU walk, one shard)
//! 1. Under the shard lock the walk isolates an unreferenced entry that
//!    [`Zswap::wants_recompress`], exactly as it isolates one for
//!    writeback: its object is copied out, its node is gone, its
//!    `lru_seq` is kept.
//! 2. No lock held: decode the copy (which verifies its checksum: a corrupt
//!    object is left as it is, for its load to report), compress the page
//!    with the dense compressor, and store the new object in the pool. A
//!    dense form that is not at least 1/8 smaller is not kept.
//! 3. Under the shard lock again: an entry with the same `lru_seq` and
//!    handle is switched to the new object (or, where nothing was gained,
//!    left on the old one), marked `recompressed` and queued at the LRU
//!    tail. An entry loaded, invalidated or replaced meanwhile is left
//!    alone and the new object freed.
//! 4. After unlocking, the old objects of switched entries are freed.
//!
//! Lock order: only the shard lock, never held across compression or pool
//! allocation (the copy-out of step 1 reads the pool under it, as in
//! writeback). An object is freed only by whoever took its entry's handle
//! out of the tree under the shard lock, so the old object of a switched
//! entry has no other reader or freer.

use super::entry::{checksum, Payload, ZswapEntry};
use super::stats::Counters;
use super::writeback::Candidate;
use super::Zswap;
use crate::compress::CompressCtx;
use crate::PAGE_SIZE;

/// What one step-3 outcome is for a candidate.
enum Outcome {
    /// The new object, its length and checksum.
    Dense(crate::zpool::Handle, u16, u32),
    /// Keep the old object (no gain, or a corrupt copy): mark and requeue.
    Keep,
}

impl Zswap {
    /// Is `e` due for its pass through the dense compressor: a pool object
    /// of the store compressor that has not had it yet.
    pub(super) fn wants_recompress(&self, e: &ZswapEntry) -> bool {
        self.dense.is_some()
            && !e.recompressed
            && matches!(e.payload, Payload::Pool { comp: Some(id), .. }
                if id == self.engine.compressor().id())
    }

    /// Steps 2-4 for candidates isolated from shard `idx`. Returns the
    /// entries switched to a dense object and the object bytes that saved.
    pub(super) fn recompress_batch(
        &self,
        idx: usize,
        batch: Vec<Candidate>,
        ctx: &mut dyn CompressCtx,
    ) -> (u64, u64) {
        let dense = self
            .dense
            .as_ref()
            .expect("recompress without a dense compressor");
        let dense_id = dense.compressor().id();
        let mut page = vec![0u8; PAGE_SIZE];
        let mut out = vec![0u8; 2 * PAGE_SIZE];
        let outcomes: Vec<Outcome> = dense.with_ctx(|d| {
            batch
                .iter()
                .map(|c| {
                    let obj = &c.data[..c.len as usize];
                    if self
                        .decode(c.key, c.csum, c.comp, obj, &mut page, ctx)
                        .is_err()
                    {
                        return Outcome::Keep;
                    }
                    let Ok(len) = d.compress(&page, &mut out) else {
                        return Outcome::Keep;
                    };
                    if len * 8 > c.len as usize * 7 {
                        Counters::add(&self.counters.recompress_poor, 1);
                        return Outcome::Keep;
                    }
                    let obj = &out[..len];
                    match self.pool.store(obj) {
                        Ok(h) => Outcome::Dense(h, len as u16, checksum(c.key, obj)),
                        Err(_) => Outcome::Keep,
                    }
                })
                .collect()
        });

        let mut switched: Vec<(ZswapEntry, ZswapEntry)> = Vec::new();
        let mut unused = Vec::new();
        let mut saved = 0u64;
        {
            let mut g = self.tree.lock_index(idx);
            for (c, o) in batch.iter().zip(&outcomes) {
                let same = |e: &ZswapEntry| e.lru_seq == c.seq && e.handle() == Some(c.handle);
                let Some(e) = g.get_mut(c.key).filter(|e| same(e)) else {
                    if let Outcome::Dense(h, ..) = *o {
                        unused.push(h);
                    }
                    continue;
                };
                let old = *e;
                e.recompressed = true;
                if let Outcome::Dense(handle, len, csum) = *o {
                    e.payload = Payload::Pool {
                        handle,
                        len,
                        comp: Some(dense_id),
                    };
                    e.csum = csum;
                    switched.push((old, *e));
                    saved += u64::from(c.len - len);
                }
                g.requeue(c.key);
            }
        }
        for h in unused {
            self.pool.free(h);
        }
        for (old, new) in &switched {
            self.account_remove(old);
            self.release(old);
            self.account_add(new);
        }
        let n = switched.len() as u64;
        Counters::add(&self.counters.recompressed_pages, n);
        (n, saved)
    }
}
