//! The figures: the instance's stats (the kernel's names) as one JSON line
//! per process, appended to `UZSWAP_STATS` (or stderr) at exit and, with
//! `UZSWAP_STATS_EVERY`, periodically. `peak_bytes` is the program's peak
//! resident region memory + pool; `vm_hwm_bytes` the process's whole peak
//! RSS (the kernel's VmHWM: also memory outside regions, such as the
//! libraries' code and this library's own structures).

use crate::{Internal, State};
use std::io::Write;

fn vm_hwm() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb << 10)
}

fn program() -> String {
    std::fs::read("/proc/self/cmdline")
        .ok()
        .and_then(|c| {
            c.split(|&b| b == 0)
                .next()
                .map(|s| String::from_utf8_lossy(s).into_owned())
        })
        .unwrap_or_default()
}

/// One JSON line of figures; `event` says why it was written.
pub fn line(st: &State, event: &str) -> String {
    let mut v = serde_json::to_value(st.uz.stats()).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("event".into(), event.into());
        // SAFETY: getpid has no preconditions.
        o.insert("pid".into(), unsafe { libc::getpid() }.into());
        o.insert("program".into(), program().into());
        o.insert("vm_hwm_bytes".into(), vm_hwm().into());
        o.insert("buffers_pinned".into(), st.pin_buffers.into());
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        o.insert("io_uring_refused".into(), crate::syscall::refused().into());
        o.insert("io_uring_filtered".into(), st.uring_filtered.into());
        let (shared, brought_in) = crate::fork::counts();
        o.insert("forks_shared".into(), shared.into());
        o.insert("forks_brought_in".into(), brought_in.into());
    }
    v.to_string()
}

fn emit(st: &State, event: &str) {
    let _g = Internal::enter();
    let l = line(st, event) + "\n";
    match st.cfg.stats.as_deref() {
        None | Some("-") => {
            let _ = std::io::stderr().write_all(l.as_bytes());
        }
        Some(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path);
            match f {
                // One write of a whole line: processes sharing the file
                // (forks, execs) never interleave within a line.
                Ok(mut f) => {
                    let _ = f.write_all(l.as_bytes());
                }
                // The directory `uzswap run --json` made for them is gone:
                // the run that collects them is over (this process outlived
                // it, as a daemon does), and nothing will read them.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && st.cfg.stats_collected => {}
                Err(e) => eprintln!("uzswap: writing figures to {path}: {e}"),
            }
        }
    }
}

extern "C" fn at_exit() {
    // A forked child that runs detached writes nothing: its parent's
    // figures are the parent's. One with an instance of its own writes
    // that instance's.
    if crate::DETACHED.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    let p = crate::STATE.load(std::sync::atomic::Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: set once from a leaked Box and never freed.
    let st = unsafe { &*p };
    // SAFETY: getpid has no preconditions.
    if st.pid == unsafe { libc::getpid() } {
        emit(st, "exit");
        // The instance is never dropped: a far tier's values would stay on
        // the server after the program.
        if let Some(r) = st.uz.zswap().swap_device().and_then(|d| d.remote()) {
            r.clear();
        }
    }
}

/// Register the exit report and start the periodic one.
pub fn arm() {
    // SAFETY: registers a function with no preconditions.
    unsafe { libc::atexit(at_exit) };
    start_interval();
}

/// Start the periodic report, if asked for (at initialisation, and in a
/// forked child with an instance of its own: threads do not outlive fork).
pub fn start_interval() {
    let p = crate::STATE.load(std::sync::atomic::Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: as in `at_exit`.
    let st: &'static State = unsafe { &*p };
    if let Some(secs) = st.cfg.stats_every {
        // A thread of uzswap's: the hook marks it internal.
        let _ = uzswap::compress::thread_hook::spawn("uzswap-stats".into(), move || loop {
            // A wait for work (`quiesce`).
            uzswap::compress::quiesce::idle(|| {
                std::thread::sleep(std::time::Duration::from_secs_f64(secs))
            });
            let p = crate::STATE.load(std::sync::atomic::Ordering::Acquire);
            if crate::DETACHED.load(std::sync::atomic::Ordering::Acquire) || !std::ptr::eq(p, st) {
                return;
            }
            emit(st, "interval");
        });
    }
}
