//! Size classes and fullness groups (mm/zsmalloc.c: `size_class`,
//! `calculate_zspage_chain_size`, `can_merge`, `get_fullness_group`).
//!
//! Every request is rounded up to a multiple of [`ZS_SIZE_CLASS_DELTA`]; that
//! rounded size picks a class. Each class carves spans of `pages_per_span`
//! contiguous pages into `objs_per_span` equal slots, the span length chosen
//! per class (1..=max pages) to minimise the tail a span cannot use. Two sizes
//! whose spans would hold the same number of objects in the same number of
//! pages are served by one class (the larger size): they occupy memory
//! identically, and fewer classes means fewer half-filled spans.
//!
//! The geometry is arithmetic, built once per pool. [`SizeClass`] holds a
//! class's runtime state behind its lock: spans, fullness lists, counters,
//! and a cache of free handle indices. Nothing in here takes another lock.

use parking_lot::Mutex;

use crate::span::{SpanData, NO_GROUP};
use crate::PAGE_SIZE;

/// Step between class sizes, as the kernel's `ZS_SIZE_CLASS_DELTA`.
pub const ZS_SIZE_CLASS_DELTA: usize = PAGE_SIZE >> 8;
/// Smallest slot. The kernel needs 32 bytes to keep a free-list link and the
/// handle inside free/used objects; spans here keep both out of line, so the
/// smallest slot is one step.
pub const ZS_MIN_ALLOC_SIZE: usize = ZS_SIZE_CLASS_DELTA;
/// Number of rounded sizes, `16, 32, ..., PAGE_SIZE`.
pub(crate) const NR_SIZES: usize = PAGE_SIZE / ZS_SIZE_CLASS_DELTA;
/// Default longest span in pages. The kernel's default chain size is 8 too;
/// against 4 pages it lifts the best-case fill for 600..2000-byte objects from
/// about 0.96 to 0.98 (see `examples/space.rs`).
pub const DEFAULT_MAX_PAGES_PER_SPAN: usize = 8;
/// Upper bound on the span length a pool may be configured with. Keeps
/// `objs_per_span` within the 12 bits of a handle entry's slot field.
pub const MAX_PAGES_PER_SPAN_LIMIT: usize = 16;

/// Fullness groups, by fraction of slots occupied: 0 = empty, 1..=10 =
/// 0-9%, 10-19% .. 90-99%, 11 = full (the kernel's `ZS_INUSE_RATIO_*`).
pub(crate) const NR_FULLNESS_GROUPS: usize = 12;
pub(crate) const FULLNESS_EMPTY: usize = 0;
pub(crate) const FULLNESS_FULL: usize = NR_FULLNESS_GROUPS - 1;

/// Geometry of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClassLayout {
    /// Slot size (stride) in bytes: the largest request the class serves.
    pub size: u32,
    pub pages_per_span: u32,
    pub objs_per_span: u32,
}

impl ClassLayout {
    #[cfg(test)]
    pub(crate) fn span_bytes(&self) -> usize {
        self.pages_per_span as usize * PAGE_SIZE
    }
}

/// Span length for a slot size: the chain of 1..=max_pages pages whose unused
/// tail is the smallest fraction of the span (ties go to the shorter span,
/// which frees sooner and fragments less).
pub(crate) fn pages_per_span(size: usize, max_pages: usize) -> usize {
    let mut best_pages = 1;
    let mut best_waste = PAGE_SIZE % size;
    for pages in 1..=max_pages {
        let bytes = pages * PAGE_SIZE;
        let waste = bytes % size;
        // waste / bytes < best_waste / best_bytes, without floats.
        if waste * (best_pages * PAGE_SIZE) < best_waste * bytes {
            best_pages = pages;
            best_waste = waste;
        }
    }
    best_pages
}

/// All classes of a pool plus the map from rounded-size index to class.
pub(crate) struct ClassTable {
    pub layouts: Vec<ClassLayout>,
    /// `size_to_class[(size - 1) / DELTA]` is the class serving `size`.
    size_to_class: Box<[u16; NR_SIZES]>,
}

impl ClassTable {
    pub(crate) fn new(max_pages: usize) -> Self {
        assert!((1..=MAX_PAGES_PER_SPAN_LIMIT).contains(&max_pages));
        // Walk from the largest size down, as zs_create_pool does, so a run of
        // mergeable sizes collapses into the class of its largest member.
        let mut rev: Vec<ClassLayout> = Vec::new();
        let mut rev_map = [0u16; NR_SIZES];
        for idx in (0..NR_SIZES).rev() {
            let size = ((idx + 1) * ZS_SIZE_CLASS_DELTA).max(ZS_MIN_ALLOC_SIZE);
            let pages = pages_per_span(size, max_pages);
            let objs = pages * PAGE_SIZE / size;
            let merge = rev.last().is_some_and(|c| {
                c.pages_per_span as usize == pages && c.objs_per_span as usize == objs
            });
            if !merge {
                rev.push(ClassLayout {
                    size: size as u32,
                    pages_per_span: pages as u32,
                    objs_per_span: objs as u32,
                });
            }
            rev_map[idx] = (rev.len() - 1) as u16;
        }
        let n = rev.len();
        let layouts: Vec<ClassLayout> = rev.into_iter().rev().collect();
        let mut size_to_class = Box::new([0u16; NR_SIZES]);
        for (i, r) in rev_map.iter().enumerate() {
            size_to_class[i] = (n - 1 - *r as usize) as u16;
        }
        Self {
            layouts,
            size_to_class,
        }
    }

    /// Class index for a request of `size` bytes, `1..=PAGE_SIZE`.
    pub(crate) fn class_of(&self, size: usize) -> usize {
        debug_assert!((1..=PAGE_SIZE).contains(&size));
        self.size_to_class[(size - 1) / ZS_SIZE_CLASS_DELTA] as usize
    }
}

/// Fullness group of a span holding `occupied` of `cap` slots.
pub(crate) fn fullness_group(occupied: u32, cap: u32) -> usize {
    if occupied == 0 {
        FULLNESS_EMPTY
    } else if occupied >= cap {
        FULLNESS_FULL
    } else {
        1 + (occupied as usize * 10 / cap as usize).min(9)
    }
}

/// One class: its geometry and, under its lock, its spans and fullness
/// lists (the kernel's `struct size_class`).
pub(crate) struct SizeClass {
    pub layout: ClassLayout,
    pub inner: Mutex<ClassInner>,
}

impl SizeClass {
    pub(crate) fn new(layout: ClassLayout) -> Self {
        Self {
            layout,
            inner: Mutex::new(ClassInner::default()),
        }
    }
}

/// Everything the class lock protects. Counters here are exact under the
/// lock; the pool's atomic totals are their sums, updated alongside.
#[derive(Default)]
pub(crate) struct ClassInner {
    spans: Vec<Option<SpanData>>,
    free_locals: Vec<u32>,
    groups: [Vec<u32>; NR_FULLNESS_GROUPS],
    /// Free handle indices cached for this class's stores.
    pub handle_cache: Vec<u32>,
    pub objects: u64,
    pub used_bytes: u64,
    /// Slots occupied across all spans (live + deferred).
    pub occupied: u64,
    pub nspans: u64,
}

impl ClassInner {
    pub(crate) fn span(&self, local: u32) -> &SpanData {
        self.spans[local as usize]
            .as_ref()
            .expect("class span index names a live span")
    }

    pub(crate) fn span_mut(&mut self, local: u32) -> &mut SpanData {
        self.spans[local as usize]
            .as_mut()
            .expect("class span index names a live span")
    }

    /// Adopt a new span (detached; attach it once its first slot is taken).
    pub(crate) fn insert_span(&mut self, data: SpanData) -> u32 {
        self.nspans += 1;
        match self.free_locals.pop() {
            Some(l) => {
                self.spans[l as usize] = Some(data);
                l
            }
            None => {
                self.spans.push(Some(data));
                (self.spans.len() - 1) as u32
            }
        }
    }

    /// Drop a span from the class; it must be detached and empty of objects.
    pub(crate) fn remove_span(&mut self, local: u32) -> SpanData {
        let data = self.spans[local as usize]
            .take()
            .expect("class span index names a live span");
        debug_assert_eq!(data.group, NO_GROUP);
        debug_assert_eq!(data.live, 0);
        self.free_locals.push(local);
        self.nspans -= 1;
        self.occupied -= u64::from(data.occupied());
        data
    }

    /// Take a span off its fullness list (isolation for compaction or death).
    pub(crate) fn detach(&mut self, local: u32) {
        let (g, pos) = {
            let s = self.span(local);
            (s.group, s.pos)
        };
        if g == NO_GROUP {
            return;
        }
        let list = &mut self.groups[g as usize];
        list.swap_remove(pos as usize);
        if let Some(&moved) = list.get(pos as usize) {
            self.span_mut(moved).pos = pos;
        }
        self.span_mut(local).group = NO_GROUP;
    }

    /// Put a detached span on the list matching its fullness.
    pub(crate) fn attach(&mut self, local: u32, objs_per_span: u32) {
        let g = fullness_group(self.span(local).occupied(), objs_per_span);
        let list = &mut self.groups[g];
        list.push(local);
        let pos = (list.len() - 1) as u32;
        let s = self.span_mut(local);
        debug_assert_eq!(s.group, NO_GROUP);
        s.group = g as u8;
        s.pos = pos;
    }

    /// Move an attached span to the list its fullness now calls for.
    pub(crate) fn regroup(&mut self, local: u32, objs_per_span: u32) {
        let s = self.span(local);
        if s.group == NO_GROUP || s.group as usize == fullness_group(s.occupied(), objs_per_span) {
            return;
        }
        self.detach(local);
        self.attach(local, objs_per_span);
    }

    /// The span a new object should go to: the fullest one not full, so
    /// spans fill up and sparse ones drain (`find_get_zspage`).
    pub(crate) fn alloc_candidate(&self) -> Option<u32> {
        (1..FULLNESS_FULL)
            .rev()
            .find_map(|g| self.groups[g].last().copied())
    }

    /// The sparsest attached, non-full span not rejected by `skip`
    /// (`isolate_src_zspage`).
    pub(crate) fn sparsest(&self, skip: impl Fn(u32) -> bool) -> Option<u32> {
        (1..FULLNESS_FULL).find_map(|g| self.groups[g].iter().copied().find(|&l| !skip(l)))
    }

    /// Local indices of all spans with deferred slots.
    pub(crate) fn spans_with_deferred(&self) -> Vec<u32> {
        self.spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|s| s.deferred() > 0))
            .map(|(l, _)| l as u32)
            .collect()
    }

    /// Make a span's deferred slots reusable (caller saw it reader-free).
    pub(crate) fn reclaim(&mut self, local: u32, objs_per_span: u32) {
        let n = self.span_mut(local).reclaim_deferred();
        if n > 0 {
            self.occupied -= u64::from(n);
            self.regroup(local, objs_per_span);
        }
    }

    /// Number of spans per fullness group, for stats.
    pub(crate) fn fullness_histogram(&self) -> [u64; NR_FULLNESS_GROUPS] {
        let mut h = [0u64; NR_FULLNESS_GROUPS];
        for (i, g) in self.groups.iter().enumerate() {
            h[i] = g.len() as u64;
        }
        h
    }

    pub(crate) fn deferred_slots(&self) -> u64 {
        self.spans
            .iter()
            .flatten()
            .map(|s| u64::from(s.deferred()))
            .sum()
    }

    pub(crate) fn meta_bytes(&self) -> u64 {
        let spans: usize = self.spans.iter().flatten().map(SpanData::heap_bytes).sum();
        (spans
            + self.spans.capacity() * std::mem::size_of::<Option<SpanData>>()
            + self.handle_cache.capacity() * 4) as u64
    }

    /// Every span, for teardown.
    pub(crate) fn drain_spans(&mut self) -> impl Iterator<Item = SpanData> + '_ {
        self.spans.drain(..).flatten()
    }
}

#[cfg(test)]
impl ClassInner {
    /// Check every invariant of the class against its spans; returns the
    /// ids of its spans. `entry_of(index)` gives a handle index's entry word.
    pub(crate) fn check(&self, layout: ClassLayout, entry_of: impl Fn(u32) -> u64) -> Vec<u32> {
        use crate::handle::decode;
        let mut ids = Vec::new();
        let (mut objects, mut used, mut occupied, mut nspans) = (0u64, 0u64, 0u64, 0u64);
        for (local, s) in self.spans.iter().enumerate() {
            let Some(s) = s else { continue };
            nspans += 1;
            ids.push(s.id);
            assert!(s.live > 0, "a listed span holds objects");
            assert_ne!(s.group, NO_GROUP, "spans outside compaction are listed");
            assert_eq!(
                s.group as usize,
                fullness_group(s.occupied(), layout.objs_per_span)
            );
            assert_eq!(self.groups[s.group as usize][s.pos as usize], local as u32);
            let mut live = 0;
            for slot in 0..s.slots() {
                let Some(index) = s.owner(slot) else { continue };
                live += 1;
                let (_, loc) = decode(entry_of(index)).expect("owner's entry is allocated");
                assert_eq!((loc.span, loc.slot), (s.id, slot));
                assert!(loc.size <= layout.size);
                used += u64::from(loc.size);
            }
            assert_eq!(live, s.live);
            objects += u64::from(s.live);
            occupied += u64::from(s.occupied());
        }
        let listed: usize = self.groups.iter().map(Vec::len).sum();
        assert_eq!(listed as u64, nspans);
        assert_eq!(
            (objects, used, occupied, nspans),
            (self.objects, self.used_bytes, self.occupied, self.nspans)
        );
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_fits_its_class() {
        for max_pages in [1, 4, 8, 16] {
            let t = ClassTable::new(max_pages);
            let mut prev_size = 0;
            for c in &t.layouts {
                assert!(c.size > prev_size, "classes sorted and distinct");
                prev_size = c.size;
                assert!(c.objs_per_span >= 1 && c.objs_per_span <= 4096);
                assert!(c.objs_per_span as usize * c.size as usize <= c.span_bytes());
                assert!(c.pages_per_span as usize <= max_pages);
            }
            for size in 1..=PAGE_SIZE {
                let c = t.layouts[t.class_of(size)];
                assert!(c.size as usize >= size);
                // A class never serves a size that a smaller class could hold.
                let ci = t.class_of(size);
                if ci > 0 {
                    assert!((t.layouts[ci - 1].size as usize) < size);
                }
            }
            assert_eq!(t.layouts.last().unwrap().size as usize, PAGE_SIZE);
        }
    }

    #[test]
    fn merging_keeps_identical_geometry() {
        let t = ClassTable::new(DEFAULT_MAX_PAGES_PER_SPAN);
        assert!(t.layouts.len() < NR_SIZES, "some classes merge");
        for size in (ZS_SIZE_CLASS_DELTA..=PAGE_SIZE).step_by(ZS_SIZE_CLASS_DELTA) {
            let c = t.layouts[t.class_of(size)];
            let pages = pages_per_span(size, DEFAULT_MAX_PAGES_PER_SPAN);
            assert_eq!(c.pages_per_span as usize, pages);
            assert_eq!(c.objs_per_span as usize, pages * PAGE_SIZE / size);
        }
    }

    #[test]
    fn chain_size_minimises_tail() {
        // 1360 * 3 = 4080: one page wastes 16 bytes, the best possible.
        assert_eq!(pages_per_span(1360, 8), 1);
        // 3000 bytes: one page wastes 27%; 8 pages hold 10 objects (8.4%);
        // 7 pages hold 9 (5.8%) -- the fraction decides, not the page count.
        let p = pages_per_span(3008, 8);
        let waste = |p: usize| (p * PAGE_SIZE % 3008) as f64 / (p * PAGE_SIZE) as f64;
        for q in 1..=8 {
            assert!(waste(p) <= waste(q));
        }
        assert_eq!(pages_per_span(4096, 8), 1);
    }

    #[test]
    fn fullness_groups() {
        assert_eq!(fullness_group(0, 10), FULLNESS_EMPTY);
        assert_eq!(fullness_group(10, 10), FULLNESS_FULL);
        assert_eq!(fullness_group(1, 10), 2);
        assert_eq!(fullness_group(9, 10), 10);
        assert_eq!(fullness_group(1, 1000), 1);
    }
}
