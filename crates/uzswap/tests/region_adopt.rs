//! `Uzswap::adopt_mapping` (`adopt`'s core): a region over memory the process already maps (what a
//! forked child inherited from its parent). The pages there keep their
//! bytes and are charged to nobody; a discard drops them (whole chunks and
//! a page inside one) so they read zeros; a pin over them returns; pages
//! the memory never had are zero-filled and charged around the ones it
//! has; and memory written afresh is evicted under the budget and reads
//! back intact.

use uzswap::region::Config;
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{instance, page};

const CHUNK: usize = 64 << 10;

#[test]
fn adopted_memory_keeps_its_bytes_uncharged_and_the_rest_is_under_the_budget() {
    let Some(uz) = instance(Config {
        budget: 8 << 20,
        folio_order: 4,
        defer_register: false,
        ..Config::default()
    }) else {
        return;
    };
    let len = 64 << 20;
    // SAFETY: a fresh private anonymous mapping, over-mapped by a chunk so
    // that it can start chunk-aligned.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + CHUNK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(raw, libc::MAP_FAILED);
    let base = (raw as usize).next_multiple_of(CHUNK);
    let pg = |i: usize| {
        // SAFETY: page `i` of the mapping, which lives for the whole test.
        unsafe { std::slice::from_raw_parts_mut((base + i * PAGE_SIZE) as *mut u8, PAGE_SIZE) }
    };
    // The "inherited" part: the first 16 MiB, with one page in each chunk
    // of the next MiB left out.
    let per = CHUNK / PAGE_SIZE;
    let inherited = (16 << 20) / PAGE_SIZE;
    let holey = inherited + (1 << 20) / PAGE_SIZE;
    let had = |i: usize| i < inherited || (i < holey && i % per != 3);
    for i in (0..holey).filter(|&i| had(i)) {
        Pattern::Index.fill(i as u64, 1, pg(i));
    }
    let r = uz.adopt_mapping(base, len).unwrap();
    assert!(
        uz.adopt_mapping(base + CHUNK, CHUNK).is_err(),
        "adopted twice"
    );
    assert_eq!(uz.stats().resident_bytes, 0, "inherited pages charged");
    for i in (0..holey).filter(|&i| had(i)) {
        assert!(Pattern::Index.verify(i as u64, 1, pg(i)), "page {i}");
    }
    // A pin over inherited pages returns, and keeps them.
    drop(uz.pin(base, 4 * CHUNK, true));
    // Dropped: chunk 2 whole, and page 5 of chunk 4.
    uz.discard(base + 2 * CHUNK, CHUNK).unwrap();
    uz.discard(base + 4 * CHUNK + 5 * PAGE_SIZE, PAGE_SIZE)
        .unwrap();
    let dropped = |i: usize| i / per == 2 || i == 4 * per + 5;
    for i in 0..8 * per {
        if dropped(i) {
            assert!(pg(i).iter().all(|&b| b == 0), "dropped page {i} not zeros");
        } else {
            assert!(Pattern::Index.verify(i as u64, 1, pg(i)), "page {i} lost");
        }
    }
    // The holes read zeros, their chunks' other pages kept.
    for i in inherited..holey {
        if had(i) {
            assert!(Pattern::Index.verify(i as u64, 1, pg(i)), "page {i}");
        } else {
            assert!(pg(i).iter().all(|&b| b == 0), "hole {i} not zeros");
        }
    }
    // Fresh memory past the inherited part: 40 MiB under an 8 MiB budget.
    let fresh = holey..len / PAGE_SIZE - (8 << 20) / PAGE_SIZE;
    for i in fresh.clone() {
        Pattern::Text.fill(i as u64, 2, page(&r, i));
    }
    let s = uz.stats();
    assert!(s.evicted_chunks > 0 && s.peak_bytes <= 8 << 20, "{s:?}");
    for i in fresh {
        assert!(Pattern::Text.verify(i as u64, 2, page(&r, i)), "page {i}");
    }
    for i in (0..holey).filter(|&i| had(i) && !dropped(i)) {
        assert!(Pattern::Index.verify(i as u64, 1, pg(i)), "page {i}");
    }
    assert_eq!(uz.stats().fault_errors, 0);
    drop(r);
    // The region's drop unmapped what it adopted; the over-mapped ends are
    // ours to give back.
    // SAFETY: the parts of our mapping outside the adopted range.
    unsafe {
        if base > raw as usize {
            libc::munmap(raw, base - raw as usize);
        }
        let end = raw as usize + len + CHUNK;
        if end > base + len {
            libc::munmap((base + len) as *mut _, end - base - len);
        }
    }
}

/// Threads working on their own blocks of an adopted region at once, under
/// a budget that keeps the evictor busy: each drops its block (whole, and
/// a page range inside it, one `MADV_DONTNEED` run over inherited chunks),
/// checks it reads zeros there and the rest unchanged, writes it afresh and
/// checks it back. Inherited, zero-filled, evicted and discarded chunks
/// meet the discard's runs, faults and the evictor side by side.
#[test]
fn discards_faults_and_eviction_side_by_side_keep_every_byte() {
    let Some(uz) = instance(Config {
        budget: 4 << 20,
        folio_order: 4,
        defer_register: false,
        ..Config::default()
    }) else {
        return;
    };
    let (threads, block) = (4usize, 8 * CHUNK);
    let len = threads * 4 * block;
    // SAFETY: as in the test above.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + CHUNK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(raw, libc::MAP_FAILED);
    let base = (raw as usize).next_multiple_of(CHUNK);
    let pages = len / PAGE_SIZE;
    let pg = |i: usize| {
        // SAFETY: page `i` of the mapping, live for the whole test.
        unsafe { std::slice::from_raw_parts_mut((base + i * PAGE_SIZE) as *mut u8, PAGE_SIZE) }
    };
    // Every other page "inherited": chunks with holes in them.
    for i in (0..pages).step_by(2) {
        Pattern::Index.fill(i as u64, 1, pg(i));
    }
    let r = uz.adopt_mapping(base, len).unwrap();
    let per_block = block / PAGE_SIZE;
    std::thread::scope(|s| {
        for t in 0..threads {
            let uz = &uz;
            s.spawn(move || {
                // Thread t owns blocks t, t + threads, ...
                let mine: Vec<usize> = (t..len / block).step_by(threads).collect();
                // What each of its pages holds: None = zeros, Some(seed).
                let mut want: Vec<Option<u64>> =
                    (0..pages).map(|i| (i % 2 == 0).then_some(1)).collect();
                let check = |want: &[Option<u64>], b: usize| {
                    let pages = b * per_block..(b + 1) * per_block;
                    for (i, w) in pages.clone().zip(&want[pages]) {
                        let ok = match *w {
                            None => pg(i).iter().all(|&x| x == 0),
                            Some(seed) => Pattern::Index.verify(i as u64, seed, pg(i)),
                        };
                        assert!(ok, "thread {t}: page {i} (want {w:?})");
                    }
                };
                for round in 0..6u64 {
                    for &b in &mine {
                        let first = b * per_block;
                        // Drop the whole block, or pages 3..3+per_block/2.
                        let (s0, n) = if round % 2 == 0 {
                            (first, per_block)
                        } else {
                            (first + 3, per_block / 2)
                        };
                        uz.discard(base + s0 * PAGE_SIZE, n * PAGE_SIZE).unwrap();
                        for w in &mut want[s0..s0 + n] {
                            *w = None;
                        }
                        check(&want, b);
                        // Write a third of it afresh.
                        for i in (first..first + per_block).step_by(3) {
                            let seed = 10 + round;
                            Pattern::Index.fill(i as u64, seed, pg(i));
                            want[i] = Some(seed);
                        }
                        check(&want, b);
                    }
                }
                for &b in &mine {
                    check(&want, b);
                }
            });
        }
    });
    let st = uz.stats();
    assert_eq!(st.fault_errors, 0);
    assert!(st.evicted_chunks > 0, "nothing evicted: {st:?}");
    drop(r);
    // SAFETY: the parts of our mapping outside the adopted range.
    unsafe {
        if base > raw as usize {
            libc::munmap(raw, base - raw as usize);
        }
        let end = raw as usize + len + CHUNK;
        if end > base + len {
            libc::munmap((base + len) as *mut _, end - base - len);
        }
    }
}
