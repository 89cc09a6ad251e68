/*
 * Allocator edge cases a program meets under `uzswap run`:
 * - a block larger than mimalloc's arenas, which mimalloc maps on its own:
 *   free() and realloc() must still know it as mimalloc's (GNU sort's
 *   buffer is such a block);
 * - a forked child, whose allocations come from glibc, asking
 *   malloc_usable_size() and realloc() about them while another allocator
 *   is loaded after the preload library (redis links jemalloc, and its
 *   BGSAVE child does this).
 * Prints "ok" and exits 0, or says what failed and exits 1.
 *
 * usage: alloc_edges HUGE_MIB
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "alloc_edges: %s\n", what);
    return 1;
}

static int small_blocks(void) {
    char *p = malloc(100);
    if (!p || malloc_usable_size(p) < 100) return fail("malloc_usable_size of a small block");
    memset(p, 7, 100);
    p = realloc(p, 5000);
    if (!p || p[99] != 7 || malloc_usable_size(p) < 5000) return fail("realloc of a small block");
    free(p);
    return 0;
}

int main(int argc, char **argv) {
    size_t huge = (argc > 1 ? strtoull(argv[1], NULL, 10) : 300) << 20;
    char *h = malloc(huge);
    if (!h) return fail("malloc of a huge block");
    /* Its ends only: the block need not be resident. */
    h[0] = 1;
    h[huge - 1] = 2;
    if (malloc_usable_size(h) < huge) return fail("malloc_usable_size of a huge block");
    h = realloc(h, huge + (1 << 20));
    if (!h || h[0] != 1 || h[huge - 1] != 2) return fail("realloc of a huge block");
    free(h);
    char *z = calloc(1, huge);
    if (!z || z[huge / 2] != 0) return fail("calloc of a huge block");
    free(z);
    if (small_blocks()) return 1;
    pid_t pid = fork();
    if (pid < 0) return fail("fork");
    if (pid == 0) _exit(small_blocks());
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return fail("the forked child's allocations");
    puts("ok");
    return 0;
}
