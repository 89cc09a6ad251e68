//! A failing swap device, seen through real faults of a region, in both
//! handler modes (handler threads and signal mode). The contract
//! (docs/ARCHITECTURE.md, "When the swap device fails"):
//!
//! - a write that fails (EIO, ENOSPC, a write that makes no progress, a
//!   full filesystem) leaves the pages in the pool, or the chunk resident
//!   when the pool is full: counted, nothing lost, every page reads back;
//! - a read that fails (EIO, ENOSPC, a file truncated under the device)
//!   gives the faulting thread SIGBUS at the page's address, or the API an
//!   error: never a page of zeros or stale data; once the device reads
//!   again the page comes back intact;
//! - short reads and writes that make progress are continued: no error;
//! - the instance keeps serving every other page meanwhile.
//!
//! Each case runs in a child process (this test binary again, with
//! `UZSWAP_IO_CASE` set): the failpoints are process-wide and a SIGBUS the
//! child expects must not end the test. The child's SIGBUS handler,
//! installed before the instance (so signal mode chains to it), records the
//! address and discards the page's poison marker, so the access is retried
//! and the test goes on: a transient error then reads the page back whole.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};
use uzswap::region::{Advice, Config, HandlerMode, Region, Uzswap, Writeback};
use uzswap::swap::device::failpoints::{Fault, IoOp};
use uzswap::swap::SwapDevice;
use uzswap::zswap::ShrinkStop;
use uzswap::{Pattern, SwapEntry, PAGE_SIZE};

mod common;
use common::{instance, page};

const LEN: usize = 4 << 20;
const PAGES: usize = LEN / PAGE_SIZE;
const SEED: u64 = 11;
/// Exit status of a child whose persistent SIGBUS ended it (see `on_bus`).
const DIED_OF_SIGBUS: i32 = 42;
/// Exit status of a child that found no userfaultfd.
const SKIP: i32 = 77;

static BUS_COUNT: AtomicUsize = AtomicUsize::new(0);
static BUS_ADDR: AtomicUsize = AtomicUsize::new(0);
static BUS_CODE: AtomicI32 = AtomicI32::new(0);
/// The SIGBUS that ends the child (a persistent error would refault for
/// ever): `usize::MAX` while every one is recovered from.
static BUS_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Whether `on_bus` discards the page: not where the SIGBUS was for a
/// mapped page, whose data the discard would drop.
static BUS_DISCARD: AtomicBool = AtomicBool::new(true);

/// Records the address, then drops the poison marker (`MADV_DONTNEED`
/// discards it) so the access is retried: a fresh missing fault, resolved
/// from the device if it reads again. Async-signal-safe: atomics, madvise,
/// write and _exit only.
extern "C" fn on_bus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    BUS_ADDR.store(addr, SeqCst);
    BUS_CODE.store(code, SeqCst);
    let n = BUS_COUNT.fetch_add(1, SeqCst) + 1;
    if n >= BUS_LIMIT.load(SeqCst) {
        let mut msg = *b"child: SIGBUS at 0x0000000000000000\n";
        for i in 0..16 {
            let d = (addr >> (60 - 4 * i)) & 0xf;
            msg[19 + i] = b"0123456789abcdef"[d];
        }
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, msg.as_ptr() as *const _, msg.len());
            libc::_exit(DIED_OF_SIGBUS);
        }
    }
    if !BUS_DISCARD.load(SeqCst) {
        return;
    }
    // SAFETY: discarding one page of our own mapping.
    unsafe {
        libc::madvise(
            (addr & !(PAGE_SIZE - 1)) as *mut _,
            PAGE_SIZE,
            libc::MADV_DONTNEED,
        )
    };
}

fn install_bus_handler() {
    // SAFETY: a zeroed sigaction with handler, flags and mask set below.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_bus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()), 0);
    }
}

fn cfg(handler: HandlerMode, budget: u64, dir: Option<&str>) -> Config {
    let direct_io = std::env::var_os("UZSWAP_TEST_BUFFERED").is_none();
    Config {
        budget,
        folio_order: 4,
        handler,
        defer_register: false,
        writeback: Some(Writeback {
            dir: dir.map(Into::into),
            // One cluster on the small filesystem: the first writeback uses all
            // of it, so every slot is punched out once the pages come back.
            size_bytes: if dir.is_some() { 2 << 20 } else { 0 },
            direct_io,
            ..Writeback::default()
        }),
        ..Config::default()
    }
}

fn setup(handler: HandlerMode, budget: u64, dir: Option<&str>) -> (Uzswap, Region) {
    install_bus_handler();
    let Some(uz) = instance(cfg(handler, budget, dir)) else {
        std::process::exit(SKIP);
    };
    let r = uz.region(LEN).unwrap();
    for i in 0..PAGES {
        Pattern::Index.fill(i as u64, SEED, page(&r, i));
    }
    (uz, r)
}

fn device(uz: &Uzswap) -> &SwapDevice {
    uz.zswap().swap_device().expect("writeback device")
}

fn key(r: &Region, i: usize) -> SwapEntry {
    SwapEntry::new(r.id(), i as u64)
}

/// Every page of `r` holds its pattern, read by real faults (the reads of
/// the check itself).
fn verify_all(r: &Region, what: &str) {
    for i in 0..PAGES {
        assert!(
            Pattern::Index.verify(i as u64, SEED, page(r, i)),
            "{what}: page {i} is not what was written"
        );
    }
}

/// A write fault on page `i` that leaves it as it is.
fn rewrite(r: &Region, i: usize) {
    let p = page(r, i).as_mut_ptr();
    // SAFETY: a read and a write of the first byte of a live region page.
    unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
}

/// Store every page and write as many as will go to the device; returns
/// how many are there.
fn page_out_and_write_back(uz: &Uzswap, r: &Region) -> u64 {
    r.advise(0..LEN, Advice::PageOut).unwrap();
    for _ in 0..64 {
        let s = uz.zswap().shrink(u64::MAX);
        if matches!(
            s.stop,
            Some(ShrinkStop::Empty | ShrinkStop::DeviceError | ShrinkStop::DeviceFull)
        ) {
            break;
        }
    }
    uz.zswap().stats().device_pages
}

/// Page out and write back what will go; returns a chunk whose every page
/// is on the device.
fn chunk_on_device(uz: &Uzswap, r: &Region) -> usize {
    let out = page_out_and_write_back(uz, r);
    assert!(out as usize >= PAGES / 2, "{:?}", uz.zswap().stats());
    let per = uz.chunk_bytes() / PAGE_SIZE;
    (0..PAGES / per)
        .find(|&c| (0..per).all(|i| uz.zswap().is_written_back(key(r, c * per + i))))
        .expect("a chunk wholly on the device")
}

/// The writes fail with `fault` (queued `n` times): every shrink walk stops
/// at its failed write, the pages stay in the pool, the failures are
/// counted; every page reads back; once the device writes again the pages
/// go out and still read back.
fn write_fails(handler: HandlerMode, fault: Fault, n: usize) {
    let (uz, r) = setup(handler, 64 << 20, None);
    let dev = device(&uz);
    for _ in 0..n {
        dev.inject_fault(IoOp::Write, fault);
    }
    r.advise(0..LEN, Advice::PageOut).unwrap();
    let stored = uz.zswap().stats().stored_pages;
    assert!(stored as usize >= PAGES / 2, "{:?}", uz.zswap().stats());
    let mut failed = 0;
    for _ in 0..16 {
        if uz.zswap().shrink(u64::MAX).stop == Some(ShrinkStop::DeviceError) {
            failed += 1;
        }
    }
    let s = uz.zswap().stats();
    assert!(failed > 0, "no walk met the failing device: {s:?}");
    assert_eq!(
        s.device_pages, 0,
        "a page left the pool without a copy on the device"
    );
    assert!(s.reject_reclaim_fail > 0, "{s:?}");
    assert!(dev.stats().io_errors >= failed, "{:?}", dev.stats());
    assert_eq!(dev.stats().used, 0, "failed runs' slots not given back");
    verify_all(&r, "after failed writeback");
    assert_eq!(uz.stats().fault_errors, 0);
    // The device works again: the pages go out and come back.
    dev.clear_faults();
    let out = page_out_and_write_back(&uz, &r);
    assert!(out > 0, "nothing written back once the device worked");
    verify_all(&r, "after writeback");
    assert_eq!(BUS_COUNT.load(SeqCst), 0);
    eprintln!("child ok: {failed} failed walks, then {out} pages written back");
}

/// Under a budget the region is three times larger than, with every device
/// write failing: the evictor's stores find the pool full and cannot make
/// room, so chunks stay resident (over the budget, counted) and nothing is
/// lost. Pages are written and read by the program's own faults.
fn write_fails_under_pressure(handler: HandlerMode) {
    install_bus_handler();
    let Some(uz) = instance(cfg(handler, 8 << 20, None)) else {
        std::process::exit(SKIP);
    };
    let len = 24 << 20;
    let r = uz.region(len).unwrap();
    let dev = device(&uz);
    for _ in 0..1_000_000 {
        dev.inject_fault(IoOp::Write, Fault::Errno(libc::EIO));
    }
    let n = len / PAGE_SIZE;
    for pass in 0..2u64 {
        for i in 0..n {
            Pattern::Mixed.fill(i as u64, SEED + pass, page(&r, i));
        }
        for i in (0..n).rev() {
            assert!(
                Pattern::Mixed.verify(i as u64, SEED + pass, page(&r, i)),
                "pass {pass}: page {i}"
            );
        }
    }
    if handler == HandlerMode::Block {
        syscalls_on(&r, SEED + 1);
    }
    let (s, d) = (uz.stats(), dev.stats());
    assert!(d.io_errors > 0, "the device was never written: {d:?}");
    assert_eq!(uz.zswap().stats().device_pages, 0);
    assert_eq!(s.fault_errors, 0);
    assert!(s.evicted_chunks > 0, "{s:?}");
    dev.clear_faults();
    for i in 0..n {
        assert!(
            Pattern::Mixed.verify(i as u64, SEED + 1, page(&r, i)),
            "page {i}"
        );
    }
    for _ in 0..8 {
        uz.zswap().shrink(u64::MAX);
    }
    for i in 0..n {
        assert!(
            Pattern::Mixed.verify(i as u64, SEED + 1, page(&r, i)),
            "page {i}"
        );
    }
    assert!(uz.zswap().stats().written_back_pages > 0);
    assert_eq!(BUS_COUNT.load(SeqCst), 0);
    eprintln!(
        "child ok: {} write errors, {} budget overruns",
        d.io_errors, s.budget_overruns
    );
}

/// System calls on evicted region memory while writeback fails (handler
/// threads serve the faults the kernel takes inside them; in signal mode
/// such a fault is EFAULT by design, so only there): every page written
/// to a file with `pwrite` and read back into the region with `pread`
/// (into the next page, so the kernel writes evicted pages too); no call
/// fails and every byte matches.
fn syscalls_on(r: &Region, seed: u64) {
    use std::os::fd::AsRawFd;
    let n = r.len() / PAGE_SIZE;
    let f = tempfile_in_tmp();
    for i in 0..n {
        let p = page(r, i);
        // SAFETY: the kernel reads one live region page.
        let w = unsafe {
            libc::pwrite(
                f.as_raw_fd(),
                p.as_ptr() as *const _,
                PAGE_SIZE,
                (i * PAGE_SIZE) as i64,
            )
        };
        assert_eq!(
            w,
            PAGE_SIZE as isize,
            "pwrite of page {i}: {}",
            std::io::Error::last_os_error()
        );
    }
    for i in (0..n).rev() {
        let p = page(r, (i + 1) % n);
        // SAFETY: the kernel writes one live region page.
        let g = unsafe {
            libc::pread(
                f.as_raw_fd(),
                p.as_mut_ptr() as *mut _,
                PAGE_SIZE,
                (i * PAGE_SIZE) as i64,
            )
        };
        assert_eq!(
            g,
            PAGE_SIZE as isize,
            "pread into page {}: {}",
            (i + 1) % n,
            std::io::Error::last_os_error()
        );
    }
    for i in 0..n {
        assert!(
            Pattern::Mixed.verify(((i + n - 1) % n) as u64, seed, page(r, i)),
            "page {i} after pread"
        );
    }
    // Put the pages back where they were.
    for i in 0..n {
        // SAFETY: as above.
        let g = unsafe {
            libc::pread(
                f.as_raw_fd(),
                page(r, i).as_mut_ptr() as *mut _,
                PAGE_SIZE,
                (i * PAGE_SIZE) as i64,
            )
        };
        assert_eq!(g, PAGE_SIZE as isize);
    }
}

/// An unlinked scratch file in the temporary directory.
fn tempfile_in_tmp() -> std::fs::File {
    let path = std::env::temp_dir().join(format!("uzswap-io-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

/// Short transfers that make progress are continued: a write back in
/// pieces and reads in pieces are no error, and the pages read back.
/// Through the page cache a transfer can stop at any byte; with `O_DIRECT`
/// only at a block boundary (an unaligned remainder would be EINVAL).
fn short_io(handler: HandlerMode, direct: bool) {
    if !direct {
        std::env::set_var("UZSWAP_TEST_BUFFERED", "1");
    }
    let (uz, r) = setup(handler, 64 << 20, None);
    let dev = device(&uz);
    let sizes = if direct {
        [PAGE_SIZE, 2 * PAGE_SIZE, PAGE_SIZE, 3 * PAGE_SIZE]
    } else {
        [1, 100, PAGE_SIZE + 100, 3 * PAGE_SIZE]
    };
    for n in sizes {
        dev.inject_fault(IoOp::Write, Fault::Short(n));
    }
    let out = page_out_and_write_back(&uz, &r);
    assert!(out as usize >= PAGES / 2, "{:?}", uz.zswap().stats());
    for n in sizes {
        dev.inject_fault(IoOp::Read, Fault::Short(n));
    }
    verify_all(&r, "after short transfers");
    let d = dev.stats();
    assert_eq!(d.io_errors, 0, "{d:?}");
    assert_eq!(uz.stats().fault_errors, 0);
    assert_eq!(BUS_COUNT.load(SeqCst), 0);
    eprintln!("child ok: {} pages out and back in pieces", out);
}

/// The next device read fails with `fault`, once for each access below: a
/// hint needing the page is an error, a read fault and a write fault on a
/// written-back page get SIGBUS at the page; after each the device reads
/// again and the page comes back whole. Every other page is served.
fn read_fails(handler: HandlerMode, fault: Fault) {
    let (uz, r) = setup(handler, 64 << 20, None);
    let dev = device(&uz);
    let out = page_out_and_write_back(&uz, &r);
    assert!(out as usize >= PAGES / 2, "{:?}", uz.zswap().stats());
    let chunk = uz.chunk_bytes();
    let per = chunk / PAGE_SIZE;
    // Pages in different chunks, all on the device.
    let victims: Vec<usize> = (0..PAGES)
        .filter(|&i| i % per == 5 && uz.zswap().is_written_back(key(&r, i)))
        .take(3)
        .collect();
    assert_eq!(victims.len(), 3, "{:?}", uz.zswap().stats());
    // The API: WillNeed on the first victim's chunk.
    dev.inject_fault(IoOp::Read, fault);
    let c = victims[0] / per * chunk;
    assert!(r.advise(c..c + chunk, Advice::WillNeed).is_err());
    assert!(
        uz.zswap().is_written_back(key(&r, victims[0])),
        "the page was dropped"
    );
    // A read fault, then a write fault.
    for (k, &v) in victims[1..].iter().enumerate() {
        dev.inject_fault(IoOp::Read, fault);
        let before = BUS_COUNT.load(SeqCst);
        let p = page(&r, v).as_mut_ptr();
        if k == 0 {
            // SAFETY: a read of a live region page.
            let _ = unsafe { std::ptr::read_volatile(p) };
        } else {
            // A write of the byte the page holds at 8.
            let mut want = vec![0u8; PAGE_SIZE];
            Pattern::Index.fill(v as u64, SEED, &mut want);
            // SAFETY: a write inside a live region page.
            unsafe { std::ptr::write_volatile(p.add(8), want[8]) };
        }
        assert_eq!(
            BUS_COUNT.load(SeqCst),
            before + 1,
            "page {v}: no SIGBUS for the unreadable page"
        );
        let at = BUS_ADDR.load(SeqCst);
        assert_eq!(
            at & !(PAGE_SIZE - 1),
            p as usize,
            "SIGBUS at the wrong address"
        );
        assert!(
            Pattern::Index.verify(v as u64, SEED, page(&r, v)),
            "page {v} after the error"
        );
    }
    verify_all(&r, "after the read errors");
    let s = uz.stats();
    assert!(s.fault_errors >= 2, "{s:?}");
    assert!(dev.stats().io_errors >= 3, "{:?}", dev.stats());
    eprintln!(
        "child ok: {} SIGBUS, last code {}",
        BUS_COUNT.load(SeqCst),
        BUS_CODE.load(SeqCst)
    );
}

/// The swap file truncated under the instance (as another process with
/// access to it could do, through /proc/PID/fd): reads of written-back
/// pages now end early. Pages still in the pool are served; a hint on a
/// written-back page fails; touching one gets SIGBUS every time (the child
/// dies at the third, printing the address), never zeros.
fn truncated(handler: HandlerMode) {
    let (uz, r) = setup(handler, 64 << 20, None);
    let out = page_out_and_write_back(&uz, &r);
    assert!(out > 0);
    // Bring half the pages back into the pool (exclusive write loads,
    // then PageOut stores them afresh without writing them back).
    for i in 0..PAGES / 2 {
        rewrite(&r, i);
    }
    r.advise(0..LEN / 2, Advice::PageOut).unwrap();
    let file = swap_file();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(0).unwrap();
    drop(f);
    for i in 0..PAGES / 2 {
        assert!(!uz.zswap().is_written_back(key(&r, i)));
        assert!(
            Pattern::Index.verify(i as u64, SEED, page(&r, i)),
            "page {i}"
        );
    }
    let chunk = uz.chunk_bytes();
    let v = (PAGES / 2..PAGES)
        .find(|&i| uz.zswap().is_written_back(key(&r, i)))
        .expect("a written-back page");
    let c = v * PAGE_SIZE / chunk * chunk;
    assert!(r.advise(c..c + chunk, Advice::WillNeed).is_err());
    BUS_LIMIT.store(3, SeqCst);
    eprintln!(
        "child: touching page at {:#018x}",
        page(&r, v).as_ptr() as usize
    );
    let ok = Pattern::Index.verify(v as u64, SEED, page(&r, v));
    // Reaching here is the failure.
    eprintln!("child: the truncated page read back ({ok})");
    std::process::exit(3);
}

/// An unreadable page where the poison marker cannot be set (as on a
/// kernel older than 6.6, which has no `UFFDIO_POISON`): the faulting
/// thread still gets SIGBUS, once, instead of faulting again for ever; the
/// page reads back once the device reads again.
fn poison_fails(handler: HandlerMode) {
    let (uz, r) = setup(handler, 64 << 20, None);
    let dev = device(&uz);
    let out = page_out_and_write_back(&uz, &r);
    assert!(out as usize >= PAGES / 2, "{:?}", uz.zswap().stats());
    let v = (0..PAGES)
        .find(|&i| uz.zswap().is_written_back(key(&r, i)))
        .expect("a page on the device");
    dev.inject_fault(IoOp::Read, Fault::Errno(libc::EIO));
    uzswap::region::failpoints::fail_next_poison();
    let before = BUS_COUNT.load(SeqCst);
    assert!(
        Pattern::Index.verify(v as u64, SEED, page(&r, v)),
        "page {v} after the error"
    );
    assert_eq!(
        BUS_COUNT.load(SeqCst),
        before + 1,
        "page {v}: no SIGBUS for the unreadable page"
    );
    verify_all(&r, "after the read error");
    assert!(uz.stats().fault_errors >= 2, "{:?}", uz.stats());
    eprintln!("child ok: SIGBUS code {}", BUS_CODE.load(SeqCst));
}

/// Installs refused `n` times in a row (`UFFDIO_COPY` answering as at a
/// memory cgroup's limit) on a page in the pool: a few refusals are retried
/// and the page reads back with no signal; a refusal that does not end
/// (`n` ≥ the resolver's tries, 8) gives the faulting thread one SIGBUS
/// instead of a thread parked (handler threads) or faulting (signal mode)
/// for ever, and once installs work the page reads back intact.
fn copy_fails(handler: HandlerMode, n: u32) {
    let (uz, r) = setup(handler, 64 << 20, None);
    r.advise(0..LEN, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    let per = uz.chunk_bytes() / PAGE_SIZE;
    let before = BUS_COUNT.load(SeqCst);
    // A chunk's first page (the whole chunk) and a page off it (its group).
    for v in [3 * per, 5 * per + 7] {
        let errors = uz.stats().fault_errors;
        uzswap::region::failpoints::fail_copies(n);
        let t = Instant::now();
        assert!(
            Pattern::Index.verify(v as u64, SEED, page(&r, v)),
            "page {v} after {n} refused installs"
        );
        let failed = uz.stats().fault_errors - errors;
        assert!(
            failed >= u64::from(n.min(8)),
            "page {v}: {failed} errors counted"
        );
        eprintln!("child: page {v}: {failed} errors, {:?}", t.elapsed());
    }
    let bus = BUS_COUNT.load(SeqCst) - before;
    let want = if n >= 8 { 2 } else { 0 };
    assert_eq!(bus, want, "{n} refused installs: {bus} SIGBUS");
    verify_all(&r, "after the refused installs");
    eprintln!("child ok: {bus} SIGBUS");
}

/// A page the program dropped itself (`MADV_DONTNEED` on a resident
/// chunk) whose zero page cannot be installed `n` times in a row: retried,
/// then (`n` ≥ 8) one SIGBUS; it then reads zeros, the rest is intact.
fn refill_fails(handler: HandlerMode, n: u32) {
    let (uz, r) = setup(handler, 64 << 20, None);
    let v = 3 * uz.chunk_bytes() / PAGE_SIZE + 2;
    // SAFETY: a page of the live region: what a program may do.
    let rc = unsafe {
        libc::madvise(
            page(&r, v).as_mut_ptr().cast(),
            PAGE_SIZE,
            libc::MADV_DONTNEED,
        )
    };
    assert_eq!(rc, 0);
    let (errors, before) = (uz.stats().fault_errors, BUS_COUNT.load(SeqCst));
    uzswap::region::failpoints::fail_copies(n);
    assert!(page(&r, v).iter().all(|&b| b == 0), "page {v}: not zeros");
    let failed = uz.stats().fault_errors - errors;
    assert!(failed >= u64::from(n.min(8)), "{failed} errors counted");
    let bus = BUS_COUNT.load(SeqCst) - before;
    assert_eq!(bus, usize::from(n >= 8), "{n} refused copies: {bus} SIGBUS");
    for i in (0..PAGES).filter(|&i| i != v) {
        assert!(
            Pattern::Index.verify(i as u64, SEED, page(&r, i)),
            "page {i}"
        );
    }
    eprintln!("child ok: {bus} SIGBUS");
}

/// A discard of part of a chunk wholly on a device that fails every read
/// (as the program's `MADV_DONTNEED` of a few pages): nothing is read, so
/// no SIGBUS, where zeroing through faults once read the chunk in; once the
/// device reads again the discarded pages read zeros and the rest is whole.
fn discard_unreadable(handler: HandlerMode) {
    let (uz, r) = setup(handler, 64 << 20, None);
    let dev = device(&uz);
    let per = uz.chunk_bytes() / PAGE_SIZE;
    let c = chunk_on_device(&uz, &r);
    let gone = c * per + 2..c * per + 6;
    for _ in 0..1000 {
        dev.inject_fault(IoOp::Read, Fault::Errno(libc::EIO));
    }
    let before = BUS_COUNT.load(SeqCst);
    r.discard(gone.start * PAGE_SIZE..gone.end * PAGE_SIZE)
        .unwrap();
    assert_eq!(BUS_COUNT.load(SeqCst), before, "the discard read the chunk");
    assert_eq!(uz.stats().discarded_stored_pages, gone.len() as u64);
    dev.clear_faults();
    for i in 0..PAGES {
        let p = page(&r, i);
        if gone.contains(&i) {
            assert!(p.iter().all(|&b| b == 0), "page {i} not zeros");
        } else {
            assert!(Pattern::Index.verify(i as u64, SEED, p), "page {i}");
        }
    }
    eprintln!("child ok");
}

/// The first write to pages a read installed protected (a whole clean
/// chunk, and a partial chunk's group) with the protection's removal
/// refused `n` times in a row: retried, then (`n` ≥ 8) one SIGBUS instead
/// of a write faulting for ever; the write lands once the removal works.
fn unprotect_fails(handler: HandlerMode, n: u32) {
    let (uz, r) = setup(handler, 64 << 20, None);
    BUS_DISCARD.store(false, SeqCst);
    r.advise(0..LEN, Advice::PageOut).unwrap();
    let per = uz.chunk_bytes() / PAGE_SIZE;
    let before = BUS_COUNT.load(SeqCst);
    for v in [3 * per, 5 * per + 7] {
        assert!(Pattern::Index.verify(v as u64, SEED, page(&r, v)));
        let errors = uz.stats().fault_errors;
        uzswap::region::failpoints::fail_unprotects(n);
        page(&r, v)[0] ^= 0xff;
        let failed = uz.stats().fault_errors - errors;
        assert!(
            failed >= u64::from(n.min(8)),
            "page {v}: {failed} errors counted"
        );
        page(&r, v)[0] ^= 0xff;
    }
    let bus = BUS_COUNT.load(SeqCst) - before;
    let want = if n >= 8 { 2 } else { 0 };
    assert_eq!(bus, want, "{n} refused unprotects: {bus} SIGBUS");
    verify_all(&r, "after the refused unprotects");
    // The writes went where they were made: page them out and back.
    r.advise(0..LEN, Advice::PageOut).unwrap();
    verify_all(&r, "after paging out again");
    eprintln!("child ok: {bus} SIGBUS");
}

/// A write pin (a system call's buffer in signal or user-mode-only mode)
/// on the mapped page of a partial chunk whose other pages cannot be read
/// back: the pin completes the chunk first, which fails, and must not try
/// for ever (a program's `read(2)` into such a page once hung here). The
/// mapped page is pinned writable and keeps its data; no SIGBUS, since the
/// pin touched only the page it was given.
fn pin_partial(handler: HandlerMode) {
    let (uz, r) = setup(handler, 64 << 20, None);
    let per = uz.chunk_bytes() / PAGE_SIZE;
    let c = chunk_on_device(&uz, &r);
    let v = c * per + 5;
    // A read off the chunk's first page installs that page alone.
    assert!(Pattern::Index.verify(v as u64, SEED, page(&r, v)));
    assert_eq!(uz.stats().faults_partial, 1, "{:?}", uz.stats());
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(swap_file())
        .unwrap();
    f.set_len(0).unwrap();
    drop(f);
    let p = page(&r, v).as_mut_ptr() as usize;
    {
        let _pin = uz.pin(p + 8, 16, true);
        let mut want = vec![0u8; PAGE_SIZE];
        Pattern::Index.fill(v as u64, SEED, &mut want);
        // SAFETY: a write inside the pinned, live region page.
        unsafe { std::ptr::write_volatile((p + 8) as *mut u8, want[8]) };
    }
    assert!(Pattern::Index.verify(v as u64, SEED, page(&r, v)));
    assert_eq!(BUS_COUNT.load(SeqCst), 0, "SIGBUS for a readable page");
    assert!(uz.stats().fault_errors >= 1, "{:?}", uz.stats());
    eprintln!("child ok: pinned past the unreadable pages");
}

/// The unlinked swap file among our descriptors (`O_TMPFILE` names it
/// "/dir/#inode (deleted)").
fn swap_file() -> String {
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if let Ok(t) = std::fs::read_link(e.path()) {
            let t = t.to_string_lossy();
            if t.contains("(deleted)") && t.contains('#') {
                return e.path().to_string_lossy().into_owned();
            }
        }
    }
    panic!("no swap file among the open descriptors");
}

/// A real full filesystem: the device lives on a small tmpfs. Its file is
/// reserved up front, but clusters emptied by loads are punched out and
/// their space given back; once the filesystem is filled by someone else,
/// writing back there fails with ENOSPC for real. Pages stay in the pool
/// and read back; after the space comes back writeback resumes.
fn full_fs(handler: HandlerMode, dir: &str) {
    let (uz, r) = setup(handler, 64 << 20, Some(dir));
    let dev = device(&uz);
    let out = page_out_and_write_back(&uz, &r);
    assert!(out > 0);
    // Write to every page: exclusive loads free every slot, and the empty
    // clusters are punched out of the file.
    for i in 0..PAGES {
        rewrite(&r, i);
    }
    assert_eq!(dev.stats().used, 0);
    assert!(dev.stats().discards > 0, "{:?}", dev.stats());
    let filler = format!("{dir}/filler");
    fill_up(&filler);
    let before = dev.stats().io_errors;
    let out = page_out_and_write_back(&uz, &r);
    let d = dev.stats();
    assert!(
        d.io_errors > before,
        "no write failed on the full filesystem: {d:?}"
    );
    assert_eq!(out, 0, "{:?}", uz.zswap().stats());
    verify_all(&r, "on the full filesystem");
    std::fs::remove_file(&filler).unwrap();
    let out = page_out_and_write_back(&uz, &r);
    assert!(out > 0, "no writeback once the space came back");
    verify_all(&r, "after the space came back");
    assert_eq!(BUS_COUNT.load(SeqCst), 0);
    eprintln!(
        "child ok: {} write errors on the full filesystem",
        d.io_errors - before
    );
}

/// Write `path` until the filesystem is full.
fn fill_up(path: &str) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0x5au8; 64 << 10];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {path}: {e}"),
        }
    }
    let _ = f.sync_all();
}

fn child(case: &str, mode: &str, arg: &str) {
    let h = if mode == "signal" {
        HandlerMode::Signal
    } else {
        HandlerMode::Block
    };
    match case {
        "write-eio" => write_fails(h, Fault::Errno(libc::EIO), 1000),
        "write-enospc" => write_fails(h, Fault::Errno(libc::ENOSPC), 1000),
        // A write that makes no progress.
        "write-short-zero" => write_fails(h, Fault::Short(0), 1000),
        "write-pressure" => write_fails_under_pressure(h),
        "read-eio" => read_fails(h, Fault::Errno(libc::EIO)),
        "read-enospc" => read_fails(h, Fault::Errno(libc::ENOSPC)),
        "short-io" => short_io(h, false),
        "short-io-direct" => short_io(h, true),
        "truncated" => truncated(h),
        "pin-partial" => pin_partial(h),
        "poison-fails" => poison_fails(h),
        "copy-fails" => copy_fails(h, arg.parse().unwrap()),
        "unprotect-fails" => unprotect_fails(h, arg.parse().unwrap()),
        "refill-fails" => refill_fails(h, arg.parse().unwrap()),
        "discard-unreadable" => discard_unreadable(h),
        "full-fs" => full_fs(h, arg),
        _ => panic!("unknown case {case}"),
    }
    std::process::exit(0);
}

/// Run `case` in a child for each handler mode; returns each mode's exit
/// status and stderr, or None where userfaultfd is unavailable.
fn run(case: &str, arg: &str) -> Option<Vec<(String, i32, String)>> {
    let mut out = Vec::new();
    for mode in ["block", "signal"] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env("UZSWAP_IO_CASE", format!("{case},{mode},{arg}"))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut err, &mut s).unwrap();
            s
        });
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{case} {mode}: the child hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = reader.join().unwrap();
        use std::os::unix::process::ExitStatusExt;
        let code = status.code().unwrap_or(-status.signal().unwrap_or(0));
        if code == SKIP {
            eprintln!("skipping: userfaultfd unavailable");
            return None;
        }
        out.push((mode.to_string(), code, err));
    }
    Some(out)
}

/// Every mode's child exited 0 and said so.
fn expect_ok(case: &str, arg: &str) {
    let Some(res) = run(case, arg) else { return };
    for (mode, code, err) in res {
        assert!(
            code == 0 && err.contains("child ok"),
            "{case} {mode}: exit {code}\n{err}"
        );
        eprintln!(
            "{case} {mode}: {}",
            err.lines()
                .filter(|l| l.starts_with("child"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

/// Not a test of its own: the children's entry point.
#[test]
fn child_entry() {
    if let Ok(v) = std::env::var("UZSWAP_IO_CASE") {
        let mut it = v.splitn(3, ',');
        let (case, mode, arg) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        child(case, mode, arg);
    }
}

#[test]
fn write_eio_keeps_pages_in_the_pool() {
    expect_ok("write-eio", "");
}

#[test]
fn write_enospc_keeps_pages_in_the_pool() {
    expect_ok("write-enospc", "");
}

#[test]
fn a_write_that_makes_no_progress_keeps_pages_in_the_pool() {
    expect_ok("write-short-zero", "");
}

#[test]
fn failing_writes_under_pressure_keep_chunks_resident() {
    expect_ok("write-pressure", "");
}

#[test]
fn short_transfers_are_continued() {
    expect_ok("short-io", "");
    expect_ok("short-io-direct", "");
}

#[test]
fn read_eio_is_sigbus_at_the_page_and_the_page_survives() {
    expect_ok("read-eio", "");
}

#[test]
fn read_enospc_is_sigbus_at_the_page_and_the_page_survives() {
    expect_ok("read-enospc", "");
}

#[test]
fn a_truncated_swap_file_is_sigbus_never_zeros() {
    let Some(res) = run("truncated", "") else {
        return;
    };
    for (mode, code, err) in res {
        assert_eq!(code, DIED_OF_SIGBUS, "{mode}: {err}");
        let want = err
            .lines()
            .find_map(|l| l.strip_prefix("child: touching page at "))
            .expect("the child names its page");
        let got = err
            .lines()
            .find_map(|l| l.strip_prefix("child: SIGBUS at "))
            .expect("the child saw SIGBUS");
        let (want, got) = (
            usize::from_str_radix(&want[2..], 16).unwrap(),
            usize::from_str_radix(&got[2..], 16).unwrap(),
        );
        assert_eq!(
            got & !(PAGE_SIZE - 1),
            want,
            "{mode}: SIGBUS at the wrong address"
        );
    }
}

#[test]
fn an_unreadable_page_is_sigbus_where_the_poison_marker_cannot_be_set() {
    expect_ok("poison-fails", "");
}

#[test]
fn refused_installs_are_retried() {
    expect_ok("copy-fails", "3");
}

#[test]
fn installs_refused_for_good_are_sigbus_not_a_hang() {
    expect_ok("copy-fails", "8");
}

#[test]
fn refused_unprotects_are_retried_then_sigbus() {
    expect_ok("unprotect-fails", "3");
    expect_ok("unprotect-fails", "8");
}

#[test]
fn refused_refills_of_dropped_pages_are_retried_then_sigbus() {
    expect_ok("refill-fails", "3");
    expect_ok("refill-fails", "8");
}

#[test]
fn a_partial_discard_on_an_unreadable_device_reads_nothing() {
    expect_ok("discard-unreadable", "");
}

#[test]
fn a_write_pin_on_a_partial_chunk_with_unreadable_pages_returns() {
    expect_ok("pin-partial", "");
}

/// A tmpfs of 12 MiB mounted for the test (root only; skipped with the
/// reason where mounting is not possible).
#[test]
fn a_full_filesystem_keeps_pages_in_the_pool() {
    let dir = std::env::temp_dir().join(format!("uzswap-fullfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap().to_string();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=12m", "tmpfs", &d])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping: cannot mount a tmpfs at {d} (needs root)");
        let _ = std::fs::remove_dir(&dir);
        return;
    }
    let res = std::panic::catch_unwind(|| expect_ok("full-fs", &d));
    let _ = Command::new("umount").arg(&d).status();
    let _ = std::fs::remove_dir(&dir);
    if let Err(e) = res {
        std::panic::resume_unwind(e);
    }
}
