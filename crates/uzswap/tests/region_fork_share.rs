//! The sharing fork at the library's level (`region/fork.rs`): a parent
//! whose region is mostly evicted holds eviction and writeback
//! (`prepare_fork_sharing`), brings its threads to rest and forks. The
//! child either takes the evicted chunks over with an instance of its own
//! (`adopt_inheriting`), reading every page and writing half of it anew
//! under a budget a quarter of the parent's, or writes them into place from
//! the parent's cache (`materialize_in_child`, the fallback where no
//! instance can be made). Meanwhile the parent writes all of its pages
//! again, freeing and reusing its pool's objects: the child must still
//! read the bytes of the fork, and the parent its own.
//!
//! One test in its own binary: the child of a fork runs only the thread
//! that forked, and the test harness's other threads hold nothing then.

use std::time::Duration;
use uzswap::compress::quiesce;
use uzswap::region::{Config, HandlerMode, Region, Uzswap};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{instance, page};

const LEN: usize = 32 << 20;

fn fill(r: &Region, pages: impl IntoIterator<Item = usize>, seed: u64) {
    for i in pages {
        Pattern::Index.fill(i as u64, seed, page(r, i));
    }
}

/// The first page of `pages` that does not hold `seed`'s bytes.
fn differs(r: &Region, pages: std::ops::Range<usize>, seed: u64) -> Option<usize> {
    let mut want = vec![0u8; PAGE_SIZE];
    pages.into_iter().find(|&i| {
        Pattern::Index.fill(i as u64, seed, &mut want);
        page(r, i)[..] != want[..]
    })
}

#[test]
fn a_child_takes_evicted_chunks_over_or_writes_them_into_place() {
    // Before the instances' threads start: they are counted from birth.
    quiesce::enable();
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let cfg = Config {
            budget: 8 << 20,
            folio_order: 4,
            defer_register: false,
            handler,
            ..Config::default()
        };
        let Some(uz) = instance(cfg.clone()) else {
            return;
        };
        let r = uz.region(LEN).unwrap();
        // The take-over, with and without pages touched before it; the
        // fallback; the take-over after a writeback.
        for (round, (take_over, touch, write_back)) in [
            (true, false, false),
            (true, true, false),
            (false, false, false),
            (true, false, true),
        ]
        .into_iter()
        .enumerate()
        {
            fork_once(
                &uz,
                &r,
                &cfg,
                (take_over, touch, write_back),
                10 + round as u64,
            );
        }
    }
}

/// Fill `r` with `seed`'s bytes, fork sharing, and have the child check
/// them (`child`) while the parent writes its own anew. With `write_back`,
/// the cache writes its pages to the device first: the fork moves the
/// objects of the pages the child takes over back into the pool for the
/// child to share (`promoted_pages`) and brings in any it could not move.
fn fork_once(
    uz: &Uzswap,
    r: &Region,
    cfg: &Config,
    (take_over, touch, write_back): (bool, bool, bool),
    seed: u64,
) {
    let n = LEN / PAGE_SIZE;
    let what = format!(
        "{:?} take_over {take_over} touch {touch} write_back {write_back}",
        cfg.handler
    );
    fill(r, 0..n, seed);
    assert!(uz.stats().evicted_chunks > 0, "{what}");
    // Pages read and written at random, a page per chunk: the fork finds
    // PARTIAL chunks with groups mapped, some with copies, some DIRTY.
    // (Written with the bytes they hold: the child checks `seed`'s.)
    for i in (3..n).step_by(37) {
        assert_eq!(differs(r, i..i + 1, seed), None, "{what}: page {i}");
    }
    fill(r, (7..n).step_by(101), seed);
    let promoted = uz.zswap().stats().promoted_pages;
    if write_back {
        for _ in 0..8 {
            uz.zswap().shrink(u64::MAX);
        }
        assert!(
            uz.zswap().stats().device_pages > 0,
            "{what}: nothing written back"
        );
    }
    let guard = uz.prepare_fork_sharing().unwrap();
    if write_back {
        assert!(
            uz.zswap().stats().promoted_pages > promoted,
            "{what}: no written-back page moved into the pool"
        );
    }
    let rest = quiesce::close(Duration::from_secs(5)).expect("uzswap's threads at rest");
    assert!(
        guard.sharable(),
        "{what}: nothing written back, nothing owned"
    );
    // SAFETY: the child runs only the code below and leaves by _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        quiesce::reset_in_child();
        drop(rest);
        std::mem::forget(guard);
        let run = || child(uz, r, cfg, take_over, touch, seed);
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).map_or(100, |c| c);
        // SAFETY: leaving the child without running anything of the
        // parent's (destructors, the harness).
        unsafe { libc::_exit(code) };
    }
    drop(rest);
    drop(guard);
    // The parent's pool frees and reuses its objects under the child.
    fill(r, 0..n, seed + 100);
    let mut st = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "{what}: child status {st:#x} (see its stderr)"
    );
    assert_eq!(
        differs(r, 0..n, seed + 100),
        None,
        "{what}: the parent's bytes"
    );
}

/// The child's side; its exit status (0: every byte as the fork left it).
fn child(uz: &Uzswap, r: &Region, cfg: &Config, take_over: bool, touch: bool, seed: u64) -> i32 {
    let n = LEN / PAGE_SIZE;
    // SAFETY: just forked, nothing of uzswap's ran here since, and the
    // parent's instance is never used again but through the two calls
    // below, which are for that.
    unsafe { uz.abandon_in_child() };
    if !take_over {
        // SAFETY: as above; the region is plain memory here.
        if let Err(e) = unsafe { uz.materialize_in_child() } {
            eprintln!("materialize: {e}");
            return 1;
        }
        return match differs(r, 0..n, seed) {
            None => 0,
            Some(i) => {
                eprintln!("materialized page {i} differs");
                2
            }
        };
    }
    // Code that runs in a child before its take-over (glibc's reset of
    // every FILE's lock, the program's atfork handlers) touches memory
    // that nothing has registered yet, and the kernel fills an evicted
    // page it touches with zeros: a read of page 1, and a write of 8
    // bytes at the start of page 2, of every 13th chunk (some of them
    // evicted, some brought in before the fork or resident).
    let per = 16 * 13;
    let stamp = |k: usize| 0x0101_0101_0101_0101u64 * (k as u64 + 1);
    let touched = if touch { n / per } else { 0 };
    for k in 0..touched {
        std::hint::black_box(page(r, k * per + 1)[0]);
        page(r, k * per + 2)[..8].copy_from_slice(&stamp(k).to_le_bytes());
    }
    let own = Uzswap::new(Config {
        budget: cfg.budget / 4,
        ..cfg.clone()
    })
    .expect("the child's instance");
    let held = own.hold_eviction();
    // SAFETY: `r` is the parent's, quiesced at the fork and given up.
    let cr = unsafe { own.adopt_inheriting(r) }.expect("taken over");
    drop(held);
    let took = own.zswap().stats().inherited_pages;
    if took == 0 {
        eprintln!("no page taken over");
        return 3;
    }
    if touch && own.stats().fork_touched_pages == 0 {
        eprintln!("no evicted page touched before the take-over");
        return 11;
    }
    // The parent's mapped pages are charged to nobody here: nothing is
    // resident of the child's own yet.
    let s = own.stats();
    if s.resident_bytes != 0 || cr.resident_bytes() != 0 {
        eprintln!("charged at the take-over: {s:?}");
        return 7;
    }
    // Those pages read as the parent left them, with the child's writes.
    let mut want = vec![0u8; PAGE_SIZE];
    for k in 0..touched {
        for (i, w) in [(k * per + 1, None), (k * per + 2, Some(stamp(k)))] {
            Pattern::Index.fill(i as u64, seed, &mut want);
            if let Some(w) = w {
                want[..8].copy_from_slice(&w.to_le_bytes());
            }
            if page(&cr, i)[..] != want[..] {
                eprintln!("page {i}, touched before the take-over, differs");
                return 12;
            }
        }
    }
    // Read twice under a quarter of the parent's budget: what the child
    // only reads is dropped again by its evictions, never stored, and
    // the groups mapped from the parent are never taken.
    for _ in 0..2 {
        let stamped = |i: usize| touch && i % per == 2;
        if let Some(i) = (0..n).find(|&i| !stamped(i) && differs(&cr, i..i + 1, seed).is_some()) {
            eprintln!("inherited page {i} differs");
            return 4;
        }
    }
    // (Pages written before the take-over are the child's to store.)
    let s = own.stats();
    if (!touch && s.zswap.zswpout != 0) || s.evicted_chunks == 0 {
        eprintln!("the child stored what it only read: {s:?}");
        return 8;
    }
    // Written anew, as the rest of the test expects of every page.
    for k in 0..touched {
        fill(&cr, [k * per + 2], seed);
    }
    // A few bytes written into every third page, the rest of each page
    // kept (an allocator's slot in a page of the parent's data), read
    // back twice under the child's budget with every other byte.
    let mark = |i: usize| (i % 4000) & !7;
    for i in (0..n).step_by(3) {
        let p = page(&cr, i);
        p[mark(i)..mark(i) + 8].copy_from_slice(&(i as u64 ^ 0xa5a5).to_le_bytes());
    }
    let mut want = vec![0u8; PAGE_SIZE];
    for _ in 0..2 {
        for i in 0..n {
            Pattern::Index.fill(i as u64, seed, &mut want);
            if i % 3 == 0 {
                want[mark(i)..mark(i) + 8].copy_from_slice(&(i as u64 ^ 0xa5a5).to_le_bytes());
            }
            if page(&cr, i)[..] != want[..] {
                eprintln!("page {i} differs after a write of 8 bytes into it");
                return 10;
            }
        }
    }
    // Half written anew, the other half read again, under the child's
    // budget: its evictions drop what it only read.
    fill(&cr, 0..n / 2, seed + 50);
    let rest = (n / 2..n).filter(|i| i % 3 != 0);
    if let Some(i) = rest
        .clone()
        .find(|&i| differs(&cr, i..i + 1, seed).is_some())
        .or(differs(&cr, 0..n / 2, seed + 50))
    {
        eprintln!("page {i} differs after the child's writes");
        return 5;
    }
    let held = own.hold_eviction();
    let s = own.stats();
    if s.fault_errors != 0 || s.zswap.checksum_fail != 0 || s.evicted_chunks == 0 {
        eprintln!("child's figures: {s:?}");
        return 6;
    }
    // Every charge made is taken back as it was made: the instance's
    // resident bytes are what its region maps of its own.
    if s.resident_bytes != cr.resident_bytes() {
        eprintln!(
            "resident {} against {} mapped",
            s.resident_bytes,
            cr.resident_bytes()
        );
        return 9;
    }
    drop(held);
    std::mem::forget(cr);
    std::mem::forget(own);
    0
}
