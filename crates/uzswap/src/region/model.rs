//! A model of the chunk state machine (see the diagram in `region`'s top
//! comment), checked by a seeded interleaving harness.
//!
//! loom would have to run the real fault and eviction paths, which are made
//! of userfaultfd ioctls, the cache and the budget: far too large a state
//! space for it. So the harness models one chunk of four one-page groups:
//! the chunk word is a real `AtomicU32` driven by the real transitions of
//! `chunk.rs` (`own`, `take_for_evict`, `release`, `park`, the PART bits and
//! mask helpers) and by the real protocol decisions (`chunk::must_protect`),
//! while the page tables (mapped, write-protected, value), the cache's
//! copies and the program's view are plain data. Actors take one step at a
//! time in an order drawn from a seed:
//!
//! - two program threads each do a dozen reads and writes of random pages;
//!   an access to a page that is not mapped, or a write to a protected one,
//!   is a fault, resolved in the steps the fault handler takes (read the
//!   word and decide; own the chunk with its CAS; install or unprotect;
//!   release, waking parked threads): a group at a time (PARTIAL), or the
//!   whole chunk (a scan: CLEAN or RESIDENT); a fault on an owned chunk
//!   parks on it;
//! - an evictor takes the chunk when it is evictable (RESIDENT, CLEAN,
//!   PARTIAL) and evicts it as `evict.rs` does: write-protect if
//!   `must_protect`, then page by page claim the clean copy or store the
//!   page, then zap and release to STORED; or, half the time where a
//!   partial chunk maps two groups or more, trims it (`evict::trim`): one
//!   group stays mapped, the others (the span between them protected
//!   first, a kept group inside it too) are stored and zapped, and the
//!   chunk goes back PARTIAL with that group;
//! - a dropper drops mapped pages as a program's own `madvise` system call
//!   does, behind uzswap's back (`docs/ARCHITECTURE.md`, "Pages a program
//!   drops behind uzswap's back"): a page so dropped then reads as zeros,
//!   or as it was where uzswap kept a copy of it. A fault on one is
//!   refilled with zeros by its resolver; the evictor's read of one in its
//!   victim faults too, and the handler actor fills it without owning the
//!   chunk (`chunk::begin_fill`), which the evictor's zap must wait out
//!   (`chunk::try_begin_zap`); or the evictor, looking first (half its
//!   evictions: `Config::foreign_drops`), fills it itself;
//! - another eviction's write-protect call spans the chunk as one lying
//!   between its victims (`evict::protect_ahead`): where the word is
//!   `chunk::spannable` it holds the chunk with `chunk::hold` (the CAS of
//!   the word it read), protects every mapped page, and gives it back in
//!   the state it had.
//!
//! Checked at every step: every read returns the last value written to the
//! page; at most one actor owns the chunk; a chunk not owned satisfies its
//! state's invariant (RESIDENT: all mapped, writable; CLEAN: all mapped,
//! protected, no copy kept; PARTIAL(m): the groups of m mapped, each
//! protected with an equal copy or none, or writable with no copy only
//! under DIRTY, every other page unmapped with its copy; STORED: nothing
//! mapped, every page's copy there). At the end no actor is left parked
//! (a lost wake-up) and every page reads its last value.
//!
//! Known-bad changes it catches (docs/ARCHITECTURE.md, "The chunk state
//! model"): `must_protect` false for a DIRTY partial chunk (a write between
//! the store and the zap is lost); `own` without its compare-and-swap (two
//! owners, or a resolver installing into a chunk being evicted);
//! `spannable` true for a RESIDENT chunk (its pages protected behind a
//! state that says writable); a trim that does not protect a DIRTY
//! chunk's going groups (a write between store and zap lost, seed 33); a
//! zap that does not wait for a fill in progress, or a fill that does not
//! look for ZAPPING (a zero page mapped in a STORED chunk).
//!
//! Locking: none; the harness is single-threaded and interleaves by hand.

use super::chunk::{self, *};
use std::sync::atomic::{AtomicU32, Ordering::*};

/// Pages of the modelled chunk (one per group: `group_pages(4) == 1`).
const P: usize = 4;
const OPS: usize = 12;
const EVICTIONS: usize = 6;
const DROPS: usize = 4;
const MAX_STEPS: usize = 5000;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Pte {
    val: u64,
    wp: bool,
}

/// Where an actor is in its protocol.
#[derive(Clone, Debug)]
enum Step {
    /// A program thread about to make its next access.
    Access,
    /// Faulted on `page`: read the word and decide (the next step owns).
    Fault {
        page: usize,
        write: bool,
        scan: bool,
    },
    /// Decided from the word `st`; take the chunk with the CAS.
    Own {
        page: usize,
        write: bool,
        scan: bool,
        st: u32,
        wp: bool,
    },
    /// Owned (previous word `prev`): do the work.
    Resolve {
        page: usize,
        write: bool,
        scan: bool,
        prev: u32,
        wp: bool,
    },
    /// Parked on the owned chunk until woken.
    Parked,
    /// A missing fault on `page`, dropped, of an EVICTING chunk not yet
    /// ZAPPING: claim the fill (`chunk::begin_fill`). `handler`: the
    /// handler actor serving the evictor's fault, else a program thread.
    FillBegin {
        page: usize,
        handler: bool,
    },
    /// Claimed: map a zero page, protected.
    FillCopy {
        page: usize,
        handler: bool,
    },
    /// Filled: clear FILLING.
    FillEnd {
        handler: bool,
    },
    /// The dropper's next drop.
    Drop,
    /// The handler actor: serve the evictor's fault, if it took one.
    Serve,
    /// The evictor, faulted on dropped page `next` of its victim, waits
    /// for the page to be mapped.
    StoreWait {
        prev: u32,
        keep: u16,
        next: usize,
    },
    /// The evictor looking for its next victim.
    Pick,
    /// The evictor owns the chunk taken with `prev`: protect if needed.
    /// `keep`: a trim's group that stays mapped (`evict::trim`), or 0.
    Protect {
        prev: u32,
        keep: u16,
    },
    /// Store or claim the copy of the mapped page `next` (and the rest).
    Store {
        prev: u32,
        keep: u16,
        next: usize,
    },
    /// Stored: mark the chunk ZAPPING, once no fill is in progress
    /// (`chunk::try_begin_zap`; the zap itself comes later, gathered).
    ZapBegin {
        keep: u16,
    },
    /// Zap and release to STORED, or a trim's to PARTIAL with its group.
    Zap {
        keep: u16,
    },
    /// Another eviction's write-protect call about to span the chunk as
    /// one between its victims (`evict::protect_ahead`): read the word.
    SpanLook,
    /// Read `w`, spannable: hold the chunk with the CAS of that word.
    SpanHold {
        w: u32,
    },
    /// Held: the call protects every mapped page, then gives it back.
    SpanProtect {
        w: u32,
    },
    Done,
}

struct Actor {
    step: Step,
    /// A program thread's accesses: (page, write, scan).
    ops: Vec<(usize, bool, bool)>,
    done_ops: usize,
    evictions: usize,
    tries: usize,
}

impl Actor {
    /// An evicting actor's turn: whether it is done (its evictions made,
    /// or too many looks at a chunk it could not take).
    fn spent(&mut self) -> bool {
        self.tries += 1;
        self.evictions == EVICTIONS || self.tries > 200
    }
}

struct World {
    word: AtomicU32,
    mem: [Option<Pte>; P],
    cache: [Option<u64>; P],
    truth: [u64; P],
    /// What a dropped page may also read as until it is written: its
    /// value before the drop, where uzswap kept a copy of it.
    alt: [Option<u64>; P],
    /// Pages dropped and not mapped since: their state's mask may say
    /// mapped.
    dropped: [bool; P],
    /// The page of its victim the evictor faulted on, for the handler.
    evictor_fault: Option<usize>,
    owner: Option<usize>,
    next_val: u64,
    trace: Vec<String>,
    /// Transitions taken, by name (the test asserts each was reached).
    cov: std::collections::BTreeMap<&'static str, u64>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn owned(w: u32) -> bool {
    matches!(state(w), BUSY | EVICTING)
}

/// Whether word `w` (mapped, or EVICTING from a mapped state) says page
/// `p` is mapped: every page, or a partial chunk's mask.
fn mapped_in(w: u32, p: usize) -> bool {
    part_mask(w).is_none_or(|m| m & group_bit(p, P) != 0)
}

/// The evictor's index among the actors (after the two program threads).
const EVICTOR: usize = 2;

impl World {
    fn hit(&mut self, what: &'static str) {
        *self.cov.entry(what).or_default() += 1;
    }

    fn fail(&self, why: String) -> String {
        let n = self.trace.len();
        let tail = self.trace[n.saturating_sub(40)..].join("\n  ");
        format!(
            "{why}\n  word {:#x}, mem {:?}, cache {:?}, truth {:?}\n  last steps:\n  {tail}",
            self.word.load(Relaxed),
            self.mem,
            self.cache,
            self.truth
        )
    }

    /// The invariant of the chunk's state, when no one owns it.
    fn check_state(&mut self) -> Result<(), String> {
        for p in 0..P {
            if self.mem[p].is_some() {
                self.dropped[p] = false;
            }
        }
        let w = self.word.load(Acquire);
        if owned(w) {
            return Ok(());
        }
        let copy_ok =
            |p: usize| self.cache[p].is_none_or(|c| Some(c) == self.mem[p].map(|m| m.val));
        let bad = |what: &str| Err(self.fail(format!("{what} (word {w:#x})")));
        match state(w) {
            RESIDENT => {
                if (0..P).any(|p| self.mem[p].map_or(!self.dropped[p], |m| m.wp)) {
                    return bad("RESIDENT with a page unmapped or protected");
                }
            }
            CLEAN => {
                for p in 0..P {
                    if self.mem[p].map_or(!self.dropped[p], |m| !m.wp) || self.cache[p].is_some() {
                        return bad(
                            "CLEAN without every page mapped and protected, or with a copy",
                        );
                    }
                }
            }
            PARTIAL => {
                let Some(m) = part_mask(w) else {
                    return bad("PARTIAL without its mask");
                };
                if w & KEPT != 0 && (m != full_mask(P) || w & DIRTY != 0) {
                    return bad("KEPT without every group mapped, or DIRTY");
                }
                for p in 0..P {
                    let mapped = m & group_bit(p, P) != 0;
                    match self.mem[p] {
                        Some(_) if !mapped => {
                            return bad("PARTIAL: a page mapped outside the mask")
                        }
                        None if mapped && !self.dropped[p] => {
                            return bad("PARTIAL: a page of the mask not mapped")
                        }
                        None if mapped => {}
                        None if self.cache[p].is_none() => {
                            return bad("PARTIAL: an unmapped page lost")
                        }
                        Some(pte) if pte.wp && !copy_ok(p) => {
                            return bad("PARTIAL: a protected page's copy differs")
                        }
                        Some(pte) if !pte.wp && (w & DIRTY == 0 || self.cache[p].is_some()) => {
                            return bad("PARTIAL: a writable page without DIRTY, or with a copy")
                        }
                        _ => {}
                    }
                }
            }
            STORED => {
                if self.mem.iter().any(Option::is_some) || self.cache.iter().any(Option::is_none) {
                    return bad("STORED with a page mapped or a copy missing");
                }
            }
            s => return bad(&format!("unexpected state {s}")),
        }
        Ok(())
    }

    fn take_ownership(&mut self, who: usize) -> Result<(), String> {
        if let Some(o) = self.owner {
            return Err(self.fail(format!("actor {who} owns the chunk actor {o} owns")));
        }
        self.owner = Some(who);
        Ok(())
    }

    /// Leave the owned state for `to`; wake the parked if a waiter was marked.
    fn release(&mut self, who: usize, to: u32, clear: u32, set: u32, actors: &mut [Actor]) {
        if self.owner == Some(who) {
            self.owner = None;
        }
        if chunk::release(&self.word, to, clear, set) {
            self.hit("woke parked threads");
            for a in actors.iter_mut() {
                if matches!(a.step, Step::Parked) {
                    a.step = Step::Access;
                }
            }
        }
    }
}

/// One actor's step. `Err` is a violation.
fn step(i: usize, w: &mut World, actors: &mut [Actor], rng: &mut Rng) -> Result<(), String> {
    let cur = actors[i].step.clone();
    w.trace.push(format!(
        "actor {i}: {cur:?} word {:#x}",
        w.word.load(Relaxed)
    ));
    let next = match cur {
        Step::Access => {
            let a = &actors[i];
            if a.done_ops == a.ops.len() {
                Step::Done
            } else {
                let (page, write, scan) = a.ops[a.done_ops];
                match w.mem[page] {
                    Some(pte) if !write => {
                        if pte.val != w.truth[page] && Some(pte.val) != w.alt[page] {
                            return Err(w.fail(format!(
                                "actor {i} read {} from page {page}, last written {}",
                                pte.val, w.truth[page]
                            )));
                        }
                        actors[i].done_ops += 1;
                        Step::Access
                    }
                    Some(pte) if !pte.wp => {
                        w.next_val += 1;
                        let v = w.next_val;
                        w.mem[page] = Some(Pte { val: v, wp: false });
                        w.truth[page] = v;
                        w.alt[page] = None;
                        actors[i].done_ops += 1;
                        Step::Access
                    }
                    _ => Step::Fault { page, write, scan },
                }
            }
        }
        Step::Fault { page, write, scan } => {
            let word = w.word.load(Acquire);
            let st = state(word);
            let wp = w.mem[page].is_some();
            if st == EVICTING && !wp && word & ZAPPING == 0 && mapped_in(word, page) {
                Step::FillBegin {
                    page,
                    handler: false,
                }
            } else if owned(word) {
                match chunk::park(&w.word) {
                    Ok(()) => {
                        w.hit("parked on an owned chunk");
                        Step::Parked
                    }
                    Err(_) => Step::Access,
                }
            } else {
                match (st, wp) {
                    (STORED, false) | (PARTIAL, _) | (CLEAN, _) | (RESIDENT, false) => Step::Own {
                        page,
                        write,
                        scan,
                        st,
                        wp,
                    },
                    // Resolved meanwhile: retry the access.
                    _ => Step::Access,
                }
            }
        }
        Step::Own {
            page,
            write,
            scan,
            st,
            wp,
        } => match chunk::own(&w.word, st) {
            Ok(prev) => {
                w.take_ownership(i)?;
                Step::Resolve {
                    page,
                    write,
                    scan,
                    prev,
                    wp,
                }
            }
            Err(_) => {
                w.hit("lost the CAS to another thread");
                Step::Access
            }
        },
        Step::Resolve {
            page,
            write,
            scan,
            prev,
            wp,
        } => {
            let bit = group_bit(page, P);
            let mask = part_mask(prev).unwrap_or(0);
            let dropped_here = !wp && w.mem[page].is_none();
            match state(prev) {
                RESIDENT | CLEAN | PARTIAL
                    if dropped_here && (state(prev) != PARTIAL || mask & bit != 0) =>
                {
                    // A page the word says is mapped, dropped behind our
                    // back: a zero page, protected where the chunk's pages
                    // are, its copy dropped (`fault::refill_dropped`).
                    w.hit("refilled a dropped page");
                    w.mem[page] = Some(Pte {
                        val: 0,
                        wp: state(prev) != RESIDENT,
                    });
                    w.cache[page] = None;
                    w.release(i, state(prev), 0, 0, actors);
                }
                RESIDENT => {
                    // Mapped since the fault: stale.
                    w.hit("stale fault");
                    w.release(i, RESIDENT, 0, 0, actors);
                }
                CLEAN if !wp => {
                    w.hit("stale fault");
                    w.release(i, CLEAN, 0, 0, actors);
                }
                CLEAN => {
                    // The first write to a clean chunk, which keeps no
                    // copies: only its protection goes.
                    w.hit("CLEAN -> RESIDENT (write-protect fault)");
                    for p in 0..P {
                        if let Some(m) = w.mem[p].as_mut() {
                            m.wp = false;
                        }
                    }
                    w.release(i, RESIDENT, 0, REF, actors);
                }
                PARTIAL if wp && prev & KEPT != 0 => {
                    // A write to a kept chunk: every copy goes, the whole
                    // chunk is unprotected (`fault::unprotect_kept`).
                    w.hit("PARTIAL+KEPT -> RESIDENT (write-protect fault)");
                    w.cache = [None; P];
                    for m in w.mem.iter_mut().flatten() {
                        m.wp = false;
                    }
                    w.release(i, RESIDENT, PART_BITS, REF, actors);
                }
                PARTIAL if wp && mask & bit != 0 => {
                    // A write to a mapped group: drop its copy, unprotect.
                    w.hit("PARTIAL -> PARTIAL+DIRTY (write-protect fault)");
                    w.cache[page] = None;
                    if let Some(m) = w.mem[page].as_mut() {
                        m.wp = false;
                    }
                    w.release(i, PARTIAL, 0, REF | DIRTY, actors);
                }
                PARTIAL if (mask & bit != 0) != wp => {
                    // Stale: mapped now, or no longer mapped.
                    w.hit("stale fault");
                    w.release(i, PARTIAL, 0, 0, actors);
                }
                STORED | PARTIAL
                    if scan
                        && !write
                        && prev & DIRTY == 0
                        && w.cache.iter().all(Option::is_some)
                        && rng.below(2) == 0 =>
                {
                    // A read of the whole chunk with every page written
                    // back: the copies stay (`fault::install`, `fill`).
                    for p in 0..P {
                        // A page of the mask not mapped was dropped: it
                        // stays so, for its own fault to refill.
                        if w.mem[p].is_none() && mask & group_bit(p, P) == 0 {
                            let v = w.cache[p].expect("checked above");
                            w.mem[p] = Some(Pte { val: v, wp: true });
                        }
                    }
                    w.hit(if state(prev) == STORED {
                        "STORED -> PARTIAL+KEPT (scan read, written back)"
                    } else {
                        "PARTIAL -> PARTIAL+KEPT (scan read, written back)"
                    });
                    w.release(i, PARTIAL, 0, part_bits(full_mask(P)) | KEPT | REF, actors);
                }
                STORED | PARTIAL if scan => {
                    // The whole chunk: writable if written or DIRTY.
                    let writable = write || prev & DIRTY != 0;
                    for p in 0..P {
                        if w.mem[p].is_none() && mask & group_bit(p, P) == 0 {
                            let v = w.cache[p].expect("an unmapped page's copy");
                            w.mem[p] = Some(Pte { val: v, wp: true });
                        }
                    }
                    // Loaded exclusively: no copy stays, written or not
                    // (`keep.rs`).
                    w.cache = [None; P];
                    if writable {
                        for m in w.mem.iter_mut().flatten() {
                            m.wp = false;
                        }
                        w.hit(if state(prev) == STORED {
                            "STORED -> RESIDENT"
                        } else {
                            "PARTIAL -> RESIDENT"
                        });
                        w.release(i, RESIDENT, PART_BITS, REF, actors);
                    } else {
                        w.hit(if state(prev) == STORED {
                            "STORED -> CLEAN"
                        } else {
                            "PARTIAL -> CLEAN"
                        });
                        w.release(i, CLEAN, PART_BITS, REF, actors);
                    }
                }
                STORED | PARTIAL => {
                    // One group: a read's protected with its copy kept, a
                    // write's writable with its copy taken.
                    let v = w.cache[page].expect("an unmapped page's copy");
                    w.mem[page] = Some(Pte { val: v, wp: !write });
                    let mut set = part_bits(mask | bit) | REF;
                    if write {
                        w.cache[page] = None;
                        set |= DIRTY;
                    }
                    w.hit(match (state(prev), write) {
                        (STORED, false) => "STORED -> PARTIAL (read)",
                        (STORED, true) => "STORED -> PARTIAL+DIRTY (write)",
                        (_, false) => "PARTIAL -> PARTIAL (another group, read)",
                        (_, true) => "PARTIAL -> PARTIAL+DIRTY (another group, write)",
                    });
                    w.release(i, PARTIAL, 0, set, actors);
                }
                s => return Err(w.fail(format!("resolver owns a chunk taken from state {s}"))),
            }
            Step::Access
        }
        Step::Parked => Step::Parked,
        Step::Pick => {
            if actors[i].spent() {
                Step::Done
            } else {
                let word = w.word.load(Acquire);
                let st = state(word);
                if matches!(st, RESIDENT | CLEAN | PARTIAL) && rng.below(3) == 0 {
                    match take_for_evict(&w.word, st) {
                        Ok(prev) => {
                            w.take_ownership(i)?;
                            w.hit(match state(prev) {
                                RESIDENT => "RESIDENT -> EVICTING",
                                CLEAN => "CLEAN -> EVICTING",
                                _ if prev & DIRTY != 0 => "PARTIAL+DIRTY -> EVICTING",
                                _ => "PARTIAL -> EVICTING",
                            });
                            actors[i].evictions += 1;
                            // A trim, half the time where there is one to
                            // make: one mapped group stays.
                            let mask = part_mask(prev).unwrap_or(0);
                            let keep = if prev & KEPT == 0
                                && mask.count_ones() >= 2
                                && rng.below(2) == 0
                            {
                                let mapped: Vec<usize> =
                                    (0..P).filter(|&g| mask & (1 << g) != 0).collect();
                                1 << mapped[rng.below(mapped.len())]
                            } else {
                                0
                            };
                            Step::Protect { prev, keep }
                        }
                        Err(_) => Step::Pick,
                    }
                } else {
                    Step::Pick
                }
            }
        }
        Step::Protect { prev, keep } => {
            if rng.below(2) == 0 {
                // Drops expected (`evict::fill_dropped`): what the word
                // says is mapped and is not gets a zero page, protected.
                for p in 0..P {
                    if keep & (1 << p) == 0 && mapped_in(prev, p) && w.mem[p].is_none() {
                        w.hit("evictor filled a dropped page");
                        w.mem[p] = Some(Pte { val: 0, wp: true });
                    }
                }
            }
            if chunk::must_protect(prev) {
                // A trim's call spans its groups' first to last, a kept
                // group between them with them (`evict::mapped_span`).
                let going = |g: usize| keep & (1 << g) == 0;
                let first = (0..P).find(|&g| going(g) && w.mem[g].is_some());
                let last = (0..P).rev().find(|&g| going(g) && w.mem[g].is_some());
                if let (Some(a), Some(b)) = (first, last) {
                    for m in w.mem[a..=b].iter_mut().flatten() {
                        m.wp = true;
                    }
                }
            }
            Step::Store {
                prev,
                keep,
                next: 0,
            }
        }
        Step::Store { prev, keep, next } => {
            if next == P {
                Step::ZapBegin { keep }
            } else {
                if keep & (1 << next) != 0 {
                    // Stays mapped, its copy as it is.
                } else if w.mem[next].is_none() && mapped_in(prev, next) {
                    // Dropped: the read faults.
                    w.hit("evictor faulted on a dropped page");
                    w.evictor_fault = Some(next);
                    actors[i].step = Step::StoreWait { prev, keep, next };
                    return w.check_state();
                } else if let Some(m) = w.mem[next] {
                    // Claim the clean copy, or store the page as it is now.
                    if w.cache[next].is_none() {
                        w.cache[next] = Some(m.val);
                    }
                }
                Step::Store {
                    prev,
                    keep,
                    next: next + 1,
                }
            }
        }
        Step::ZapBegin { keep } => {
            if chunk::try_begin_zap(&w.word) {
                Step::Zap { keep }
            } else {
                w.hit("zap waited for a fill");
                Step::ZapBegin { keep }
            }
        }
        Step::Zap { keep } if keep != 0 => {
            w.hit("EVICTING -> PARTIAL (trimmed)");
            for g in (0..P).filter(|&g| keep & (1 << g) == 0) {
                w.mem[g] = None;
            }
            w.release(i, PARTIAL, REF | MASK_BITS, part_bits(keep), actors);
            Step::Pick
        }
        Step::Zap { .. } => {
            w.hit("EVICTING -> STORED");
            w.mem = [None; P];
            w.release(i, STORED, REF | ACTIVE | REJECTED | PART_BITS, 0, actors);
            Step::Pick
        }
        Step::SpanLook => {
            if actors[i].spent() {
                Step::Done
            } else {
                let word = w.word.load(Acquire);
                if chunk::spannable(word) && rng.below(3) == 0 {
                    Step::SpanHold { w: word }
                } else {
                    Step::SpanLook
                }
            }
        }
        Step::SpanHold { w: word } => {
            if chunk::hold(&w.word, word) {
                w.take_ownership(i)?;
                w.hit("held for a write-protect call spanning it");
                actors[i].evictions += 1;
                Step::SpanProtect { w: word }
            } else {
                w.hit("lost the CAS to another thread");
                Step::SpanLook
            }
        }
        Step::SpanProtect { w: word } => {
            for m in w.mem.iter_mut().flatten() {
                m.wp = true;
            }
            w.release(i, state(word), 0, 0, actors);
            Step::SpanLook
        }
        Step::StoreWait { prev, keep, next } => {
            if w.mem[next].is_some() {
                w.evictor_fault = None;
                Step::Store { prev, keep, next }
            } else {
                Step::StoreWait { prev, keep, next }
            }
        }
        Step::FillBegin { page, handler } => match chunk::begin_fill(&w.word) {
            Ok(_) => Step::FillCopy { page, handler },
            // ZAPPING, another fill, or no longer EVICTING: look again.
            Err(_) if handler => Step::Serve,
            Err(_) => Step::Fault {
                page,
                write: false,
                scan: false,
            },
        },
        Step::FillCopy { page, handler } => {
            if w.mem[page].is_none() {
                w.hit("filled a dropped page of a victim");
                w.mem[page] = Some(Pte { val: 0, wp: true });
            }
            Step::FillEnd { handler }
        }
        Step::FillEnd { handler } => {
            chunk::end_fill(&w.word);
            if handler {
                Step::Serve
            } else {
                Step::Access
            }
        }
        Step::Drop => {
            if actors[i].done_ops == DROPS {
                Step::Done
            } else {
                let p = rng.below(P);
                if let Some(m) = w.mem[p] {
                    w.hit("dropped a mapped page");
                    w.mem[p] = None;
                    w.dropped[p] = true;
                    w.alt[p] = Some(m.val);
                    w.truth[p] = 0;
                }
                actors[i].done_ops += 1;
                Step::Drop
            }
        }
        Step::Serve => {
            let word = w.word.load(Acquire);
            match w.evictor_fault {
                Some(p)
                    if state(word) == EVICTING
                        && word & ZAPPING == 0
                        && w.mem[p].is_none()
                        && mapped_in(word, p) =>
                {
                    Step::FillBegin {
                        page: p,
                        handler: true,
                    }
                }
                None if matches!(actors[EVICTOR].step, Step::Done) => Step::Done,
                _ => Step::Serve,
            }
        }
        Step::Done => Step::Done,
    };
    actors[i].step = next;
    w.check_state()
}

/// One seeded run: the steps and transitions taken, or the violation with
/// its trace.
fn run(seed: u64) -> Result<(usize, std::collections::BTreeMap<&'static str, u64>), String> {
    let mut rng = Rng(seed);
    let mut w = World {
        word: AtomicU32::new(STORED),
        mem: [None; P],
        cache: [Some(0); P],
        truth: [0; P],
        alt: [None; P],
        dropped: [false; P],
        evictor_fault: None,
        owner: None,
        next_val: 0,
        trace: Vec::new(),
        cov: Default::default(),
    };
    let mut actors: Vec<Actor> = (0..2)
        .map(|_| Actor {
            step: Step::Access,
            ops: (0..OPS)
                .map(|_| (rng.below(P), rng.below(2) == 0, rng.below(4) == 0))
                .collect(),
            done_ops: 0,
            evictions: 0,
            tries: 0,
        })
        .collect();
    for step in [Step::Pick, Step::SpanLook, Step::Drop, Step::Serve] {
        actors.push(Actor {
            step,
            ops: Vec::new(),
            done_ops: 0,
            evictions: 0,
            tries: 0,
        });
    }
    let mut steps = 0;
    loop {
        let live: Vec<usize> = (0..actors.len())
            .filter(|&i| !matches!(actors[i].step, Step::Done | Step::Parked))
            .collect();
        if live.is_empty() {
            break;
        }
        steps += 1;
        if steps > MAX_STEPS {
            return Err(w.fail(format!("seed {seed}: no progress in {MAX_STEPS} steps")));
        }
        let i = live[rng.below(live.len())];
        step(i, &mut w, &mut actors, &mut rng).map_err(|e| format!("seed {seed}: {e}"))?;
    }
    if actors.iter().any(|a| matches!(a.step, Step::Parked)) {
        return Err(w.fail(format!(
            "seed {seed}: a thread parked for good (lost wake-up)"
        )));
    }
    for p in 0..P {
        let v = w.mem[p].map(|m| m.val).or(w.cache[p]);
        if v != Some(w.truth[p]) && v != w.alt[p] {
            return Err(w.fail(format!(
                "seed {seed}: page {p} holds {v:?} at the end, last written {}",
                w.truth[p]
            )));
        }
    }
    Ok((steps, w.cov))
}

/// Seeds per run: `UZSWAP_MODEL_SEEDS` (default 20 000, about a second),
/// starting at `UZSWAP_MODEL_SEED` (default 0).
#[test]
fn chunk_state_machine_model() {
    let var = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = var("UZSWAP_MODEL_SEEDS", 20_000);
    let first = var("UZSWAP_MODEL_SEED", 0);
    let mut steps = 0;
    let mut cov = std::collections::BTreeMap::<&str, u64>::new();
    for seed in first..first + n {
        match run(seed) {
            Ok((s, c)) => {
                steps += s;
                for (k, v) in c {
                    *cov.entry(k).or_default() += v;
                }
            }
            Err(e) => panic!("chunk state model: {e}"),
        }
    }
    eprintln!("chunk state model: {n} seeds, {steps} steps, no violation; transitions: {cov:?}");
    // Not vacuous: every transition of the machine was taken.
    for t in [
        "STORED -> PARTIAL (read)",
        "STORED -> PARTIAL+DIRTY (write)",
        "PARTIAL -> PARTIAL (another group, read)",
        "PARTIAL -> PARTIAL+DIRTY (another group, write)",
        "PARTIAL -> PARTIAL+DIRTY (write-protect fault)",
        "STORED -> CLEAN",
        "STORED -> RESIDENT",
        "PARTIAL -> CLEAN",
        "PARTIAL -> RESIDENT",
        "CLEAN -> RESIDENT (write-protect fault)",
        "STORED -> PARTIAL+KEPT (scan read, written back)",
        "PARTIAL -> PARTIAL+KEPT (scan read, written back)",
        "PARTIAL+KEPT -> RESIDENT (write-protect fault)",
        "RESIDENT -> EVICTING",
        "CLEAN -> EVICTING",
        "PARTIAL -> EVICTING",
        "PARTIAL+DIRTY -> EVICTING",
        "EVICTING -> STORED",
        "EVICTING -> PARTIAL (trimmed)",
        "parked on an owned chunk",
        "woke parked threads",
        "lost the CAS to another thread",
        "held for a write-protect call spanning it",
        "dropped a mapped page",
        "refilled a dropped page",
        "evictor faulted on a dropped page",
        "filled a dropped page of a victim",
        "evictor filled a dropped page",
        "zap waited for a fill",
    ] {
        assert!(
            cov.get(t).copied().unwrap_or(0) > 0,
            "never taken: {t} ({cov:?})"
        );
    }
}
