/* Sets a locale whose data glibc allocates, pushes that data out of memory
 * under a small budget, then starts threads: each new thread reads the
 * locale's data (glibc's __ctype_init) before the thread library unblocks
 * its signals. Prints "ok" when every thread saw the locale, or
 * "no-locale" when no locale with loaded data is installed.
 * Usage: locale_threads MIB THREADS */
#include <ctype.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *upper(void *arg) {
    (void)arg;
    return (void *)(long)toupper('a');
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    int threads = argc > 2 ? atoi(argv[2]) : 8;
    if (!setlocale(LC_ALL, "C.UTF-8") && !setlocale(LC_ALL, "C.utf8")) {
        printf("no-locale\n");
        return 0;
    }
    size_t n = mib << 20;
    char *p = malloc(n);
    if (!p) {
        perror("malloc");
        return 1;
    }
    for (int i = 0; i < threads; i++) {
        memset(p, i + 1, n);
        pthread_t t;
        void *r;
        if (pthread_create(&t, NULL, upper, NULL) || pthread_join(t, &r)) {
            perror("pthread");
            return 1;
        }
        if ((long)r != 'A') {
            printf("thread %d: toupper gave %ld\n", i, (long)r);
            return 1;
        }
    }
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] != threads) {
            printf("byte %zu: %d\n", i, p[i]);
            return 1;
        }
    printf("ok\n");
    return 0;
}
