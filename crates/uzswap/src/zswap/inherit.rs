//! inherit: the entries a forked child takes over from its copy of the
//! parent's cache (kernel: `copy_pte_range`, whose `swap_duplicate` gives
//! the child a share of each swap entry instead of a copy of the page).
//!
//! After `fork(2)` the child holds a copy-on-write copy of everything the
//! parent's instance had, its pool's objects included. The parent's
//! instance is dead there (its threads were the parent's), so the child
//! takes the entries of its pages into an instance of its own: a
//! same-filled entry as it is, a pool entry as a reference to its object in
//! that copy (`Payload::Inherited`). No object is copied or decompressed at
//! the fork, and the objects stay shared with the parent until either
//! writes over them (the parent reusing a freed slot copies one page, in
//! its own process). A written-back entry is not taken: the parent frees
//! and reuses its slot as it pleases, so the parent brings such pages in
//! before the fork (`region::pin`, `prepare_fork_sharing`).
//!
//! Locking: the parent's shard lock, then this instance's, never both at
//! once. The parent's instance must be quiesced at the fork (no lock held,
//! no operation half done: `compress::quiesce`) and never run again.

use super::entry::{Payload, SwapEntry};
use super::Zswap;

impl Zswap {
    /// Take the entries of the keys `take` names among `first .. first +
    /// n` (one aligned 2 MiB group at most) from `parent`, under the same
    /// keys: each must be stored there, none written back. Returns the
    /// pages taken; on error nothing was taken. (The region layer names
    /// only the pages it has not mapped: an entry of a mapped page would
    /// be taken for a clean copy of it, which the child's page, writable
    /// since the fork, is not.)
    ///
    /// # Safety
    /// `parent` is an instance this process inherited at a fork from the
    /// process that ran it, quiesced there at the fork, and nothing else
    /// in this process calls it, changes it or frees its memory, ever: the
    /// entries taken point into its pool's memory for the life of the
    /// process.
    pub unsafe fn inherit(
        &self,
        parent: &Zswap,
        first: SwapEntry,
        n: u64,
        take: impl Fn(u64) -> bool,
    ) -> Result<u64, String> {
        let mut taken = Vec::with_capacity(n as usize);
        {
            let shard = parent.tree.lock(first, n);
            for i in (0..n).filter(|&i| take(i)) {
                let key = first.offset(i);
                let Some(e) = shard.get(key) else {
                    return Err(format!("page {key:?} is not stored in the parent's cache"));
                };
                let payload = match e.payload {
                    Payload::SameFilled(v) => Payload::SameFilled(v),
                    Payload::Pool { handle, len, comp } => {
                        let (addr, got) = parent
                            .pool
                            .try_read(handle, |obj| (obj.as_ptr() as usize, obj.len()))
                            .map_err(|e| format!("page {key:?}: {e}"))?;
                        if got < len as usize {
                            return Err(format!(
                                "page {key:?}: object of {got} bytes, entry says {len}"
                            ));
                        }
                        Payload::Inherited { addr, len, comp }
                    }
                    Payload::Inherited { addr, len, comp } => {
                        Payload::Inherited { addr, len, comp }
                    }
                    Payload::Device { .. } => {
                        return Err(format!(
                            "page {key:?} is written back in the parent's cache"
                        ));
                    }
                };
                taken.push((key, super::entry::ZswapEntry { payload, ..*e }));
            }
        }
        let mut replaced = Vec::new();
        let mut shard = self.tree.lock(first, n);
        for &(key, e) in &taken {
            // A fresh instance holds nothing under a parent's keys; one
            // taken twice replaces the first.
            replaced.extend(shard.insert(key, e));
        }
        drop(shard);
        for old in &replaced {
            self.account_remove(old);
            self.release(old);
        }
        for (_, e) in &taken {
            self.account_add(e);
        }
        Ok(taken.len() as u64)
    }
}
