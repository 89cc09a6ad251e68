//! The malloc family. glibc's malloc grows its heap with internal `brk` and
//! `mmap` calls no wrapper sees, so a program's heap is moved to mimalloc,
//! whose memory comes from the interposed `mmap` (`vma.rs`) and goes back
//! through the interposed `madvise`: every byte it hands out lives in a
//! uzswap region. Why mimalloc, in docs/ARCHITECTURE.md.
//!
//! Two allocators live side by side: mimalloc for the program once the
//! instance runs, glibc's (`__libc_malloc`) before that (bootstrap: dlsym
//! and the loader allocate early), in a detached fork child, on uzswap's
//! own threads, and for this library's Rust code (the global allocator
//! below). A pointer is freed by whichever allocator owns it, asked of
//! mimalloc (`mi_is_in_heap_region`), so memory allocated on one side and
//! freed on the other is never mixed up.

use crate::real::{__libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_realloc};
use libc::c_void;
use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};

/// Rust allocations of this library (uzswap's structures included) come
/// from glibc's allocator: never from region memory.
pub struct LibcAlloc;

/// glibc's malloc aligns to 16 bytes.
const MALLOC_ALIGN: usize = 16;

// SAFETY: forwards to glibc's allocator, which meets GlobalAlloc's contract
// for the layouts passed (memalign for alignments above malloc's).
unsafe impl GlobalAlloc for LibcAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: plain calls into glibc's allocator.
        unsafe {
            if l.align() <= MALLOC_ALIGN {
                __libc_malloc(l.size()) as *mut u8
            } else {
                __libc_memalign(l.align(), l.size()) as *mut u8
            }
        }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.align() <= MALLOC_ALIGN {
            // SAFETY: as above.
            unsafe { __libc_calloc(1, l.size()) as *mut u8 }
        } else {
            // SAFETY: as above; the block is `l.size()` bytes.
            unsafe {
                let p = self.alloc(l);
                if !p.is_null() {
                    std::ptr::write_bytes(p, 0, l.size());
                }
                p
            }
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, _: Layout) {
        // SAFETY: `p` came from glibc's allocator (alloc above).
        unsafe { __libc_free(p as *mut c_void) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if l.align() <= MALLOC_ALIGN {
            // SAFETY: `p` came from glibc's malloc.
            return unsafe { __libc_realloc(p as *mut c_void, new) as *mut u8 };
        }
        // SAFETY: a fresh block of the same alignment, then a copy of the
        // bytes both hold, then the old one freed.
        unsafe {
            let q = __libc_memalign(l.align(), new) as *mut u8;
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(new));
                __libc_free(p as *mut c_void);
            }
            q
        }
    }
}

// Options of the bundled mimalloc v2 (`mi_option_t` in its mimalloc.h),
// which the crate's constants do not all name.
const MI_ARENA_EAGER_COMMIT: mi::mi_option_t = 4;
const MI_PURGE_DECOMMITS: mi::mi_option_t = 5;
const MI_ARENA_RESERVE: mi::mi_option_t = 23;
const MI_ARENA_PURGE_MULT: mi::mi_option_t = 24;

/// The size `program_brings_malloc` asks of libc's `strdup`.
const PROBE: usize = 4001;
/// Set by our `malloc` when asked for [`PROBE`] bytes.
static PROBED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether libc's own allocations reach another `malloc` than ours: the
/// program links its own allocator (rustc's jemalloc), which then serves
/// every `malloc` of the process. Asked of libc itself (`strdup` calls
/// `malloc` as any caller does), not of the symbol tables: `dlsym` answers
/// a non-PIE executable's PLT stub (CPython's), which is no definition.
pub fn program_brings_malloc() -> bool {
    PROBED.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut s = vec![b'p'; PROBE];
    s[PROBE - 1] = 0;
    // SAFETY: a NUL-terminated string.
    let copy = unsafe { libc::strdup(s.as_ptr() as *const libc::c_char) };
    let theirs = !PROBED.load(std::sync::atomic::Ordering::Relaxed);
    // Freed by the `free` the process resolves to, the one matching the
    // `malloc` that made it: a call to `free` from here binds to ours.
    // SAFETY: a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"free".as_ptr()) };
    if !copy.is_null() && !f.is_null() {
        // SAFETY: `free`'s signature; the block came from the allocator
        // behind it.
        let free: extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(f) };
        free(copy as *mut c_void);
    }
    theirs
}

/// mimalloc's settings, before its first allocation.
pub fn configure_mimalloc() {
    // SAFETY: option setters, before any mimalloc allocation.
    unsafe {
        // Commit arenas when they are reserved: a reserve with PROT_NONE
        // and a later mprotect per commit would pin the chunks (vma.rs).
        mi::mi_option_set(MI_ARENA_EAGER_COMMIT, 1);
        // Freed memory goes back with MADV_DONTNEED: it is discarded from
        // the region (its pages read as zeros), not compressed.
        mi::mi_option_set(MI_PURGE_DECOMMITS, 1);
        // Memory freed back to an arena (a whole segment: a large block, or
        // a segment emptied) is purged at once, not after 10 x the purge
        // delay (100 ms). Under a budget, freed memory waiting for its
        // purge is garbage the budget counts: a program that drops a large
        // table (CPython resizing a dict or list) made the evictor compress
        // as much live memory in its place, and fault it back. heap.py 1M
        // under 150 MiB: 3.7-4.3 s and 87-94 k faults -> 3.1-3.3 s and 65 k
        // (docs/BENCHMARKS.md). Small pages keep their 10 ms delay: at 0
        // the sqlite shell, whose pages are freed and reused at once, took
        // more zero-fill faults and ran 10-30% slower.
        mi::mi_option_set(MI_ARENA_PURGE_MULT, 0);
        // Arenas of 256 MiB: reserved address space only, carved from a
        // region by `vma.rs`.
        mi::mi_option_set(MI_ARENA_RESERVE, 256 * 1024);
        mi::mi_option_set(mi::mi_option_show_errors, 1);
    }
}

/// glibc malloc's settings: under the library it serves only uzswap's own
/// threads (and allocations before initialisation), whose memory is
/// outside the budget, so it should hold no more than they use. Its
/// default mmap threshold is dynamic: once a large buffer (a 2 MiB
/// `O_DIRECT` bounce buffer of a writeback run) is freed, buffers up to
/// that size come from the thread's arena and stay there after their
/// free, a few MiB per thread that does I/O (sqlite at a 25 MiB budget:
/// 9.7 MiB in five arenas). A fixed threshold keeps large buffers in
/// their own mappings, given back at free; they are few (a dozen 2 MiB
/// buffers in a whole sort run), so the mapping costs little. Setting
/// it also stops the trim threshold (128 KiB) from following it up.
pub fn configure_glibc() {
    // SAFETY: option setters of glibc's allocator; no memory passed.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// Whether this allocation goes to mimalloc.
fn program() -> bool {
    crate::active().is_some()
}

/// [`program`] for an allocation of `size` bytes: in a forked child whose
/// take-over is deferred (`fork.rs`), allocations live at once past
/// [`crate::fork::DEFERRED_BYTES`] take it over (a shell's child before
/// its `exec` allocates less; a worker's results more).
fn program_for(size: usize) -> bool {
    program() || (crate::fork::deferred() && crate::fork::allocated_while_deferred(size))
}

/// Whether `p` is a mimalloc block. mimalloc's own test finds blocks in
/// its arenas, and blocks too large for an arena only below the 48 TiB its
/// segment map covers: region memory lies above, where the kernel places
/// mappings. glibc's blocks are never in a region (its heap grows through
/// its own system calls, not the interposed `mmap`), and the program never
/// frees what it mapped itself, so a block in a region is mimalloc's.
fn mi_owned(p: *mut c_void) -> bool {
    // SAFETY: mimalloc's ownership test takes any pointer.
    !p.is_null() && (unsafe { mi::mi_is_in_heap_region(p) } || crate::vma::in_regions(p as usize))
}

fn usable(p: *mut c_void) -> usize {
    if mid::owns(p) {
        // SAFETY: a live block of the mid-size heap.
        return unsafe { mid::usable(p) };
    }
    if mi_owned(p) {
        // SAFETY: a live mimalloc block.
        unsafe { mi::mi_usable_size(p) }
    } else {
        match crate::real::libc_malloc_usable_size() {
            // SAFETY: a live glibc block.
            Some(f) => unsafe { f(p) },
            None => 0,
        }
    }
}

fn aligned(align: usize, size: usize) -> *mut c_void {
    if program_for(size) {
        // SAFETY: mimalloc takes any power-of-two alignment.
        unsafe { mi::mi_malloc_aligned(size, align) }
    } else {
        // SAFETY: glibc's memalign.
        unsafe { __libc_memalign(align, size) }
    }
}

#[no_mangle]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    if size == PROBE {
        PROBED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if program_for(size) {
        if mid::SIZES.contains(&size) {
            if let Some(p) = mid::try_malloc(size) {
                return p;
            }
        }
        // SAFETY: a plain allocation.
        unsafe { mi::mi_malloc(size) }
    } else {
        // SAFETY: as above.
        unsafe { __libc_malloc(size) }
    }
}

#[no_mangle]
pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    if program_for(n.saturating_mul(size)) {
        // SAFETY: mimalloc checks n * size for overflow.
        unsafe { mi::mi_calloc(n, size) }
    } else {
        // SAFETY: glibc checks n * size for overflow.
        unsafe { __libc_calloc(n, size) }
    }
}

/// # Safety
/// `p` is null or a live block of either allocator.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    if mid::owns(p) {
        // SAFETY: a live block of the mid-size heap.
        return unsafe { mid::free(p) };
    }
    if mi_owned(p) {
        // SAFETY: a live mimalloc block.
        unsafe { mi::mi_free(p) }
    } else {
        if crate::fork::deferred() {
            crate::fork::freed_while_deferred(usable(p));
        }
        // SAFETY: a live glibc block.
        unsafe { __libc_free(p) }
    }
}

/// # Safety
/// `p` is null or a live block of either allocator.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        // glibc's realloc(p, 0) frees and returns NULL.
        // SAFETY: `p` is live.
        unsafe { free(p) };
        return std::ptr::null_mut();
    }
    if mid::owns(p) {
        if mid::SIZES.contains(&size) {
            // SAFETY: a live block of this heap; dlmalloc grows or shrinks
            // it in place where it can, else moves it.
            if let Some(q) = unsafe { mid::try_realloc(p, size) } {
                return q;
            }
        }
        // SAFETY: a live block of the mid-size heap, at least this long.
        let old = unsafe { mid::usable(p) };
        // To whichever heap `malloc` picks for the new size.
        let q = malloc(size);
        if !q.is_null() {
            // SAFETY: both blocks are live and at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size));
                mid::free(p);
            }
        }
        return q;
    }
    let owned = mi_owned(p);
    if !owned && crate::fork::deferred() {
        // The old block leaves the deferral's count whichever allocator
        // takes the new one (glibc's in place, or a copy and a free).
        crate::fork::freed_while_deferred(usable(p));
    }
    match (owned, program_for(size)) {
        // SAFETY: each allocator reallocates its own blocks.
        (true, true) => unsafe { mi::mi_realloc(p, size) },
        // SAFETY: as above.
        (false, false) => unsafe { __libc_realloc(p, size) },
        _ => {
            // Across allocators: a new block, the bytes both hold, free.
            let q = malloc(size);
            if !q.is_null() {
                // SAFETY: both blocks are live and at least this long.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        p as *const u8,
                        q as *mut u8,
                        usable(p).min(size),
                    );
                    free(p);
                }
            }
            q
        }
    }
}

/// # Safety
/// As `realloc`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: as `realloc`.
        Some(t) => unsafe { realloc(p, t) },
        None => {
            crate::set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || align < std::mem::size_of::<usize>() {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's out pointer.
    unsafe { *out = p };
    0
}

#[no_mangle]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        crate::set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    aligned(align, size)
}

#[no_mangle]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    aligned_alloc(align.max(1).next_power_of_two(), size)
}

#[no_mangle]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(uzswap::PAGE_SIZE, size)
}

#[no_mangle]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    aligned(
        uzswap::PAGE_SIZE,
        size.max(1).next_multiple_of(uzswap::PAGE_SIZE),
    )
}

/// # Safety
/// `p` is null or a live block of either allocator.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        0
    } else {
        usable(p)
    }
}

/// Blocks of [`mid::SIZES`]: a best-fit heap (Doug Lea's malloc, the
/// `dlmalloc` crate) beside mimalloc.
///
/// Why: mimalloc serves each size from a bin a quarter of a power of two
/// wide, so a block just over a bin's bound takes up to a quarter more
/// than asked. The sqlite shell's page buffers (4104 and 4368 bytes) both
/// land in its 5120-byte bin: its heap peaked at 51.9 MiB under uzswap
/// against 46.6 MiB of plain RSS, and at equal memory it took 25 times
/// the faults. dlmalloc splits a free block to the size asked (16-byte
/// steps, an 8-byte header): the same run peaks at 44.6 MiB, and under a
/// 40 MiB budget took 3.8 k faults and 0.93 s against 92-102 k and
/// 3.9-4.1 s (docs/BENCHMARKS.md, "Mid-size blocks").
///
/// Its memory: segments of at least 4 MiB from the interposed `mmap`,
/// so uzswap regions, as mimalloc's arenas; a segment emptied, or the
/// free top of one, goes back by `munmap` (a discard). Free blocks inside
/// a segment are kept for reuse, as glibc's are.
///
/// One thread allocates from it: the first that asks (a single-threaded
/// program's only one, a server's main thread); the others' blocks are
/// mimalloc's. Locking: one mutex over the heap, a `std` one (a futex of
/// its own: no `parking_lot` table a forked child could find held), never
/// waited for by `malloc`, `free` or `realloc`: an allocation that finds
/// it held is mimalloc's, a free is left on a lock-free stack for the
/// heap's next holder. The segment table is written under the heap's lock
/// and read by every `free` without one. A heap for every thread behind
/// one lock, and the table behind a read-write lock, serialised a program
/// that frees from many threads at once (four threads churning 2-32 KiB
/// blocks: 1.81 s, then 0.91 s, against mimalloc's 0.10 s; now 0.37 s,
/// the heap's thread doing dlmalloc's work, as fast as glibc's malloc).
/// `fork` takes the heap's lock around the fork (`lock_for_fork`), so the
/// child's copy is consistent and unlocked.
pub mod mid {
    use libc::c_void;
    use std::ops::RangeInclusive;
    use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
    use std::sync::{Mutex, MutexGuard, TryLockError};

    /// The sizes served here. Below, mimalloc's bins are 8 bytes apart or
    /// hold many small blocks whose rounding costs little; above, blocks
    /// are whole pages of mimalloc's larger bins, and one lock would see
    /// more of a program's large-buffer traffic.
    pub const SIZES: RangeInclusive<usize> = 2048..=32768;
    /// Segments are at least this large: few of them to look up.
    const SEGMENT: usize = 4 << 20;

    struct Sys;

    static HEAP: Mutex<dlmalloc::Dlmalloc<Sys>> =
        Mutex::new(dlmalloc::Dlmalloc::new_with_allocator(Sys));
    /// Every segment's start and end (0: a free entry), read without a
    /// lock by every `free` (`owns`), written under the heap's lock. A
    /// segment leaves the table before its memory is unmapped and an end
    /// moves down before a tail is, so no address another allocator may
    /// map next is ever in it; a live block's segment cannot leave.
    const MAX_SEGS: usize = 256;
    static SEG_START: [AtomicUsize; MAX_SEGS] = [const { AtomicUsize::new(0) }; MAX_SEGS];
    static SEG_END: [AtomicUsize; MAX_SEGS] = [const { AtomicUsize::new(0) }; MAX_SEGS];
    /// Entries ever used: `owns` looks at no more.
    static SEG_USED: AtomicUsize = AtomicUsize::new(0);

    /// The thread that allocates from this heap: the first to ask. Others
    /// allocate from mimalloc and only free here. With one thread taking
    /// blocks, the heap's lock is contended only by frees from others.
    static OWNER: AtomicU64 = AtomicU64::new(0);

    thread_local! {
        // SAFETY: gettid(2) has no preconditions.
        static TID: u64 = unsafe { libc::gettid() } as u64;
    }

    fn owner() -> bool {
        let Ok(me) = TID.try_with(|t| *t) else {
            return false;
        };
        match OWNER.load(Relaxed) {
            0 => OWNER
                .compare_exchange(0, me, Relaxed, Relaxed)
                .map_or_else(|o| o == me, |_| true),
            o => o == me,
        }
    }

    /// Blocks freed while another thread held the heap, for its next
    /// holder to free (a stack linked through the blocks).
    static PENDING: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    static LO: AtomicUsize = AtomicUsize::new(usize::MAX);
    static HI: AtomicUsize = AtomicUsize::new(0);

    /// The table entry of the segment at `start`.
    fn seg_of(start: usize) -> Option<usize> {
        (0..SEG_USED.load(Acquire)).find(|&i| SEG_START[i].load(Acquire) == start)
    }

    fn heap() -> MutexGuard<'static, dlmalloc::Dlmalloc<Sys>> {
        HEAP.lock().unwrap_or_else(|e| e.into_inner())
    }

    // SAFETY: hands out fresh private anonymous mappings and takes back
    // only whole segments or their tails, as the trait asks.
    unsafe impl dlmalloc::Allocator for Sys {
        fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
            let size = size.max(SEGMENT);
            // Under the heap's lock: no other writer.
            let Some(slot) = (0..MAX_SEGS).find(|&i| SEG_START[i].load(Relaxed) == 0) else {
                return (std::ptr::null_mut(), 0, 0);
            };
            // SAFETY: a fresh anonymous mapping (the interposed `mmap`
            // places it in a region).
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if addr == libc::MAP_FAILED {
                return (std::ptr::null_mut(), 0, 0);
            }
            let a = addr as usize;
            SEG_END[slot].store(a + size, Release);
            SEG_START[slot].store(a, Release);
            SEG_USED.fetch_max(slot + 1, Release);
            LO.fetch_min(a, Relaxed);
            HI.fetch_max(a + size, Relaxed);
            (addr.cast(), size, 0)
        }

        fn remap(&self, _: *mut u8, _: usize, _: usize, _: bool) -> *mut u8 {
            std::ptr::null_mut()
        }

        fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
            let a = ptr as usize;
            let Some(i) = seg_of(a) else {
                return false;
            };
            SEG_END[i].store(a + newsize, Release);
            // SAFETY: the tail of one of our segments, which dlmalloc gives up.
            if unsafe { libc::munmap(ptr.add(newsize).cast(), oldsize - newsize) } != 0 {
                SEG_END[i].store(a + oldsize, Release);
                return false;
            }
            true
        }

        fn free(&self, ptr: *mut u8, size: usize) -> bool {
            let a = ptr as usize;
            let Some(i) = seg_of(a) else {
                return false;
            };
            SEG_START[i].store(0, Release);
            // SAFETY: a whole segment of ours, which dlmalloc gives up.
            if unsafe { libc::munmap(ptr.cast(), size) } != 0 {
                SEG_START[i].store(a, Release);
                return false;
            }
            SEG_END[i].store(0, Release);
            true
        }

        fn can_release_part(&self, _: u32) -> bool {
            true
        }

        fn allocates_zeros(&self) -> bool {
            true
        }

        fn page_size(&self) -> usize {
            uzswap::PAGE_SIZE
        }
    }

    /// Whether `p` is a block of this heap.
    pub fn owns(p: *mut c_void) -> bool {
        let a = p as usize;
        if a < LO.load(Relaxed) || a >= HI.load(Relaxed) {
            return false;
        }
        (0..SEG_USED.load(Acquire)).any(|i| loop {
            let s = SEG_START[i].load(Acquire);
            if s == 0 || a < s {
                break false;
            }
            let e = SEG_END[i].load(Acquire);
            // The same segment's end only if its start did not change
            // meanwhile (the entry freed and taken by another segment).
            if SEG_START[i].load(Acquire) == s {
                break a < e;
            }
        })
    }

    /// The heap if no other thread holds it, with the frees left for it
    /// done first.
    fn try_heap() -> Option<MutexGuard<'static, dlmalloc::Dlmalloc<Sys>>> {
        let mut h = match HEAP.try_lock() {
            Ok(h) => h,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let mut p = PENDING.swap(std::ptr::null_mut(), Acquire);
        while !p.is_null() {
            // SAFETY: a block pushed by `free`: its first word links the next.
            let next = unsafe { *(p as *mut *mut c_void) };
            // SAFETY: a live block of this heap, freed by its owner.
            unsafe { h.c_free(p.cast()) };
            p = next;
        }
        Some(h)
    }

    /// A block from this heap, or None where the caller is not the heap's
    /// thread or another thread holds the heap (the caller then takes one
    /// from mimalloc: a thread never waits here).
    pub fn try_malloc(size: usize) -> Option<*mut c_void> {
        if !owner() {
            return None;
        }
        let mut h = try_heap()?;
        // SAFETY: any size.
        let p: *mut c_void = unsafe { h.c_malloc(size).cast() };
        (!p.is_null()).then_some(p)
    }

    /// Free a block of this heap: at once if the heap is free, else left
    /// for its next holder (`try_heap`), linked through the block's first
    /// word.
    ///
    /// # Safety
    /// `p` is a live block of this heap.
    pub unsafe fn free(p: *mut c_void) {
        if let Some(mut h) = try_heap() {
            // SAFETY: the caller's block.
            unsafe { h.c_free(p.cast()) };
            return;
        }
        let mut head = PENDING.load(Relaxed);
        loop {
            // SAFETY: the block is the caller's to give up, and at least
            // 2 KiB: its first word is ours.
            unsafe { *(p as *mut *mut c_void) = head };
            match PENDING.compare_exchange_weak(head, p, Release, Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// The block resized in this heap, or None where another thread holds
    /// it (the caller then moves it).
    ///
    /// # Safety
    /// `p` is a live block of this heap.
    pub unsafe fn try_realloc(p: *mut c_void, size: usize) -> Option<*mut c_void> {
        let mut h = try_heap()?;
        // SAFETY: the caller's block.
        let q: *mut c_void = unsafe { h.c_realloc(p.cast(), size).cast() };
        (!q.is_null()).then_some(q)
    }

    /// The bytes a live block holds: its chunk's size (the word before it,
    /// less its three flag bits) less that word.
    ///
    /// # Safety
    /// `p` is a live block of this heap.
    pub unsafe fn usable(p: *mut c_void) -> usize {
        // SAFETY: dlmalloc keeps an in-use chunk's size in the word before
        // the block; blocks here are never mapped on their own (far under
        // its mmap threshold).
        let head = unsafe { *(p as *const usize).sub(1) };
        (head & !7) - std::mem::size_of::<usize>()
    }

    /// The heap's lock, for a fork: the child gets a heap (and a segment
    /// table, written only under it) no other thread was changing.
    /// Dropped in the parent and in the child after the fork.
    pub fn lock_for_fork() -> ForkLock {
        ForkLock { _heap: heap() }
    }

    /// The heap's lock, held across a fork.
    pub struct ForkLock {
        _heap: MutexGuard<'static, dlmalloc::Dlmalloc<Sys>>,
    }
}
