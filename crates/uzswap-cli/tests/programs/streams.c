/* stdio and directory streams on region memory whose kernel faults are not
 * served: glibc fills and drains these buffers with its own internal system
 * calls, which no wrapper of a dynamic symbol sees.
 *
 *   streams DIR MIB
 *
 * In DIR: writes MIB MiB from the heap with fwrite (large calls go straight
 * from the caller's buffer to the kernel) and with fprintf lines (through
 * the stream's buffer, flushed by fclose after it was paged out), churning
 * memory between calls so that earlier heap pages are evicted; reads the
 * data back with fread into a fresh heap buffer (never touched: the
 * kernel's fault on it is the first), the lines with small freads and
 * with fgets through a heap buffer given by setvbuf, each buffer paged out
 * (MADV_PAGEOUT) just before its refill; lists a directory whose buffer was
 * paged out before its first readdir; asks getcwd(NULL, 0) and realpath(NULL).
 * Prints "ok" or what differed; exits 1 on any error. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "streams: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Ask for `p..p+n` to be paged out now (uzswap: evicted, where it is
 * region memory that is not pinned), as memory pressure would. */
static void page_out(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, e = (uintptr_t)p + n;
    madvise((void *)a, e - a, MADV_PAGEOUT);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* Write every byte of `n` bytes of fresh memory, a few times over: enough
 * to push what the program touched before out of a small budget. */
static void churn(size_t n) {
    char *p = malloc(n);
    if (!p)
        die("malloc churn");
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < n; i += 4096)
            p[i] = (char)(i + r);
    free(p);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: streams DIR MIB\n");
        return 2;
    }
    const char *dir = argv[1];
    size_t total = (size_t)atoi(argv[2]) << 20;
    if (chdir(dir) != 0)
        die("chdir");

    /* 1. fwrite straight from heap data that has been evicted since. */
    size_t block = 1 << 20, nblocks = total / block;
    char **blocks = calloc(nblocks, sizeof *blocks);
    for (size_t b = 0; b < nblocks; b++) {
        blocks[b] = malloc(block);
        if (!blocks[b])
            die("malloc block");
        uint64_t *w = (uint64_t *)blocks[b];
        for (size_t i = 0; i < block / 8; i++)
            w[i] = mix(b * (block / 8) + i) & 0x3f3f3f3f3f3f3f3fULL;
    }
    FILE *f = fopen("data.bin", "w");
    if (!f)
        die("fopen data.bin");
    for (size_t b = 0; b < nblocks; b++) {
        if (fwrite(blocks[b], 1, block, f) != block)
            die("fwrite");
        if (b % 4 == 3)
            churn(total / 4);
    }
    if (fclose(f) != 0)
        die("fclose data.bin");

    /* 2. Lines through a stream's own buffer; the last ones are flushed by
     * fclose after the buffer was paged out. Lines are 64 bytes, so a
     * stream buffer of 4096 bytes holds 64 of them exactly. */
    f = fopen("lines.txt", "w");
    if (!f)
        die("fopen lines.txt");
    size_t nlines = 20000;
    for (size_t i = 0; i < nlines; i++)
        if (fprintf(f, "%08zu %016llx %037zu\n", i, (unsigned long long)mix(i), i) != 64)
            die("fprintf");
    page_out(f->_IO_buf_base, f->_IO_buf_end - f->_IO_buf_base);
    if (fclose(f) != 0)
        die("fclose lines.txt");

    /* 3. fread into a fresh heap buffer; compare with the blocks (which
     * come back from uzswap as they are read). */
    char *back = malloc(total);
    if (!back)
        die("malloc back");
    f = fopen("data.bin", "r");
    if (!f)
        die("fopen data.bin for reading");
    if (fread(back, 1, total, f) != total)
        die("fread");
    fclose(f);
    for (size_t b = 0; b < nblocks; b++)
        if (memcmp(back + b * block, blocks[b], block) != 0) {
            printf("fread: block %zu differs\n", b);
            return 1;
        }
    free(back);

    /* 4. 64-byte records through the stream's own buffer (fread of a
     * record copies from it), then lines through a heap buffer given by
     * setvbuf (fgets): each is paged out just as it is used up, so the
     * next read refills it while it is evicted. */
    char line[80], want[80];
    char *vbuf = malloc(4096);
    for (int pass = 0; pass < 2; pass++) {
        f = fopen("lines.txt", "r");
        if (!f || !vbuf)
            die("fopen lines.txt for reading");
        if (pass == 1 && setvbuf(f, vbuf, _IOFBF, 4096) != 0)
            die("setvbuf");
        for (size_t i = 0; i < nlines; i++) {
            if (pass == 0) {
                if (fread(line, 64, 1, f) != 1)
                    die("fread record");
                line[64] = 0;
            } else if (!fgets(line, sizeof line, f)) {
                die("fgets");
            }
            snprintf(want, sizeof want, "%08zu %016llx %037zu\n", i, (unsigned long long)mix(i), i);
            if (strcmp(line, want) != 0) {
                printf("%s: line %zu differs\n", pass ? "fgets" : "fread", i);
                return 1;
            }
            if (i % 64 == 63 && i < 64 * 4)
                page_out(f->_IO_buf_base, f->_IO_buf_end - f->_IO_buf_base);
        }
        fclose(f);
    }
    free(vbuf);

    /* 5. A directory of many entries. */
    if (mkdir("d", 0700) != 0 && errno != EEXIST)
        die("mkdir");
    size_t nfiles = 3000;
    for (size_t i = 0; i < nfiles; i++) {
        char name[64];
        snprintf(name, sizeof name, "d/file-with-a-long-name-%06zu", i);
        FILE *g = fopen(name, "w");
        if (!g)
            die("fopen entry");
        fclose(g);
    }
    DIR *d = opendir("d");
    if (!d)
        die("opendir");
    /* Its buffer (allocated with it, 32 KiB or more) is filled by the first
     * readdir. Paged out whole: uzswap evicts whole chunks (up to 64 KiB)
     * in the range, so the range reaches a chunk beyond either end. */
    page_out((const char *)d - (64 << 10), 3 << 16);
    size_t seen = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.')
            seen++;
        errno = 0;
    }
    if (errno != 0)
        die("readdir");
    closedir(d);
    if (seen != nfiles) {
        printf("readdir: %zu entries, want %zu\n", seen, nfiles);
        return 1;
    }

    /* 6. Buffers libc allocates and has the kernel fill. */
    char *cwd = getcwd(NULL, 0);
    if (!cwd)
        die("getcwd");
    char *real = realpath(".", NULL);
    if (!real)
        die("realpath");
    if (strcmp(cwd, real) != 0) {
        printf("getcwd %s, realpath %s\n", cwd, real);
        return 1;
    }
    free(cwd);
    free(real);

    for (size_t b = 0; b < nblocks; b++)
        free(blocks[b]);
    free(blocks);
    printf("ok\n");
    return 0;
}
