/* mlock(2) and mlockall(2) on memory uzswap holds: a locked piece stays
 * resident (mincore) and locked (VmLck) while the rest is evicted around
 * it, keeps every byte, refuses MADV_DONTNEED as the kernel does, moves
 * locked with mremap, and is evicted again once unlocked. Locking more
 * than half the budget is refused with ENOMEM. mlockall locks the code
 * and named mappings, not the memory under uzswap, which stays under the
 * budget; munlockall lets it all go. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MB (1UL << 20)
#define PAGE 4096UL

static long vmlck_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmLck:", 6)) kb = strtol(line + 6, 0, 10);
    if (f) fclose(f);
    return kb;
}

static size_t resident_pages(char *p, size_t len) {
    unsigned char v[len / PAGE];
    if (mincore(p, len, v)) { perror("mincore"); exit(1); }
    size_t n = 0;
    for (size_t i = 0; i < len / PAGE; i++) n += v[i] & 1;
    return n;
}

static void fill(char *p, size_t len, uint64_t seed) {
    for (size_t o = 0; o < len; o += PAGE) *(uint64_t *)(p + o) = seed + o;
}

static void check(char *p, size_t len, uint64_t seed, const char *what) {
    for (size_t o = 0; o < len; o += PAGE)
        if (*(uint64_t *)(p + o) != seed + o) {
            fprintf(stderr, "%s: offset %zu wrong\n", what, o);
            exit(1);
        }
}

static void churn(char *p, size_t len, uint64_t seed) {
    for (int pass = 0; pass < 2; pass++) check(p, len, seed, "churn");
}

int main(void) {
    size_t heap = 96 * MB, piece = 2 * MB;
    char *h = mmap(NULL, heap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (h == MAP_FAILED) { perror("mmap"); return 1; }
    fill(h, heap, 1);
    char *l = h + 8 * MB;
    long before = vmlck_kb();
    if (mlock(l, piece)) { perror("mlock"); return 1; }
    if (vmlck_kb() < before + (long)(piece / 1024)) { fprintf(stderr, "VmLck %ld after mlock\n", vmlck_kb()); return 1; }
    churn(h + 16 * MB, heap - 16 * MB, 1 + 16 * MB);
    if (resident_pages(l, piece) != piece / PAGE) {
        fprintf(stderr, "locked piece: %zu of %zu pages resident\n", resident_pages(l, piece), piece / PAGE);
        return 1;
    }
    if (resident_pages(h + 16 * MB, heap - 16 * MB) > (heap - 16 * MB) / PAGE / 2) {
        fprintf(stderr, "the rest was not evicted\n"); return 1;
    }
    if (madvise(l, PAGE, MADV_DONTNEED) == 0 || errno != EINVAL) {
        fprintf(stderr, "MADV_DONTNEED on locked memory did not fail with EINVAL\n"); return 1;
    }
    check(h, heap, 1, "with a piece locked");
    /* Locked memory moved by mremap stays locked, grown part included. */
    char *n = mremap(l, piece, 2 * piece, MREMAP_MAYMOVE);
    if (n == MAP_FAILED) { perror("mremap"); return 1; }
    check(n, piece, 1 + 8 * MB, "moved locked");
    churn(h + 16 * MB, heap - 16 * MB, 1 + 16 * MB);
    if (resident_pages(n, 2 * piece) != 2 * piece / PAGE) { fprintf(stderr, "moved piece not resident\n"); return 1; }
    if (munlock(n, 2 * piece)) { perror("munlock"); return 1; }
    if (vmlck_kb() > before) { fprintf(stderr, "VmLck %ld after munlock\n", vmlck_kb()); return 1; }
    churn(h + 16 * MB, heap - 16 * MB, 1 + 16 * MB);
    if (resident_pages(n, 2 * piece) == 2 * piece / PAGE) { fprintf(stderr, "unlocked piece never evicted\n"); return 1; }
    check(n, piece, 1 + 8 * MB, "moved, unlocked");
    /* Half the budget (the caller's, 32 MiB) is the limit. */
    if (mlock(h + 16 * MB, 20 * MB) == 0 || errno != ENOMEM) { fprintf(stderr, "20 MiB locked under a 32 MiB budget\n"); return 1; }
    /* MLOCK_ONFAULT: locked as touched. */
    if (mlock2(h + 24 * MB, piece, MLOCK_ONFAULT)) { perror("mlock2"); return 1; }
    check(h + 24 * MB, piece, 1 + 24 * MB, "locked on fault");
    churn(h + 32 * MB, heap - 32 * MB, 1 + 32 * MB);
    if (resident_pages(h + 24 * MB, piece) != piece / PAGE) { fprintf(stderr, "locked-on-fault piece evicted\n"); return 1; }
    if (munlock(h + 24 * MB, piece)) { perror("munlock onfault"); return 1; }
    if (munmap(n, 2 * piece) || munmap(h, heap)) { perror("munmap"); return 1; }
    /* mlockall: the code locked, the heap still under the budget. */
    char *s = mmap(NULL, 48 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    fill(s, 48 * MB, 5);
    if (mlockall(MCL_CURRENT | MCL_FUTURE)) {
        if (errno == ENOMEM && geteuid() != 0) {
            /* RLIMIT_MEMLOCK of an unprivileged user is smaller than the
             * program's code and libraries. */
            fprintf(stderr, "mlockall refused by RLIMIT_MEMLOCK: its checks skipped\n");
            munlockall();
            printf("ok mlock\n");
            return 0;
        }
        perror("mlockall"); return 1;
    }
    long all = vmlck_kb();
    if (all < 512) { fprintf(stderr, "mlockall locked %ld kB: not the code\n", all); return 1; }
    /* Not the regions' reservations (gigabytes), nor the heap. */
    if (all > 256 * 1024) { fprintf(stderr, "mlockall locked %ld kB\n", all); return 1; }
    /* The heap still goes out and comes back under the budget. */
    churn(s, 48 * MB, 5);
    if (munlockall() || vmlck_kb() != 0) { fprintf(stderr, "munlockall: VmLck %ld\n", vmlck_kb()); return 1; }
    check(s, 48 * MB, 5, "after mlockall");
    printf("ok mlock\n");
    return 0;
}
