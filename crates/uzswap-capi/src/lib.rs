//! libuzswap: the C ABI of uzswap, declared in `include/uzswap.h`.
//!
//! Owns the translation between C and the Rust API: the handles (a boxed
//! [`Uzswap`] or [`Region`] behind an opaque pointer), the versioned config
//! struct, error codes and the thread-local last-error message. No locks of
//! its own: every handle's synchronisation is the Rust API's, and the
//! last-error message is per thread.
//!
//! Every entry point checks its pointers and arguments and turns a bad one
//! into an error code, and runs its body under `catch_unwind`: unwinding
//! into C is undefined behaviour, so a panic becomes `UZSWAP_EINTERNAL`
//! with its message in `uzswap_last_error()`.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use uzswap_core::region::{
    Advice, Config, HandlerMode, Region, RegionError, SampleYoung, Uzswap, Writeback,
};
use uzswap_core::swap::SwapError;
use uzswap_core::zswap::ZswapError;

// Error codes, as `include/uzswap.h` (negated errno values).
pub const UZSWAP_OK: c_int = 0;
pub const UZSWAP_EIO: c_int = -libc::EIO;
pub const UZSWAP_ENOMEM: c_int = -libc::ENOMEM;
pub const UZSWAP_EFAULT: c_int = -libc::EFAULT;
pub const UZSWAP_EINVAL: c_int = -libc::EINVAL;
pub const UZSWAP_ENOSYS: c_int = -libc::ENOSYS;
pub const UZSWAP_E2BIG: c_int = -libc::E2BIG;
pub const UZSWAP_EINTERNAL: c_int = -libc::ENOTRECOVERABLE;

pub const UZSWAP_HANDLER_BLOCK: c_int = 0;
pub const UZSWAP_HANDLER_SIGNAL: c_int = 1;
pub const UZSWAP_HANDLER_AUTO: c_int = 2;

pub const UZSWAP_SAMPLE_YOUNG_OFF: c_int = 0;
pub const UZSWAP_SAMPLE_YOUNG_AUTO: c_int = 1;
pub const UZSWAP_SAMPLE_YOUNG_ON: c_int = 2;

pub const UZSWAP_ADVICE_COLD: c_int = 1;
pub const UZSWAP_ADVICE_PAGEOUT: c_int = 2;
pub const UZSWAP_ADVICE_WILLNEED: c_int = 3;

/// `uzswap_config_t`, field for field. Version 4; later versions only add
/// fields at the end, and `size` says which version the caller filled in
/// (version 1 ended before `writeback_plain`, version 2 before
/// `writeback_remote`, version 3 before `sample_young`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UzswapConfigC {
    pub size: usize,
    pub budget: u64,
    pub folio_order: u32,
    /// `uzswap_handler_t`: a C enum is an `int` on the ABIs Linux uses.
    pub handler: c_int,
    pub compressor: *const c_char,
    /// C `bool`, read as a byte so that a value other than 0 or 1 cannot
    /// make an invalid Rust `bool`.
    pub writeback: u8,
    pub writeback_dir: *const c_char,
    /// Version 2. C `bool`, read as a byte: write pages to the swap file
    /// unsealed (default 0: each is sealed with AES-256-GCM).
    pub writeback_plain: u8,
    /// Version 3. `redis://HOST:PORT[,HOST:PORT...]`: write back to Redis
    /// (the far tier) instead of a swap file; NULL: the file.
    pub writeback_remote: *const c_char,
    /// Version 4. `uzswap_sample_young_t` (`Config::sample_young`).
    pub sample_young: c_int,
}

/// The `size` of a version-1 config: everything before `writeback_plain`.
const V1_SIZE: usize = std::mem::offset_of!(UzswapConfigC, writeback_plain);
/// The `size` of a version-2 config (its `sizeof`, padding included).
const V2_SIZE: usize = std::mem::offset_of!(UzswapConfigC, writeback_remote);
/// The `size` of a version-3 config.
const V3_SIZE: usize = std::mem::offset_of!(UzswapConfigC, sample_young);

/// A `size` above this is not a config struct of any version: most likely
/// the caller did not start from `uzswap_config_default`.
const MAX_CONFIG_SIZE: usize = 4096;

/// The opaque `uzswap_t`.
pub struct UzswapHandle(Uzswap);
/// The opaque `uzswap_region_t`.
pub struct RegionHandle(Region);

/// A failure to hand back to C: its code and message.
#[derive(Debug)]
struct Error {
    code: c_int,
    msg: String,
}

fn err(code: c_int, msg: impl Into<String>) -> Error {
    Error {
        code,
        msg: msg.into(),
    }
}

impl From<RegionError> for Error {
    fn from(e: RegionError) -> Error {
        let code = match &e {
            RegionError::Unavailable(_) => UZSWAP_ENOSYS,
            RegionError::Config(_) => UZSWAP_EINVAL,
            RegionError::Zswap(z) => match z {
                ZswapError::Compressor(_) | ZswapError::Config(_) => UZSWAP_EINVAL,
                ZswapError::Swap(
                    SwapError::DirMissing(_)
                    | SwapError::NotADir(_)
                    | SwapError::Unsuitable { .. }
                    | SwapError::TooSmall(_)
                    | SwapError::BadPageCluster(_),
                ) => UZSWAP_EINVAL,
                _ => UZSWAP_EIO,
            },
            RegionError::Os(_) => UZSWAP_EIO,
        };
        // The Display of each error already carries its cause (`{0}`,
        // `transparent`, "...: {cause}"), so the chain is not appended.
        err(code, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: &str) {
    // A NUL inside the message would end it early in C: drop those bytes.
    let msg = CString::new(msg.replace('\0', "")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = msg);
}

/// Run `f` without letting a panic unwind into C, turning its outcome into
/// a return code and the thread's last error.
fn guard(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => UZSWAP_OK,
        Ok(Err(e)) => {
            set_last_error(&e.msg);
            e.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("internal error: {what}"));
            UZSWAP_EINTERNAL
        }
    }
}

/// A C string argument as UTF-8; `None` for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn opt_str(p: *const c_char, what: &str) -> Result<Option<String>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract: non-NULL means NUL-terminated.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_owned()))
        .map_err(|_| err(UZSWAP_EINVAL, format!("{what} is not valid UTF-8")))
}

fn default_c_config() -> UzswapConfigC {
    let d = Config::default();
    UzswapConfigC {
        size: std::mem::size_of::<UzswapConfigC>(),
        // u64::MAX (no budget) is 0 in C: a budget of 0 bytes is no use.
        budget: if d.budget == u64::MAX { 0 } else { d.budget },
        folio_order: d.folio_order,
        handler: match d.handler {
            HandlerMode::Signal => UZSWAP_HANDLER_SIGNAL,
            HandlerMode::Auto => UZSWAP_HANDLER_AUTO,
            _ => UZSWAP_HANDLER_BLOCK,
        },
        compressor: std::ptr::null(),
        writeback: d.writeback.is_some() as u8,
        writeback_dir: std::ptr::null(),
        writeback_plain: (!d.zswap.writeback_encrypted) as u8,
        writeback_remote: std::ptr::null(),
        sample_young: match d.sample_young {
            SampleYoung::Off => UZSWAP_SAMPLE_YOUNG_OFF,
            SampleYoung::Auto => UZSWAP_SAMPLE_YOUNG_AUTO,
            SampleYoung::On => UZSWAP_SAMPLE_YOUNG_ON,
        },
    }
}

/// Read the caller's config, checking its `size` (version).
///
/// # Safety
/// `p` points to at least `(*p).size` readable bytes, and its string fields
/// are NULL or NUL-terminated.
unsafe fn read_config(p: *const UzswapConfigC) -> Result<Config, Error> {
    let ours = std::mem::size_of::<UzswapConfigC>();
    // SAFETY: every version starts with `size`, so it can always be read.
    let size = unsafe { std::ptr::addr_of!((*p).size).read_unaligned() };
    if (![V1_SIZE, V2_SIZE, V3_SIZE].contains(&size) && size < ours) || size > MAX_CONFIG_SIZE {
        return Err(err(
            UZSWAP_EINVAL,
            format!(
                "config size {size} is not that of any uzswap_config_t version \
                 (this library's is {ours}); start from uzswap_config_default()"
            ),
        ));
    }
    // A newer header's fields beyond ours: fine while they are zero (the
    // caller did not set them), as the kernel's copy_struct_from_user.
    // SAFETY: the caller's struct is `size` bytes long.
    let tail = unsafe {
        std::slice::from_raw_parts((p as *const u8).add(ours), size.saturating_sub(ours))
    };
    if tail.iter().any(|&b| b != 0) {
        return Err(err(
            UZSWAP_E2BIG,
            "config sets fields this version of libuzswap does not know",
        ));
    }
    // An older version's caller filled in fewer fields: the rest keep
    // their defaults.
    let mut c = default_c_config();
    // SAFETY: `min(size, ours)` bytes are readable at `p` (the caller's
    // struct is `size` long) and writable in `c`; every field is an integer
    // or a raw pointer, valid for any bits.
    unsafe {
        std::ptr::copy_nonoverlapping(
            p as *const u8,
            (&mut c as *mut UzswapConfigC).cast::<u8>(),
            size.min(ours),
        )
    };
    let mut cfg = Config {
        budget: if c.budget == 0 { u64::MAX } else { c.budget },
        folio_order: c.folio_order,
        ..Config::default()
    };
    cfg.handler = match c.handler {
        UZSWAP_HANDLER_BLOCK => HandlerMode::Block,
        UZSWAP_HANDLER_SIGNAL => HandlerMode::Signal,
        UZSWAP_HANDLER_AUTO => HandlerMode::Auto,
        h => {
            return Err(err(
                UZSWAP_EINVAL,
                format!(
                    "handler {h} is none of UZSWAP_HANDLER_BLOCK (0), UZSWAP_HANDLER_SIGNAL (1), \
                     UZSWAP_HANDLER_AUTO (2)"
                ),
            ))
        }
    };
    cfg.sample_young = match c.sample_young {
        UZSWAP_SAMPLE_YOUNG_OFF => SampleYoung::Off,
        UZSWAP_SAMPLE_YOUNG_AUTO => SampleYoung::Auto,
        UZSWAP_SAMPLE_YOUNG_ON => SampleYoung::On,
        v => {
            return Err(err(
                UZSWAP_EINVAL,
                format!(
                    "sample_young {v} is none of UZSWAP_SAMPLE_YOUNG_OFF (0), \
                     UZSWAP_SAMPLE_YOUNG_AUTO (1), UZSWAP_SAMPLE_YOUNG_ON (2)"
                ),
            ))
        }
    };
    // SAFETY: the caller's contract on the string fields.
    if let Some(name) = unsafe { opt_str(c.compressor, "compressor") }? {
        cfg.zswap.compressor = name;
    }
    // SAFETY: as above.
    let dir = unsafe { opt_str(c.writeback_dir, "writeback_dir") }?;
    // SAFETY: as above.
    let remote = unsafe { opt_str(c.writeback_remote, "writeback_remote") }?
        .map(|u| {
            uzswap_core::swap::RemoteConfig::parse(&u)
                .map_err(|e| err(UZSWAP_EINVAL, format!("writeback_remote: {e}")))
        })
        .transpose()?;
    if dir.is_some() && remote.is_some() {
        return Err(err(
            UZSWAP_EINVAL,
            "writeback_dir and writeback_remote are both set: one target only",
        ));
    }
    cfg.zswap.writeback_encrypted = c.writeback_plain == 0;
    cfg.writeback = match (c.writeback != 0, dir.is_some() || remote.is_some()) {
        (true, _) => Some(Writeback {
            dir: dir.map(Into::into),
            remote,
            ..Writeback::default()
        }),
        (false, false) => None,
        (false, true) => {
            return Err(err(
                UZSWAP_EINVAL,
                "writeback_dir or writeback_remote is set but writeback is false",
            ))
        }
    };
    Ok(cfg)
}

/// Fill `*cfg` with the defaults.
///
/// # Safety
/// `cfg` is NULL or points to a writable `uzswap_config_t`.
#[no_mangle]
pub unsafe extern "C" fn uzswap_config_default(cfg: *mut UzswapConfigC) {
    if cfg.is_null() {
        return;
    }
    let d = catch_unwind(default_c_config);
    if let Ok(d) = d {
        // SAFETY: non-NULL, and the caller's contract makes it writable.
        unsafe { cfg.write_unaligned(d) };
    }
}

/// A new instance in `*out`.
///
/// # Safety
/// `cfg` is NULL or a config as `read_config` asks; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn uzswap_new(
    cfg: *const UzswapConfigC,
    out: *mut *mut UzswapHandle,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(err(UZSWAP_EFAULT, "uzswap_new: out is NULL"));
        }
        // SAFETY: non-NULL and writable (the caller's contract).
        unsafe { out.write(std::ptr::null_mut()) };
        let cfg = if cfg.is_null() {
            Config::default()
        } else {
            // SAFETY: non-NULL; the rest is the caller's contract.
            unsafe { read_config(cfg) }?
        };
        let uz = Uzswap::new(cfg)?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(UzswapHandle(uz)))) };
        Ok(())
    })
}

/// Free an instance; its regions live on.
///
/// # Safety
/// `uz` is NULL or a handle from `uzswap_new` not destroyed before, and no
/// other thread uses it.
#[no_mangle]
pub unsafe extern "C" fn uzswap_destroy(uz: *mut UzswapHandle) {
    if uz.is_null() {
        return;
    }
    guard(|| {
        // SAFETY: the caller's contract: ours, from Box::into_raw, once.
        drop(unsafe { Box::from_raw(uz) });
        Ok(())
    });
}

/// A new region of at least `len` bytes in `*out`.
///
/// # Safety
/// `uz` is NULL or a live instance handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn uzswap_region_new(
    uz: *mut UzswapHandle,
    len: usize,
    out: *mut *mut RegionHandle,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(err(UZSWAP_EFAULT, "uzswap_region_new: out is NULL"));
        }
        // SAFETY: non-NULL and writable (the caller's contract).
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: NULL or a live handle (the caller's contract).
        let uz = unsafe { uz.as_ref() }
            .ok_or_else(|| err(UZSWAP_EFAULT, "uzswap_region_new: instance is NULL"))?;
        let region = uz.0.region(len)?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(RegionHandle(region)))) };
        Ok(())
    })
}

/// The region's first byte; NULL for a NULL region.
///
/// # Safety
/// `region` is NULL or a live region handle.
#[no_mangle]
pub unsafe extern "C" fn uzswap_region_ptr(region: *const RegionHandle) -> *mut c_void {
    // SAFETY: NULL or a live handle (the caller's contract).
    match unsafe { region.as_ref() } {
        Some(r) => r.0.as_ptr().cast(),
        None => {
            set_last_error("uzswap_region_ptr: region is NULL");
            std::ptr::null_mut()
        }
    }
}

/// The region's length in bytes; 0 for a NULL region.
///
/// # Safety
/// `region` is NULL or a live region handle.
#[no_mangle]
pub unsafe extern "C" fn uzswap_region_len(region: *const RegionHandle) -> usize {
    // SAFETY: NULL or a live handle (the caller's contract).
    match unsafe { region.as_ref() } {
        Some(r) => r.0.len(),
        None => {
            set_last_error("uzswap_region_len: region is NULL");
            0
        }
    }
}

/// Unmap and free a region.
///
/// # Safety
/// `region` is NULL or a region handle not freed before, and no other
/// thread uses it.
#[no_mangle]
pub unsafe extern "C" fn uzswap_region_free(region: *mut RegionHandle) {
    if region.is_null() {
        return;
    }
    guard(|| {
        // SAFETY: the caller's contract: ours, from Box::into_raw, once.
        drop(unsafe { Box::from_raw(region) });
        Ok(())
    });
}

/// Hint about bytes `[offset, offset + len)` of the region.
///
/// # Safety
/// `region` is NULL or a live region handle.
#[no_mangle]
pub unsafe extern "C" fn uzswap_advise(
    region: *mut RegionHandle,
    offset: usize,
    len: usize,
    advice: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live handle (the caller's contract).
        let r = unsafe { region.as_ref() }
            .ok_or_else(|| err(UZSWAP_EFAULT, "uzswap_advise: region is NULL"))?;
        let advice = match advice {
            UZSWAP_ADVICE_COLD => Advice::Cold,
            UZSWAP_ADVICE_PAGEOUT => Advice::PageOut,
            UZSWAP_ADVICE_WILLNEED => Advice::WillNeed,
            a => {
                return Err(err(
                    UZSWAP_EINVAL,
                    format!("advice {a} is not one of UZSWAP_ADVICE_COLD/PAGEOUT/WILLNEED (1..=3)"),
                ))
            }
        };
        let end = offset.checked_add(len).ok_or_else(|| {
            err(
                UZSWAP_EINVAL,
                format!("range at {offset} of {len} bytes overflows"),
            )
        })?;
        r.0.advise(offset..end, advice)?;
        Ok(())
    })
}

/// The instance's figures as a malloc'd JSON string.
///
/// # Safety
/// `uz` is NULL or a live instance handle.
#[no_mangle]
pub unsafe extern "C" fn uzswap_stats_json(uz: *const UzswapHandle) -> *mut c_char {
    let mut out = std::ptr::null_mut();
    guard(|| {
        // SAFETY: NULL or a live handle (the caller's contract).
        let uz = unsafe { uz.as_ref() }
            .ok_or_else(|| err(UZSWAP_EFAULT, "uzswap_stats_json: instance is NULL"))?;
        let json = serde_json::to_string(&uz.0.stats())
            .map_err(|e| err(UZSWAP_EINTERNAL, format!("stats to JSON: {e}")))?;
        out = malloc_string(&json)?;
        Ok(())
    });
    out
}

/// Register the calling thread for fault-handling locality: its faults are
/// then resolved by the handler thread of the CPU it runs on. Returns 1 if
/// registered, 0 if not (no bound handler threads, or no rseq), -1 with
/// `uz` NULL.
///
/// # Safety
/// `uz` is NULL or a live instance handle; a registered thread calls
/// `uzswap_unregister_thread` before it exits.
#[no_mangle]
pub unsafe extern "C" fn uzswap_register_thread(uz: *const UzswapHandle) -> c_int {
    // SAFETY: NULL or a live handle (the caller's contract).
    match unsafe { uz.as_ref() } {
        Some(uz) => c_int::from(uz.0.register_thread()),
        None => -1,
    }
}

/// Undo `uzswap_register_thread` for the calling thread.
///
/// # Safety
/// `uz` is NULL or a live instance handle.
#[no_mangle]
pub unsafe extern "C" fn uzswap_unregister_thread(uz: *const UzswapHandle) {
    // SAFETY: NULL or a live handle (the caller's contract).
    if let Some(uz) = unsafe { uz.as_ref() } {
        uz.0.unregister_thread();
    }
}

/// `s` copied into memory from `malloc`, NUL-terminated, so that C may
/// free it with `uzswap_string_free` (or `free`).
fn malloc_string(s: &str) -> Result<*mut c_char, Error> {
    // SAFETY: malloc takes any size; the result is checked for NULL.
    let p = unsafe { libc::malloc(s.len() + 1) } as *mut u8;
    if p.is_null() {
        return Err(err(UZSWAP_ENOMEM, "out of memory for the string"));
    }
    // SAFETY: `p` holds `s.len() + 1` bytes and is not `s`.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        *p.add(s.len()) = 0;
    }
    Ok(p.cast())
}

/// Free a string from this library.
///
/// # Safety
/// `s` is NULL or a string returned by this library, not freed before.
#[no_mangle]
pub unsafe extern "C" fn uzswap_string_free(s: *mut c_char) {
    // SAFETY: NULL or from `malloc_string` (the caller's contract).
    unsafe { libc::free(s.cast()) };
}

/// The calling thread's last error message ("" if none).
#[no_mangle]
pub extern "C" fn uzswap_last_error() -> *const c_char {
    // The CString stays in the thread-local, unchanged until the next
    // failure on this thread, so the pointer outlives this call.
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_target_is_parsed_and_checked() {
        let mut c = default_c_config();
        c.writeback_remote = c"redis://10.0.0.1:6379,10.0.0.2:6379?retries=1".as_ptr();
        // SAFETY: a whole config of this version; the string is static.
        let cfg = unsafe { read_config(&c) }.unwrap();
        let r = cfg.writeback.unwrap().remote.unwrap();
        assert_eq!((r.nodes.len(), r.cluster, r.retries), (2, true, 1));
        c.writeback_remote = c"memcached://x:1".as_ptr();
        // SAFETY: as above.
        let e = unsafe { read_config(&c) }.unwrap_err();
        assert_eq!(e.code, UZSWAP_EINVAL);
        assert!(e.msg.contains("writeback_remote"), "{}", e.msg);
        c.writeback_remote = c"redis://h:1".as_ptr();
        c.writeback_dir = c"/tmp".as_ptr();
        // SAFETY: as above.
        assert!(unsafe { read_config(&c) }.is_err());
    }

    #[test]
    fn the_sampler_mode_is_read_and_checked() {
        let mut c = default_c_config();
        assert_eq!(c.sample_young, UZSWAP_SAMPLE_YOUNG_OFF);
        for (v, want) in [
            (UZSWAP_SAMPLE_YOUNG_OFF, SampleYoung::Off),
            (UZSWAP_SAMPLE_YOUNG_AUTO, SampleYoung::Auto),
            (UZSWAP_SAMPLE_YOUNG_ON, SampleYoung::On),
        ] {
            c.sample_young = v;
            // SAFETY: a whole config of this version.
            assert_eq!(unsafe { read_config(&c) }.unwrap().sample_young, want);
        }
        c.sample_young = 3;
        // SAFETY: as above.
        let e = unsafe { read_config(&c) }.unwrap_err();
        assert_eq!(e.code, UZSWAP_EINVAL);
        assert!(e.msg.contains("sample_young"), "{}", e.msg);
    }

    #[test]
    fn writeback_is_sealed_unless_the_caller_asks_for_plain() {
        let mut c = default_c_config();
        assert_eq!(c.writeback_plain, 0);
        // SAFETY: a whole config of this version.
        let cfg = unsafe { read_config(&c) }.unwrap();
        assert!(cfg.zswap.writeback_encrypted);
        c.writeback_plain = 1;
        // SAFETY: as above.
        let cfg = unsafe { read_config(&c) }.unwrap();
        assert!(!cfg.zswap.writeback_encrypted);
    }

    /// A program built against the version-1 header passes the smaller
    /// size; the field it does not have keeps its default (sealed), whatever
    /// lies in memory after its struct.
    #[test]
    fn version_1_configs_are_read_with_defaults_for_the_rest() {
        let mut c = default_c_config();
        c.size = V1_SIZE;
        c.budget = 32 << 20;
        c.writeback_plain = 1; // beyond a v1 struct: must not be read
                               // SAFETY: at least `V1_SIZE` bytes are readable at `&c`.
        let cfg = unsafe { read_config(&c) }.unwrap();
        assert_eq!(cfg.budget, 32 << 20);
        assert!(cfg.zswap.writeback_encrypted);
        // Version 2: its fields read, the remote target left at its default.
        c.size = V2_SIZE;
        c.writeback_remote = c"redis://127.0.0.1:1".as_ptr();
        // SAFETY: at least `V2_SIZE` bytes are readable at `&c`.
        let cfg = unsafe { read_config(&c) }.unwrap();
        assert!(cfg.writeback.unwrap().remote.is_none());
        assert!(!cfg.zswap.writeback_encrypted);
        // Version 3: the remote target read, the sampler left off.
        c.size = V3_SIZE;
        c.sample_young = UZSWAP_SAMPLE_YOUNG_ON;
        // SAFETY: at least `V3_SIZE` bytes are readable at `&c`.
        let cfg = unsafe { read_config(&c) }.unwrap();
        assert!(cfg.writeback.unwrap().remote.is_some());
        assert_eq!(cfg.sample_young, SampleYoung::Off);
        // Between versions: not a size of any version.
        c.size = V1_SIZE + 1;
        // SAFETY: as above.
        let e = unsafe { read_config(&c) }.unwrap_err();
        assert_eq!(e.code, UZSWAP_EINVAL);
    }
}
