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
