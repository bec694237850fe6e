/* test_nvrtc.c - the CUDA backend's compile side, without a GPU: NVRTC builds the fused-MoE
 * GEMM image of every distinct config the static rules accept for Qwen3-30B-A3B (TP1) in
 * the default space, for sm_90, with zero failures; rejected configs carry reasons; the
 * image cache, the injection spec and the no-GPU open() behave. Skips where the CUDA
 * backend is not built.
 *
 * All 288 distinct images take about two minutes on two cores (ctest's limit is 300 s);
 * MT_NVRTC_STRIDE=S compiles every S-th distinct config only, for slower machines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>
#include <cmocka.h>

#ifdef MT_HAVE_CUDA

#include "backend_cuda.h"
#include "moetune.pb-c.h"
#include "mt.h"

static void test_status_values(void **unused) {
    assert_int_equal(WCU_ST_OK, MOETUNE__STATUS__STATUS_OK);
    assert_int_equal(WCU_ST_INVALID, MOETUNE__STATUS__STATUS_INVALID);
    assert_int_equal(WCU_ST_COMPILE_ERROR, MOETUNE__STATUS__STATUS_COMPILE_ERROR);
    assert_int_equal(WCU_ST_LAUNCH_ERROR, MOETUNE__STATUS__STATUS_LAUNCH_ERROR);
    assert_int_equal(WCU_ST_WRONG_RESULT, MOETUNE__STATUS__STATUS_WRONG_RESULT);
    assert_int_equal(WCU_ST_TIMEOUT, MOETUNE__STATUS__STATUS_TIMEOUT);
    assert_int_equal(WCU_ST_CRASHED, MOETUNE__STATUS__STATUS_CRASHED);
    assert_int_equal(WCU_ST_PRUNED, MOETUNE__STATUS__STATUS_PRUNED);
}

/* On this GPU-less machine open() fails with one clear line, and does not crash. */
static void test_open_without_gpu(void **unused) {
    wrk_backend_opts_t opts = {.gpu_index = 0, .compile_threads = 1};
    void *state = NULL;
    wrk_device_t dev;
    char err[256] = "";
    const wrk_backend_ops_t *ops = wrk_backend_find("cuda");
    assert_non_null(ops);
    assert_ptr_equal(ops, &wrk_backend_cuda);
    int rc = ops->open(&opts, &state, &dev, err, sizeof err);
    if (rc == MT_OK) {
        ops->close(&state);
        skip(); /* a GPU is present: nothing to check here */
    }
    printf("open() without a GPU: %s\n", err);
    assert_null(state);
    assert_non_null(strstr(err, "CUDA"));
    assert_non_null(strstr(err, "no CUDA device"));
    assert_null(strchr(err, '\n'));
    ops->close(&state); /* NULL-safe */
}

static void test_warp_layout(void **unused) {
    krn_config_t c = {16, 32, 64, 1, 4, 2};
    assert_int_equal(krn_warps_m(&c), 1); /* 1 x 4 warps of 16x8 */
    c = (krn_config_t){16, 32, 64, 1, 8, 2};
    assert_int_equal(krn_warps_m(&c), 0); /* 8 warps cannot share 16x32 */
    c = (krn_config_t){64, 64, 64, 1, 4, 2};
    assert_int_equal(krn_warps_m(&c), 2); /* 32x32 warp tiles */
    c = (krn_config_t){128, 64, 64, 1, 8, 2};
    assert_int_equal(krn_warps_m(&c), 4); /* 32x32 beats 16x64 and 64x16 */
}

static void test_inject_spec(void **unused) {
    krn_config_t a = {64, 64, 64, 1, 4, 3}, b = {64, 64, 64, 16, 4, 3}, c = {32, 64, 64, 1, 4, 2},
                 d = {64, 128, 64, 1, 4, 3};
    setenv("MOETUNE_CUDA_INJECT", "fault:64x64x64x1x4x3,hang:32x64x64x1x4x2,bogus:1x2,wrong:64x128x64x1x4x3", 1);
    assert_int_equal(wcu_inject_for(&a), 1);
    assert_int_equal(wcu_inject_for(&b), 0);
    assert_int_equal(wcu_inject_for(&c), 2);
    assert_int_equal(wcu_inject_for(&d), 3);
    setenv("MOETUNE_CUDA_INJECT", "fault:64x64", 1);
    assert_int_equal(wcu_inject_for(&a), 0);
    unsetenv("MOETUNE_CUDA_INJECT");
    assert_int_equal(wcu_inject_for(&a), 0);
}

/* The reference's tiles: each expert's slots in order, padded to whole tiles, an expert with no
 * slot has no tile, and an expert with more slots than a tile holds gets two. */
static void test_ref_tiles(void **unused) {
    enum { R = WCU_REF_ROWS };
    int ids[5 + R + 8] = {2, 0, 2, 1, 2}, rows[sizeof ids / sizeof ids[0] + 4 * (R - 1)], tile_e[16];
    assert_int_equal(wcu_ref_tiles(ids, 5, 4, rows, tile_e), 3);
    assert_int_equal(tile_e[0], 0);
    assert_int_equal(tile_e[1], 1);
    assert_int_equal(tile_e[2], 2);
    assert_int_equal(rows[0], 1);
    assert_int_equal(rows[R], 3);
    assert_int_equal(rows[2 * R], 0);
    assert_int_equal(rows[2 * R + 1], 2);
    assert_int_equal(rows[2 * R + 2], 4);
    for (int i = 1; i < R; i++) assert_int_equal(rows[i], -1);
    for (int i = 2 * R + 3; i < 3 * R; i++) assert_int_equal(rows[i], -1);
    /* R + 8 more slots of expert 3: two tiles, the second holding 8 */
    for (int i = 5; i < 5 + R + 8; i++) ids[i] = 3;
    assert_int_equal(wcu_ref_tiles(ids, 5 + R + 8, 4, rows, tile_e), 5);
    assert_int_equal(tile_e[3], 3);
    assert_int_equal(tile_e[4], 3);
    assert_int_equal(rows[3 * R], 5);
    assert_int_equal(rows[4 * R + 7], 5 + R + 7);
    assert_int_equal(rows[4 * R + 8], -1);
}

/* A second compile of the same config comes from the cache, byte for byte. */
static void test_cache(void **unused) {
    char dir[] = "/tmp/mt-nvrtc-cache-XXXXXX";
    assert_non_null(mkdtemp(dir));
    krn_config_t c = {32, 64, 64, 16, 4, 3};
    wcu_image_t a, b;
    assert_int_equal(wcu_compile_config(&c, 9, 0, dir, &a), MT_OK);
    assert_int_equal(a.from_cache, 0);
    c.group_m = 1; /* GROUP_SIZE_M is a run-time argument: same image */
    assert_int_equal(wcu_compile_config(&c, 9, 0, dir, &b), MT_OK);
    assert_int_equal(b.from_cache, 1);
    assert_int_equal(a.cubin_size, b.cubin_size);
    assert_memory_equal(a.cubin, b.cubin, a.cubin_size);
    assert_int_equal(a.regs, b.regs);
    assert_true(a.regs > 0);
    wcu_image_clear(&a);
    wcu_image_clear(&b);
    char cmd[128];
    mt_fmt(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* The config-independent image (align, sums, reference layers, the check's hold) compiles for
 * sm_90 and ends with a cubin: the worker loads it before its first config. */
static void test_compile_common(void **unused) {
    wcu_image_t img;
    assert_int_equal(wcu_compile_common(9, 0, NULL, &img), MT_OK);
    assert_true(img.ok);
    assert_true(img.cubin_size > 0);
    assert_string_equal(img.error, "");
    wcu_image_clear(&img);
}

typedef struct {
    krn_config_t *cfgs;
    size_t n, next;
    size_t failed, spilling, compiled;
    uint32_t max_regs;
    double total_s;
    mtx_t mu;
} pool_t;

static int compile_worker(void *arg) {
    pool_t *p = arg;
    for (;;) {
        mtx_lock(&p->mu);
        size_t i = p->next++;
        mtx_unlock(&p->mu);
        if (i >= p->n) return 0;
        wcu_image_t img;
        int rc = wcu_compile_config(&p->cfgs[i], 9, 0, NULL, &img);
        mtx_lock(&p->mu);
        p->compiled++;
        p->total_s += img.compile_s;
        if (rc != MT_OK || !img.ok) {
            p->failed++;
            printf("COMPILE FAILED %ux%ux%u w%u s%u: %s\n", p->cfgs[i].block_m, p->cfgs[i].block_n, p->cfgs[i].block_k,
                   p->cfgs[i].num_warps, p->cfgs[i].num_stages, img.error);
        } else {
            if (img.spill_bytes) {
                p->spilling++;
                printf("spills %5u B, %3u regs: %ux%ux%u w%u s%u\n", img.spill_bytes, img.regs, p->cfgs[i].block_m,
                       p->cfgs[i].block_n, p->cfgs[i].block_k, p->cfgs[i].num_warps, p->cfgs[i].num_stages);
            }
            if (img.regs > p->max_regs) p->max_regs = img.regs;
        }
        mtx_unlock(&p->mu);
        wcu_image_clear(&img);
    }
}

static void test_compile_default_space(void **unused) {
    krn_space_t space;
    krn_limits_t lim;
    krn_shape_t shape;
    char why[160], err[160];
    assert_int_equal(krn_shape_parse("E=128,N=768,K=2048,topk=8", &shape, err, sizeof err), MT_OK);
    krn_space_default(&space);
    krn_limits_default(&lim);
    size_t total = krn_space_size(&space), accepted = 0, rejected = 0;
    pool_t pool = {0};
    assert_int_equal(mtx_init(&pool.mu, mtx_plain), thrd_success);
    pool.cfgs = calloc(total, sizeof *pool.cfgs);
    assert_non_null(pool.cfgs);
    size_t distinct = 0;
    for (size_t i = 0; i < total; i++) {
        krn_config_t c;
        krn_space_at(&space, i, &c);
        why[0] = '\0';
        if (krn_check(&shape, &c, &lim, why, sizeof why) != MT_OK) {
            rejected++;
            assert_true(strlen(why) > 10); /* every rejection says why */
            continue;
        }
        accepted++;
        krn_config_t key = wcu_image_key(&c);
        int seen = 0;
        for (size_t j = 0; j < distinct && !seen; j++) seen = memcmp(&pool.cfgs[j], &key, sizeof key) == 0;
        if (!seen) pool.cfgs[distinct++] = key;
    }
    assert_int_equal(accepted + rejected, total);
    assert_true(accepted > 0 && rejected > 0);
    /* GROUP_SIZE_M is a run-time argument: four accepted configs per compiled image. */
    assert_int_equal(accepted, distinct * space.n[KRN_F_group_m]);

    const char *stride_env = getenv("MT_NVRTC_STRIDE");
    size_t stride = stride_env ? strtoul(stride_env, NULL, 10) : 1;
    if (stride < 1) stride = 1;
    size_t n = 0;
    for (size_t j = 0; j < distinct; j += stride) pool.cfgs[n++] = pool.cfgs[j];
    pool.n = n;
    uint64_t t0 = mt_now_ms();
    thrd_t th[2];
    for (int t = 0; t < 2; t++) assert_int_equal(thrd_create(&th[t], compile_worker, &pool), thrd_success);
    for (int t = 0; t < 2; t++) thrd_join(th[t], NULL);
    printf("default space, E=128,N=768,K=2048,topk=8, sm_90: %zu configs, %zu rejected by the rules, %zu accepted "
           "= %zu compiled images; compiled %zu (stride %zu) in %.1f s wall (%.2f s each), %zu failed, %zu spill, "
           "max %u registers\n",
           total, rejected, accepted, distinct, pool.compiled, stride, (double)(mt_now_ms() - t0) / 1000.0,
           pool.compiled ? pool.total_s / pool.compiled : 0.0, pool.failed, pool.spilling, pool.max_regs);
    assert_int_equal(pool.compiled, n);
    assert_int_equal(pool.failed, 0);
    free(pool.cfgs);
    mtx_destroy(&pool.mu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_values),
        cmocka_unit_test(test_open_without_gpu),
        cmocka_unit_test(test_warp_layout),
        cmocka_unit_test(test_inject_spec),
        cmocka_unit_test(test_ref_tiles),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_compile_common),
        cmocka_unit_test(test_compile_default_space),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
static void test_not_built(void **unused) { skip(); }
int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
