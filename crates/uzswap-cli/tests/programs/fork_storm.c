/* Forks while uzswap's threads are busy: four threads read and write a
 * heap larger than the budget at random (faults and evictions all the
 * time) while the main thread forks FORKS children one after another.
 * Each child (under `--fork-instance`, an instance of its own, whose
 * threads park on locks the parent's threads may have held at the fork)
 * checks a sample of what it inherited, fills 4 MiB of its own, reads it
 * back and exits. A child that does not exit within 30 s counts as hung
 * and is killed. Prints "forks=N hung=H bad=B"; exits non-zero if H or B. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static size_t pages;
static uint64_t *heap;
static volatile int stop;

static void *worker(void *arg) {
    uint64_t x = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    while (!stop) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t p = x % pages;
        uint64_t *w = heap + p * 512;
        if (w[0] != p) {
            fprintf(stderr, "parent: page %zu reads %llu\n", p, (unsigned long long)w[0]);
            exit(3);
        }
        w[1 + (x >> 40) % 511] = x;
    }
    return 0;
}

int main(int argc, char **argv) {
    int forks = argc > 1 ? atoi(argv[1]) : 30;
    pages = (size_t)(argc > 2 ? atoi(argv[2]) : 16) * 256;
    heap = malloc(pages * 4096);
    for (size_t p = 0; p < pages; p++) {
        heap[p * 512] = p;
        memset(heap + p * 512 + 1, (int)p, 64);
    }
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], 0, worker, (void *)(i + 1));
    int hung = 0, bad = 0;
    for (int i = 0; i < forks; i++) {
        pid_t c = fork();
        if (c < 0) {
            perror("fork");
            bad++;
            continue;
        }
        if (c == 0) {
            size_t n = 4 << 20;
            char *m = malloc(n);
            memset(m, i, n);
            for (size_t p = 0; p < pages; p += 97)
                if (heap[p * 512] != p)
                    _exit(4);
            for (size_t k = 0; k < n; k += 4096)
                if (m[k] != (char)i)
                    _exit(5);
            _exit(0);
        }
        int st = 0, waited = 0;
        while (waitpid(c, &st, WNOHANG) == 0) {
            usleep(1000);
            if (++waited > 30000) {
                fprintf(stderr, "child %d (fork %d) hung\n", c, i);
                kill(c, SIGKILL);
                waitpid(c, &st, 0);
                hung++;
                st = 0;
                break;
            }
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child of fork %d: status %#x\n", i, st);
            bad++;
        }
    }
    stop = 1;
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], 0);
    printf("forks=%d hung=%d bad=%d\n", forks, hung, bad);
    return hung || bad;
}
