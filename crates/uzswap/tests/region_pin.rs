//! What programs not written for uzswap need: system calls on evicted
//! memory (pins), `MADV_DONTNEED` semantics (discard, and pages the program
//! drops behind our back), and a fork whose child sees every byte.

use uzswap::region::{Advice, Config, HandlerMode, KernelFaults};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{instance, page};

const LEN: usize = 4 << 20;

fn filled(cfg: Config) -> Option<(uzswap::Uzswap, uzswap::Region)> {
    let uz = instance(Config {
        defer_register: false,
        ..cfg
    })?;
    let r = uz.region(LEN).unwrap();
    for i in 0..LEN / PAGE_SIZE {
        Pattern::Text.fill(i as u64, 7, page(&r, i));
    }
    Some((uz, r))
}

/// [`filled`] with the default configuration in `handler` mode.
fn filled_in(handler: HandlerMode) -> Option<(uzswap::Uzswap, uzswap::Region)> {
    filled(Config {
        handler,
        ..Config::default()
    })
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

/// With `UFFD_USER_MODE_ONLY` a write(2) from an evicted page fails with
/// EFAULT; pinned first, it and a read(2) into evicted pages both work.
#[test]
fn pinned_buffers_serve_system_calls_in_user_mode_only() {
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some((uz, r)) = filled(Config {
            user_mode_only: true,
            handler,
            ..Config::default()
        }) else {
            return;
        };
        assert_eq!(uz.kernel_faults(), KernelFaults::NotServed);
        assert_eq!(uz.stats().kernel_faults, KernelFaults::NotServed);
        let (rd, wr) = pipe();
        let n = 16 * PAGE_SIZE;
        // Without a pin: EFAULT (the kernel does not hand us the fault).
        r.advise(0..LEN, Advice::PageOut).unwrap();
        assert_eq!(uz.stats().resident_bytes, 0);
        // SAFETY: the buffer lies in the live region.
        let w = unsafe { libc::write(wr, r.as_ptr() as *const _, n) };
        assert_eq!(w, -1, "{handler:?}: write from an evicted page");
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EFAULT)
        );
        // Pinned: the bytes go through, and come back into evicted pages.
        {
            let _pin = uz.pin(r.as_ptr() as usize, n, false);
            // SAFETY: as above.
            let w = unsafe { libc::write(wr, r.as_ptr() as *const _, n) };
            assert_eq!(w, n as isize, "{handler:?}");
        }
        r.advise(0..LEN, Advice::PageOut).unwrap();
        // SAFETY: the middle of the live region.
        let dst = unsafe { r.as_ptr().add(LEN / 2) };
        // The chunk partly mapped, one page read (protected, its copy
        // kept) and one written (writable): a write pin must still make
        // every page writable before the call, not spin on the partial
        // chunk.
        let half = LEN / 2 / PAGE_SIZE;
        // SAFETY: pages of the live region.
        unsafe {
            std::ptr::read_volatile(page(&r, half + 3).as_ptr());
            let w = page(&r, half + 9).as_mut_ptr();
            std::ptr::write_volatile(w, std::ptr::read_volatile(w));
        }
        assert!(uz.stats().faults_partial >= 2, "{:?}", uz.stats());
        {
            let _pin = uz.pin(dst as usize, n, true);
            let mut got = 0;
            while got < n {
                // SAFETY: `dst..dst+n` lies in the live region, pinned.
                let k = unsafe { libc::read(rd, dst.add(got) as *mut _, n - got) };
                assert!(k > 0, "{handler:?}: read into pinned pages failed");
                got += k as usize;
            }
        }
        for i in 0..16 {
            assert!(
                Pattern::Text.verify(i as u64, 7, page(&r, half + i)),
                "{handler:?} page {i}"
            );
        }
        // A write pin of one page of a partial chunk (the page alone comes
        // in writable, and the chunk stays partial).
        r.advise(0..LEN, Advice::PageOut).unwrap();
        let one = page(&r, 40).to_vec();
        // SAFETY: a page of the live region.
        unsafe { std::ptr::read_volatile(page(&r, half + 3).as_ptr()) };
        {
            // SAFETY: `one` is a page of our memory.
            let w = unsafe { libc::write(wr, one.as_ptr() as *const _, PAGE_SIZE) };
            assert_eq!(w, PAGE_SIZE as isize);
            let at = page(&r, half + 11).as_mut_ptr();
            let _pin = uz.pin(at as usize, PAGE_SIZE, true);
            // SAFETY: a pinned page of the live region.
            let k = unsafe { libc::read(rd, at as *mut _, PAGE_SIZE) };
            assert_eq!(k, PAGE_SIZE as isize, "{handler:?}");
        }
        assert_eq!(page(&r, half + 11), &one[..]);
        // SAFETY: our descriptors.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
    }
}

/// A pinned chunk is never evicted, even by an explicit page-out, and is
/// evictable again once unpinned.
#[test]
fn pinned_chunks_are_not_evicted() {
    let Some((uz, r)) = filled(Config::default()) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    uz.pin_range(r.as_ptr() as usize, chunk);
    r.advise(0..LEN, Advice::PageOut).unwrap();
    assert_eq!(uz.stats().resident_bytes, chunk as u64);
    assert_eq!(r.resident_bytes(), chunk as u64);
    uz.unpin(r.as_ptr() as usize, chunk);
    r.advise(0..LEN, Advice::PageOut).unwrap();
    assert_eq!(uz.stats().resident_bytes, 0);
    for i in 0..LEN / PAGE_SIZE {
        assert!(Pattern::Text.verify(i as u64, 7, page(&r, i)), "page {i}");
    }
}

/// Discard reads back zeros in every state a chunk can be in (resident,
/// clean, partial, stored), frees what it held, and leaves the pages
/// around a range that ends mid-chunk intact.
#[test]
fn discard_reads_back_zeros_and_frees() {
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some((uz, r)) = filled_in(handler) else {
            return;
        };
        let chunk = uz.chunk_bytes();
        let cp = chunk / PAGE_SIZE;
        // Chunks 0-1 resident; 2-3 stored; 4 clean (read back whole); 5
        // partial (one page read back); then a range ending mid-chunk.
        r.advise(2 * chunk..6 * chunk, Advice::PageOut).unwrap();
        r.advise(4 * chunk..5 * chunk, Advice::WillNeed).unwrap();
        assert_eq!(common::read(&r, 5 * cp + 3), page(&r, 5 * cp + 3)[0]);
        let pool_before = uz.stats().zswap.stored_pages;
        let end = 6 * chunk + 3 * PAGE_SIZE;
        r.discard(0..end).unwrap();
        let st = uz.stats();
        assert!(
            st.zswap.stored_pages < pool_before,
            "{handler:?}: nothing freed from the cache: {st:?}"
        );
        for i in 0..end / PAGE_SIZE {
            assert!(page(&r, i).iter().all(|&b| b == 0), "{handler:?} page {i}");
        }
        for i in end / PAGE_SIZE..LEN / PAGE_SIZE {
            assert!(
                Pattern::Text.verify(i as u64, 7, page(&r, i)),
                "{handler:?} page {i} lost"
            );
        }
        // Written again after the discard, the pages keep the new data
        // through an eviction.
        for i in 0..end / PAGE_SIZE {
            Pattern::Index.fill(i as u64, 1, page(&r, i));
        }
        r.advise(0..LEN, Advice::PageOut).unwrap();
        for i in 0..end / PAGE_SIZE {
            assert!(Pattern::Index.verify(i as u64, 1, page(&r, i)), "page {i}");
        }
    }
}

/// Drop pages `pages` of `r` with madvise(MADV_DONTNEED) made past
/// `Uzswap::discard`, as a program's own system call would.
fn drop_behind_our_back(r: &uzswap::Region, pages: &[usize]) {
    for &i in pages {
        // SAFETY: a page of the live region: what a program may do.
        let rc = unsafe {
            libc::madvise(
                r.as_ptr().add(i * PAGE_SIZE) as *mut _,
                PAGE_SIZE,
                libc::MADV_DONTNEED,
            )
        };
        assert_eq!(rc, 0);
    }
}

/// An instance in `handler` mode whose region has a page dropped with
/// madvise(MADV_DONTNEED) behind its back in a resident, a clean and a
/// partial chunk; returns the dropped pages too.
fn dropped_pages(handler: HandlerMode) -> Option<(uzswap::Uzswap, uzswap::Region, [usize; 3])> {
    let (uz, r) = filled_in(handler)?;
    let chunk = uz.chunk_bytes();
    let cp = chunk / PAGE_SIZE;
    r.advise(chunk..3 * chunk, Advice::PageOut).unwrap();
    r.advise(chunk..2 * chunk, Advice::WillNeed).unwrap(); // clean
    let _ = common::read(&r, 2 * cp + 5); // partial: page 5 mapped
    let dropped = [3, cp + 2, 2 * cp + 5];
    drop_behind_our_back(&r, &dropped);
    Some((uz, r, dropped))
}

/// Every page of `r` holds its pattern but the `dropped` ones, which hold
/// zeros and a 42 at byte 100; again once paged out and back.
fn check_dropped_and_written(handler: HandlerMode, r: &uzswap::Region, dropped: &[usize]) {
    for pass in ["written", "paged out and back"] {
        for i in 0..LEN / PAGE_SIZE {
            let p = page(r, i);
            if dropped.contains(&i) {
                assert_eq!(p[100], 42, "{handler:?} {pass}: page {i}");
                assert_eq!(p.iter().filter(|&&b| b != 0).count(), 1);
            } else {
                assert!(Pattern::Text.verify(i as u64, 7, p), "{handler:?} page {i}");
            }
        }
        r.advise(0..LEN, Advice::PageOut).unwrap();
    }
}

/// A page the program drops itself with madvise(MADV_DONTNEED) reads back
/// as zeros (it used to loop for ever as a stale fault), in a resident, a
/// clean and a partial chunk, in both handler modes.
#[test]
fn pages_dropped_behind_our_back_read_zero() {
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some((uz, r, dropped)) = dropped_pages(handler) else {
            return;
        };
        for &i in &dropped {
            assert!(page(&r, i).iter().all(|&b| b == 0), "{handler:?} page {i}");
        }
        assert!(uz.stats().faults_dropped >= dropped.len() as u64 - 1);
        // Written, evicted, read back: the new bytes, not the old copy.
        for &i in &dropped {
            page(&r, i)[100] = 42;
        }
        check_dropped_and_written(handler, &r, &dropped);
    }
}

/// The same drops, written before they are read: in signal mode a missing
/// fault on a page that a partial chunk's state says is mapped was taken
/// for a write-protect fault, and the page was unprotected again for ever
/// (now the fault's error code says which it is). The write lands on a
/// zeroed page, as on a dropped anonymous page in the kernel.
#[test]
fn pages_dropped_behind_our_back_then_written() {
    // The old code spun in the faulting thread: fail rather than hang.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        if !watch.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("a write to a dropped page did not return in 60 s");
            std::process::abort();
        }
    });
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some((_uz, r, dropped)) = dropped_pages(handler) else {
            return;
        };
        for &i in &dropped {
            page(&r, i)[100] = 42;
        }
        check_dropped_and_written(handler, &r, &dropped);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Pages the program drops behind our back (a `madvise` that does not go
/// through `Uzswap::discard`, as Go's runtime makes) in chunks that are
/// then evicted: the evictor's read of such a page faulted and, parked on
/// the chunk the evictor itself owned, never returned (a Go program hung
/// so). Now they are filled with zeros, by the handler that takes that
/// fault or, where drops are expected (`Config::foreign_drops`), by the
/// evictor before it reads; they read back as zeros, and every other
/// byte as written. Both handler modes.
#[test]
fn evicting_pages_dropped_behind_our_back_reads_zeros() {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(120));
        if !watch.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("evicting dropped pages did not return in 120 s");
            std::process::abort();
        }
    });
    for foreign_drops in [false, true] {
        for handler in [HandlerMode::Block, HandlerMode::Signal] {
            let Some((uz, r)) = filled(Config {
                handler,
                foreign_drops,
                ..Config::default()
            }) else {
                return;
            };
            let cp = uz.chunk_bytes() / PAGE_SIZE;
            // Two pages of every fourth chunk, all chunks resident.
            let dropped: Vec<usize> = (0..LEN / PAGE_SIZE)
                .filter(|&i| (i / cp) % 4 == 1 && (i % cp == 0 || i % cp == cp - 3))
                .collect();
            drop_behind_our_back(&r, &dropped);
            r.advise(0..LEN, Advice::PageOut).unwrap();
            assert_eq!(r.resident_bytes(), 0, "{handler:?} {foreign_drops}");
            let s = uz.stats();
            assert!(
                s.faults_dropped >= dropped.len() as u64,
                "{handler:?} {foreign_drops}: {} fills for {} drops",
                s.faults_dropped,
                dropped.len()
            );
            for i in 0..LEN / PAGE_SIZE {
                let p = page(&r, i);
                if dropped.contains(&i) {
                    assert!(
                        p.iter().all(|&b| b == 0),
                        "{handler:?} {foreign_drops}: page {i}"
                    );
                } else {
                    assert!(Pattern::Text.verify(i as u64, 7, p), "{handler:?} page {i}");
                }
            }
            assert_eq!(uz.stats().fault_errors, 0);
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// A discard of part of a stored chunk (`MADV_DONTNEED` on a few pages,
/// as allocators purge) reads nothing back: the chunk stays in the cache
/// with those pages zero, as the kernel drops a swapped-out page's entry
/// without reading it. Both handler modes; every other byte intact.
#[test]
fn a_partial_discard_of_a_stored_chunk_reads_nothing_back() {
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some((uz, r)) = filled_in(handler) else {
            return;
        };
        let cp = uz.chunk_bytes() / PAGE_SIZE;
        r.advise(0..LEN, Advice::PageOut).unwrap();
        assert_eq!(r.resident_bytes(), 0);
        let faults = uz.stats().pgmajfault;
        // Inside chunk 1, and across the boundary of chunks 2 and 3.
        let gone: Vec<usize> = (cp + 3..cp + 7).chain(3 * cp - 2..3 * cp + 4).collect();
        r.discard((cp + 3) * PAGE_SIZE..(cp + 7) * PAGE_SIZE)
            .unwrap();
        r.discard((3 * cp - 2) * PAGE_SIZE..(3 * cp + 4) * PAGE_SIZE)
            .unwrap();
        assert_eq!(
            r.resident_bytes(),
            0,
            "{handler:?}: the discard read pages in"
        );
        assert_eq!(uz.stats().pgmajfault, faults, "{handler:?}");
        assert_eq!(uz.stats().discarded_stored_pages, gone.len() as u64);
        for pass in ["discarded", "paged out and back"] {
            for i in 0..LEN / PAGE_SIZE {
                let p = page(&r, i);
                if gone.contains(&i) {
                    assert!(p.iter().all(|&b| b == 0), "{handler:?} {pass}: page {i}");
                } else {
                    assert!(
                        Pattern::Text.verify(i as u64, 7, p),
                        "{handler:?} {pass}: page {i}"
                    );
                }
            }
            r.advise(0..LEN, Advice::PageOut).unwrap();
        }
    }
}

/// A child forked after `prepare_fork` sees every byte its parent had,
/// evicted pages included; the parent carries on under its budget.
#[test]
fn a_forked_child_sees_evicted_pages() {
    let Some((uz, r)) = filled(Config::default()) else {
        return;
    };
    r.advise(0..LEN, Advice::PageOut).unwrap();
    let _ = common::read(&r, 9); // one partial chunk
    let guard = uz.prepare_fork().unwrap();
    // SAFETY: the child only reads memory and exits with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        std::mem::forget(guard);
        let ok = (0..LEN / PAGE_SIZE).all(|i| Pattern::Text.verify(i as u64, 7, page(&r, i)));
        // SAFETY: leaving the child without running the parent's drops.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    drop(guard);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child saw wrong bytes: status {status:#x}"
    );
    for i in 0..LEN / PAGE_SIZE {
        assert!(Pattern::Text.verify(i as u64, 7, page(&r, i)), "page {i}");
    }
}

#[test]
fn a_budget_below_the_minimum_is_refused() {
    let cfg = Config {
        budget: 64 << 10,
        ..Config::default()
    };
    let min = uzswap::region::min_budget(&cfg);
    match uzswap::Uzswap::new(cfg) {
        Err(uzswap::RegionError::Config(m)) => {
            assert!(m.contains(&min.to_string()), "{m}");
        }
        Err(e @ uzswap::RegionError::Unavailable(_)) => eprintln!("skipping: {e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a 64 KiB budget was accepted"),
    }
}
