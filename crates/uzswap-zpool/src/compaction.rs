//! Compaction (mm/zsmalloc.c `__zs_compact`, `migrate_zspage`): per class,
//! drain the sparsest spans into the fullest non-full ones and return the
//! emptied spans' pages; then give every cached free page run back to the OS.
//!
//! Locking: the class lock is held for one source span at a time (stores and
//! frees of the class wait that long; other classes are untouched). The source
//! span is write-locked with `try_write_lock` only: a span someone is reading
//! is skipped for this pass rather than waited for, so compaction never
//! blocks a reader and never waits on one while holding the class lock.
//! Destination slots need no span lock: they are free slots no reader can
//! have validated (see the crate comment).

use std::sync::atomic::Ordering;

use crate::handle::{decode, encode, Loc};
use crate::stats::CompactStats;
use crate::ZsPool;

impl ZsPool {
    /// Move objects out of sparse spans and free the emptied spans, then
    /// give all cached free page runs back to the OS.
    /// Handles stay valid; concurrent `read`s see each object either at its
    /// old place or its new one, never half-moved.
    pub fn compact(&self) -> CompactStats {
        let mut stats = CompactStats::default();
        for ci in 0..self.classes.len() {
            self.compact_class(ci, &mut stats);
        }
        stats.bytes_freed += self.pages.trim(0);
        stats
    }

    fn compact_class(&self, ci: usize, stats: &mut CompactStats) {
        let class = &self.classes[ci];
        let layout = class.layout;
        let objs = layout.objs_per_span;
        let stride = layout.size as usize;

        // Deferred slots whose readers have left become reusable first, so
        // they count as room below.
        {
            let mut inner = class.inner.lock();
            for local in inner.spans_with_deferred() {
                let id = inner.span(local).id;
                if self.span_slot(id).lock.readers() == 0 {
                    inner.reclaim(local, objs);
                }
            }
        }

        let mut busy: Vec<u32> = Vec::new();
        loop {
            let mut inner = class.inner.lock();
            // zs_can_compact: only worth it while the free slots add up to at
            // least one whole span.
            if inner.nspans * u64::from(objs) - inner.occupied < u64::from(objs) {
                return;
            }
            let Some(src) = inner.sparsest(|l| busy.contains(&l)) else {
                return;
            };
            let src_id = inner.span(src).id;
            let slot = self.span_slot(src_id);
            if !slot.lock.try_write_lock() {
                busy.push(src);
                continue;
            }
            // Isolated: off the fullness lists, so it is never its own
            // destination and no store lands in it meanwhile.
            inner.detach(src);
            // No reader holds the span now, so its deferred slots are free.
            let n = inner.span_mut(src).reclaim_deferred();
            inner.occupied -= u64::from(n);

            let src_base = inner.span(src).mem.as_ptr();
            for s in 0..objs {
                let Some(index) = inner.span(src).owner(s) else {
                    continue;
                };
                let Some(dst) = inner.alloc_candidate() else {
                    break;
                };
                let entry = self
                    .handles
                    .entry(index)
                    .expect("owned handle index has an entry");
                let (gen, old) = decode(entry.load(Ordering::Relaxed))
                    .expect("a slot's owner handle is allocated");
                debug_assert_eq!((old.span, old.slot), (src_id, s));
                let (dst_id, ds) = {
                    let d = inner.span_mut(dst);
                    let ds = d.take_slot().expect("a span below full has a free slot");
                    // SAFETY: source and destination are distinct spans of
                    // this class (the source is detached), both slots lie
                    // inside their page runs. The source is write-locked, so no
                    // reader is in it; the destination slot is free and
                    // undeferred, so no reader can be looking at it; the class
                    // lock excludes every other writer.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src_base.add(s as usize * stride),
                            d.mem.as_ptr().add(ds as usize * stride),
                            old.size as usize,
                        );
                    }
                    d.fill_slot(ds, index);
                    (d.id, ds)
                };
                inner.regroup(dst, objs);
                // Same generation, new place: the handle is unchanged. A
                // reader that loaded the old word is spinning on the source's
                // write lock and will see this store once it gets in.
                entry.store(
                    encode(
                        gen,
                        Loc {
                            span: dst_id,
                            slot: ds,
                            ..old
                        },
                    ),
                    Ordering::Release,
                );
                // One slot became occupied in dst, one freed in src: the
                // class's occupied total is unchanged.
                inner.span_mut(src).release_slot(s, false);
                stats.objects_moved += 1;
            }

            if inner.span(src).live == 0 {
                let data = inner.remove_span(src);
                drop(inner);
                let (id, released) = self.release_locked(slot, data, false);
                slot.lock.write_unlock();
                self.spans.free_id(id);
                stats.spans_freed += 1;
                stats.bytes_freed += released;
            } else {
                // Ran out of destinations: every other span is full.
                inner.attach(src, objs);
                slot.lock.write_unlock();
                return;
            }
        }
    }
}
