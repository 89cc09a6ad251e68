//! A fixed number of order-0 alloc + free pairs on one thread, the same
//! pattern as `uzswap bench alloc`'s throughput case (a FIFO ring of live
//! slots). Its work is deterministic, so an instruction-counting profiler
//! (`valgrind --tool=callgrind`) compares the two allocators' fast paths
//! regardless of machine load:
//!
//! ```text
//! cargo build --release -p uzswap-swap --example alloc_pairs
//! valgrind --tool=callgrind target/release/examples/alloc_pairs cluster 1000000
//! ```

use uzswap_swap::{ClusterAllocator, GlobalLockAllocator, SlotAllocator};

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "cluster".into());
    let pairs: u64 = match args.next().map(|s| s.parse()) {
        None => 1_000_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("bad pair count: {e}");
            std::process::exit(2);
        }
    };
    let ring = 64;
    let a: Box<dyn SlotAllocator> = match kind.as_str() {
        "cluster" => Box::new(ClusterAllocator::new(64)),
        "baseline" => Box::new(GlobalLockAllocator::new(64)),
        other => {
            eprintln!("unknown allocator {other:?} (cluster or baseline)");
            std::process::exit(2);
        }
    };
    let mut live: Vec<_> = (0..ring).map(|_| a.alloc(0).expect("room")).collect();
    let t0 = std::time::Instant::now();
    let mut i = 0;
    for _ in 0..pairs {
        let s = a.alloc(0).expect("room");
        a.free(live[i], 0).expect("live slot");
        live[i] = s;
        i = (i + 1) % ring;
    }
    let secs = t0.elapsed().as_secs_f64();
    for s in live {
        a.free(s, 0).expect("live slot");
    }
    assert_eq!(a.used(), 0);
    println!(
        "{kind}: {pairs} pairs in {secs:.3} s, {:.1} M pairs/s",
        pairs as f64 / secs / 1e6
    );
}
