/*
 * A C program using libuzswap: a 32 MiB region under an 8 MiB budget,
 * filled with a pattern, paged out, then read back and checked byte by
 * byte. Prints the instance's figures as JSON. Exits 0 only if every byte
 * came back as written.
 *
 * Build (from the repository root, after cargo build --release):
 *   cc -O2 -Iinclude examples/c/example.c target/release/libuzswap.a \
 *      -lpthread -ldl -lm -o example
 * or against the shared library:
 *   cc -O2 -Iinclude examples/c/example.c -Ltarget/release -luzswap \
 *      -Wl,-rpath,"$PWD/target/release" -o example
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "uzswap.h"

#define BUDGET (8u << 20)
#define REGION_LEN (32u << 20)

/* Varies within a page and from page to page, so no page is same-filled or
 * equal to another, yet it compresses. */
static uint8_t pattern(size_t i)
{
    return (uint8_t)((i % 251) ^ (i >> 12) ^ ((i >> 20) * 7));
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "%s failed (%d): %s\n", what, rc, uzswap_last_error());
    return 1;
}

int main(void)
{
    uzswap_config_t cfg;
    uzswap_config_default(&cfg);
    cfg.budget = BUDGET;
    /* Keep memory read often without faulting, where the samples pay. */
    cfg.sample_young = UZSWAP_SAMPLE_YOUNG_AUTO;

    uzswap_t *uz = NULL;
    int rc = uzswap_new(&cfg, &uz);
    if (rc != UZSWAP_OK)
        return fail("uzswap_new", rc);

    uzswap_region_t *region = NULL;
    rc = uzswap_region_new(uz, REGION_LEN, &region);
    if (rc != UZSWAP_OK) {
        uzswap_destroy(uz);
        return fail("uzswap_region_new", rc);
    }
    uint8_t *p = uzswap_region_ptr(region);
    size_t len = uzswap_region_len(region);

    /* This thread faults on every page below: have its faults resolved on
     * its own CPU where the instance can (optional; 0 is not an error). */
    int registered = uzswap_register_thread(uz);
    if (registered < 0) {
        uzswap_region_free(region);
        uzswap_destroy(uz);
        return fail("uzswap_register_thread", registered);
    }

    /* 32 MiB through an 8 MiB budget: most of it is compressed (or written
     * back) while it is being filled. */
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(i);

    rc = uzswap_advise(region, 0, len, UZSWAP_ADVICE_PAGEOUT);
    if (rc != UZSWAP_OK) {
        uzswap_region_free(region);
        uzswap_destroy(uz);
        return fail("uzswap_advise(PAGEOUT)", rc);
    }

    size_t bad = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != pattern(i)) {
            if (bad == 0)
                fprintf(stderr, "first mismatch at byte %zu: %u, expected %u\n", i,
                        (unsigned)p[i], (unsigned)pattern(i));
            bad++;
        }
    }

    char *json = uzswap_stats_json(uz);
    if (json == NULL) {
        uzswap_region_free(region);
        uzswap_destroy(uz);
        return fail("uzswap_stats_json", -1);
    }
    printf("%s\n", json);
    uzswap_string_free(json);

    if (registered)
        uzswap_unregister_thread(uz);
    /* The instance first: a region may outlive its instance handle. */
    uzswap_destroy(uz);
    uzswap_region_free(region);

    if (bad != 0) {
        fprintf(stderr, "%zu of %zu bytes differ\n", bad, len);
        return 1;
    }
    printf("all %zu bytes verified\n", len);
    return 0;
}
