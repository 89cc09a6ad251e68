//! The userfaultfd system interface the `userfaultfd` crate does not cover:
//! opening the descriptor (through `/dev/userfaultfd`, else the syscall with
//! `UFFD_USER_MODE_ONLY`), the API handshake (with `UFFD_FEATURE_SIGBUS` for
//! faults resolved in the faulting thread), and `UFFDIO_COPY` with the
//! write-protect mode and an honest partial count (and a failpoint that
//! makes it fail, for tests of the error paths). Everything else
//! (register, write-protect, wake, reading events) goes through the crate.
//!
//! No locking: each call is one ioctl on a descriptor the caller owns.

use super::RegionError;
use crate::PAGE_SIZE;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use userfaultfd::Uffd;
use uzswap_swap::fds::Owned;

const UFFD_API: u64 = 0xAA;
/// `_IOWR(0xAA, 0x3F, struct uffdio_api)`.
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
/// `_IOWR(0xAA, 0x03, struct uffdio_copy)`.
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
/// `_IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)` (Linux 6.6+; the
/// userfaultfd crate does not wrap it).
const UFFDIO_POISON: libc::c_ulong = 0xc020_aa08;
/// `_IO(0xAA, 0x00)` on `/dev/userfaultfd`.
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xaa00;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1 << 0;
const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
const UFFDIO_WRITEPROTECT_BIT: u64 = 1 << 0x06;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn errstr(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// How the descriptor was obtained (reported in stats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpenPath {
    /// `/dev/userfaultfd`: also handles faults the kernel takes on the
    /// program's behalf (e.g. `read(2)` into a region).
    DevUserfaultfd,
    /// `userfaultfd(2)` with `UFFD_USER_MODE_ONLY`: faults taken inside system
    /// calls fail with EFAULT instead of being resolved.
    SyscallUserMode,
}

/// Open a non-blocking, close-on-exec userfaultfd with write-protect
/// support; with `sigbus`, faults raise SIGBUS in the faulting thread
/// instead of queueing events (`UFFD_FEATURE_SIGBUS`).
/// `sigbus`: raise SIGBUS on faults (`Some(true)`), queue them for handler
/// threads (`Some(false)`), or the former only where the descriptor could
/// not be opened through the device (`None`, `HandlerMode::Auto`). Returns
/// the descriptor, how it was opened, and whether it raises SIGBUS.
pub fn open(
    sigbus: Option<bool>,
    user_mode_only: bool,
) -> Result<(Owned<Uffd>, OpenPath, bool), RegionError> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let dev = if user_mode_only {
        Err("not tried (user mode only asked for)".to_string())
    } else {
        open_dev(flags)
    };
    let (fd, path) = match dev {
        Ok(fd) => (fd, OpenPath::DevUserfaultfd),
        Err(dev_err) => match open_syscall(flags) {
            Ok(fd) => (fd, OpenPath::SyscallUserMode),
            Err(sys_err) => return Err(unavailable(&dev_err, &sys_err)),
        },
    };
    // SAFETY: `fd` is a freshly created descriptor that nothing else owns;
    // the Uffd takes ownership and closes it on drop, out of the program's
    // way until then (`fds`). Not `Owned::new(Uffd)`: the crate's
    // `Uffd::into_raw_fd` closes the descriptor it returns.
    let uffd: Owned<Uffd> = unsafe { Owned::from_raw_fd(fd) };
    let fd = uffd.as_raw_fd();
    let sigbus = sigbus.unwrap_or(path == OpenPath::SyscallUserMode);
    // Handler threads learn which thread took each fault (`locality.rs`).
    let want = if sigbus {
        UFFD_FEATURE_SIGBUS
    } else {
        UFFD_FEATURE_THREAD_ID
    };
    let mut api = UffdioApi {
        api: UFFD_API,
        features: want,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes exactly one `struct uffdio_api`,
    // which `api` is (repr(C), three u64).
    let r = unsafe { libc::ioctl(fd, UFFDIO_API, &mut api as *mut UffdioApi) };
    if r < 0 {
        return Err(RegionError::Unavailable(format!(
            "UFFDIO_API (features {want:#x}): {}",
            errstr(errno())
        )));
    }
    if api.features & want != want {
        return Err(RegionError::Unavailable(
            "this kernel's userfaultfd cannot raise SIGBUS or name the faulting thread \
             (needs Linux 4.14+)"
                .into(),
        ));
    }
    if api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP == 0 {
        return Err(RegionError::Unavailable(
            "this kernel's userfaultfd has no write-protect support (needs Linux 5.7+ with \
             CONFIG_HAVE_ARCH_USERFAULTFD_WP), which race-free eviction requires"
                .into(),
        ));
    }
    let _ = UFFDIO_WRITEPROTECT_BIT; // checked per range at register time
    Ok((uffd, path, sigbus))
}

/// Neither way to open a userfaultfd worked: say why, and how to grant
/// access. The fix offered is access to `/dev/userfaultfd` for the users
/// who need it, through a group, as the `kvm` group has `/dev/kvm`: the
/// sysctl `vm.unprivileged_userfaultfd=1` would instead let every process on
/// the machine stall kernel accesses to its memory for as long as it likes,
/// a known aid to exploiting kernel races, and CAP_SYS_PTRACE would let this
/// program trace any process of any user.
fn unavailable(dev_err: &str, sys_err: &str) -> RegionError {
    RegionError::Unavailable(format!(
        "/dev/userfaultfd: {dev_err}; userfaultfd(2): {sys_err}. Fix: give the users who \
         run uzswap read/write access to /dev/userfaultfd through a group, as the kvm \
         group has /dev/kvm: groupadd --system userfaultfd; chgrp userfaultfd \
         /dev/userfaultfd; chmod 0660 /dev/userfaultfd; usermod -aG userfaultfd USER \
         (then log in again); a udev rule keeps it across reboots: \
         KERNEL==\"userfaultfd\", GROUP=\"userfaultfd\", MODE=\"0660\""
    ))
}

fn open_dev(flags: libc::c_int) -> Result<RawFd, String> {
    let path = c"/dev/userfaultfd";
    // SAFETY: `path` is a NUL-terminated string; open has no other inputs.
    let dev = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if dev < 0 {
        return Err(errstr(errno()));
    }
    // SAFETY: USERFAULTFD_IOC_NEW takes the new descriptor's flags by value.
    let fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW, flags) };
    let e = errno();
    // SAFETY: `dev` is ours and no longer needed.
    unsafe { libc::close(dev) };
    if fd < 0 {
        return Err(format!("USERFAULTFD_IOC_NEW: {}", errstr(e)));
    }
    Ok(fd)
}

fn open_syscall(flags: libc::c_int) -> Result<RawFd, String> {
    // SAFETY: userfaultfd(2) takes only a flags word.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY) };
    if fd >= 0 {
        return Ok(fd as RawFd);
    }
    let e = errno();
    Err(match e {
        libc::EPERM => "EPERM (vm.unprivileged_userfaultfd is 0 and the process lacks \
                        CAP_SYS_PTRACE; UFFD_USER_MODE_ONLY needs Linux 5.11+)"
            .into(),
        libc::ENOSYS => "ENOSYS (kernel built without CONFIG_USERFAULTFD)".into(),
        libc::EINVAL => "EINVAL (kernel older than 5.11: no UFFD_USER_MODE_ONLY)".into(),
        _ => errstr(e),
    })
}

/// Result of one `UFFDIO_COPY`.
#[derive(Debug, PartialEq, Eq)]
pub enum Copy {
    /// All bytes installed.
    Done,
    /// Stopped after `n` bytes because the page there is already mapped
    /// (EEXIST): a concurrent resolver won that page.
    Exists(usize),
    /// Interrupted after `n` bytes by a changing address space (EAGAIN).
    Again(usize),
    /// Stopped after `n` bytes because the range runs on into another
    /// mapping (ENOENT: one copy stays within one VMA). A region is split
    /// into VMAs where the program changed the protection of part of it.
    Split(usize),
}

/// Install `len` bytes from `src` at `dst` (registered, page-aligned) with
/// one `UFFDIO_COPY`; with `wake` the threads waiting on the range are woken
/// by the copy, else not (`DONTWAKE`: the caller publishes the chunk's new
/// state first, then wakes); with `wp` the new pages are write-protected so
/// the next write faults.
///
/// # Safety
/// `src` must be readable for `len` bytes; `dst..dst+len` must lie in a
/// range registered with `uffd` (the kernel checks this, but installing
/// into memory someone else owns would overwrite their pages' absence).
///
/// On failure, also the bytes installed before it failed.
pub unsafe fn copy(
    fd: RawFd,
    dst: usize,
    src: *const u8,
    len: usize,
    wp: bool,
    wake: bool,
) -> Result<Copy, (String, usize)> {
    // Failure injection (`failpoints`): install the first half, then fail.
    let injected = super::failpoints::take_copy();
    let len = if injected {
        len / 2 / PAGE_SIZE * PAGE_SIZE
    } else {
        len
    };
    if injected && len == 0 {
        return Err(("UFFDIO_COPY: injected failure".into(), 0));
    }
    let mut c = UffdioCopy {
        dst: dst as u64,
        src: src as u64,
        len: len as u64,
        mode: if wake { 0 } else { UFFDIO_COPY_MODE_DONTWAKE }
            | if wp { UFFDIO_COPY_MODE_WP } else { 0 },
        copy: 0,
    };
    // SAFETY: UFFDIO_COPY reads and writes one `struct uffdio_copy`; the
    // caller vouches for the source and destination ranges.
    let r = unsafe { libc::ioctl(fd, UFFDIO_COPY, &mut c as *mut UffdioCopy) };
    if r == 0 {
        if injected {
            return Err(("UFFDIO_COPY: injected failure".into(), len));
        }
        return Ok(Copy::Done);
    }
    let e = errno();
    let done = if c.copy > 0 { c.copy as usize } else { 0 };
    match e {
        libc::EEXIST => Ok(Copy::Exists(done)),
        libc::EAGAIN => Ok(Copy::Again(done)),
        libc::ENOENT if len > PAGE_SIZE => Ok(Copy::Split(done)),
        _ => Err((
            format!("UFFDIO_COPY at {dst:#x} ({len} bytes): {}", errstr(e)),
            done,
        )),
    }
}

#[repr(C)]
struct UffdioPoison {
    start: u64,
    len: u64,
    mode: u64,
    updated: i64,
}

/// Install poison markers over `addr..addr+len` and wake the threads
/// faulting there: an access then raises SIGBUS (`BUS_MCEERR_AR`) with the
/// address, as the kernel does for a page it cannot read back from swap.
/// Pages already mapped are left alone (EEXIST is success).
pub fn poison(fd: RawFd, addr: usize, len: usize) -> Result<(), String> {
    let mut p = UffdioPoison {
        start: addr as u64,
        len: len as u64,
        mode: 0,
        updated: 0,
    };
    // SAFETY: UFFDIO_POISON reads and writes one `struct uffdio_poison`
    // and only changes page tables of the registered range.
    let r = unsafe { libc::ioctl(fd, UFFDIO_POISON, &mut p as *mut UffdioPoison) };
    match (r, errno()) {
        (0, _) | (_, libc::EEXIST) => Ok(()),
        (_, e) => Err(format!("UFFDIO_POISON at {addr:#x}: {}", errstr(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_suggests_the_device_not_the_sysctl() {
        let msg = unavailable("EACCES", "EPERM").to_string();
        assert!(msg.contains("/dev/userfaultfd: EACCES"), "{msg}");
        assert!(msg.contains("userfaultfd(2): EPERM"), "{msg}");
        assert!(msg.contains("chgrp userfaultfd /dev/userfaultfd"), "{msg}");
        assert!(msg.contains("chmod 0660 /dev/userfaultfd"), "{msg}");
        // The machine-wide switch must not be offered as a fix.
        assert!(!msg.contains("unprivileged_userfaultfd=1"), "{msg}");
        assert!(!msg.contains("CAP_SYS_PTRACE"), "{msg}");
    }
}
