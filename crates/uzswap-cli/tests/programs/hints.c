/* Address hints as the kernel takes them. A JIT (LuaJIT) wants its code
 * within a 32-bit jump of its binary: it asks with a hint near it and
 * tries again elsewhere until the answer is close enough. A hint where the
 * addresses are free is where the mapping goes, inside uzswap's regions or
 * outside them; MAP_32BIT memory is under 2 GiB. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MB (1UL << 20)

int main(void) {
    uintptr_t target = (uintptr_t)&main & ~(uintptr_t)0xffff;
    /* Below the binary, as LuaJIT's first tries are. */
    int near = 0;
    for (uintptr_t off = 64 * MB; off < 1024 * MB && !near; off += 64 * MB) {
        char *p = mmap((void *)(target - off), 64 << 10, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); return 1; }
        if ((uintptr_t)p == target - off) {
            near = 1;
            memset(p, 0xc3, 64 << 10); /* ret */
            if (mprotect(p, 64 << 10, PROT_READ | PROT_EXEC)) { perror("mprotect"); return 1; }
            ((void (*)(void))p)();
        }
        munmap(p, 64 << 10);
    }
    if (!near) { fprintf(stderr, "no hint near the binary was taken\n"); return 1; }
    /* A hint at free memory the program had before. */
    char *a = mmap(NULL, 4 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(a, 4 * MB);
    char *b = mmap(a, 4 * MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b != a) { fprintf(stderr, "hint %p at free memory answered %p\n", (void *)a, (void *)b); return 1; }
    for (size_t i = 0; i < 4 * MB; i += 4096) if (b[i]) { fprintf(stderr, "not zeros\n"); return 1; }
    /* Many hinted mappings, each where the last ended (LuaJIT's allocator). */
    char *h = b + 4 * MB;
    for (int i = 0; i < 1000; i++) {
        char *p = mmap(h, 128 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap hinted"); return 1; }
        memset(p, i, 128 << 10);
        h = p + (128 << 10);
    }
    char *l = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (l == MAP_FAILED || (uintptr_t)l + MB > (2UL << 30)) { fprintf(stderr, "MAP_32BIT: %p\n", (void *)l); return 1; }
    l[0] = 1;
    printf("ok hints\n");
    return 0;
}
