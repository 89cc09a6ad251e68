//! uzswap's threads, each on a stack of its own mapping.
//!
//! A forked child of a process with uzswap's threads inherits their memory
//! but not the threads, and one that keeps using uzswap (the preload
//! library's children take their memory over with an instance of their
//! own) starts threads of its own. `parking_lot` keeps the threads parked
//! on a lock or condition variable in one process-wide table, linked
//! through each thread's `ThreadData`, a thread-local in the thread's TLS
//! block, which glibc places at the top of the thread's stack. The parent's
//! evictor, shrinker and compression workers are parked there at any fork,
//! so the child's table holds their entries; and glibc hands the stacks of
//! the parent's threads to the child's new threads (after a fork they go to
//! its stack cache). A new thread whose `ThreadData` lay where a parked
//! entry still was linked itself into a queue that already held it: the
//! first child of a forking program spun for ever in `notify_one`, its
//! other threads blocked on the table's bucket lock.
//!
//! So every thread here runs on a stack this module maps (glibc puts the
//! thread's TLS in it, `pthread_attr_setstack`) and unmaps only after the
//! thread is joined: such a stack is never in glibc's cache, and never
//! unmapped in a child (its thread is never joined there), so no
//! `ThreadData` of a thread started later, in either process, can lie
//! where a parked one of these was.

use std::any::Any;
use std::io;
use std::sync::Arc;

/// Stack bytes of each thread (Rust's default for spawned threads), plus a
/// guard page below.
const STACK: usize = 2 << 20;
const GUARD: usize = 4096;

type Slot<T> = Arc<parking_lot::Mutex<Option<std::thread::Result<T>>>>;

/// A running thread of uzswap's; `join` waits for it and gives back its
/// stack. Dropped unjoined, the thread runs on detached and its stack is
/// never unmapped.
pub struct Handle<T> {
    tid: libc::pthread_t,
    stack: usize,
    result: Slot<T>,
    joined: bool,
}

// SAFETY: a pthread id and a mapping's address, both usable from any thread.
unsafe impl<T: Send> Send for Handle<T> {}

impl<T> Handle<T> {
    /// Whether the calling thread is this one.
    pub fn is_current(&self) -> bool {
        // SAFETY: comparing two thread ids has no preconditions.
        unsafe { libc::pthread_equal(self.tid, libc::pthread_self()) != 0 }
    }

    /// Wait for the thread to end: what it returned, or its panic.
    pub fn join(mut self) -> std::thread::Result<T> {
        // SAFETY: a thread we started and nobody has joined or detached.
        let rc = unsafe { libc::pthread_join(self.tid, std::ptr::null_mut()) };
        self.joined = true;
        if rc == 0 {
            // SAFETY: our mapping; its thread has ended.
            unsafe { unmap(self.stack) };
        }
        self.result.lock().take().unwrap_or_else(|| {
            Err(Box::new("thread ended without a result") as Box<dyn Any + Send>)
        })
    }
}

impl<T> Drop for Handle<T> {
    fn drop(&mut self) {
        if !self.joined {
            // SAFETY: as in `join`; the stack stays mapped for it.
            unsafe { libc::pthread_detach(self.tid) };
        }
    }
}

/// mmap(2) and munmap(2) as system calls: the preload library interposes
/// the libc functions, and a stack must be plain memory.
fn map(len: usize) -> io::Result<usize> {
    // SAFETY: a new private anonymous mapping; nothing existing is touched.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1i32,
            0usize,
        )
    };
    if p < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(p as usize)
}

/// Unmap a stack `map` made (guard page included).
///
/// # Safety
/// No thread may run on it any more.
unsafe fn unmap(stack: usize) {
    // SAFETY: as the caller promises.
    unsafe { libc::syscall(libc::SYS_munmap, stack, STACK + GUARD) };
}

/// The calling thread's name as the kernel has it (Rust's
/// `thread::current().name()` knows no name of a thread it did not start).
pub fn current_name() -> Option<String> {
    let mut buf = [0u8; 16];
    // SAFETY: a 16-byte buffer, the kernel's limit, for the calling thread.
    let rc = unsafe {
        libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr().cast(), buf.len())
    };
    (rc == 0).then(|| {
        let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..n]).into_owned()
    })
}

struct Start<T> {
    f: Box<dyn FnOnce() -> T + Send>,
    result: Slot<T>,
    name: [u8; 16],
}

extern "C" fn start<T>(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: the box `spawn` made, handed to exactly this thread.
    let s = unsafe { Box::from_raw(p as *mut Start<T>) };
    // Named by itself (`PR_SET_NAME`): naming another thread goes through
    // /proc/self/task/TID/comm, whose dentries every process exit must
    // then invalidate (a fifth of a shell loop's time under the runner).
    // SAFETY: a NUL-terminated name of at most 15 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, s.name.as_ptr()) };
    unblock_sigbus();
    // Inside (`quiesce`) from here to the end but for its waits for work.
    let inside = crate::quiesce::inside();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(s.f));
    *s.result.lock() = Some(r);
    drop(inside);
    std::ptr::null_mut()
}

/// Let the calling thread take SIGBUS. A thread inherits its creator's
/// mask, and one started from a fork handler or a signal handler has
/// SIGBUS blocked; with the region handler in signal mode a fault on
/// region memory is a SIGBUS resolved by the faulting thread, which
/// uzswap's own threads take too where a program drops a page behind
/// uzswap's back and an eviction reads it. Blocked, the kernel ends the
/// process instead. A real fault ends it either way.
pub fn unblock_sigbus() {
    // SAFETY: a set made by sigemptyset/sigaddset, applied to this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGBUS);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Start `f` on a thread named `name` (the kernel keeps 15 bytes of it),
/// on a stack of its own mapping.
pub fn spawn<F, T>(name: &str, f: F) -> io::Result<Handle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let stack = map(STACK + GUARD)?;
    // The guard: an overflow faults rather than run into other memory.
    // SAFETY: the first page of the mapping just made.
    unsafe { libc::syscall(libc::SYS_mprotect, stack, GUARD, libc::PROT_NONE) };
    let result: Slot<T> = Arc::new(parking_lot::Mutex::new(None));
    let mut cname = [0u8; 16];
    for (d, b) in cname
        .iter_mut()
        .zip(name.bytes().filter(|&b| b != 0).take(15))
    {
        *d = b;
    }
    let start_box = Box::into_raw(Box::new(Start {
        f: Box::new(f),
        result: result.clone(),
        name: cname,
    }));
    // SAFETY: a zeroed attribute object is initialised by the call below.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    let mut tid: libc::pthread_t = 0;
    // SAFETY: `attr` is ours; the stack lies in our mapping, above the
    // guard; `start_box` goes to the thread (or back to us on failure).
    let rc = unsafe {
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstack(&mut attr, (stack + GUARD) as *mut libc::c_void, STACK);
        let rc = libc::pthread_create(&mut tid, &attr, start::<T>, start_box as *mut libc::c_void);
        libc::pthread_attr_destroy(&mut attr);
        rc
    };
    if rc != 0 {
        // SAFETY: the thread was not made: the box and the stack are ours.
        unsafe {
            drop(Box::from_raw(start_box));
            unmap(stack);
        }
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(Handle {
        tid,
        stack,
        result,
        joined: false,
    })
}
