/*
 * Blocks of 2-32 KiB, the sizes the preload library serves from its
 * best-fit heap (alloc.rs, `mid`), under a budget that evicts them:
 * - the main thread, the first to ask, allocates from that heap; three
 *   other threads allocate the same sizes (from mimalloc) and free a share
 *   of the main thread's blocks while it allocates (frees that find the
 *   heap's lock held are left for its next holder);
 * - realloc within those sizes, out of them (smaller and larger) and into
 *   them keeps every byte the old and new sizes share;
 * - malloc_usable_size() is at least the size asked;
 * - a forked child reads every block, frees some, allocates more and reads
 *   those back.
 * Every block holds a pattern of its index, checked before it is freed.
 * Prints "ok" and exits 0, or says what failed and exits 1.
 *
 * usage: mid_blocks BLOCKS
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static size_t n;
static unsigned char **blk;
static size_t *len;

static size_t size_of_block(size_t i) { return 2048 + (i * 7919) % 30721; }

static void fill(unsigned char *p, size_t l, size_t i) {
    for (size_t k = 0; k < l; k++) p[k] = (unsigned char)(i * 31 + k * 7);
}

static int check(const unsigned char *p, size_t l, size_t i) {
    for (size_t k = 0; k < l; k++)
        if (p[k] != (unsigned char)(i * 31 + k * 7)) return 0;
    return 1;
}

static int fail(const char *what, size_t i) {
    fprintf(stderr, "mid_blocks: %s (block %zu)\n", what, i);
    return 1;
}

/* A worker: its own blocks of the same sizes, and every fourth of the
 * main thread's blocks with index = id (mod 4) freed once allocated. */
static void *worker(void *arg) {
    size_t id = (size_t)arg;
    unsigned char *own[256];
    for (size_t j = 0; j < 256; j++) {
        own[j] = malloc(size_of_block(j + id));
        if (!own[j]) return (void *)1;
        fill(own[j], size_of_block(j + id), j + id);
    }
    for (size_t i = id; i < n; i += 4) {
        unsigned char *p;
        while (!(p = __atomic_load_n(&blk[i], __ATOMIC_ACQUIRE))) usleep(50);
        if (!check(p, len[i], i)) return (void *)2;
        __atomic_store_n(&blk[i], NULL, __ATOMIC_RELEASE);
        free(p);
    }
    for (size_t j = 0; j < 256; j++) {
        if (!check(own[j], size_of_block(j + id), j + id)) return (void *)3;
        free(own[j]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? strtoull(argv[1], NULL, 10) : 4000;
    blk = calloc(n, sizeof *blk);
    len = calloc(n, sizeof *len);
    if (!blk || !len) return fail("calloc", 0);
    /* The main thread asks first: the heap is its. */
    unsigned char *first = malloc(4096);
    if (!first) return fail("malloc", 0);
    free(first);
    pthread_t t[3];
    for (size_t w = 1; w <= 3; w++)
        if (pthread_create(&t[w - 1], NULL, worker, (void *)w)) return fail("pthread_create", w);
    for (size_t i = 0; i < n; i++) {
        size_t l = size_of_block(i);
        unsigned char *p = malloc(l);
        if (!p) return fail("malloc", i);
        if (malloc_usable_size(p) < l) return fail("malloc_usable_size", i);
        fill(p, l, i);
        len[i] = l;
        __atomic_store_n(&blk[i], p, __ATOMIC_RELEASE);
    }
    for (size_t w = 0; w < 3; w++) {
        void *r;
        pthread_join(t[w], &r);
        if (r) return fail("a worker found a block changed", w + 1);
    }
    /* What is left: every fourth block (index = 0 mod 4). Resize them. */
    static const size_t to[] = {3000, 30000, 1000, 100000, 2048, 32768};
    for (size_t i = 0; i < n; i += 4) {
        size_t nl = to[(i / 4) % 6], keep = nl < len[i] ? nl : len[i];
        if (!check(blk[i], len[i], i)) return fail("a block changed", i);
        unsigned char *p = realloc(blk[i], nl);
        if (!p) return fail("realloc", i);
        if (!check(p, keep, i)) return fail("realloc lost bytes", i);
        if (malloc_usable_size(p) < nl) return fail("malloc_usable_size after realloc", i);
        fill(p, nl, i);
        blk[i] = p;
        len[i] = nl;
    }
    pid_t pid = fork();
    if (pid < 0) return fail("fork", 0);
    if (pid == 0) {
        for (size_t i = 0; i < n; i += 4) {
            if (!check(blk[i], len[i], i)) _exit(2);
            if (i % 8 == 0) free(blk[i]);
        }
        for (size_t j = 0; j < 200; j++) {
            size_t l = size_of_block(j + 1);
            unsigned char *p = malloc(l);
            if (!p) _exit(3);
            fill(p, l, j + 1);
            if (!check(p, l, j + 1)) _exit(4);
        }
        _exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return fail("the forked child found a block changed", 0);
    for (size_t i = 0; i < n; i += 4) {
        if (!check(blk[i], len[i], i)) return fail("a block changed after the fork", i);
        free(blk[i]);
    }
    puts("ok");
    return 0;
}
