//! Model check of the isolate / relocate / free protocol on a two-cluster
//! device. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p uzswap-swap --release --test loom
//! ```
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use uzswap_swap::{ClusterAllocator, SlotAllocator, SWAPFILE_CLUSTER};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // Three preemptions cover every interleaving of a list move with an
    // isolation or a free on the other thread; more only multiplies time.
    b.preemption_bound = Some(3);
    b.check(f);
}

fn disjoint(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0
}

/// Two threads allocate and free on a device where they must meet: one
/// takes a whole cluster, the other small runs, and freeing empties
/// clusters through the discard list.
#[test]
fn alloc_free_race_keeps_lists_and_counts_consistent() {
    model(|| {
        let a = Arc::new(ClusterAllocator::with_discard(2, Box::new(|_| {})));
        let a1 = a.clone();
        let t1 = thread::spawn(move || {
            let s = a1.alloc(9).map(|s| (s.0, 512));
            let t = a1.alloc(0).map(|t| (t.0, 1));
            if let Some((s, _)) = s {
                a1.free(uzswap_swap::SwapSlot(s), 9).unwrap();
            }
            t
        });
        let a2 = a.clone();
        let t2 = thread::spawn(move || {
            let x = a2.alloc(1).map(|s| (s.0, 2));
            let y = a2.alloc(0).map(|s| (s.0, 1));
            if let Some((x, _)) = x {
                a2.free(uzswap_swap::SwapSlot(x), 1).unwrap();
            }
            y
        });
        let r1 = t1.join().unwrap();
        let r2 = t2.join().unwrap();
        // Two order-0 slots held at the end: never the same slot.
        if let (Some(p), Some(q)) = (r1, r2) {
            assert!(disjoint(p, q), "slot handed out twice: {p:?} {q:?}");
        }
        a.check_invariants().unwrap();
        let held = u64::from(r1.is_some()) + u64::from(r2.is_some());
        assert_eq!(a.used(), held);
        // Freeing what is held restores the whole capacity.
        for (s, _) in r1.into_iter().chain(r2) {
            a.free(uzswap_swap::SwapSlot(s), 0).unwrap();
        }
        a.check_invariants().unwrap();
        assert_eq!(a.used(), 0);
        for _ in 0..2 {
            assert!(a.alloc(9).is_some());
        }
        assert!(a.alloc(0).is_none());
        assert_eq!(a.capacity(), 2 * SWAPFILE_CLUSTER as u64);
    });
}

/// A thread frees into a cluster while another isolates it from the lists:
/// the trylock in isolation and the list move under the cluster lock must
/// never lose the cluster or leave its flag disagreeing with its list.
#[test]
fn free_while_isolating() {
    model(|| {
        let a = Arc::new(ClusterAllocator::new(2));
        // Cluster 0: order 0, partly used, owned by the main thread's hint.
        let s0 = a.alloc(0).unwrap();
        let s1 = a.alloc(0).unwrap();
        let a1 = a.clone();
        let t1 = thread::spawn(move || {
            // Moves cluster 0 to nonfull under its lock.
            a1.free(s0, 0).unwrap();
        });
        let a2 = a.clone();
        let t2 = thread::spawn(move || {
            // A fresh thread has no hint: it isolates from nonfull or free.
            a2.alloc(0)
        });
        t1.join().unwrap();
        let got = t2.join().unwrap().expect("space is left");
        assert_ne!(got, s1);
        a.check_invariants().unwrap();
        assert_eq!(a.used(), 2);
        a.free(got, 0).unwrap();
        a.free(s1, 0).unwrap();
        a.check_invariants().unwrap();
    });
}
