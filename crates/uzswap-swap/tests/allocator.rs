//! Allocator properties, on the cluster allocator and the baseline alike:
//! no slot handed out twice, alignment, every free restores capacity, and
//! (cluster) list membership always matches flags and counts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use uzswap_swap::cluster::ListLengths;
use uzswap_swap::{
    ClusterAllocator, ClusterFlag, GlobalLockAllocator, SlotAllocator, SlotError, SlotRange,
    SwapSlot, MAX_ORDER, SWAPFILE_CLUSTER,
};

const ORDERS: [u32; 6] = [0, 0, 1, 3, 4, 9];

#[derive(Clone, Debug)]
enum Op {
    Alloc(u32),
    Free(usize),
    FreePart(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..ORDERS.len()).prop_map(|i| Op::Alloc(ORDERS[i])),
        2 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreePart),
    ]
}

/// Live allocations: start -> npages, disjoint by construction of the test.
struct Model {
    live: BTreeMap<u64, u64>,
    used: u64,
}

impl Model {
    fn insert(&mut self, start: u64, n: u64, cap: u64) {
        assert!(start + n <= cap, "run {start}+{n} outside capacity {cap}");
        assert_eq!(start % n, 0, "run {start}+{n} not naturally aligned");
        if let Some((&s, &len)) = self.live.range(..start + n).next_back() {
            assert!(s + len <= start, "{start}+{n} overlaps live {s}+{len}");
        }
        self.live.insert(start, n);
        self.used += n;
    }
}

fn run_ops(a: &dyn SlotAllocator, ops: &[Op], check: &dyn Fn()) {
    let cap = a.capacity();
    let mut m = Model {
        live: BTreeMap::new(),
        used: 0,
    };
    for op in ops {
        match *op {
            Op::Alloc(order) => {
                if let Some(s) = a.alloc(order) {
                    m.insert(s.0, 1 << order, cap);
                }
            }
            Op::Free(i) if !m.live.is_empty() => {
                let (&s, &n) = m.live.iter().nth(i % m.live.len()).unwrap();
                m.live.remove(&s);
                m.used -= n;
                // A run of 2^k is freed as its order; a part of one as single pages.
                if n.is_power_of_two() && s % n == 0 {
                    a.free(SwapSlot(s), n.trailing_zeros()).unwrap();
                } else {
                    for p in s..s + n {
                        a.free(SwapSlot(p), 0).unwrap();
                    }
                }
                // Freeing again must fail and change nothing.
                assert!(a.free(SwapSlot(s), 0).is_err());
            }
            Op::FreePart(i) if !m.live.is_empty() => {
                // Free the first page of a run; the rest stays live.
                let (&s, &n) = m.live.iter().nth(i % m.live.len()).unwrap();
                m.live.remove(&s);
                a.free(SwapSlot(s), 0).unwrap();
                m.used -= 1;
                if n > 1 {
                    m.live.insert(s + 1, n - 1);
                }
            }
            _ => {}
        }
        assert_eq!(a.used(), m.used);
        check();
    }
    // Free everything: capacity must come back whole.
    for (s, n) in std::mem::take(&mut m.live) {
        for p in s..s + n {
            a.free(SwapSlot(p), 0).unwrap();
        }
    }
    assert_eq!(a.used(), 0);
    check();
    assert_full_capacity(a);
}

/// Every cluster can again be taken whole (order 9), and nothing more.
fn assert_full_capacity(a: &dyn SlotAllocator) {
    let nclusters = a.capacity() / SWAPFILE_CLUSTER as u64;
    let mut got = Vec::new();
    for _ in 0..nclusters {
        got.push(
            a.alloc(MAX_ORDER)
                .expect("a whole cluster after freeing everything"),
        );
    }
    assert!(a.alloc(0).is_none(), "allocated past capacity");
    assert_eq!(a.used(), a.capacity());
    for s in got {
        a.free(s, MAX_ORDER).unwrap();
    }
    assert_eq!(a.used(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn cluster_ops_keep_invariants(ops in proptest::collection::vec(op(), 1..400)) {
        let a = ClusterAllocator::new(4);
        run_ops(&a, &ops, &|| a.check_invariants().unwrap());
    }

    #[test]
    fn cluster_with_discard_keeps_invariants(ops in proptest::collection::vec(op(), 1..400)) {
        let discarded = Arc::new(Mutex::new(Vec::new()));
        let d = Arc::clone(&discarded);
        let a = ClusterAllocator::with_discard(3, Box::new(move |r: SlotRange| d.lock().unwrap().push(r)));
        run_ops(&a, &ops, &|| {
            a.check_invariants().unwrap();
            assert_eq!(a.list_lengths().discard, 0);
        });
        for r in discarded.lock().unwrap().iter() {
            assert_eq!(r.npages, SWAPFILE_CLUSTER as u64);
            assert_eq!(r.start.0 % SWAPFILE_CLUSTER as u64, 0);
        }
    }

    #[test]
    fn baseline_ops_keep_invariants(ops in proptest::collection::vec(op(), 1..400)) {
        let a = GlobalLockAllocator::new(4);
        run_ops(&a, &ops, &|| {});
    }
}

#[test]
fn exhausts_exactly_at_capacity() {
    for a in [
        Box::new(ClusterAllocator::new(3)) as Box<dyn SlotAllocator>,
        Box::new(GlobalLockAllocator::new(3)),
    ] {
        let mut n = 0;
        while a.alloc(0).is_some() {
            n += 1;
        }
        assert_eq!(n, a.capacity(), "{}", a.name());
        assert_eq!(a.used(), a.capacity());
        assert_eq!(a.stats().alloc_fail[0], 1);
    }
}

#[test]
fn bad_frees_are_errors_that_change_nothing() {
    for a in [
        Box::new(ClusterAllocator::new(2)) as Box<dyn SlotAllocator>,
        Box::new(GlobalLockAllocator::new(2)),
    ] {
        let s = a.alloc(2).unwrap();
        assert!(matches!(
            a.free(SwapSlot(s.0 + 1), 1),
            Err(SlotError::NotAllocated { .. })
        ));
        assert!(matches!(
            a.free(SwapSlot(a.capacity()), 0),
            Err(SlotError::OutOfRange { .. })
        ));
        assert!(matches!(a.free(s, 10), Err(SlotError::BadOrder(10))));
        assert!(matches!(a.free(s, 3), Err(SlotError::NotAllocated { .. })));
        assert_eq!(a.used(), 4);
        a.free(s, 2).unwrap();
        assert!(matches!(a.free(s, 2), Err(SlotError::NotAllocated { .. })));
        assert_eq!(a.used(), 0);
        assert!(a.alloc(10).is_none());
    }
    let c = ClusterAllocator::new(2);
    assert!(matches!(
        c.free_range(SwapSlot(510), 4),
        Err(SlotError::CrossesCluster { .. })
    ));
    assert!(matches!(
        c.free_range(SwapSlot(0), 0),
        Err(SlotError::Empty { .. })
    ));
}

#[test]
fn large_orders_fail_instead_of_stealing_and_order0_steals() {
    let a = ClusterAllocator::new(2);
    // Fill both clusters with order-4 runs, then free one page per run.
    let mut runs = Vec::new();
    while let Some(s) = a.alloc(4) {
        runs.push(s);
    }
    assert_eq!(runs.len(), 64);
    for s in &runs {
        a.free_range(*s, 1).unwrap();
    }
    a.check_invariants().unwrap();
    // No aligned 16-run is left anywhere: order 4 fails, order 0 steals
    // the single free pages out of the order-4 clusters.
    assert!(a.alloc(4).is_none());
    let l: ListLengths = a.list_lengths();
    assert_eq!(l.nonfull[4] + l.frag[4], 2);
    for _ in 0..64 {
        let s = a.alloc(0).expect("order 0 steals from order-4 clusters");
        assert_eq!(s.0 % 16, 0);
    }
    assert!(a.alloc(0).is_none());
    assert_eq!(a.stats().alloc_fail[4], 2); // the filling loop's end, and this one
    a.check_invariants().unwrap();
    for c in 0..2 {
        assert_eq!(a.cluster_state(c), Some((ClusterFlag::Full, 512, 4)));
    }
}

#[test]
fn clusters_serve_one_order() {
    let a = ClusterAllocator::new(4);
    let s0 = a.alloc(0).unwrap();
    let s4 = a.alloc(4).unwrap();
    let s3 = a.alloc(3).unwrap();
    assert_ne!(s0.cluster(), s4.cluster());
    assert_ne!(s3.cluster(), s4.cluster());
    assert_ne!(s0.cluster(), s3.cluster());
    // A cluster freed empty goes back to free and can serve any order.
    a.free(s4, 4).unwrap();
    assert_eq!(
        a.cluster_state(s4.cluster()),
        Some((ClusterFlag::Free, 0, 0))
    );
    a.check_invariants().unwrap();
}

/// Threads allocate and free mixed orders at random; a shared owner map
/// catches any slot handed to two holders at once.
fn stress(a: Arc<dyn SlotAllocator>, threads: usize, dur: Duration, check: &dyn Fn()) {
    let cap = a.capacity() as usize;
    let owner: Arc<Vec<AtomicU8>> = Arc::new((0..cap).map(|_| AtomicU8::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (a, owner, stop, ops) = (a.clone(), owner.clone(), stop.clone(), ops.clone());
            std::thread::spawn(move || {
                let me = t as u8 + 1;
                let mut rng = SmallRng::seed_from_u64(t as u64 * 7919 + 1);
                let mut live: Vec<(SwapSlot, u32)> = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let want_alloc = live.len() < 8 || (live.len() < 400 && rng.gen_bool(0.55));
                    if want_alloc {
                        let order = [0, 0, 0, 1, 2, 4, 4, 9][rng.gen_range(0..8)];
                        if let Some(s) = a.alloc(order) {
                            for p in s.0..s.0 + (1 << order) {
                                let prev = owner[p as usize].swap(me, Ordering::AcqRel);
                                assert_eq!(prev, 0, "slot {p} handed out twice (order {order})");
                            }
                            live.push((s, order));
                        }
                    } else {
                        let (s, order) = live.swap_remove(rng.gen_range(0..live.len()));
                        for p in s.0..s.0 + (1 << order) {
                            assert_eq!(owner[p as usize].swap(0, Ordering::AcqRel), me);
                        }
                        a.free(s, order).unwrap();
                    }
                    n += 1;
                }
                ops.fetch_add(n, Ordering::Relaxed);
                live
            })
        })
        .collect();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    let mut held = 0;
    let mut all = Vec::new();
    for h in hs {
        let live = h.join().unwrap();
        held += live.iter().map(|(_, o)| 1u64 << o).sum::<u64>();
        all.extend(live);
    }
    assert_eq!(a.used(), held);
    check();
    for (s, o) in all {
        a.free(s, o).unwrap();
    }
    assert_eq!(a.used(), 0);
    check();
    assert!(ops.load(Ordering::Relaxed) > 1000);
    assert_full_capacity(&*a);
}

#[test]
fn stress_cluster_mixed_orders() {
    let a = Arc::new(ClusterAllocator::with_discard(24, Box::new(|_| {})));
    let dyn_a: Arc<dyn SlotAllocator> = a.clone();
    let start = Instant::now();
    stress(dyn_a, 4, Duration::from_millis(1500), &|| {
        a.check_invariants().unwrap()
    });
    assert!(start.elapsed() < Duration::from_secs(30));
    let st = a.stats();
    assert!(st.alloc[9] > 0 && st.alloc[4] > 0 && st.alloc[0] > 0);
}

#[test]
fn stress_cluster_tight_device() {
    // Few clusters for many threads: lots of isolate contention, stealing,
    // failures and discard.
    let a = Arc::new(ClusterAllocator::with_discard(3, Box::new(|_| {})));
    let dyn_a: Arc<dyn SlotAllocator> = a.clone();
    stress(dyn_a, 4, Duration::from_millis(1000), &|| {
        a.check_invariants().unwrap()
    });
}

#[test]
fn stress_baseline_mixed_orders() {
    let a: Arc<dyn SlotAllocator> = Arc::new(GlobalLockAllocator::new(8));
    stress(a, 4, Duration::from_millis(500), &|| {});
}

/// The free list is LIFO: an emptied cluster (discarded or not) is the next
/// one a new cluster is taken from, so a device touches no more clusters
/// than it had in use at once (cluster.rs, "the free list is LIFO").
#[test]
fn an_emptied_cluster_is_taken_again_before_a_never_used_one() {
    for discard in [false, true] {
        let discarded = Arc::new(AtomicU64::new(0));
        let d = Arc::clone(&discarded);
        let a = if discard {
            ClusterAllocator::with_discard(
                8,
                Box::new(move |_| {
                    d.fetch_add(1, Ordering::Relaxed);
                }),
            )
        } else {
            ClusterAllocator::new(8)
        };
        let whole: Vec<SwapSlot> = (0..3).map(|_| a.alloc(9).unwrap()).collect();
        assert_eq!(whole, [SwapSlot(0), SwapSlot(512), SwapSlot(1024)]);
        a.free_range(whole[1], 512).unwrap();
        assert_eq!(a.alloc(9), Some(SwapSlot(512)), "discard {discard}");
        a.free_range(whole[2], 512).unwrap();
        a.free_range(whole[0], 512).unwrap();
        assert_eq!(a.alloc(9), Some(SwapSlot(0)), "discard {discard}");
        assert_eq!(a.alloc(9), Some(SwapSlot(1024)), "discard {discard}");
        assert_eq!(a.alloc(9), Some(SwapSlot(1536)), "discard {discard}");
        assert_eq!(
            discarded.load(Ordering::Relaxed),
            if discard { 3 } else { 0 }
        );
    }
}
