/* A forked child's take-over is deferred until it changes its memory
 * (`--fork-instance`): the parent fills 64 MiB and forks twice. The first
 * child allocates and frees 64 buffers of 64 KiB one after another, then
 * keeps 256 KiB (less than the deferral's allowance), and must still be a
 * single thread (no instance started: a shell's child
 * before exec pays for none); the second allocates 8 MiB and must have
 * started uzswap's threads. Both read back what they wrote and a sample of
 * what they inherited. Prints "small N big M" (thread counts), then
 * "ok fork_defer". */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int tasks(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int child(const char *big, size_t inherited, size_t n, int fd) {
    /* Buffers freed one before the next (4 MiB in all, 64 KiB live). */
    for (int i = 0; i < 64; i++) {
        volatile char *b = malloc(64 << 10);
        b[i] = (char)i;
        free((void *)b);
    }
    char *m = malloc(n);
    memset(m, 7, n);
    for (size_t k = 0; k < n; k += 4096)
        if (m[k] != 7)
            return 1;
    for (size_t k = 0; k < inherited; k += 4096 * 13)
        if (big[k] != (char)(k / 4096))
            return 2;
    int t = tasks();
    if (write(fd, &t, sizeof t) != sizeof t)
        return 3;
    return 0;
}

int main(void) {
    size_t len = 64 << 20;
    char *big = malloc(len);
    for (size_t k = 0; k < len; k += 4096)
        memset(big + k, (int)(k / 4096), 4096);
    size_t sizes[2] = {256 << 10, 8 << 20};
    int threads[2];
    for (int i = 0; i < 2; i++) {
        int p[2];
        if (pipe(p))
            return 4;
        pid_t c = fork();
        if (c == 0)
            _exit(child(big, len, sizes[i], p[1]));
        int st;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) || read(p[0], &threads[i], sizeof threads[i]) != sizeof threads[i]) {
            printf("child %d failed: %#x\n", i, st);
            return 5;
        }
        close(p[0]);
        close(p[1]);
    }
    printf("small %d big %d\nok fork_defer\n", threads[0], threads[1] > 1 ? 2 : threads[1]);
    return 0;
}
