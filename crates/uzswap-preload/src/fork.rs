//! `fork`: a child must see every byte its parent had. Without
//! `UFFD_FEATURE_EVENT_FORK` (which unprivileged processes cannot enable) a
//! child's copy of a region is not registered, and a page evicted at the
//! fork would read as zeros there: silent corruption. So the parent brings
//! every evicted page in first (`Uzswap::prepare_fork`), holding eviction
//! until the fork is done; the child then shares every page copy-on-write
//! and runs detached (plain memory, no budget) until it execs, when the
//! new image starts under uzswap again (the environment carries it).
//!
//! The cost is a decompression of everything evicted, once per fork, and
//! memory over the budget until the evictor takes it back. `vfork` and
//! `posix_spawn` (which `system` and `popen` use) share the parent's
//! memory and do not come here: they stay as cheap as without uzswap.

use crate::{real, Internal, DETACHED};
use std::sync::atomic::Ordering::*;

/// # Safety
/// As fork(2).
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let Some(st) = crate::active() else {
        // SAFETY: glibc's fork.
        return unsafe { real::__fork() };
    };
    let g = Internal::enter();
    // Our address-space map stays consistent in the child.
    let vmas = st.vmas.lock();
    let guard = match st.uz.prepare_fork() {
        Ok(guard) => guard,
        Err(e) => {
            drop(vmas);
            drop(g);
            let line = format!("uzswap: fork refused: {e}\n");
            // SAFETY: our own buffer to stderr.
            unsafe { libc::write(2, line.as_ptr() as *const _, line.len()) };
            crate::set_errno(libc::ENOMEM);
            return -1;
        }
    };
    // SAFETY: glibc's fork.
    let pid = unsafe { real::__fork() };
    if pid == 0 {
        // The lock and the instance's threads are the parent's.
        std::mem::forget(guard);
        DETACHED.store(true, Release);
        drop(vmas);
    } else {
        drop(guard);
        drop(vmas);
    }
    drop(g);
    pid
}
