/* The memory calls made through syscall(2) instead of their libc
 * wrappers, on memory uzswap holds: MADV_DONTNEED reads back zeros even
 * where the pages were evicted, munmap of part of a mapping leaves the
 * rest intact, mprotect to read-only keeps the bytes, mremap grows and
 * moves a mapping with its bytes, and a MAP_FIXED mapping over part of
 * one reads zeros there. 64 MiB in mappings of 4 MiB under a 16 MiB
 * budget, so most of it is evicted between the steps. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MB (1UL << 20)
#define PAGE 4096UL
#define MAPS 16
#define LEN (4 * MB)

static uint64_t want(size_t m, size_t o) { return (m * LEN + o) * 0x9e3779b97f4a7c15ULL; }

static void fill(char *p, size_t m) {
    for (size_t o = 0; o < LEN; o += PAGE) *(uint64_t *)(p + o) = want(m, o);
}

/* Page `o` of mapping `m` at `p`: as written, or zero where `zero`. */
static int check(const char *p, size_t m, size_t o, int zero, const char *what) {
    uint64_t v = *(const uint64_t *)(p + o);
    if (v != (zero ? 0 : want(m, o))) {
        printf("%s: mapping %zu offset %zu reads %llx\n", what, m, o, (unsigned long long)v);
        return 1;
    }
    return 0;
}

static long sys(long nr, long a, long b, long c, long d, long e, long f) {
    long r = syscall(nr, a, b, c, d, e, f);
    if (r == -1) {
        perror("syscall");
        exit(1);
    }
    return r;
}

int main(void) {
    alarm(120);
    char *p[MAPS];
    for (size_t m = 0; m < MAPS; m++) {
        p[m] = mmap(0, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p[m] == MAP_FAILED) return 1;
        fill(p[m], m);
    }
    int bad = 0;
    /* Dropped: the first MiB of every mapping, most of it evicted by now. */
    for (size_t m = 0; m < MAPS; m++) sys(SYS_madvise, (long)p[m], MB, MADV_DONTNEED, 0, 0, 0);
    /* Unmapped: the last MiB of mapping 1. */
    sys(SYS_munmap, (long)(p[1] + 3 * MB), MB, 0, 0, 0, 0);
    /* Read-only: mapping 2. */
    sys(SYS_mprotect, (long)p[2], LEN, PROT_READ, 0, 0, 0);
    /* Grown and moved: mapping 3, to twice its size. */
    p[3] = (char *)sys(SYS_mremap, (long)p[3], LEN, 2 * LEN, MREMAP_MAYMOVE, 0, 0);
    memset(p[3] + LEN, 0x5a, LEN);
    /* A fresh mapping over the second MiB of mapping 4. */
    sys(SYS_mmap, (long)(p[4] + MB), MB, PROT_READ | PROT_WRITE,
        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    for (int pass = 0; pass < 2; pass++)
        for (size_t m = 0; m < MAPS; m++)
            for (size_t o = 0; o < LEN; o += PAGE) {
                if (m == 1 && o >= 3 * MB) continue;
                int zero = o < MB || (m == 4 && o < 2 * MB);
                bad |= check(p[m], m, o, zero, "read");
                if (bad) return 1;
            }
    for (size_t o = LEN; o < 2 * LEN; o += PAGE)
        if ((unsigned char)p[3][o] != 0x5a) {
            printf("grown part of mapping 3 at %zu\n", o);
            return 1;
        }
    printf("ok syscall_mem\n");
    return 0;
}
