//! Threads on stacks the program gives them (`pthread_attr_setstack`)
//! from region memory: its heap, or a mapping of its own.
//!
//! glibc keeps a thread's descriptor (`struct pthread`) at the top of its
//! stack block, and the kernel writes three words of it outside any
//! system call the thread makes: the thread id that `CLONE_CHILD_CLEARTID`
//! clears at its exit (and wakes the joiner on), the restartable-sequence
//! area it updates on a return to user space after a preemption or a
//! migration, and the robust-futex list it walks at the exit. None of
//! these faults is served where the page is not mapped: the exit's clear
//! fails in every mode (the kernel does not hand an exiting thread's
//! faults to userfaultfd), so the joiner waited for ever; an rseq update
//! that fails is a SIGSEGV. Eight threads on heap stacks, created and
//! joined 2000 times while another thread paged the stacks out, hung with
//! handler threads and died in signal mode and in user mode only.
//!
//! In signal mode (and user mode only) the thread also died at its start:
//! its first frames fell on a stack page not mapped before it had the
//! alternate signal stack its faults are resolved on.
//!
//! So a thread made on such a stack has the stack's top chunk brought in
//! and pinned (`Uzswap::pin`: the evictor never takes it) from before it
//! is made until a join returns, when it is dead and the kernel is done
//! with it. The pin is one chunk per live thread, which the budget counts
//! like any resident memory (unlike a wait's, it is not optional: without
//! it the thread's exit can fail). A detached thread (or one
//! made detached) keeps its pin: nothing tells us when it has exited. Its
//! chunk stays resident until the memory is unmapped. glibc's own stacks
//! are mappings outside the regions (`MAP_STACK`), and need nothing.
//!
//! The pins are kept by stack, registered before the thread is made, and
//! a join finds its thread's by the descriptor's address (glibc's
//! `pthread_t`), which lies in the span: a join made by another thread as
//! soon as the id is written cannot come before the registration.
//!
//! Locking: `LIVE` is a leaf `std` mutex (a futex of its own, never in
//! region memory), taken with the re-entry guard up.

use crate::{real, Internal};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The span at the top of a stack block that is pinned: glibc's thread
/// descriptor (`struct pthread`, 2.3 KiB on x86-64 glibc 2.36, at the
/// very top), the static TLS below it, and the thread's first frames,
/// which run before it has the alternate signal stack that signal mode
/// resolves its faults on: a fault there, on a stack page not mapped,
/// is a SIGBUS whose frame the kernel cannot write, and the process died
/// of it. Brought in whole and kept: one chunk, 64 KiB by default.
const STARTUP_SPAN: usize = 64 << 10;

/// Pinned spans by start: (length, threads made on it and not joined; a
/// detached thread's stays counted).
static LIVE: Mutex<BTreeMap<usize, (usize, u32)>> = Mutex::new(BTreeMap::new());

/// The span at the top of the stack `attr` gives, where that stack lies in
/// the regions: brought in, pinned and registered; its start. `None` for a
/// thread on a stack of glibc's.
pub(crate) fn pin_for(attr: *const libc::pthread_attr_t) -> Option<usize> {
    if attr.is_null() {
        return None;
    }
    let (mut addr, mut size) = (std::ptr::null_mut(), 0);
    // SAFETY: the caller's attributes, as pthread_create takes them.
    if unsafe { libc::pthread_attr_getstack(attr, &mut addr, &mut size) } != 0 || addr.is_null() {
        return None;
    }
    // Without a stack of the program's, glibc answers the top of nothing
    // less the stack size: an address that wraps.
    let top = (addr as usize).checked_add(size)?;
    let start = top - size.min(STARTUP_SPAN);
    if !crate::vma::overlaps_regions(start, top) {
        return None;
    }
    let st = crate::active()?;
    let _g = Internal::enter();
    // Brought in writable and pinned; the pin outlives this call, and
    // `release` undoes it (as the guard's drop would).
    std::mem::forget(st.uz.pin(start, top - start, true));
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.entry(start).or_insert((top - start, 0)).1 += 1;
    Some(start)
}

/// Undo one [`pin_for`] of the span starting at `start`: a thread that was
/// not made, or one joined.
pub(crate) fn release(start: usize) {
    let Some(st) = crate::active() else { return };
    let _g = Internal::enter();
    let len = {
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        let Some((len, n)) = live.get_mut(&start) else {
            return;
        };
        let len = *len;
        *n -= 1;
        if *n == 0 {
            live.remove(&start);
        }
        len
    };
    st.uz.unpin(start, len);
}

/// `t` was joined: it is dead, and the pin of the span its descriptor
/// lies in goes.
fn joined(t: libc::pthread_t) {
    let at = t as usize;
    let start = {
        let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.range(..=at)
            .next_back()
            .filter(|(s, (len, _))| at < *s + len)
            .map(|(s, _)| *s)
    };
    if let Some(start) = start {
        release(start);
    }
}

type Ret = *mut *mut libc::c_void;
type Ts = *const libc::timespec;

macro_rules! join {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        /// # Safety
        /// As the pthread function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(t: libc::pthread_t, r: Ret $(, $a: $t)*) -> i32 {
            let Some(f) = real::$name() else {
                return libc::ENOSYS;
            };
            // SAFETY: the caller's thread and arguments.
            let rc = unsafe { f(t, r $(, $a)*) };
            if rc == 0 {
                joined(t);
            }
            rc
        }
    )*};
}

join! {
    pthread_join();
    pthread_tryjoin_np();
    pthread_timedjoin_np(abs: Ts);
    pthread_clockjoin_np(clock: libc::clockid_t, abs: Ts);
}
