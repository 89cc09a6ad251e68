// Threads that wait on glibc's synchronisation objects (a mutex, a
// condition variable, semaphores, a read-write lock, a barrier) kept in a
// heap page that a third thread pages out over and over. glibc's waits
// end the process ("The futex facility returned an unexpected error
// code") where the kernel's read of the futex word fails with EFAULT.
// Usage: sync_waits ROUNDS
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

struct obj {
    sem_t a, b;
    pthread_mutex_t m;
    pthread_cond_t c;
    pthread_rwlock_t rw;
    pthread_barrier_t bar;
    long turn, shared, written;
    unsigned word;
};

static struct obj *o;
static int rounds;
static volatile int done;

static void deadline(struct timespec *t) {
    clock_gettime(CLOCK_REALTIME, t);
    t->tv_sec += 60;
}

static void take_turn(long mine) {
    struct timespec t;
    pthread_mutex_lock(&o->m);
    while (o->turn != mine) {
        if (mine) pthread_cond_wait(&o->c, &o->m);
        else { deadline(&t); pthread_cond_timedwait(&o->c, &o->m, &t); }
    }
    o->turn = !mine;
    o->shared++;
    pthread_cond_broadcast(&o->c);
    pthread_mutex_unlock(&o->m);
}

static void *ping(void *x) {
    (void)x;
    struct timespec t;
    for (int i = 0; i < rounds; i++) {
        sem_post(&o->a);
        deadline(&t);
        sem_timedwait(&o->b, &t);
        take_turn(0);
        pthread_rwlock_wrlock(&o->rw);
        o->written++;
        pthread_rwlock_unlock(&o->rw);
        if (i % 64 == 0) pthread_barrier_wait(&o->bar);
    }
    return NULL;
}

static void *pong(void *x) {
    (void)x;
    struct timespec t;
    for (int i = 0; i < rounds; i++) {
        sem_wait(&o->a);
        sem_post(&o->b);
        take_turn(1);
        if (i & 1) { deadline(&t); pthread_rwlock_timedrdlock(&o->rw, &t); }
        else pthread_rwlock_rdlock(&o->rw);
        (void)o->written;
        pthread_rwlock_unlock(&o->rw);
        if (i % 64 == 0) pthread_barrier_wait(&o->bar);
    }
    return NULL;
}

// A futex wait made through syscall(2), as Rust's std and abseil make
// theirs: the word never holds 1, so each call returns at once, EAGAIN
// after the kernel read it, or EFAULT where that read failed.
static void *waiter(void *x) {
    (void)x;
    long faults = 0;
    while (!done) {
        struct timespec t = {0, 1000};
        if (syscall(SYS_futex, &o->word, FUTEX_WAIT_PRIVATE, 1, &t, NULL, 0) < 0 && errno == EFAULT)
            faults++;
    }
    return (void *)faults;
}

static void *pager(void *x) {
    (void)x;
    long n = 0;
    while (!done) {
        madvise(o, 65536, MADV_PAGEOUT);
        n++;
    }
    return (void *)n;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atoi(argv[1]) : 20000;
    char *block = malloc(1 << 20);
    memset(block, 1, 1 << 20);
    // The objects at the start of a 64 KiB-aligned stretch of the block.
    o = (struct obj *)(((unsigned long)block + 65535) & ~65535UL);
    memset(o, 0, sizeof *o);
    sem_init(&o->a, 0, 0);
    sem_init(&o->b, 0, 0);
    pthread_mutex_init(&o->m, NULL);
    pthread_cond_init(&o->c, NULL);
    pthread_rwlock_init(&o->rw, NULL);
    pthread_barrier_init(&o->bar, NULL, 2);
    pthread_t t[4];
    pthread_create(&t[2], NULL, pager, NULL);
    pthread_create(&t[3], NULL, waiter, NULL);
    pthread_create(&t[0], NULL, ping, NULL);
    pthread_create(&t[1], NULL, pong, NULL);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    done = 1;
    void *pageouts, *faults;
    pthread_join(t[2], &pageouts);
    pthread_join(t[3], &faults);
    if (o->shared != 2L * rounds || o->written != rounds || faults) {
        printf("BAD shared %ld written %ld futex EFAULT %ld\n", o->shared, o->written, (long)faults);
        return 1;
    }
    fprintf(stderr, "%ld pageouts\n", (long)pageouts);
    printf("ok sync_waits\n");
    return 0;
}
