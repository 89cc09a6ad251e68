//! Page compressors and the batch compression engine.
//!
//! This crate owns the `Compressor` trait and its backends (lz4, zstd, lzo,
//! deflate), selected by name at run time, and the `BatchEngine` that runs many
//! page compressions at once on parallel workers (seed 002). It knows nothing
//! about pools, trees or swap devices: the layers above hand it bytes.
//!
//! Locking: a `Compressor` is shared (`Send + Sync`) and stateless; the mutable
//! state of an algorithm (zstd's CCtx, libdeflate's compressor, lzo's work
//! memory) lives in a `CompressCtx`, which one thread owns at a time, like the
//! kernel's per-CPU `acomp_ctx`.

pub mod batch;
pub mod compressor;
mod deflate;
mod lz4;
mod lzo;
pub mod quiesce;
pub mod thread;
mod zstd;

pub use batch::{BatchEngine, BatchError, EngineConfig, Spread, MAX_BATCH};
pub use compressor::{
    by_id, by_name, names, CompressCtx, CompressError, Compressor, CompressorId, DecompressError,
    UnknownCompressor,
};

/// The page size every layer of uzswap works in.
pub const PAGE_SIZE: usize = 4096;

/// A function every thread uzswap starts runs first (its fault handlers,
/// evictor, shrinker and compression workers), so that an embedder can
/// tell uzswap's own threads from the program's: the preload library routes
/// their C allocations away from the memory uzswap manages, which they must
/// never fault on. Set once, before the first instance is made.
pub mod thread_hook {
    use std::sync::OnceLock;

    static HOOK: OnceLock<fn()> = OnceLock::new();

    /// Install the hook; a second call is ignored (returns false).
    pub fn set(f: fn()) -> bool {
        HOOK.set(f).is_ok()
    }

    /// Run the hook, if any: the first thing a uzswap thread does.
    pub fn started() {
        if let Some(f) = HOOK.get() {
            f();
        }
    }

    /// Spawn one of uzswap's threads named `name`, running the hook and then
    /// `f`, and return once the hook has run. A new thread's start-up
    /// (the thread library's and Rust's thread-locals, the hook's own)
    /// allocates through libc, which reaches the program's allocator where
    /// the program brings one; an instance made before the program runs
    /// must have its threads past that before the program takes its
    /// allocator's lock and faults on its heap while holding it: a handler
    /// still starting waited on that lock, and the fault on the handler.
    ///
    /// On a stack of its own mapping ([`crate::thread`]), so that a forked
    /// child can start threads of its own.
    pub fn spawn<F, T>(name: String, f: F) -> std::io::Result<crate::thread::Handle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let h = crate::thread::spawn(&name, move || {
            started();
            let _ = tx.send(());
            f()
        })?;
        // A thread that died before sending leaves the channel closed:
        // `recv` returns then too.
        let rx = PENDING.with(|p| match p.borrow_mut().as_mut() {
            Some(v) => {
                v.push(rx);
                None
            }
            None => Some(rx),
        });
        if let Some(rx) = rx {
            let _ = rx.recv();
        }
        Ok(h)
    }

    std::thread_local! {
        /// Within [`starting_together`]: the threads spawned whose start
        /// is still to be waited for.
        static PENDING: std::cell::RefCell<Option<Vec<std::sync::mpsc::Receiver<()>>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// Run `f`, in which every [`spawn`] returns without waiting for the
    /// thread's start; wait for all of them at the end instead. An
    /// instance starts five or six threads, and a new thread waits for a
    /// CPU (a woken vCPU: 1.5-4 ms each here, 2-14 ms for an instance) —
    /// every process that starts under the runner, a forked child too,
    /// paid that in turn, so they now overlap.
    pub fn starting_together<R>(f: impl FnOnce() -> R) -> R {
        let outer = PENDING.with(|p| p.borrow_mut().replace(Vec::new()));
        let r = f();
        let started = PENDING.with(|p| std::mem::replace(&mut *p.borrow_mut(), outer));
        if !NO_WAIT.with(|w| w.get()) {
            for rx in started.unwrap_or_default() {
                let _ = rx.recv();
            }
        }
        r
    }

    std::thread_local! {
        static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Run `f`, in which [`starting_together`] does not wait for the
    /// threads' start at all: for a caller that knows no allocator lock
    /// of the program's can stand between a starting thread of uzswap's
    /// and the program (the preload library, where the program's
    /// allocator is its own), and that is in a hurry (a forked child,
    /// which may `exec` at once).
    pub fn without_waiting<R>(f: impl FnOnce() -> R) -> R {
        let outer = NO_WAIT.with(|w| w.replace(true));
        let r = f();
        NO_WAIT.with(|w| w.set(outer));
        r
    }

    /// What a scope runs on entry and on exit.
    type ScopeHooks = (fn(), fn());

    static SCOPE: OnceLock<ScopeHooks> = OnceLock::new();

    /// Install the pair run around uzswap's work in a program's thread (a
    /// fault resolved in the SIGBUS handler of the thread that took it):
    /// the same routing as `set`'s hook, for a while. A second call is
    /// ignored (returns false).
    pub fn set_scope(enter: fn(), leave: fn()) -> bool {
        SCOPE.set((enter, leave)).is_ok()
    }

    /// While the returned guard lives, the calling thread counts as one of
    /// uzswap's own.
    /// It is also inside for `quiesce` (it waits at a shut gate first).
    pub fn scope() -> Scope {
        if let Some((enter, _)) = SCOPE.get() {
            enter();
        }
        Scope(crate::quiesce::inside())
    }

    pub struct Scope(#[allow(dead_code)] crate::quiesce::Inside);

    impl Drop for Scope {
        fn drop(&mut self) {
            if let Some((_, leave)) = SCOPE.get() {
                leave();
            }
        }
    }
}
