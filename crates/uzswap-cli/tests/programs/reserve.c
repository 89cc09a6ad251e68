/* Memory the way a managed runtime takes it (the JVM's heap, V8's pages):
 * address space reserved with PROT_NONE, committed by mmap(MAP_FIXED) or
 * mprotect(read+write), given back by mmap(MAP_FIXED, PROT_NONE) over it,
 * and committed again. Every committed byte is checked after the budget
 * made the memory go out and come back; uncommitted memory still faults
 * (SIGSEGV) and recommitted memory reads zeros. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MB (1UL << 20)
static sigjmp_buf jb;
static void on_segv(int s) { (void)s; siglongjmp(jb, 1); }

static int faults_on(volatile char *p) {
    if (sigsetjmp(jb, 1)) return 1;
    (void)*p;
    return 0;
}

static int write_faults_on(volatile char *p) {
    if (sigsetjmp(jb, 1)) return 1;
    *p = *p;
    return 0;
}

/* The word fill() wrote at the start of page `i` of p (seed `seed`), or 0. */
static void page_is(uint64_t *p, size_t i, uint64_t want, const char *what) {
    if (p[i * 512] != want) {
        fprintf(stderr, "%s: page %zu is %llx, not %llx\n", what, i,
                (unsigned long long)p[i * 512], (unsigned long long)want);
        exit(1);
    }
}

static void fill(uint64_t *p, size_t bytes, uint64_t seed) {
    for (size_t i = 0; i < bytes / 8; i += 512) p[i] = seed + i;
}

static void check(uint64_t *p, size_t bytes, uint64_t seed, const char *what) {
    for (size_t i = 0; i < bytes / 8; i += 512)
        if (p[i] != seed + i) {
            fprintf(stderr, "%s: word %zu is %llx, not %llx\n", what, i,
                    (unsigned long long)p[i], (unsigned long long)(seed + i));
            exit(1);
        }
}

static void zeros(uint64_t *p, size_t bytes, const char *what) {
    for (size_t i = 0; i < bytes / 8; i += 512)
        if (p[i]) {
            fprintf(stderr, "%s: word %zu not zero\n", what, i);
            exit(1);
        }
}

int main(int argc, char **argv) {
    size_t heap = (argc > 1 ? strtoul(argv[1], 0, 10) : 256) * MB;
    size_t step = 16 * MB;
    signal(SIGSEGV, on_segv);
    char *r = mmap(NULL, 4 * heap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) { perror("reserve"); return 1; }
    /* The first half committed with mmap(MAP_FIXED), as the JVM does. */
    for (size_t o = 0; o < heap / 2; o += step) {
        if (mmap(r + o, step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != r + o) {
            perror("commit (mmap)"); return 1;
        }
        fill((uint64_t *)(r + o), step, o);
    }
    /* The second half with mprotect, as V8 does. */
    for (size_t o = heap / 2; o < heap; o += step) {
        if (mprotect(r + o, step, PROT_READ | PROT_WRITE)) { perror("commit (mprotect)"); return 1; }
        fill((uint64_t *)(r + o), step, o);
    }
    if (!faults_on(r + heap)) { fprintf(stderr, "reserved memory readable\n"); return 1; }
    for (int pass = 0; pass < 2; pass++)
        for (size_t o = 0; o < heap; o += step) check((uint64_t *)(r + o), step, o, "committed");
    /* Uncommit a piece, fault on it, commit it again: zeros. */
    size_t u = heap / 4;
    if (mmap(r + u, step, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != r + u) {
        perror("uncommit"); return 1;
    }
    if (!faults_on(r + u + 4096)) { fprintf(stderr, "uncommitted memory readable\n"); return 1; }
    if (mprotect(r + u, step, PROT_READ | PROT_WRITE)) { perror("recommit"); return 1; }
    zeros((uint64_t *)(r + u), step, "recommitted");
    fill((uint64_t *)(r + u), step, u + 7);
    /* A committed piece made inaccessible and accessible again keeps its bytes. */
    size_t k = heap / 2 + step;
    if (mprotect(r + k, step, PROT_NONE) || !faults_on(r + k)) { fprintf(stderr, "protect\n"); return 1; }
    if (mprotect(r + k, step, PROT_READ | PROT_WRITE)) { perror("unprotect"); return 1; }
    for (size_t o = 0; o < heap; o += step)
        check((uint64_t *)(r + o), step, o == u ? u + 7 : o, "after uncommit");
    /* Committed again by mmap(MAP_FIXED) over memory that was inaccessible: zeros, writable. */
    if (mmap(r + u, step, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != r + u ||
        mmap(r + u, step, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != r + u) {
        perror("recommit (mmap)"); return 1;
    }
    zeros((uint64_t *)(r + u), step, "recommitted by mmap");
    fill((uint64_t *)(r + u), step, u + 9);
    check((uint64_t *)(r + u), step, u + 9, "recommitted by mmap");
    /* Decommitted as PartitionAlloc does: mprotect(PROT_NONE), then
     * MADV_DONTNEED, then read+write again: zeros, though the memory was
     * evicted before it was protected. A part of a piece the same way:
     * zeros there, its neighbours kept. */
    for (size_t o = heap / 2; o < heap; o += step) check((uint64_t *)(r + o), step, o, "evict the first half");
    size_t d = step, d2 = 3 * step;
    if (mprotect(r + d, step, PROT_NONE) || mprotect(r + d2, step, PROT_NONE) || madvise(r + d, step, MADV_DONTNEED) ||
        madvise(r + d2 + 4096, 3 * 4096, MADV_DONTNEED)) {
        perror("decommit"); return 1;
    }
    if (!faults_on(r + d2)) { fprintf(stderr, "decommitted memory readable\n"); return 1; }
    if (mprotect(r + d, step, PROT_READ | PROT_WRITE) || mprotect(r + d2, step, PROT_READ | PROT_WRITE)) { perror("recommit after DONTNEED"); return 1; }
    zeros((uint64_t *)(r + d), step, "decommitted by DONTNEED");
    for (size_t i = 0; i < step / 4096; i++)
        page_is((uint64_t *)(r + d2), i, i >= 1 && i < 4 ? 0 : d2 + i * 512, "partly decommitted");
    /* A read-only piece moved by mremap (the next piece is in the way)
     * keeps its bytes and its protection, the grown part included. */
    size_t m = 6 * step;
    if (mprotect(r + m, step, PROT_READ)) { perror("read-only"); return 1; }
    char *n = mremap(r + m, step, 2 * step, MREMAP_MAYMOVE);
    if (n == MAP_FAILED || n == r + m) { fprintf(stderr, "mremap did not move: %p\n", (void *)n); return 1; }
    check((uint64_t *)n, step, m, "moved read-only");
    if (!write_faults_on(n) || !write_faults_on(n + step + 4096) || faults_on(n + step)) {
        fprintf(stderr, "moved memory lost its protection\n"); return 1;
    }
    if (mprotect(n, 2 * step, PROT_READ | PROT_WRITE)) { perror("moved read+write"); return 1; }
    zeros((uint64_t *)(n + step), step, "grown by mremap");
    fill((uint64_t *)(n + step), step, 77);
    check((uint64_t *)n, step, m, "moved");
    check((uint64_t *)(n + step), step, 77, "grown");
    if (munmap(n, 2 * step)) { perror("munmap moved"); return 1; }
    if (munmap(r, 4 * heap)) { perror("munmap"); return 1; }
    printf("ok reserve\n");
    return 0;
}
