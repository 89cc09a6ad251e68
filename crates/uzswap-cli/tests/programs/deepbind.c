/* A plugin opened with RTLD_DEEPBIND (PHP opens its extensions so) frees
 * what the program allocated and hands back what it allocated itself, and
 * keeps a large buffer of its own. Built twice: with -DPLUGIN as
 * libdeepbind_plugin.so, and as the program, whose RUNPATH ($ORIGIN) is
 * where dlopen finds the plugin by its bare name: that search must still
 * be the program's. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PLUGIN
static uint64_t *buf;
static size_t words;

char *plugin_take(char *p) {
    size_t n = strlen(p);
    free(p);
    char *q = malloc(n + 8);
    snprintf(q, n + 8, "took %zu", n);
    return q;
}

void plugin_fill(size_t bytes) {
    words = bytes / 8;
    buf = malloc(bytes);
    for (size_t i = 0; i < words; i++) buf[i] = i * 7 + 3;
}

int plugin_check(void) {
    for (size_t i = 0; i < words; i++)
        if (buf[i] != i * 7 + 3) return 0;
    free(buf);
    return 1;
}
#else
#include <dlfcn.h>

int main(int argc, char **argv) {
    size_t mb = argc > 1 ? strtoul(argv[1], 0, 10) : 64;
    void *h = dlopen("libdeepbind_plugin.so", RTLD_NOW | RTLD_DEEPBIND);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    char *(*take)(char *) = (char *(*)(char *))dlsym(h, "plugin_take");
    void (*fill)(size_t) = (void (*)(size_t))dlsym(h, "plugin_fill");
    int (*check)(void) = (int (*)(void))dlsym(h, "plugin_check");
    if (!take || !fill || !check) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 1; }
    for (int i = 0; i < 10000; i++) {
        char *p = malloc(64 + i % 4000);
        memset(p, 'a', 63 + i % 4000);
        p[63 + i % 4000] = 0;
        char *q = take(p);
        if (strncmp(q, "took ", 5)) { fprintf(stderr, "bad answer\n"); return 1; }
        free(q);
    }
    fill(mb << 20);
    /* The program's own memory, so the plugin's goes out and comes back. */
    size_t own = (mb << 20) / 8;
    uint64_t *mine = malloc(own * 8);
    for (size_t i = 0; i < own; i++) mine[i] = i;
    if (!check()) { fprintf(stderr, "plugin's buffer changed\n"); return 1; }
    for (size_t i = 0; i < own; i++)
        if (mine[i] != i) { fprintf(stderr, "own buffer changed\n"); return 1; }
    printf("ok deepbind\n");
    return 0;
}
#endif
