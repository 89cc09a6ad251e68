//! `mlock`, `mlock2`, `munlock`, `mlockall` and `munlockall` on memory
//! uzswap holds (the kernel's mm/mlock.c, for our regions).
//!
//! A locked range of ours is pinned (the evictor leaves it alone), brought
//! in as the kernel's populate would, and locked in the kernel as well, so
//! the machine's own swap leaves it alone too. The pin comes first: the
//! kernel refuses to zap a locked mapping, and an evictor that met such a
//! mapping while it zapped a run of chunks had to undo them. Unlock, and
//! giving the memory back, lift both. `MADV_DONTNEED` on locked memory
//! fails with EINVAL, as the kernel's does. Locked memory of ours is
//! limited to half the budget, as `RLIMIT_MEMLOCK` limits it: a lock past
//! it fails with ENOMEM, and a new mapping under `MCL_FUTURE` past it is
//! left unlocked (a line says so once).
//!
//! `mlockall` is not passed to the kernel: it would populate and lock
//! every region (reservations of gigabytes, and the allocator's arenas in
//! them) and uzswap's own memory, and a program's memory all locked would
//! leave no budget. It locks, in the kernel, every mapping backed by a
//! file or named (code, stacks, shared memory), so the program takes no
//! major fault on its code; its memory under uzswap stays under the
//! budget, unlocked, and a line says so once. `munlockall` lifts every
//! lock.
//!
//! Locking: `State::vmas`, held for each call (vma.rs).

use crate::{real, Internal};
use libc::c_void;
use uzswap::PAGE_SIZE;

pub(crate) const MLOCK_ONFAULT: u32 = 1;

fn fail(e: i32) -> i32 {
    crate::set_errno(e);
    -1
}

/// The page-aligned range mlock(2) covers for `addr, len`.
fn span(addr: *const c_void, len: usize) -> Option<(usize, usize)> {
    let a = addr as usize;
    let s = a & !(PAGE_SIZE - 1);
    let e = a.checked_add(len)?.checked_next_multiple_of(PAGE_SIZE)?;
    Some((s, e))
}

/// Lock or unlock `addr..addr+len`: ours through the region's pins, the
/// rest by the kernel.
fn apply(addr: *const c_void, len: usize, lock: Option<u32>) -> i32 {
    let (Some(st), Some((s, e))) = (crate::active_for_memory(), span(addr, len)) else {
        // SAFETY: the caller's arguments.
        return unsafe {
            match lock {
                Some(f) => real::mlock2(addr, len, f),
                None => real::munlock(addr, len),
            }
        };
    };
    let _g = Internal::enter();
    let mut v = st.vmas.lock();
    let mut rc = 0;
    for (a, b, ours) in v.parts(s, e) {
        let r = match (ours, lock) {
            (true, Some(f)) => v
                .lock(st, a, b, f & MLOCK_ONFAULT != 0)
                .map_or_else(fail, |()| 0),
            (true, None) => {
                v.unlock(st, a, b);
                0
            }
            // SAFETY: a part of the caller's range that is not ours.
            (false, Some(f)) => unsafe { real::mlock2(a as *const c_void, b - a, f) },
            // SAFETY: as above.
            (false, None) => unsafe { real::munlock(a as *const c_void, b - a) },
        };
        if r != 0 {
            rc = r;
            break;
        }
    }
    rc
}

/// # Safety
/// As mlock(2).
#[no_mangle]
pub unsafe extern "C" fn mlock(addr: *const c_void, len: usize) -> i32 {
    apply(addr, len, Some(0))
}

/// # Safety
/// As mlock2(2).
#[no_mangle]
pub unsafe extern "C" fn mlock2(addr: *const c_void, len: usize, flags: u32) -> i32 {
    if flags & !MLOCK_ONFAULT != 0 {
        return fail(libc::EINVAL);
    }
    apply(addr, len, Some(flags))
}

/// # Safety
/// As munlock(2).
#[no_mangle]
pub unsafe extern "C" fn munlock(addr: *const c_void, len: usize) -> i32 {
    apply(addr, len, None)
}

/// Mappings backed by a file or named by the kernel (`[stack]`, shared
/// memory), from /proc/self/maps, but the vsyscall and vDSO pages.
fn named_mappings() -> Vec<(usize, usize)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, path) = (f.next()?, f.nth(4)?);
            if path.starts_with("[v") {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// # Safety
/// As mlockall(2).
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: i32) -> i32 {
    let Some(st) = crate::active_for_memory() else {
        // SAFETY: the caller's argument.
        return unsafe { libc::syscall(libc::SYS_mlockall, flags) as i32 };
    };
    let known = libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT;
    if flags & !known != 0 || flags & (libc::MCL_CURRENT | libc::MCL_FUTURE) == 0 {
        return fail(libc::EINVAL);
    }
    let _g = Internal::enter();
    let lf = if flags & libc::MCL_ONFAULT != 0 {
        MLOCK_ONFAULT
    } else {
        0
    };
    if flags & libc::MCL_CURRENT != 0 {
        let v = st.vmas.lock();
        for (s, e) in named_mappings() {
            for (a, b, ours) in v.parts(s, e) {
                // SAFETY: a mapping of this process, not ours.
                if !ours && unsafe { real::mlock2(a as *const c_void, b - a, lf) } != 0 {
                    let e = crate::errno();
                    // A mapping gone since the maps were read is no error.
                    if e != libc::ENOMEM || crate::vma::overlaps_regions(a, b) {
                        return fail(e);
                    }
                }
            }
        }
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        crate::say(
            "mlockall: the program's code and named mappings are locked; its memory under uzswap stays under the budget, unlocked",
        )
    });
    0
}

/// # Safety
/// As munlockall(2).
#[no_mangle]
pub unsafe extern "C" fn munlockall() -> i32 {
    let Some(st) = crate::active_for_memory() else {
        // SAFETY: takes no arguments.
        return unsafe { real::munlockall() };
    };
    let _g = Internal::enter();
    let mut v = st.vmas.lock();
    for (a, b) in v.locked_ranges() {
        v.unlock(st, a, b);
    }
    // SAFETY: takes no arguments.
    unsafe { real::munlockall() }
}
