//! Mappings and memory of a large pool of mixed object sizes, before and
//! after random frees and after compaction: the lines of /proc/self/maps
//! (each a VMA, limited by vm.max_map_count) against the pool's figures.
//!
//! `cargo run -p uzswap-zpool --release --example mappings [-- MIB [FREE_PERCENT]]`
//! (default 2048 MiB, 75 % freed). Prints a table, then one JSON object on
//! the last line.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use uzswap_zpool::{Handle, PoolStats, ZsPool, PAGE_SIZE};

/// Lines of /proc/self/maps (0 if it cannot be read).
fn maps() -> usize {
    std::fs::read("/proc/self/maps")
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(0)
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |p| p * PAGE_SIZE as u64)
}

fn row(what: &str, base_maps: usize, base_rss: u64, s: &PoolStats, json: &mut Vec<String>) {
    let (m, rss) = (
        maps().saturating_sub(base_maps),
        rss_bytes().saturating_sub(base_rss),
    );
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "{what:>10} {m:>8} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>10}",
        s.arenas,
        mib(s.pool_total_size),
        mib(s.cached_bytes),
        mib(rss),
        s.objects
    );
    json.push(format!(
        "{{\"phase\":\"{what}\",\"maps\":{m},\"arenas\":{},\"pool_total_size\":{},\"cached_bytes\":{},\"rss_delta\":{rss},\"objects\":{}}}",
        s.arenas, s.pool_total_size, s.cached_bytes, s.objects
    ));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2048);
    let free_pct: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(75);
    let (base_maps, base_rss) = (maps(), rss_bytes());
    let pool = ZsPool::new();
    let mut rng = SmallRng::seed_from_u64(1);
    let data: Vec<u8> = (0..PAGE_SIZE).map(|i| (i * 31 + 7) as u8).collect();
    let mut hs: Vec<Handle> = Vec::new();
    // A swap-like mix: a quarter incompressible pages, the rest 100..4096.
    while pool.total_size() < mib << 20 {
        let len = if rng.gen_ratio(1, 4) {
            PAGE_SIZE
        } else {
            rng.gen_range(100..PAGE_SIZE)
        };
        hs.push(pool.store(&data[..len]).expect("store"));
    }
    println!(
        "{:>10} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "phase", "maps", "arenas", "pool MiB", "cached", "rss MiB", "objects"
    );
    let mut json = Vec::new();
    row("filled", base_maps, base_rss, &pool.stats(), &mut json);
    hs.retain(|&h| {
        let free = rng.gen_ratio(free_pct, 100);
        if free {
            pool.free(h);
        }
        !free
    });
    row("freed", base_maps, base_rss, &pool.stats(), &mut json);
    pool.compact();
    row("compacted", base_maps, base_rss, &pool.stats(), &mut json);
    for h in hs {
        pool.free(h);
    }
    row("empty", base_maps, base_rss, &pool.stats(), &mut json);
    println!(
        "{{\"mib\":{mib},\"free_percent\":{free_pct},\"phases\":[{}]}}",
        json.join(",")
    );
}
