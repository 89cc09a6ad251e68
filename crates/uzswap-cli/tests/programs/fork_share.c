/* A fork whose child takes the parent's evicted memory over from its copy of
 * the parent's cache, with nothing brought in first. The parent fills 64
 * MiB (most of it evicted under the budget) and forks. Then the parent
 * writes all of it again (freeing and reusing its pool's objects) and only
 * then lets the child look: the child must still read the bytes of the
 * fork. The child writes the first half anew, forks a grandchild that
 * checks both halves, and checks them itself; the second half it only
 * reads. Usage: fork_share [ROUNDS] (the child reads the second half
 * ROUNDS times). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MB (1UL << 20)

/* Bytes `from .. to` of `p`: a word per 512 bytes, from the seed and
 * the offset (every page differs, and compresses). */
static void fill(uint64_t *p, size_t from, size_t to, uint64_t seed) {
    for (size_t i = from / 8; i < to / 8; i++) p[i] = seed * 0x9e3779b97f4a7c15ULL + i / 64;
}

static int check(const uint64_t *p, size_t from, size_t to, uint64_t seed) {
    for (size_t i = from / 8; i < to / 8; i++)
        if (p[i] != seed * 0x9e3779b97f4a7c15ULL + i / 64) return 0;
    return 1;
}

static int wait_ok(pid_t pid) {
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    size_t len = 64 * MB, half = len / 2;
    uint64_t *a = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) { perror("mmap"); return 1; }
    fill(a, 0, len, 1);
    int go[2];
    if (pipe(go)) { perror("pipe"); return 1; }
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1) { fprintf(stderr, "child: no go\n"); _exit(2); }
        if (!check(a, 0, len, 1)) { fprintf(stderr, "child: inherited bytes differ\n"); _exit(3); }
        fill(a, 0, half, 3);
        pid_t g = fork();
        if (g == 0) _exit(check(a, 0, half, 3) && check(a, half, len, 1) ? 0 : 4);
        if (g < 0 || !wait_ok(g)) { fprintf(stderr, "child: grandchild failed\n"); _exit(5); }
        for (int r = 0; r < rounds; r++)
            if (!check(a, half, len, 1)) { fprintf(stderr, "child: second half differs\n"); _exit(6); }
        if (!check(a, 0, half, 3)) { fprintf(stderr, "child: first half differs\n"); _exit(7); }
        /* exit, not _exit: the child's figures are written at its exit. */
        exit(0);
    }
    close(go[0]);
    fill(a, 0, len, 2);
    if (write(go[1], "g", 1) != 1) { perror("write"); return 1; }
    if (!wait_ok(pid)) { fprintf(stderr, "child failed\n"); return 1; }
    if (!check(a, 0, len, 2)) { fprintf(stderr, "parent: bytes differ\n"); return 1; }
    printf("ok fork_share\n");
    return 0;
}
