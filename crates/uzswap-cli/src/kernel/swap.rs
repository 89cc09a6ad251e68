//! Swap devices for the kernel baselines: a swap file on disk (behind zswap,
//! or alone) and a zram device. The swap header is written here (the layout
//! of `union swap_header` in include/linux/swap.h), so no mkswap is needed.
//!
//! Every change goes through the settings journal; nothing here keeps state.

use std::fs;
use std::io::{Seek, SeekFrom, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::settings::{read_setting, Journal, Undo};

const PAGE: usize = 4096;
/// `SWAP_FLAG_PREFER` / `SWAP_FLAG_PRIO_MASK` from include/linux/swap.h.
const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
const SWAP_FLAG_PRIO_MASK: libc::c_int = 0x7fff;
/// Above any distribution's default swap, so ours is the one used.
pub const PRIORITY: i32 = 32000;

/// The first page of a swap area: version 1, `last_page`, no bad pages, a
/// random uuid, the "SWAPSPACE2" signature in the page's last 10 bytes.
pub fn swap_header(size_bytes: u64) -> Result<Vec<u8>> {
    let pages = size_bytes / PAGE as u64;
    if pages < 10 {
        bail!("swap area of {size_bytes} bytes is too small");
    }
    let last_page = u32::try_from(pages - 1).context("swap area too large for a v1 header")?;
    let mut h = vec![0u8; PAGE];
    // struct { char bootbits[1024]; __u32 version; __u32 last_page;
    //          __u32 nr_badpages; unsigned char sws_uuid[16]; ... }
    h[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    h[1028..1032].copy_from_slice(&last_page.to_ne_bytes());
    let uuid: [u8; 16] = rand::random();
    h[1036..1052].copy_from_slice(&uuid);
    h[PAGE - 10..].copy_from_slice(b"SWAPSPACE2");
    Ok(h)
}

fn write_header(path: &Path, size_bytes: u64) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    f.seek(SeekFrom::Start(0))?;
    f.write_all(&swap_header(size_bytes)?)?;
    f.sync_all()?;
    Ok(())
}

fn cpath(path: &Path) -> Result<std::ffi::CString> {
    Ok(std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?)
}

pub fn swapon(path: &Path, prio: i32) -> Result<()> {
    let c = cpath(path)?;
    let flags = SWAP_FLAG_PREFER | (prio & SWAP_FLAG_PRIO_MASK);
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::swapon(c.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("swapon {}", path.display()));
    }
    Ok(())
}

pub fn swapoff(path: &Path) -> Result<()> {
    let c = cpath(path)?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("swapoff {}", path.display()));
    }
    Ok(())
}

/// Swap areas in use, from /proc/swaps: (name, kind).
pub fn active_swaps() -> Vec<(String, String)> {
    fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

/// Where swap files go: on the root disk, named so a leftover is recognisable.
pub fn swapfile_path() -> PathBuf {
    PathBuf::from(format!(
        "/var/tmp/uzswap-kernel-swap.{}",
        std::process::id()
    ))
}

/// Create a swap file of `size_bytes` (allocated, no holes) and swap on it.
pub fn setup_swapfile(j: &mut Journal, path: &Path, size_bytes: u64) -> Result<()> {
    j.apply(
        Undo::RemoveFile {
            path: path.to_path_buf(),
        },
        || {
            let f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("create {}", path.display()))?;
            let len = libc::off_t::try_from(size_bytes).context("swap file size")?;
            // SAFETY: a valid open fd; fallocate only touches the file's blocks.
            if unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, len) } != 0 {
                return Err(std::io::Error::last_os_error()).with_context(|| {
                    format!("fallocate {} bytes for {}", size_bytes, path.display())
                });
            }
            drop(f);
            write_header(path, size_bytes)
        },
    )?;
    j.apply(
        Undo::Swapoff {
            path: path.to_path_buf(),
        },
        || swapon(path, PRIORITY),
    )
}

/// A zram device ready to swap on.
pub struct Zram {
    pub dev: u32,
    pub path: PathBuf,
}

impl Zram {
    pub fn sys(&self, file: &str) -> PathBuf {
        PathBuf::from(format!("/sys/block/zram{}/{file}", self.dev))
    }
}

/// Find an unused zram device (disksize 0, not swapped on) or hot-add one;
/// set its compressor and size, write a swap header and swap on it.
pub fn setup_zram(j: &mut Journal, algorithm: &str, size_bytes: u64) -> Result<Zram> {
    if !Path::new("/sys/block").exists() {
        bail!("no /sys/block");
    }
    let free = (0..64u32).find(|d| {
        let p = PathBuf::from(format!("/sys/block/zram{d}/disksize"));
        fs::read_to_string(&p)
            .map(|s| s.trim() == "0")
            .unwrap_or(false)
            && !active_swaps()
                .iter()
                .any(|(n, _)| n == &format!("/dev/zram{d}"))
    });
    let dev = match free {
        Some(d) => d,
        None => {
            let hot_add = Path::new("/sys/class/zram-control/hot_add");
            if !hot_add.exists() {
                bail!("no free zram device and no /sys/class/zram-control (modprobe zram?)");
            }
            // Reading hot_add creates the device; record it right after,
            // under the journal lock, so a signal cannot slip in between.
            let id: u32 = fs::read_to_string(hot_add)
                .context("zram hot_add")?
                .trim()
                .parse()
                .context("zram hot_add answer")?;
            j.apply(Undo::ZramHotRemove { dev: id }, || Ok(()))?;
            id
        }
    };
    let z = Zram {
        dev,
        path: PathBuf::from(format!("/dev/zram{dev}")),
    };
    let algs = fs::read_to_string(z.sys("comp_algorithm")).context("zram comp_algorithm")?;
    if !algs
        .split_whitespace()
        .any(|a| a.trim_matches(['[', ']']) == algorithm)
    {
        bail!(
            "zram{dev} has no compressor '{algorithm}' (it offers: {})",
            algs.trim()
        );
    }
    // Reset comes back first on restore (after swapoff), then the algorithm
    // can be set back: zram takes a new algorithm only while uninitialised.
    let old = read_setting(&z.sys("comp_algorithm"))?;
    j.apply(
        Undo::Write {
            path: z.sys("comp_algorithm"),
            value: old,
        },
        || Ok(()),
    )?;
    j.apply(Undo::ZramReset { dev }, || {
        super::settings::write_value(&z.sys("comp_algorithm"), algorithm)?;
        super::settings::write_value(&z.sys("disksize"), &size_bytes.to_string())
    })?;
    // The device node may take a moment to appear after hot_add.
    for _ in 0..50 {
        if z.path.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    write_header(&z.path, size_bytes)?;
    j.apply(
        Undo::Swapoff {
            path: z.path.clone(),
        },
        || swapon(&z.path, PRIORITY),
    )?;
    Ok(z)
}

/// zram's mm_stat: orig_data_size, compr_data_size, mem_used_total,
/// mem_limit, mem_used_max, same_pages, pages_compacted, huge_pages.
pub fn parse_mm_stat(text: &str) -> Option<[u64; 6]> {
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (v.len() >= 6).then(|| [v[0], v[1], v[2], v[3], v[4], v[5]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let h = swap_header(64 << 20).unwrap();
        assert_eq!(h.len(), PAGE);
        assert_eq!(&h[PAGE - 10..], b"SWAPSPACE2");
        assert_eq!(u32::from_ne_bytes(h[1024..1028].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_ne_bytes(h[1028..1032].try_into().unwrap()),
            (64 << 20) / 4096 - 1
        );
        assert_eq!(u32::from_ne_bytes(h[1032..1036].try_into().unwrap()), 0);
        assert!(swap_header(4096).is_err());
    }

    #[test]
    fn mm_stat_parses() {
        let s = "  1048576   262144   300000        0   310000      12      0      0     0\n";
        assert_eq!(
            parse_mm_stat(s),
            Some([1048576, 262144, 300000, 0, 310000, 12])
        );
        assert_eq!(parse_mm_stat("1 2"), None);
    }
}
