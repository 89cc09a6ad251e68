/*
 * A multi-threaded program for `uzswap bench programs` and the tests:
 * threads share one heap of many malloc'd blocks, make skewed random reads
 * and writes all over it, and the program prints a checksum of everything
 * at the end.
 *
 * The output is the same whatever the threads' interleaving, so that a
 * run under uzswap or a kernel swap backend can be compared byte for byte
 * with a plain run: reads only touch the `data` blocks, which no thread
 * writes after the fill; writes are atomic additions to the `acc` blocks,
 * and additions commute. Each thread's choices come from its own seeded
 * generator.
 *
 * usage: threads MIB THREADS OPS_PER_THREAD
 *   MIB: the heap, half data and half accumulators
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Each block is its own malloc call, as a program's objects are. */
#define BLOCK_BYTES (64 * 1024)
#define WORDS (BLOCK_BYTES / sizeof(uint64_t))
/* Most operations go to a hot fifth of the blocks (a real heap's working
 * set), the rest anywhere; one in four is a write. */
#define HOT_PERCENT 80
#define HOT_SHARE 5
#define WRITE_EVERY 4

static uint64_t **data, **acc;
static size_t nblocks;
static pthread_barrier_t filled;

static uint64_t mix(uint64_t x) {
    /* splitmix64's finaliser */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

struct worker {
    pthread_t tid;
    unsigned id, nthreads;
    uint64_t ops, sum;
};

static void *work(void *arg) {
    struct worker *w = arg;
    /* Fill this thread's share of the blocks: half of each data block's
     * words are small counters and half hash values, which compresses
     * about as well as a typical heap. */
    for (size_t b = w->id; b < nblocks; b += w->nthreads) {
        data[b] = malloc(BLOCK_BYTES);
        acc[b] = calloc(WORDS, sizeof(uint64_t));
        if (!data[b] || !acc[b]) {
            perror("malloc");
            exit(1);
        }
        for (size_t i = 0; i < WORDS; i++) {
            uint64_t n = b * WORDS + i;
            data[b][i] = (i & 1) ? mix(n) : n;
        }
    }
    pthread_barrier_wait(&filled);
    uint64_t rng = mix(0x5eed + w->id), sum = 0;
    size_t hot = nblocks / HOT_SHARE ? nblocks / HOT_SHARE : 1;
    for (uint64_t k = 0; k < w->ops; k++) {
        rng = mix(rng);
        size_t b;
        if (rng % 100 < HOT_PERCENT) {
            /* The hot blocks are spread over the heap, not its start. */
            b = mix((rng >> 8) % hot) % nblocks;
        } else {
            b = (rng >> 8) % nblocks;
        }
        size_t i = (rng >> 40) % WORDS;
        uint64_t v = data[b][i];
        sum += v ^ k;
        if (k % WRITE_EVERY == 0) {
            size_t b2 = mix(v) % nblocks, i2 = v % WORDS;
            __atomic_fetch_add(&acc[b2][i2], v | 1, __ATOMIC_RELAXED);
        }
    }
    w->sum = sum;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MIB THREADS OPS_PER_THREAD\n", argv[0]);
        return 2;
    }
    size_t mib = strtoull(argv[1], NULL, 10);
    unsigned nthreads = (unsigned)strtoul(argv[2], NULL, 10);
    uint64_t ops = strtoull(argv[3], NULL, 10);
    nblocks = mib * 1024 * 1024 / 2 / BLOCK_BYTES;
    if (nblocks == 0 || nthreads == 0) {
        fprintf(stderr, "need at least 1 MiB and 1 thread\n");
        return 2;
    }
    data = calloc(nblocks, sizeof(*data));
    acc = calloc(nblocks, sizeof(*acc));
    struct worker *ws = calloc(nthreads, sizeof(*ws));
    if (!data || !acc || !ws) {
        perror("calloc");
        return 1;
    }
    pthread_barrier_init(&filled, NULL, nthreads);
    for (unsigned t = 0; t < nthreads; t++) {
        ws[t] = (struct worker){.id = t, .nthreads = nthreads, .ops = ops};
        if (pthread_create(&ws[t].tid, NULL, work, &ws[t]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    uint64_t reads = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        pthread_join(ws[t].tid, NULL);
        reads += ws[t].sum;
    }
    /* Every word of the heap, weighted by its place. */
    uint64_t check = reads;
    for (size_t b = 0; b < nblocks; b++) {
        for (size_t i = 0; i < WORDS; i++) {
            uint64_t n = b * WORDS + i;
            check += mix(n ^ data[b][i]) ^ (acc[b][i] * (n | 1));
        }
    }
    printf("checksum %016llx reads %016llx blocks %zu threads %u ops %llu\n",
           (unsigned long long)check, (unsigned long long)reads, nblocks, nthreads,
           (unsigned long long)ops);
    return 0;
}
