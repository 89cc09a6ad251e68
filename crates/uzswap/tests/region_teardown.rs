//! Tearing an instance down while its shrinker thread is in the middle of a
//! writeback walk. The walk holds the cache (an upgraded weak handle): had
//! the instance let go of its own handle first, the cache's drop (freeing
//! device slots, unlinking a far tier's values) would run later, in the
//! shrinker thread, which a process leaving `main` ends part way. The
//! instance's drop must return only once the walk is over and the cache is
//! gone.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uzswap::region::{Config, Writeback};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{instance, page};

#[test]
fn dropping_the_instance_waits_for_a_shrinker_walk() {
    let Some(uz) = instance(Config {
        budget: 8 << 20,
        folio_order: 4,
        defer_register: false,
        writeback: Some(Writeback::default()),
        ..Config::default()
    }) else {
        return;
    };
    // The shrinker thread's first writeback batch holds its walk until the
    // test lets it go; other threads' walks pass.
    let entered = Arc::new(AtomicBool::new(false));
    let released = Arc::new(AtomicBool::new(false));
    let (e, rl) = (entered.clone(), released.clone());
    uz.zswap().debug_after_writeback(move |_| {
        if uzswap::compress::thread::current_name().as_deref() != Some("uzswap-shrink") {
            return;
        }
        e.store(true, SeqCst);
        while !rl.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let len = 64 << 20;
    let r = uz.region(len).unwrap();
    let t = Instant::now();
    let mut i = 0;
    // Fill past the budget until the shrinker thread writes back.
    while !entered.load(SeqCst) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the shrinker thread never wrote back: {:?}",
            uz.zswap().stats()
        );
        Pattern::Index.fill(i as u64, 3, page(&r, i % (len / PAGE_SIZE)));
        i += 1;
    }
    let rl = released.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        rl.store(true, SeqCst);
    });
    drop(r);
    drop(uz);
    assert!(
        released.load(SeqCst),
        "the instance was dropped while its shrinker thread held the cache"
    );
    releaser.join().unwrap();
}
