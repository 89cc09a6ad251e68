//! remote: the far tier — a swap device whose slots live on Redis (one
//! server, or a Redis Cluster), for cold pages that outgrow the machine.
//!
//! Owns: the client (a pool of connections), the instance's key space on
//! the server, a per-slot write version, the batch of deletes not yet sent,
//! and its figures ([`RemoteStats`]). It does not own slots: the device's
//! allocator does, and a slot freed by the layers above is handed back to
//! that allocator here, after its value was deleted.
//!
//! # Keys and values
//! Slot `s` of instance `I` (a random 64-bit id, so instances sharing a
//! server never meet) is the key `uz{I.c}s`, where `c = s / 512` is the
//! slot's allocator cluster. The braces are a Redis Cluster hash tag: every
//! slot of one allocator cluster hashes to the same Redis slot, and since a
//! run the layers above write or read never crosses an allocator cluster,
//! each run is one pipeline to one node. Different clusters spread over the
//! shards.
//!
//! A value is a 40-byte header and the page: magic `UZR1`, payload length,
//! instance id, slot, write version, and a 64-bit XXH3 checksum of the page
//! seeded with the other fields. The version of each slot is bumped before
//! every write and kept in memory only; a read checks that the value is
//! there (a server restarted empty or flushed has lost it), that it names
//! this instance and slot (a value misfiled), that its version is the one
//! last written (a stale value, replayed or left from a write that
//! failed), and its checksum. Any mismatch is an error, never a page of
//! zeros. The pages the layers above write are sealed already
//! (AES-256-GCM, `uzswap::zswap::seal`, nonce from the slot and the seal's
//! own version): the header is integrity and diagnosis, the seal is
//! secrecy and authenticity.
//!
//! # Failures
//! - A write is one pipeline of `SET`s; a transport error (refused, reset,
//!   timed out) is retried once on a fresh connection (a pooled connection
//!   to a server that restarted fails its first use), then fails. A server
//!   error (`OOM` under `maxmemory` with `noeviction`, anything else) fails
//!   at once. Either way the target then refuses writes without trying for
//!   `backoff`, so a walk of the layers above does not pay a timeout per
//!   batch; those refusals are counted (`write_skipped`). The caller keeps
//!   its pages (the device's write contract).
//! - A read is retried `retries` times on transport errors, with a short
//!   growing sleep, each on a fresh connection, then fails with the last
//!   error. A value that is missing, stale or damaged is not retried.
//! - Deletes are best effort: a value left behind by a failed delete is
//!   harmless, since its slot's next write replaces it and its version no
//!   longer matches meanwhile.
//!
//! # Deletes and slot reuse
//! A freed slot is queued, not freed: the queue is sent as `UNLINK`s (one
//! per allocator cluster) once it holds [`DELETE_BATCH`] slots or on
//! [`SwapDevice::flush`](crate::SwapDevice::flush), and only then are the
//! slots given back to the allocator. So a delete can never land after a
//! new write to the same slot. On drop (or [`RedisTarget::clear`], which a
//! process that never drops its device calls at exit) the target unlinks
//! every slot it wrote, so a server shared by many runs keeps none of
//! them: retried as reads are, or tried once while the target backs off
//! after a failed write. The instance stops its shrinker before it lets
//! go of the cache, so that drop runs in the owner's thread and not in a
//! shrinker thread the process may end first. A process killed, or ending
//! in `_exit` or `exec`, leaves its values behind under its own instance
//! id.
//!
//! # Locks
//! `conns` (the idle connections) and `pending` (the delete queue) are
//! leaf mutexes held only to push or pop; no network call is made under
//! either. The allocator's locks are taken (by `free_range`) with neither
//! held. Versions and figures are atomics: a slot's version is written only
//! by the writer that owns the slot and read by loads the layers above
//! order after that write (as for the seal's records).

//!
//! The client itself (`redis_target`) is left out of `--cfg loom` builds,
//! which model the allocator only; there [`RedisTarget`] is an empty type
//! whose `connect` refuses.

use std::time::Duration;

#[cfg(not(loom))]
mod redis_target;
#[cfg(not(loom))]
pub use redis_target::{RedisTarget, DELETE_BATCH, VALUE_HEADER};
#[cfg(loom)]
mod stub;
#[cfg(loom)]
pub use stub::RedisTarget;

/// How to reach the far tier. Written as a URL:
/// `redis://HOST:PORT[,HOST:PORT...][?timeout_ms=N&connect_timeout_ms=N&retries=N&backoff_ms=N&cluster=1]`.
/// More than one node (or `cluster=1`) means a Redis Cluster, whose other
/// nodes are found from these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteConfig {
    /// `(host, port)` of each node given.
    pub nodes: Vec<(String, u16)>,
    /// Talk to a Redis Cluster (sharded by hash slot).
    pub cluster: bool,
    /// Limit on opening one connection.
    pub connect_timeout: Duration,
    /// Limit on each request's reply (and on sending it).
    pub io_timeout: Duration,
    /// Further tries of a read that met a transport error.
    pub retries: u32,
    /// After a failed write, how long writes are refused without trying.
    pub backoff: Duration,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            nodes: Vec::new(),
            cluster: false,
            connect_timeout: Duration::from_millis(1000),
            io_timeout: Duration::from_millis(1000),
            retries: 3,
            backoff: Duration::from_millis(1000),
        }
    }
}

impl RemoteConfig {
    /// Parses `redis://HOST:PORT[,HOST:PORT...][?OPTIONS]` (see the type).
    pub fn parse(url: &str) -> Result<RemoteConfig, String> {
        let rest = url
            .strip_prefix("redis://")
            .ok_or_else(|| format!("{url}: a remote target is redis://HOST:PORT[,HOST:PORT...]"))?;
        let (hosts, query) = match rest.split_once('?') {
            Some((h, q)) => (h.trim_end_matches('/'), Some(q)),
            None => (rest.trim_end_matches('/'), None),
        };
        let mut cfg = RemoteConfig::default();
        for h in hosts.split(',') {
            let (host, port) = h
                .rsplit_once(':')
                .ok_or_else(|| format!("{url}: node {h:?} is not HOST:PORT"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("{url}: node {h:?} has no valid port"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(format!("{url}: node {h:?} has no host"));
            }
            cfg.nodes.push((host.to_string(), port));
        }
        for kv in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|s| !s.is_empty())
        {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let n: u64 = v
                .parse()
                .map_err(|_| format!("{url}: option {k}={v:?} is not a number"))?;
            match k {
                "timeout_ms" => cfg.io_timeout = Duration::from_millis(n.max(1)),
                "connect_timeout_ms" => cfg.connect_timeout = Duration::from_millis(n.max(1)),
                "retries" => cfg.retries = n.min(100) as u32,
                "backoff_ms" => cfg.backoff = Duration::from_millis(n),
                "cluster" => cfg.cluster = n != 0,
                _ => {
                    return Err(format!(
                        "{url}: unknown option {k:?} (timeout_ms, connect_timeout_ms, \
                         retries, backoff_ms, cluster)"
                    ))
                }
            }
        }
        cfg.cluster |= cfg.nodes.len() > 1;
        Ok(cfg)
    }

    /// The nodes as a URL, for messages.
    pub fn describe(&self) -> String {
        let n: Vec<String> = self.nodes.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        format!("redis://{}", n.join(","))
    }
}

/// The far tier's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(loom), derive(serde::Serialize))]
pub struct RemoteStats {
    /// "redis" or "redis-cluster".
    pub kind: &'static str,
    /// Pages stored on the server.
    pub pages_out: u64,
    /// Pages read back and verified.
    pub pages_in: u64,
    /// Bytes of keys and values sent in writes (the payload on the wire,
    /// without the protocol's framing of a few bytes per command).
    pub bytes_out: u64,
    /// Bytes of values received in reads.
    pub bytes_in: u64,
    /// Pipelines sent (each one round trip to a node).
    pub round_trips: u64,
    /// Connections opened.
    pub connects: u64,
    /// Writes that failed (transport or server error); their pages stayed
    /// with the caller.
    pub write_errors: u64,
    /// Of those, refused by a full server (`OOM`: maxmemory, noeviction).
    pub oom_refusals: u64,
    /// Writes refused without trying, while backing off after a failure.
    pub write_skipped: u64,
    /// Requests retried after a transport error (a read up to `retries`
    /// times, a write once).
    pub retries: u64,
    /// Reads that failed (after their retries, or at once for bad values).
    pub read_errors: u64,
    /// Values not on the server (restarted empty, flushed, evicted).
    pub missing: u64,
    /// Values of another version or another slot or instance than expected.
    pub stale: u64,
    /// Values whose header or checksum is damaged.
    pub corrupt: u64,
    /// Slots whose values were deleted (their `UNLINK` sent).
    pub deleted: u64,
    /// Delete batches that failed (their values stay until overwritten).
    pub delete_errors: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let c = RemoteConfig::parse("redis://127.0.0.1:6379").unwrap();
        assert_eq!(c.nodes, vec![("127.0.0.1".to_string(), 6379)]);
        assert!(!c.cluster);
        let c = RemoteConfig::parse(
            "redis://a:1,b:2,[::1]:3/?timeout_ms=50&retries=1&backoff_ms=7&connect_timeout_ms=9",
        )
        .unwrap();
        assert_eq!(c.nodes.len(), 3);
        assert_eq!(c.nodes[2], ("::1".to_string(), 3));
        assert!(c.cluster);
        assert_eq!(c.io_timeout, Duration::from_millis(50));
        assert_eq!(c.connect_timeout, Duration::from_millis(9));
        assert_eq!(c.retries, 1);
        assert_eq!(c.backoff, Duration::from_millis(7));
        assert!(
            RemoteConfig::parse("redis://h:1?cluster=1")
                .unwrap()
                .cluster
        );
        for bad in [
            "http://a:1",
            "redis://a",
            "redis://a:x",
            "redis://:1",
            "redis://a:1?bogus=1",
            "redis://a:1?retries=x",
        ] {
            assert!(RemoteConfig::parse(bad).is_err(), "{bad}");
        }
    }
}
