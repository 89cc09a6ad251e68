//! Space efficiency of the pool: (sum of object lengths) / pool_total_size,
//! for object-size distributions like compressed pages, with spans of up to
//! 4, 8 and 16 pages, after a fill, after churn (random frees and new
//! stores), and after compaction.
//!
//! `cargo run -p uzswap-zpool --release --example space [-- MIB]`
//! Prints a table, then one JSON object on the last line.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use uzswap_zpool::{Handle, PoolConfig, ZsPool};

struct Dist {
    name: &'static str,
    sample: fn(&mut SmallRng) -> usize,
}

/// Roughly normal: the mean of four uniforms.
fn around(rng: &mut SmallRng, mean: f64, spread: f64) -> usize {
    let u: f64 = (0..4).map(|_| rng.gen::<f64>()).sum::<f64>() / 4.0 - 0.5;
    (mean + u * 2.0 * spread).round().clamp(1.0, 4096.0) as usize
}

const DISTS: &[Dist] = &[
    Dist {
        name: "text 1300-1600",
        sample: |r| r.gen_range(1300..=1600),
    },
    Dist {
        name: "uniform 600-2000",
        sample: |r| r.gen_range(600..=2000),
    },
    Dist {
        name: "index ~900+-300",
        sample: |r| around(r, 900.0, 300.0),
    },
    Dist {
        name: "mixed 100-4096",
        sample: |r| {
            if r.gen_ratio(1, 5) {
                r.gen_range(2500..=4096)
            } else {
                around(r, 1400.0, 800.0)
            }
        },
    },
];

fn efficiency(pool: &ZsPool) -> f64 {
    pool.stats().space_efficiency()
}

fn main() {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let target = mib << 20;
    let buf = vec![0x5au8; 4096];
    println!(
        "{:<18} {:>5} {:>8} {:>8} {:>8} {:>8}",
        "distribution", "pages", "fill", "churn", "compact", "meta%"
    );
    let mut json = Vec::new();
    for d in DISTS {
        for pages in [4usize, 8, 16] {
            let pool = ZsPool::with_config(PoolConfig {
                max_pages_per_span: pages,
                ..PoolConfig::default()
            });
            let mut rng = SmallRng::seed_from_u64(42);
            let mut live: Vec<Handle> = Vec::new();
            let mut used = 0u64;
            while used < target {
                let len = (d.sample)(&mut rng);
                live.push(pool.store(&buf[..len]).unwrap());
                used += len as u64;
            }
            let fill = efficiency(&pool);
            // Churn: five rounds of freeing 30% at random and storing as many.
            for _ in 0..5 {
                let n = live.len() * 3 / 10;
                for _ in 0..n {
                    let i = rng.gen_range(0..live.len());
                    pool.free(live.swap_remove(i));
                }
                for _ in 0..n {
                    let len = (d.sample)(&mut rng);
                    live.push(pool.store(&buf[..len]).unwrap());
                }
            }
            let churn = efficiency(&pool);
            pool.compact();
            let s = pool.stats();
            let compact = s.space_efficiency();
            let meta = s.metadata_bytes as f64 / s.pool_total_size as f64;
            println!(
                "{:<18} {:>5} {:>8.4} {:>8.4} {:>8.4} {:>7.2}%",
                d.name,
                pages,
                fill,
                churn,
                compact,
                meta * 100.0
            );
            json.push(format!(
                "{{\"dist\":\"{}\",\"max_pages\":{pages},\"fill\":{fill:.4},\"churn\":{churn:.4},\"compacted\":{compact:.4},\"metadata_ratio\":{meta:.4}}}",
                d.name
            ));
        }
    }
    println!("{{\"pool_mib\":{mib},\"runs\":[{}]}}", json.join(","));
}
