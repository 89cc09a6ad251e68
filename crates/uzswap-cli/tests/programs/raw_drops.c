/* Pages dropped with madvise(MADV_DONTNEED) made as a raw system call,
 * past libc and so past the library's wrapper, as Go's runtime returns
 * memory: 96 blocks of 1 MiB under a 32 MiB budget, a quarter of each
 * dropped right after it is written, then read over three times. A
 * dropped page reads as zeros, or (where uzswap had stored it before the
 * drop, which it cannot see) as written; every other page as written.
 * The evictor's read of a dropped page used to wait on its own chunk for
 * ever. With -DGO_LIKE the binary also looks like a Go program to
 * `uzswap run` (a `.go.buildinfo` section) and to the library (the
 * runtime's exported `crosscall2`; link with -rdynamic). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef GO_LIKE
__attribute__((used, section(".go.buildinfo"))) static const char buildinfo[32] =
    "\xff Go buildinf:";
void crosscall2(void) {}
#endif

#define BLOCKS 96
#define MB (1UL << 20)
#define PAGE 4096UL
#define PAGES (MB / PAGE)
#define DROP_FROM 16
#define DROP_TO 80

static long raw_madvise(void *a, size_t len, long advice) {
#if defined(__x86_64__)
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(28L), "D"(a), "S"(len), "d"(advice)
                     : "rcx", "r11", "memory");
    return r;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = 233;
    register long x0 __asm__("x0") = (long)a;
    register long x1 __asm__("x1") = (long)len;
    register long x2 __asm__("x2") = advice;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
#else
#error "raw_drops.c: no raw system call for this architecture"
#endif
}

static uint64_t word(size_t b, size_t p, size_t k) {
    return (b * PAGES + p) * 0x9e3779b97f4a7c15ULL + k;
}

static int dropped(size_t p) { return p >= DROP_FROM && p < DROP_TO; }

int main(void) {
    alarm(120);
    char *blk[BLOCKS];
    for (size_t b = 0; b < BLOCKS; b++) {
        char *m = malloc(MB + PAGE);
        if (!m) return 1;
        blk[b] = (char *)(((uintptr_t)m + PAGE - 1) & ~(PAGE - 1));
        for (size_t p = 0; p < PAGES; p++)
            for (size_t k = 0; k < PAGE / 8; k += 8)
                ((uint64_t *)(blk[b] + p * PAGE))[k] = word(b, p, k);
        long r = raw_madvise(blk[b] + DROP_FROM * PAGE, (DROP_TO - DROP_FROM) * PAGE,
                             MADV_DONTNEED);
        if (r) {
            printf("madvise: %ld\n", r);
            return 1;
        }
    }
    size_t zeros = 0, kept = 0;
    for (int pass = 0; pass < 3; pass++)
        for (size_t b = 0; b < BLOCKS; b++)
            for (size_t p = 0; p < PAGES; p++) {
                const uint64_t *w = (const uint64_t *)(blk[b] + p * PAGE);
                int as_written = 1, zero = 1;
                for (size_t k = 0; k < PAGE / 8; k++) {
                    uint64_t want = k % 8 ? 0 : word(b, p, k);
                    as_written &= w[k] == want;
                    zero &= w[k] == 0;
                }
                if (!as_written && !(dropped(p) && zero)) {
                    printf("block %zu page %zu pass %d: neither as written nor dropped\n", b, p,
                           pass);
                    return 1;
                }
                if (pass == 2 && dropped(p)) {
                    zeros += zero;
                    kept += as_written;
                }
            }
    if (zeros == 0) {
        printf("no dropped page reads as zeros (%zu as written)\n", kept);
        return 1;
    }
    printf("ok raw_drops\n");
    return 0;
}
