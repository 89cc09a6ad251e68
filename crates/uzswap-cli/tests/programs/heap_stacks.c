/* Threads on stacks the program gives them from its heap
 * (pthread_attr_setstack), created and joined ROUNDS times, eight at a
 * time, while another thread pages the stacks out (MADV_PAGEOUT) in a
 * loop. glibc keeps each thread's descriptor at the top of its stack, and
 * the kernel writes it outside any system call: the thread id cleared at
 * the exit (what the join waits for), the rseq area. Before, the joins
 * hung with handler threads (an exiting thread's faults are not served)
 * and the threads died at their start in signal mode (their first frames
 * on a stack page not mapped, before they had an alternate signal stack).
 * Prints "ok heap_stacks". Usage: heap_stacks ROUNDS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define THREADS 8
#define STACK (256 << 10)

static volatile int done;
static char *stacks[THREADS];

static void *body(void *x) {
    volatile char buf[1024];
    memset((char *)buf, 1, sizeof buf);
    return x;
}

static void *pager(void *x) {
    (void)x;
    while (!done)
        for (int i = 0; i < THREADS; i++)
            madvise(stacks[i], STACK, MADV_PAGEOUT);
    return NULL;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    for (int i = 0; i < THREADS; i++) {
        stacks[i] = aligned_alloc(65536, STACK);
        memset(stacks[i], 0, STACK);
    }
    pthread_t pg;
    pthread_create(&pg, NULL, pager, NULL);
    long sum = 0;
    for (int r = 0; r < rounds; r++) {
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) {
            pthread_attr_t a;
            pthread_attr_init(&a);
            pthread_attr_setstack(&a, stacks[i], STACK);
            if (pthread_create(&t[i], &a, body, (void *)(long)i) != 0) {
                printf("pthread_create failed\n");
                return 1;
            }
            pthread_attr_destroy(&a);
        }
        for (int i = 0; i < THREADS; i++) {
            void *rv;
            pthread_join(t[i], &rv);
            sum += (long)rv;
        }
    }
    done = 1;
    pthread_join(pg, NULL);
    long want = (long)rounds * THREADS * (THREADS - 1) / 2;
    printf(sum == want ? "ok heap_stacks\n" : "BAD heap_stacks %ld\n", sum);
    return sum != want;
}
