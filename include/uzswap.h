/*
 * uzswap.h - the C ABI of uzswap (libuzswap.so / libuzswap.a).
 *
 * uzswap keeps memory under a budget by compressing cold pages: a program
 * allocates regions from an instance (uzswap_region_new) and uses them as
 * ordinary memory; uzswap stores pages the budget has no room for in a
 * compressed pool (and writes the coldest back to a swap file) and brings
 * them back on access, through userfaultfd.
 *
 * Errors: functions returning int return 0 on success and a negative
 * errno-style code (UZSWAP_E*) on failure; uzswap_last_error() then gives
 * the message of the calling thread's last failure. Null pointers and bad
 * arguments are reported as errors, never crash.
 *
 * Lifetimes: regions and the instance may be freed in any order; a region
 * keeps what it needs of its instance alive. A handle may be used from any
 * thread, but freeing it while another thread still uses it is undefined.
 *
 * Link: -luzswap (shared), or libuzswap.a -lpthread -ldl -lm (static).
 * SPDX-License-Identifier: GPL-2.0-only
 */
#ifndef UZSWAP_H
#define UZSWAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (negated errno values). */
#define UZSWAP_OK 0
#define UZSWAP_EIO (-5)            /* OS or swap device failure */
#define UZSWAP_ENOMEM (-12)        /* out of memory */
#define UZSWAP_EFAULT (-14)        /* a required pointer was NULL */
#define UZSWAP_EINVAL (-22)        /* bad argument or setting */
#define UZSWAP_ENOSYS (-38)        /* userfaultfd unavailable to this process */
#define UZSWAP_E2BIG (-7)          /* config from a newer header sets fields this library lacks */
#define UZSWAP_EINTERNAL (-131)    /* internal error (ENOTRECOVERABLE); see uzswap_last_error */

/* How faults on region memory are resolved. */
typedef enum uzswap_handler {
    /* Handler threads sleeping in poll(2) (the default). Also resolves
     * faults the kernel takes inside system calls (read(2) into a region). */
    UZSWAP_HANDLER_BLOCK = 0,
    /* No handler threads: the faulting thread resolves its own fault from a
     * SIGBUS handler. Faster, but a system call touching a page that is not
     * mapped fails with EFAULT, and SIGBUS is shared with the program. That
     * includes the futex waits of mutexes, condition variables, semaphores
     * and barriers, whose EFAULT glibc (2.34+) answers by ending the process:
     * keep synchronisation objects outside the regions in this mode. */
    UZSWAP_HANDLER_SIGNAL = 1,
    /* SIGNAL where the kernel's own faults cannot be served anyway (no
     * access to /dev/userfaultfd: the descriptor opens in user mode only),
     * BLOCK where they can. The stats name the mode it resolved to. */
    UZSWAP_HANDLER_AUTO = 2,
} uzswap_handler_t;

/* Whether the evictor reads the kernel's accessed bits of resident region
 * memory (from /proc/self/smaps), so that memory read often without
 * faulting is kept: the resident parts of regions are split into mappings
 * of 256 KiB, half of them marked MADV_DONTDUMP (core dumps leave them
 * out). Pays where a read-mostly hot set sits apart from data streamed
 * through; each sample costs milliseconds, more with more resident memory. */
typedef enum uzswap_sample_young {
    UZSWAP_SAMPLE_YOUNG_OFF = 0,  /* never (the default) */
    /* In probes, going on only while the faults the marks save (measured
     * on an eighth of the memory held out of them) are worth the samples'
     * time. */
    UZSWAP_SAMPLE_YOUNG_AUTO = 1,
    UZSWAP_SAMPLE_YOUNG_ON = 2,   /* always, paced by the eviction CLOCK */
} uzswap_sample_young_t;

/* Instance settings. Always start from uzswap_config_default(), which sets
 * `size`, so a program built against an older header keeps working with a
 * newer library (fields added later take their defaults). */
typedef struct uzswap_config {
    size_t size;               /* sizeof(uzswap_config_t); set by uzswap_config_default */
    uint64_t budget;           /* bytes of resident + compressed memory; 0 = no budget */
    uint32_t folio_order;      /* folio = 4 KiB << folio_order, 0..9 (default 4): the
                                  chunk up to order 4 (64 KiB); larger, the read-ahead
                                  window of forward scans */
    uzswap_handler_t handler;  /* default UZSWAP_HANDLER_BLOCK */
    const char *compressor;    /* "lz4", "lzo", "zstd", "zstd:3", "deflate"...; NULL = default (lz4) */
    bool writeback;            /* write the coldest compressed pages to a swap file (default true) */
    const char *writeback_dir; /* directory of the (unlinked) swap file; NULL = $TMPDIR, else /tmp */
    /* Version 2 (a version-1 caller's smaller `size` keeps the default): */
    bool writeback_plain;      /* write pages to the swap file unsealed; default false: each is
                                  sealed with AES-256-GCM under a key held only in memory */
    /* Version 3: */
    const char *writeback_remote; /* "redis://HOST:PORT[,HOST:PORT...]": write back to Redis
                                     (a cluster with more than one node) instead of a swap
                                     file; always sealed. NULL = the swap file */
    /* Version 4: */
    uzswap_sample_young_t sample_young; /* default UZSWAP_SAMPLE_YOUNG_OFF */
} uzswap_config_t;

/* Advice for uzswap_advise. */
#define UZSWAP_ADVICE_COLD 1     /* make the range the first candidate for eviction */
#define UZSWAP_ADVICE_PAGEOUT 2  /* compress and evict the range now */
#define UZSWAP_ADVICE_WILLNEED 3 /* bring the range back now, ahead of use */

typedef struct uzswap uzswap_t;               /* an instance: budget, pool, fault handler */
typedef struct uzswap_region uzswap_region_t; /* a region of memory under the budget */

/* Fill *cfg with the defaults (and cfg->size). No effect if cfg is NULL. */
void uzswap_config_default(uzswap_config_t *cfg);

/* A new instance from *cfg (NULL: the defaults) in *out. On failure *out is
 * set to NULL (when out is not NULL) and a negative code is returned. */
int uzswap_new(const uzswap_config_t *cfg, uzswap_t **out);

/* Stop and free an instance. Regions still alive keep working; the
 * instance's threads stop when the last of them is freed. NULL: no-op. */
void uzswap_destroy(uzswap_t *uz);

/* A new region of at least len bytes (rounded up to whole chunks), reading
 * as zeros until written, in *out.
 * Not for buffers a device reads into by DMA (O_DIRECT reads, io_uring,
 * Linux AIO, registered or RDMA buffers): the device writes the pages the
 * kernel looked up when the transfer began, past the page tables, and an
 * eviction during it would keep the old bytes. Use memory outside the
 * regions for those (uzswap run pins such reads' buffers for the call). */
int uzswap_region_new(uzswap_t *uz, size_t len, uzswap_region_t **out);

/* The region's first byte (chunk-aligned); NULL if region is NULL. */
void *uzswap_region_ptr(const uzswap_region_t *region);

/* The region's length in bytes (the rounded-up length); 0 if region is NULL. */
size_t uzswap_region_len(const uzswap_region_t *region);

/* Unmap and free a region; its compressed pages are dropped. NULL: no-op. */
void uzswap_region_free(uzswap_region_t *region);

/* Hint about bytes [offset, offset + len) of the region (widened to whole
 * chunks); advice is one of UZSWAP_ADVICE_*. */
int uzswap_advise(uzswap_region_t *region, size_t offset, size_t len, int advice);

/* The instance's figures as one NUL-terminated JSON object, allocated with
 * malloc; free it with uzswap_string_free. NULL on failure. */
char *uzswap_stats_json(const uzswap_t *uz);

/* Optional: register the calling thread so that its faults are resolved by
 * the handler thread of the CPU it runs on (worth it for threads that fault
 * often). 1: registered; 0: not (handler threads not bound to CPUs, or no
 * rseq in this C library); -1: uz is NULL. A registered thread calls
 * uzswap_unregister_thread before it exits, and before uzswap_destroy. */
int uzswap_register_thread(const uzswap_t *uz);

/* Undo uzswap_register_thread for the calling thread. NULL: no-op. */
void uzswap_unregister_thread(const uzswap_t *uz);

/* Free a string returned by this library. NULL: no-op. */
void uzswap_string_free(char *s);

/* The message of the calling thread's last failed call ("" if none). The
 * pointer stays valid until the next failing call on this thread. */
const char *uzswap_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* UZSWAP_H */
