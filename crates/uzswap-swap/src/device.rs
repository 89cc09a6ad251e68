//! The swap device: a fixed-size slot space, its cluster allocator, page
//! I/O, the readahead window and discard of freed clusters (mm/swapfile.c,
//! mm/page_io.c, mm/swap_state.c's `swap_cluster_readahead`), over a target
//! that keeps the slots' pages: the backing file ([`FileTarget`], here) or
//! the far tier ([`RedisTarget`], `remote`), see `target`.
//!
//! The backing file is unlinked (`O_TMPFILE`, or created and removed at once
//! where the filesystem lacks it), mode 0600, and sized sparse at creation
//! where `statvfs` shows the space free, so a missing, read-only or too
//! small directory is an error at creation instead of a failed write later;
//! its blocks are allocated with `fallocate` at the first write, so that a
//! process that never writes back pays nothing for them. A filesystem that
//! fills up meanwhile fails a write with `ENOSPC`, under the write failure
//! contract below.
//!
//! Locking: none of its own. I/O uses `pread`/`pwritev` at explicit offsets
//! (a remote target has its own leaf locks, `remote`), and a slot run
//! belongs to whoever allocated it, so concurrent I/O to different runs
//! needs no lock. Slot ownership is the allocator's (see
//! `cluster` for its locks); counters are atomics. The discard hook runs
//! from the allocator with no lock held.
//!
//! Write failure contract: when [`SwapDevice::write`] returns an error (an
//! I/O error, a write that makes no progress, an injected fault), the slots
//! stay allocated and owned by the caller, their contents are unspecified,
//! and the error is counted in `io_errors`. The caller keeps its copy of the
//! data and either retries or frees the slots; nothing is freed behind its
//! back, so the accounting stays exact. Short writes are continued until
//! every byte is written or an error occurs.
//!
//! Discard: when a cluster empties, its 2 MiB are punched out of the file
//! (`FALLOC_FL_PUNCH_HOLE`) before it is free again. That returns the space
//! to the filesystem, so a later write there may fail with `ENOSPC` if the
//! filesystem filled up meanwhile; such a write is an error returned to the
//! caller under the contract above. If the filesystem cannot punch holes,
//! discard turns itself off.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::baseline::GlobalLockAllocator;
use crate::cluster::ClusterAllocator;
use crate::entry::{check_range, SlotError, SlotRange, SwapSlot};
use crate::remote::{RedisTarget, RemoteConfig, RemoteStats};
use crate::target::WritebackTarget;
use crate::{SlotAllocator, MAX_ORDER, NR_ORDERS, PAGE_SIZE, SWAPFILE_CLUSTER};

const CLUSTER_BYTES: u64 = (SWAPFILE_CLUSTER * PAGE_SIZE) as u64;
/// Largest readahead window: one cluster (2^9 pages).
pub const MAX_PAGE_CLUSTER: u32 = 9;
const IOV_MAX: usize = 1024;

/// How to create a swap device.
#[derive(Clone, Debug)]
pub struct SwapDeviceConfig {
    /// Directory for the (unlinked) backing file.
    pub dir: PathBuf,
    /// Size of the backing file; rounded down to whole 2 MiB clusters.
    pub size_bytes: u64,
    /// Readahead window is 2^page_cluster slots (`vm.page-cluster`).
    pub page_cluster: u32,
    /// Open the file with `O_DIRECT` (I/O goes through an aligned bounce
    /// buffer).
    pub direct_io: bool,
    /// Punch freed clusters out of the file.
    pub discard: bool,
    /// Allocate slots with the global-lock baseline instead of the cluster
    /// allocator (no discard then). Only for measuring the one against the
    /// other under a real writeback load (`uzswap bench seeds`, seed 001).
    pub baseline_allocator: bool,
    /// Keep the slots' pages on Redis instead of in a file (`dir`,
    /// `direct_io` and `discard` then do not apply): the far tier.
    pub remote: Option<RemoteConfig>,
    /// With `remote`: the tier order `pool → file → redis`. The device is
    /// then the file (`dir`, `size_bytes`, `direct_io`, `discard` apply)
    /// followed by Redis, which gets only what the file cannot take. False:
    /// `pool → redis`, no file.
    pub file_first: bool,
    /// Slots of the far tier behind a file (`file_first`), in bytes; 0:
    /// `size_bytes`.
    pub far_size_bytes: u64,
}

impl Default for SwapDeviceConfig {
    fn default() -> Self {
        Self {
            dir: std::env::temp_dir(),
            size_bytes: 256 << 20,
            page_cluster: 3,
            direct_io: false,
            discard: true,
            baseline_allocator: false,
            remote: None,
            file_first: false,
            far_size_bytes: 0,
        }
    }
}

/// Why a swap device could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    #[error("swap directory {0} does not exist")]
    DirMissing(PathBuf),
    #[error("swap directory {0} is not a directory")]
    NotADir(PathBuf),
    // The I/O errors below are named `cause`, not `source`: the message
    // already ends with the cause, so it must not also be the error's
    // `source()`, or a chain printer (anyhow's `{:#}`) prints it twice.
    #[error("swap directory {dir} is not writable: {cause}")]
    NotWritable { dir: PathBuf, cause: io::Error },
    #[error("swap directory {dir} cannot hold a swap file: {reason}")]
    Unsuitable { dir: PathBuf, reason: String },
    #[error("not enough space in {dir} for a {size}-byte swap file ({avail} bytes available)")]
    NoSpace { dir: PathBuf, size: u64, avail: u64 },
    #[error("swap size {0} bytes is below one cluster ({CLUSTER_BYTES} bytes)")]
    TooSmall(u64),
    #[error("page_cluster {0} is above {MAX_PAGE_CLUSTER}")]
    BadPageCluster(u32),
    #[error("the filesystem of {dir} does not support O_DIRECT: {cause}")]
    DirectIoUnsupported { dir: PathBuf, cause: io::Error },
    #[error("swap file in {dir}: {cause}")]
    Io { dir: PathBuf, cause: io::Error },
    #[error("remote writeback target: {0}")]
    Remote(String),
}

/// Device counters (names as the kernel's where one exists).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwapStats {
    /// Slots on the device.
    pub capacity: u64,
    /// Slots allocated.
    pub used: u64,
    /// Successful allocations per order.
    pub alloc: [u64; NR_ORDERS],
    /// Failed allocations per order (at that order).
    pub alloc_fail: [u64; NR_ORDERS],
    /// `alloc_fallback` requests of this order served by a smaller order.
    pub swpout_fallback: [u64; NR_ORDERS],
    /// Pages written.
    pub pswpout: u64,
    /// Pages read.
    pub pswpin: u64,
    /// Failed reads and writes (each returned to its caller).
    pub io_errors: u64,
    /// Clusters discarded (holes punched).
    pub discards: u64,
    /// Hole punches that failed (the cluster is reused all the same).
    pub discard_errors: u64,
    /// The far tier's own figures, when the device is remote.
    pub remote: Option<RemoteStats>,
}

#[derive(Default)]
struct Counters {
    fallback: [AtomicU64; NR_ORDERS],
    pswpout: AtomicU64,
    pswpin: AtomicU64,
    io_errors: AtomicU64,
    discard_errors: AtomicU64,
    discard_off: AtomicBool,
}

/// Fault injection on the device's I/O path, for tests.
#[cfg(any(test, feature = "failpoints"))]
pub mod failpoints {
    /// Which syscall a fault applies to.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum IoOp {
        Read,
        Write,
    }

    /// What the next matching syscall does instead of its normal job.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Fault {
        /// Fails with this errno, transferring nothing.
        Errno(i32),
        /// Transfers at most this many bytes (really), like a short write.
        Short(usize),
    }
}

/// The device's slot allocator (see `SwapDeviceConfig::baseline_allocator`).
pub(crate) enum DeviceAlloc {
    Cluster(ClusterAllocator),
    Baseline(GlobalLockAllocator),
}

impl DeviceAlloc {
    fn alloc(&self, order: u32) -> Option<SwapSlot> {
        match self {
            DeviceAlloc::Cluster(a) => a.alloc(order),
            DeviceAlloc::Baseline(a) => a.alloc(order),
        }
    }

    pub(crate) fn free_range(&self, slot: SwapSlot, npages: u64) -> Result<(), SlotError> {
        match self {
            DeviceAlloc::Cluster(a) => a.free_range(slot, npages),
            DeviceAlloc::Baseline(a) => a.free_range(slot, npages),
        }
    }

    fn is_allocated(&self, range: SlotRange) -> Result<bool, SlotError> {
        match self {
            DeviceAlloc::Cluster(a) => a.is_allocated(range),
            DeviceAlloc::Baseline(a) => a.is_allocated(range),
        }
    }

    fn stats(&self) -> crate::AllocStats {
        match self {
            DeviceAlloc::Cluster(a) => a.stats(),
            DeviceAlloc::Baseline(a) => a.stats(),
        }
    }
}

/// A swap device: a slot space (the cluster allocator) over a target that
/// keeps the slots' pages (the backing file, or the far tier), and
/// optionally a next tier whose slots are numbered after this one's.
pub struct SwapDevice {
    backing: Backing,
    alloc: DeviceAlloc,
    nslots: u64,
    page_cluster: u32,
    counters: Arc<Counters>,
    /// The tier behind this one (`pool → file → redis`): slot `nslots + s`
    /// is its slot `s`. It takes an allocation only when this tier cannot.
    next: Option<Box<SwapDevice>>,
}

/// The device's target. An enum rather than a `dyn WritebackTarget` so the
/// file's I/O calls stay direct calls.
enum Backing {
    File(FileTarget),
    Remote(Box<RedisTarget>),
}

/// The local swap file as a [`WritebackTarget`]: `pread`/`pwritev` at the
/// slot's offset, through an aligned bounce buffer with `O_DIRECT`.
pub struct FileTarget {
    file: Arc<crate::fds::Owned<File>>,
    direct_io: bool,
    /// The file's blocks, allocated at its first write (`reserve`).
    reserved: std::sync::Once,
    #[cfg(any(test, feature = "failpoints"))]
    faults: parking_lot::Mutex<std::collections::VecDeque<(failpoints::IoOp, failpoints::Fault)>>,
}

impl std::fmt::Debug for SwapDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwapDevice")
            .field("nslots", &self.nslots)
            .field("page_cluster", &self.page_cluster)
            .field("target", &self.target_kind())
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Size `file` to `size` bytes without allocating its blocks, where the
/// filesystem of `dir` shows that much space free (or cannot say).
fn size_sparse(file: &File, dir: &Path, size: u64) -> Result<(), SwapError> {
    let dir = dir.to_path_buf();
    let avail = statvfs_avail(&dir).unwrap_or(u64::MAX);
    if avail < size {
        return Err(SwapError::NoSpace { dir, size, avail });
    }
    file.set_len(size)
        .map_err(|cause| SwapError::Io { dir, cause })
}

fn statvfs_avail(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized,
    // writable statvfs for the call to fill.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// `statfs(2)`'s `f_type` of the filesystem holding `path`.
fn fs_magic(path: &Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized,
    // writable statfs for the call to fill.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs by architecture
        Some(st.f_type as i64)
    }
}

/// Kernel pseudo-filesystems (linux/magic.h): they exist as directories but
/// store no regular files, so creating one there fails with an errno
/// (ENOENT, EACCES...) that would not say why.
const PSEUDO_FS: &[(i64, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x1cd1, "devpts"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6165_676c, "pstore"),
    (0x6265_6570, "configfs"),
    (0xde5e_81e4, "efivarfs"),
];

const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// The name of the filesystem of `dir` when it keeps its files in memory
/// (tmpfs, ramfs): a swap device there writes pages back into RAM (or the
/// kernel's own swap), which frees no memory.
pub fn memory_backed_fs(dir: &Path) -> Option<&'static str> {
    match fs_magic(dir)? {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    }
}

/// Opens an unlinked read-write file in `dir`, mode 0600.
fn open_unlinked(dir: &Path) -> io::Result<File> {
    let tmp = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir);
    match tmp {
        Ok(f) => return Ok(f),
        // Filesystems without O_TMPFILE answer one of these.
        Err(e) if matches!(errno_of(&e), libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL) => {}
        Err(e) => return Err(e),
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = dir.join(format!(
        ".uzswap-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&name)?;
    std::fs::remove_file(&name)?;
    Ok(f)
}

/// Whether `b` can be handed to an `O_DIRECT` transfer as it is: its
/// address and length in whole pages (which covers any logical block
/// size up to a page).
fn page_aligned(b: &[u8]) -> bool {
    (b.as_ptr() as usize | b.len()).is_multiple_of(PAGE_SIZE)
}

/// A page-aligned heap buffer for `O_DIRECT`, for callers' buffers that
/// are not.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl AlignedBuf {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(PAGE_SIZE), PAGE_SIZE).expect("buffer layout")
    }

    fn new(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = std::ptr::NonNull::new(p) else {
            std::alloc::handle_alloc_error(layout)
        };
        Self { ptr, len }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to at least `len` initialised (zeroed) bytes
        // owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this same layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn slot_err(e: SlotError) -> io::Error {
    invalid(e.to_string())
}

impl SwapDevice {
    /// Creates the backing file in `cfg.dir` and an allocator over it.
    pub fn create(cfg: SwapDeviceConfig) -> Result<Self, SwapError> {
        if cfg.page_cluster > MAX_PAGE_CLUSTER {
            return Err(SwapError::BadPageCluster(cfg.page_cluster));
        }
        let nclusters = cfg.size_bytes / CLUSTER_BYTES;
        if nclusters == 0 {
            return Err(SwapError::TooSmall(cfg.size_bytes));
        }
        if cfg.file_first && cfg.remote.is_some() {
            let far = SwapDeviceConfig {
                size_bytes: if cfg.far_size_bytes > 0 {
                    cfg.far_size_bytes
                } else {
                    cfg.size_bytes
                },
                file_first: false,
                ..cfg.clone()
            };
            let far = Self::create(far)?;
            let mut file = Self::create(SwapDeviceConfig {
                remote: None,
                file_first: false,
                ..cfg
            })?;
            file.next = Some(Box::new(far));
            return Ok(file);
        }
        if let Some(r) = &cfg.remote {
            let nslots = nclusters * SWAPFILE_CLUSTER as u64;
            let target = RedisTarget::connect(r.clone(), nslots).map_err(SwapError::Remote)?;
            return Ok(Self::with_backing(
                Backing::Remote(Box::new(target)),
                nclusters as usize,
                cfg.page_cluster,
                None,
            ));
        }
        let size = nclusters * CLUSTER_BYTES;
        let dir = cfg.dir.clone();
        match std::fs::metadata(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SwapError::DirMissing(dir))
            }
            Err(cause) => return Err(SwapError::Io { dir, cause }),
            Ok(m) if !m.is_dir() => return Err(SwapError::NotADir(dir)),
            Ok(_) => {}
        }
        let magic = fs_magic(&dir);
        if let Some(&(_, fs)) = PSEUDO_FS.iter().find(|&&(m, _)| Some(m) == magic) {
            return Err(SwapError::Unsuitable {
                reason: format!(
                    "it is on {fs}, a kernel pseudo-filesystem that stores no files; \
                     use a directory on a disk filesystem"
                ),
                dir,
            });
        }
        let file = open_unlinked(&dir).map_err(|cause| match errno_of(&cause) {
            libc::EROFS | libc::EACCES | libc::EPERM => SwapError::NotWritable {
                dir: dir.clone(),
                cause,
            },
            // The directory exists (checked above), so ENOENT means its
            // filesystem refuses to create files, not a missing path.
            libc::ENOENT => SwapError::Unsuitable {
                dir: dir.clone(),
                reason: format!(
                    "its filesystem refused to create a file there ({cause}) although \
                     the directory exists; use a directory on a disk filesystem"
                ),
            },
            _ => SwapError::Io {
                dir: dir.clone(),
                cause,
            },
        })?;
        let fd = file.as_raw_fd();
        if libc::off_t::try_from(size).is_err() {
            return Err(SwapError::NoSpace {
                dir: dir.clone(),
                size,
                avail: statvfs_avail(&dir).unwrap_or(0),
            });
        }
        // Sized sparse where the filesystem shows the space free; the
        // blocks are allocated at the first write (`FileTarget::reserve`).
        size_sparse(&file, &dir, size)?;
        if cfg.direct_io {
            // SAFETY: F_GETFL/F_SETFL on our own fd; no memory passed.
            let rc = unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                if fl < 0 {
                    fl
                } else {
                    libc::fcntl(fd, libc::F_SETFL, fl | libc::O_DIRECT)
                }
            };
            if rc < 0 {
                let cause = io::Error::last_os_error();
                return Err(SwapError::DirectIoUnsupported { dir, cause });
            }
        }
        let mut dev = Self::from_parts(
            file,
            nclusters as usize,
            cfg.page_cluster,
            cfg.direct_io,
            cfg.discard && !cfg.baseline_allocator,
        );
        if cfg.baseline_allocator {
            dev.alloc = DeviceAlloc::Baseline(GlobalLockAllocator::new(nclusters as usize));
        }
        Ok(dev)
    }

    /// A device over an existing file or block device of at least
    /// `size_bytes` (rounded down to whole clusters). Nothing is allocated or
    /// truncated; writes past the end of a regular file extend it.
    pub fn from_file(
        file: File,
        size_bytes: u64,
        page_cluster: u32,
        discard: bool,
    ) -> Result<Self, SwapError> {
        if page_cluster > MAX_PAGE_CLUSTER {
            return Err(SwapError::BadPageCluster(page_cluster));
        }
        let nclusters = size_bytes / CLUSTER_BYTES;
        if nclusters == 0 {
            return Err(SwapError::TooSmall(size_bytes));
        }
        Ok(Self::from_parts(
            file,
            nclusters as usize,
            page_cluster,
            false,
            discard,
        ))
    }

    fn from_parts(
        file: File,
        nclusters: usize,
        page_cluster: u32,
        direct_io: bool,
        discard: bool,
    ) -> Self {
        let file = Arc::new(crate::fds::Owned::new(file));
        let counters = Arc::new(Counters::default());
        let hook: Option<Box<dyn Fn(SlotRange) + Send + Sync>> = if discard {
            let (f, cnt) = (Arc::clone(&file), Arc::clone(&counters));
            Some(Box::new(move |r: SlotRange| punch_hole(&f, &cnt, r)))
        } else {
            None
        };
        let target = FileTarget {
            file,
            direct_io,
            reserved: std::sync::Once::new(),
            #[cfg(any(test, feature = "failpoints"))]
            faults: parking_lot::Mutex::new(Default::default()),
        };
        let mut d = Self::with_backing(Backing::File(target), nclusters, page_cluster, hook);
        d.counters = counters;
        d
    }

    fn with_backing(
        backing: Backing,
        nclusters: usize,
        page_cluster: u32,
        discard: Option<Box<dyn Fn(SlotRange) + Send + Sync>>,
    ) -> Self {
        let alloc = DeviceAlloc::Cluster(match discard {
            Some(hook) => ClusterAllocator::with_discard(nclusters, hook),
            None => ClusterAllocator::new(nclusters),
        });
        Self {
            backing,
            alloc,
            nslots: (nclusters * SWAPFILE_CLUSTER) as u64,
            page_cluster,
            counters: Arc::default(),
            next: None,
        }
    }

    /// Which target holds the pages: "file", "redis" or "redis-cluster",
    /// or "file+redis" / "file+redis-cluster" for a file with a far tier
    /// behind it.
    pub fn target_kind(&self) -> &'static str {
        let here = match &self.backing {
            Backing::File(f) => f.kind(),
            Backing::Remote(r) => r.kind(),
        };
        match self.next.as_deref().map(SwapDevice::target_kind) {
            None => here,
            Some("redis") => "file+redis",
            Some("redis-cluster") => "file+redis-cluster",
            Some(_) => "file+file",
        }
    }

    /// The far tier, when the device is remote or has one behind its file
    /// (for its figures and tests).
    pub fn remote(&self) -> Option<&RedisTarget> {
        match &self.backing {
            Backing::Remote(r) => Some(r),
            Backing::File(_) => self.next.as_deref().and_then(SwapDevice::remote),
        }
    }

    /// Slots on the device, every tier's together.
    pub fn capacity(&self) -> u64 {
        self.nslots + self.next.as_ref().map_or(0, |n| n.capacity())
    }

    /// The tier behind this one's and the slot's number there, when `slot`
    /// is past this tier.
    fn beyond(&self, slot: u64) -> Option<(&SwapDevice, u64)> {
        match &self.next {
            Some(n) if slot >= self.nslots => Some((n, slot - self.nslots)),
            _ => None,
        }
    }

    /// The allocator of the first tier (for invariant checks and list
    /// statistics).
    ///
    /// # Panics
    /// On a device made with `baseline_allocator`, which has no clusters.
    pub fn allocator(&self) -> &ClusterAllocator {
        match &self.alloc {
            DeviceAlloc::Cluster(a) => a,
            DeviceAlloc::Baseline(_) => panic!("a baseline-allocator device has no clusters"),
        }
    }

    /// "cluster" or "baseline": which allocator hands out the slots.
    pub fn allocator_name(&self) -> &'static str {
        match &self.alloc {
            DeviceAlloc::Cluster(a) => a.name(),
            DeviceAlloc::Baseline(a) => a.name(),
        }
    }

    /// `2^order` contiguous, naturally aligned slots, or `None`. Never falls
    /// back to a smaller order; see [`alloc_fallback`](Self::alloc_fallback).
    /// A tier is asked only when the ones before it have no such run.
    pub fn alloc(&self, order: u32) -> Option<SwapSlot> {
        self.alloc.alloc(order).or_else(|| {
            let n = self.next.as_deref()?;
            n.alloc(order).map(|s| SwapSlot(s.0 + self.nslots))
        })
    }

    /// Tries `order`, then each smaller order down to 0; returns the slots
    /// and the order obtained. Getting less than asked counts one
    /// `swpout_fallback` for the requested order: the caller writes the
    /// first `2^got` pages there and allocates again for the rest. Every
    /// tier is asked at one order before any is asked at a smaller one (a
    /// folio kept whole on the far tier beats one split on the file).
    pub fn alloc_fallback(&self, order: u32) -> Option<(SwapSlot, u32)> {
        if order > MAX_ORDER {
            return None;
        }
        for o in (0..=order).rev() {
            if let Some(s) = self.alloc(o) {
                if o < order {
                    self.counters.fallback[order as usize].fetch_add(1, Ordering::Relaxed);
                }
                return Some((s, o));
            }
        }
        None
    }

    /// Frees `npages` slots from `slot` (inside one cluster, all allocated).
    ///
    /// A remote device deletes the slots' values first, in batches: the
    /// slots stay allocated until their delete is sent, so no slot can be
    /// written again before the delete of its old value (`remote`).
    pub fn free(&self, slot: SwapSlot, npages: u64) -> Result<(), SlotError> {
        if let Some((n, s)) = self.beyond(slot.0) {
            return n.free(SwapSlot(s), npages);
        }
        match &self.backing {
            Backing::File(_) => self.alloc.free_range(slot, npages),
            Backing::Remote(r) => {
                check_range(slot.0, npages, self.nslots)?;
                if !self.alloc.is_allocated(SlotRange::new(slot, npages))? {
                    return Err(SlotError::NotAllocated {
                        start: slot.0,
                        npages,
                    });
                }
                r.release(slot, npages, &self.alloc);
                Ok(())
            }
        }
    }

    /// Send the deletes a remote device has batched and free their slots
    /// (nothing to do for a file).
    pub fn flush(&self) {
        if let Backing::Remote(r) = &self.backing {
            r.flush_deletes(&self.alloc);
        }
        if let Some(n) = &self.next {
            n.flush();
        }
    }

    /// The readahead window around `slot`: the naturally aligned run of
    /// 2^page_cluster slots holding it, clipped to its tier.
    pub fn readahead_window(&self, slot: SwapSlot) -> SlotRange {
        if let Some((n, s)) = self.beyond(slot.0) {
            let w = n.readahead_window(SwapSlot(s));
            return SlotRange::new(SwapSlot(w.start.0 + self.nslots), w.npages);
        }
        let win = 1u64 << self.page_cluster;
        let start = (slot.0 & !(win - 1)).min(self.nslots);
        let end = (start + win).min(self.nslots);
        SlotRange::new(SwapSlot(start), end.saturating_sub(start))
    }

    /// Hints the kernel to start reading the window around `slot`
    /// (`POSIX_FADV_WILLNEED`) and returns that window.
    pub fn readahead(&self, slot: SwapSlot) -> SlotRange {
        if let Some((n, s)) = self.beyond(slot.0) {
            let w = n.readahead(SwapSlot(s));
            return SlotRange::new(SwapSlot(w.start.0 + self.nslots), w.npages);
        }
        let w = self.readahead_window(slot);
        if w.npages > 0 {
            match &self.backing {
                Backing::File(f) => f.readahead(w),
                Backing::Remote(r) => r.readahead(w),
            }
        }
        w
    }

    /// Writes one page per slot from `slot` on. The slots must be allocated
    /// (so they are in one tier). On error the slots stay the caller's (see
    /// the module comment).
    pub fn write(&self, slot: SwapSlot, pages: &[&[u8]]) -> io::Result<()> {
        if let Some((n, s)) = self.beyond(slot.0) {
            return n.write(SwapSlot(s), pages);
        }
        let n = pages.len() as u64;
        check_range(slot.0, n, self.nslots).map_err(slot_err)?;
        if let Some(i) = pages.iter().position(|p| p.len() != PAGE_SIZE) {
            return Err(invalid(format!(
                "page {i} of a swap write is {} bytes, not {PAGE_SIZE}",
                pages[i].len()
            )));
        }
        let range = SlotRange::new(slot, n);
        if !self.alloc.is_allocated(range).map_err(slot_err)? {
            return Err(invalid(format!(
                "swap write to slots {}+{n} that are not allocated",
                slot.0
            )));
        }
        let r = match &self.backing {
            Backing::File(f) => f.write(slot, pages),
            Backing::Remote(r) => r.write(slot, pages),
        };
        match r {
            Ok(()) => {
                self.counters.pswpout.fetch_add(n, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Reads `npages` pages from `slot` into `buf` (exactly that long).
    pub fn read(&self, slot: SwapSlot, npages: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.next.is_some() {
            return self.read_runs(&[SlotRange::new(slot, npages)], buf);
        }
        check_range(slot.0, npages, self.nslots).map_err(slot_err)?;
        if buf.len() as u64 != npages * PAGE_SIZE as u64 {
            return Err(invalid(format!(
                "swap read of {npages} pages into a {}-byte buffer",
                buf.len()
            )));
        }
        let r = match &self.backing {
            Backing::File(f) => f.read(slot, buf),
            Backing::Remote(r) => r.read(slot, buf),
        };
        self.count_read(npages, r)
    }

    /// Reads several stretches of slots into `buf`, back to back in the
    /// order given (`buf` exactly as long as they are together): one round
    /// trip on a remote device, one read each on a file. Behind a file,
    /// the stretches are split where the tiers meet and each tier reads
    /// its own part.
    pub fn read_runs(&self, runs: &[SlotRange], buf: &mut [u8]) -> io::Result<()> {
        let mut total = 0u64;
        for r in runs {
            check_range(r.start.0, r.npages, self.capacity()).map_err(slot_err)?;
            total += r.npages;
        }
        if buf.len() as u64 != total * PAGE_SIZE as u64 {
            return Err(invalid(format!(
                "swap read of {total} pages into a {}-byte buffer",
                buf.len()
            )));
        }
        let Some(next) = self.next.as_deref() else {
            return self.read_here(runs, buf);
        };
        let (here, far) = split_runs(runs, self.nslots);
        // Most loads stay on one tier: read straight into place.
        if far.is_empty() {
            return self.read_here(&here, buf);
        }
        if here.is_empty() {
            return next.read_runs(&far, buf);
        }
        let here_bytes = here.iter().map(|r| r.npages).sum::<u64>() as usize * PAGE_SIZE;
        let mut near = vec![0u8; here_bytes];
        let mut away = vec![0u8; buf.len() - here_bytes];
        self.read_here(&here, &mut near)?;
        next.read_runs(&far, &mut away)?;
        // Back into the caller's order: each piece from its tier's buffer.
        let (mut hi, mut fi, mut off) = (0, 0, 0);
        for r in runs {
            for (is_far, piece) in split_run(*r, self.nslots) {
                let len = piece.npages as usize * PAGE_SIZE;
                let (src, at) = if is_far {
                    (&away, &mut fi)
                } else {
                    (&near, &mut hi)
                };
                buf[off..off + len].copy_from_slice(&src[*at..*at + len]);
                *at += len;
                off += len;
            }
        }
        Ok(())
    }

    /// This tier's own read of `runs` (all on it, checked), counted.
    fn read_here(&self, runs: &[SlotRange], buf: &mut [u8]) -> io::Result<()> {
        let r = match &self.backing {
            Backing::File(f) => f.read_runs(runs, buf),
            Backing::Remote(r) => r.read_runs(runs, buf),
        };
        self.count_read(runs.iter().map(|r| r.npages).sum(), r)
    }

    fn count_read(&self, npages: u64, r: io::Result<()>) -> io::Result<()> {
        match r {
            Ok(()) => {
                self.counters.pswpin.fetch_add(npages, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The device's figures, every tier's together; `remote` is the far
    /// tier's own. `alloc_fail` counts only allocations no tier could
    /// serve.
    pub fn stats(&self) -> SwapStats {
        let mut s = self.own_stats();
        s.remote = self.remote().map(|r| r.stats());
        if let Some(n) = &self.next {
            let f = n.stats();
            s.capacity += f.capacity;
            s.used += f.used;
            for o in 0..NR_ORDERS {
                s.alloc[o] += f.alloc[o];
            }
            s.alloc_fail = f.alloc_fail;
            s.pswpout += f.pswpout;
            s.pswpin += f.pswpin;
            s.io_errors += f.io_errors;
            s.discards += f.discards;
            s.discard_errors += f.discard_errors;
        }
        s
    }

    /// The first tier's own figures (the file's), when a tier is behind it.
    pub fn first_tier_stats(&self) -> Option<SwapStats> {
        self.next.as_ref().map(|_| self.own_stats())
    }

    fn own_stats(&self) -> SwapStats {
        let a = self.alloc.stats();
        let c = &self.counters;
        SwapStats {
            capacity: a.capacity,
            used: a.used,
            alloc: a.alloc,
            alloc_fail: a.alloc_fail,
            swpout_fallback: std::array::from_fn(|o| c.fallback[o].load(Ordering::Relaxed)),
            pswpout: c.pswpout.load(Ordering::Relaxed),
            pswpin: c.pswpin.load(Ordering::Relaxed),
            io_errors: c.io_errors.load(Ordering::Relaxed),
            discards: a.discards,
            discard_errors: c.discard_errors.load(Ordering::Relaxed),
            remote: None,
        }
    }
}

/// `r` cut where the tiers meet (slot `at`): (on the far tier, the piece
/// in its tier's numbering), in order.
fn split_run(r: SlotRange, at: u64) -> impl Iterator<Item = (bool, SlotRange)> {
    let (s, e) = (r.start.0, r.start.0 + r.npages);
    let near = (s < at).then(|| (false, SlotRange::new(SwapSlot(s), e.min(at) - s)));
    let far = (e > at).then(|| {
        let fs = s.max(at);
        (true, SlotRange::new(SwapSlot(fs - at), e - fs))
    });
    near.into_iter().chain(far)
}

/// Every run's pieces on this tier and on the next, each list in order.
fn split_runs(runs: &[SlotRange], at: u64) -> (Vec<SlotRange>, Vec<SlotRange>) {
    let (mut here, mut far) = (Vec::new(), Vec::new());
    for r in runs {
        for (is_far, piece) in split_run(*r, at) {
            if is_far {
                far.push(piece)
            } else {
                here.push(piece)
            }
        }
    }
    (here, far)
}

impl WritebackTarget for FileTarget {
    fn kind(&self) -> &'static str {
        "file"
    }

    fn write(&self, first: SwapSlot, pages: &[&[u8]]) -> io::Result<()> {
        self.reserve();
        // Page-aligned pages (the writeback's staging buffer) go to the
        // device as they are: no bounce buffer, no copy.
        if self.direct_io && !pages.iter().all(|p| page_aligned(p)) {
            let mut buf = AlignedBuf::new(pages.len() * PAGE_SIZE);
            for (dst, src) in buf.as_mut_slice().chunks_exact_mut(PAGE_SIZE).zip(pages) {
                dst.copy_from_slice(src);
            }
            self.pwritev_all(&[buf.as_slice()], first.byte_offset())
        } else {
            self.pwritev_all(pages, first.byte_offset())
        }
    }

    fn read(&self, first: SwapSlot, buf: &mut [u8]) -> io::Result<()> {
        if self.direct_io && !page_aligned(buf) {
            let mut b = AlignedBuf::new(buf.len());
            let r = self.pread_all(b.as_mut_slice(), first.byte_offset());
            buf.copy_from_slice(b.as_slice());
            r
        } else {
            self.pread_all(buf, first.byte_offset())
        }
    }

    fn readahead(&self, w: SlotRange) {
        // SAFETY: advisory call on our own fd; no memory passed. Its result
        // only affects caching, so it is ignored.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                w.start.byte_offset() as libc::off_t,
                (w.npages * PAGE_SIZE as u64) as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }
}

impl FileTarget {
    /// Allocate the file's blocks, once, before its first write: writes
    /// into holes cost block allocation each (usemem's mixed row under 512
    /// MiB, 25 k pages written back with direct I/O, ran 3.5-3.6 s
    /// preallocated against 4.1-4.3 s sparse). Not at creation: allocating
    /// 1 GiB of extents and freeing them at close cost 1.3-1.8 ms, paid by
    /// every process the runner starts, most of which never write back. A
    /// failure is left to the writes (ENOSPC under the write contract).
    fn reserve(&self) {
        self.reserved.call_once(|| {
            let Ok(len) = self.file.metadata().map(|m| m.len()) else {
                return;
            };
            // SAFETY: fallocate on our own fd; no memory passed. KEEP_SIZE:
            // the size is already the device's.
            unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_KEEP_SIZE,
                    0,
                    len as libc::off_t,
                )
            };
        });
    }

    /// Writes all of `bufs` at `off`, continuing after short writes.
    fn pwritev_all(&self, bufs: &[&[u8]], mut off: u64) -> io::Result<()> {
        let (mut idx, mut skip) = (0usize, 0usize);
        while idx < bufs.len() {
            let iov: Vec<libc::iovec> = bufs[idx..]
                .iter()
                .take(IOV_MAX)
                .enumerate()
                .map(|(k, b)| {
                    let s = if k == 0 { &b[skip..] } else { &b[..] };
                    libc::iovec {
                        iov_base: s.as_ptr() as *mut libc::c_void,
                        iov_len: s.len(),
                    }
                })
                .collect();
            let w = match self.sys_pwritev(iov, off) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "swap file write made no progress",
                    ))
                }
                Ok(w) => w,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            off += w as u64;
            let mut left = w;
            while left > 0 {
                let rem = bufs[idx].len() - skip;
                if left >= rem {
                    left -= rem;
                    idx += 1;
                    skip = 0;
                } else {
                    skip += left;
                    left = 0;
                }
            }
        }
        Ok(())
    }

    #[allow(unused_mut)]
    fn sys_pwritev(&self, mut iov: Vec<libc::iovec>, off: u64) -> io::Result<usize> {
        #[cfg(any(test, feature = "failpoints"))]
        match self.take_fault(failpoints::IoOp::Write) {
            Some(failpoints::Fault::Errno(e)) => return Err(io::Error::from_raw_os_error(e)),
            Some(failpoints::Fault::Short(mut bytes)) => {
                let mut keep = 0;
                for v in iov.iter_mut() {
                    if bytes == 0 {
                        break;
                    }
                    v.iov_len = v.iov_len.min(bytes);
                    bytes -= v.iov_len;
                    keep += 1;
                }
                iov.truncate(keep);
                if iov.is_empty() {
                    return Ok(0);
                }
            }
            None => {}
        }
        // SAFETY: every iovec points into a slice borrowed by the caller for
        // the duration of this call; pwritev only reads them.
        let w = unsafe {
            libc::pwritev(
                self.file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                off as libc::off_t,
            )
        };
        if w < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(w as usize)
        }
    }

    fn pread_all(&self, mut buf: &mut [u8], mut off: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.sys_pread(buf, off) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "swap file read past its end",
                    ))
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    off += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn sys_pread(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        #[cfg(any(test, feature = "failpoints"))]
        match self.take_fault(failpoints::IoOp::Read) {
            Some(failpoints::Fault::Errno(e)) => return Err(io::Error::from_raw_os_error(e)),
            Some(failpoints::Fault::Short(bytes)) => {
                let n = bytes.min(buf.len());
                return self.file.read_at(&mut buf[..n], off);
            }
            None => {}
        }
        self.file.read_at(buf, off)
    }

    #[cfg(any(test, feature = "failpoints"))]
    fn take_fault(&self, op: failpoints::IoOp) -> Option<failpoints::Fault> {
        let mut q = self.faults.lock();
        let i = q.iter().position(|(o, _)| *o == op)?;
        q.remove(i).map(|(_, f)| f)
    }
}

impl SwapDevice {
    /// Queues `fault` for the next `op` syscall (read or write) of a file
    /// device; faults of one kind are consumed in the order queued.
    #[cfg(any(test, feature = "failpoints"))]
    pub fn inject_fault(&self, op: failpoints::IoOp, fault: failpoints::Fault) {
        if let Backing::File(f) = &self.backing {
            f.faults.lock().push_back((op, fault));
        }
    }

    /// Drops every queued fault not yet consumed: the device works again.
    #[cfg(any(test, feature = "failpoints"))]
    pub fn clear_faults(&self) {
        if let Backing::File(f) = &self.backing {
            f.faults.lock().clear();
        }
    }
}

/// The discard hook: punch the cluster out of the file, keeping its size.
fn punch_hole(file: &File, counters: &Counters, r: SlotRange) {
    if counters.discard_off.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: fallocate on our own fd; no memory passed.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            r.start.byte_offset() as libc::off_t,
            (r.npages * PAGE_SIZE as u64) as libc::off_t,
        )
    };
    if rc != 0 {
        counters.discard_errors.fetch_add(1, Ordering::Relaxed);
        let e = io::Error::last_os_error();
        if matches!(errno_of(&e), libc::EOPNOTSUPP | libc::ENOSYS | libc::ENODEV) {
            counters.discard_off.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::failpoints::{Fault, IoOp};
    use super::*;

    fn dev(clusters: u64) -> (SwapDevice, PathBuf) {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "uzswap-dev-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let d = SwapDevice::create(SwapDeviceConfig {
            dir: dir.clone(),
            size_bytes: clusters * CLUSTER_BYTES,
            ..SwapDeviceConfig::default()
        })
        .unwrap();
        (d, dir)
    }

    fn page(tag: u8) -> Vec<u8> {
        (0..PAGE_SIZE)
            .map(|i| (i as u8).wrapping_mul(31) ^ tag)
            .collect()
    }

    #[test]
    fn injected_write_error_keeps_slots_owned_and_accounting_exact() {
        let (d, dir) = dev(2);
        let s = d.alloc(2).unwrap();
        let pages: Vec<Vec<u8>> = (0..4).map(page).collect();
        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
        d.inject_fault(IoOp::Write, Fault::Errno(libc::EIO));
        let e = d.write(s, &refs).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        let st = d.stats();
        assert_eq!((st.io_errors, st.used, st.pswpout), (1, 4, 0));
        // Still the caller's: a retry works and reads back exactly.
        d.write(s, &refs).unwrap();
        let mut buf = vec![0u8; 4 * PAGE_SIZE];
        d.read(s, 4, &mut buf).unwrap();
        for (i, p) in pages.iter().enumerate() {
            assert_eq!(&buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE], &p[..]);
        }
        d.free(s, 4).unwrap();
        assert_eq!(d.stats().used, 0);
        d.allocator().check_invariants().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn short_writes_are_continued_then_an_error_is_returned() {
        let (d, dir) = dev(1);
        let s = d.alloc(3).unwrap();
        let pages: Vec<Vec<u8>> = (0..8).map(|i| page(i + 10)).collect();
        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
        // Two short writes (one mid-page), then the rest: data is exact.
        d.inject_fault(IoOp::Write, Fault::Short(PAGE_SIZE + 100));
        d.inject_fault(IoOp::Write, Fault::Short(3 * PAGE_SIZE));
        d.write(s, &refs).unwrap();
        let mut buf = vec![0u8; 8 * PAGE_SIZE];
        d.inject_fault(IoOp::Read, Fault::Short(PAGE_SIZE / 2));
        d.read(s, 8, &mut buf).unwrap();
        assert_eq!(buf, pages.concat());
        // A short write followed by ENOSPC (a full filesystem) is an error.
        d.inject_fault(IoOp::Write, Fault::Short(PAGE_SIZE));
        d.inject_fault(IoOp::Write, Fault::Errno(libc::ENOSPC));
        let e = d.write(s, &refs).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        // A write that makes no progress is an error too, not a hang.
        d.inject_fault(IoOp::Write, Fault::Short(0));
        assert_eq!(
            d.write(s, &refs).unwrap_err().kind(),
            io::ErrorKind::WriteZero
        );
        d.inject_fault(IoOp::Read, Fault::Errno(libc::EIO));
        assert!(d.read(s, 8, &mut buf).is_err());
        let st = d.stats();
        assert_eq!((st.io_errors, st.used, st.pswpout, st.pswpin), (3, 8, 8, 8));
        d.free(s, 8).unwrap();
        d.allocator().check_invariants().unwrap();
        assert_eq!(d.stats().used, 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn failures_under_concurrency_keep_accounting_consistent() {
        let (d, dir) = dev(8);
        let d = Arc::new(d);
        for i in 0..200 {
            d.inject_fault(
                IoOp::Write,
                Fault::Errno(if i % 2 == 0 { libc::EIO } else { libc::ENOSPC }),
            );
        }
        let failed = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..4u8)
            .map(|t| {
                let (d, failed) = (Arc::clone(&d), Arc::clone(&failed));
                std::thread::spawn(move || {
                    let mut kept = Vec::new();
                    for i in 0..300u32 {
                        let order = [0, 2, 4][i as usize % 3];
                        let Some((s, got)) = d.alloc_fallback(order) else {
                            continue;
                        };
                        let n = 1usize << got;
                        let pages: Vec<Vec<u8>> = (0..n).map(|k| page(t ^ k as u8)).collect();
                        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
                        match d.write(s, &refs) {
                            // The caller still owns failed slots and frees them.
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                d.free(s, n as u64).unwrap();
                            }
                            Ok(()) => kept.push((s, pages)),
                        }
                        if kept.len() > 20 {
                            let (s, pages) = kept.swap_remove(0);
                            let mut buf = vec![0u8; pages.len() * PAGE_SIZE];
                            d.read(s, pages.len() as u64, &mut buf).unwrap();
                            assert_eq!(buf, pages.concat());
                            d.free(s, pages.len() as u64).unwrap();
                        }
                    }
                    kept
                })
            })
            .collect();
        let mut held = 0u64;
        let kept: Vec<_> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        for (_, p) in &kept {
            held += p.len() as u64;
        }
        let st = d.stats();
        assert_eq!(failed.load(Ordering::Relaxed), 200);
        assert_eq!(st.io_errors, 200);
        assert_eq!(st.used, held);
        d.allocator().check_invariants().unwrap();
        for (s, p) in kept {
            d.free(s, p.len() as u64).unwrap();
        }
        d.allocator().check_invariants().unwrap();
        assert_eq!(d.stats().used, 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
