/* test_guard.c - the ship guard's pure parts: the engines' default configs by dtype and block
 * shape (coordinator/guard.c), the nearest-key rule, the engines a sweep is for, and the lookup
 * of an engine's bundled file with SGLang's fallback and the warm start's files (cli/shipguard.c),
 * and the triton_X_Y_Z folder a file lies in (common/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "guard.h"
#include "shipguard.h"

static krn_shape_t shape(uint32_t e, const char *dtype, uint32_t bn, uint32_t bk) {
    krn_shape_t s;
    memset(&s, 0, sizeof s);
    s.e = e, s.n = 768, s.k = 2048, s.topk = 8, s.block_n = bn, s.block_k = bk;
    snprintf(s.dtype, sizeof s.dtype, "%s", dtype);
    return s;
}

static void cfg_is(const krn_config_t *c, uint32_t bm, uint32_t bn, uint32_t bk, uint32_t gm, uint32_t w, uint32_t st) {
    krn_config_t want = {bm, bn, bk, gm, w, st};
    char a[KRN_CONFIG_TEXT_LEN], b[KRN_CONFIG_TEXT_LEN];
    krn_config_format(c, a, sizeof a);
    krn_config_format(&want, b, sizeof b);
    assert_string_equal(a, b);
}

/* Asserts that engine's default config for shape at M is bm/bn/bk/gm/w/st; its rule into *rule. */
static void default_is(const char *engine, const krn_shape_t *shape, uint32_t m, const char **rule, uint32_t bm,
                       uint32_t bn, uint32_t bk, uint32_t gm, uint32_t w, uint32_t st) {
    krn_config_t c;
    assert_int_equal(guard_default_config(engine, shape, m, &c, rule), MT_OK);
    cfg_is(&c, bm, bn, bk, gm, w, st);
}

/* get_default_config of SGLang and vLLM (the classic rule): bf16 switches at M = E, with
 * Triton's 4 warps and 3 stages; fp8 with a block shape takes it for BLOCK_SIZE_N and _K;
 * SGLang's fp8 per tensor has its own pair; vLLM's falls back to bf16's; unknown engines fail. */
static void test_defaults(void **state) {
    (void)state;
    krn_config_t c;
    const char *rule = NULL;
    krn_shape_t bf = shape(128, "bf16", 0, 0);
    default_is("sglang", &bf, 128, &rule, 16, 32, 64, 1, 4, 3);
    assert_string_equal(rule, "sglang get_default_config, M <= E");
    default_is("sglang", &bf, 129, &rule, 64, 64, 32, 8, 4, 3);
    default_is("vllm", &bf, 4096, &rule, 64, 64, 32, 8, 4, 3);
    assert_string_equal(rule, "vllm get_default_config, M > E");
    krn_shape_t blk = shape(256, "fp8_w8a8", 128, 128);
    for (uint32_t m = 1; m <= 4096; m *= 64) {
        default_is("sglang", &blk, m, &rule, 64, 128, 128, 32, 4, 3);
        default_is("vllm", &blk, m, &rule, 64, 128, 128, 32, 4, 3);
    }
    krn_shape_t pt = shape(8, "fp8_w8a8", 0, 0);
    default_is("sglang", &pt, 8, &rule, 64, 128, 128, 1, 4, 4);
    default_is("sglang", &pt, 9, &rule, 128, 256, 128, 32, 8, 4);
    default_is("vllm", &pt, 9, &rule, 64, 64, 32, 8, 4, 3);
    assert_int_equal(guard_default_config("trtllm", &bf, 1, &c, &rule), MT_INVAL);
}

/* vLLM's newer heuristic (its 2026 fused_moe.py): tiles by M, GROUP_SIZE_M 16 only past 128
 * tokens an expert; with an fp8 block shape a 64-wide N tile and deeper pipeline for M <= 8. */
static void test_vllm_next(void **state) {
    (void)state;
    const char *rule = NULL;
    krn_shape_t bf = shape(128, "bf16", 0, 0), few = shape(8, "bf16", 0, 0);
    default_is("vllm-2026", &bf, 1, &rule, 16, 64, 128, 1, 4, 4);
    default_is("vllm-2026", &bf, 256, &rule, 64, 128, 64, 1, 8, 3);
    default_is("vllm-2026", &few, 4096, &rule, 128, 128, 64, 16, 8, 3);
    krn_shape_t blk = shape(256, "fp8_w8a8", 128, 128);
    default_is("vllm-2026", &blk, 4, &rule, 16, 64, 128, 1, 4, 4);
    default_is("vllm-2026", &blk, 8, &rule, 16, 64, 128, 1, 4, 3);
    default_is("vllm-2026", &blk, 16, &rule, 16, 128, 128, 1, 4, 3);
    default_is("vllm-2026", &blk, 128, &rule, 64, 128, 128, 32, 4, 3);
    assert_string_equal(rule, "vllm-2026 get_default_config, fp8 block-wise");
}

/* The engines' nearest key: the smaller of two equally near; 0 without keys. */
static void test_nearest(void **state) {
    (void)state;
    const uint32_t keys[] = {96, 1, 64, 4096, 2};
    assert_int_equal(guard_nearest_key(keys, 5, 80), 64);
    assert_int_equal(guard_nearest_key(keys, 5, 81), 96);
    assert_int_equal(guard_nearest_key(keys, 5, 3), 2);
    assert_int_equal(guard_nearest_key(keys, 5, 100000), 4096);
    assert_int_equal(guard_nearest_key(keys, 5, 1), 1);
    assert_int_equal(guard_nearest_key(keys, 0, 5), 0);
}

/* A sweep's engines: as listed (a repeat once), else both for triton, else SGLang's. */
static void test_engines(void **state) {
    (void)state;
    Moetune__SweepSpec spec = MOETUNE__SWEEP_SPEC__INIT;
    const char *names[2];
    spec.backend = "sim";
    assert_int_equal(guard_engines(&spec, names), 1);
    assert_string_equal(names[0], "sglang");
    spec.backend = "triton";
    assert_int_equal(guard_engines(&spec, names), 2);
    assert_string_equal(names[1], "vllm");
    char *list[] = {"vllm", "vllm"};
    spec.engines = list, spec.n_engines = 2;
    assert_int_equal(guard_engines(&spec, names), 1);
    assert_string_equal(names[0], "vllm");
}

/* SGLang's bundled file: the running Triton's folder, else the newest other folder that has
 * the file; NOTFOUND for a shape none has; a device named picks among several devices'. */
/* SGLang's triton_X_Y_Z folder a config file lies in, from its path; nothing for another folder. */
static void test_triton_dir(void **state) {
    (void)state;
    char d[64];
    assert_true(mt_triton_dir("/pkg/configs/triton_3_4_0/E=128,N=768.json", d, sizeof d));
    assert_string_equal(d, "triton_3_4_0");
    assert_true(mt_triton_dir("triton_3_5_1/E=8.json", d, sizeof d));
    assert_string_equal(d, "triton_3_5_1");
    assert_false(mt_triton_dir("/pkg/configs/E=128,N=768.json", d, sizeof d));
    assert_string_equal(d, "");
    assert_false(mt_triton_dir("/pkg/triton_/E=8.json", d, sizeof d));
    assert_false(mt_triton_dir("/pkg/triton_3_4_0", d, sizeof d)); /* the folder itself: no file in it */
    assert_false(mt_triton_dir("E=8.json", d, sizeof d));
}

static void test_bundled(void **state) {
    (void)state;
    const char *dir = MT_SOURCE_DIR "/tests/data/fake_sglang/sglang/srt/layers/moe/fused_moe_triton";
    char path[4096], err[300];
    krn_shape_t qwen = shape(128, "bf16", 0, 0);
    assert_int_equal(
        cli_guard_bundled_find(dir, EXP_ENGINE_SGLANG, "3.6.0", NULL, &qwen, path, sizeof path, err, sizeof err),
        MT_OK);
    assert_non_null(strstr(path, "/configs/triton_3_4_0/E=128,N=768,device_name=NVIDIA_H200.json"));
    assert_int_equal(cli_guard_bundled_find(dir, EXP_ENGINE_SGLANG, "3.1.0", "NVIDIA H200", &qwen, path, sizeof path,
                                            err, sizeof err),
                     MT_OK);
    assert_non_null(strstr(path, "/configs/triton_3_1_0/E=128,N=768,device_name=NVIDIA_H200.json"));
    assert_int_equal(cli_guard_bundled_find(dir, EXP_ENGINE_SGLANG, NULL, "NVIDIA H100 80GB HBM3", &qwen, path,
                                            sizeof path, err, sizeof err),
                     MT_NOTFOUND);
    krn_shape_t fp8 = shape(128, "fp8_w8a8", 128, 128);
    assert_int_equal(
        cli_guard_bundled_find(dir, EXP_ENGINE_SGLANG, NULL, NULL, &fp8, path, sizeof path, err, sizeof err),
        MT_NOTFOUND);
}

/* Where the engine ships no file for the GPU: its file for the shape on another GPU (the running
 * Triton's folder first, then the newest other), else the nearest shape's, goes into the spec's
 * warm_files, never its incumbents; another dtype finds none. */
static void test_warm_files(void **state) {
    (void)state;
    const char *dir = MT_SOURCE_DIR "/tests/data/fake_sglang/sglang/srt/layers/moe/fused_moe_triton";
    krn_shape_t sh[3] = {shape(128, "bf16", 0, 0), shape(128, "bf16", 0, 0), shape(128, "fp8_w8a8", 128, 128)};
    sh[1].n = 384;
    cli_guard_engine_t e = {EXP_ENGINE_SGLANG, dir, "3.1.0", "NVIDIA B200", "sglang", ""};
    Moetune__SweepSpec spec;
    moetune__sweep_spec__init(&spec);
    cli_guard_t *g = cli_guard_new();
    char said[4096] = "";
    FILE *say = fmemopen(said, sizeof said - 1, "w");
    assert_non_null(g);
    assert_non_null(say);
    assert_int_equal(cli_guard_engine_folder(g, &spec, sh, 3, &e, say), MT_OK);
    fclose(say);
    assert_int_equal(spec.n_incumbents, 0);
    assert_true(spec.n_warm_files > 0);
    size_t per[3] = {0, 0, 0};
    for (size_t i = 0; i < spec.n_warm_files; i++) {
        const Moetune__Incumbent *in = spec.warm_files[i];
        assert_true(in->shape < 3);
        per[in->shape]++;
        assert_string_equal(in->engine, "sglang");
        /* this shape (N=768) and the nearest (N=384: E=128,N=768 again, not E=8) from triton_3_1_0 */
        assert_non_null(strstr(in->source, "/configs/triton_3_1_0/E=128,N=768,device_name=NVIDIA_H200.json"));
    }
    assert_true(per[0] > 0 && per[1] == per[0] && per[2] == 0);
    assert_non_null(strstr(said, "warm start for E=128,N=768,K=2048,topk=8: "));
    assert_non_null(strstr(said, "warm start for E=128,N=384,K=2048,topk=8: "));
    cli_guard_destroy(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),   cmocka_unit_test(test_vllm_next), cmocka_unit_test(test_nearest),
        cmocka_unit_test(test_engines),    cmocka_unit_test(test_bundled),   cmocka_unit_test(test_triton_dir),
        cmocka_unit_test(test_warm_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
