/* An exec whose path, vectors and strings lie in evicted memory. The
 * program sets 64 environment variables (setenv: the strings and environ
 * go to the heap), builds its argument vector and strings in the heap,
 * then writes 64 MiB so that under a 16 MiB budget those pages are
 * evicted, and starts /bin/sh by MODE:
 *
 *   execve execv execvp execvpe execl execlp execle fexecve sysexecve
 *           each from the process itself;
 *   fork    execve from a forked child;
 *   vfork   execve from a vfork child (which shares our memory).
 *
 * The shell checks one variable and the last argument and prints
 * "exec-ok MODE"; a failed exec prints why and exits 1. Where the kernel's
 * faults inside system calls are not served (user mode only), an evicted
 * piece failed the exec with EFAULT. Usage: exec_args MODE. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define SCRIPT "test \"$UZ_VAR_63\" = \"$(printf %%0199d 0 | tr 0 l)\" && test \"$8\" = x8 && echo exec-ok %s"

static char *heap(const char *s) { return strdup(s); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    char name[32], *val = malloc(200);
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof name, "UZ_VAR_%d", i);
        memset(val, 'a' + i % 26, 199);
        val[199] = 0;
        setenv(name, val, 1);
    }
    char script[256];
    snprintf(script, sizeof script, SCRIPT, mode);
    /* sh -c SCRIPT a0 x1 .. x8: $8 is x8. */
    char **av = malloc(14 * sizeof *av);
    av[0] = heap("/bin/sh");
    av[1] = heap("-c");
    av[2] = heap(script);
    av[3] = heap("a0");
    for (int i = 1; i <= 8; i++) {
        char x[8];
        snprintf(x, sizeof x, "x%d", i);
        av[3 + i] = heap(x);
    }
    av[12] = 0;
    char **ev = malloc(3 * sizeof *ev);
    ev[0] = heap(getenv("UZ_VAR_63") - strlen("UZ_VAR_63="));
    ev[1] = heap("PATH=/usr/bin:/bin");
    ev[2] = 0;
    char *path = heap("/bin/sh"), *file = heap("sh");
    size_t n = 64 << 20;
    char *big = malloc(n);
    for (size_t i = 0; i < n; i++) big[i] = (char)(i * 7);
    fflush(stdout);
    if (!strcmp(mode, "execve")) execve(path, av, environ);
    else if (!strcmp(mode, "execv")) execv(path, av);
    else if (!strcmp(mode, "execvp")) execvp(file, av);
    else if (!strcmp(mode, "execvpe")) execvpe(file, av, ev);
    else if (!strcmp(mode, "execl"))
        execl(path, av[0], av[1], av[2], av[3], av[4], av[5], av[6], av[7], av[8], av[9], av[10], av[11], (char *)0);
    else if (!strcmp(mode, "execlp"))
        execlp(file, av[0], av[1], av[2], av[3], av[4], av[5], av[6], av[7], av[8], av[9], av[10], av[11], (char *)0);
    else if (!strcmp(mode, "execle"))
        execle(path, av[0], av[1], av[2], av[3], av[4], av[5], av[6], av[7], av[8], av[9], av[10], av[11], (char *)0, ev);
    else if (!strcmp(mode, "fexecve")) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) fexecve(fd, av, environ);
    } else if (!strcmp(mode, "sysexecve")) syscall(SYS_execve, path, av, environ);
    else if (!strcmp(mode, "fork") || !strcmp(mode, "vfork")) {
        pid_t pid = mode[0] == 'v' ? vfork() : fork();
        if (pid == 0) {
            execve(path, av, environ);
            _exit(errno == EFAULT ? 3 : 4);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) != pid) { perror("fork"); return 2; }
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            printf("%s: the child's exec failed (status %d)\n", mode, WEXITSTATUS(st));
            return 1;
        }
        /* The parent's memory is intact after its child's exec. */
        for (size_t i = 0; i < n; i += 4096)
            if (big[i] != (char)(i * 7)) { printf("%s: parent bytes differ\n", mode); return 1; }
        return 0;
    } else {
        fprintf(stderr, "usage: exec_args execve|execv|execvp|execvpe|execl|execlp|execle|fexecve|sysexecve|fork|vfork\n");
        return 2;
    }
    printf("%s failed: %s\n", mode, strerror(errno));
    return 1;
}
