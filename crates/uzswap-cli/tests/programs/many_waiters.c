/* 200 threads, each waiting on a condition variable of its own (each in a
 * heap block of 64 KiB and more), half of them in pthread_cond_wait and
 * half in a futex wait made through syscall(2) (as Rust's std parks a
 * thread), while the main thread writes 64 MiB three times over; then
 * each is woken and joined. A waiter holds its wait's pin while it
 * sleeps: pinned one chunk each, 12.5 MiB of waits overran an 8 MiB
 * budget on every fault (21.8 s against 0.42 s). Prints "ok many_waiters". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#define N 200

struct waiter {
    pthread_mutex_t m;
    pthread_cond_t c;
    int go;
    char pad[65536];
};

static void *park_for_go(void *x) {
    struct waiter *w = x;
    while (!__atomic_load_n(&w->go, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, &w->go, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    return NULL;
}

static void *wait_for_go(void *x) {
    struct waiter *w = x;
    pthread_mutex_lock(&w->m);
    while (!w->go)
        pthread_cond_wait(&w->c, &w->m);
    pthread_mutex_unlock(&w->m);
    return NULL;
}

int main(void) {
    static struct waiter *ws[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        ws[i] = calloc(1, sizeof *ws[i]);
        pthread_mutex_init(&ws[i]->m, NULL);
        pthread_cond_init(&ws[i]->c, NULL);
        pthread_create(&t[i], NULL, i % 2 ? park_for_go : wait_for_go, ws[i]);
    }
    size_t n = 64 << 20;
    char *b = malloc(n);
    long sum = 0;
    for (int r = 0; r < 3; r++) {
        for (size_t i = 0; i < n; i += 64)
            b[i] = (char)(i + r);
        for (size_t i = 0; i < n; i += 4096)
            sum += b[i];
    }
    for (int i = 0; i < N; i++) {
        pthread_mutex_lock(&ws[i]->m);
        __atomic_store_n(&ws[i]->go, 1, __ATOMIC_RELEASE);
        pthread_cond_signal(&ws[i]->c);
        pthread_mutex_unlock(&ws[i]->m);
        syscall(SYS_futex, &ws[i]->go, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    printf(sum == 49152 ? "ok many_waiters\n" : "BAD many_waiters %ld\n", sum);
    return sum != 49152;
}
