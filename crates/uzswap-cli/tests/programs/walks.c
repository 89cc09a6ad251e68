/* libc calls that open directories or streams internally and call the
 * program back while they run, on a heap under pressure where the kernel's
 * faults inside system calls may not be served: scandir, scandirat, ftw,
 * nftw, fts, glob, pthread_getattr_np and getmntent. Their DIR and FILE buffers come from malloc inside
 * libc, and the kernel fills them (getdents64, read) between callbacks
 * that churn the heap, so the buffers are evicted between refills.
 *
 *   walks DIR
 *
 * Makes a tree in DIR (two directories of 300 entries with long names,
 * so that each takes several getdents64 calls, and 50 files at the top),
 * then walks it with each call (and fts with a comparison, glob with an
 * error callback) and checks every count against the tree it made, the
 * main thread's stack from pthread_getattr_np (read from /proc/self/maps),
 * and the mount table against /proc/self/mounts read by hand.
 * The callbacks allocate, and their allocations must survive. Prints
 * "ok walks" or what differed, and exits 1. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <ftw.h>
#include <glob.h>
#include <mntent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUB 300
#define TOP 50
#define NAME 180

static char *big;
static const size_t BIG = 24 << 20;
static int calls;
/* Allocations the callbacks made, checked at the end. */
static char *kept[2 * SUB + TOP + 8];
static int nkept;

/* Every eighth callback writes the churn buffer through: the heap pages
 * libc's buffers sit in are evicted before their next refill. */
static void churn(void) {
    if (++calls % 8)
        return;
    for (size_t i = 0; i < BIG; i += 64)
        big[i] = (char)(i + calls);
}

static void keep(const char *name) {
    if (nkept < (int)(sizeof kept / sizeof kept[0]))
        kept[nkept++] = strdup(name);
}

static int fail(const char *what) {
    printf("%s: %s\n", what, errno ? strerror(errno) : "wrong result");
    return 1;
}

static int walked, walked_ftw;
static int on_nftw(const char *p, const struct stat *sb, int t, struct FTW *f) {
    (void)sb;
    (void)f;
    churn();
    if (t == FTW_F)
        keep(p);
    walked++;
    return 0;
}
static int on_ftw(const char *p, const struct stat *sb, int t) {
    (void)p;
    (void)sb;
    (void)t;
    churn();
    walked_ftw++;
    return 0;
}
static int not_dot(const struct dirent *d) {
    churn();
    return d->d_name[0] != '.';
}
static int fts_by_name(const FTSENT **a, const FTSENT **b) {
    keep((*a)->fts_name);
    return strcmp((*a)->fts_name, (*b)->fts_name);
}
static int glob_errors;
static int on_glob_error(const char *p, int e) {
    (void)p;
    (void)e;
    churn();
    glob_errors++;
    return 0;
}
static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void name(char *out, size_t n, const char *dir, char tag, int i) {
    char pad[NAME + 1];
    memset(pad, 'x', NAME);
    pad[NAME] = 0;
    snprintf(out, n, "%s/%c%04d%s", dir, tag, i, pad);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: walks DIR\n");
        return 2;
    }
    big = malloc(BIG);
    memset(big, 1, BIG);
    char path[4096], a[4096], b[4096];
    snprintf(a, sizeof a, "%s/a", argv[1]);
    snprintf(b, sizeof b, "%s/b", argv[1]);
    if (mkdir(a, 0777) || mkdir(b, 0777))
        return fail("mkdir");
    for (int i = 0; i < SUB; i++) {
        name(path, sizeof path, a, 'f', i);
        int fd = open(path, O_CREAT | O_WRONLY, 0666);
        name(path, sizeof path, b, 'g', i);
        int fd2 = open(path, O_CREAT | O_WRONLY, 0666);
        if (fd < 0 || fd2 < 0)
            return fail("create");
        close(fd);
        close(fd2);
    }
    for (int i = 0; i < TOP; i++) {
        name(path, sizeof path, argv[1], 'h', i);
        int fd = open(path, O_CREAT | O_WRONLY, 0666);
        if (fd < 0)
            return fail("create");
        close(fd);
    }

    /* scandir: every entry but . and .., sorted. */
    struct dirent **list;
    errno = 0;
    int n = scandir(a, &list, not_dot, by_name);
    if (n != SUB)
        return fail("scandir");
    for (int i = 0; i < n; i++) {
        name(path, sizeof path, "", 'f', i);
        if (strcmp(list[i]->d_name, path + 1))
            return fail("scandir order");
        free(list[i]);
    }
    free(list);
    int dfd = open(argv[1], O_RDONLY | O_DIRECTORY);
    errno = 0;
    n = scandirat(dfd, "b", &list, not_dot, alphasort);
    if (n != SUB)
        return fail("scandirat");
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
    close(dfd);

    /* nftw and ftw: every file and directory, the top one included. */
    errno = 0;
    if (nftw(argv[1], on_nftw, 4, FTW_PHYS) != 0 || walked != 2 * SUB + TOP + 3)
        return fail("nftw");
    errno = 0;
    if (ftw(argv[1], on_ftw, 4) != 0 || walked_ftw != 2 * SUB + TOP + 3)
        return fail("ftw");
    for (int i = 0; i < nkept; i++)
        if (!kept[i] || strncmp(kept[i], argv[1], strlen(argv[1])))
            return fail("a callback's allocation");

    /* fts with a comparison: every entry, each directory's in order. */
    char *roots[] = {argv[1], NULL};
    errno = 0;
    FTS *fts = fts_open(roots, FTS_PHYSICAL, fts_by_name);
    if (!fts)
        return fail("fts_open");
    int seen = 0;
    char last[4096] = "";
    FTSENT *ent, *parent = NULL;
    while ((ent = fts_read(fts))) {
        if (ent->fts_info == FTS_DP)
            continue;
        if (ent->fts_parent == parent && strcmp(ent->fts_name, last) < 0)
            return fail("fts order");
        parent = ent->fts_parent;
        snprintf(last, sizeof last, "%s", ent->fts_name);
        seen++;
        churn();
    }
    if (errno || seen != 2 * SUB + TOP + 3)
        return fail("fts_read");
    fts_close(fts);
    /* glob, its error callback called for a directory it cannot read. */
    snprintf(path, sizeof path, "%s/shut", argv[1]);
    if (mkdir(path, 0) != 0)
        return fail("mkdir");
    snprintf(path, sizeof path, "%s/*/*", argv[1]);
    glob_t g;
    errno = 0;
    int gr = glob(path, GLOB_NOSORT, on_glob_error, &g);
    /* root reads a directory of mode 0 all the same. */
    if (gr != 0 || g.gl_pathc != 2 * SUB || glob_errors != (geteuid() != 0))
        return fail("glob");
    globfree(&g);

    /* pthread_getattr_np of the main thread reads /proc/self/maps through
     * a stream glibc opens itself. */
    for (int i = 0; i < 16; i++) {
        calls = 7;
        churn();
        pthread_attr_t at;
        void *stack;
        size_t size;
        errno = 0;
        if (pthread_getattr_np(pthread_self(), &at) != 0)
            return fail("pthread_getattr_np");
        if (pthread_attr_getstack(&at, &stack, &size) != 0 || (char *)stack + size < (char *)&at ||
            (char *)stack > (char *)&at)
            return fail("pthread_getattr_np's stack");
        pthread_attr_destroy(&at);
    }

    /* getmntent: the mount table, against the lines of the file. */
    int lines = 0;
    int fd = open("/proc/self/mounts", O_RDONLY);
    char buf[4096];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < r; i++)
            lines += buf[i] == '\n';
    close(fd);
    errno = 0;
    FILE *m = setmntent("/proc/self/mounts", "r");
    if (!m)
        return fail("setmntent");
    int mounts = 0;
    struct mntent *e;
    while ((e = getmntent(m))) {
        mounts++;
        calls = 7;
        churn();
    }
    if (ferror(m) || mounts != lines)
        return fail("getmntent");
    endmntent(m);
    printf("ok walks\n");
    return 0;
}
