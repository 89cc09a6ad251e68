//! `dlopen` without `RTLD_DEEPBIND`.
//!
//! A library opened with `RTLD_DEEPBIND` (PHP opens every extension so)
//! binds its own references to libc's definitions ahead of the global
//! scope, and so past this library's `malloc` and `free`: a block the
//! program allocated through mimalloc and the extension frees with glibc's
//! `free` aborts the program ("free(): invalid pointer"), before `main`
//! has done anything. The flag is cleared, so such a library binds as any
//! other does: to the malloc family here, and to everything else as the
//! global scope has it (what `RTLD_DEEPBIND` protects against, a library
//! that clashes with a symbol the program defines, is rarer than a
//! library that frees what the program allocated).
//!
//! The call goes on by a jump, not a call: `dlopen` finds the libraries
//! to search (the caller's `RUNPATH`, `$ORIGIN`) from its return address,
//! which must stay the program's. The next definition is looked up with
//! `dlsym(RTLD_NEXT)` at the first call.
//!
//! No locking: the slot is written with the same value by whoever looks
//! it up first.

use std::sync::atomic::{AtomicUsize, Ordering::*};

/// The next `dlopen` (libc's), or 0 before the first call.
static NEXT_DLOPEN: AtomicUsize = AtomicUsize::new(0);

/// Look the next `dlopen` up; returns it (the assembly below jumps to it).
extern "C" fn resolve_dlopen() -> usize {
    // SAFETY: a NUL-terminated name; RTLD_NEXT finds the definition after
    // ours (libc's).
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) } as usize;
    NEXT_DLOPEN.store(p, Release);
    p
}

/// # Safety
/// As dlopen(3).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlopen(
    file: *const libc::c_char,
    flags: libc::c_int,
) -> *mut libc::c_void {
    std::arch::naked_asm!(
        // flags (esi) without RTLD_DEEPBIND (0x8)
        "and esi, -9",
        "mov rax, qword ptr [rip + {next}]",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        // Keep the arguments, with the stack 16-aligned for the call.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        // No next dlopen: fail as dlopen fails (NULL).
        "3:",
        "ret",
        next = sym NEXT_DLOPEN,
        resolve = sym resolve_dlopen,
    )
}
