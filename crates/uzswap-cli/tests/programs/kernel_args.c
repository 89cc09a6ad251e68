/* System calls whose arguments point into heap memory that was paged out
 * just before the call (MADV_PAGEOUT: uzswap evicts it): waiting for
 * descriptors (epoll_wait and epoll_pwait write their events there, as
 * redis keeps its array on the heap; poll and ppoll read the fds and write
 * revents; select and pselect read and write fd sets), and paths and stat
 * buffers (open, stat, lstat, fstat, access, readlink, rename, unlink,
 * mkdir, rmdir, chdir, stat64, fopen, opendir), and starting programs
 * with arguments, an environment and file actions on the heap
 * (posix_spawn, system, popen). Where the
 * kernel's faults are not served, each failed with EFAULT before the
 * library pinned them.
 *
 *   kernel_args DIR ROUNDS
 *
 * Prints "ok" or what failed; exits 1 on any error. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "kernel_args: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Page out the 64 KiB chunks around `p..p+n` (uzswap evicts whole chunks
 * in the range). */
static void page_out(const void *p, size_t n) {
    uintptr_t a = ((uintptr_t)p & ~(uintptr_t)65535) - 65536;
    uintptr_t e = (uintptr_t)p + n + 65536;
    madvise((void *)a, e - a, MADV_PAGEOUT);
}

/* A heap block of `n` bytes alone in its chunks, filled with `fill`. */
static void *heap(size_t n, int fill) {
    char *p = malloc(n + (256 << 10));
    if (!p)
        die("malloc");
    memset(p, fill, n + (256 << 10));
    return p + (128 << 10);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: kernel_args DIR ROUNDS\n");
        return 2;
    }
    const char *dir = argv[1];
    int rounds = atoi(argv[2]);
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe");
    if (write(fds[1], "x", 1) != 1)
        die("write");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0x1234};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev) != 0)
        die("epoll");
    sigset_t none;
    sigemptyset(&none);
    struct timespec ts = {0, 0};
    for (int r = 0; r < rounds; r++) {
        struct epoll_event *evs = heap(64 * sizeof *evs, 0);
        page_out(evs, 64 * sizeof *evs);
        int n = r % 2 ? epoll_pwait(ep, evs, 64, 0, &none) : epoll_wait(ep, evs, 64, 0);
        if (n != 1 || evs[0].data.u64 != 0x1234) {
            printf("epoll_wait: %d events (%s)\n", n, n < 0 ? strerror(errno) : "-");
            return 1;
        }

        struct pollfd *pfd = heap(sizeof *pfd, 0);
        pfd->fd = fds[0];
        pfd->events = POLLIN;
        page_out(pfd, sizeof *pfd);
        n = r % 2 ? ppoll(pfd, 1, &ts, &none) : poll(pfd, 1, 0);
        if (n != 1 || !(pfd->revents & POLLIN)) {
            printf("poll: %d (%s)\n", n, n < 0 ? strerror(errno) : "-");
            return 1;
        }

        fd_set *set = heap(sizeof *set, 0);
        FD_ZERO(set);
        FD_SET(fds[0], set);
        page_out(set, sizeof *set);
        struct timeval tv = {0, 0};
        n = r % 2 ? pselect(fds[0] + 1, set, NULL, NULL, &ts, &none)
                  : select(fds[0] + 1, set, NULL, NULL, &tv);
        if (n != 1 || !FD_ISSET(fds[0], set)) {
            printf("select: %d (%s)\n", n, n < 0 ? strerror(errno) : "-");
            return 1;
        }

        /* Paths, and the buffers the kernel fills. */
        char *path = heap(4096, 0), *path2 = heap(4096, 0);
        snprintf(path, 4096, "%s/file-%d", dir, r);
        snprintf(path2, 4096, "%s/renamed-%d", dir, r);
        page_out(path, 4096);
        int fd = open(path, O_CREAT | O_WRONLY, 0600);
        if (fd < 0)
            die("open");
        if (write(fd, "abc", 3) != 3)
            die("write");
        struct stat *st = heap(sizeof *st, 0);
        page_out(st, sizeof *st);
        if (fstat(fd, st) != 0 || st->st_size != 3)
            die("fstat");
        close(fd);
        page_out(path, 4096);
        page_out(st, sizeof *st);
        if (stat(path, st) != 0 || st->st_size != 3)
            die("stat");
        page_out(path, 4096);
        if (access(path, R_OK) != 0)
            die("access");
        /* The 64-bit name (what CPython's os.stat calls), and stdio's own
         * open of the path. */
        struct stat64 *st64 = heap(sizeof *st64, 0);
        page_out(path, 4096);
        page_out(st64, sizeof *st64);
        if (stat64(path, st64) != 0 || st64->st_size != 3)
            die("stat64");
        page_out(path, 4096);
        FILE *fp = fopen(path, "r");
        if (!fp)
            die("fopen");
        fclose(fp);
        page_out(path, 4096);
        page_out(path2, 4096);
        if (rename(path, path2) != 0)
            die("rename");
        page_out(path2, 4096);
        if (symlink(path2, path) != 0)
            die("symlink");
        char *target = heap(4096, 0);
        page_out(path, 4096);
        page_out(target, 4096);
        ssize_t tn = readlink(path, target, 4096);
        if (tn != (ssize_t)strlen(path2) || memcmp(target, path2, tn) != 0)
            die("readlink");
        page_out(path, 4096);
        if (lstat(path, st) != 0 || !S_ISLNK(st->st_mode))
            die("lstat");
        page_out(path, 4096);
        page_out(path2, 4096);
        if (unlink(path) != 0 || unlink(path2) != 0)
            die("unlink");
        snprintf(path, 4096, "%s/dir-%d", dir, r);
        page_out(path, 4096);
        if (mkdir(path, 0700) != 0)
            die("mkdir");
        page_out(path, 4096);
        DIR *dp = opendir(path);
        if (!dp)
            die("opendir");
        closedir(dp);
        page_out(path, 4096);
        if (chdir(path) != 0 || chdir(dir) != 0)
            die("chdir");
        page_out(path, 4096);
        if (rmdir(path) != 0)
            die("rmdir");
    }

    /* Programs started with heap arguments and a heap environment (setenv
     * moves the environment array onto the heap). */
    char *value = heap(4096, 0);
    memset(value, 'v', 3000);
    value[3000] = 0;
    if (setenv("UZSWAP_TEST_VALUE", value, 1) != 0)
        die("setenv");
    char **av = heap(4 * sizeof *av, 0);
    av[0] = heap(16, 0);
    av[1] = heap(16, 0);
    av[2] = heap(64, 0);
    av[3] = NULL;
    strcpy(av[0], "/bin/sh");
    strcpy(av[1], "-c");
    strcpy(av[2], "test ${#UZSWAP_TEST_VALUE} = 3000 && exit 7");
    for (int r = 0; r < rounds; r++) {
        char **e = environ;
        size_t n = 0;
        while (e[n])
            n++;
        for (size_t i = 0; i < n; i++)
            page_out(e[i], strlen(e[i]));
        page_out(e, (n + 1) * sizeof *e);
        for (int i = 0; i < 3; i++)
            page_out(av[i], strlen(av[i]));
        page_out(av, 4 * sizeof *av);
        pid_t pid;
        int st;
        /* A file action too: the child, every signal blocked, reads
         * its path and the actions array. */
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        char *devnull = heap(16, 0);
        strcpy(devnull, "/dev/null");
        posix_spawn_file_actions_addopen(&fa, 0, devnull, O_RDONLY, 0);
        page_out(devnull, 16);
        page_out(fa.__actions, 4096);
        int err = posix_spawn(&pid, av[0], &fa, NULL, av, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (err != 0) {
            errno = err;
            die("posix_spawn");
        }
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 7) {
            printf("posix_spawn: the child's status is %d\n", st);
            return 1;
        }
        page_out(e, (n + 1) * sizeof *e);
        page_out(av[2], strlen(av[2]));
        st = system(av[2]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 7) {
            printf("system: status %d\n", st);
            return 1;
        }
        page_out(e, (n + 1) * sizeof *e);
        FILE *p = popen(av[2], "r");
        if (!p)
            die("popen");
        st = pclose(p);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 7) {
            printf("popen: status %d\n", st);
            return 1;
        }
    }
    printf("ok\n");
    return 0;
}
