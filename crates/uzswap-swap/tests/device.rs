//! The swap device on real files: creation errors, page I/O round trips,
//! readahead window, discard, and a backing file whose writes really fail.

use std::fs::OpenOptions;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use uzswap_swap::{SlotRange, SwapDevice, SwapDeviceConfig, SwapError, SwapSlot, PAGE_SIZE};

const CLUSTER_BYTES: u64 = 512 * PAGE_SIZE as u64;

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "uzswap-dev-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o700));
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cfg(dir: &TempDir, clusters: u64) -> SwapDeviceConfig {
    SwapDeviceConfig {
        dir: dir.0.clone(),
        size_bytes: clusters * CLUSTER_BYTES,
        ..SwapDeviceConfig::default()
    }
}

fn page(slot: u64, tag: u8) -> Vec<u8> {
    let mut p = vec![0u8; PAGE_SIZE];
    for (i, w) in p.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(slot << 20 ^ i as u64 ^ u64::from(tag) << 56).to_le_bytes());
    }
    p
}

fn roundtrip(d: &SwapDevice) {
    let mut runs = Vec::new();
    for (i, order) in [0u32, 3, 4, 0, 9, 2].into_iter().enumerate() {
        let s = d.alloc(order).unwrap();
        let pages: Vec<Vec<u8>> = (0..1u64 << order).map(|k| page(s.0 + k, i as u8)).collect();
        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
        d.write(s, &refs).unwrap();
        runs.push((s, pages));
    }
    for (s, pages) in &runs {
        let mut buf = vec![0u8; pages.len() * PAGE_SIZE];
        d.read(*s, pages.len() as u64, &mut buf).unwrap();
        assert!(buf == pages.concat(), "slot {} came back different", s.0);
    }
    for (s, pages) in runs {
        d.free(s, pages.len() as u64).unwrap();
    }
    assert_eq!(d.stats().used, 0);
    d.allocator().check_invariants().unwrap();
}

#[test]
fn pages_come_back_byte_exact() {
    let dir = TempDir::new();
    // Each order in use takes its own cluster.
    let d = SwapDevice::create(cfg(&dir, 8)).unwrap();
    assert_eq!(d.capacity(), 8 * 512);
    roundtrip(&d);
    let st = d.stats();
    assert_eq!(st.pswpout, st.pswpin);
    assert_eq!(st.pswpout, 1 + 8 + 16 + 1 + 512 + 4);
    // The file is unlinked: nothing is left in the directory.
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
}

#[test]
fn direct_io_round_trip_or_clear_error() {
    let dir = TempDir::new();
    match SwapDevice::create(SwapDeviceConfig {
        direct_io: true,
        ..cfg(&dir, 8)
    }) {
        Ok(d) => roundtrip(&d),
        // tmpfs and some others refuse O_DIRECT; the error must say so.
        Err(e @ SwapError::DirectIoUnsupported { .. }) => {
            assert!(e.to_string().contains("O_DIRECT"));
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// `O_DIRECT` takes page-aligned buffers as they are and bounces the
/// others: both kinds, written and read in every combination, come back
/// exact.
#[test]
fn direct_io_takes_aligned_and_unaligned_buffers() {
    let dir = TempDir::new();
    let d = match SwapDevice::create(SwapDeviceConfig {
        direct_io: true,
        ..cfg(&dir, 2)
    }) {
        Ok(d) => d,
        Err(e @ SwapError::DirectIoUnsupported { .. }) => {
            eprintln!("skipped: the temp directory's filesystem refuses O_DIRECT ({e})");
            return;
        }
        Err(e) => panic!("unexpected error: {e}"),
    };
    // One buffer with a page-aligned stretch of 4 pages and one that is
    // 8 bytes off a page.
    let mut backing = vec![0u8; 6 * PAGE_SIZE];
    let off = backing.as_ptr().align_offset(PAGE_SIZE);
    for aligned_write in [true, false] {
        for aligned_read in [true, false] {
            let tag = u8::from(aligned_write) * 2 + u8::from(aligned_read);
            let s = d.alloc(2).unwrap();
            let at = if aligned_write { off } else { off + 8 };
            let w = &mut backing[at..at + 4 * PAGE_SIZE];
            for (i, p) in w.chunks_exact_mut(PAGE_SIZE).enumerate() {
                p.copy_from_slice(&page(i as u64, tag));
            }
            let want = w.to_vec();
            let pages: Vec<&[u8]> = w.chunks_exact(PAGE_SIZE).collect();
            d.write(s, &pages).unwrap();
            let at = if aligned_read { off } else { off + 8 };
            backing[at..at + 4 * PAGE_SIZE].fill(0);
            d.read(s, 4, &mut backing[at..at + 4 * PAGE_SIZE]).unwrap();
            assert_eq!(&backing[at..at + 4 * PAGE_SIZE], &want[..], "{tag}");
            d.free(s, 4).unwrap();
        }
    }
    assert_eq!(d.stats().io_errors, 0);
}

#[test]
fn bad_writes_and_reads_are_errors() {
    let dir = TempDir::new();
    let d = SwapDevice::create(cfg(&dir, 1)).unwrap();
    let p = page(0, 0);
    // Not allocated.
    assert!(d.write(SwapSlot(0), &[&p]).is_err());
    let s = d.alloc(0).unwrap();
    // Wrong page size, past the end, wrong buffer size, empty.
    assert!(d.write(s, &[&p[..100]]).is_err());
    assert!(d.write(SwapSlot(512), &[&p]).is_err());
    assert!(d.write(s, &[]).is_err());
    let mut small = vec![0u8; 10];
    assert!(d.read(s, 1, &mut small).is_err());
    let mut buf = vec![0u8; PAGE_SIZE];
    assert!(d.read(SwapSlot(512), 1, &mut buf).is_err());
    // A run of two where the second is not ours.
    assert!(d.write(s, &[&p, &p]).is_err());
    assert!(d.free(SwapSlot(s.0 + 1), 1).is_err());
    assert_eq!(d.stats().io_errors, 0, "input errors are not I/O errors");
    d.free(s, 1).unwrap();
}

#[test]
fn creation_errors_are_clear() {
    let dir = TempDir::new();
    let missing = dir.0.join("nope");
    let e = SwapDevice::create(SwapDeviceConfig {
        dir: missing.clone(),
        ..cfg(&dir, 1)
    })
    .unwrap_err();
    assert!(
        matches!(e, SwapError::DirMissing(ref p) if *p == missing),
        "{e}"
    );

    let file = dir.0.join("f");
    std::fs::write(&file, b"x").unwrap();
    let e = SwapDevice::create(SwapDeviceConfig {
        dir: file,
        ..cfg(&dir, 1)
    })
    .unwrap_err();
    assert!(matches!(e, SwapError::NotADir(_)), "{e}");

    let e = SwapDevice::create(SwapDeviceConfig {
        size_bytes: CLUSTER_BYTES - 1,
        ..cfg(&dir, 1)
    })
    .unwrap_err();
    assert!(matches!(e, SwapError::TooSmall(_)), "{e}");

    let e = SwapDevice::create(SwapDeviceConfig {
        page_cluster: 10,
        ..cfg(&dir, 1)
    })
    .unwrap_err();
    assert!(matches!(e, SwapError::BadPageCluster(10)), "{e}");

    // Far more than any filesystem here has.
    let e = SwapDevice::create(SwapDeviceConfig {
        size_bytes: 1 << 60,
        ..cfg(&dir, 1)
    })
    .unwrap_err();
    assert!(matches!(e, SwapError::NoSpace { .. }), "{e}");
    assert!(e.to_string().contains("not enough space"), "{e}");
}

#[test]
fn read_only_directory_is_a_clear_error() {
    let dir = TempDir::new();
    let ro = dir.0.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let r = SwapDevice::create(SwapDeviceConfig {
        dir: ro.clone(),
        ..cfg(&dir, 1)
    });
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700)).unwrap();
    if root {
        // Permission bits do not stop root; only check nothing was left.
        eprintln!("running as root: mode 0500 does not make the directory read-only");
        drop(r);
    } else {
        let e = r.unwrap_err();
        assert!(matches!(e, SwapError::NotWritable { .. }), "{e}");
    }
    assert_eq!(std::fs::read_dir(&ro).unwrap().count(), 0);
}

#[test]
fn readahead_window_is_aligned_and_clipped() {
    let dir = TempDir::new();
    let d = SwapDevice::create(cfg(&dir, 1)).unwrap();
    assert_eq!(
        d.readahead_window(SwapSlot(13)),
        SlotRange::new(SwapSlot(8), 8)
    );
    assert_eq!(
        d.readahead_window(SwapSlot(511)),
        SlotRange::new(SwapSlot(504), 8)
    );
    let d5 = SwapDevice::create(SwapDeviceConfig {
        page_cluster: 0,
        ..cfg(&dir, 1)
    })
    .unwrap();
    assert_eq!(d5.readahead(SwapSlot(7)), SlotRange::new(SwapSlot(7), 1));
    let d9 = SwapDevice::create(SwapDeviceConfig {
        page_cluster: 9,
        ..cfg(&dir, 1)
    })
    .unwrap();
    assert_eq!(
        d9.readahead(SwapSlot(300)),
        SlotRange::new(SwapSlot(0), 512)
    );
}

#[test]
fn freed_clusters_are_punched_out() {
    let dir = TempDir::new();
    let d = SwapDevice::create(cfg(&dir, 2)).unwrap();
    let s = d.alloc(9).unwrap();
    let pages: Vec<Vec<u8>> = (0..512).map(|k| page(s.0 + k, 7)).collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
    d.write(s, &refs).unwrap();
    // Free it in two halves: only the second empties the cluster.
    d.free(s, 256).unwrap();
    assert_eq!(d.stats().discards, 0);
    d.free(SwapSlot(s.0 + 256), 256).unwrap();
    let st = d.stats();
    assert_eq!(st.discards, 1);
    d.allocator().check_invariants().unwrap();
    if st.discard_errors == 0 {
        // The punched range reads back as zeros.
        let mut buf = vec![1u8; 512 * PAGE_SIZE];
        d.read(s, 512, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }
    // The cluster is free again and serves a whole-cluster allocation.
    let s2 = d.alloc(9).unwrap();
    let s3 = d.alloc(9).unwrap();
    assert!(d.alloc(0).is_none());
    d.free(s2, 512).unwrap();
    d.free(s3, 512).unwrap();
}

#[test]
fn a_file_that_fails_writes_returns_errors() {
    // /dev/full fails every write with ENOSPC, like a full filesystem.
    let Ok(f) = OpenOptions::new().read(true).write(true).open("/dev/full") else {
        eprintln!("no /dev/full here; the injected-fault unit tests cover this path");
        return;
    };
    assert_eq!(std::fs::metadata("/dev/full").unwrap().rdev() >> 8, 1);
    let d = SwapDevice::from_file(f, 3 * CLUSTER_BYTES, 3, false).unwrap();
    let mut held = Vec::new();
    for order in [0u32, 4, 9] {
        let s = d.alloc(order).unwrap();
        let pages: Vec<Vec<u8>> = (0..1u64 << order).map(|k| page(k, 1)).collect();
        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
        let e = d.write(s, &refs).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        held.push((s, 1u64 << order));
    }
    let st = d.stats();
    assert_eq!(st.io_errors, 3);
    assert_eq!(st.pswpout, 0);
    assert_eq!(st.used, 1 + 16 + 512);
    d.allocator().check_invariants().unwrap();
    for (s, n) in held {
        d.free(s, n).unwrap();
    }
    assert_eq!(d.stats().used, 0);
    d.allocator().check_invariants().unwrap();
}

/// The message and its `source()` chain, joined as anyhow's `{:#}` does.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s += &format!(": {c}");
        cur = c.source();
    }
    s
}

/// An error whose message already ends with its I/O cause must not return
/// that cause from `source()` too, or printing the chain repeats it
/// ("...(os error 30): ...(os error 30)").
#[test]
fn errors_print_their_cause_once() {
    let rofs = || std::io::Error::from_raw_os_error(libc::EROFS);
    let dir = std::path::PathBuf::from("/ro");
    for e in [
        SwapError::Io {
            dir: dir.clone(),
            cause: rofs(),
        },
        SwapError::NotWritable {
            dir: dir.clone(),
            cause: rofs(),
        },
        SwapError::DirectIoUnsupported {
            dir: dir.clone(),
            cause: rofs(),
        },
    ] {
        let text = chain(&e);
        assert_eq!(text.matches("os error 30").count(), 1, "{text}");
    }
}

/// A directory on a pseudo-filesystem exists but can hold no file: the
/// error says so, rather than the ENOENT of the failed create.
#[test]
fn pseudo_filesystem_dir_is_unsuitable() {
    let dir = TempDir::new();
    let e = match SwapDevice::create(SwapDeviceConfig {
        dir: "/proc".into(),
        ..cfg(&dir, 1)
    }) {
        Ok(_) => panic!("made a swap file in /proc"),
        Err(e) => e,
    };
    assert!(matches!(e, SwapError::Unsuitable { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("/proc cannot hold a swap file") && text.contains("procfs"),
        "{text}"
    );
}

#[test]
fn memory_backed_dirs_are_recognised() {
    // /dev/shm is tmpfs on Linux systems with glibc's POSIX shared memory.
    assert_eq!(
        uzswap_swap::memory_backed_fs(std::path::Path::new("/dev/shm")),
        Some("tmpfs")
    );
    assert_eq!(
        uzswap_swap::memory_backed_fs(std::path::Path::new("/proc")),
        None
    );
}
