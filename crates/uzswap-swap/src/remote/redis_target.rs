//! The far tier's client: [`RedisTarget`], everything the module comment
//! of `remote` describes but the configuration and the figures.

use super::{RemoteConfig, RemoteStats};
use crate::entry::{SlotRange, SwapSlot};
use crate::slot_table::SlotTable;
use crate::target::WritebackTarget;
use crate::{PAGE_SIZE, SWAPFILE_CLUSTER};
use parking_lot::Mutex;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection, ClusterPipeline};
use redis::{Client, Connection, Pipeline, RedisError};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use twox_hash::XxHash3_64;

/// Slots queued for deletion before the queue is sent.
pub const DELETE_BATCH: usize = 256;
/// Header bytes before the page in every value.
pub const VALUE_HEADER: usize = 40;
const MAGIC: [u8; 4] = *b"UZR1";

#[derive(Default)]
struct Counters {
    pages_out: AtomicU64,
    pages_in: AtomicU64,
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    round_trips: AtomicU64,
    connects: AtomicU64,
    write_errors: AtomicU64,
    oom_refusals: AtomicU64,
    write_skipped: AtomicU64,
    retries: AtomicU64,
    read_errors: AtomicU64,
    missing: AtomicU64,
    stale: AtomicU64,
    corrupt: AtomicU64,
    deleted: AtomicU64,
    delete_errors: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

enum Clients {
    Single(Client),
    Cluster(ClusterClient),
}

enum Conn {
    Single(Connection),
    Cluster(Box<ClusterConnection>),
}

/// A pipeline for either kind of connection (cluster pipelines route each
/// command to its node; the hash tags make a run's commands one node's).
enum Pipe {
    Single(Pipeline),
    Cluster(ClusterPipeline),
}

impl Pipe {
    fn new(cluster: bool) -> Pipe {
        if cluster {
            Pipe::Cluster(ClusterPipeline::new())
        } else {
            Pipe::Single(Pipeline::new())
        }
    }

    fn add(&mut self, cmd: redis::Cmd, ignore: bool) {
        match self {
            Pipe::Single(p) => {
                p.add_command(cmd);
                if ignore {
                    p.ignore();
                }
            }
            Pipe::Cluster(p) => {
                p.add_command(cmd);
                if ignore {
                    p.ignore();
                }
            }
        }
    }

    fn query<T: redis::FromRedisValue>(&self, conn: &mut Conn) -> redis::RedisResult<T> {
        match (self, conn) {
            (Pipe::Single(p), Conn::Single(c)) => p.query(c),
            (Pipe::Cluster(p), Conn::Cluster(c)) => p.query(c),
            _ => unreachable!("a pipeline goes to a connection of its own kind"),
        }
    }
}

/// An error's message cut to a line's length (a pipeline's lists every
/// failed command).
fn short(msg: &str) -> String {
    match msg.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &msg[..i]),
        None => msg.to_string(),
    }
}

/// Why a request failed, as the failure rules above sort it.
fn transport(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
}

/// The far tier on Redis. See the module comment.
pub struct RedisTarget {
    cfg: RemoteConfig,
    clients: Clients,
    conns: Mutex<Vec<Conn>>,
    instance: u64,
    /// One write version per slot (reserved, not committed: a large,
    /// mostly idle device costs 8 bytes per slot written, not per slot).
    versions: SlotTable<AtomicU64>,
    /// One bit per allocator cluster written at least once (for the drop).
    touched: Box<[AtomicU64]>,
    pending: Mutex<Vec<u64>>,
    /// Writes are refused until this instant (ns since `epoch`).
    down_until: AtomicU64,
    epoch: Instant,
    counters: Counters,
    /// `clear` ran: the drop has nothing left to unlink.
    cleared: AtomicBool,
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTarget")
            .field("target", &self.cfg.describe())
            .finish_non_exhaustive()
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom fills the 8 bytes of `b`, which it may write.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        // Without getrandom the id need only differ between instances.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ (std::process::id() as u64) << 32 ^ (&b as *const _ as u64)
    }
}

fn checksum(instance: u64, slot: u64, version: u64, page: &[u8]) -> u64 {
    let seed = instance
        ^ slot.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ version.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    XxHash3_64::oneshot_with_seed(seed, page)
}

impl RedisTarget {
    /// Connects, and checks the server (or the cluster, through the nodes
    /// given) answers a `PING`, for a device of `nslots` slots.
    pub fn connect(cfg: RemoteConfig, nslots: u64) -> Result<RedisTarget, String> {
        if cfg.nodes.is_empty() {
            return Err("no Redis node given".into());
        }
        let infos: Vec<String> = cfg
            .nodes
            .iter()
            .map(|(h, p)| {
                if h.contains(':') {
                    format!("redis://[{h}]:{p}/")
                } else {
                    format!("redis://{h}:{p}/")
                }
            })
            .collect();
        let clients = if cfg.cluster {
            ClusterClientBuilder::new(infos.clone())
                .connection_timeout(cfg.connect_timeout)
                .response_timeout(cfg.io_timeout)
                .retries(0)
                .build()
                .map(Clients::Cluster)
        } else {
            Client::open(infos[0].as_str()).map(Clients::Single)
        }
        .map_err(|e| format!("{}: {e}", cfg.describe()))?;
        let nclusters = nslots.div_ceil(SWAPFILE_CLUSTER as u64) as usize;
        let t = RedisTarget {
            versions: SlotTable::new(nslots as usize)
                .map_err(|e| format!("version table of {nslots} slots: {e}"))?,
            touched: (0..nclusters.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            instance: random_u64(),
            clients,
            conns: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            down_until: AtomicU64::new(0),
            epoch: Instant::now(),
            counters: Counters::default(),
            cleared: AtomicBool::new(false),
            cfg,
        };
        // Fail at creation, with the address, rather than at the first
        // writeback: a mistyped port should not look like a full pool.
        let mut c = t
            .open()
            .map_err(|e| format!("{}: cannot connect: {e}", t.cfg.describe()))?;
        let ping = match &mut c {
            Conn::Single(c) => redis::cmd("PING").query::<String>(c),
            Conn::Cluster(c) => redis::cmd("PING").query::<String>(&mut **c),
        };
        ping.map_err(|e| format!("{}: PING failed: {e}", t.cfg.describe()))?;
        t.conns.lock().push(c);
        Ok(t)
    }

    /// The instance's id, as it appears in its keys.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The key of `slot`: `uz{<instance>.<cluster>}<slot>`.
    pub fn key(&self, slot: u64) -> String {
        format!(
            "uz{{{:016x}.{}}}{}",
            self.instance,
            slot / SWAPFILE_CLUSTER as u64,
            slot
        )
    }

    /// The nodes as configured, for reports.
    pub fn describe(&self) -> String {
        self.cfg.describe()
    }

    pub fn stats(&self) -> RemoteStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Relaxed);
        RemoteStats {
            kind: WritebackTarget::kind(self),
            pages_out: l(&c.pages_out),
            pages_in: l(&c.pages_in),
            bytes_out: l(&c.bytes_out),
            bytes_in: l(&c.bytes_in),
            round_trips: l(&c.round_trips),
            connects: l(&c.connects),
            write_errors: l(&c.write_errors),
            oom_refusals: l(&c.oom_refusals),
            write_skipped: l(&c.write_skipped),
            retries: l(&c.retries),
            read_errors: l(&c.read_errors),
            missing: l(&c.missing),
            stale: l(&c.stale),
            corrupt: l(&c.corrupt),
            deleted: l(&c.deleted),
            delete_errors: l(&c.delete_errors),
        }
    }

    fn open(&self) -> redis::RedisResult<Conn> {
        add(&self.counters.connects, 1);
        match &self.clients {
            Clients::Single(cl) => {
                let c = cl.get_connection_with_timeout(self.cfg.connect_timeout)?;
                c.set_read_timeout(Some(self.cfg.io_timeout))?;
                c.set_write_timeout(Some(self.cfg.io_timeout))?;
                Ok(Conn::Single(c))
            }
            Clients::Cluster(cl) => Ok(Conn::Cluster(Box::new(cl.get_connection()?))),
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn backing_off(&self) -> bool {
        self.now_ns() < self.down_until.load(Relaxed)
    }

    fn back_off(&self) {
        let until = self.now_ns() + self.cfg.backoff.as_nanos() as u64;
        self.down_until.fetch_max(until, Relaxed);
    }

    /// Runs `pipe` on a pooled (or new) connection, up to `attempts` times
    /// while it meets transport errors; a server error ends it at once.
    fn exec<T: redis::FromRedisValue>(&self, pipe: &Pipe, attempts: u32) -> redis::RedisResult<T> {
        let mut last = None;
        for a in 0..attempts.max(1) {
            if a > 0 {
                add(&self.counters.retries, 1);
                // 5, 10, 20... ms: long enough for a restarting server's
                // accept queue, short enough that a few tries stay well
                // inside a fault's patience.
                std::thread::sleep(Duration::from_millis(5 << (a - 1).min(6)));
            }
            let pooled = self.conns.lock().pop();
            let mut conn = match pooled {
                Some(c) => c,
                None => match self.open() {
                    Ok(c) => c,
                    Err(e) => {
                        last = Some(e);
                        continue;
                    }
                },
            };
            add(&self.counters.round_trips, 1);
            match pipe.query(&mut conn) {
                Ok(v) => {
                    self.conns.lock().push(conn);
                    return Ok(v);
                }
                Err(e) if transport(&e) => {
                    // The connection is broken, and so, likely, is every
                    // other idle one (a restarted server): drop them all.
                    self.conns.lock().clear();
                    last = Some(e);
                }
                Err(e) => {
                    self.conns.lock().push(conn);
                    return Err(e);
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn encode(&self, out: &mut Vec<u8>, slot: u64, version: u64, page: &[u8]) {
        out.clear();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        out.extend_from_slice(&self.instance.to_le_bytes());
        out.extend_from_slice(&slot.to_le_bytes());
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&checksum(self.instance, slot, version, page).to_le_bytes());
        out.extend_from_slice(page);
    }

    /// Checks the value read for `slot` and copies its page into `dst`.
    fn decode(&self, slot: u64, val: Option<&[u8]>, dst: &mut [u8]) -> io::Result<()> {
        let bad = |c: &AtomicU64, what: String| {
            add(c, 1);
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: page of slot {slot} ({}): {what}",
                    self.cfg.describe(),
                    self.key(slot)
                ),
            ))
        };
        let Some(v) = val else {
            return bad(
                &self.counters.missing,
                "missing on the server (restarted empty, flushed or evicted)".into(),
            );
        };
        let u = |at: usize| u64::from_le_bytes(v[at..at + 8].try_into().expect("8 bytes"));
        if v.len() != VALUE_HEADER + PAGE_SIZE
            || v[..4] != MAGIC
            || v[4..8] != (PAGE_SIZE as u32).to_le_bytes()
        {
            return bad(
                &self.counters.corrupt,
                format!("not a page value ({} bytes)", v.len()),
            );
        }
        let (inst, s, ver, sum) = (u(8), u(16), u(24), u(32));
        if inst != self.instance || s != slot {
            return bad(
                &self.counters.stale,
                format!("the value of instance {inst:016x} slot {s}"),
            );
        }
        let want = self.versions.get(slot).load(Relaxed);
        if ver != want {
            return bad(
                &self.counters.stale,
                format!("version {ver}, expected {want}"),
            );
        }
        let page = &v[VALUE_HEADER..];
        if checksum(inst, s, ver, page) != sum {
            return bad(&self.counters.corrupt, "checksum mismatch".into());
        }
        dst.copy_from_slice(page);
        Ok(())
    }

    fn touch(&self, slot: u64) {
        let c = slot / SWAPFILE_CLUSTER as u64;
        let bit = 1u64 << (c % 64);
        let w = &self.touched[(c / 64) as usize];
        if w.load(Relaxed) & bit == 0 {
            w.fetch_or(bit, Relaxed);
        }
    }

    /// Queue `npages` slots from `slot` for deletion; once the queue holds
    /// a batch, send it and free its slots in `alloc`.
    pub(crate) fn release(&self, slot: SwapSlot, npages: u64, alloc: &crate::device::DeviceAlloc) {
        let batch = {
            let mut q = self.pending.lock();
            q.extend(slot.0..slot.0 + npages);
            if q.len() < DELETE_BATCH {
                return;
            }
            std::mem::take(&mut *q)
        };
        self.delete_and_free(batch, alloc);
    }

    /// Send the queued deletes now and free their slots.
    pub(crate) fn flush_deletes(&self, alloc: &crate::device::DeviceAlloc) {
        let batch = std::mem::take(&mut *self.pending.lock());
        if !batch.is_empty() {
            self.delete_and_free(batch, alloc);
        }
    }

    fn delete_and_free(&self, mut slots: Vec<u64>, alloc: &crate::device::DeviceAlloc) {
        slots.sort_unstable();
        if !self.backing_off() {
            let pipe = self.unlink_pipe(&slots);
            match self.exec::<()>(&pipe, 1) {
                Ok(()) => add(&self.counters.deleted, slots.len() as u64),
                Err(_) => add(&self.counters.delete_errors, 1),
            }
        } else {
            add(&self.counters.delete_errors, 1);
        }
        for s in slots {
            let r = alloc.free_range(SwapSlot(s), 1);
            debug_assert!(r.is_ok(), "freeing remote slot {s}: {r:?}");
        }
    }

    /// One `UNLINK` per allocator cluster (one hash slot) among `slots`
    /// (sorted).
    fn unlink_pipe(&self, slots: &[u64]) -> Pipe {
        let mut pipe = Pipe::new(self.cfg.cluster);
        for group in
            slots.chunk_by(|a, b| a / SWAPFILE_CLUSTER as u64 == b / SWAPFILE_CLUSTER as u64)
        {
            let mut cmd = redis::cmd("UNLINK");
            for &s in group {
                cmd.arg(self.key(s));
            }
            pipe.add(cmd, true);
        }
        pipe
    }

    /// Unlink every value this target wrote, now: for a process that exits
    /// without dropping its device (a program under the preload library).
    /// Loads of those slots fail afterwards (missing), as they must.
    pub fn clear(&self) {
        if !self.cleared.swap(true, Relaxed) {
            self.clear_all();
        }
    }

    /// Unlink every slot of every cluster this target wrote (at drop).
    fn clear_all(&self) {
        let mut slots = Vec::new();
        for (w, word) in self.touched.iter().enumerate() {
            let mut bits = word.load(Relaxed);
            while bits != 0 {
                let c = (w * 64) as u64 + bits.trailing_zeros() as u64;
                bits &= bits - 1;
                let first = c * SWAPFILE_CLUSTER as u64;
                let end = (first + SWAPFILE_CLUSTER as u64).min(self.versions.len() as u64);
                slots.extend((first..end).filter(|&s| self.versions.get(s).load(Relaxed) != 0));
            }
        }
        // Backing off after a failed write (a timeout on a busy server, as
        // often as a dead one), one try: skipped, it left every value.
        let tries = if self.backing_off() {
            1
        } else {
            1 + self.cfg.retries
        };
        for chunk in slots.chunks(8 * SWAPFILE_CLUSTER) {
            let pipe = self.unlink_pipe(chunk);
            // Retried as reads are (an `UNLINK` is idempotent): one broken
            // pooled connection, or a reply that timed out on a busy
            // server after part of the pipeline ran, left the rest of the
            // program's values on the server.
            if self.exec::<()>(&pipe, tries).is_err() {
                // Unreachable: what is left there expires with the server's
                // data; do not pay the retries per chunk.
                add(&self.counters.delete_errors, 1);
                return;
            }
            add(&self.counters.deleted, chunk.len() as u64);
        }
    }
}

impl WritebackTarget for RedisTarget {
    fn kind(&self) -> &'static str {
        if self.cfg.cluster {
            "redis-cluster"
        } else {
            "redis"
        }
    }

    fn write(&self, first: SwapSlot, pages: &[&[u8]]) -> io::Result<()> {
        if self.backing_off() {
            add(&self.counters.write_skipped, 1);
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("{}: backing off after a failed write", self.cfg.describe()),
            ));
        }
        let mut pipe = Pipe::new(self.cfg.cluster);
        let mut val = Vec::with_capacity(VALUE_HEADER + PAGE_SIZE);
        let mut bytes = 0u64;
        for (i, page) in pages.iter().enumerate() {
            let slot = first.0 + i as u64;
            let v = self.versions.get(slot).fetch_add(1, Relaxed) + 1;
            self.encode(&mut val, slot, v, page);
            let key = self.key(slot);
            bytes += (key.len() + val.len()) as u64;
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(&val[..]);
            pipe.add(cmd, true);
            self.touch(slot);
        }
        match self.exec::<()>(&pipe, 2) {
            Ok(()) => {
                add(&self.counters.pages_out, pages.len() as u64);
                add(&self.counters.bytes_out, bytes);
                Ok(())
            }
            Err(e) => {
                add(&self.counters.write_errors, 1);
                // A pipeline reports each failed command; a full server
                // fails them all with OOM.
                let msg = e.to_string();
                let oom = e.code() == Some("OOM") || msg.contains("\"OOM\"");
                if oom {
                    add(&self.counters.oom_refusals, 1);
                }
                self.back_off();
                let why = if oom {
                    "server out of memory (OOM: maxmemory reached, noeviction)".to_string()
                } else {
                    short(&msg)
                };
                Err(io::Error::other(format!(
                    "{}: write of {} pages failed: {why}",
                    self.cfg.describe(),
                    pages.len(),
                )))
            }
        }
    }

    fn read(&self, first: SwapSlot, buf: &mut [u8]) -> io::Result<()> {
        let n = (buf.len() / PAGE_SIZE) as u64;
        self.read_runs(&[SlotRange::new(first, n)], buf)
    }

    /// One pipeline of `GET`s for every slot of every stretch: a load whose
    /// folio lies in several stretches pays one round trip, not one each.
    fn read_runs(&self, runs: &[SlotRange], buf: &mut [u8]) -> io::Result<()> {
        let mut pipe = Pipe::new(self.cfg.cluster);
        let slots: Vec<u64> = runs.iter().flat_map(|r| r.start.0..r.end()).collect();
        let n = slots.len();
        for &s in &slots {
            let mut cmd = redis::cmd("GET");
            cmd.arg(self.key(s));
            pipe.add(cmd, false);
        }
        let vals: Vec<Option<Vec<u8>>> = match self.exec(&pipe, 1 + self.cfg.retries) {
            Ok(v) => v,
            Err(e) => {
                add(&self.counters.read_errors, 1);
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!(
                        "{}: read of {n} pages failed after {} tries: {}",
                        self.cfg.describe(),
                        1 + self.cfg.retries,
                        short(&e.to_string())
                    ),
                ));
            }
        };
        if vals.len() != n {
            add(&self.counters.read_errors, 1);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {} replies to {n} reads",
                    self.cfg.describe(),
                    vals.len()
                ),
            ));
        }
        let mut got = 0u64;
        for ((v, dst), &s) in vals.iter().zip(buf.chunks_exact_mut(PAGE_SIZE)).zip(&slots) {
            got += v.as_ref().map_or(0, |v| v.len() as u64);
            if let Err(e) = self.decode(s, v.as_deref(), dst) {
                add(&self.counters.read_errors, 1);
                return Err(e);
            }
        }
        add(&self.counters.pages_in, n as u64);
        add(&self.counters.bytes_in, got);
        Ok(())
    }

    // No readahead: a load already reads every slot its folio's objects
    // touch in one pipeline, and a value fetched ahead would need a cache
    // of its own outside the budget.
}

impl Drop for RedisTarget {
    fn drop(&mut self) {
        self.clear();
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_binds_slot_and_version() {
        let p = vec![7u8; PAGE_SIZE];
        let a = checksum(1, 2, 3, &p);
        assert_ne!(a, checksum(1, 3, 3, &p));
        assert_ne!(a, checksum(1, 2, 4, &p));
        assert_ne!(a, checksum(2, 2, 3, &p));
    }
}
