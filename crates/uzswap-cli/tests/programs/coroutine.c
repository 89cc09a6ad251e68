/* Coroutines on stacks carved from the heap (makecontext over malloc'd
 * memory) reading a heap larger than the budget, and a program that sets,
 * reads back and uses its own alternate signal stack. Under
 * `--handler signal` a fault is a SIGBUS whose frame the kernel must write
 * somewhere: on a coroutine stack that is region memory it could not be
 * where the page below the stack pointer was out.
 *
 *   coroutine MIB ROUNDS
 *
 * Prints "ok" and a checksum. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#define BLOCK (64 * 1024)

static ucontext_t main_ctx, co_ctx;
static unsigned char **blocks;
static size_t nblocks;
static uint64_t sum;
static volatile int usr1_on_stack = -1;

static void co(void) {
    for (size_t b = 0; b < nblocks; b++)
        sum += blocks[b][100] + blocks[b][BLOCK - 1];
    swapcontext(&co_ctx, &main_ctx);
}

static void on_usr1(int sig) {
    (void)sig;
    stack_t cur;
    usr1_on_stack = sigaltstack(NULL, &cur) == 0 && (cur.ss_flags & SS_ONSTACK);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: coroutine MIB ROUNDS\n");
        return 2;
    }
    /* The program's own alternate stack: set, read back, used, disabled. */
    stack_t mine = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0}, got;
    if (sigaltstack(&mine, NULL) != 0 || sigaltstack(NULL, &got) != 0) {
        perror("sigaltstack");
        return 1;
    }
    if (got.ss_sp != mine.ss_sp || got.ss_size != mine.ss_size || (got.ss_flags & SS_DISABLE)) {
        printf("sigaltstack reads back %p/%zu/%d\n", got.ss_sp, got.ss_size, got.ss_flags);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    if (sigaction(SIGUSR1, &sa, NULL) != 0 || raise(SIGUSR1) != 0 || usr1_on_stack != 1) {
        printf("SIGUSR1's handler on an alternate stack: %d\n", usr1_on_stack);
        return 1;
    }
    stack_t off = {.ss_flags = SS_DISABLE};
    if (sigaltstack(&off, NULL) != 0 || sigaltstack(NULL, &got) != 0 || !(got.ss_flags & SS_DISABLE)) {
        printf("sigaltstack not disabled: %d\n", got.ss_flags);
        return 1;
    }
    nblocks = ((size_t)atoi(argv[1]) << 20) / BLOCK;
    int rounds = atoi(argv[2]);
    blocks = calloc(nblocks, sizeof *blocks);
    for (size_t b = 0; b < nblocks; b++) {
        blocks[b] = malloc(BLOCK);
        if (!blocks[b]) {
            perror("malloc");
            return 1;
        }
        memset(blocks[b], (int)(b & 0x7f), BLOCK);
    }
    uint64_t want = 0;
    for (int r = 0; r < rounds; r++) {
        for (size_t b = 0; b < nblocks; b++)
            want += 2 * ((b + (size_t)r) & 0x7f);
        size_t sz = 1 << 20;
        void *stk = malloc(sz);
        getcontext(&co_ctx);
        co_ctx.uc_stack.ss_sp = stk;
        co_ctx.uc_stack.ss_size = sz;
        co_ctx.uc_link = &main_ctx;
        makecontext(&co_ctx, co, 0);
        swapcontext(&main_ctx, &co_ctx);
        free(stk);
        for (size_t b = 0; b < nblocks; b++)
            memset(blocks[b], (int)((b + (size_t)r + 1) & 0x7f), BLOCK);
    }
    if (sum != want) {
        printf("coroutines read %llu, want %llu\n", (unsigned long long)sum,
               (unsigned long long)want);
        return 1;
    }
    printf("ok %llu\n", (unsigned long long)sum);
    return 0;
}
