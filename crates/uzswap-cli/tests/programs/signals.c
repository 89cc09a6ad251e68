/* A program that owns SIGBUS and blocks signals, as servers do (redis
 * installs a crash reporter on SIGBUS; worker threads often block every
 * signal), over a heap larger than the budget. Under `--handler signal`
 * uzswap's faults are SIGBUS: they must stay uzswap's, and reach it while
 * the program blocks everything.
 *
 *   signals MIB
 *
 * Checks: sigaction(SIGBUS) reports back the handler the program set; a
 * SIGBUS the program raises reaches that handler, which can read the
 * evicted heap (a fault inside it); sysv_signal does not take SIGBUS from
 * uzswap either; a worker thread that
 * blocks every signal, and then the main thread likewise, read every byte
 * of a heap of MIB MiB (evicted by then) and find what was written; and
 * a SIGUSR1 handler reads the heap while the mask that `sigsuspend` and
 * `pselect` apply for their wait blocks every other signal. A fault
 * delivered to the program's handler ends the program with status 3.
 * Prints "ok". */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t raised;

static uint64_t **blocks;
static size_t nblocks;
static volatile uint64_t seen_in_handler;

static void on_bus(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)ctx;
    if (si->si_code == SI_TKILL || si->si_code == SI_USER) {
        raised++;
        /* A crash reporter reads its heap: evicted memory, a nested fault. */
        if (blocks)
            for (size_t b = 0; b < nblocks; b += 16)
                seen_in_handler += blocks[b][1];
        return;
    }
    static const char msg[] = "signals: a fault reached the program's SIGBUS handler\n";
    write(2, msg, sizeof msg - 1);
    _exit(3);
}

#define BLOCK (64 * 1024)

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Every word of every block; 0 if all are as written. */
static size_t check(void) {
    size_t bad = 0;
    for (size_t b = 0; b < nblocks; b++)
        for (size_t i = 0; i < BLOCK / 8; i += 7)
            bad += blocks[b][i] != (mix(b * BLOCK + i) & 0xffff);
    return bad;
}

static volatile uint64_t seen_in_usr1;

static void on_usr1(int sig) {
    (void)sig;
    for (size_t b = 0; b < nblocks; b += 16)
        seen_in_usr1 += blocks[b][1];
}

static void *worker(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    return (void *)check();
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: signals MIB\n");
        return 2;
    }
    struct sigaction sa, got;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0 || sigaction(SIGBUS, NULL, &got) != 0) {
        perror("sigaction");
        return 1;
    }
    if (got.sa_sigaction != on_bus) {
        printf("sigaction reports another SIGBUS handler\n");
        return 1;
    }
    raise(SIGBUS);
    if (raised != 1) {
        printf("a raised SIGBUS reached the program %d times\n", (int)raised);
        return 1;
    }
    nblocks = ((size_t)atoi(argv[1]) << 20) / BLOCK;
    blocks = calloc(nblocks, sizeof *blocks);
    for (size_t b = 0; b < nblocks; b++) {
        blocks[b] = malloc(BLOCK);
        if (!blocks[b]) {
            perror("malloc");
            return 1;
        }
        for (size_t i = 0; i < BLOCK / 8; i++)
            blocks[b][i] = mix(b * BLOCK + i) & 0xffff;
    }
    /* A raised SIGBUS whose handler reads the (evicted) heap, and a
     * one-shot handler set the System V way: the next SIGBUS after it is
     * the program's again, not uzswap's faults. */
    raise(SIGBUS);
    if (raised != 2 || seen_in_handler == 0) {
        printf("the handler ran %d times, read %llu\n", (int)raised,
               (unsigned long long)seen_in_handler);
        return 1;
    }
    if (sysv_signal(SIGBUS, SIG_IGN) == SIG_ERR || sigaction(SIGBUS, &sa, NULL) != 0) {
        perror("sysv_signal");
        return 1;
    }
    pthread_t t;
    void *bad;
    if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, &bad) != 0) {
        perror("pthread");
        return 1;
    }
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    size_t bad_main = check();
    if (bad || bad_main) {
        printf("%zu words differ in the worker, %zu in main\n", (size_t)bad, bad_main);
        return 1;
    }
    /* Waits whose mask blocks everything but SIGUSR1: its handler runs
     * under that mask and reads the heap (evicted again by the check). */
    struct sigaction su;
    memset(&su, 0, sizeof su);
    su.sa_handler = on_usr1;
    sigfillset(&su.sa_mask);
    if (sigaction(SIGUSR1, &su, NULL) != 0) {
        perror("sigaction SIGUSR1");
        return 1;
    }
    sigset_t but_usr1;
    sigfillset(&but_usr1);
    sigdelset(&but_usr1, SIGUSR1);
    raise(SIGUSR1);
    sigsuspend(&but_usr1);
    uint64_t after_suspend = seen_in_usr1;
    for (size_t b = 0; b < nblocks; b++)
        blocks[b][2] ^= 1;
    raise(SIGUSR1);
    struct timespec zero = {0, 0};
    pselect(0, NULL, NULL, NULL, &zero, &but_usr1);
    if (after_suspend == 0 || seen_in_usr1 == after_suspend) {
        printf("SIGUSR1's handler read %llu, then %llu\n", (unsigned long long)after_suspend,
               (unsigned long long)seen_in_usr1);
        return 1;
    }
    printf("ok\n");
    return 0;
}
