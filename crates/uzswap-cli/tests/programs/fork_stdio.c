/* A stream opened early and left idle while the program's memory churns
 * under the budget, so that the page of its FILE is evicted; then a fork
 * while another thread holds the stream's lock.
 *
 * In the child, glibc's fork resets the lock of every stream of a
 * multi-threaded program before anything else runs there (nothing of
 * uzswap's is registered in the child yet): it reads each FILE's flags and
 * lock pointer and writes the lock. Were the FILE's page still evicted,
 * the child would read zeros there (a null lock pointer: SIGSEGV), or its
 * write would land on a page the kernel zero-filled, hiding the page in
 * the cache (the lock would read as held: the child's first write to the
 * stream would wait for ever). The child here writes through the stream.
 *
 * Usage: fork_stdio MIB FILE. Prints "evicted N" (how many times the
 * FILE's pages were found evicted before the fork, out of the rounds
 * tried), then "ok fork_stdio"; FILE then holds the child's line and the
 * parent's. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static FILE *f;
static int hold[2], held[2];

static void *holder(void *arg) {
    (void)arg;
    char c;
    flockfile(f);
    if (write(held[1], "h", 1) != 1) abort();
    if (read(hold[0], &c, 1) != 1) abort();
    funlockfile(f);
    return NULL;
}

/* Whether a page of what glibc's fork touches in the FILE is not resident:
 * the struct (its flags and lock pointer) and the lock it points to. Not a
 * fixed span after the struct: where the stream lives in glibc's heap
 * (system calls' faults not served, `streams.rs`), the bytes past the lock
 * may lie in a page nothing ever touched, which reads as not resident
 * though nothing evicted it. */
static int not_resident(const void *p) {
    unsigned char v = 1;
    if (mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 1, &v) != 0) {
        perror("mincore");
        exit(1);
    }
    return !(v & 1);
}

static int evicted(void) {
    const char *s = (const char *)f;
    return not_resident(s) || not_resident(s + sizeof(FILE) - 1) || not_resident(f->_lock) ||
           not_resident((const char *)f->_lock + 15);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: fork_stdio MIB FILE [held]\n");
        return 2;
    }
    int held_lock = argc == 4 && strcmp(argv[3], "held") == 0;
    size_t len = (size_t)atoi(argv[1]) << 20;
    f = fopen(argv[2], "w");
    if (!f) {
        perror("fopen");
        return 1;
    }
    /* Churn: write the heap through twice per round, the FILE untouched,
     * until its page is found evicted (or rounds run out). */
    unsigned char *heap = malloc(len);
    if (!heap) return 1;
    int found = 0;
    for (int round = 0; round < 8 && !found; round++) {
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < len; i += 4096) heap[i] = (unsigned char)(i >> 12) + round;
        found = evicted();
    }
    printf("evicted %d\n", found);
    fflush(stdout);

    pthread_t t;
    if (pipe(hold) || pipe(held)) return 1;
    if (held_lock) {
        char c;
        if (pthread_create(&t, NULL, holder, NULL)) return 1;
        if (read(held[0], &c, 1) != 1) return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        alarm(20);
        fprintf(f, "child %d\n", heap[4096]);
        if (fflush(f) != 0) _exit(3);
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return 1;
    if (held_lock) {
        if (write(hold[1], "r", 1) != 1) return 1;
        pthread_join(t, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status))
            fprintf(stderr, "child killed by signal %d\n", WTERMSIG(status));
        else
            fprintf(stderr, "child exited %d\n", WEXITSTATUS(status));
        return 1;
    }
    fprintf(f, "parent\n");
    if (fclose(f) != 0) return 1;
    printf("ok fork_stdio\n");
    return 0;
}
