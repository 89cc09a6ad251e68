/* Pages dropped with madvise(MADV_DONTNEED) made as a raw system call,
 * past libc and so past the library's wrapper, as Go's runtime returns
 * memory: 96 blocks of 1 MiB under a 32 MiB budget, shared among argv[1]
 * threads (default 1), a quarter of each dropped right after it is
 * written, then read over three times. A
 * dropped page reads as zeros, or (where uzswap had stored it before the
 * drop, which it cannot see) as written; every other page as written.
 * The evictor's read of a dropped page used to wait on its own chunk for
 * ever. With -DGO_LIKE the binary also looks like a Go program to
 * `uzswap run` (a `.go.buildinfo` section) and to the library (the
 * runtime's exported `crosscall2`; link with -rdynamic). */
#include <pthread.h>
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

static char *blk[BLOCKS];
static int threads = 1;

/* Thread `t`'s blocks: written, dropped, read over; 0 or 1 on a page
 * that is neither as written nor dropped. */
static void *run(void *arg) {
    size_t t = (size_t)arg, zeros = 0;
    for (size_t b = t; b < BLOCKS; b += threads) {
        char *m = malloc(MB + PAGE);
        if (!m) return (void *)1;
        blk[b] = (char *)(((uintptr_t)m + PAGE - 1) & ~(PAGE - 1));
        for (size_t p = 0; p < PAGES; p++)
            for (size_t k = 0; k < PAGE / 8; k += 8)
                ((uint64_t *)(blk[b] + p * PAGE))[k] = word(b, p, k);
        long r = raw_madvise(blk[b] + DROP_FROM * PAGE, (DROP_TO - DROP_FROM) * PAGE,
                             MADV_DONTNEED);
        if (r) {
            printf("madvise: %ld\n", r);
            return (void *)1;
        }
    }
    for (int pass = 0; pass < 3; pass++)
        for (size_t b = t; b < BLOCKS; b += threads)
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
                    return (void *)1;
                }
                if (pass == 2 && dropped(p)) zeros += zero;
            }
    return (void *)(uintptr_t)(zeros ? 0 : 2);
}

int main(int argc, char **argv) {
    alarm(120);
    if (argc > 1) threads = atoi(argv[1]);
    if (threads < 1 || threads > 16) return 1;
    pthread_t th[16];
    for (int t = 0; t < threads; t++)
        if (pthread_create(&th[t], 0, run, (void *)(size_t)t)) return 1;
    int bad = 0;
    for (int t = 0; t < threads; t++) {
        void *r;
        pthread_join(th[t], &r);
        if (r == (void *)2) printf("thread %d: no dropped page reads as zeros\n", t);
        bad |= r != 0;
    }
    if (bad) return 1;
    printf("ok raw_drops\n");
    return 0;
}
