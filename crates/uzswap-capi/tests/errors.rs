//! The C ABI's handling of bad input: NULL pointers, bad arguments and bad
//! configs give an error code and a message, never a crash.

use std::ffi::{c_char, c_int, CStr};
use std::ptr::{null, null_mut};
use uzswap::*;

fn last_error() -> String {
    // SAFETY: uzswap_last_error always returns a NUL-terminated string.
    unsafe { CStr::from_ptr(uzswap_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn default_config() -> UzswapConfigC {
    let mut cfg = std::mem::MaybeUninit::<UzswapConfigC>::uninit();
    // SAFETY: a writable config; uzswap_config_default fills all of it.
    unsafe {
        uzswap_config_default(cfg.as_mut_ptr());
        cfg.assume_init()
    }
}

/// `uzswap_new(cfg)`: the code and, on success, the handle destroyed.
fn try_new(cfg: &UzswapConfigC) -> c_int {
    let mut uz = null_mut();
    // SAFETY: a valid config and out pointer.
    let rc = unsafe { uzswap_new(cfg, &mut uz) };
    if rc == 0 {
        assert!(!uz.is_null());
        // SAFETY: the handle just made.
        unsafe { uzswap_destroy(uz) };
    } else {
        assert!(uz.is_null(), "failed uzswap_new left a handle");
    }
    rc
}

#[test]
fn defaults_are_sized_and_mean_no_budget() {
    let cfg = default_config();
    assert_eq!(cfg.size, std::mem::size_of::<UzswapConfigC>());
    assert_eq!(cfg.budget, 0);
    assert_eq!(cfg.folio_order, 4);
    assert_eq!(cfg.handler, UZSWAP_HANDLER_BLOCK);
    assert!(cfg.compressor.is_null());
    assert_eq!(cfg.writeback, 1);
    assert!(cfg.writeback_dir.is_null());
}

#[test]
fn null_pointers_are_errors() {
    let cfg = default_config();
    // SAFETY: every call below is given NULL where a handle or out pointer
    // belongs, which the ABI reports as an error.
    unsafe {
        assert_eq!(uzswap_new(&cfg, null_mut()), UZSWAP_EFAULT);
        assert!(last_error().contains("out is NULL"), "{}", last_error());
        let mut r = null_mut();
        assert_eq!(uzswap_region_new(null_mut(), 4096, &mut r), UZSWAP_EFAULT);
        assert!(r.is_null());
        assert!(last_error().contains("instance is NULL"));
        assert!(uzswap_region_ptr(null()).is_null());
        assert_eq!(uzswap_region_len(null()), 0);
        assert_eq!(
            uzswap_advise(null_mut(), 0, 4096, UZSWAP_ADVICE_COLD),
            UZSWAP_EFAULT
        );
        assert!(uzswap_stats_json(null()).is_null());
        assert!(last_error().contains("instance is NULL"));
        uzswap_region_free(null_mut());
        uzswap_destroy(null_mut());
        uzswap_string_free(null_mut());
        uzswap_config_default(null_mut());
    }
}

#[test]
fn bad_configs_are_rejected_with_a_message() {
    let mut cfg = default_config();
    cfg.size = 8;
    assert_eq!(try_new(&cfg), UZSWAP_EINVAL);
    assert!(last_error().contains("config size 8"), "{}", last_error());

    let mut cfg = default_config();
    cfg.handler = 7;
    assert_eq!(try_new(&cfg), UZSWAP_EINVAL);
    assert!(last_error().contains("handler 7"), "{}", last_error());

    let mut cfg = default_config();
    cfg.folio_order = 10;
    assert_eq!(try_new(&cfg), UZSWAP_EINVAL);
    assert!(last_error().contains("folio order 10"), "{}", last_error());

    let mut cfg = default_config();
    let name = c"no-such-compressor";
    cfg.compressor = name.as_ptr();
    assert_eq!(try_new(&cfg), UZSWAP_EINVAL);
    assert!(
        last_error().contains("no-such-compressor"),
        "{}",
        last_error()
    );

    let mut cfg = default_config();
    let bad_utf8: &[u8] = b"\xff\xfe\0";
    cfg.compressor = bad_utf8.as_ptr() as *const c_char;
    assert_eq!(try_new(&cfg), UZSWAP_EINVAL);
    assert!(last_error().contains("UTF-8"), "{}", last_error());

    let mut cfg = default_config();
    cfg.writeback = 0;
    let dir = c"/tmp";
    cfg.writeback_dir = dir.as_ptr();
    assert_eq!(try_new(&cfg), UZSWAP_EINVAL);
    assert!(last_error().contains("writeback_dir"), "{}", last_error());
}

/// A config from a newer header: unknown trailing fields are accepted while
/// zero, refused once set.
#[test]
fn newer_config_versions() {
    #[repr(C)]
    struct Newer {
        v1: UzswapConfigC,
        extra: u64,
    }
    let mut newer = Newer {
        v1: default_config(),
        extra: 0,
    };
    newer.v1.size = std::mem::size_of::<Newer>();
    newer.v1.budget = 16 << 20;
    let mut uz = null_mut();
    // SAFETY: the config is `size` bytes long; `uz` is writable.
    let rc = unsafe { uzswap_new(&newer.v1, &mut uz) };
    assert_eq!(rc, 0, "{}", last_error());
    // SAFETY: the handle just made.
    unsafe { uzswap_destroy(uz) };

    newer.extra = 1;
    // SAFETY: as above.
    let rc = unsafe { uzswap_new(&newer.v1, &mut uz) };
    assert_eq!(rc, UZSWAP_E2BIG);
    assert!(uz.is_null());
}

#[test]
fn regions_bad_advice_and_drop_order() {
    let mut cfg = default_config();
    cfg.budget = 16 << 20;
    cfg.writeback = 0;
    let mut uz = null_mut();
    let mut r = null_mut();
    // SAFETY: valid config, out pointers and handles throughout; the
    // region is used after its instance handle is destroyed, which the
    // ABI allows.
    unsafe {
        assert_eq!(uzswap_new(&cfg, &mut uz), 0, "{}", last_error());
        assert_eq!(uzswap_region_new(uz, 0, &mut r), UZSWAP_EINVAL);
        assert!(r.is_null());
        assert!(last_error().contains("length 0"), "{}", last_error());

        assert_eq!(uzswap_region_new(uz, 100, &mut r), 0, "{}", last_error());
        // Rounded up to a whole chunk (64 KiB at the default order 4).
        assert_eq!(uzswap_region_len(r), 64 << 10);
        let p = uzswap_region_ptr(r) as *mut u8;
        assert!(!p.is_null());

        assert_eq!(uzswap_advise(r, 0, 4096, 0), UZSWAP_EINVAL);
        assert!(last_error().contains("advice 0"), "{}", last_error());
        assert_eq!(
            uzswap_advise(r, usize::MAX, 2, UZSWAP_ADVICE_COLD),
            UZSWAP_EINVAL
        );
        assert!(last_error().contains("overflows"), "{}", last_error());
        assert_eq!(
            uzswap_advise(r, 0, (64 << 10) + 1, UZSWAP_ADVICE_COLD),
            UZSWAP_EINVAL
        );
        assert!(last_error().contains("outside region"), "{}", last_error());

        let json = uzswap_stats_json(uz);
        assert!(!json.is_null());
        let v: serde_json::Value =
            serde_json::from_str(CStr::from_ptr(json).to_str().unwrap()).unwrap();
        assert_eq!(v["budget_bytes"], 16u64 << 20);
        uzswap_string_free(json);

        // The region outlives its instance handle and keeps its contents
        // through a page-out.
        uzswap_destroy(uz);
        for i in 0..(64 << 10) {
            *p.add(i) = (i % 253) as u8;
        }
        assert_eq!(uzswap_advise(r, 0, 64 << 10, UZSWAP_ADVICE_PAGEOUT), 0);
        for i in 0..(64 << 10) {
            assert_eq!(*p.add(i), (i % 253) as u8, "byte {i}");
        }
        uzswap_region_free(r);
    }
}
