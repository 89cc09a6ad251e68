//! `uzswap soak --duration D`: a long randomized run that checks every byte.
//!
//! Several regions of one instance, together `--factor` (2-4) times the
//! budget, with writeback and the shrinker on. Worker threads pick pages
//! (most from a hot window that drifts over the memory, the rest anywhere)
//! and do one *page operation* on each:
//!
//! - **load**: compare the whole page with its shadow copy;
//! - **store**: write a whole new page (zero, one repeated word, text-like
//!   or random bytes), or a few words at random offsets;
//! - **system call out**: `pwrite` the page to a scratch file (the kernel
//!   reads region memory), `pread` it back into a private buffer, compare;
//! - **system call in**: `pread` new bytes from the scratch file into the
//!   page (the kernel writes region memory);
//! - **discard**: `Uzswap::discard` (the page reads as zeros afterwards).
//!
//! Between operations a thread sometimes hints a range (`PageOut`, `Cold`,
//! `WillNeed`; not counted as page operations). A forker thread every
//! `--fork-every` seconds forks, every other time sharing the evicted
//! memory (the child takes it over with an instance of its own,
//! `Uzswap::adopt_inheriting`), else bringing it in first (`prepare_fork`);
//! the child compares every page with its copy of the shadow and writes
//! and checks some pages of its own (each page it checks is a page
//! operation); the run
//! ends with a pass that checks every page once more. Where the kernel's
//! faults inside system calls are not served (signal mode, user mode only)
//! system-call buffers are pinned first, as the preload library does.
//!
//! The shadow is plain memory, one copy of every page; a page and its
//! shadow change together under the page's stripe lock. A mismatch is
//! printed (the first 20), counted, and the shadow set to what the page
//! held, so each corruption counts once. The run fails (exit 1) on any
//! mismatch, any error (a failed system call, hint, fork child, or a fault
//! uzswap could not resolve) or fewer page operations than `--min-ops`.
//!
//! Locking: `gate` (read per batch of operations; write by the forker, so
//! a fork sees no operation half done and the child can take any stripe)
//! → one stripe lock at a time. uzswap's own locks are below both.

use crate::usemem::{parse_size, Handler};
use anyhow::{bail, Context};
use parking_lot::{Mutex, RwLock};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uzswap::region::{Advice, Config, HandlerMode, KernelFaults, Region, Uzswap};
use uzswap::PAGE_SIZE;

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// How long to run: seconds, or with a suffix s, m, h (e.g. 30s, 10m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: f64,
    /// Memory budget (resident + pool).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub budget: u64,
    /// The regions' total size, as a multiple of the budget (1..=8).
    #[arg(long, default_value_t = 3.0)]
    pub factor: f64,
    /// Regions the memory is split into.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub regions: u32,
    /// Worker threads.
    #[arg(long, default_value_t = 4, value_parser = uzswap_cli::parse::parse_threads)]
    pub threads: usize,
    /// Percent of operations on the hot window (half the budget, drifting
    /// over the memory); the rest go anywhere.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub hot_percent: u32,
    /// Seconds between forks (0: no forks).
    #[arg(long, default_value_t = 5.0)]
    pub fork_every: f64,
    /// How faults are resolved.
    #[arg(long, value_enum, default_value = "block")]
    pub handler: Handler,
    /// Compressor: lz4, zstd[:level], lzo, deflate[:level].
    #[arg(long, default_value = "lz4")]
    pub compressor: String,
    /// Folio size, 4K..2M, a power of two: the chunk up to 64K, larger the
    /// read-ahead window of forward scans.
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    /// Directory of the swap device (default: $TMPDIR, else /tmp).
    #[arg(long)]
    pub swap_dir: Option<std::path::PathBuf>,
    /// Swap device size (default: the regions' total size).
    #[arg(long, value_parser = parse_size)]
    pub swap_size: Option<u64>,
    /// Seed of the workers' random choices (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Fail unless at least this many page operations were done.
    #[arg(long, default_value_t = 0)]
    pub min_ops: u64,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub progress: f64,
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// The sampler runs while the workers do: its splits and marks under
    /// every path the soak takes.
    #[command(flatten)]
    pub young: crate::young_arg::SampleYoungArg,
}

/// A duration: seconds, or a number with the suffix s, m or h; above 0 and
/// at most a week.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (seconds, or with s, m, h)"))?;
    let secs = v * mul;
    if !secs.is_finite() || secs <= 0.0 || secs > 7.0 * 86400.0 {
        return Err(format!(
            "duration '{s}' out of range: above 0, at most 7 days"
        ));
    }
    Ok(secs)
}

const STRIPES: usize = 1 << 16;
/// Operations a worker does per hold of the gate.
const BATCH: usize = 256;
/// Mismatches printed in full.
const SHOW: u64 = 20;

#[derive(Default)]
struct Counters {
    loads: AtomicU64,
    stores: AtomicU64,
    partial_stores: AtomicU64,
    syscall_out: AtomicU64,
    syscall_in: AtomicU64,
    discards: AtomicU64,
    hints: AtomicU64,
    forks: AtomicU64,
    /// Of `forks`, those whose child took the evicted memory over from its
    /// copy of the instance (`shared_fork`).
    shared_forks: AtomicU64,
    fork_pages: AtomicU64,
    final_pages: AtomicU64,
    mismatches: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn page_ops(&self) -> u64 {
        [
            &self.loads,
            &self.stores,
            &self.partial_stores,
            &self.syscall_out,
            &self.syscall_in,
            &self.discards,
            &self.fork_pages,
            &self.final_pages,
        ]
        .iter()
        .map(|c| c.load(Relaxed))
        .sum()
    }
}

/// Plain memory holding one copy of every page of the regions.
struct Shadow {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the shadow is shared memory whose pages are only touched under
// their stripe lock (or, in a fork child, by its one thread).
unsafe impl Send for Shadow {}
// SAFETY: as above.
unsafe impl Sync for Shadow {}

impl Shadow {
    fn new(len: usize) -> anyhow::Result<Shadow> {
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mapping the shadow: {}", std::io::Error::last_os_error());
        }
        Ok(Shadow {
            ptr: p as *mut u8,
            len,
        })
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer used.
        unsafe { libc::munmap(self.ptr as *mut _, self.len) };
    }
}

struct Soak {
    uz: Uzswap,
    /// The instance's configuration, for a sharing fork's child.
    cfg: Config,
    regions: Vec<Region>,
    region_pages: usize,
    pages: usize,
    shadow: Shadow,
    stripes: Box<[Mutex<()>]>,
    gate: RwLock<()>,
    pin: bool,
    hot_pages: usize,
    hot_percent: u32,
    hot_base: AtomicU64,
    ctr: Counters,
    stop: AtomicBool,
    t0: Instant,
}

/// splitmix64: a small, fast, seedable generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// New page content: zero, a repeated word, text-like (compressible) or
/// random bytes, so the same-filled, compressed and stored-as-is paths all
/// see traffic.
fn fill(rng: &mut Rng, out: &mut [u8]) {
    let words = out.len() / 8;
    match rng.below(10) {
        0 => out.fill(0),
        1 => {
            let w = rng.next().to_ne_bytes();
            for c in out.chunks_exact_mut(8) {
                c.copy_from_slice(&w);
            }
        }
        2..=6 => {
            // Bytes from a 16-letter alphabet in runs: about 2-3:1.
            let mut x = rng.next();
            for i in 0..words {
                if i % 4 == 0 {
                    x = rng.next();
                }
                let b = (b'a' + (x & 15) as u8).to_ne_bytes()[0];
                out[i * 8..i * 8 + 8].fill(b);
                x >>= 4;
            }
        }
        _ => {
            for c in out.chunks_exact_mut(8) {
                c.copy_from_slice(&rng.next().to_ne_bytes());
            }
        }
    }
}

impl Soak {
    fn page_ptr(&self, g: usize) -> *mut u8 {
        let r = &self.regions[g / self.region_pages];
        // SAFETY: in bounds of the live region.
        unsafe { r.as_ptr().add((g % self.region_pages) * PAGE_SIZE) }
    }

    fn shadow_ptr(&self, g: usize) -> *mut u8 {
        // SAFETY: in bounds of the shadow.
        unsafe { self.shadow.ptr.add(g * PAGE_SIZE) }
    }

    /// Page `g` of the regions and its shadow. The caller holds the page's
    /// stripe lock (or is a fork child, alone).
    #[allow(clippy::mut_from_ref)]
    unsafe fn pair(&self, g: usize) -> (&mut [u8], &mut [u8]) {
        // SAFETY: both pages are in bounds of live mappings, and the caller
        // makes sure no one else uses them meanwhile.
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.page_ptr(g), PAGE_SIZE),
                std::slice::from_raw_parts_mut(self.shadow_ptr(g), PAGE_SIZE),
            )
        }
    }

    fn pick(&self, rng: &mut Rng) -> usize {
        if rng.below(100) < u64::from(self.hot_percent) {
            let base = self.hot_base.load(Relaxed) as usize;
            (base + rng.below(self.hot_pages as u64) as usize) % self.pages
        } else {
            rng.below(self.pages as u64) as usize
        }
    }

    /// Compare page `g` with its shadow; on a mismatch, report it and take
    /// the page's bytes as the shadow's.
    fn check(&self, g: usize, got: &[u8], want: &mut [u8], what: &str) -> bool {
        if got == want {
            return true;
        }
        let n = self.ctr.mismatches.fetch_add(1, Relaxed) + 1;
        if n <= SHOW {
            let off = got
                .iter()
                .zip(want.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            let zeros = got.iter().all(|&b| b == 0);
            let end = (off + 16).min(PAGE_SIZE);
            eprintln!(
                "soak: MISMATCH ({what}) region {} page {} at byte {off} after {:.3} s: \
                 expected {:02x?}, found {:02x?}{}",
                g / self.region_pages,
                g % self.region_pages,
                self.t0.elapsed().as_secs_f64(),
                &want[off..end],
                &got[off..end],
                if zeros {
                    " (the page reads as zeros)"
                } else {
                    ""
                }
            );
        }
        want.copy_from_slice(got);
        false
    }

    fn error(&self, what: std::fmt::Arguments<'_>) {
        let n = self.ctr.errors.fetch_add(1, Relaxed) + 1;
        if n <= SHOW {
            eprintln!("soak: ERROR {what}");
        }
    }

    /// Pin `g` for a system call where the kernel's faults are not served.
    fn pinned(&self, g: usize, write: bool) -> Option<uzswap::region::PinGuard<'_>> {
        self.pin
            .then(|| self.uz.pin(self.page_ptr(g) as usize, PAGE_SIZE, write))
    }

    fn op(&self, rng: &mut Rng, buf: &mut [u8], file: &std::fs::File, slot: u64) {
        let roll = rng.below(1000);
        if roll < 1 {
            self.hint(rng);
            return;
        }
        let g = self.pick(rng);
        let _lock = self.stripes[g % STRIPES].lock();
        // SAFETY: we hold the page's stripe lock.
        let (page, shadow) = unsafe { self.pair(g) };
        let fd = file.as_raw_fd();
        let off = (slot * PAGE_SIZE as u64) as libc::off_t;
        match roll {
            // Load: the whole page against its shadow.
            1..=449 => {
                self.check(g, page, shadow, "load");
                self.ctr.loads.fetch_add(1, Relaxed);
            }
            // Store a whole new page.
            450..=649 => {
                fill(rng, buf);
                page.copy_from_slice(buf);
                shadow.copy_from_slice(buf);
                self.ctr.stores.fetch_add(1, Relaxed);
            }
            // Store a few words at random offsets.
            650..=799 => {
                for _ in 0..=rng.below(8) {
                    let i = rng.below((PAGE_SIZE / 8) as u64) as usize * 8;
                    let v = rng.next().to_ne_bytes();
                    page[i..i + 8].copy_from_slice(&v);
                    shadow[i..i + 8].copy_from_slice(&v);
                }
                self.ctr.partial_stores.fetch_add(1, Relaxed);
            }
            // The kernel reads the page: pwrite it out, read it back.
            800..=899 => {
                let pin = self.pinned(g, false);
                // SAFETY: the kernel reads one page of a live region.
                let w = unsafe { libc::pwrite(fd, page.as_ptr() as *const _, PAGE_SIZE, off) };
                drop(pin);
                if w != PAGE_SIZE as isize {
                    let e = std::io::Error::last_os_error();
                    self.error(format_args!("pwrite from page {g}: {w} ({e})"));
                    return;
                }
                // SAFETY: into our private buffer.
                let r = unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut _, PAGE_SIZE, off) };
                if r != PAGE_SIZE as isize {
                    let e = std::io::Error::last_os_error();
                    self.error(format_args!("pread of the scratch file: {r} ({e})"));
                    return;
                }
                self.check(g, buf, shadow, "system call out");
                self.ctr.syscall_out.fetch_add(1, Relaxed);
            }
            // The kernel writes the page: new bytes through the file.
            900..=989 => {
                fill(rng, buf);
                // SAFETY: from our private buffer.
                let w = unsafe { libc::pwrite(fd, buf.as_ptr() as *const _, PAGE_SIZE, off) };
                if w != PAGE_SIZE as isize {
                    let e = std::io::Error::last_os_error();
                    self.error(format_args!("pwrite to the scratch file: {w} ({e})"));
                    return;
                }
                let pin = self.pinned(g, true);
                // SAFETY: the kernel writes one page of a live region.
                let r = unsafe { libc::pread(fd, page.as_mut_ptr() as *mut _, PAGE_SIZE, off) };
                drop(pin);
                if r != PAGE_SIZE as isize {
                    let e = std::io::Error::last_os_error();
                    self.error(format_args!("pread into page {g}: {r} ({e})"));
                    return;
                }
                shadow.copy_from_slice(buf);
                self.ctr.syscall_in.fetch_add(1, Relaxed);
            }
            // Discard: the page reads as zeros.
            _ => {
                if let Err(e) = self.uz.discard(self.page_ptr(g) as usize, PAGE_SIZE) {
                    self.error(format_args!("discard of page {g}: {e}"));
                    return;
                }
                shadow.fill(0);
                self.ctr.discards.fetch_add(1, Relaxed);
            }
        }
    }

    /// A hint on 1..=16 chunks somewhere (no page changes).
    fn hint(&self, rng: &mut Rng) {
        let r = &self.regions[rng.below(self.regions.len() as u64) as usize];
        let chunk = self.uz.chunk_bytes();
        let chunks = r.len() / chunk;
        let n = 1 + rng.below(16) as usize;
        let first = rng.below(chunks.saturating_sub(n).max(1) as u64) as usize;
        let range = first * chunk..((first + n) * chunk).min(r.len());
        let advice = match rng.below(3) {
            0 => Advice::PageOut,
            1 => Advice::Cold,
            _ => Advice::WillNeed,
        };
        if let Err(e) = r.advise(range.clone(), advice) {
            self.error(format_args!("hint {advice:?} on {range:?}: {e}"));
        }
        self.ctr.hints.fetch_add(1, Relaxed);
    }

    fn worker(&self, seed: u64, slot: u64) {
        let mut rng = Rng(seed);
        let mut buf = vec![0u8; PAGE_SIZE];
        let file = match scratch_file() {
            Ok(f) => f,
            Err(e) => {
                self.error(format_args!("{e:#}"));
                return;
            }
        };
        while !self.stop.load(Relaxed) {
            let _g = self.gate.read();
            for _ in 0..BATCH {
                self.op(&mut rng, &mut buf, &file, slot);
            }
        }
    }

    /// One fork, no operation in flight (the gate). Every other fork is a
    /// sharing one (`Uzswap::prepare_fork_sharing`): the child takes the
    /// evicted chunks over with an instance of its own, from its copy of
    /// this one; the others bring every page in first and hold eviction
    /// (`prepare_fork`). The child checks every page against its copy of
    /// the shadow, then writes and checks 64 pages of its own, and reports
    /// through a pipe.
    fn fork_once(&self, rng: &mut Rng) {
        let _gate = self.gate.write();
        let sharing = self.ctr.forks.load(Relaxed) % 2 == 1;
        let prepared = if sharing {
            self.uz.prepare_fork_sharing().and_then(|g| {
                let rest = g.rest_for_sharing(Duration::from_millis(200))?;
                if rest.is_none() {
                    g.bring_in_all()?;
                }
                Ok((g, rest))
            })
        } else {
            self.uz.prepare_fork().map(|g| (g, None))
        };
        let (guard, rest) = match prepared {
            Ok(p) => p,
            Err(e) => {
                self.error(format_args!("preparing a fork: {e}"));
                return;
            }
        };
        let mut fds = [0i32; 2];
        // SAFETY: a fresh pipe.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            self.error(format_args!("pipe: {}", std::io::Error::last_os_error()));
            return;
        }
        let seed = rng.next();
        let shared = rest.is_some();
        // SAFETY: the child only reads and writes memory, writes the pipe
        // and exits; it takes no lock another thread could hold (the gate
        // is ours, so no stripe is held) and, but for a sharing child
        // (uzswap's threads at rest), allocates nothing.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            std::mem::forget(guard);
            let msg = match rest {
                Some(rest) => {
                    uzswap::compress::quiesce::reset_in_child();
                    drop(rest);
                    self.shared_child(seed)
                }
                None => {
                    let (pages, bad) = self.child_check(seed);
                    [pages, bad]
                }
            };
            // SAFETY: writing our own array to the pipe, then exiting
            // without running the parent's destructors.
            unsafe {
                libc::write(fds[1], msg.as_ptr() as *const _, 16);
                libc::_exit(0);
            }
        }
        drop(rest);
        drop(guard);
        // SAFETY: our end of the pipe.
        unsafe { libc::close(fds[1]) };
        if pid < 0 {
            self.error(format_args!("fork: {}", std::io::Error::last_os_error()));
            // SAFETY: as above.
            unsafe { libc::close(fds[0]) };
            return;
        }
        drop(_gate);
        let mut msg = [0u64; 2];
        // SAFETY: reading into our own array.
        let n = unsafe { libc::read(fds[0], msg.as_mut_ptr() as *mut _, 16) };
        // SAFETY: as above.
        unsafe { libc::close(fds[0]) };
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if n != 16 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            self.error(format_args!(
                "fork child: status {status:#x}, report {n} bytes"
            ));
            return;
        }
        self.ctr.forks.fetch_add(1, Relaxed);
        if shared {
            self.ctr.shared_forks.fetch_add(1, Relaxed);
        }
        self.ctr.fork_pages.fetch_add(msg[0], Relaxed);
        if msg[1] > 0 {
            self.ctr.mismatches.fetch_add(msg[1], Relaxed);
            eprintln!("soak: MISMATCH in a fork child: {} pages differ", msg[1]);
        }
    }

    /// A sharing fork's child: the parent's instance given up, one of its
    /// own (a quarter of the budget) that takes every region over with its
    /// evicted chunks, then `child_check` through it. (Pages checked,
    /// pages that differed); a child that cannot take over reports one bad
    /// page and says why.
    fn shared_child(&self, seed: u64) -> [u64; 2] {
        // SAFETY: just forked after `ForkGuard::rest_for_sharing` held; the parent's
        // instance is never used again but by the take-over below.
        unsafe { self.uz.abandon_in_child() };
        let cfg = Config {
            budget: self.cfg.budget / 4,
            ..self.cfg.clone()
        };
        let own = match Uzswap::new(cfg) {
            Ok(own) => own,
            Err(e) => {
                eprintln!("soak: fork child: an instance of its own: {e}");
                return [0, 1];
            }
        };
        let held = own.hold_eviction();
        for r in &self.regions {
            // SAFETY: as above; the parent's regions are never used again
            // but through these addresses.
            match unsafe { own.adopt_inheriting(r) } {
                Ok(r) => std::mem::forget(r),
                Err(e) => {
                    eprintln!("soak: fork child: taking a region over: {e}");
                    return [0, 1];
                }
            }
        }
        drop(held);
        let (pages, bad) = self.child_check(seed);
        std::mem::forget(own);
        [pages, bad]
    }

    /// The fork child's work (no allocation, no locks): (pages checked,
    /// pages that differed).
    fn child_check(&self, seed: u64) -> (u64, u64) {
        let (mut pages, mut bad) = (0u64, 0u64);
        for g in 0..self.pages {
            // SAFETY: the child is alone; nothing else touches the pages.
            let (page, shadow) = unsafe { self.pair(g) };
            pages += 1;
            bad += u64::from(page != shadow);
        }
        let mut rng = Rng(seed);
        for _ in 0..64 {
            let g = rng.below(self.pages as u64) as usize;
            // SAFETY: as above.
            let (page, shadow) = unsafe { self.pair(g) };
            let v = rng.next().to_ne_bytes();
            for c in page.chunks_exact_mut(8) {
                c.copy_from_slice(&v);
            }
            for c in shadow.chunks_exact_mut(8) {
                c.copy_from_slice(&v);
            }
            pages += 2;
            bad += u64::from(page != shadow);
        }
        (pages, bad)
    }
}

/// An unlinked scratch file for one worker's system calls.
fn scratch_file() -> anyhow::Result<std::fs::File> {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "uzswap-soak-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("scratch file in {}", dir.display()))?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.folio.is_power_of_two() || !(PAGE_SIZE as u64..=2 << 20).contains(&args.folio) {
        bail!("--folio must be a power of two from 4K to 2M");
    }
    if !(1.0..=8.0).contains(&args.factor) {
        bail!("--factor must be between 1 and 8");
    }
    if !(args.fork_every == 0.0 || (0.1..=3600.0).contains(&args.fork_every)) {
        bail!("--fork-every must be 0 or 0.1..=3600 seconds");
    }
    if !(args.progress == 0.0 || (0.1..=3600.0).contains(&args.progress)) {
        bail!("--progress must be 0 or 0.1..=3600 seconds");
    }
    let order = args.folio.trailing_zeros() - PAGE_SIZE.trailing_zeros();
    let chunk = args.folio as usize;
    let total = (args.budget as f64 * args.factor) as u64;
    let region_bytes = (total / u64::from(args.regions)).next_multiple_of(chunk as u64) as usize;
    let region_pages = region_bytes / PAGE_SIZE;
    let pages = region_pages * args.regions as usize;
    let mut cfg = Config {
        budget: args.budget,
        folio_order: order,
        handler: match args.handler {
            Handler::Block => HandlerMode::Block,
            Handler::Spin => HandlerMode::Spin { micros: 200 },
            Handler::Signal => HandlerMode::Signal,
            Handler::Auto => HandlerMode::Auto,
        },
        sample_young: args.young.mode(),
        ..Config::default()
    };
    cfg.zswap.compressor = args.compressor.clone();
    if let Some(wb) = cfg.writeback.as_mut() {
        wb.dir = args.swap_dir.clone();
        wb.size_bytes = args.swap_size.unwrap_or((pages * PAGE_SIZE) as u64);
    }
    // Threads are counted from their start, so that a sharing fork can
    // bring them to rest (`shared_fork`).
    uzswap::compress::quiesce::enable();
    let uz = Uzswap::new(cfg.clone())?;
    let mut regions = Vec::new();
    for _ in 0..args.regions {
        regions.push(uz.region(region_bytes)?);
    }
    let pin = uz.kernel_faults() == KernelFaults::NotServed;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let hot_pages = ((args.budget / 2) as usize / PAGE_SIZE).clamp(1, pages);
    let soak = Arc::new(Soak {
        uz,
        cfg,
        regions,
        region_pages,
        pages,
        shadow: Shadow::new(pages * PAGE_SIZE)?,
        stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        gate: RwLock::new(()),
        pin,
        hot_pages,
        hot_percent: args.hot_percent,
        hot_base: AtomicU64::new(0),
        ctr: Counters::default(),
        stop: AtomicBool::new(false),
        t0: Instant::now(),
    });
    eprintln!(
        "soak: {} regions of {} MiB ({:.1}x the {} MiB budget), {} threads, {:?} handler, \
         seed {seed}, {:.0} s",
        args.regions,
        region_bytes >> 20,
        (pages * PAGE_SIZE) as f64 / args.budget as f64,
        args.budget >> 20,
        args.threads,
        args.handler,
        args.duration
    );
    // First touch: every page gets content (counted as stores).
    {
        let mut rng = Rng(seed ^ 0xf111);
        let mut buf = vec![0u8; PAGE_SIZE];
        for g in 0..pages {
            fill(&mut rng, &mut buf);
            // SAFETY: no worker runs yet.
            let (page, shadow) = unsafe { soak.pair(g) };
            page.copy_from_slice(&buf);
            shadow.copy_from_slice(&buf);
        }
        soak.ctr.stores.fetch_add(pages as u64, Relaxed);
    }
    let t_start = Instant::now();
    let mut threads = Vec::new();
    for t in 0..args.threads {
        let s = soak.clone();
        let sd = seed.wrapping_add((t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        threads.push(
            std::thread::Builder::new()
                .name(format!("soak{t}"))
                .spawn(move || s.worker(sd, t as u64))?,
        );
    }
    if args.fork_every > 0.0 {
        let s = soak.clone();
        let every = Duration::from_secs_f64(args.fork_every);
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng(seed ^ 0xf0f0);
            let mut next = Instant::now() + every;
            while !s.stop.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                if Instant::now() >= next {
                    s.fork_once(&mut rng);
                    next = Instant::now() + every;
                }
            }
        }));
    }
    let end = t_start + Duration::from_secs_f64(args.duration);
    let mut next_progress = Instant::now() + Duration::from_secs_f64(args.progress.max(0.1));
    let mut next_drift = Instant::now();
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now().min(end)));
        if Instant::now() >= next_drift {
            // The hot window moves on by an eighth of itself every second.
            let b = soak.hot_base.load(Relaxed) + (hot_pages / 8).max(1) as u64;
            soak.hot_base.store(b % pages as u64, Relaxed);
            next_drift += Duration::from_secs(1);
        }
        if args.progress > 0.0 && Instant::now() >= next_progress {
            let s = soak.uz.stats();
            let z = soak.uz.zswap().stats();
            let ops = soak.ctr.page_ops();
            eprintln!(
                "soak: {:.0} s: {ops} page ops ({:.0}/s), {} mismatches, {} errors, \
                 {} evicted chunks, {} pages written back, {} read from the device, {} forks",
                t_start.elapsed().as_secs_f64(),
                ops as f64 / t_start.elapsed().as_secs_f64(),
                soak.ctr.mismatches.load(Relaxed),
                soak.ctr.errors.load(Relaxed),
                s.evicted_chunks,
                z.written_back_pages,
                z.pswpin,
                soak.ctr.forks.load(Relaxed),
            );
            next_progress += Duration::from_secs_f64(args.progress);
        }
    }
    soak.stop.store(true, Relaxed);
    for t in threads {
        if t.join().is_err() {
            soak.error(format_args!("a worker panicked"));
        }
    }
    let secs = t_start.elapsed().as_secs_f64();
    // The last word: every page once more.
    for g in 0..pages {
        // SAFETY: every worker has stopped.
        let (page, shadow) = unsafe { soak.pair(g) };
        soak.check(g, page, shadow, "final pass");
    }
    soak.ctr.final_pages.fetch_add(pages as u64, Relaxed);
    let s = soak.uz.stats();
    let z = soak.uz.zswap().stats();
    let c = &soak.ctr;
    let ops = c.page_ops();
    let errors = c.errors.load(Relaxed) + s.fault_errors;
    let mismatches = c.mismatches.load(Relaxed);
    let line = |k: &str, v: u64| println!("{k:>22}: {v}");
    println!("soak: {secs:.1} s, seed {seed}");
    line("page operations", ops);
    line("loads", c.loads.load(Relaxed));
    line("stores", c.stores.load(Relaxed));
    line("partial stores", c.partial_stores.load(Relaxed));
    line("system calls out", c.syscall_out.load(Relaxed));
    line("system calls in", c.syscall_in.load(Relaxed));
    line("discards", c.discards.load(Relaxed));
    line("fork children", c.forks.load(Relaxed));
    line("of them sharing", c.shared_forks.load(Relaxed));
    line("pages checked in forks", c.fork_pages.load(Relaxed));
    line("pages checked at end", c.final_pages.load(Relaxed));
    line("hints", c.hints.load(Relaxed));
    line("evicted chunks", s.evicted_chunks);
    line("faults from the pool", s.pgmajfault);
    line("pages written back", z.written_back_pages);
    line("pages read from device", z.pswpin);
    line("budget overruns", s.budget_overruns);
    if s.young_mode != uzswap::SampleYoung::Off {
        line("accessed-bit samples", s.young_samples);
        line("chunks they marked", s.young_marked);
    }
    line("peak bytes", s.peak_bytes);
    line("mismatches", mismatches);
    line("errors", errors);
    if args.json {
        let j = serde_json::json!({
            "seconds": secs,
            "seed": seed,
            "budget_bytes": args.budget,
            "memory_bytes": pages * PAGE_SIZE,
            "regions": args.regions,
            "threads": args.threads,
            "handler": format!("{:?}", args.handler).to_lowercase(),
            "sample_young": s.young_mode != uzswap::SampleYoung::Off,
            "sample_young_mode": s.young_mode.as_str(),
            "page_ops": ops,
            "page_ops_per_sec": ops as f64 / secs,
            "loads": c.loads.load(Relaxed),
            "stores": c.stores.load(Relaxed),
            "partial_stores": c.partial_stores.load(Relaxed),
            "syscall_out": c.syscall_out.load(Relaxed),
            "syscall_in": c.syscall_in.load(Relaxed),
            "discards": c.discards.load(Relaxed),
            "forks": c.forks.load(Relaxed),
            "shared_forks": c.shared_forks.load(Relaxed),
            "fork_pages": c.fork_pages.load(Relaxed),
            "final_pages": c.final_pages.load(Relaxed),
            "hints": c.hints.load(Relaxed),
            "mismatches": mismatches,
            "errors": errors,
            "uzswap": s,
            "zswap": z,
        });
        println!("{j}");
    }
    if mismatches > 0 || errors > 0 {
        bail!("{mismatches} mismatches, {errors} errors");
    }
    if ops < args.min_ops {
        bail!(
            "only {ops} page operations, fewer than --min-ops {}",
            args.min_ops
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(30.0));
        assert_eq!(parse_duration("30s"), Ok(30.0));
        assert_eq!(parse_duration("1.5m"), Ok(90.0));
        assert_eq!(parse_duration(" 2h "), Ok(7200.0));
        for bad in ["", "0", "-1s", "nan", "infh", "8d", "1000h", "s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fills_cover_every_kind() {
        let mut rng = Rng(7);
        let mut buf = vec![0u8; PAGE_SIZE];
        let (mut zero, mut random) = (0, 0);
        for _ in 0..200 {
            fill(&mut rng, &mut buf);
            zero += usize::from(buf.iter().all(|&b| b == 0));
            random += usize::from(buf.iter().any(|&b| b > b'z'));
        }
        assert!(zero > 5 && random > 20, "{zero} {random}");
    }
}
