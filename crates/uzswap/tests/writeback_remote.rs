//! Writeback to the far tier (Redis) through the cache: every value on the
//! server is sealed (a raw read finds none of the program's bytes), pages
//! come back byte-exact, a server restarted empty makes loads errors (never
//! zeros) and leaves the entries stored, an unreachable server keeps pages
//! in the pool (counted), and plain writeback to it is refused.

#[path = "../../uzswap-cli/src/redis_servers.rs"]
#[allow(dead_code)]
mod redis_harness;

#[path = "common/marked.rs"]
mod marked;
use marked::{count, load_all, page, write_back_all, MARK, PAGES};
use redis::Commands;
use redis_harness::{available, RedisServer};
use uzswap::swap::{RemoteConfig, SwapDeviceConfig};
use uzswap::zswap::{LoadError, ZswapError};
use uzswap::{LoadMode, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

fn config(url: &str, encrypted: bool, compressed: bool) -> ZswapConfig {
    ZswapConfig {
        swap_device: Some(SwapDeviceConfig {
            size_bytes: 8 << 20,
            remote: Some(RemoteConfig::parse(url).unwrap()),
            ..SwapDeviceConfig::default()
        }),
        ..marked::config(encrypted, compressed)
    }
}

fn stored(url: &str, compressed: bool) -> Zswap {
    let z = Zswap::new(config(url, true, compressed)).unwrap();
    for i in 0..PAGES {
        z.store(SwapEntry::new(0, i), &page(i)).unwrap();
    }
    z
}

fn raw_values(srv: &RedisServer) -> Vec<Vec<u8>> {
    let mut con = redis::Client::open(srv.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = con.keys("uz{*").unwrap();
    keys.iter().map(|k| con.get(k).unwrap()).collect()
}

#[test]
fn remote_values_hold_none_of_the_plaintext_and_pages_come_back() {
    if !available() {
        return;
    }
    let srv = RedisServer::start(&[]);
    for compressed in [true, false] {
        let z = stored(&srv.url(), compressed);
        assert_eq!(z.stats().writeback_target, "redis");
        write_back_all(&z);
        let vals = raw_values(&srv);
        assert!(!vals.is_empty());
        let all: Vec<u8> = vals.concat();
        assert!(all.len() >= vals.len() * PAGE_SIZE);
        assert_eq!(count(&all, MARK), 0, "plaintext on the server");
        // Nor any aligned 8 bytes of any page.
        let eights: std::collections::HashSet<[u8; 8]> = (0..PAGES)
            .flat_map(|i| {
                let p = page(i);
                (0..PAGE_SIZE / 8)
                    .map(move |k| p[k * 8..k * 8 + 8].try_into().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect();
        for v in &vals {
            for w in v[40..].chunks_exact(8) {
                assert!(!eights.contains(w), "8 plaintext bytes on the server");
            }
        }
        load_all(&z);
        let st = z.stats();
        assert_eq!(st.checksum_fail, 0);
        assert!(st.remote.as_ref().unwrap().pages_in > 0);
        drop(z);
        assert_eq!(srv.dbsize(), 0, "the instance's values are gone with it");
    }
}

#[test]
fn a_server_restarted_empty_makes_loads_errors_not_zeros() {
    if !available() {
        return;
    }
    let mut srv = RedisServer::start(&[]);
    let z = stored(&format!("{}?retries=1&timeout_ms=300", srv.url()), true);
    write_back_all(&z);
    srv.restart();
    let mut out = vec![0xA5u8; PAGE_SIZE];
    for i in [0, 17, PAGES - 1] {
        match z.load(SwapEntry::new(0, i), &mut out, LoadMode::Exclusive) {
            Err(LoadError::Device(_, msg)) => assert!(msg.contains("missing"), "{msg}"),
            r => panic!("page {i}: {r:?}"),
        }
    }
    // Still stored: the error repeats instead of reading as a zero page.
    assert_eq!(z.stats().device_pages, PAGES);
    assert!(z
        .load(SwapEntry::new(0, 0), &mut out, LoadMode::Exclusive)
        .is_err());
    assert!(z.stats().remote.unwrap().missing >= 4);
}

#[test]
fn an_unreachable_server_at_writeback_keeps_pages_in_the_pool() {
    if !available() {
        return;
    }
    let mut srv = RedisServer::start(&[]);
    let z = stored(
        &format!("{}?timeout_ms=200&connect_timeout_ms=200", srv.url()),
        true,
    );
    srv.kill();
    for _ in 0..8 {
        z.reclaim(u64::MAX);
    }
    let st = z.stats();
    assert_eq!(st.device_pages, 0, "{st:?}");
    assert_eq!(st.stored_pages, PAGES);
    assert!(st.reject_reclaim_fail > 0);
    let r = st.remote.unwrap();
    assert!(r.write_errors >= 1 && r.pages_out == 0, "{r:?}");
    load_all(&z);
}

#[test]
fn plain_writeback_to_a_remote_target_is_refused() {
    if !available() {
        return;
    }
    let srv = RedisServer::start(&[]);
    match Zswap::new(config(&srv.url(), false, true)) {
        Err(ZswapError::Config(m)) => assert!(m.contains("sealed"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("plain remote writeback accepted"),
    }
    // An address nothing listens on is an error at creation, naming it.
    let port = srv.port;
    drop(srv);
    let e = Zswap::new(config(&format!("redis://127.0.0.1:{port}"), true, true))
        .err()
        .expect("no server");
    assert!(e.to_string().contains(&port.to_string()), "{e}");
}

#[test]
fn a_full_server_refuses_writeback_and_the_pool_keeps_the_rest() {
    if !available() {
        return;
    }
    // Room for about half the pages above the server's own ~1 MB.
    let srv = RedisServer::start(&["--maxmemory", "1600kb", "--maxmemory-policy", "noeviction"]);
    let z = Zswap::new(config(&format!("{}?backoff_ms=0", srv.url()), true, false)).unwrap();
    // One page per region: each is a run of its own (one write), so the
    // server takes runs until it is full.
    let key = |i: u64| SwapEntry::new(i as u32 + 1, 0);
    for i in 0..PAGES {
        z.store(key(i), &page(i)).unwrap();
    }
    for _ in 0..32 {
        z.reclaim(u64::MAX);
    }
    let st = z.stats();
    let r = st.remote.clone().unwrap();
    assert!(r.oom_refusals >= 1, "{r:?}");
    assert!(st.reject_reclaim_fail > 0);
    assert!(st.device_pages > 0 && st.device_pages < PAGES, "{st:?}");
    assert_eq!(st.device_pages + st.stored_pages, PAGES);
    let mut out = vec![0u8; PAGE_SIZE];
    for i in 0..PAGES {
        z.load(key(i), &mut out, LoadMode::KeepCopy).unwrap();
        assert!(out == page(i), "page {i}");
    }
}

/// The values are unlinked when the instance goes, even where the server
/// closed the connections it kept idle (a server's `timeout`, a restart of
/// a proxy, `CLIENT KILL`): the first try on a pooled connection fails, and
/// a single try once left the rest of the program's values there.
#[test]
fn dropping_the_instance_unlinks_its_values_after_the_server_closed_idle_connections() {
    if !available() {
        return;
    }
    let srv = RedisServer::start(&[]);
    let z = stored(&srv.url(), true);
    write_back_all(&z);
    assert!(srv.dbsize() > 0);
    let mut con = redis::Client::open(srv.url())
        .unwrap()
        .get_connection()
        .unwrap();
    // Every connection but this one: the instance's idle ones.
    let killed: u64 = redis::cmd("CLIENT")
        .arg(&["KILL", "SKIPME", "yes", "TYPE", "normal"])
        .query(&mut con)
        .unwrap();
    assert!(killed >= 1, "the instance kept no connection");
    drop(z);
    assert_eq!(srv.dbsize(), 0, "values left on the server");
}
