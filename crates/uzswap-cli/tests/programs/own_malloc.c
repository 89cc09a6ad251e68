/* A program that brings its own malloc, as rustc brings jemalloc: the
 * executable's malloc family serves the whole process (libc's own calls
 * included), and its heap comes from mmap, so it lies in uzswap's regions.
 * Threads fill blocks larger in all than the budget and check every one. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The heap grows by mappings of this size, as real allocators grow theirs
 * (the first is mapped before uzswap starts, by libc's first allocation);
 * each thread allocates from a piece of its own, under the lock a real
 * allocator would hold (a thread may fault on the heap while holding it). */
#define PIECE (8UL << 20)
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char *piece;
static __thread size_t used = PIECE;

static void *bump(size_t align, size_t n) {
    if (align < 16) align = 16;
    if (n + align + 16 > PIECE) abort();
    pthread_mutex_lock(&lock);
    size_t at = (used + 16 + align - 1) & ~(align - 1);
    if (at + n > PIECE) {
        piece = mmap(NULL, PIECE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (piece == MAP_FAILED) abort();
        at = (16 + align - 1) & ~(align - 1);
    }
    /* The block's size, just before it. */
    *(size_t *)(piece + at - 8) = n;
    used = at + n;
    pthread_mutex_unlock(&lock);
    return piece + at;
}

void *malloc(size_t n) { return bump(16, n); }
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) { return bump(16, a * b); /* fresh memory is zero */ }
size_t malloc_usable_size(void *p) { return p ? *((size_t *)p - 1) : 0; }
void *realloc(void *p, size_t n) {
    void *q = bump(16, n);
    if (p) memcpy(q, p, malloc_usable_size(p) < n ? malloc_usable_size(p) : n);
    return q;
}
void *memalign(size_t a, size_t n) { return bump(a, n); }
void *aligned_alloc(size_t a, size_t n) { return bump(a, n); }
int posix_memalign(void **p, size_t a, size_t n) { *p = bump(a, n); return 0; }

static size_t per_thread;

static void *work(void *arg) {
    uintptr_t t = (uintptr_t)arg;
    size_t n = per_thread / 4096;
    uint64_t **blocks = malloc(n * sizeof *blocks);
    for (size_t i = 0; i < n; i++) {
        blocks[i] = malloc(4096);
        for (int w = 0; w < 512; w += 64) blocks[i][w] = t << 40 | i << 8 | w;
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++)
            for (int w = 0; w < 512; w += 64)
                if (blocks[i][w] != (t << 40 | i << 8 | w)) {
                    fprintf(stderr, "thread %lu block %zu: wrong bytes\n", (unsigned long)t, i);
                    exit(1);
                }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 4;
    per_thread = (argc > 1 ? strtoul(argv[1], 0, 10) : 16) << 20;
    pthread_t th[4];
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, work, (void *)(uintptr_t)i);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    printf("ok own malloc\n");
    return 0;
}
