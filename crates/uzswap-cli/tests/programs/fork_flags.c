/* A program's fork flags on its memory (madvise MADV_WIPEONFORK and
 * MADV_DONTFORK), with most of that memory evicted at the fork. The
 * program fills 64 MiB and a 4 MiB range F, flags F by MODE, then writes
 * the 64 MiB again (so that F is evicted under a 16 MiB budget), and
 * forks; the child checks the 64 MiB and F:
 *
 *   wipe      F flagged MADV_WIPEONFORK: the child reads zeros there,
 *             evicted pages too (they read the parent's bytes before);
 *   dontfork  F flagged MADV_DONTFORK: a read of it in the child ends in
 *             SIGSEGV (it is not the child's);
 *   reuse     F flagged MADV_WIPEONFORK, unmapped, and a new 4 MiB mapping
 *             made, and filled again just before the fork: the child reads
 *             its bytes wherever it lies (the flag must not outlive the
 *             mapping it was given to);
 *   mremap    F flagged MADV_WIPEONFORK and moved (grown to 8 MiB, with
 *             an obstacle after it): the flag moves with it.
 *
 * The parent checks F after the child exits. Prints "ok fork_flags MODE"
 * or what differed (exit 1). Usage: fork_flags MODE [held] (held: F's
 * addresses stay taken in the child, as uzswap holds them). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MB (1UL << 20)

static uint64_t word(size_t i, uint64_t seed) { return 0x9e3779b97f4a7c15ULL * seed + i / 64; }

static size_t differ(const uint64_t *p, size_t bytes, uint64_t seed) {
    size_t n = 0;
    for (size_t i = 0; i < bytes / 8; i++) n += p[i] != word(i, seed);
    return n;
}

static void fill(uint64_t *p, size_t bytes, uint64_t seed) {
    for (size_t i = 0; i < bytes / 8; i++) p[i] = word(i, seed);
}

static sigjmp_buf env;

static void segv(int sig) {
    (void)sig;
    siglongjmp(env, 1);
}

/* Whether reading *p raises SIGSEGV. */
static int faults(volatile uint64_t *p) {
    struct sigaction sa = {0}, old;
    sa.sa_handler = segv;
    sigaction(SIGSEGV, &sa, &old);
    int r = 1;
    if (!sigsetjmp(env, 1)) {
        (void)*p;
        r = 0;
    }
    sigaction(SIGSEGV, &old, 0);
    return r;
}

static uint64_t *map(size_t bytes) {
    void *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(2); }
    return p;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int held = argc > 2 && !strcmp(argv[2], "held");
    size_t len = 64 * MB, flen = 4 * MB;
    uint64_t *a = map(len), *f = map(flen);
    fill(a, len, 1);
    fill(f, flen, 2);
    int wipe = 1;
    if (!strcmp(mode, "wipe")) {
        if (madvise(f, flen, MADV_WIPEONFORK)) { perror("madvise"); return 2; }
    } else if (!strcmp(mode, "dontfork")) {
        if (madvise(f, flen, MADV_DONTFORK)) { perror("madvise"); return 2; }
        wipe = 0;
    } else if (!strcmp(mode, "reuse")) {
        if (madvise(f, flen, MADV_WIPEONFORK)) { perror("madvise"); return 2; }
        munmap(f, flen);
        f = map(flen);
        fill(f, flen, 2);
        wipe = 0;
    } else if (!strcmp(mode, "mremap")) {
        if (madvise(f, flen, MADV_WIPEONFORK)) { perror("madvise"); return 2; }
        /* Whatever lies after F, something does now. */
        mmap((char *)f + flen, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        void *g = mremap(f, flen, 2 * flen, MREMAP_MAYMOVE);
        if (g == MAP_FAILED) { perror("mremap"); return 2; }
        f = g;
        flen *= 2;
        fill(f, flen, 2);
    } else {
        fprintf(stderr, "usage: fork_flags wipe|dontfork|reuse|mremap\n");
        return 2;
    }
    fill(a, len, 3);
    /* The new mapping resident at the fork: what the kernel wipes. */
    if (!strcmp(mode, "reuse")) fill(f, flen, 2);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 2; }
    if (pid == 0) {
        int bad = 0;
        size_t n = differ(a, len, 3);
        if (n) { printf("child: %zu words differ\n", n); bad = 1; }
        if (!strcmp(mode, "dontfork")) {
            if (!faults(f) || !faults(f + flen / 16)) {
                printf("child: the range left out reads\n");
                bad = 1;
            }
            /* Under uzswap (HELD), nor may the kernel place new mappings
             * there (its top-down search finds the hole first): they would
             * lie inside what uzswap takes for region memory. */
            char *m = (char *)syscall(SYS_mmap, 0, flen / 4, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (held && m != MAP_FAILED && m < (char *)f + flen && (char *)f < m + flen / 4) {
                printf("child: a new mapping in the range left out\n");
                bad = 1;
            }
        } else if (wipe) {
            size_t nz = 0;
            for (size_t i = 0; i < flen / 8; i++) nz += f[i] != 0;
            if (nz) { printf("child: %zu words not wiped\n", nz); bad = 1; }
        } else if ((n = differ(f, flen, 2))) {
            printf("child: %zu words of the new mapping differ\n", n);
            bad = 1;
        }
        fflush(stdout);
        exit(bad);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return 1;
    size_t n = differ(f, flen, 2);
    if (n) { printf("parent: %zu words differ\n", n); return 1; }
    printf("ok fork_flags %s\n", mode);
    return 0;
}
