//! Partial chunks (`Config::partial_faults`): a fault off a stored chunk's
//! first page installs only that page (a read's write-protected with its
//! copy kept, a write's writable), and further random faults add theirs; a
//! scan or a hint completes the chunk; eviction claims (or stores) the
//! mapped pages. Last, whether reads install protected at all follows what
//! the program does next (`region/keep.rs`).

use uzswap::region::{Advice, Config, HandlerMode, Region, Uzswap};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::instance;

const SEED: u64 = 11;
/// 64 KiB chunks: 16 pages.
const ORDER: u32 = 4;
const PER: usize = 1 << ORDER;

fn page(r: &Region, i: usize) -> &'static mut [u8] {
    assert!(i * PAGE_SIZE < r.len());
    // SAFETY: `i` is inside the live region, which outlives each use here.
    unsafe { std::slice::from_raw_parts_mut(r.as_ptr().add(i * PAGE_SIZE), PAGE_SIZE) }
}

/// A 1 MiB region filled with the index pattern and paged out.
fn stored_region(cfg: Config) -> Option<(Uzswap, Region)> {
    let uz = instance(cfg)?;
    let len = 1 << 20;
    let r = uz.region(len).unwrap();
    for i in 0..len / PAGE_SIZE {
        Pattern::Index.fill(i as u64, SEED, page(&r, i));
    }
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0, "{:?}", uz.stats());
    Some((uz, r))
}

fn check(r: &Region, i: usize) {
    assert!(
        Pattern::Index.verify(i as u64, SEED, page(r, i)),
        "page {i}"
    );
}

fn read(r: &Region, i: usize) -> u8 {
    // SAFETY: an in-bounds read of the live region.
    unsafe { std::ptr::read_volatile(page(r, i).as_ptr()) }
}

/// Read page `first`, then one page of each of `others` (faults enough
/// that `first` is no longer among the recent ones), then its neighbour
/// `next`: a mapped neighbour that faulted long ago is chance, not a scan,
/// so `next` comes in alone (one partial fault, nothing completed).
fn comes_in_alone_after(
    uz: &Uzswap,
    r: &Region,
    first: usize,
    others: impl Iterator<Item = usize>,
    next: usize,
) {
    check(r, first);
    for i in others {
        check(r, i);
    }
    let before = uz.stats();
    check(r, next);
    let st = uz.stats();
    assert_eq!(st.faults_partial, before.faults_partial + 1, "{st:?}");
    assert_eq!(st.partial_filled, before.partial_filled);
}

fn cfg() -> Config {
    Config {
        folio_order: ORDER,
        ..Config::default()
    }
}

#[test]
fn random_reads_install_pages_and_a_scan_takes_the_chunk_whole() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    read(&r, 5);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (1, 0), "{st:?}");
    assert_eq!(st.resident_bytes, PAGE_SIZE as u64);
    assert_eq!(r.resident_bytes(), PAGE_SIZE as u64);
    assert_eq!(st.zswap.clean_pages, 1, "the page's copy is kept clean");
    check(&r, 5);
    assert_eq!(
        uz.stats().pgmajfault,
        1,
        "the page is mapped: no second fault"
    );

    // More random reads in the chunk add their pages, one fault each, at
    // as many places as they like.
    for (k, i) in [9, 13, 11, 2, 7].into_iter().enumerate() {
        check(&r, i);
        let st = uz.stats();
        assert_eq!((st.faults_partial, st.partial_filled), (k as u64 + 2, 0));
        assert_eq!(st.resident_bytes, (k as u64 + 2) * PAGE_SIZE as u64);
        assert_eq!(st.zswap.clean_pages, k as u64 + 2);
    }
    for i in [2, 5, 7, 9, 11, 13] {
        check(&r, i);
    }
    assert_eq!(uz.stats().pgmajfault, 6, "mapped pages fault no more");

    // A read of the page after one that just faulted comes in alone (an
    // object across a page boundary faults so); the page after two that
    // faulted lately is a scan: the rest comes in, write-protected.
    check(&r, 3);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (7, 0), "{st:?}");
    check(&r, 4);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (7, 1), "{st:?}");
    assert_eq!(st.resident_bytes, chunk as u64);
    assert_eq!(
        st.zswap.clean_pages, 0,
        "a chunk completed by a read keeps no copies"
    );
    for i in 0..PER {
        check(&r, i);
    }
    assert_eq!(uz.stats().pgmajfault, 8);

    // A fault on a chunk's first page, the chunk before mapped to its end
    // (a scan entering it), takes it whole.
    check(&r, PER);
    let st = uz.stats();
    assert_eq!(st.faults_partial, 7, "{st:?}");
    assert_eq!(st.resident_bytes, 2 * chunk as u64);

    // So does a read of the page after two mapped ones in another chunk.
    check(&r, 2 * PER + 7);
    check(&r, 2 * PER + 8);
    check(&r, 2 * PER + 9);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (9, 2), "{st:?}");
    assert_eq!(st.resident_bytes, 3 * chunk as u64);
    for i in 0..3 * PER {
        check(&r, i);
    }

    // A first page whose chunk before is not mapped is a random read, not
    // a scan: it comes in alone.
    check(&r, 5 * PER);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (10, 2), "{st:?}");
    assert_eq!(st.resident_bytes, 3 * chunk as u64 + PAGE_SIZE as u64);
    // Scanning on from it takes the chunk whole, at the second step.
    check(&r, 5 * PER + 1);
    check(&r, 5 * PER + 2);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (11, 3), "{st:?}");
    assert_eq!(st.resident_bytes, 4 * chunk as u64);

    // Mapped neighbours that faulted long ago, many random faults since,
    // are chance, not a scan: the page comes in alone.
    check(&r, 7 * PER + 3);
    comes_in_alone_after(
        &uz,
        &r,
        7 * PER + 4,
        (8..16).map(|c| c * PER + 9),
        7 * PER + 5,
    );

    // So is a first page after a chunk mapped to its end that took none of
    // the last faults: under random access most chunks are mapped, and a
    // random read lands on a first page one time in sixteen. Chunk 2 came
    // in whole many faults ago; its neighbour's first page comes in alone.
    let before = uz.stats();
    check(&r, 3 * PER);
    let st = uz.stats();
    assert_eq!(st.faults_partial, before.faults_partial + 1, "{st:?}");
    assert_eq!(st.resident_bytes, before.resident_bytes + PAGE_SIZE as u64);
    // A scan walking on from it takes the chunk whole, as above.
    check(&r, 3 * PER + 1);
    check(&r, 3 * PER + 2);
    let st = uz.stats();
    assert_eq!(st.partial_filled, before.partial_filled + 1, "{st:?}");
    assert_eq!(st.resident_bytes, before.resident_bytes + chunk as u64);
    for i in 0..4 * PER {
        check(&r, i);
    }
    assert_eq!(st.fault_errors, 0);
}

#[test]
fn random_writes_install_pages_writable() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    let pg = PAGE_SIZE as u64;
    // A write to a mapped page (a write-protect fault) lifts that page's
    // protection and drops its copy; the chunk stays partial.
    check(&r, PER + 3);
    page(&r, PER + 3)[100] ^= 0xff;
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (1, 0), "{st:?}");
    assert_eq!(st.faults_wp, 1);
    assert_eq!(st.resident_bytes, pg);
    assert_eq!(st.zswap.clean_pages, 0, "a written page keeps no copy");
    // A write to another page of a partial chunk (a missing fault) installs
    // that page writable; the read page keeps its clean copy.
    check(&r, 2 * PER + 6);
    page(&r, 2 * PER + 10)[7] ^= 0x55;
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (3, 0), "{st:?}");
    assert_eq!(st.zswap.clean_pages, 1);
    assert_eq!(st.resident_bytes, 3 * pg);
    // So does a write to a stored chunk.
    page(&r, 4 * PER + 9)[3] ^= 0x33;
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (4, 0), "{st:?}");
    assert_eq!(st.resident_bytes, 4 * pg);
    // Written pages take further writes with no fault.
    let (majors, wps) = (st.pgmajfault, st.faults_wp);
    page(&r, PER + 3)[101] ^= 0xff;
    page(&r, 2 * PER + 10)[8] ^= 0x55;
    page(&r, 4 * PER + 9)[4] ^= 0x33;
    let st = uz.stats();
    assert_eq!((st.pgmajfault, st.faults_wp), (majors, wps), "{st:?}");
    // Writes scanning on from a written page take the chunk whole,
    // writable, at the second step.
    page(&r, 4 * PER + 10)[0] ^= 0x11;
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (5, 0), "{st:?}");
    page(&r, 4 * PER + 11)[0] ^= 0x11;
    page(&r, 4 * PER + 11)[0] ^= 0x11;
    let st = uz.stats();
    assert_eq!(st.partial_filled, 1, "{st:?}");
    assert_eq!(st.resident_bytes, 3 * pg + uz.chunk_bytes() as u64);
    let wps = st.faults_wp;
    for i in 4 * PER..5 * PER {
        page(&r, i)[1] ^= 0x0f;
    }
    assert_eq!(uz.stats().faults_wp, wps, "the completed chunk is writable");
    // A scan reading a chunk with a written page completes it writable
    // too: the written page has no clean copy to keep.
    check(&r, PER + 7);
    check(&r, PER + 8);
    check(&r, PER + 9);
    let st = uz.stats();
    assert_eq!(st.partial_filled, 2, "{st:?}");
    assert_eq!(st.zswap.clean_pages, 1, "only chunk 2's read page");
    page(&r, PER + 12)[1] ^= 0x0f;
    page(&r, PER + 12)[1] ^= 0x0f;
    assert_eq!(uz.stats().faults_wp, wps, "no write-protect fault");

    // Evicting a chunk with written pages stores them; every write
    // survives the round trip.
    let out_before = uz.stats().zswap.zswpout;
    r.advise(2 * PER * PAGE_SIZE..3 * PER * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    let st = uz.stats();
    assert_eq!(st.zswap.zswpout, out_before + 1, "the written page alone");
    r.advise(0..r.len(), Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    let flips: [(usize, &[(usize, u8)]); 3] = [
        (PER + 3, &[(100, 0xff), (101, 0xff)]),
        (2 * PER + 10, &[(7, 0x55), (8, 0x55)]),
        (4 * PER + 9, &[(3, 0x33), (4, 0x33)]),
    ];
    for (i, fl) in flips {
        let p = page(&r, i);
        for &(at, x) in fl {
            p[at] ^= x;
        }
    }
    page(&r, 4 * PER + 10)[0] ^= 0x11;
    for i in 4 * PER..5 * PER {
        page(&r, i)[1] ^= 0x0f;
    }
    for i in 0..r.len() / PAGE_SIZE {
        check(&r, i);
    }
    assert_eq!(uz.stats().fault_errors, 0);
}

#[test]
fn evicting_a_partial_chunk_claims_or_stores_its_page() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    // Claimed: the copy is still there, eviction is a zap.
    read(&r, 7);
    let clean_before = uz.stats().evicted_clean;
    let out_before = uz.stats().zswap.zswpout;
    r.advise(0..chunk, Advice::PageOut).unwrap();
    let st = uz.stats();
    assert_eq!(st.resident_bytes, 0, "{st:?}");
    assert_eq!(st.evicted_clean, clean_before + 1);
    assert_eq!(st.zswap.zswpout, out_before, "nothing compressed");
    assert_eq!(st.zswap.clean_pages, 0);
    check(&r, 7);

    // Dropped by the cache: eviction stores the page afresh.
    read(&r, PER + 11);
    assert_eq!(
        uz.stats().zswap.clean_pages,
        2,
        "page 7 again, and this one"
    );
    assert!(uz.zswap().drop_clean(u64::MAX) > 0);
    assert_eq!(uz.stats().zswap.clean_pages, 0);
    let out_before = uz.stats().zswap.zswpout;
    r.advise(0..2 * chunk, Advice::PageOut).unwrap();
    let st = uz.stats();
    assert_eq!(st.resident_bytes, 0, "{st:?}");
    assert_eq!(st.zswap.zswpout, out_before + 2, "both pages stored again");
    for i in 0..2 * PER {
        check(&r, i);
    }
    // A partial chunk whose copy was dropped completes from the rest of the
    // pool and its mapped page.
    r.advise(0..2 * chunk, Advice::PageOut).unwrap();
    read(&r, 13);
    uz.zswap().drop_clean(u64::MAX);
    for i in 0..PER {
        check(&r, i);
    }
    let st = uz.stats();
    // Partial: 7, 7 again, PER + 11, 13; completed: chunk 0 on page 0.
    assert_eq!((st.faults_partial, st.partial_filled), (4, 1), "{st:?}");
    assert_eq!(st.resident_bytes, chunk as u64);

    // Several pages mapped, one copy dropped: that page alone is stored.
    let c = 3 * PER;
    for i in [c + 2, c + 6, c + 10] {
        check(&r, i);
    }
    assert_eq!(
        uz.stats().resident_bytes,
        chunk as u64 + 3 * PAGE_SIZE as u64
    );
    // PARTIAL allows a mapped page's copy to be gone.
    let key = uzswap::zswap::SwapEntry::new(r.id(), (c + 6) as u64);
    assert!(uz.zswap().invalidate(key));
    let out_before = uz.stats().zswap.zswpout;
    r.advise(c * PAGE_SIZE..(c + PER) * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    let st = uz.stats();
    assert_eq!(st.resident_bytes, chunk as u64, "{st:?}");
    assert_eq!(st.zswap.zswpout, out_before + 1, "only the dropped page");
    for i in c..c + PER {
        check(&r, i);
    }
    assert_eq!(uz.stats().fault_errors, 0);
}

#[test]
fn will_need_and_teardown_handle_partial_chunks() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    for c in 0..4 {
        read(&r, c * PER + 1);
    }
    assert_eq!(uz.stats().resident_bytes, 4 * PAGE_SIZE as u64);
    r.advise(0..2 * uz.chunk_bytes(), Advice::WillNeed).unwrap();
    let st = uz.stats();
    assert_eq!(st.partial_filled, 2, "{st:?}");
    assert_eq!(
        st.resident_bytes,
        2 * uz.chunk_bytes() as u64 + 2 * PAGE_SIZE as u64
    );
    for i in 0..2 * PER {
        check(&r, i);
    }
    drop(r);
    let st = uz.stats();
    assert_eq!(st.resident_bytes, 0, "teardown uncharges partial chunks");
    assert_eq!(uz.zswap().stored_pages(), 0);
}

#[test]
fn partial_faults_off_install_whole_chunks() {
    let Some((uz, r)) = stored_region(Config {
        partial_faults: false,
        ..cfg()
    }) else {
        return;
    };
    check(&r, 5);
    let st = uz.stats();
    assert_eq!(st.faults_partial, 0);
    assert_eq!(st.resident_bytes, uz.chunk_bytes() as u64);
}

/// Every load verified and no fault failed.
fn no_errors(uz: &Uzswap) {
    let st = uz.stats();
    assert_eq!(st.zswap.checksum_fail + st.zswap.decompress_fail, 0);
    assert_eq!(st.fault_errors, 0, "{st:?}");
}

/// `stored_region` with every page written back to the swap device.
fn written_back_region() -> Option<(Uzswap, Region)> {
    // A budget gives the instance its swap device; the region fits it, so
    // nothing is evicted but by hint and nothing written back but here.
    // Its pool share (32 MiB) makes device writes whole 2 MiB runs, so a
    // walk takes the region's pages as one run.
    let (uz, r) = stored_region(Config {
        budget: 160 << 20,
        writeback: Some(Default::default()),
        ..cfg()
    })?;
    // Second chance takes two walks; the warm region decays over several
    // (each walk's runs end at one device write's worth of objects).
    let pages = (r.len() / PAGE_SIZE) as u64;
    for _ in 0..64 {
        if uz.stats().zswap.device_pages == pages {
            break;
        }
        uz.zswap().shrink(u64::MAX);
    }
    let st = uz.stats();
    assert_eq!(st.zswap.device_pages, pages, "{st:?}");
    Some((uz, r))
}

#[test]
fn a_written_back_page_comes_in_alone() {
    let Some((uz, r)) = written_back_region() else {
        return;
    };
    let pages = r.len() / PAGE_SIZE;
    let before = uz.stats();

    // A random read off the first page of a written-back chunk reads its
    // one page from the device and charges one page.
    check(&r, 5);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (1, 0), "{st:?}");
    assert_eq!(st.zswap.swap_reads - before.zswap.swap_reads, 1);
    assert_eq!(st.resident_bytes, PAGE_SIZE as u64);
    assert_eq!(st.zswap.device_pages, pages as u64, "the copy stays");
    for (k, i) in [9, 13, 11].into_iter().enumerate() {
        check(&r, i);
        let st = uz.stats();
        assert_eq!(st.faults_partial, k as u64 + 2);
        assert_eq!(st.zswap.swap_reads - before.zswap.swap_reads, k as u64 + 2);
        assert_eq!(st.resident_bytes, (k as u64 + 2) * PAGE_SIZE as u64);
    }
    // A scan on from the last completes the chunk from the device, at its
    // second step.
    check(&r, 12);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (5, 0), "{st:?}");
    check(&r, 14);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (5, 1), "{st:?}");
    assert_eq!(st.resident_bytes, uz.chunk_bytes() as u64);
    for i in 0..PER {
        check(&r, i);
    }
    // Evicted again, the chunk's pages cost only a zap: their copies are
    // still on the device, and it reads back byte-exact.
    r.advise(0..uz.chunk_bytes(), Advice::PageOut).unwrap();
    assert_eq!(uz.stats().resident_bytes, 0);
    for i in (0..pages).rev() {
        check(&r, i);
    }
    no_errors(&uz);
}

/// A chunk read in whole while every page of it is on the device keeps the
/// slots as clean copies (`chunk::KEPT`): evicted unwritten it is a zap
/// that writes nothing, and a write drops the copies and lifts the whole
/// chunk's protection at once.
#[test]
fn a_chunk_read_whole_from_the_device_keeps_its_slots() {
    let Some((uz, r)) = written_back_region() else {
        return;
    };
    let pages = r.len() / PAGE_SIZE;
    let chunk = uz.chunk_bytes();
    let before = uz.stats();

    // A scan's entry (the first page of the first chunk) takes it whole.
    check(&r, 0);
    let st = uz.stats();
    assert_eq!(st.kept_installs, 1, "{st:?}");
    assert_eq!(st.resident_bytes, chunk as u64);
    assert_eq!(st.zswap.device_pages, pages as u64, "the slots stay");
    assert_eq!(st.zswap.kept_pages, PER as u64);
    for i in 0..PER {
        check(&r, i);
    }
    assert_eq!(
        uz.stats().faults_wp,
        0,
        "reads of a kept chunk do not fault"
    );

    // Evicted unwritten: the copies are claimed, nothing stored or written.
    r.advise(0..chunk, Advice::PageOut).unwrap();
    let st = uz.stats();
    assert_eq!(st.resident_bytes, 0);
    assert_eq!(st.zswap.kept_pages, 0, "claimed: the device's again");
    assert_eq!(st.zswap.stored_pages, before.zswap.stored_pages, "{st:?}");
    assert_eq!(st.zswap.written_back_pages, before.zswap.written_back_pages);
    for i in 0..PER {
        check(&r, i);
    }
    assert_eq!(uz.stats().kept_installs, 2);

    // A write drops every copy and makes the chunk writable whole: one
    // write-protect fault, not one per page.
    page(&r, 3)[7] ^= 0xff;
    page(&r, 9)[7] ^= 0xff;
    let st = uz.stats();
    assert_eq!(st.faults_wp, 1, "{st:?}");
    assert_eq!(st.zswap.kept_pages, 0);
    assert_eq!(st.zswap.device_pages, (pages - PER) as u64);
    // Evicted now it is stored afresh, and reads back with the writes.
    r.advise(0..chunk, Advice::PageOut).unwrap();
    let st = uz.stats();
    assert_eq!(st.resident_bytes, 0);
    assert_eq!(
        st.zswap.stored_pages,
        before.zswap.stored_pages + PER as u64
    );
    for i in 0..PER {
        let mut want = vec![0; PAGE_SIZE];
        Pattern::Index.fill(i as u64, SEED, &mut want);
        if i == 3 || i == 9 {
            want[7] ^= 0xff;
        }
        assert!(page(&r, i) == &want[..], "page {i}");
    }
    for i in PER..pages {
        check(&r, i);
    }
    no_errors(&uz);
}

/// A chunk with every group mapped (read group by group at random, or
/// KEPT) has nothing left to bring in: a pin for writing makes every page
/// writable with one touch (it may stay PARTIAL, DIRTY, and the pin must
/// not wait for it to become RESIDENT), and a fork finds nothing missing.
#[test]
fn a_chunk_with_every_group_mapped_pins_for_writing_and_forks() {
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some((uz, r)) = stored_region(Config { handler, ..cfg() }) else {
            return;
        };
        // Every page of chunk 1, one at a time: the even pages, then
        // (after enough faults elsewhere that none of them is recent) the
        // odd ones, so no fault is next to one just faulted (no scan):
        // PARTIAL with every group.
        for i in (0..PER).step_by(2) {
            check(&r, PER + i);
        }
        for c in 3..11 {
            check(&r, c * PER + 5);
        }
        for i in (1..PER).step_by(2) {
            check(&r, PER + i);
        }
        let st = uz.stats();
        assert_eq!(st.partial_filled, 0, "{st:?}");
        assert_eq!(st.resident_bytes, (uz.chunk_bytes() + 8 * PAGE_SIZE) as u64);
        let at = r.as_ptr() as usize + uz.chunk_bytes();
        {
            let _pin = uz.pin(at, uz.chunk_bytes(), true);
            for i in 0..PER {
                page(&r, PER + i)[1] ^= 0x5a;
            }
        }
        drop(uz.prepare_fork().expect("nothing left to bring in"));
        for i in 0..PER {
            let mut want = vec![0; PAGE_SIZE];
            Pattern::Index.fill((PER + i) as u64, SEED, &mut want);
            want[1] ^= 0x5a;
            assert!(page(&r, PER + i) == &want[..], "page {}", PER + i);
        }
        assert_eq!(uz.stats().fault_errors, 0);
    }
}

/// The read-ahead path with handler threads, where the scan races it: a
/// chunk wakes its fault once installed, before the chunks read ahead of
/// it are, so a scan (two here, from the start and from the middle) can
/// fault on a chunk while it is being read ahead, and parks on it or
/// takes it first. Whichever wins, every byte reads back as written and
/// every chunk ends mapped.
#[test]
fn scans_racing_their_read_ahead_read_every_byte() {
    for _ in 0..8 {
        let Some((uz, r)) = stored_region(Config {
            folio_order: 6,
            ..cfg()
        }) else {
            return;
        };
        let pages = r.len() / PAGE_SIZE;
        std::thread::scope(|s| {
            s.spawn(|| (0..pages).for_each(|i| check(&r, i)));
            s.spawn(|| (pages / 2..pages).for_each(|i| check(&r, i)));
        });
        let st = uz.stats();
        assert_eq!(st.fault_errors, 0, "{st:?}");
        assert_eq!(st.zswap.checksum_fail + st.zswap.decompress_fail, 0);
        assert_eq!(st.resident_bytes, r.len() as u64, "{st:?}");
    }
}

#[test]
fn a_large_folio_is_a_scans_read_ahead_window_not_a_larger_chunk() {
    // 256 KiB folios: chunks of 64 KiB (the largest), windows of four.
    // Faults resolved by the faulting thread: a chunk wakes its fault as
    // soon as it is installed, before the chunks read ahead of it are, so
    // with handler threads the scan could fault on one of those while it
    // is being read ahead (a separate fault, parked or partial) and the
    // counts below would depend on timing.
    let Some((uz, r)) = stored_region(Config {
        folio_order: 6,
        handler: HandlerMode::Signal,
        ..cfg()
    }) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    assert_eq!(chunk, PER * PAGE_SIZE, "chunks stop at 64 KiB");

    // A forward scan from the region's start. Chunk 0 enters alone
    // (nothing mapped before it); chunk 1 reads one chunk ahead (the run
    // behind it is one); chunk 3 ends the window, so it reads none; chunk
    // 4 starts the next window with four mapped behind it and reads the
    // rest of it, 5 to 7.
    for i in 0..8 * PER {
        check(&r, i);
    }
    let st = uz.stats();
    assert_eq!((st.pgmajfault, st.prefetched), (4, 4), "{st:?}");
    assert_eq!(st.faults_partial, 0, "{st:?}");
    assert_eq!(st.resident_bytes, 8 * chunk as u64);

    // A random read maps its page alone: the unit of a fault is still the
    // chunk's page, and nothing is read ahead for it.
    check(&r, 12 * PER + 9);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.prefetched), (1, 4), "{st:?}");
    assert_eq!(st.resident_bytes, 8 * chunk as u64 + PAGE_SIZE as u64);

    // Chunks read ahead are chunks like the others: evicted one by one
    // and read back byte-exact.
    r.advise(5 * chunk..6 * chunk, Advice::PageOut).unwrap();
    assert_eq!(
        uz.stats().resident_bytes,
        7 * chunk as u64 + PAGE_SIZE as u64
    );
    for i in 0..r.len() / PAGE_SIZE {
        check(&r, i);
    }
    let st = uz.stats();
    assert_eq!(st.fault_errors, 0, "{st:?}");
    assert_eq!(st.zswap.checksum_fail + st.zswap.decompress_fail, 0);
}

#[test]
fn a_chunk_faulted_densely_comes_in_whole() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    // Four chunks resident: eight groups of a chunk faulted within four
    // windows of as many faults are dense (`fault::DENSE`).
    r.advise(12 * chunk..16 * chunk, Advice::WillNeed).unwrap();
    assert_eq!(uz.stats().resident_bytes, 4 * chunk as u64);
    // Eight groups of chunk 1, none next to another (no scan walks it),
    // then a ninth on its first page (no scan enters it): completed.
    let odd = [1, 3, 5, 7, 9, 11, 13, 15];
    for g in odd {
        check(&r, PER + g);
    }
    let before = uz.stats();
    check(&r, PER);
    let st = uz.stats();
    assert_eq!(st.partial_filled, before.partial_filled + 1, "{st:?}");
    assert_eq!(st.faults_partial, before.faults_partial, "{st:?}");
    // The same eight groups of chunk 2, each followed by faults on eight
    // other chunks: 72 faults, where the resident chunks (about ten by
    // the end) give four windows of 40. Random: the ninth comes in alone,
    // as do the other chunks' eighth.
    for g in odd {
        check(&r, 2 * PER + g);
        for c in 3..11 {
            check(&r, c * PER + g);
        }
    }
    let before = uz.stats();
    check(&r, 2 * PER);
    let st = uz.stats();
    assert_eq!(st.partial_filled, before.partial_filled, "{st:?}");
    assert_eq!(st.faults_partial, before.faults_partial + 1, "{st:?}");
    assert!(
        st.resident_bytes < 11 * chunk as u64,
        "four windows would span the test's faults: {st:?}"
    );
    for i in 0..r.len() / PAGE_SIZE {
        check(&r, i);
    }
    assert_eq!(uz.stats().fault_errors, 0);
}

// Read faults install write-protected, keeping the pool's copy, while most
// of what they install goes unwritten; when most of it is written soon
// after (each write then a second fault), reads install writable until the
// pattern changes back (`region/keep.rs`).

const KEEP_SEED: u64 = 5;
/// The keep-policy tests' region: 16384 one-page chunks (turning back to
/// protected installs takes about 8 unwritten probes per write counted).
const KEEP_PAGES: usize = 16384;

fn keep_page(r: &Region, i: usize) -> *mut u8 {
    assert!(i < KEEP_PAGES);
    // SAFETY: in bounds of the live region.
    unsafe { r.as_ptr().add(i * PAGE_SIZE) }
}

fn keep_region() -> Option<(Uzswap, Region)> {
    // One-page chunks: each fault is one install.
    let uz = instance(Config {
        folio_order: 0,
        ..Config::default()
    })?;
    let r = uz.region(KEEP_PAGES * PAGE_SIZE).unwrap();
    for i in 0..KEEP_PAGES {
        // SAFETY: a page of the live region, written by this thread only.
        let p = unsafe { std::slice::from_raw_parts_mut(keep_page(&r, i), PAGE_SIZE) };
        Pattern::Index.fill(i as u64, KEEP_SEED, p);
    }
    r.advise(0..KEEP_PAGES * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    assert_eq!(r.resident_bytes(), 0);
    Some((uz, r))
}

/// Read the first byte of page `i`, and with `write` store it back.
fn keep_touch(r: &Region, i: usize, write: bool) {
    // SAFETY: volatile accesses in bounds of the live region.
    unsafe {
        let b = std::ptr::read_volatile(keep_page(r, i));
        if write {
            std::ptr::write_volatile(keep_page(r, i), b);
        }
    }
}

#[test]
fn reads_followed_by_writes_install_writable_and_turn_back_for_reads_only() {
    let Some((uz, r)) = keep_region() else {
        return;
    };
    // Read then write, page after page (a sort moving what it read).
    for i in 0..512 {
        keep_touch(&r, i, true);
    }
    let s = uz.stats();
    // The first 64 reads decide; after them one in 16 probes.
    assert!(s.reads_writable >= 400, "{s:?}");
    assert!(s.faults_wp <= 64 + 512 / 16 + 8, "{s:?}");
    assert_eq!(s.copies_written, s.faults_wp);

    // Reads only: the probes' installs go unwritten and reads install
    // protected again.
    for i in 512..KEEP_PAGES - 256 {
        keep_touch(&r, i, false);
    }
    let before = uz.stats().reads_writable;
    for i in KEEP_PAGES - 256..KEEP_PAGES {
        keep_touch(&r, i, false);
    }
    let s = uz.stats();
    assert_eq!(s.reads_writable, before, "{s:?}");

    // Nothing changed on the way: every page as written.
    r.advise(0..KEEP_PAGES * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    for i in 0..KEEP_PAGES {
        // SAFETY: a page of the live region.
        let p = unsafe { std::slice::from_raw_parts(keep_page(&r, i), PAGE_SIZE) };
        assert!(Pattern::Index.verify(i as u64, KEEP_SEED, p), "page {i}");
    }
}

#[test]
fn reads_of_memory_left_unwritten_install_protected() {
    let Some((uz, r)) = keep_region() else {
        return;
    };
    // One in sixteen of what reads bring in is written.
    for i in 0..1024 {
        keep_touch(&r, i, i % 16 == 0);
    }
    let s = uz.stats();
    assert_eq!(s.reads_writable, 0, "{s:?}");
    assert_eq!(s.faults_wp, 64, "{s:?}");
}

#[test]
fn reads_of_which_a_quarter_is_written_install_writable() {
    let Some((uz, r)) = keep_region() else {
        return;
    };
    // usemem's random row: a quarter of what reads bring in is written.
    // Each such write is a second fault; past the evidence, reads install
    // writable but for the probes.
    for i in 0..1024 {
        keep_touch(&r, i, i % 4 == 0);
    }
    let s = uz.stats();
    assert!(s.reads_writable >= 800, "{s:?}");
    // The writes that reach a protected install: the evidence's (a
    // quarter of 64) and at most one per probe.
    assert!(s.faults_wp <= 16 + 1024 / 16, "{s:?}");
}

/// Without `keep_copy` a read keeps no copy, so it installs what a write
/// would: only its page, writable, its copy taken. (It used to load the
/// whole chunk for one random read: sixteen pages loaded, and stored again
/// at the next eviction, per fault.)
#[test]
fn without_kept_copies_a_random_read_installs_its_page_alone() {
    let Some((uz, r)) = stored_region(Config {
        keep_copy: false,
        ..cfg()
    }) else {
        return;
    };
    check(&r, 5);
    let st = uz.stats();
    assert_eq!(st.faults_partial, 1, "{st:?}");
    assert_eq!(r.resident_bytes(), PAGE_SIZE as u64, "{st:?}");
    assert_eq!(st.zswap.clean_pages, 0, "no copy kept: {st:?}");
    // Writable: a write takes no second fault.
    page(&r, 5)[0] ^= 1;
    page(&r, 5)[0] ^= 1;
    let st = uz.stats();
    assert_eq!((st.pgmajfault, st.faults_wp), (1, 0), "{st:?}");
    // The other pages are still in the pool, and come back intact.
    for i in (0..PER).filter(|&i| i != 5) {
        check(&r, i);
    }
}

/// An eviction of written pages scattered over a region write-protects
/// them in one call where the chunks between them change nothing under it
/// (stored, or mapped protected), instead of one call, and one TLB
/// shootdown, per written chunk; every page reads back, the written ones
/// with their writes.
#[test]
fn scattered_written_pages_are_protected_by_one_call() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    let chunks = r.len() / (PER * PAGE_SIZE);
    // Even chunks: one page written (a partial chunk whose page is
    // writable). Between them: a page read (mapped protected, its copy
    // kept) or nothing (stored).
    for c in 0..chunks {
        if c % 2 == 0 {
            page(&r, c * PER + 3)[8] ^= 0xff;
        } else if c % 4 == 1 {
            read(&r, c * PER + 5);
        }
    }
    let before = uz.stats().evict_protect_calls;
    r.advise(0..r.len(), Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0, "{:?}", uz.stats());
    let calls = uz.stats().evict_protect_calls - before;
    let written = chunks.div_ceil(2) as u64;
    assert!(
        (1..written).contains(&calls),
        "{calls} write-protect calls for {written} written chunks"
    );
    let mut want = vec![0u8; PAGE_SIZE];
    for i in 0..r.len() / PAGE_SIZE {
        Pattern::Index.fill(i as u64, SEED, &mut want);
        if i % (2 * PER) == 3 {
            want[8] ^= 0xff;
        }
        assert!(page(&r, i) == &want[..], "page {i}");
    }
}

/// The figures include every fault that has returned to its thread, with
/// faults of several threads in flight on both handlers: a handler's copy
/// wakes the faulting thread before it publishes the chunk, and
/// `Region::resident_bytes` (which counts chunk states; an owned chunk
/// counts nothing) must wait for that publication.
#[test]
fn figures_include_every_fault_that_returned() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    let chunks = r.len() / uz.chunk_bytes();
    const THREADS: usize = 4;
    for round in 0..40 {
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let r = &r;
                s.spawn(move || {
                    let mine = (t..chunks).step_by(THREADS);
                    for (k, ci) in mine.enumerate() {
                        let i = ci * PER + (round + t) % PER;
                        read(r, i);
                        let seen = r.resident_bytes();
                        assert!(
                            seen >= ((k + 1) * PAGE_SIZE) as u64,
                            "round {round}: thread {t} faulted {} pages in, the region shows {seen} bytes",
                            k + 1
                        );
                        check(r, i);
                    }
                });
            }
        });
        r.advise(0..r.len(), Advice::PageOut).unwrap();
        assert_eq!(r.resident_bytes(), 0, "{:?}", uz.stats());
    }
    no_errors(&uz);
}

#[test]
fn a_backward_scan_takes_the_chunk_whole_as_a_forward_one_does() {
    let Some((uz, r)) = stored_region(cfg()) else {
        return;
    };
    let chunk = uz.chunk_bytes() as u64;
    // A random read on chunk 3's last page comes in alone: the chunk
    // after it is not mapped, so no scan enters there.
    check(&r, 4 * PER - 1);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (1, 0), "{st:?}");
    // The page before it, right after that fault, comes in alone; the
    // next one down is a scan walking down, and takes the rest of the
    // chunk.
    check(&r, 4 * PER - 2);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (2, 0), "{st:?}");
    check(&r, 4 * PER - 3);
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (2, 1), "{st:?}");
    assert_eq!(st.resident_bytes, chunk);
    // Walking on down, the last page of chunk 2 (the chunk after it mapped
    // from its start, and faulted lately) enters chunk 2 whole.
    for i in (2 * PER..4 * PER).rev() {
        check(&r, i);
    }
    let st = uz.stats();
    assert_eq!((st.faults_partial, st.partial_filled), (2, 1), "{st:?}");
    assert_eq!(st.resident_bytes, 2 * chunk, "{st:?}");
    assert_eq!(
        st.pgmajfault, 4,
        "three faults for the first chunk walked, one for the next: {st:?}"
    );

    // A page below a mapped one that faulted long ago is chance, not a
    // scan: it comes in alone.
    let others = (4..9).chain(10..16).map(|c| c * PER + 3);
    check(&r, 9 * PER + 9);
    comes_in_alone_after(&uz, &r, 9 * PER + 8, others, 9 * PER + 7);
    // Nor does a last page whose chunk after took none of the last faults.
    // Chunk 2 came in many faults ago; chunk 1's last page comes in alone.
    let before = uz.stats();
    check(&r, 2 * PER - 1);
    let st = uz.stats();
    assert_eq!(st.faults_partial, before.faults_partial + 1, "{st:?}");
    assert_eq!(st.resident_bytes, before.resident_bytes + PAGE_SIZE as u64);
    for i in 0..r.len() / PAGE_SIZE {
        check(&r, i);
    }
    assert_eq!(uz.stats().fault_errors, 0);
}
