//! Encrypted writeback: what reaches the swap file is sealed (none of the
//! program's bytes are in it), pages come back byte-exact, and a page
//! changed in the file is a load error, never zeros or the changed bytes.

#[path = "common/marked.rs"]
mod marked;
use marked::{count, load_all, page, write_back_all, MARK, PAGES};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use uzswap::swap::SwapDevice;
use uzswap::zswap::LoadError;
use uzswap::{LoadMode, SwapEntry, Zswap, PAGE_SIZE};

const DEVICE: u64 = 8 << 20;

struct Setup {
    z: Zswap,
    file: File,
    path: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An instance over a named swap file the test can read and change.
fn setup(name: &str, encrypted: bool, compressed: bool) -> Setup {
    let path =
        std::env::temp_dir().join(format!("uzswap-sealed-{name}-{}.swap", std::process::id()));
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(DEVICE).unwrap();
    let dev = SwapDevice::from_file(file.try_clone().unwrap(), DEVICE, 3, false).unwrap();
    let z = Zswap::with_device(marked::config(encrypted, compressed), Arc::new(dev)).unwrap();
    assert_eq!(z.writeback_encrypted(), encrypted);
    for i in 0..PAGES {
        z.store(SwapEntry::new(0, i), &page(i)).unwrap();
    }
    write_back_all(&z);
    Setup { z, file, path }
}

fn raw(s: &Setup) -> Vec<u8> {
    let mut b = vec![0u8; DEVICE as usize];
    s.file.read_exact_at(&mut b, 0).unwrap();
    b
}

#[test]
fn the_swap_file_holds_none_of_the_plaintext() {
    for compressed in [true, false] {
        let s = setup(&format!("on-{compressed}"), true, compressed);
        let file = raw(&s);
        assert!(
            file.iter().filter(|&&b| b != 0).count() > PAGES as usize * 64,
            "the pages were written"
        );
        assert_eq!(
            count(&file, MARK),
            0,
            "plaintext found (compressed {compressed})"
        );
        // Nor any 8 bytes of any page, at the page's own alignment.
        let eights: std::collections::HashSet<[u8; 8]> = (0..PAGES)
            .flat_map(|i| {
                let p = page(i);
                (0..PAGE_SIZE / 8)
                    .map(|k| p[k * 8..k * 8 + 8].try_into().unwrap())
                    .collect::<Vec<[u8; 8]>>()
            })
            .collect();
        let found = file
            .chunks_exact(8)
            .filter(|c| {
                c.iter().any(|&b| b != 0) && eights.contains(&<[u8; 8]>::try_from(*c).unwrap())
            })
            .count();
        assert_eq!(found, 0, "8-byte plaintext pieces found");
        load_all(&s.z);
        assert_eq!(s.z.stats().seal_fail, 0);
    }
}

/// The control: the same test finds the marker when writeback is plain,
/// so its silence above means something.
#[test]
fn plain_writeback_is_readable_in_the_file() {
    for compressed in [true, false] {
        let s = setup(&format!("plain-{compressed}"), false, compressed);
        let n = count(&raw(&s), MARK);
        assert!(
            n >= PAGES as usize,
            "marker found {n} times (compressed {compressed})"
        );
        load_all(&s.z);
    }
}

/// A page changed in the file fails to load, as a checksum failure does:
/// an error naming the page, counted, the entry still stored (the same
/// error again, not "not stored"), never a page of zeros; the pages in
/// other slots still load.
#[test]
fn a_changed_page_is_a_load_error() {
    let s = setup("tamper", true, true);
    let file = raw(&s);
    // Flip one bit in the first written slot only.
    let slot = file
        .chunks_exact(PAGE_SIZE)
        .position(|p| p.iter().any(|&b| b != 0))
        .unwrap();
    let off = (slot * PAGE_SIZE + 123) as u64;
    let mut b = [0u8];
    s.file.read_exact_at(&mut b, off).unwrap();
    s.file.write_all_at(&[b[0] ^ 0x10], off).unwrap();
    let mut out = vec![0xeeu8; PAGE_SIZE];
    let (mut bad, mut good) = (Vec::new(), 0);
    for i in 0..PAGES {
        let k = SwapEntry::new(0, i);
        match s.z.load(k, &mut out, LoadMode::KeepCopy) {
            Ok(()) => {
                assert!(out == page(i), "page {i} loaded wrong");
                good += 1;
            }
            Err(e) => {
                assert_eq!(e, LoadError::Checksum(k), "page {i}");
                bad.push(k);
            }
        }
    }
    assert!(!bad.is_empty(), "the changed page was noticed");
    assert!(good > 0, "the other pages still load");
    let st = s.z.stats();
    assert!(st.seal_fail >= 1 && st.checksum_fail >= st.seal_fail);
    // Still stored: an exclusive load fails the same way and keeps it.
    for &k in &bad {
        let mut out = vec![0u8; PAGE_SIZE];
        assert_eq!(
            s.z.load(k, &mut out, LoadMode::Exclusive),
            Err(LoadError::Checksum(k))
        );
        assert_eq!(
            s.z.load(k, &mut out, LoadMode::Exclusive),
            Err(LoadError::Checksum(k))
        );
    }
    assert_eq!(s.z.stats().device_pages, PAGES);
}

/// An old copy of a slot written back over its newer contents (a replay)
/// fails too: the slot's version moved on.
#[test]
fn a_replayed_page_is_a_load_error() {
    let s = setup("replay", true, true);
    let old = raw(&s);
    // Load everything exclusively (slots freed), store new contents under
    // the same keys and write them back: the allocator reuses the slots.
    let mut out = vec![0u8; PAGE_SIZE];
    for i in 0..PAGES {
        s.z.load(SwapEntry::new(0, i), &mut out, LoadMode::Exclusive)
            .unwrap();
    }
    let newer = |i: u64| {
        let mut p = page(i + 1000);
        p[0] = 1;
        p
    };
    for i in 0..PAGES {
        s.z.store(SwapEntry::new(0, i), &newer(i)).unwrap();
    }
    write_back_all(&s.z);
    s.file.write_all_at(&old, 0).unwrap();
    let mut failed = 0;
    for i in 0..PAGES {
        let k = SwapEntry::new(0, i);
        match s.z.load(k, &mut out, LoadMode::KeepCopy) {
            Ok(()) => assert!(out == newer(i), "page {i} loaded stale data"),
            Err(e) => {
                assert_eq!(e, LoadError::Checksum(k));
                failed += 1;
            }
        }
    }
    assert!(failed > 0, "the replayed file was noticed");
}
