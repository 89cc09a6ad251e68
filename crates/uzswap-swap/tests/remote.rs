//! The far tier against real Redis servers (127.0.0.1, free ports): pages
//! read back exactly; a missing, stale or damaged value is an error, never
//! a page; deletes are sent in batches and at drop; an unreachable server
//! fails reads after bounded retries and makes writes back off; a full
//! server (maxmemory, noeviction) refuses writes, counted; a 3-master
//! cluster spreads runs by hash tag, each run on one node.

#[path = "../../uzswap-cli/src/redis_servers.rs"]
#[allow(dead_code)]
mod redis_harness;

use redis_harness::{available, RedisCluster, RedisServer};
use std::time::{Duration, Instant};
use uzswap_swap::{RemoteConfig, SlotRange, SwapDevice, SwapDeviceConfig, SwapSlot, PAGE_SIZE};

fn device(url: &str, clusters: u64) -> SwapDevice {
    SwapDevice::create(SwapDeviceConfig {
        size_bytes: clusters * 512 * PAGE_SIZE as u64,
        remote: Some(RemoteConfig::parse(url).unwrap()),
        ..SwapDeviceConfig::default()
    })
    .unwrap()
}

fn page(tag: u64) -> Vec<u8> {
    (0..PAGE_SIZE as u64)
        .map(|i| (i.wrapping_mul(2654435761) ^ tag.wrapping_mul(97)) as u8)
        .collect()
}

fn write(d: &SwapDevice, slot: SwapSlot, tags: std::ops::Range<u64>) -> std::io::Result<()> {
    let pages: Vec<Vec<u8>> = tags.map(page).collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
    d.write(slot, &refs)
}

fn check(d: &SwapDevice, slot: SwapSlot, tags: std::ops::Range<u64>) {
    let n = tags.end - tags.start;
    let mut buf = vec![0u8; n as usize * PAGE_SIZE];
    d.read(slot, n, &mut buf).unwrap();
    for (i, t) in tags.enumerate() {
        assert!(
            buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE] == page(t)[..],
            "page {t}"
        );
    }
}

fn raw(s: &RedisServer) -> redis::Connection {
    redis::Client::open(s.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn pages_round_trip_and_bad_values_are_errors() {
    if !available() {
        return;
    }
    let srv = RedisServer::start(&[]);
    let d = device(&srv.url(), 4);
    assert_eq!(d.target_kind(), "redis");
    let a = d.alloc(3).unwrap();
    write(&d, a, 0..8).unwrap();
    check(&d, a, 0..8);
    let r = d.remote().unwrap();
    assert_eq!(srv.dbsize(), 8);
    // Several stretches, in two allocator clusters (two hash tags): one
    // round trip.
    let far = d.alloc(9).unwrap();
    write(&d, far, 100..612).unwrap();
    let rt = r.stats().round_trips;
    let mut two = vec![0u8; 4 * PAGE_SIZE];
    d.read_runs(
        &[SlotRange::new(SwapSlot(a.0 + 6), 2), SlotRange::new(far, 2)],
        &mut two,
    )
    .unwrap();
    assert_eq!(r.stats().round_trips, rt + 1);
    assert!(two[..PAGE_SIZE] == page(6)[..] && two[2 * PAGE_SIZE..3 * PAGE_SIZE] == page(100)[..]);
    d.free(far, 512).unwrap();
    d.flush();
    assert_eq!(srv.dbsize(), 8);
    let mut con = raw(&srv);
    use redis::Commands;

    // Damaged: one byte of the page changed on the server.
    let k1 = r.key(a.0 + 1);
    let _: () = redis::cmd("SETRANGE")
        .arg(&k1)
        .arg(100)
        .arg("x")
        .query(&mut con)
        .unwrap();
    let mut buf = vec![0u8; 8 * PAGE_SIZE];
    let e = d.read(a, 8, &mut buf).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");

    // Stale: the value of an older write of the slot put back (a replay).
    let k2 = r.key(a.0 + 2);
    let old: Vec<u8> = con.get(&k2).unwrap();
    write(&d, SwapSlot(a.0 + 2), 50..51).unwrap();
    check(&d, SwapSlot(a.0 + 2), 50..51);
    let _: () = con.set(&k2, old).unwrap();
    let e = d
        .read(SwapSlot(a.0 + 2), 1, &mut buf[..PAGE_SIZE])
        .unwrap_err();
    assert!(e.to_string().contains("version"), "{e}");

    // Misfiled: another slot's value under this key.
    let v3: Vec<u8> = con.get(r.key(a.0 + 3)).unwrap();
    let _: () = con.set(r.key(a.0 + 4), v3).unwrap();
    let e = d
        .read(SwapSlot(a.0 + 4), 1, &mut buf[..PAGE_SIZE])
        .unwrap_err();
    assert!(e.to_string().contains("slot"), "{e}");

    // Missing: the server lost its data.
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let e = d.read(a, 1, &mut buf[..PAGE_SIZE]).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    let st = d.stats().remote.unwrap();
    assert_eq!((st.corrupt, st.stale, st.missing), (1, 2, 1), "{st:?}");
    assert_eq!(d.stats().io_errors, 4);

    // Deletes: batched, sent on flush, and the slots free only then.
    write(&d, a, 0..8).unwrap();
    let b = d.alloc(9).unwrap();
    let pages: Vec<Vec<u8>> = (0..512).map(page).collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
    d.write(b, &refs).unwrap();
    assert_eq!(srv.dbsize(), 8 + 512);
    d.free(a, 8).unwrap();
    assert_eq!(d.stats().used, 520, "queued, not yet freed");
    assert!(d.free(a, 8).is_ok() || d.stats().used == 520);
    d.flush();
    assert_eq!(srv.dbsize(), 512);
    assert_eq!(d.stats().used, 512);
    // A full batch goes out without a flush.
    for s in 0..300 {
        d.free(SwapSlot(b.0 + s), 1).unwrap();
    }
    assert!(srv.dbsize() <= 512 - 256, "{}", srv.dbsize());
    check(&d, SwapSlot(b.0 + 300), 300..512);
    // Drop unlinks whatever the instance left.
    drop(d);
    assert_eq!(srv.dbsize(), 0);
}

#[test]
fn an_unreachable_server_fails_reads_after_bounded_retries_and_writes_back_off() {
    if !available() {
        return;
    }
    let mut srv = RedisServer::start(&[]);
    let url = format!(
        "{}?timeout_ms=200&connect_timeout_ms=200&retries=2&backoff_ms=300",
        srv.url()
    );
    let d = device(&url, 2);
    let a = d.alloc(2).unwrap();
    write(&d, a, 0..4).unwrap();
    srv.kill();
    let mut buf = vec![0u8; 4 * PAGE_SIZE];
    let t = Instant::now();
    let e = d.read(a, 4, &mut buf).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(e.to_string().contains("after 3 tries"), "{e}");
    let b = d.alloc(2).unwrap();
    assert!(write(&d, b, 10..14).is_err());
    // Backing off: refused at once, without a connection attempt.
    let t = Instant::now();
    assert!(write(&d, b, 10..14).is_err());
    assert!(t.elapsed() < Duration::from_millis(50));
    let st = d.stats().remote.unwrap();
    assert_eq!(
        (st.retries >= 2, st.write_errors, st.write_skipped),
        (true, 1, 1)
    );
    // Back, but empty: writes work again after the back-off; the pages it
    // lost are errors, not zeros.
    srv.restart();
    std::thread::sleep(Duration::from_millis(350));
    write(&d, b, 10..14).unwrap();
    check(&d, b, 10..14);
    let e = d.read(a, 4, &mut buf).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

/// A write the server refused (`min-replicas-to-write` with no replica:
/// NOREPLICAS, as a busy server's timeout fails one) puts the target in its
/// back-off; the values it wrote before are still unlinked when it goes
/// (the drop once skipped them all while backing off).
#[test]
fn a_target_backing_off_still_unlinks_its_values_when_dropped() {
    if !available() {
        return;
    }
    let srv = RedisServer::start(&[]);
    let d = device(&format!("{}?backoff_ms=60000", srv.url()), 2);
    let a = d.alloc(2).unwrap();
    write(&d, a, 0..4).unwrap();
    let mut con = redis::Client::open(srv.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut replicas = |n: u32| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("min-replicas-to-write")
            .arg(n)
            .query(&mut con)
            .unwrap();
    };
    replicas(1);
    let b = d.alloc(2).unwrap();
    assert!(write(&d, b, 10..14).is_err(), "the server took the write");
    assert_eq!(d.stats().remote.unwrap().write_errors, 1);
    replicas(0);
    assert!(srv.dbsize() >= 4);
    drop(d);
    assert_eq!(srv.dbsize(), 0, "values left by a target backing off");
}

#[test]
fn a_full_server_refuses_writes_and_keeps_what_it_has() {
    if !available() {
        return;
    }
    let srv = RedisServer::start(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]);
    let d = device(&format!("{}?backoff_ms=0", srv.url()), 8);
    let mut written = Vec::new();
    let mut refused = false;
    for i in 0..64u64 {
        let s = d.alloc(4).unwrap();
        match write(&d, s, i * 16..i * 16 + 16) {
            Ok(()) => written.push((s, i)),
            Err(e) => {
                assert!(e.to_string().contains("out of memory"), "{e}");
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "3 MB took 4 MiB of pages");
    assert!(!written.is_empty());
    assert!(d.stats().remote.unwrap().oom_refusals >= 1);
    for (s, i) in written {
        check(&d, s, i * 16..i * 16 + 16);
    }
}

#[test]
fn a_cluster_spreads_runs_by_hash_tag() {
    if !available() {
        return;
    }
    let c = RedisCluster::start();
    let d = device(&c.url(), 16);
    assert_eq!(d.target_kind(), "redis-cluster");
    // One 512-slot run per allocator cluster: 16 hash tags.
    let runs: Vec<SwapSlot> = (0..16).map(|_| d.alloc(9).unwrap()).collect();
    for (i, &s) in runs.iter().enumerate() {
        let t = i as u64 * 512;
        write(&d, s, t..t + 512).unwrap();
    }
    for (i, &s) in runs.iter().enumerate() {
        let t = i as u64 * 512;
        check(&d, s, t..t + 512);
    }
    let sizes: Vec<u64> = c.nodes.iter().map(|n| n.dbsize()).collect();
    assert_eq!(sizes.iter().sum::<u64>(), 16 * 512, "{sizes:?}");
    assert!(sizes.iter().filter(|&&n| n > 0).count() >= 2, "{sizes:?}");
    // Each run is whole on one node.
    assert!(sizes.iter().all(|n| n % 512 == 0), "{sizes:?}");
    let st = d.stats().remote.unwrap();
    // One round trip per node a run touches: one per run written or read.
    assert!(st.round_trips <= 2 * 16 + 1, "{st:?}");
    drop(d);
    assert_eq!(c.nodes.iter().map(|n| n.dbsize()).sum::<u64>(), 0);
}

/// `pool → file → redis`: the file takes every allocation it can, Redis
/// only what it cannot; slots past the file are Redis's, a read across the
/// boundary gets each part from its tier, a freed file cluster is the
/// file's again, and a far tier that dies fails only its own I/O.
#[test]
fn a_file_first_device_sends_to_redis_only_what_the_file_cannot_take() {
    if !available() {
        return;
    }
    let mut srv = RedisServer::start(&[]);
    let url = format!(
        "{}?timeout_ms=200&connect_timeout_ms=200&retries=1",
        srv.url()
    );
    let d = SwapDevice::create(SwapDeviceConfig {
        size_bytes: 512 * PAGE_SIZE as u64,
        far_size_bytes: 2 * 512 * PAGE_SIZE as u64,
        remote: Some(RemoteConfig::parse(&url).unwrap()),
        file_first: true,
        ..SwapDeviceConfig::default()
    })
    .unwrap();
    assert_eq!(d.target_kind(), "file+redis");
    assert_eq!(d.capacity(), 3 * 512);
    let near = d.alloc(9).unwrap();
    assert_eq!(near, SwapSlot(0));
    write(&d, near, 0..512).unwrap();
    assert_eq!(srv.dbsize(), 0, "the file had room");
    let far = d.alloc(9).unwrap();
    assert_eq!(far, SwapSlot(512));
    write(&d, far, 512..1024).unwrap();
    assert_eq!(srv.dbsize(), 512);
    // Across the boundary, as one read and as stretches.
    check(&d, SwapSlot(508), 508..516);
    let mut buf = vec![0u8; 6 * PAGE_SIZE];
    d.read_runs(
        &[
            SlotRange::new(SwapSlot(600), 1),
            SlotRange::new(SwapSlot(510), 4),
            SlotRange::new(SwapSlot(3), 1),
        ],
        &mut buf,
    )
    .unwrap();
    for (i, t) in [600, 510, 511, 512, 513, 3].into_iter().enumerate() {
        assert!(
            buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE] == page(t)[..],
            "page {t}"
        );
    }
    let st = d.stats();
    let file = d.first_tier_stats().unwrap();
    assert_eq!((st.pswpout, file.pswpout), (1024, 512));
    assert_eq!(st.remote.unwrap().pages_out, 512);
    assert_eq!((st.used, file.used), (1024, 512));
    // A freed file cluster is the file's again before Redis's free one.
    d.free(near, 512).unwrap();
    assert_eq!(d.alloc(9).unwrap(), SwapSlot(0));
    assert_eq!(
        d.readahead_window(SwapSlot(515)),
        SlotRange::new(SwapSlot(512), 8)
    );
    // The far tier gone: the file's pages and writes are untouched; the
    // far tier's fail as errors, never as pages.
    srv.kill();
    write(&d, SwapSlot(0), 2000..2512).unwrap();
    check(&d, SwapSlot(0), 2000..2512);
    let mut one = vec![0u8; PAGE_SIZE];
    assert!(d.read(SwapSlot(700), 1, &mut one).is_err());
    let last = d.alloc(9).unwrap();
    assert_eq!(last, SwapSlot(1024));
    assert!(write(&d, last, 0..512).is_err());
    assert!(d.alloc(0).is_none(), "every tier is full");
    d.free(far, 512).unwrap();
    d.free(last, 512).unwrap();
}
