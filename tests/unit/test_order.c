/* test_order.c - the cost-model order: a permutation of the valid configs, every prefix of
 * (BLOCK_SIZE_M values) configs spans every BLOCK_SIZE_M, each BLOCK_SIZE_M's configs come
 * best-scored first, deterministic; and the model's estimate behaves like a layer's time. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mt.h"
#include "order.h"
#include "space.h"

static const uint32_t k_bs[] = {1, 16, 256, 4096};

static size_t valid_configs(const krn_shape_t *s, krn_config_t **out) {
    krn_space_t sp;
    krn_limits_t lim;
    char why[128];
    krn_space_default(&sp);
    krn_limits_default(&lim);
    size_t n = krn_space_size(&sp), m = 0;
    krn_config_t *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        krn_config_t c;
        krn_space_at(&sp, i, &c);
        if (krn_check(s, &c, &lim, why, sizeof why) == MT_OK) v[m++] = c;
    }
    *out = v;
    return m;
}

static int cmp_cfg(const void *a, const void *b) { return memcmp(a, b, sizeof(krn_config_t)); }

/* The score order.h describes, recomputed: the config's best showing over the batch sizes. */
static double score(const krn_shape_t *s, const krn_config_t *v, size_t n, size_t i) {
    double best = INFINITY;
    for (size_t b = 0; b < 4; b++) {
        double lo = INFINITY;
        for (size_t k = 0; k < n; k++) lo = fmin(lo, ord_cost_us(s, &v[k], k_bs[b]));
        best = fmin(best, ord_cost_us(s, &v[i], k_bs[b]) / lo);
    }
    return best;
}

static void test_order(void **state) {
    (void)state;
    krn_shape_t s = {.e = 128, .n = 768, .k = 2048, .topk = 8, .dtype = "bf16"};
    krn_config_t *v = NULL;
    size_t n = valid_configs(&s, &v);
    assert_true(n > 1000);
    krn_config_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    memcpy(a, v, n * sizeof *a);
    memcpy(b, v, n * sizeof *b);
    assert_int_equal(ord_configs(&s, k_bs, 4, a, n), MT_OK);
    assert_int_equal(ord_configs(&s, k_bs, 4, b, n), MT_OK);
    assert_memory_equal(a, b, n * sizeof *a); /* deterministic */
    /* every prefix of 5 (the default space's BLOCK_SIZE_M values) spans them all */
    for (size_t start = 0; start + 5 <= n && start < 500; start += 5) {
        uint32_t seen = 0;
        for (size_t i = start; i < start + 5; i++) seen |= a[i].block_m;
        assert_int_equal(seen, 16 | 32 | 64 | 128 | 256);
    }
    /* within one BLOCK_SIZE_M, the better-scored configs first */
    double prev[257];
    for (size_t i = 0; i < 257; i++) prev[i] = -1;
    for (size_t i = 0; i < 200; i++) {
        double sc = score(&s, a, n, i);
        assert_true(sc >= prev[a[i].block_m] - 1e-12);
        prev[a[i].block_m] = sc;
    }
    /* a permutation of the valid configs */
    qsort(b, n, sizeof *b, cmp_cfg);
    qsort(v, n, sizeof *v, cmp_cfg);
    assert_memory_equal(b, v, n * sizeof *b);
    krn_config_t one = v[0];
    assert_int_equal(ord_configs(&s, k_bs, 4, &one, 1), MT_OK);
    assert_memory_equal(&one, &v[0], sizeof one);
    free(a);
    free(b);
    free(v);
}

static void test_cost(void **state) {
    (void)state;
    krn_shape_t s = {.e = 128, .n = 768, .k = 2048, .topk = 8, .dtype = "bf16"};
    krn_config_t small = {16, 64, 64, 1, 4, 3}, large = {128, 128, 64, 16, 8, 3};
    /* more tokens cost more */
    assert_true(ord_cost_us(&s, &large, 4096) > ord_cost_us(&s, &large, 256));
    assert_true(ord_cost_us(&s, &large, 256) > ord_cost_us(&s, &large, 1));
    /* large tiles win at large batch sizes, small ones at one token (no padding to 128 rows) */
    assert_true(ord_cost_us(&s, &large, 4096) < ord_cost_us(&s, &small, 4096));
    assert_true(ord_cost_us(&s, &small, 1) < ord_cost_us(&s, &large, 1));
    for (size_t b = 0; b < 4; b++)
        assert_true(isfinite(ord_cost_us(&s, &small, k_bs[b])) && ord_cost_us(&s, &small, k_bs[b]) > 0);
}

/* What an H200 measured (docs/performance.md, "the cost model's order"), and the model before it
 * had the warp tile and the warps resident per SM ranked the other way round (or alike). */
static void test_cost_measured(void **state) {
    (void)state;
    krn_shape_t mixtral = {.e = 8, .n = 7168, .k = 4096, .topk = 2, .dtype = "bf16"};
    /* Mixtral-8x7B TP2 at 4096 tokens: 128x256 tiles on 8 warps won; 128x128 ones ran 1.41x */
    krn_config_t wide = {128, 256, 64, 1, 8, 4}, square = {128, 128, 64, 1, 8, 3};
    assert_true(ord_cost_us(&mixtral, &wide, 4096) < ord_cost_us(&mixtral, &square, 4096));
    /* 128x128x64 on 4 warps at 2048 tokens: 3 stages (two CTAs fit an SM's shared memory)
     * 1.10x the best, 4 stages (one CTA, 4 warps per SM) 1.71x */
    krn_config_t s3 = {128, 128, 64, 1, 4, 3}, s4 = {128, 128, 64, 1, 4, 4};
    assert_true(ord_cost_us(&mixtral, &s4, 2048) > 1.2 * ord_cost_us(&mixtral, &s3, 2048));
}

int main(void) {
    mt_log_init("test_order", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_cost),
        cmocka_unit_test(test_cost_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
