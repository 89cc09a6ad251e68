//! The fault handler: threads that read userfaultfd events and resolve each
//! fault for the whole chunk around it (see the state machine in
//! `region`'s top comment).
//!
//! A handler never waits on a chunk: if the chunk is owned (BUSY or
//! EVICTING) it marks WAITER and moves on, and the owner wakes the range
//! when it lets go. The one fault it resolves in an owned chunk is a page
//! the program dropped behind our back in a victim not yet zapping, which
//! the evictor may be the one reading: filled with zeros under FILLING,
//! the chunk left to its owner (`fill_dropped_evicting`). So one handler
//! thread suffices for correctness, and the evictor depends on a handler
//! only for such a page: one waiting at the backstop fills those among its
//! pending events (`serve_dropped`), and where drops are expected the
//! evictor looks before it reads (`evict::fill_dropped`).
//! Locking: takes a region's `live` lock for reading while resolving in it;
//! may run one eviction step inline (taking an eviction slot first, never
//! while holding `live`).

use super::chunk::{self, *};
use super::uffd_sys::{self, Copy};
use super::{evict, uffd_fd, RegionError, RegionInner, Shared};
use crate::zswap::{LoadError, LoadMode, SwapEntry};
use crate::PAGE_SIZE;
use parking_lot::RwLockReadGuard;
use std::cell::RefCell;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::OnceLock;
use std::time::Instant;
use userfaultfd::{Event, EventBuffer, FaultKind, ReadWrite};

pub(super) fn handler_loop(sh: &Shared, h: usize) {
    HANDLER.set(h);
    let mut buf = EventBuffer::new(32);
    let mut scratch = vec![0u8; sh.chunk];
    let pending = RefCell::new(std::collections::VecDeque::with_capacity(32));
    let _pending = Pending::publish(&pending);
    let spin = match sh.cfg.handler {
        super::HandlerMode::Block | super::HandlerMode::Signal | super::HandlerMode::Auto => None,
        super::HandlerMode::Spin { micros } => {
            Some(std::time::Duration::from_micros(micros as u64))
        }
    };
    let mut last_fault = Instant::now();
    let loc = &sh.locality;
    // Non-local outcomes in a row (`locality.rs`), and whether the next
    // read follows a sleep in poll(2).
    let (mut miss, mut woke) = (0u32, false);
    loop {
        // Empty here: the loop below resolves every pending fault.
        match read_faults(sh, &mut buf, &mut *pending.borrow_mut()) {
            Ok(()) => {}
            Err(e) => {
                if sh.stop.load(Acquire) {
                    return;
                }
                fail(sh, &format!("reading userfaultfd events failed: {e}"));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if pending.borrow().is_empty() {
            if sh.stop.load(Acquire) {
                return;
            }
            if std::mem::take(&mut woke) {
                loc.empty_wake(&mut miss);
            }
            if loc.should_stand_by(h, &mut miss) {
                loc.standby(h, sh.stop_fd.as_raw_fd());
                continue;
            }
            if let Some(d) = spin {
                if last_fault.elapsed() < d {
                    std::hint::spin_loop();
                    continue;
                }
            }
            wait_readable(sh);
            woke = true;
            continue;
        }
        woke = false;
        loop {
            let Some((addr, wp, write, tid)) = pending.borrow_mut().pop_front() else {
                break;
            };
            let t0 = Instant::now();
            // Where the fault was taken: once resolved, the thread may run
            // again elsewhere.
            let cpu = loc.cpu_of(tid);
            resolve(sh, addr, Fault::Event { wp, write, tid }, &mut scratch, t0);
            loc.resolved(h, cpu, &mut miss);
        }
        last_fault = Instant::now();
    }
}

/// Read the queued events into `out` as page faults: (address,
/// write-protect, write, thread id). Nonblocking: none queued reads none.
fn read_faults(
    sh: &Shared,
    buf: &mut EventBuffer,
    out: &mut impl Extend<(usize, bool, bool, i32)>,
) -> Result<(), userfaultfd::Error> {
    let events = sh.uffd.read_events(buf)?;
    out.extend(events.flatten().filter_map(|ev| match ev {
        Event::Pagefault {
            kind,
            rw,
            addr,
            thread_id,
        } => Some((
            addr as usize,
            matches!(kind, FaultKind::WriteProtected),
            rw == ReadWrite::Write,
            thread_id.as_raw(),
        )),
        _ => None,
    }));
    Ok(())
}

/// The CPUs to bind `handlers` handler threads to, one each: the CPUs the
/// process may run on, where there are exactly `handlers` of them (and
/// `bind_handlers` is set); else `None`, and the threads run where the
/// scheduler puts them.
///
/// Why: every poller of the userfaultfd is woken by a fault. A handler bound
/// to the faulting thread's CPU runs there as soon as that thread blocks in
/// the kernel, resolves the fault and, with `UFFDIO_COPY`'s wake, hands the
/// CPU straight back: two context switches on one CPU. Unbound, the
/// scheduler often ran the resolving handler on the other CPU, and on a
/// virtual machine waking an idle vCPU (and the faulting thread's back) is
/// the larger part of a fault: `heap.py` under `uzswap run`, 1 M objects in
/// a 146 MiB budget, 5.6-5.7 s unbound against 4.3-4.7 s bound
/// (docs/BENCHMARKS.md). With fewer handlers than CPUs some faults would
/// find no handler on their CPU and the binding would only restrict, so
/// there it is left to the scheduler.
pub(super) fn handler_cpus(cfg: &super::Config, handlers: usize) -> Option<Vec<usize>> {
    if !cfg.bind_handlers || handlers == 0 {
        return None;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return None;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `set` is initialised and `c` below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    (cpus.len() == handlers).then_some(cpus)
}

/// Bind the calling handler thread to `cpu` (best effort: a failure leaves
/// it where the scheduler puts it, which is only slower).
pub(super) fn bind_handler(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (it came from sched_getaffinity).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 is this thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

/// Sleep until the userfaultfd has an event or the instance stops.
fn wait_readable(sh: &Shared) {
    let mut fds = [
        libc::pollfd {
            fd: uffd_fd(sh),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: sh.stop_fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // A wait for work (`quiesce`).
    // SAFETY: `fds` is a valid array of two pollfd for the call's duration.
    crate::compress::quiesce::idle(|| unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) });
}

/// Resolve one fault event at `addr`.
fn resolve(sh: &Shared, addr: usize, fault: Fault, scratch: &mut [u8], t0: Instant) {
    super::failpoints::take_delay();
    let page = addr & !(PAGE_SIZE - 1);
    let Some(r) = sh.lookup(addr) else {
        sh.ctr.faults_stale.fetch_add(1, Relaxed);
        sh.wake(page, PAGE_SIZE);
        return;
    };
    resolve_in(sh, &r, addr, fault, scratch, t0);
}

/// What is known of a fault.
#[derive(Clone, Copy)]
enum Fault {
    /// A queued event: the kernel says whether it is a write-protect fault
    /// and whether it is a write, and which thread took it (0 where the
    /// kernel does not say).
    Event { wp: bool, write: bool, tid: i32 },
    /// A signal: whether it is a write, and a write-protect fault (a write
    /// to a present page), where the architecture's context gives them
    /// (x86-64's page-fault error code); elsewhere missing or write-protect
    /// follows from the chunk state.
    Signal {
        write: Option<bool>,
        wp: Option<bool>,
    },
}

thread_local! {
    /// Set by `poison` in the thread that resolved the fault: in signal
    /// mode, the faulting thread's own SIGBUS handler then hands the signal
    /// on, as the kernel would deliver it.
    static POISONED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A handler thread's events read and not yet resolved.
type PendingFaults = RefCell<std::collections::VecDeque<(usize, bool, bool, i32)>>;

thread_local! {
    /// This handler thread's [`PendingFaults`] (`handler_loop` owns them):
    /// while one of its batch waits at the backstop for an eviction's
    /// room, the rest wait with it, and one of them may be that eviction's
    /// own read of a page the program dropped (`serve_dropped`). A pointer
    /// in a `Cell`, which needs no destructor: a thread-local with one
    /// registers it at first use (`__cxa_thread_atexit_impl`) under the
    /// loader's lock, which a program in `dlopen` holds while it faults on
    /// its heap, and a handler waiting for it there hung the program.
    static PENDING: std::cell::Cell<*const PendingFaults> =
        const { std::cell::Cell::new(std::ptr::null()) };
}

/// Publishes a handler's pending faults in [`PENDING`] while it lives.
struct Pending;

impl Pending {
    fn publish(p: &PendingFaults) -> Pending {
        PENDING.set(p);
        Pending
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        PENDING.set(std::ptr::null());
    }
}

/// How long a handler waits at the backstop before it reads queued events
/// for the evictor's fault on a dropped page (`serve_dropped`).
const STALLED: std::time::Duration = std::time::Duration::from_millis(20);

/// Fill the dropped pages of EVICTING chunks among this handler thread's
/// pending events (`fill_dropped_evicting`): called while it waits at the
/// backstop, whose room the evictor reading such a page cannot make until
/// it is filled. The evictor asks `mincore(2)` first where drops are
/// expected (`evict::fill_dropped`), which leaves a drop in the moment
/// between that look and its read; and the first drop of a program not
/// known for them. Elsewhere (signal mode, an event-less thread) nothing
/// is pending.
pub(super) fn serve_dropped(sh: &Shared, waited: std::time::Duration) {
    let p = PENDING.get();
    if p.is_null() {
        return;
    }
    // SAFETY: set by `handler_loop` on this thread to faults it owns, and
    // cleared before they go (`Pending`); this runs inside that loop.
    let p = unsafe { &*p };
    if let Ok(mut p) = p.try_borrow_mut() {
        if waited >= STALLED && p.len() < 4096 {
            // Every handler may be waiting here, each with its batch, while
            // the evictor's fault came after they read theirs: nobody reads
            // it. After a wait this long (a backstop wait is a fraction of
            // a millisecond), take what is queued too; the faults that need
            // nothing dropped are resolved after this one, in turn.
            let mut buf = EventBuffer::new(32);
            let _ = read_faults(sh, &mut buf, &mut *p);
        }
        p.retain(|&(addr, wp, _, _)| {
            if wp {
                return true;
            }
            let Some(r) = sh.lookup(addr) else {
                return true;
            };
            let page = addr & !(PAGE_SIZE - 1);
            let ci = (addr - r.base) / sh.chunk;
            let w = r.state[ci].load(Acquire);
            !(chunk::state(w) == EVICTING
                && mapped_here(&r, ci, sh.chunk, w, page)
                && fill_dropped_evicting(sh, &r, ci, page))
        });
    }
}

thread_local! {
    /// A signal-mode fault's chunk of decompressed data.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Make this thread's scratch for its own faults (`resolve_here`) ahead of
/// its first fault: see `sigbus::prepare_thread`.
pub(super) fn prepare_scratch(chunk: usize) {
    let _ = SCRATCH.try_with(|s| {
        if let Ok(mut buf) = s.try_borrow_mut() {
            if buf.len() < chunk {
                buf.resize(chunk, 0);
            }
        }
    });
}

/// Resolve a fault at `addr` of `r` in the thread that took it
/// (`HandlerMode::Signal`, called from the SIGBUS handler). On return the
/// access is retried, unless this returns true: the page cannot be read
/// back, and the SIGBUS is the program's (a poison marker also answers the
/// retry with SIGBUS, but one that reads, as ours do, `BUS_ADRERR`).
pub(super) fn resolve_here(
    sh: &Shared,
    r: &RegionInner,
    addr: usize,
    write: Option<bool>,
    wp: Option<bool>,
) -> bool {
    super::failpoints::take_delay();
    let t0 = Instant::now();
    let fault = Fault::Signal { write, wp };
    // What this allocates must not come from region memory: the program's
    // allocator may be the one that faulted (the preload library routes a
    // scope's allocations as it does uzswap's threads').
    let _ours = crate::compress::thread_hook::scope();
    sh.faulting.fetch_add(1, Relaxed);
    let done = SCRATCH.try_with(|s| match s.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < sh.chunk {
                buf.resize(sh.chunk, 0);
            }
            resolve_in(sh, r, addr, fault, &mut buf[..sh.chunk], t0);
            true
        }
        // Only a fault raised while resolving another could get here;
        // uzswap never touches unmapped region memory, but be safe.
        Err(_) => false,
    });
    if done != Ok(true) {
        // Or a fault in a thread's exit code, after its locals are gone.
        resolve_in(sh, r, addr, fault, &mut vec![0; sh.chunk], t0);
    }
    sh.faulting.fetch_sub(1, Relaxed);
    POISONED.try_with(|p| p.replace(false)).unwrap_or(false)
}

/// Whether `page` of chunk `ci` in state `w` is mapped, so that a fault on
/// it can only be a write to a protected page. For a signal, which does not
/// say which kind of fault it is.
fn mapped_here(r: &RegionInner, ci: usize, chunk: usize, w: u32, page: usize) -> bool {
    let in_mask = |m: u16| {
        let p = (page - r.chunk_addr(ci, chunk)) / PAGE_SIZE;
        m & chunk::group_bit(p, chunk / PAGE_SIZE) != 0
    };
    match chunk::state(w) {
        CLEAN | RESIDENT => true,
        PARTIAL => chunk::part_mask(w).is_some_and(in_mask),
        // Taken from one of those: its word keeps a partial chunk's mask.
        // Once ZAPPING its pages are going, and a fault waits for them.
        EVICTING if w & ZAPPING == 0 => chunk::part_mask(w).is_none_or(in_mask),
        _ => false,
    }
}

/// Resolve a fault at `addr` of `r`, from an event or in the faulting
/// thread.
fn resolve_in(
    sh: &Shared,
    r: &RegionInner,
    addr: usize,
    fault: Fault,
    scratch: &mut [u8],
    t0: Instant,
) {
    let page = addr & !(PAGE_SIZE - 1);
    let ci = (addr - r.base) / sh.chunk;
    // Failed installs and unprotects of this fault (`try_again`).
    let mut tries = 0;
    loop {
        let w = r.state[ci].load(Acquire);
        let st = chunk::state(w);
        let (wp, write) = match fault {
            Fault::Event { wp, write, .. } => (wp, write),
            // A read that faulted on a page mapped now was resolved since
            // (stale, below); where reads and writes cannot be told apart,
            // a fault on a mapped page is taken for a write.
            // Where the context says, as an event does: the state cannot
            // tell a write-protect fault from a missing one on a page the
            // program dropped itself (taken for write-protect, a partial
            // chunk's dropped page was unprotected again for ever).
            Fault::Signal { write, wp } => (
                wp.unwrap_or_else(|| mapped_here(r, ci, sh.chunk, w, page) && write != Some(false)),
                write.unwrap_or(false),
            ),
        };
        match (st, wp) {
            (EVICTING, false) if mapped_here(r, ci, sh.chunk, w, page) => {
                if fill_dropped_evicting(sh, r, ci, page) {
                    return;
                }
            }
            (BUSY | EVICTING, _) if sh.signal => {
                // The faulting thread is ours to hold: wait for the owner,
                // then look again (the chunk may now need resolving). The
                // waiter mark tells an evictor that a read waits on its
                // partial victim (`evict::evict_partial` hands it back).
                sh.ctr.faults_parked.fetch_add(1, Relaxed);
                let t = Instant::now();
                if st == EVICTING {
                    let _ = chunk::park(&r.state[ci]);
                }
                chunk::wait_released(&r.state[ci]);
                sh.ctr
                    .parked_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
            }
            (BUSY | EVICTING, _) => {
                if chunk::park(&r.state[ci]).is_ok() {
                    sh.ctr.faults_parked.fetch_add(1, Relaxed);
                    return;
                }
            }
            (UNTOUCHED | STORED, false) => {
                let live = match own(sh, r, ci, st, true) {
                    Own::Gone => return,
                    Own::Lost => continue,
                    Own::Owned(live, _) => live,
                };
                let write = if st == STORED {
                    as_write(sh, write)
                } else {
                    write
                };
                let res = if st == UNTOUCHED {
                    match install_zero_around(sh, r, ci) {
                        true => Installed::Yes,
                        false => Installed::Failed,
                    }
                } else if let Some(p) = sub_chunk(sh, r, ci, addr, 0) {
                    install_group(sh, r, ci, p, 0, write, scratch)
                } else {
                    let res = install(sh, r, ci, write, false, scratch);
                    if res == Installed::Yes {
                        read_ahead(sh, r, ci, write, scratch);
                    }
                    res
                };
                if res == Installed::Unreadable {
                    poison(sh, r, ci, page, fault);
                }
                drop(live);
                if res == Installed::Failed && try_again(sh, r, ci, fault, &mut tries) {
                    continue;
                }
                if res == Installed::Yes {
                    let lat = t0.elapsed().as_nanos() as u64;
                    if st == STORED {
                        sh.lat_pool.record(lat);
                    } else {
                        sh.lat_zero.record(lat);
                    }
                }
                return;
            }
            (PARTIAL, _) => {
                let bit = chunk::group_bit(
                    (page - r.chunk_addr(ci, sh.chunk)) / PAGE_SIZE,
                    1 << sh.order,
                );
                let mask = chunk::part_mask(w).expect("PARTIAL without its mask");
                if !wp && mask & bit != 0 {
                    // The page should be there: resolved before we read
                    // the event, or dropped by the program.
                    match refill_dropped(sh, r, ci, page, PARTIAL) {
                        Ok(true) => return,
                        Ok(false) => continue,
                        Err(()) if try_again(sh, r, ci, fault, &mut tries) => continue,
                        Err(()) => return,
                    }
                }
                // A write to a mapped group lifts its protection and
                // charges nothing: no backstop for it.
                let charges = !(wp && mask & bit != 0);
                let (live, prev) = match own(sh, r, ci, PARTIAL, charges) {
                    Own::Gone => return,
                    Own::Lost => continue,
                    Own::Owned(live, prev) => (live, prev),
                };
                // The backstop may have waited: the chunk may have been
                // evicted and made PARTIAL again with other groups since
                // `w`. What is mapped is what the word we replaced says.
                let mask = chunk::part_mask(prev).expect("PARTIAL without its mask");
                if (!wp && mask & bit != 0) || (wp && mask & bit == 0) {
                    // Mapped now, or (a write-protect fault) no longer
                    // mapped: the thread retries and faults afresh. It
                    // must be woken here, whatever else parked: a
                    // write-protect fault on a group the evictor zapped
                    // before the event was read has had no wake since (a
                    // zap wakes nobody), and left unwoken it slept for
                    // good (a soak's thread did).
                    chunk::release(&r.state[ci], PARTIAL, 0, 0);
                    sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
                    sh.ctr.faults_stale.fetch_add(1, Relaxed);
                    return;
                }
                let write = if wp { write } else { as_write(sh, write) };
                if wp {
                    sh.ctr.faults_wp.fetch_add(1, Relaxed);
                    if prev & KEPT != 0 {
                        let done = unprotect_kept(sh, r, ci);
                        drop(live);
                        if !done && try_again(sh, r, ci, fault, &mut tries) {
                            continue;
                        }
                        return;
                    }
                    if sh.cfg.partial_faults {
                        let done = unprotect_group(sh, r, ci, page);
                        drop(live);
                        if !done && try_again(sh, r, ci, fault, &mut tries) {
                            continue;
                        }
                        return;
                    }
                }
                // Another fault in the chunk adds its group while the chunk
                // looks randomly used; a chunk used in order or at many
                // places comes in whole.
                // A child's chunk with groups mapped from its parent
                // (`RegionInner::shared`) takes groups only: completed, it
                // would be DIRTY and whole, and its eviction would store
                // every page into the child's pool, where the kept copies
                // of what it faulted in made its eviction a zap (a Redis
                // `BGSAVE` child stored 566 k pages for 20 k such
                // completions).
                let sub = match sub_chunk(sh, r, ci, addr, mask) {
                    None if r.shared_mask(ci) != 0 => {
                        Some((addr - r.chunk_addr(ci, sh.chunk)) / PAGE_SIZE)
                    }
                    s => s,
                };
                let done = match sub {
                    Some(p) => install_group(sh, r, ci, p, mask, write, scratch),
                    None => fill(sh, r, ci, mask, wp || write, scratch),
                };
                if done == Installed::Unreadable {
                    poison(sh, r, ci, page, fault);
                }
                drop(live);
                if done == Installed::Failed && try_again(sh, r, ci, fault, &mut tries) {
                    continue;
                }
                if done == Installed::Yes {
                    sh.lat_pool.record(t0.elapsed().as_nanos() as u64);
                }
                return;
            }
            (CLEAN, true) => {
                let live = match own(sh, r, ci, CLEAN, false) {
                    Own::Gone => return,
                    Own::Lost => continue,
                    Own::Owned(live, _) => live,
                };
                sh.ctr.faults_wp.fetch_add(1, Relaxed);
                // The first write to a clean chunk, which keeps no copy in
                // the cache (`keep.rs`): only its protection goes.
                let base = r.chunk_addr(ci, sh.chunk);
                if let Err(e) = unprotect(sh, base, sh.chunk) {
                    fail(sh, &format!("unprotecting a clean chunk: {e}"));
                    // CLEAN only while every page is protected: an eviction
                    // stores a CLEAN chunk without protecting it, and a
                    // write to a page left writable (a range the kernel
                    // changed in part: a chunk across a VMA split) would be
                    // lost. Not sure of that, RESIDENT: its eviction
                    // protects, and a write-protect fault on it unprotects.
                    let to = match sh.uffd.write_protect(base as *mut _, sh.chunk) {
                        Ok(_) => CLEAN,
                        Err(_) => RESIDENT,
                    };
                    release_failed(sh, r, ci, to);
                    drop(live);
                    if try_again(sh, r, ci, fault, &mut tries) {
                        continue;
                    }
                    return;
                }
                copy_written(sh);
                chunk::release(&r.state[ci], RESIDENT, 0, REF);
                sh.wake(base, sh.chunk);
                return;
            }
            (RESIDENT, true) => {
                // A RESIDENT chunk keeps no page protected, but for one
                // whose unprotect failed (published RESIDENT so that its
                // eviction protects it afresh), or a stale event (lifting
                // nothing then): lift it.
                let live = match own(sh, r, ci, RESIDENT, false) {
                    Own::Gone => return,
                    Own::Lost => continue,
                    Own::Owned(live, _) => live,
                };
                let base = r.chunk_addr(ci, sh.chunk);
                if let Err(e) = unprotect(sh, base, sh.chunk) {
                    fail(sh, &format!("unprotecting a resident chunk: {e}"));
                    release_failed(sh, r, ci, RESIDENT);
                    drop(live);
                    if try_again(sh, r, ci, fault, &mut tries) {
                        continue;
                    }
                    return;
                }
                chunk::release(&r.state[ci], RESIDENT, 0, 0);
                sh.wake(base, sh.chunk);
                return;
            }
            (RESIDENT, false) | (CLEAN, false) => {
                // Every page of the chunk should be mapped: resolved before
                // we read the event, or a page the program dropped itself.
                match refill_dropped(sh, r, ci, page, st) {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(()) if try_again(sh, r, ci, fault, &mut tries) => {}
                    Err(()) => return,
                }
            }
            _ => {
                // Resolved before we read the event (a resolver or an
                // evictor's abort already woke the range), or a write-protect
                // fault on a chunk since zapped: the woken thread retries and
                // takes a fresh missing fault.
                sh.ctr.faults_stale.fetch_add(1, Relaxed);
                sh.wake(page, PAGE_SIZE);
                return;
            }
        }
    }
}

/// A missing fault on `page` of chunk `ci`, which the chunk's word (`from`:
/// RESIDENT, CLEAN, or PARTIAL with the page's group in its mask) says is
/// mapped. Either the event is stale (a resolver mapped the page since, and
/// the install below answers EEXIST), or the program dropped the page
/// itself: `MADV_DONTNEED` on region memory behind `Uzswap::discard`'s
/// back, or an `MADV_FREE` page the kernel reclaimed. It then reads back as
/// zeros, as a dropped anonymous page does in the kernel. (Taken for stale,
/// such a fault was woken and retried for ever.) The zero page goes in
/// write-protected where the chunk's other pages are, and the cache's copy
/// of it is dropped, so an eviction stores it afresh rather than claim a
/// copy of what was there before. Returns false when the chunk moved on
/// first (look again), an error when the copy failed (the chunk is as it
/// was, the faulting thread not woken).
fn refill_dropped(
    sh: &Shared,
    r: &RegionInner,
    ci: usize,
    page: usize,
    from: u32,
) -> Result<bool, ()> {
    let (_live, prev) = match own(sh, r, ci, from, false) {
        Own::Gone => return Ok(true),
        Own::Lost => return Ok(false),
        Own::Owned(live, prev) => (live, prev),
    };
    let base = r.chunk_addr(ci, sh.chunk);
    let p = (page - base) / PAGE_SIZE;
    if let Some(m) = chunk::part_mask(prev) {
        if m & chunk::group_bit(p, 1 << sh.order) == 0 {
            // No longer mapped here: the PARTIAL path's to resolve.
            if chunk::release(&r.state[ci], from, 0, 0) {
                sh.wake(base, sh.chunk);
            }
            return Ok(false);
        }
    }
    let wp = from != RESIDENT;
    // SAFETY: `page` lies in a registered region whose chunk we own (BUSY)
    // under its live lock.
    let res = unsafe { copy_zero_page(sh, page, wp, false) };
    match res {
        Ok(Copy::Done) => {
            sh.ctr.faults_dropped.fetch_add(1, Relaxed);
            if from != RESIDENT {
                sh.zswap.invalidate(sh.entry(r, ci).offset(p as u64));
            }
        }
        Ok(_) => {
            sh.ctr.faults_stale.fetch_add(1, Relaxed);
        }
        Err((e, _)) => {
            fail(sh, &e);
            release_failed(sh, r, ci, from);
            return Err(());
        }
    }
    chunk::release(&r.state[ci], from, 0, 0);
    sh.wake(base, sh.chunk);
    Ok(true)
}

/// A missing fault on `page` of chunk `ci`, EVICTING and not yet ZAPPING,
/// whose word says the page is mapped: the program dropped it behind our
/// back, and the evictor has not zapped anything of the chunk. Its reader
/// for the store may be the faulting thread (a handler waiting on the
/// owner would then wait for ever: a Go program's own `madvise` hung its
/// evictor so), so the page is filled with zeros, as a dropped anonymous
/// page reads, write-protected as the victim's other pages are, without
/// taking the chunk: FILLING keeps the evictor from zapping until the copy
/// is in. Returns false where the chunk moved on or another fill is in
/// progress (look again).
fn fill_dropped_evicting(sh: &Shared, r: &RegionInner, ci: usize, page: usize) -> bool {
    // Recursive: an evictor holds it for reading, and may be the faulting
    // thread, so a teardown queued for it must not hold this up.
    let live = r.live.read_recursive();
    if !*live {
        sh.wake(page, PAGE_SIZE);
        return true;
    }
    if chunk::begin_fill(&r.state[ci]).is_err() {
        std::thread::yield_now();
        return false;
    }
    // SAFETY: `page` lies in a registered region, live under `live`, and
    // no zap of its chunk starts while FILLING is set.
    let res = unsafe { copy_zero_page(sh, page, true, true) };
    chunk::end_fill(&r.state[ci]);
    match res {
        Ok(Copy::Done) => {
            sh.ctr.faults_dropped.fetch_add(1, Relaxed);
        }
        Ok(_) => {
            // Mapped already: a fill of another fault on the page.
            sh.ctr.faults_stale.fetch_add(1, Relaxed);
            sh.wake(page, PAGE_SIZE);
        }
        Err((e, _)) => {
            // Not parked on the owner, which may be the faulting thread:
            // woken, it takes the fault again, and this tries again.
            fail(sh, &e);
            sh.wake(page, PAGE_SIZE);
        }
    }
    true
}

/// Map a zero page at `page` (write-protected with `wp`, waking the
/// threads waiting on it with `wake`), trying again while the address
/// space is changing (EAGAIN).
///
/// # Safety
/// `page` lies in a registered region that stays mapped for the call, and
/// whoever changes its page may (owns its chunk, or holds FILLING).
pub(super) unsafe fn copy_zero_page(
    sh: &Shared,
    page: usize,
    wp: bool,
    wake: bool,
) -> Result<Copy, (String, usize)> {
    loop {
        // SAFETY: `sh.zeros` holds at least a page; the caller's `page`.
        match unsafe { uffd_sys::copy(uffd_fd(sh), page, sh.zeros.as_ptr(), PAGE_SIZE, wp, wake) } {
            Ok(Copy::Again(_)) => std::thread::yield_now(),
            other => return other,
        }
    }
}

/// What an install came to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Installed {
    Yes,
    /// Not installed (a failed copy): the chunk is as it was and the
    /// faulting thread stays parked, to be tried again (`try_again`).
    Failed,
    /// Its data cannot be read back (an I/O error, a failed checksum or
    /// decompression): the chunk is as it was, its data still where it
    /// was, and the fault gets SIGBUS (`poison`).
    Unreadable,
}

/// A fault on `page` of chunk `ci` (in a live region: the caller holds its
/// `live` lock) whose data cannot be read back: the kernel's answer to a
/// swap-in I/O error is SIGBUS with the address, and so is ours. The page
/// gets a poison marker, which also wakes its faulting thread: the access
/// then raises SIGBUS (`BUS_MCEERR_AR`; in signal mode our handler passes
/// it on as not ours), instead of sleeping on its fault for good or
/// faulting again for ever. The rest of the region is served as before. A
/// page a scan faulted on gets the marker even where another page of the
/// chunk was the unreadable one (the whole chunk was to come in). The
/// marker lasts until the page is discarded (`MADV_DONTNEED`) or unmapped.
///
/// Where the marker cannot be set (Linux before 6.6 has no `UFFDIO_POISON`)
/// a woken thread would fault again, and its fault fail again, for ever:
/// the faulting thread is sent SIGBUS itself (`tgkill`; its `si_addr` is
/// not the page then). In signal mode the thread's own handler passes the
/// signal on either way.
fn poison(sh: &Shared, r: &RegionInner, ci: usize, page: usize, fault: Fault) {
    // The program learns of it only by the signal; this line (after the
    // one that says why) tells whoever reads its standard error.
    say(&format!(
        "the page at {page:#x} cannot be read back: the access gets SIGBUS, which \
             stops the program (unless it handles SIGBUS) rather than give it wrong data"
    ));
    let res = if super::failpoints::take_poison() {
        Err(format!("UFFDIO_POISON at {page:#x}: failed (failpoint)"))
    } else {
        uffd_sys::poison(uffd_fd(sh), page, PAGE_SIZE)
    };
    if let Err(e) = res {
        fail(sh, &e);
        sigbus(fault);
    } else {
        let _ = POISONED.try_with(|p| p.set(true));
    }
    sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
}

/// SIGBUS for the thread that took `fault`, from the resolver: a handler
/// thread sends it (`tgkill`; the thread is known by
/// `UFFD_FEATURE_THREAD_ID`, and the signal's `si_addr` is not the page),
/// and in signal mode the faulting thread's own handler passes it on
/// (`POISONED`).
fn sigbus(fault: Fault) {
    if let Fault::Event { tid, .. } = fault {
        if tid > 0 {
            // SAFETY: tgkill(2) with our own process id and the id of one
            // of its threads, parked on its fault.
            unsafe {
                libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGBUS);
            }
        }
    }
    let _ = POISONED.try_with(|p| p.set(true));
}

/// Give chunk `ci` back as `to` after a failed attempt to resolve a fault
/// on it. The faulting thread is not woken (it would only fault again; the
/// resolver tries again, `try_again`), but faults that parked on the chunk
/// meanwhile are: a handler thread left them to the owner's release, and
/// they take their own tries.
fn release_failed(sh: &Shared, r: &RegionInner, ci: usize, to: u32) {
    if chunk::release(&r.state[ci], to, 0, 0) {
        sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
    }
}

/// Tries of one fault's install or unprotect before the faulting thread
/// gets SIGBUS.
const RESOLVE_TRIES: u32 = 8;

/// A fault's install or unprotect of chunk `ci` failed (the chunk is as it
/// was and no longer ours; the caller holds no lock): whether to try again.
/// Between tries the resolver sleeps 1, 2, 4 … ms (127 ms in all), time for
/// an evictor to free what a refused copy wanted (`UFFDIO_COPY` answers
/// ENOMEM at a memory cgroup's limit). After [`RESOLVE_TRIES`] the faulting
/// thread gets SIGBUS, as a kernel fault that can neither allocate nor
/// reclaim ends in `VM_FAULT_SIGBUS` or the OOM killer, instead of sleeping
/// on its fault for good (handler threads) or faulting again for ever
/// (signal mode); the chunk's data stays where it is, and a later access
/// (a program's SIGBUS handler may return) tries afresh.
fn try_again(sh: &Shared, r: &RegionInner, ci: usize, fault: Fault, tries: &mut u32) -> bool {
    *tries += 1;
    if *tries < RESOLVE_TRIES {
        std::thread::sleep(std::time::Duration::from_millis(1 << (*tries - 1)));
        return true;
    }
    fail(
        sh,
        &format!(
            "a fault at {:#x}: {RESOLVE_TRIES} tries failed; the faulting thread gets SIGBUS",
            r.chunk_addr(ci, sh.chunk)
        ),
    );
    sigbus(fault);
    sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
    false
}

/// Taking a chunk to resolve a fault on it.
enum Own<'a> {
    /// The region is being torn down: nothing to resolve.
    Gone,
    /// Another thread moved the chunk first: look at it again.
    Lost,
    /// The chunk is BUSY and ours; the guard keeps the region alive. With
    /// the word it had (a PARTIAL chunk's group mask is in it).
    Owned(RwLockReadGuard<'a, bool>, u32),
}

/// Move chunk `ci` from `from` to BUSY under the region's `live` lock, after
/// the backstop when resolving it will charge memory (`charges`).
fn own<'a>(sh: &Shared, r: &'a RegionInner, ci: usize, from: u32, charges: bool) -> Own<'a> {
    if charges {
        evict::backstop(sh);
    }
    let live = r.live.read();
    if !*live {
        return Own::Gone;
    }
    match chunk::own(&r.state[ci], from) {
        Ok(prev) => Own::Owned(live, prev),
        Err(_) => Own::Lost,
    }
}

/// Install stored chunk `ci` of `r`, which the caller moved to BUSY from
/// STORED. Returns whether it was installed; if not, the chunk is back to
/// STORED with its data in the cache. (Never-touched chunks go through
/// `install_zero_around`.)
fn install(
    sh: &Shared,
    r: &RegionInner,
    ci: usize,
    write: bool,
    prefetch: bool,
    scratch: &mut [u8],
) -> Installed {
    let base = r.chunk_addr(ci, sh.chunk);
    // A read installs the chunk write-protected (CLEAN) but keeps no copy
    // of it: a whole chunk's copy was nearly never claimed (`keep.rs`).
    let keep = sh.cfg.keep_copy && !write;
    let first = sh.entry(r, ci);
    // But where every page was written back, the copies are device slots
    // that hold no memory: kept, the chunk's eviction before any write is
    // a zap, where it stored the chunk again and wrote back what that
    // pushed out of the pool (`chunk::KEPT`).
    let kept = keep && kept_whole(sh, first);
    let mode = if kept {
        LoadMode::KeepClean
    } else {
        LoadMode::Exclusive
    };
    if let Err(e) = sh.zswap.load_folio(first, sh.order, scratch, mode) {
        // The stored copy stays where it is; the faulting thread cannot be
        // given wrong data, so the failure is loud.
        chunk::release(&r.state[ci], STORED, 0, 0);
        fail(sh, &format!("loading region {} chunk {ci}: {e}", r.id));
        return Installed::Unreadable;
    }
    let flags = workingset_refault(sh, r, ci, None);
    if !prefetch {
        sh.ctr.pgmajfault.fetch_add(1, Relaxed);
        super::young::faulted(sh, r, ci);
    } else {
        sh.ctr.prefetched.fetch_add(1, Relaxed);
    }
    let (to, bits) = match (kept, keep) {
        (true, _) => (PARTIAL, kept_bits(sh)),
        (false, true) => (CLEAN, 0),
        (false, false) => (RESIDENT, 0),
    };
    // Charge before the pages appear, so usage never under-reports.
    sh.resident.fetch_add(sh.chunk as u64, Relaxed);
    let woke = wake_on_copy(sh);
    let _published = Publishing::begin(sh, woke);
    if let Err((e, mapped)) = copy_chunk(sh, base, scratch, keep, woke) {
        sh.resident.fetch_sub(sh.chunk as u64, Relaxed);
        if !keep && mapped > 0 {
            // Pages placed writable may have been written already: protect
            // them and take what they hold now, so the chunk goes back to
            // the cache whole and no write is lost.
            if let Err(we) = sh.uffd.write_protect(base as *mut _, mapped) {
                fail(sh, &format!("protecting a failed install: {we}"));
            }
            // SAFETY: the first `mapped` bytes of the chunk are mapped (the
            // copy placed them, or found them there), the chunk is ours
            // (BUSY) under the live lock, and writes to it now trap.
            let now = unsafe { std::slice::from_raw_parts(base as *const u8, mapped) };
            scratch[..mapped].copy_from_slice(now);
        }
        unmap_and_restore(sh, r, ci, 0..1 << sh.order, scratch, mode);
        release_failed(sh, r, ci, STORED);
        fail(sh, &e);
        return Installed::Failed;
    }
    if kept {
        sh.ctr.kept_installs.fetch_add(1, Relaxed);
    }
    let waiter = chunk::release(
        &r.state[ci],
        to,
        REJECTED | ACTIVE | PART_BITS,
        REF | flags | bits,
    );
    settled_after(sh, base, woke, waiter);
    Installed::Yes
}

/// Whether a read that brings in the whole chunk at `first` keeps its
/// copies (`chunk::KEPT`): every page of it is written back or inherited
/// at a fork, copies that hold no pool memory (a chunk with pages in the
/// pool keeps none, `keep.rs`), and partial chunks, whose
/// eviction claims copies page by page, are on.
fn kept_whole(sh: &Shared, first: SwapEntry) -> bool {
    sh.cfg.partial_faults && sh.order > 0 && sh.zswap.holds_no_memory(first, 1 << sh.order)
}

/// Whether PARTIAL word `w` has every group of its chunk mapped: nothing
/// is left to bring in.
pub(super) fn whole(sh: &Shared, w: u32) -> bool {
    chunk::part_mask(w) == Some(chunk::full_mask(1 << sh.order))
}

/// Whether word `w` is of a chunk with a page not mapped, held in the
/// cache: STORED, or PARTIAL with a group left out.
pub(super) fn unmapped(sh: &Shared, w: u32) -> bool {
    match chunk::state(w) {
        STORED => true,
        PARTIAL => !whole(sh, w),
        _ => false,
    }
}

/// The word bits of a chunk read in whole keeping its copies: PARTIAL with
/// every group mapped, KEPT.
fn kept_bits(sh: &Shared) -> u32 {
    chunk::part_bits(chunk::full_mask(1 << sh.order)) | KEPT
}

/// A forward scan's read-ahead through stored memory, where the folio is
/// larger than the chunk (`Config::folio_order` past `MAX_CHUNK_ORDER`):
/// after a scan entered chunk `ci` and installed it whole (BUSY no longer;
/// `sub_chunk` judged the scan), install the stored chunks after it in its
/// aligned folio window, as many as the run of mapped chunks that led to
/// it (the kernel's readahead ramp, as `zero_ramp` for first touches: an
/// isolated entry takes one chunk, a long scan the window), while there
/// is room under the backstop's limit (`evict::room_for`): it never evicts
/// for a guess, and the evictor, kicked, makes the room back. They go in
/// as the fault's chunk did (a writing scan's writable), counted
/// `prefetched`, not as faults. The
/// unit of faults and eviction stays the chunk, so a random read still
/// brings in one page and an eviction takes what is cold of a window, not
/// the window: the unit grows only where the access is sequential. It
/// stops at the first chunk that is not STORED or cannot be installed.
fn read_ahead(sh: &Shared, r: &RegionInner, ci: usize, write: bool, scratch: &mut [u8]) {
    let per = 1usize << sh.cfg.folio_order.saturating_sub(sh.order);
    if per <= 1 || !sh.cfg.partial_faults {
        return;
    }
    let mapped = |c: &AtomicU32| {
        let w = c.load(Relaxed);
        matches!(chunk::state(w), RESIDENT | CLEAN) || w & KEPT != 0
    };
    let behind = r.state[..ci]
        .iter()
        .rev()
        .take(per)
        .take_while(|c| mapped(c))
        .count();
    let end = ((ci / per + 1) * per)
        .min(r.state.len())
        .min(ci + 1 + behind);
    let mut last = None;
    for c in ci + 1..end {
        if !evict::room_for(sh, sh.chunk as u64)
            || chunk::transition(&r.state[c], STORED, BUSY, 0, 0).is_err()
        {
            break;
        }
        if !write && sh.cfg.keep_copy {
            sh.keep.kept(sh.zswap.clean_dropped());
        }
        // A chunk that could not be installed is back to STORED with its
        // data where it was; the fault that reaches it reports it.
        if install(sh, r, c, write, true, scratch) != Installed::Yes {
            break;
        }
        last = Some(c);
    }
    if let Some(c) = last {
        // The scan enters the next window from a chunk it did not fault
        // on: `sub_chunk` looks for a recent fault in the chunk before.
        sh.recent
            .note(r.chunk_addr(c, sh.chunk) + sh.chunk - PAGE_SIZE);
        evict::maybe_kick(sh);
    }
}

/// A PARTIAL chunk takes faults one group at a time until it has this
/// many groups mapped; the next fault completes it. Random accesses (a
/// hash table, a sparse index, a language runtime's heap) touch a few
/// pages of a chunk each time it is in: installing just those costs a
/// page's decompression and charge per fault, where completing costs the
/// chunk's, and the evictor then reclaims the chunk by zapping pages whose
/// copies it already has. So only a scan (`Recent`, `scan_enters`)
/// completes a chunk: a count of random faults did worse at every
/// threshold tried. A Python heap of 95 MiB under 48 MiB (signal mode,
/// alternating runs): 2.7-2.8 s completing at 4 groups (2.6 pages
/// decompressed per fault), 2.2-2.3 at 8, 2.0-2.1 never; usemem's random
/// row at 256 MiB under 128 MiB: 98-100 k ops/s at 4, 141-142 k never;
/// completing at 4 only chunks the workingset had activated, 113-116 k
/// against 128 k never, with skewed reads no better (usemem skew, 512 MiB
/// under 256 MiB: 429-449 MB/s against 437-521).
/// (A chunk whose every group came in this way stays PARTIAL, which is
/// as good: each page mapped, and clean pages evicted by a zap.)
const PARTIAL_MAX_GROUPS: u32 = chunk::GROUPS as u32;

/// A PARTIAL chunk whose fault on a further group finds this many already
/// mapped (`DENSE.0`), all brought in within `DENSE.1` times as many faults
/// (the instance's) as there are resident chunks, is dense: its pages are in
/// use together (the hot part of a skewed working set), and it is
/// completed. The distance is the workingset's (`workingset_refault`).
/// Random access spreads a chunk's faults far wider (a Python heap,
/// usemem's random row), and the same count over any time completed chunks
/// for pages never used (see `PARTIAL_MAX_GROUPS`). usemem skew, index,
/// 256 MiB under 128 MiB, alternating: 18.5-19.1 k faults with no density
/// rule, 15.0-15.1 k with 6 groups in one window, 12.3-12.4 k completing
/// at 4 groups whatever the time (read pass 228-261, 296-339, 332-402
/// MB/s on a busy machine). At 3 groups the rule took a larger Python heap
/// for dense (heap.py, 293 MiB under `uzswap run --budget 146M`): a chunk
/// refaulted soon after its eviction collects three of its sixteen pages'
/// objects by chance, and each completion loaded 13 more pages for them:
/// 11-15 k completions, 235 k faults and 465 k pages loaded, 10.5-10.7 s,
/// against 3.4-5.3 s with 4 KiB chunks (BENCHMARKS.md, 2026-11-27).
///
/// Half the chunk, over four windows: a fault brings one group in, not a
/// chunk, so a chunk completed at its first fault would have stayed
/// resident for several times as many faults as there are resident
/// chunks, and one window missed the hot chunks of skewed reads, whose
/// sixteen pages fault in over a few windows (usemem skew, 1 GiB at
/// zram-lz4's memory: 115 completions and 76 k faults). 6 groups over 4
/// windows caught them (3.2 k completions, 52 k faults) but completed
/// chunks of the random row too (5% more pages loaded); 8 over 4 takes
/// the skewed rows' faults down by a fifth (76 k to 57-61 k, read pass
/// 2-7% faster, CPU 2-7% less) and loads no more pages on the random row
/// (BENCHMARKS.md, "Dense chunks over four windows"). Chunks of fewer than
/// sixteen pages (a folio below 64 KiB) keep the rule they were measured
/// with: six groups in one window (`DENSE_SMALL`).
const DENSE: (u32, u64) = (chunk::GROUPS as u32 / 2, 4);
const DENSE_SMALL: (u32, u64) = (6, 1);

/// The groups (their first page's address) of the last faults on stored
/// memory, in a small ring every resolver writes: a fault on the group
/// right after one of these is a scan walking forward, and completes its
/// chunk. Being mapped is not enough to tell: under random access a
/// chunk's mapped groups neighbour a new fault by chance, as often as one
/// in four faults with four of sixteen mapped, and each such completion
/// decompressed a chunk for one page. Eight entries: the scans of a few
/// threads at once, where random faults almost never hit.
#[derive(Default)]
pub(super) struct Recent {
    groups: [std::sync::atomic::AtomicUsize; 8],
    next: std::sync::atomic::AtomicUsize,
}

impl Recent {
    fn note(&self, group: usize) {
        let i = self.next.fetch_add(1, Relaxed) % self.groups.len();
        self.groups[i].store(group, Relaxed);
    }

    fn has(&self, group: usize) -> bool {
        self.groups.iter().any(|g| g.load(Relaxed) == group)
    }

    /// Whether one of the last faults was on a group within `range`.
    fn has_in(&self, range: Range<usize>) -> bool {
        self.groups.iter().any(|g| range.contains(&g.load(Relaxed)))
    }
}

/// Whether a fault at `addr` on chunk `ci`, stored or PARTIAL with the
/// groups of `mask` mapped, installs only its group (the chunk becoming or
/// staying PARTIAL), and which page. A read's group goes in
/// write-protected with its copies kept (with clean copies on), so that
/// its eviction is a zap; a write's goes in writable, its copies taken
/// (the chunk DIRTY), so that a random write costs one group's
/// decompression and charge, as a random read does: a program whose reads
/// write too (reference counts, access bits, a hash table's updates)
/// otherwise brought its chunk whole on every random access (a Python
/// heap of 40 MiB under 16 MiB: 1.5 million pages decompressed for 200
/// thousand faults). A fault on the first page installs
/// the whole chunk where the chunk before ends mapped (`scan_enters`) and
/// one of the last faults (`Recent`) was in that chunk before, and so does
/// one on the group right after two mapped ones that faulted lately
/// (`scan_step`): that is how a forward scan enters and walks a chunk, and
/// it would otherwise pay a fault per group. A backward scan likewise, from
/// the last page and the group right before two mapped ones: GNU sort's merges walk its line
/// records down, and at 47 MiB took 22-25 k faults with forward scans
/// only, 16-18 k with both (52 MiB: 12.5 k and 7.0-7.3 k; the pages
/// loaded within 5%). Mapped alone is not enough at the first page: under
/// random access most chunks are mapped, so one random fault in sixteen
/// landed on a first page after a mapped chunk and brought sixteen pages
/// in for one (usemem's random row, 1 GiB under 762 MiB, 4 workers,
/// alternating: 377-392 k ops/s before, 455-461 k with the `Recent` check,
/// 30% fewer pages loaded; a scan entering stored memory from resident
/// memory pays one more fault, its second group's). A page written back
/// comes in alone too: a device read of the chunk's slots costs about the
/// same as of one, but
/// the whole chunk would be charged for the one page a random read wants,
/// and under a tight budget those charges evict the hot chunks (measured on
/// usemem's skewed reads of 1 GiB under 512 MiB with lz4: 216 MB/s with
/// whole chunks, 261-274 with the page alone, though it reads the device
/// more often).
fn sub_chunk(sh: &Shared, r: &RegionInner, ci: usize, addr: usize, mask: u16) -> Option<usize> {
    // Reads and writes alike: a read that keeps no copy reaches here as a
    // write (`as_write`).
    if !sh.cfg.partial_faults || sh.order == 0 {
        return None;
    }
    let base = r.chunk_addr(ci, sh.chunk);
    let pages = 1usize << sh.order;
    let p = (addr - base) / PAGE_SIZE;
    let gb = chunk::group_pages(pages) * PAGE_SIZE;
    let at = Place {
        ci,
        pages,
        mask,
        bit: chunk::group_bit(p, pages),
        group: addr & !(gb - 1),
        gb,
    };
    let walked = scan_step(sh, r, &at, false);
    let entered = p == 0
        && scan_enters(r, ci, pages, false)
        && (ci == 0 || sh.recent.has_in(base - sh.chunk..base));
    // The same, walking down (GNU sort's merges run through their line
    // records from the top): the swap readahead window follows a scan in
    // either direction too (`swap_vma_ra_win`).
    let walked_down = scan_step(sh, r, &at, true);
    let entered_down = p == pages - 1
        && scan_enters(r, ci, pages, true)
        && sh.recent.has_in(base + sh.chunk..base + 2 * sh.chunk);
    sh.recent.note(at.group);
    let (need, windows) = if pages >= chunk::GROUPS {
        DENSE
    } else {
        DENSE_SMALL
    };
    // Groups the CLOCK trimmed since the first came in were brought in
    // within the same window too (`RegionInner::evicted`, while PARTIAL).
    let trimmed = if mask == 0 {
        0
    } else {
        r.evicted[ci].load(Relaxed)
    };
    let dense = (mask | trimmed).count_ones() >= need && {
        let now = sh.ctr.pgmajfault.load(Relaxed) as u32;
        let age = now.wrapping_sub(r.shadow[ci].load(Relaxed)) as u64;
        age <= sh.resident.load(Relaxed) / sh.chunk as u64 * windows
    };
    let scan = entered || walked || entered_down || walked_down;
    if scan || dense || mask.count_ones() >= PARTIAL_MAX_GROUPS {
        return None;
    }
    Some(p)
}

/// Where a fault landed, as the scan rules read it: chunk `ci` of `pages`
/// pages, its groups of `mask` mapped; the faulting group starts at
/// `group` (`gb` bytes a group) and is mask bit `bit`.
struct Place {
    ci: usize,
    pages: usize,
    mask: u16,
    bit: u16,
    group: usize,
    gb: usize,
}

/// Whether a fault at `at` is a scan's step, forward or (`down`) backward:
/// the two groups behind it are mapped and faulted lately (for the second
/// group from the chunk's edge, the one behind it and the neighbouring
/// chunk's edge, `scan_enters`). One group behind is not enough: an object
/// that straddles a page boundary (sqlite's page buffers are 4104 and
/// 4368 bytes, a Python object or a hash bucket at a page's end) faults
/// its two pages in turn at every random read, and taking that as a scan
/// brought sixteen pages in for two.
fn scan_step(sh: &Shared, r: &RegionInner, at: &Place, down: bool) -> bool {
    let &Place {
        ci,
        pages,
        mask,
        bit,
        group,
        gb,
    } = at;
    let top = u32::from(chunk::group_bit(pages - 1, pages));
    // The mask bit `k` groups behind, inside the chunk.
    let behind = |k: u32| {
        let b = if down {
            u32::from(bit) << k
        } else {
            u32::from(bit) >> k
        };
        (b != 0 && b <= top).then_some(b)
    };
    // The address of the group `k` groups behind.
    let back = |k: usize| {
        if down {
            group + k * gb
        } else {
            group.wrapping_sub(k * gb)
        }
    };
    let faulted = |k: usize| {
        behind(k as u32).is_some_and(|b| u32::from(mask) & b != 0) && sh.recent.has(back(k))
    };
    faulted(1)
        && match behind(2) {
            Some(_) => faulted(2),
            None => (down || ci > 0) && scan_enters(r, ci, pages, down) && sh.recent.has(back(2)),
        }
}

/// Whether a fault on the first page of chunk `ci` may be a forward scan
/// entering it (`down`: on the last page, a backward scan): the chunk
/// before ends in mapped memory (the chunk after begins in it), or is
/// being installed, or there is none before; `sub_chunk` also asks that
/// it faulted lately. A random read lands on a first page one
/// time in a chunk's pages; taking the chunk whole then would charge it all
/// for one page, as often as all the other random faults together.
fn scan_enters(r: &RegionInner, ci: usize, pages: usize, down: bool) -> bool {
    let (from, edge) = if down {
        (ci + 1, 0)
    } else {
        let Some(prev) = ci.checked_sub(1) else {
            return true;
        };
        (prev, pages - 1)
    };
    let Some(w) = r.state.get(from).map(|s| s.load(Relaxed)) else {
        return false;
    };
    match chunk::state(w) {
        RESIDENT | CLEAN | BUSY => true,
        PARTIAL => chunk::part_mask(w).is_some_and(|m| m & chunk::group_bit(edge, pages) != 0),
        _ => false,
    }
}

/// Install the group of page `p` of chunk `ci` (BUSY, ours; stored, or
/// PARTIAL with the groups of `mask` mapped): for a read write-protected,
/// keeping its copies clean; for a write writable, its copies taken, the
/// chunk DIRTY. The chunk is PARTIAL with that group added. Returns
/// whether it was installed; if not, the chunk is back as it was.
fn install_group(
    sh: &Shared,
    r: &RegionInner,
    ci: usize,
    p: usize,
    mask: u16,
    write: bool,
    scratch: &mut [u8],
) -> Installed {
    let pages = 1usize << sh.order;
    let g = chunk::group_pages(pages);
    let p0 = p / g * g;
    let back = if mask == 0 { STORED } else { PARTIAL };
    let base = r.chunk_addr(ci, sh.chunk);
    let key = sh.entry(r, ci).offset(p0 as u64);
    let mode = if write {
        LoadMode::Exclusive
    } else {
        LoadMode::KeepClean
    };
    let at = base + p0 * PAGE_SIZE;
    let buf = &mut scratch[p0 * PAGE_SIZE..(p0 + g) * PAGE_SIZE];
    if let Err(e) = sh.zswap.load_pages(key, g, buf, mode) {
        chunk::release(&r.state[ci], back, 0, 0);
        fail(
            sh,
            &format!("loading region {} chunk {ci} page {p0}: {e}", r.id),
        );
        return Installed::Unreadable;
    }
    // The chunk's refault was counted when its first group came in. That
    // first group enters unreferenced: one random read is a use-once until
    // shown otherwise, so CLOCK takes it at its next pass unless a second
    // read in the chunk (REF) or a refault (ACTIVE) marks the chunk in use.
    // With REF, pages read once at random held resident memory for a whole
    // turn of the hand, as long as the hot chunks (usemem skew: read pass
    // 6% faster on average over 11 alternating pairs, better in 7).
    let (mut flags, clear) = if mask == 0 {
        (
            workingset_refault(sh, r, ci, Some(p)),
            REJECTED | ACTIVE | MASK_BITS | REF | DIRTY,
        )
    } else {
        (REF, REJECTED | MASK_BITS)
    };
    if write {
        flags |= DIRTY;
    }
    sh.ctr.pgmajfault.fetch_add(1, Relaxed);
    sh.ctr.faults_partial.fetch_add(1, Relaxed);
    super::young::faulted(sh, r, ci);
    let bytes = (g * PAGE_SIZE) as u64;
    sh.resident.fetch_add(bytes, Relaxed);
    let woke = wake_on_copy(sh);
    let _published = Publishing::begin(sh, woke);
    if let Err((e, mapped)) = copy_chunk(sh, at, buf, !write, woke) {
        sh.resident.fetch_sub(bytes, Relaxed);
        if write && mapped > 0 {
            // As `install`: what was placed writable may have been written
            // already; protect it and take what it holds now.
            if let Err(we) = sh.uffd.write_protect(at as *mut _, mapped) {
                fail(sh, &format!("protecting a failed install: {we}"));
            }
            // SAFETY: the first `mapped` bytes from `at` are mapped, the
            // chunk is ours (BUSY) under the live lock, and writes to it
            // now trap.
            let now = unsafe { std::slice::from_raw_parts(at as *const u8, mapped) };
            buf[..mapped].copy_from_slice(now);
        }
        unmap_and_restore(sh, r, ci, p0..p0 + g, scratch, mode);
        release_failed(sh, r, ci, back);
        fail(sh, &e);
        return Installed::Failed;
    }
    let bit = chunk::group_bit(p, pages);
    if mask == 0 {
        // While PARTIAL the shadow holds when its first group came in, and
        // `evicted` the groups trimmed since (none yet: the refault above
        // has read what it held).
        r.shadow[ci].store(sh.ctr.pgmajfault.load(Relaxed) as u32, Relaxed);
        r.evicted[ci].store(0, Relaxed);
        r.fresh[ci].store(bit, Relaxed);
    } else {
        r.fresh[ci].fetch_or(bit, Relaxed);
        if r.evicted[ci].load(Relaxed) & bit != 0 {
            sh.ctr.trim_refaults.fetch_add(1, Relaxed);
        }
    }
    let bits = chunk::part_bits(mask | bit);
    let waiter = chunk::release(&r.state[ci], PARTIAL, clear, flags | bits);
    if mask == 0 {
        super::evict::on_probation(sh, r, ci);
    }
    // Faults on other pages of the chunk may have parked on it.
    settled_after(sh, base, woke, waiter);
    Installed::Yes
}

/// Complete PARTIAL chunk `ci` (BUSY, ours; the groups of `mask` mapped):
/// load the other pages exclusively and drop the mapped pages' copies;
/// install the others write-protected (CLEAN), or for a write lift the
/// chunk's protection once every page is in (RESIDENT): no page
/// is writable before the chunk is whole, so a failed copy can be unmapped
/// without losing a write. Returns whether it was completed; if not, the
/// chunk is back to PARTIAL.
fn fill(
    sh: &Shared,
    r: &RegionInner,
    ci: usize,
    mask: u16,
    write: bool,
    scratch: &mut [u8],
) -> Installed {
    let n = 1usize << sh.order;
    let base = r.chunk_addr(ci, sh.chunk);
    let first = sh.entry(r, ci);
    // Groups mapped from a parent (a child's, `RegionInner::shared`) are
    // charged from here: the chunk, completed or not, is this process's to
    // evict whole. It is DIRTY, so it completes RESIDENT, and its eviction
    // protects and stores them.
    sh.resident.fetch_add(r.take_shared(ci, sh.chunk), Relaxed);
    // A chunk with writable groups has no clean copies of them to keep:
    // completed, it is RESIDENT. Completed by a read it is CLEAN, and as a
    // whole chunk read in it keeps no copies (`keep.rs`).
    let write = write || r.state[ci].load(Acquire) & DIRTY != 0;
    // Every page written back (the mapped pages' copies too): the slots
    // stay as clean copies and the chunk stays PARTIAL with every group
    // mapped, KEPT, as `install` leaves such a chunk.
    let kept = !write && sh.cfg.keep_copy && kept_whole(sh, first);
    let mode = if kept {
        LoadMode::KeepClean
    } else {
        LoadMode::Exclusive
    };
    let mapped = chunk::mask_ranges(mask, n);
    let parts = chunk::mask_ranges(!mask, n);
    let is_mapped = |k: SwapEntry| {
        let i = (k.0 - first.0) as usize;
        mapped.iter().any(|m| m.contains(&i))
    };
    // The whole folio in one load while the mapped pages' copies are
    // there: its written-back pages then come in one device read, not
    // one per part. Any failure of a mapped page's copy (dropped, or
    // unreadable) leaves the parts to load on their own: those pages are
    // mapped.
    let res = match sh.zswap.load_folio(first, sh.order, scratch, mode) {
        Err(e) if e.entry().is_some_and(is_mapped) => load_around(sh, first, &parts, scratch, mode),
        r => r,
    };
    if let Err(e) = res {
        chunk::release(&r.state[ci], PARTIAL, 0, 0);
        fail(sh, &format!("loading region {} chunk {ci}: {e}", r.id));
        return Installed::Unreadable;
    }
    sh.ctr.pgmajfault.fetch_add(1, Relaxed);
    sh.ctr.partial_filled.fetch_add(1, Relaxed);
    super::young::faulted(sh, r, ci);
    let more = (parts.iter().map(|p| p.len()).sum::<usize>() * PAGE_SIZE) as u64;
    sh.resident.fetch_add(more, Relaxed);
    for part in &parts {
        let src = &scratch[part.start * PAGE_SIZE..part.end * PAGE_SIZE];
        if let Err((e, _)) = copy_chunk(sh, base + part.start * PAGE_SIZE, src, true, false) {
            sh.resident.fetch_sub(more, Relaxed);
            for part in &parts {
                unmap_and_restore(sh, r, ci, part.clone(), scratch, mode);
            }
            release_failed(sh, r, ci, PARTIAL);
            fail(sh, &e);
            return Installed::Failed;
        }
    }
    let clear = PART_BITS | REJECTED;
    if kept {
        sh.ctr.kept_installs.fetch_add(1, Relaxed);
        chunk::release(&r.state[ci], PARTIAL, clear, REF | kept_bits(sh));
        settled(sh, base);
        return Installed::Yes;
    }
    // The mapped pages' copies are gone with the folio's load, but for
    // those `load_around` left: a written chunk has none, and a CLEAN one
    // keeps none.
    for i in mapped.into_iter().flatten() {
        sh.zswap.invalidate(first.offset(i as u64));
    }
    if write {
        if let Err(e) = sh
            .uffd
            .remove_write_protection(base as *mut _, sh.chunk, false)
        {
            fail(sh, &format!("unprotecting a completed chunk: {e}"));
        }
        chunk::release(&r.state[ci], RESIDENT, clear, REF);
    } else {
        chunk::release(&r.state[ci], CLEAN, clear, REF);
    }
    settled(sh, base);
    Installed::Yes
}

/// A write-protect fault on page `page` of PARTIAL chunk `ci` (BUSY, ours;
/// the page's group mapped): the group's copies go stale, so they are
/// dropped and its protection lifted. The chunk stays PARTIAL, now DIRTY
/// and in use (REF); its other groups are left as they are.
fn unprotect_group(sh: &Shared, r: &RegionInner, ci: usize, page: usize) -> bool {
    let base = r.chunk_addr(ci, sh.chunk);
    let g = chunk::group_pages(1 << sh.order);
    let p0 = (page - base) / PAGE_SIZE / g * g;
    sh.zswap
        .invalidate_range(sh.entry(r, ci).offset(p0 as u64), g as u64);
    let at = base + p0 * PAGE_SIZE;
    let res = unprotect(sh, at, g * PAGE_SIZE);
    // A write is a reference of its group, as a fault that installs one.
    r.fresh[ci].fetch_or(chunk::group_bit(p0, 1 << sh.order), Relaxed);
    // Failed, the group is still protected (or in part: a DIRTY chunk's
    // eviction protects its groups first), now with no copy: a valid
    // PARTIAL group, which an eviction stores afresh.
    let waiters = chunk::release(&r.state[ci], PARTIAL, 0, REF | DIRTY);
    match res {
        Ok(_) => {
            copy_written(sh);
            sh.wake(base, sh.chunk);
            true
        }
        Err(e) => {
            fail(sh, &format!("unprotecting a partial chunk's group: {e}"));
            if waiters {
                sh.wake(base, sh.chunk);
            }
            false
        }
    }
}

/// A write-protect fault on KEPT chunk `ci` (BUSY, ours; every group
/// mapped): every copy goes stale, so they are dropped and the whole
/// chunk's protection lifted, RESIDENT, as a CLEAN chunk's first write
/// does. Where the unprotect fails the chunk stays PARTIAL, now with no
/// copies and DIRTY (its eviction protects and stores it afresh).
fn unprotect_kept(sh: &Shared, r: &RegionInner, ci: usize) -> bool {
    let base = r.chunk_addr(ci, sh.chunk);
    sh.zswap.invalidate_range(sh.entry(r, ci), 1 << sh.order);
    match unprotect(sh, base, sh.chunk) {
        Ok(()) => {
            copy_written(sh);
            chunk::release(&r.state[ci], RESIDENT, PART_BITS, REF);
            sh.wake(base, sh.chunk);
            true
        }
        Err(e) => {
            fail(sh, &format!("unprotecting a kept chunk: {e}"));
            if chunk::release(&r.state[ci], PARTIAL, KEPT, REF | DIRTY) {
                sh.wake(base, sh.chunk);
            }
            false
        }
    }
}

/// Lift the write protection of `len` bytes at `at` for a write-protect
/// fault, without waking: the caller publishes the chunk's state first, and
/// a thread woken on a failure would only fault again.
fn unprotect(sh: &Shared, at: usize, len: usize) -> Result<(), String> {
    if super::failpoints::take_unprotect() {
        return Err(format!(
            "UFFDIO_WRITEPROTECT at {at:#x}: failed (failpoint)"
        ));
    }
    sh.uffd
        .remove_write_protection(at as *mut _, len, false)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A read fault on stored data installs as a write would (writable, its
/// copies taken, not kept clean) while most of what reads install
/// protected is written soon after (`keep.rs`): each such write cost the
/// program a second fault. Without `keep_copy` every read does: it keeps
/// no copy, so it installs what a write would, and like a write it may
/// bring in a single group (`sub_chunk`). Left a read there, it loaded the
/// whole chunk for one random page: usemem's random row with
/// `--no-keep-copy` ran 22-24 s instead of 1.7-1.9 (16 pages loaded and
/// stored again per fault).
fn as_write(sh: &Shared, write: bool) -> bool {
    if write || !sh.cfg.keep_copy {
        return true;
    }
    if sh.keep.keeps(sh.zswap.clean_dropped()) {
        return false;
    }
    sh.ctr.reads_writable.fetch_add(1, Relaxed);
    true
}

/// A write reached memory installed with its copy kept: the copy goes.
fn copy_written(sh: &Shared) {
    sh.keep.written();
    sh.ctr.copies_written.fetch_add(1, Relaxed);
}

/// A chunk at `base` was installed and its new state published: wake the
/// threads parked on it, note the peak, and kick the evictor above the high
/// watermark.
fn settled(sh: &Shared, base: usize) {
    settled_after(sh, base, false, true);
}

/// [`settled`] after an install whose `UFFDIO_COPY` already woke (`woke`)
/// the threads waiting on the pages it placed: the chunk's other pages
/// are woken only where a fault parked on the chunk (`waiter`, from
/// `chunk::release`).
fn settled_after(sh: &Shared, base: usize, woke: bool, waiter: bool) {
    if !woke || waiter {
        sh.wake(base, sh.chunk);
    }
    sh.note_peak();
    evict::maybe_kick(sh);
}

/// Whether a fault's install lets its `UFFDIO_COPY` wake the faulting
/// thread, rather than copying with `DONTWAKE` and waking the chunk with
/// a second call (`UFFDIO_WAKE`) once its state is published: under
/// handler threads, one system call per fault fewer (threads under 131
/// MiB: median 13.9 -> 12.4 s over nine alternating pairs, never slower
/// beyond noise; docs/BENCHMARKS.md). The woken thread may then run before
/// the chunk leaves BUSY; what it does next is what any other thread of
/// the program could already do between the copy and the publication (the
/// copy maps the pages for every thread): a fault on the chunk's other
/// pages parks (WAITER) and is woken by `settled_after`, a hint or a fork
/// waits on the owned chunk as for any other; the instance's figures wait
/// for the publication (`PublishSeqs`). In signal mode nobody sleeps
/// in the kernel, so there is nothing to wake.
fn wake_on_copy(sh: &Shared) -> bool {
    !sh.signal
}

thread_local! {
    /// This thread's index among its instance's handler threads, if it is
    /// one (`handler_loop`).
    static HANDLER: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// One sequence per handler thread, odd while that handler runs an install
/// whose copy woke the faulting thread before the chunk's state (and the
/// counters after the copy) were published (`wake_on_copy`). The woken
/// thread may read the instance's figures at once: `Uzswap::stats` and
/// `Region::resident_bytes` first wait, per handler, for an odd sequence to
/// move on, so a fault that has returned to its thread is always in them.
/// The wait is one install at most per handler: it ends at the next
/// increment, whatever the handler does after. A forked child has no
/// handler threads, and may have copied a sequence left odd by an install
/// in flight in its parent at the fork: there nothing is waited for.
pub(super) struct PublishSeqs {
    seqs: Box<[crossbeam::utils::CachePadded<AtomicU64>]>,
    /// The process whose handler threads move the sequences.
    pid: libc::pid_t,
}

impl PublishSeqs {
    pub(super) fn new(handlers: usize) -> Self {
        Self {
            seqs: (0..handlers).map(|_| Default::default()).collect(),
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
        }
    }

    pub(super) fn wait_published(&self) {
        // SAFETY: getpid has no preconditions.
        if self.seqs.is_empty() || unsafe { libc::getpid() } != self.pid {
            return;
        }
        for seq in self.seqs.iter() {
            let v = seq.load(SeqCst);
            let mut spins = 0u32;
            while v % 2 == 1 && seq.load(Acquire) == v {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// Marks an install's publication in flight on this handler's sequence
/// (`PublishSeqs`): begun before the copy that wakes, ended when dropped,
/// after `settled_after` (or the failure path) has published the chunk.
struct Publishing<'a>(Option<&'a AtomicU64>);

impl<'a> Publishing<'a> {
    fn begin(sh: &'a Shared, woke: bool) -> Self {
        let seq = woke
            .then(|| sh.publishing.seqs.get(HANDLER.get()))
            .flatten()
            .map(|s| &**s);
        if let Some(s) = seq {
            // SeqCst: ordered before the copy's wake-up, so the woken
            // thread, if it asks at once, sees the install in flight.
            s.fetch_add(1, SeqCst);
        }
        Self(seq)
    }
}

impl Drop for Publishing<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.0 {
            // Release: the chunk's state and the counters are visible to a
            // reader that sees the sequence move.
            s.fetch_add(1, Release);
        }
    }
}

/// Load the pages of `parts` (the pages of a chunk around its mapped ones)
/// into `scratch`: all or none.
fn load_around(
    sh: &Shared,
    first: SwapEntry,
    parts: &[Range<usize>],
    scratch: &mut [u8],
    mode: LoadMode,
) -> Result<(), LoadError> {
    for (k, part) in parts.iter().enumerate() {
        let out = &mut scratch[part.start * PAGE_SIZE..part.end * PAGE_SIZE];
        let at = first.offset(part.start as u64);
        if let Err(e) = sh.zswap.load_pages(at, part.len(), out, mode) {
            for done in &parts[..k] {
                restore_pages(sh, first, done.clone(), scratch, mode);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// After a failed install of pages `pages` of chunk `ci` loaded with
/// `mode`: unmap whatever the copy placed before it failed, and make the
/// cache whole again, claiming the kept copies (or, where the cache dropped
/// them, storing the pages afresh) or putting back what an exclusive load
/// took. The data is in `scratch` at the pages' offsets.
fn unmap_and_restore(
    sh: &Shared,
    r: &RegionInner,
    ci: usize,
    pages: Range<usize>,
    scratch: &[u8],
    mode: LoadMode,
) {
    if pages.is_empty() {
        return;
    }
    let a = r.chunk_addr(ci, sh.chunk) + pages.start * PAGE_SIZE;
    // SAFETY: pages of a chunk we own (BUSY) in a live region; what is
    // mapped there is a copy of what `scratch` holds.
    unsafe { libc::madvise(a as *mut _, pages.len() * PAGE_SIZE, libc::MADV_DONTNEED) };
    restore_pages(sh, sh.entry(r, ci), pages, scratch, mode);
}

/// Put pages `pages` of the folio at `first`, loaded with `mode` into
/// `scratch` and not installed, back under the cache's care.
fn restore_pages(
    sh: &Shared,
    first: SwapEntry,
    pages: Range<usize>,
    scratch: &[u8],
    mode: LoadMode,
) {
    for i in pages {
        let key = first.offset(i as u64);
        if mode == LoadMode::KeepClean && sh.zswap.claim_clean(key, 0) {
            continue;
        }
        let page = &scratch[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
        if let Err(e) = sh.zswap.restore(key, page) {
            fail(sh, &format!("{key:?}: data lost: {e}"));
        }
    }
}

/// Zero-fill the never-touched chunks around chunk `ci` (BUSY, ours) in one
/// `UFFDIO_COPY`: within the aligned `zero_fill_around` window, as many as
/// the run of touched chunks beside `ci` (`zero_ramp`), as far as they are
/// untouched and the budget has room below the high watermark. First
/// touches come in long runs (a program filling fresh memory), and each
/// fault costs a round trip through this thread, so a run takes a window
/// at once and makes registering memory nearly free.
fn install_zero_around(sh: &Shared, r: &RegionInner, ci: usize) -> bool {
    let per = (sh.zeros.len() / sh.chunk).max(1);
    let w0 = ci / per * per;
    let w1 = (w0 + per).min(r.state.len());
    let want = zero_ramp(&r.state, ci, per);
    let room = |n: usize| sh.usage() + ((n + 1) * sh.chunk) as u64 <= sh.batch.high();
    // A pinned untouched neighbour is memory the program protected (a
    // runtime's reservation not yet committed): zeros there would be
    // charged for nothing, and lie in another VMA.
    let take = |c: usize| {
        r.state[c].load(Relaxed) & PINNED == 0
            && chunk::transition(&r.state[c], UNTOUCHED, BUSY, 0, 0).is_ok()
    };
    let (mut lo, mut hi) = (ci, ci + 1);
    while hi < w1 && hi - lo < want && room(hi - lo) && take(hi) {
        hi += 1;
    }
    while lo > w0 && hi - lo < want && room(hi - lo) && take(lo - 1) {
        lo -= 1;
    }
    let n = hi - lo;
    let base = r.chunk_addr(lo, sh.chunk);
    let len = n * sh.chunk;
    sh.ctr.faults_zero.fetch_add(1, Relaxed);
    sh.ctr.zero_filled_chunks.fetch_add(n as u64, Relaxed);
    sh.resident.fetch_add(len as u64, Relaxed);
    if let Err((e, _)) = copy_chunk(sh, base, &sh.zeros[..len], false, false) {
        sh.resident.fetch_sub(len as u64, Relaxed);
        for c in lo..hi {
            release_failed(sh, r, c, UNTOUCHED);
        }
        fail(sh, &e);
        return false;
    }
    for c in lo..hi {
        chunk::release(&r.state[c], RESIDENT, REJECTED | ACTIVE, REF);
    }
    sh.wake(base, len);
    sh.note_peak();
    evict::maybe_kick(sh);
    true
}

/// How many chunks a first touch of chunk `ci` zero-fills: as many as the
/// run of touched chunks just before it, or just after it (memory filled
/// downwards), at least one and at most `per` (the window). The kernel's
/// readahead ramp, for first touches: a run doubles its fill at each fault
/// until it takes whole windows, and an isolated touch fills one chunk. A
/// fixed 2 MiB window made every new process pay for 2 MiB of zeros at its
/// first allocation (1.5-2.7 ms of fresh memory, most of an `exec` under
/// the runner), and charged a sparse first touch 32 chunks it never used.
fn zero_ramp(state: &[AtomicU32], ci: usize, per: usize) -> usize {
    let touched = |c: &AtomicU32| chunk::state(c.load(Relaxed)) != UNTOUCHED;
    let behind = state[..ci]
        .iter()
        .rev()
        .take(per)
        .take_while(|c| touched(c))
        .count();
    let ahead = state[ci + 1..]
        .iter()
        .take(per)
        .take_while(|c| touched(c))
        .count();
    behind.max(ahead).clamp(1, per)
}

/// One `UFFDIO_COPY` of a whole chunk, carrying on past pages a concurrent
/// resolver already installed (EEXIST is success for those pages). On
/// failure, also how many bytes from `base` are mapped by then.
fn copy_chunk(
    sh: &Shared,
    base: usize,
    src: &[u8],
    wp: bool,
    wake: bool,
) -> Result<(), (String, usize)> {
    let mut off = 0;
    // After a copy that ran into another VMA (the program protected part of
    // the range), the rest goes a page at a time: each page lies in one.
    let mut step = usize::MAX;
    while off < src.len() {
        let len = (src.len() - off).min(step);
        // SAFETY: `src[off..]` is readable; `base+off..base+len` is inside a
        // registered region whose chunk we own (BUSY) under its live lock.
        let r =
            unsafe { uffd_sys::copy(uffd_fd(sh), base + off, src[off..].as_ptr(), len, wp, wake) }
                .map_err(|(e, done)| (e, off + done))?;
        match r {
            Copy::Done if len < src.len() - off => off += len,
            Copy::Split(n) => {
                off += n;
                step = PAGE_SIZE;
            }
            Copy::Done => break,
            Copy::Again(n) => {
                off += n;
                if n == 0 {
                    std::thread::yield_now();
                }
            }
            Copy::Exists(n) => off += n + PAGE_SIZE,
        }
    }
    Ok(())
}

/// mm/workingset.c: a chunk refaulting within as many evictions as there
/// are resident chunks would have stayed resident with a little more
/// memory; it is activated so CLOCK passes over it once more.
fn workingset_refault(sh: &Shared, r: &RegionInner, ci: usize, page: Option<usize>) -> u32 {
    let now = sh.evict_clock.load(Relaxed) as u32;
    let distance = now.wrapping_sub(r.shadow[ci].load(Relaxed)) as u64;
    sh.ctr.workingset_refault.fetch_add(1, Relaxed);
    let resident_chunks = sh.resident.load(Relaxed) / sh.chunk as u64;
    // A page coming back into a chunk evicted partial must be one it had
    // mapped: another page of it is a first read, not a refault (a cold
    // stream reading a new page of each chunk every pass is not a working
    // set, and ACTIVE keeps a chunk from probation).
    let was_mapped =
        page.is_none_or(|p| r.evicted[ci].load(Relaxed) & chunk::group_bit(p, 1 << sh.order) != 0);
    if was_mapped {
        sh.ghosts.refault(distance);
    }
    if was_mapped && distance <= resident_chunks {
        sh.ctr.workingset_activate.fetch_add(1, Relaxed);
        super::evict::density::refaulted(&r.density[ci]);
        ACTIVE
    } else {
        0
    }
}

/// Errors on the fault path cannot be returned to the faulting thread; they
/// are counted and printed, and the thread stays parked on its fault rather
/// than read wrong data, while the fault is tried again (`try_again`: a few
/// times, then SIGBUS). Printed as the kernel's `printk_ratelimited`
/// does: a device that fails every read fails every fault, and the
/// program's stderr is no place for a line per fault. `fault_errors`
/// counts them all.
fn fail(sh: &Shared, msg: &str) {
    sh.ctr.fault_errors.fetch_add(1, Relaxed);
    say(msg);
}

/// Print a line of the fault path, rate-limited with `fail`'s (counted
/// where `fail` calls it, not here).
fn say(msg: &str) {
    use std::sync::atomic::{AtomicU32, AtomicU64};
    const BURST: u32 = 10;
    const INTERVAL_S: u64 = 5;
    static START: OnceLock<Instant> = OnceLock::new();
    static WINDOW: AtomicU64 = AtomicU64::new(0);
    static PRINTED: AtomicU32 = AtomicU32::new(0);
    static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
    let now = START.get_or_init(Instant::now).elapsed().as_secs() / INTERVAL_S;
    let w = WINDOW.load(Relaxed);
    if w != now && WINDOW.compare_exchange(w, now, Relaxed, Relaxed).is_ok() {
        PRINTED.store(0, Relaxed);
        let n = SUPPRESSED.swap(0, Relaxed);
        if n > 0 {
            eprintln!(
                "uzswap: fault handler: {n} more errors not printed (counted in fault_errors)"
            );
        }
    }
    if PRINTED.fetch_add(1, Relaxed) < BURST {
        eprintln!("uzswap: fault handler: {msg}");
    } else {
        SUPPRESSED.fetch_add(1, Relaxed);
    }
}

/// `Advice::WillNeed`: install the stored chunks of `chunks` from the
/// calling thread.
pub(super) fn will_need(
    sh: &Shared,
    r: &RegionInner,
    chunks: Range<usize>,
) -> Result<(), RegionError> {
    // Made at the first chunk to bring in: most calls (a fork's scan of
    // every region) find none.
    let mut scratch = Vec::new();
    // Waits on the chunk at hand (`waited`).
    let mut waits = 0u32;
    let mut next = chunks.start;
    while next < chunks.end {
        let ci = next;
        next += 1;
        // Most chunks of a region have nothing to bring in: read their
        // state before the backstop and the lock (a fork scans every chunk
        // of every region, 65 k per 4 GiB reservation, for each `fork` of
        // a shell). A chunk that becomes STORED after this look was not
        // stored when the hint came; `prepare_fork` looks again.
        // One taken by a fault or an eviction goes on: `waited` below.
        let w = r.state[ci].load(Acquire);
        if !matches!(chunk::state(w), STORED | PARTIAL | BUSY | EVICTING) || whole(sh, w) {
            continue;
        }
        evict::backstop(sh);
        let live = r.live.read();
        if !*live {
            break;
        }
        if scratch.is_empty() {
            scratch = vec![0u8; sh.chunk];
        }
        // Prefetched chunks count as read: they stay clean when keep_copy
        // (a hint, not a fault: the keep policy, `as_write`, judges faults).
        let res = if chunk::transition(&r.state[ci], STORED, BUSY, 0, 0).is_ok() {
            if sh.cfg.keep_copy {
                sh.keep.kept(sh.zswap.clean_dropped());
            }
            install(sh, r, ci, false, true, &mut scratch)
        } else if let Ok(w) = chunk::own_if(&r.state[ci], PARTIAL, |w| !whole(sh, w)) {
            let m = chunk::part_mask(w).expect("PARTIAL without its mask");
            fill(sh, r, ci, m, false, &mut scratch)
        } else {
            Installed::Yes
        };
        drop(live);
        if waited(r, ci, &mut waits) {
            next = ci;
            continue;
        }
        if res == Installed::Unreadable {
            // The data stays where it was; a fault on it gets SIGBUS.
            return Err(RegionError::Os(format!(
                "region {} chunk {ci}: a stored page cannot be read back",
                r.id
            )));
        }
    }
    Ok(())
}

/// [`will_need`] found chunk `ci` taken by a fault or an eviction: wait
/// for it and look again (true), since its owner may bring in only a group
/// or store it. Passing such a chunk by left a fork's bring-in short
/// whenever program threads kept faulting: each of `prepare_fork`'s rounds
/// found other chunks taken as it passed, and after four it refused the
/// fork with ENOMEM (`fork_storm` in signal mode, on a loaded host). The
/// caller holds no lock (`live` is dropped first: the owner may need it
/// after a writer queued for it). A few waits per chunk at most, then the
/// chunk is taken as it is, as before (`waits` counts them; reset here
/// once a chunk is passed, so it is the only call per look).
fn waited(r: &RegionInner, ci: usize, waits: &mut u32) -> bool {
    if *waits < 8 && matches!(chunk::state(r.state[ci].load(Acquire)), BUSY | EVICTING) {
        chunk::wait_released(&r.state[ci]);
        *waits += 1;
        return true;
    }
    *waits = 0;
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_wait_for_an_unpublished_install_but_not_in_a_child() {
        let seqs = PublishSeqs::new(2);
        seqs.seqs[1].fetch_add(1, SeqCst);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                seqs.wait_published();
                done.store(true, SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!done.load(SeqCst), "returned with an install unpublished");
            // A forked child sees the odd sequence and no handler to move
            // it: it must not wait.
            // SAFETY: the child only calls async-signal-safe functions
            // (getpid, alarm, _exit) and loads atomics.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
            if pid == 0 {
                // SAFETY: as above.
                unsafe {
                    libc::alarm(5);
                    seqs.wait_published();
                    libc::_exit(0);
                }
            }
            seqs.seqs[1].fetch_add(1, Release);
            let mut status = 0;
            // SAFETY: waits for the child just forked.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child waited (status {status:#x})"
            );
        });
        assert!(done.load(SeqCst));
    }

    fn chunks(states: &[u32]) -> Vec<AtomicU32> {
        states.iter().map(|&s| AtomicU32::new(s)).collect()
    }

    /// A first touch fills as many chunks as the touched run beside it:
    /// one when isolated, doubling along a run, at most the window.
    #[test]
    fn zero_fill_ramps_up_along_a_run_of_first_touches() {
        const U: u32 = UNTOUCHED;
        const R: u32 = RESIDENT;
        let per = 8;
        let isolated = chunks(&[U; 16]);
        assert_eq!(zero_ramp(&isolated, 0, per), 1, "the region's first touch");
        assert_eq!(zero_ramp(&isolated, 9, per), 1, "a touch with no neighbour");
        let forward = chunks(&[R, R, R, U, U, U, U, U, U, U, U, U, U, U, U, U]);
        assert_eq!(zero_ramp(&forward, 3, per), 3, "three touched behind it");
        let downward = chunks(&[U, U, U, U, U, U, U, U, U, U, U, U, U, R, R, U]);
        assert_eq!(zero_ramp(&downward, 12, per), 2, "memory filled downwards");
        let long = chunks(&[R, R, R, R, R, R, R, R, R, R, R, R, U, U, U, U]);
        assert_eq!(zero_ramp(&long, 12, per), per, "capped at the window");
        // Any state but UNTOUCHED is a touched chunk: evicted memory was
        // touched once, and a run through it is still a run.
        let stored = chunks(&[U, STORED, STORED, U, U, U, U, U]);
        assert_eq!(zero_ramp(&stored, 3, per), 2);
        let last = chunks(&[R, R, U]);
        assert_eq!(zero_ramp(&last, 2, per), 2, "the region's last chunk");
    }
}
