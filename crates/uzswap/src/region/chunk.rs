//! The per-chunk state word: one `AtomicU32` per chunk in a dense array per
//! region. The low 3 bits are the state (see the machine in `region`'s top
//! comment); the flag bits above them (and a PARTIAL chunk's group mask)
//! ride along and are updated with the same compare-and-swap, so a state
//! change never loses a flag.

use std::sync::atomic::{AtomicU32, Ordering::*};

pub const UNTOUCHED: u32 = 0;
/// Mapped, writable, authoritative.
pub const RESIDENT: u32 = 1;
/// Mapped write-protected, and the pool holds an identical copy (loaded
/// with keep-copy, not written since): eviction just drops the pages.
pub const CLEAN: u32 = 2;
/// Owned by an evictor: write-protected, being stored, then zapped.
pub const EVICTING: u32 = 3;
/// Not mapped; the pool (or what it wrote back) is authoritative.
pub const STORED: u32 = 4;
/// Owned by a fault resolver or a hint: being installed or re-armed.
pub const BUSY: u32 = 5;
/// Some of its pages mapped write-protected (the groups in the word's
/// mask, see [`PART`]) with their copies kept clean in the pool, the other
/// pages stored: a random read fault costs one group's decompression (one
/// page in chunks of up to 16 pages), not the chunk's.
pub const PARTIAL: u32 = 6;
pub const STATE_MASK: u32 = 0x7;

/// Referenced: set when the chunk is faulted in, or by an accessed-bit
/// sample that saw it read (`young.rs`, a CAS that keeps the state); CLOCK
/// clears it once before the chunk becomes a victim.
pub const REF: u32 = 1 << 3;
/// Activated by a workingset refault: survives one more CLOCK pass.
pub const ACTIVE: u32 = 1 << 4;
/// A faulting thread is parked on this chunk: whoever ends the BUSY or
/// EVICTING state must wake the chunk's range.
pub const WAITER: u32 = 1 << 5;
/// Its last store was refused (poor compression, pool limit): skip it for
/// one CLOCK pass so the evictor does not spin on it.
pub const REJECTED: u32 = 1 << 6;
/// Only some pages of the chunk are mapped, the groups in [`part_mask`]:
/// set in PARTIAL and kept through the owned states entered from it (BUSY
/// while a fault adds a group or completes the chunk, EVICTING), so
/// whoever reads the word knows what is mapped and charged.
pub const PART: u32 = 1 << 7;
const MASK_SHIFT: u32 = 8;
/// Some mapped group of this PARTIAL chunk may be writable: a write fault
/// installed the group, or lifted its protection, and dropped its copies
/// (a random write costs one group, as a random read does). Its eviction
/// write-protects the mapped groups before storing them, and it never
/// completes to CLEAN. Set and cleared with PART.
pub const DIRTY: u32 = 1 << 24;
/// A PARTIAL chunk with every group mapped, read in whole while all its
/// pages were written back (`fault::install`, `fault::fill`): the loads
/// kept the device slots as clean copies (no pool memory), so that the
/// chunk's eviction, unwritten, claims them and only zaps, as the kernel's
/// swap cache keeps a clean page's slot. A write fault on it drops every
/// copy and lifts the whole chunk's protection (RESIDENT), as on CLEAN:
/// the chunk came in whole and is used whole. Set and cleared with PART.
pub const KEPT: u32 = 1 << 25;
/// The accessed-bit sampler's tags (`young.rs`, `auto`): at its last
/// sample the chunk was mapped and read but left unmarked, held out to
/// measure what a mark saves (HELD), or mapped and not read (IDLE). Set
/// and cleared only by the sampler, by a compare-and-swap that keeps the
/// state; they ride through every state change, so the chunk's eviction
/// and the faults that bring it back count against its tag.
pub const HELD: u32 = 1 << 26;
pub const IDLE: u32 = 1 << 27;
pub const TAGS: u32 = HELD | IDLE;
/// An EVICTING chunk whose mapped pages are stored and may be zapped at
/// any moment: a missing fault on one of them is a page in the cache, to
/// wait for. Before it, a missing fault on a page the word says is mapped
/// is a page the program dropped behind uzswap's back (a system call made
/// without libc: Go's runtime returns memory with its own `madvise`), and
/// the evictor reading it for the store is blocked in that fault: it is
/// filled with zeros there and then (`fault::fill_dropped_evicting`), not
/// parked on the owner, who is the faulting thread. Set by the evictor
/// only while FILLING is clear ([`begin_zap`]); cleared by [`release`].
pub const ZAPPING: u32 = 1 << 28;
/// A zero page is being placed over a dropped page of this EVICTING chunk
/// (not ZAPPING): the evictor waits for it to clear before it sets
/// ZAPPING, so no fill lands after a zap. Set and cleared by the filler.
pub const FILLING: u32 = 1 << 29;
/// Pinned resident (`pin.rs`): a system call is using its memory, or the
/// program made part of it inaccessible (`mprotect`). The evictor never
/// takes a pinned chunk; a fault still brings it in. The flag rides
/// through every state change; only `pin.rs` sets or clears it, under the
/// region's pin lock, from the chunk's pin count.
pub const PINNED: u32 = 1 << 31;
/// Groups a chunk is split into for partial faults: a chunk of n pages has
/// groups of `max(1, n / GROUPS)` pages, one page while chunks stop at 16
/// pages (`region::MAX_CHUNK_ORDER`); the mask is general so that the
/// bound is one constant.
pub const GROUPS: usize = 16;
/// The mask of mapped groups of a PART word.
pub const MASK_BITS: u32 = 0xffff << MASK_SHIFT;
/// Everything a PARTIAL word says of its mapped pages: cleared together
/// when the chunk leaves the partial states.
pub const PART_BITS: u32 = PART | MASK_BITS | DIRTY | KEPT;

/// The mask with every group of a chunk of `pages` pages.
#[inline]
pub fn full_mask(pages: usize) -> u16 {
    let groups = pages / group_pages(pages);
    (((1u32 << groups) - 1) & 0xffff) as u16
}

/// Pages per group in a chunk of `pages` pages.
#[inline]
pub fn group_pages(pages: usize) -> usize {
    (pages / GROUPS).max(1)
}

/// The mask bit of the group holding page `p` of a chunk of `pages` pages.
#[inline]
pub fn group_bit(p: usize, pages: usize) -> u16 {
    debug_assert!(p < pages);
    1 << (p / group_pages(pages))
}

/// The flag and mask bits of a chunk with the groups of `mask` mapped.
#[inline]
pub fn part_bits(mask: u16) -> u32 {
    debug_assert!(mask != 0);
    PART | ((mask as u32) << MASK_SHIFT)
}

/// The mapped groups of a PART word.
#[inline]
pub fn part_mask(w: u32) -> Option<u16> {
    (w & PART != 0).then_some(((w & MASK_BITS) >> MASK_SHIFT) as u16)
}

/// The page ranges of a chunk of `pages` pages covered by the groups of
/// `mask`, maximal runs in address order. Bits past the chunk's groups are
/// ignored, so `!mask` gives the pages a mask leaves out.
pub fn mask_ranges(mask: u16, pages: usize) -> Vec<std::ops::Range<usize>> {
    let g = group_pages(pages);
    let groups = pages / g;
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for k in (0..groups).filter(|&k| mask & (1 << k) != 0) {
        match out.last_mut() {
            Some(r) if r.end == k * g => r.end += g,
            _ => out.push(k * g..(k + 1) * g),
        }
    }
    out
}

/// Resident bytes charged for a chunk with word `w`: a mapped chunk
/// (RESIDENT, CLEAN, PARTIAL, or EVICTING from one of them) is charged its
/// mapped pages, any other nothing.
#[inline]
pub fn charge(w: u32, chunk: usize) -> u64 {
    match (state(w), part_mask(w)) {
        (RESIDENT | CLEAN | PARTIAL | EVICTING, Some(m)) => {
            let g = group_pages(chunk / crate::PAGE_SIZE);
            (m.count_ones() as usize * g * crate::PAGE_SIZE) as u64
        }
        (RESIDENT | CLEAN | PARTIAL | EVICTING, None) => chunk as u64,
        _ => 0,
    }
}

#[inline]
pub fn state(w: u32) -> u32 {
    w & STATE_MASK
}

/// Try to move `c` from state `from` to state `to`, keeping the flags,
/// clearing `clear` and setting `set`. Returns the previous word on success.
#[inline]
pub fn transition(c: &AtomicU32, from: u32, to: u32, clear: u32, set: u32) -> Result<u32, u32> {
    let mut cur = c.load(Acquire);
    loop {
        if state(cur) != from {
            return Err(cur);
        }
        let new = ((cur & !STATE_MASK & !clear) | set) | to;
        match c.compare_exchange_weak(cur, new, AcqRel, Acquire) {
            Ok(prev) => return Ok(prev),
            Err(now) => cur = now,
        }
    }
}

/// Take `c` from `from` for a fault resolver or a hint: BUSY, with the
/// flags kept. The compare-and-swap is what makes the resolver the chunk's
/// only owner: a thread that read the word earlier and decided from it
/// must fail here if anyone moved the chunk since. Returns the previous
/// word (a PARTIAL chunk's mask is in it) on success.
#[inline]
pub fn own(c: &AtomicU32, from: u32) -> Result<u32, u32> {
    transition(c, from, BUSY, 0, 0)
}

/// [`own`] where the word also satisfies `ok` (read with the state, in the
/// same compare-and-swap).
#[inline]
pub fn own_if(c: &AtomicU32, from: u32, ok: impl Fn(u32) -> bool) -> Result<u32, u32> {
    c.fetch_update(AcqRel, Acquire, |w| {
        (state(w) == from && ok(w)).then_some((w & !STATE_MASK) | BUSY)
    })
}

/// Whether the evictor must write-protect the mapped pages of a victim it
/// took with word `w` before it reads them for the store: whether any of
/// them may be writable. RESIDENT pages are; a PARTIAL chunk's are only
/// with DIRTY (a write fault installed or unprotected a group); CLEAN
/// pages and a clean PARTIAL chunk's were installed write-protected. A
/// page left writable here could be written after the store read it and
/// before the zap: the write would be lost.
#[inline]
pub fn must_protect(w: u32) -> bool {
    match state(w) {
        RESIDENT => true,
        PARTIAL => w & DIRTY != 0,
        _ => false,
    }
}

/// Whether a write-protect call may span a chunk with word `w` that is not
/// one of its victims (`evict::protect_ahead`): the call changes nothing of
/// it, since it maps no page (UNTOUCHED, STORED) or protects every page it
/// maps already (CLEAN, PARTIAL without DIRTY), and no system call may be
/// writing it (not PINNED).
#[inline]
pub fn spannable(w: u32) -> bool {
    let unchanged = match state(w) {
        UNTOUCHED | STORED | CLEAN => true,
        PARTIAL => w & DIRTY == 0,
        _ => false,
    };
    unchanged && w & PINNED == 0
}

/// Hold `c`, read as word `w`, BUSY for a write-protect call spanning it:
/// a compare-and-swap of that very word, so it fails if anything changed
/// since `w` was read (a flag, a mask, a pin). Given back by `release` to
/// `state(w)`, the flags kept.
#[inline]
pub fn hold(c: &AtomicU32, w: u32) -> bool {
    c.compare_exchange(w, (w & !STATE_MASK) | BUSY, AcqRel, Acquire)
        .is_ok()
}

/// Take `c` from `from` (an evictable state) for eviction, unless it is
/// pinned. Returns the previous word on success.
#[inline]
pub fn take_for_evict(c: &AtomicU32, from: u32) -> Result<u32, u32> {
    let mut cur = c.load(Acquire);
    loop {
        if state(cur) != from || cur & PINNED != 0 {
            return Err(cur);
        }
        let new = (cur & !STATE_MASK) | EVICTING;
        match c.compare_exchange_weak(cur, new, AcqRel, Acquire) {
            Ok(prev) => return Ok(prev),
            Err(now) => cur = now,
        }
    }
}

/// Leave an owned state (BUSY or EVICTING) for `to`, returning whether a
/// waiter had parked (the caller must then wake the chunk's range).
#[inline]
pub fn release(c: &AtomicU32, to: u32, clear: u32, set: u32) -> bool {
    let mut cur = c.load(Acquire);
    loop {
        debug_assert!(
            matches!(state(cur), BUSY | EVICTING),
            "release from {cur:#x}"
        );
        let new = ((cur & !STATE_MASK & !clear & !WAITER & !ZAPPING) | set) | to;
        match c.compare_exchange_weak(cur, new, AcqRel, Acquire) {
            Ok(prev) => return prev & WAITER != 0,
            Err(now) => cur = now,
        }
    }
}

/// Mark EVICTING chunk `c` ZAPPING once its mapped pages are stored,
/// before they are zapped: waits out a fill in progress (one
/// `UFFDIO_COPY` of a zero page), after which none starts.
pub fn begin_zap(c: &AtomicU32) {
    let mut n = 0u32;
    while !try_begin_zap(c) {
        if n < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        n = n.saturating_add(1);
    }
}

/// [`begin_zap`] without the wait: false while a fill is in progress.
pub fn try_begin_zap(c: &AtomicU32) -> bool {
    c.fetch_update(AcqRel, Acquire, |w| {
        debug_assert_eq!(state(w), EVICTING, "begin_zap on {w:#x}");
        (w & FILLING == 0).then_some(w | ZAPPING)
    })
    .is_ok()
}

/// Claim EVICTING chunk `c` for a fill of a dropped page (FILLING), if it
/// is not ZAPPING and no other fill is in progress. `Err` with the word
/// seen otherwise: the caller looks again.
pub fn begin_fill(c: &AtomicU32) -> Result<u32, u32> {
    c.fetch_update(AcqRel, Acquire, |w| {
        (state(w) == EVICTING && w & (ZAPPING | FILLING) == 0).then_some(w | FILLING)
    })
}

/// End a fill begun by [`begin_fill`] (the chunk may have left EVICTING
/// since; the flag rides along until now).
pub fn end_fill(c: &AtomicU32) {
    c.fetch_and(!FILLING, AcqRel);
}

/// Mark a waiter on `c` if it is still in an owned state. Returns the word
/// seen when it was not (the caller re-examines it).
#[inline]
pub fn park(c: &AtomicU32) -> Result<(), u32> {
    let mut cur = c.load(Acquire);
    loop {
        if !matches!(state(cur), BUSY | EVICTING) {
            return Err(cur);
        }
        match c.compare_exchange_weak(cur, cur | WAITER, AcqRel, Acquire) {
            Ok(_) => return Ok(()),
            Err(now) => cur = now,
        }
    }
}

/// Wait until `c` leaves the owned states (BUSY, EVICTING): for a thread
/// that resolves its own fault (signal mode) and so cannot park in the
/// kernel. Owned states last one install or one eviction batch; this spins
/// briefly, then yields, then sleeps in short steps.
pub fn wait_released(c: &AtomicU32) {
    let mut n = 0u32;
    while matches!(state(c.load(Acquire)), BUSY | EVICTING) {
        if n < 64 {
            std::hint::spin_loop();
        } else if n < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
        n = n.saturating_add(1);
    }
}

/// Set or clear flag bits without touching the state.
#[inline]
pub fn update_flags(c: &AtomicU32, clear: u32, set: u32) {
    let _ = c.fetch_update(AcqRel, Acquire, |w| Some((w & !clear) | set));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_ranges_and_their_complement_cover_the_chunk() {
        // 64 KiB chunk: a page per group.
        let m = 0b0110_0000_0010_0001;
        assert_eq!(mask_ranges(m, 16), vec![0..1, 5..6, 13..15]);
        assert_eq!(mask_ranges(!m, 16), vec![1..5, 6..13, 15..16]);
        // 2 MiB chunk: 32 pages per group.
        assert_eq!(mask_ranges(0b11, 512), vec![0..64]);
        assert_eq!(mask_ranges(!0b11, 512), vec![64..512]);
        // 16 KiB chunk: four groups, the other bits ignored.
        assert_eq!(mask_ranges(!0b0010, 4), vec![0..1, 2..4]);
        assert_eq!(full_mask(16), 0xffff);
        assert_eq!(full_mask(512), 0xffff);
        assert_eq!(full_mask(4), 0b1111);
        assert_eq!(mask_ranges(full_mask(4), 4), vec![0..4]);
        assert_eq!(
            charge(PARTIAL | part_bits(0b101), 16 * crate::PAGE_SIZE),
            2 * crate::PAGE_SIZE as u64
        );
    }
}
