/* Forks the interposed fork symbol never sees, and a program's own fork
 * handlers. The program fills 64 MiB (most of it evicted under a 16 MiB
 * budget), then forks by MODE:
 *
 *   atfork   fork(), with a pthread_atfork child handler that reads all
 *            64 MiB and writes a zero word into the first page;
 *   daemon   daemon(3), which calls glibc's own fork: the parent exits
 *            there and the child goes on as the program;
 *   forkpty  forkpty(3), glibc's own fork too, the child on a new pty;
 *   sysfork  syscall(SYS_fork), which glibc's fork never sees either;
 *   nodump   fork() in a process that made itself not dumpable
 *            (PR_SET_DUMPABLE 0, as ssh-agent does), whose /proc/self
 *            files are then closed to an unprivileged user;
 *   clone    glibc's clone() without CLONE_VM: the child runs a function
 *            on a stack of its own and no fork handler (container and
 *            sandbox tools start their first process so);
 *   sysclone syscall(SYS_clone) without CLONE_VM and with a flag besides
 *            the exit signal (CLONE_PARENT_SETTID), the child going on
 *            from the call as a fork's does;
 *   clone3   syscall(SYS_clone3), the same.
 *
 * The process that goes on after the fork checks every byte (and, for
 * atfork, that the handler read them all and that its zero stayed) and
 * prints "ok fork_paths MODE"; a difference prints what differed and exits
 * 1. Usage: fork_paths MODE. */
#define _GNU_SOURCE
#include <pthread.h>
#include <linux/sched.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MB (1UL << 20)

static uint64_t *a;
static const size_t len = 64 * MB;
static int handler_read = -1;

static uint64_t word(size_t i) { return 0x9e3779b97f4a7c15ULL * 7 + i / 64; }

/* Words of a[from..to) that differ. */
static size_t differ(size_t from, size_t to) {
    size_t n = 0;
    for (size_t i = from; i < to; i++) n += a[i] != word(i);
    return n;
}

static void child_handler(void) {
    handler_read = differ(0, len / 8) == 0;
    a[1] = 0;
}

/* In the process that goes on: 0 if every byte is as it should be. */
static int verify(const char *mode) {
    int bad = 0;
    if (!strcmp(mode, "atfork")) {
        if (handler_read != 1) { printf("the child handler read other bytes\n"); bad = 1; }
        if (a[1] != 0) { printf("the child handler's zero was lost\n"); bad = 1; }
        a[1] = word(1);
    }
    size_t n = differ(0, len / 8);
    if (n) { printf("%zu words differ\n", n); bad = 1; }
    if (!bad) printf("ok fork_paths %s\n", mode);
    fflush(stdout);
    return bad;
}

static int clone_child(void *mode) { return verify(mode) ? 1 : 0; }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    a = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) { perror("mmap"); return 2; }
    for (size_t i = 0; i < len / 8; i++) a[i] = word(i);
    if (!strcmp(mode, "daemon")) {
        /* Keeps the working directory and stdout. */
        if (daemon(1, 1)) { perror("daemon"); return 2; }
        exit(verify(mode));
    }
    pid_t pid;
    if (!strcmp(mode, "atfork")) {
        pthread_atfork(0, 0, child_handler);
        pid = fork();
    } else if (!strcmp(mode, "sysfork")) {
        fflush(stdout);
        pid = syscall(SYS_fork);
    } else if (!strcmp(mode, "nodump")) {
        if (prctl(PR_SET_DUMPABLE, 0)) { perror("prctl"); return 2; }
        pid = fork();
    } else if (!strcmp(mode, "forkpty")) {
        int pty;
        pid = forkpty(&pty, 0, 0, 0);
        if (pid == 0) {
            /* stdout is the pty now: the verdict goes out as the status. */
            int bad = verify(mode);
            _exit(bad ? 1 : 0);
        }
    } else if (!strcmp(mode, "clone")) {
        size_t stack = 256 << 10;
        char *sp = malloc(stack);
        if (!sp) { perror("malloc"); return 2; }
        fflush(stdout);
        pid = clone(clone_child, sp + stack, SIGCHLD, (void *)mode);
        if (pid > 0) goto wait;
    } else if (!strcmp(mode, "sysclone")) {
        pid_t ptid = 0;
        fflush(stdout);
        pid = syscall(SYS_clone, CLONE_PARENT_SETTID | SIGCHLD, 0, &ptid, 0, 0);
        if (pid > 0 && ptid != pid) { printf("parent tid not set\n"); return 1; }
    } else if (!strcmp(mode, "clone3")) {
        struct clone_args ca;
        memset(&ca, 0, sizeof ca);
        ca.exit_signal = SIGCHLD;
        fflush(stdout);
        pid = syscall(SYS_clone3, &ca, sizeof ca);
    } else {
        fprintf(stderr, "usage: fork_paths atfork|daemon|forkpty|sysfork|nodump|clone|sysclone|clone3\n");
        return 2;
    }
    if (pid < 0) { perror("fork"); return 2; }
    if (pid == 0) exit(verify(mode));
wait:;
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
        printf("child failed\n");
        return 1;
    }
    if (!strcmp(mode, "forkpty")) printf("ok fork_paths forkpty\n");
    if (differ(0, len / 8)) { printf("parent: bytes differ\n"); return 1; }
    return 0;
}
