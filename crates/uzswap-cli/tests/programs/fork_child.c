/* A forked child's memory under uzswap: the parent fills 64 MiB (most of
 * it evicted under the budget) and forks. The child checks every byte it
 * inherited, drops part of it (MADV_DONTNEED, whole and part chunks:
 * zeros, neighbours kept), then allocates and fills 128 MiB of its own,
 * which must stay under its budget (the growth of its RssAnon bounded)
 * and read back intact. It also forks a grandchild that checks its own
 * copy. The parent's bytes are unchanged by any of it. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MB (1UL << 20)
#define PAGE 4096UL

static long rss_anon_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8)) kb = strtol(line + 8, 0, 10);
    if (f) fclose(f);
    return kb;
}

static void fill(uint64_t *p, size_t len, uint64_t seed) {
    for (size_t i = 0; i < len / 8; i++) p[i] = seed * 0x9e3779b97f4a7c15ULL + i / 64;
}

static int check(const uint64_t *p, size_t len, uint64_t seed) {
    for (size_t i = 0; i < len / 8; i++)
        if (p[i] != seed * 0x9e3779b97f4a7c15ULL + i / 64) return 0;
    return 1;
}

static int zeros(const char *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (p[i]) return 0;
    return 1;
}

static int wait_ok(pid_t pid) {
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
    size_t own_mb = argc > 1 ? strtoul(argv[1], 0, 10) : 128;
    size_t inh = 64 * MB;
    uint64_t *a = mmap(0, inh, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) { perror("mmap"); return 1; }
    fill(a, inh, 1);
    /* Let the evictor settle: a fork while one of uzswap's threads is
     * inside parking_lot's table can hang the child (--fork-instance's
     * known hazard, docs/ARCHITECTURE.md). */
    usleep(300000);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        if (!check(a, inh, 1)) { fprintf(stderr, "child: inherited bytes differ\n"); _exit(2); }
        /* Dropped: a whole 2 MiB, and one page in the middle of a chunk. */
        char *c = (char *)a;
        if (madvise(c + 8 * MB, 2 * MB, MADV_DONTNEED) ||
            madvise(c + 16 * MB + 5 * PAGE, PAGE, MADV_DONTNEED)) { perror("madvise"); _exit(3); }
        if (!zeros(c + 8 * MB, 2 * MB) || !zeros(c + 16 * MB + 5 * PAGE, PAGE)) {
            fprintf(stderr, "child: dropped inherited memory does not read zeros\n");
            _exit(4);
        }
        /* The pages around the dropped one keep their bytes. */
        for (size_t o = 16 * MB; o < 16 * MB + 64 * 1024; o += 8)
            if ((o < 16 * MB + 5 * PAGE || o >= 16 * MB + 6 * PAGE) &&
                a[o / 8] != 1 * 0x9e3779b97f4a7c15ULL + (o / 8) / 64) {
                fprintf(stderr, "child: a neighbour of the dropped page changed\n");
                _exit(6);
            }
        long before = rss_anon_kb();
        size_t n = own_mb;
        uint64_t **blk = malloc(n * sizeof *blk);
        for (size_t i = 0; i < n; i++) {
            blk[i] = malloc(MB);
            if (!blk[i]) { perror("malloc"); _exit(7); }
            fill(blk[i], MB, 100 + i);
        }
        long peak = rss_anon_kb();
        for (size_t i = 0; i < n; i++) {
            if (!check(blk[i], MB, 100 + i)) { fprintf(stderr, "child: block %zu differs\n", i); _exit(8); }
            long r = rss_anon_kb();
            if (r > peak) peak = r;
        }
        usleep(300000);
        pid_t g = fork();
        if (g == 0) {
            int ok = check(blk[n / 2], MB, 100 + n / 2) && check(a, 8 * MB, 1);
            _exit(ok ? 0 : 9);
        }
        if (g < 0 || !wait_ok(g)) { fprintf(stderr, "grandchild failed\n"); _exit(10); }
        /* Growth of the child's own anonymous memory, in MiB. */
        printf("child grew %ld\n", (peak - before) >> 10);
        /* exit, not _exit: the child's figures are written at its exit. */
        exit(0);
    }
    if (!wait_ok(pid)) { fprintf(stderr, "child failed\n"); return 1; }
    if (!check(a, inh, 1)) { fprintf(stderr, "parent: bytes differ\n"); return 1; }
    printf("ok fork_child\n");
    return 0;
}
