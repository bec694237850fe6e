/* test_presets.c - model presets and Hugging Face config.json → shapes (the models' published configs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mt.h"
#include "presets.h"

/* Each model's published config.json: E, topk, K and N at TP 1/2/4/8; the dtype and weight blocks the checkpoint ships
 * (DeepSeek-V3/R1, Kimi-K2 and Qwen's -FP8 checkpoints: fp8 e4m3 with 128x128 block scales). */
static const struct {
    const char *name;
    uint32_t e, topk, k, n[4];
    const char *dtype;
    uint32_t block;
} k_models[] = {
    {"mixtral-8x7b", 8, 2, 4096, {14336, 7168, 3584, 1792}, "bf16", 0},
    {"mixtral-8x22b", 8, 2, 6144, {16384, 8192, 4096, 2048}, "bf16", 0},
    {"deepseek-v3", 256, 8, 7168, {2048, 1024, 512, 256}, "fp8_w8a8", 128},
    {"deepseek-r1", 256, 8, 7168, {2048, 1024, 512, 256}, "fp8_w8a8", 128},
    {"kimi-k2", 384, 8, 7168, {2048, 1024, 512, 256}, "fp8_w8a8", 128},
    {"qwen3-30b-a3b", 128, 8, 2048, {768, 384, 192, 96}, "bf16", 0},
    {"qwen3-30b-a3b-fp8", 128, 8, 2048, {768, 384, 192, 96}, "fp8_w8a8", 128},
    {"qwen3-235b-a22b", 128, 8, 4096, {1536, 768, 384, 192}, "bf16", 0},
    {"qwen3-235b-a22b-fp8", 128, 8, 4096, {1536, 768, 384, 192}, "fp8_w8a8", 128},
    {"qwen3-next-80b-a3b", 512, 10, 2048, {512, 256, 128, 64}, "bf16", 0},
    {"qwen3.5-397b-a17b", 512, 10, 4096, {1024, 512, 256, 128}, "bf16", 0},
    {"qwen3.5-122b-a10b", 256, 8, 3072, {1024, 512, 256, 128}, "bf16", 0},
    {"qwen3.5-35b-a3b", 256, 8, 2048, {512, 256, 128, 64}, "bf16", 0},
    {"gpt-oss-20b", 32, 4, 2880, {2880, 1440, 720, 360}, "bf16", 0},
    {"gpt-oss-120b", 128, 4, 2880, {2880, 1440, 720, 360}, "bf16", 0},
};

static void test_presets_tp(void **state) {
    static const uint32_t tps[4] = {1, 2, 4, 8};
    for (size_t m = 0; m < sizeof k_models / sizeof k_models[0]; m++) {
        for (size_t t = 0; t < 4; t++) {
            krn_shape_t s;
            char err[256] = "";
            int rc = cli_preset_shape(k_models[m].name, tps[t], 1, NULL, &s, err, sizeof err);
            if (rc != MT_OK) fail_msg("%s TP %u: %s", k_models[m].name, tps[t], err);
            assert_int_equal(s.e, k_models[m].e);
            assert_int_equal(s.n, k_models[m].n[t]);
            assert_int_equal(s.k, k_models[m].k);
            assert_int_equal(s.topk, k_models[m].topk);
            assert_string_equal(s.dtype, k_models[m].dtype);
            assert_int_equal(s.block_n, k_models[m].block);
            assert_int_equal(s.block_k, k_models[m].block);
        }
    }
    assert_int_equal(cli_n_presets, 14);
}

/* --dtype over a preset: fp8_w8a8 keeps the checkpoint's blocks or is per-tensor; bf16 drops them. */
static void test_presets_dtype(void **state) {
    krn_shape_t s;
    char err[256];
    assert_int_equal(cli_preset_shape("deepseek-v3", 8, 1, "bf16", &s, err, sizeof err), MT_OK);
    assert_string_equal(s.dtype, "bf16");
    assert_int_equal(s.block_n, 0);
    assert_int_equal(cli_preset_shape("deepseek-v3", 8, 1, "fp8_w8a8", &s, err, sizeof err), MT_OK);
    assert_int_equal(s.block_n, 128);
    assert_int_equal(s.block_k, 128);
    char name[96];
    krn_shape_name(&s, name, sizeof name);
    assert_string_equal(name, "E=256,N=256,dtype=fp8_w8a8,block_shape=[128, 128]");
    assert_int_equal(cli_preset_shape("mixtral-8x7b", 1, 1, "fp8_w8a8", &s, err, sizeof err), MT_OK);
    assert_string_equal(s.dtype, "fp8_w8a8");
    assert_int_equal(s.block_n, 0);
    assert_int_equal(s.block_k, 0);
}

static void test_presets_ep(void **state) {
    krn_shape_t s;
    char err[256];
    assert_int_equal(cli_preset_shape("deepseek-v3", 8, 8, NULL, &s, err, sizeof err), MT_OK);
    assert_int_equal(s.e, 32);
    assert_int_equal(s.n, 256);
    assert_int_equal(cli_preset_shape("kimi-k2", 1, 4, "fp8_w8a8", &s, err, sizeof err), MT_OK);
    assert_int_equal(s.e, 96);
    assert_string_equal(s.dtype, "fp8_w8a8");
    /* EP must divide the experts: 384 / 5 is not whole. */
    assert_int_equal(cli_preset_shape("kimi-k2", 1, 5, NULL, &s, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "not divisible by EP 5"));
    /* Mixtral has 8 experts and top-2: EP 8 leaves 1 expert, fewer than topk. */
    assert_int_equal(cli_preset_shape("mixtral-8x7b", 1, 8, NULL, &s, err, sizeof err), MT_INVAL);
}

static void test_errors(void **state) {
    krn_shape_t s;
    char err[512] = "";
    assert_int_equal(cli_preset_shape("llama-moe", 1, 1, NULL, &s, err, sizeof err), MT_NOTFOUND);
    assert_non_null(strstr(err, "unknown model 'llama-moe'"));
    assert_non_null(strstr(err, "qwen3-30b-a3b"));
    assert_int_equal(cli_preset_shape("qwen3-30b-a3b", 5, 1, NULL, &s, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "not divisible by TP 5"));
    assert_int_equal(cli_preset_shape("qwen3-30b-a3b", 0, 1, NULL, &s, err, sizeof err), MT_INVAL);
    assert_non_null(cli_preset_find("DeepSeek-R1"));
}

static void hf(const char *json, uint32_t tp, uint32_t ep, uint32_t e, uint32_t n, uint32_t k, uint32_t topk,
               const char *dtype, uint32_t bn) {
    krn_shape_t s;
    char err[256] = "";
    int rc = cli_model_config_parse(json, strlen(json), tp, ep, NULL, &s, err, sizeof err);
    if (rc != MT_OK) fail_msg("config %s: %s", json, err);
    assert_int_equal(s.e, e);
    assert_int_equal(s.n, n);
    assert_int_equal(s.k, k);
    assert_int_equal(s.topk, topk);
    assert_string_equal(s.dtype, dtype);
    assert_int_equal(s.block_n, bn);
}

static void test_hf_families(void **state) {
    /* Mixtral: num_local_experts, intermediate_size. */
    hf("{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 4096, \"intermediate_size\": 14336,"
       " \"num_local_experts\": 8, \"num_experts_per_tok\": 2}",
       2, 1, 8, 7168, 4096, 2, "bf16", 0);
    /* DeepSeek: n_routed_experts, moe_intermediate_size preferred over the dense intermediate_size,
     * fp8 block quantisation. */
    hf("{\"hidden_size\": 7168, \"intermediate_size\": 18432, \"moe_intermediate_size\": 2048,"
       " \"n_routed_experts\": 256, \"num_experts_per_tok\": 8, \"quantization_config\":"
       " {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}",
       8, 1, 256, 256, 7168, 8, "fp8_w8a8", 128);
    /* Qwen MoE: num_experts. */
    hf("{\"hidden_size\": 2048, \"intermediate_size\": 6144, \"moe_intermediate_size\": 768,"
       " \"num_experts\": 128, \"num_experts_per_tok\": 8}",
       4, 2, 64, 192, 2048, 8, "bf16", 0);
    /* gpt-oss: experts_per_token. */
    hf("{\"hidden_size\": 2880, \"intermediate_size\": 2880, \"num_local_experts\": 128,"
       " \"experts_per_token\": 4}",
       2, 1, 128, 1440, 2880, 4, "bf16", 0);
    /* Nested text_config (multimodal wrappers). */
    hf("{\"model_type\": \"qwen3_5_moe\", \"text_config\": {\"hidden_size\": 4096, \"moe_intermediate_size\": 1024,"
       " \"num_experts\": 512, \"num_experts_per_tok\": 10}}",
       8, 1, 512, 128, 4096, 10, "bf16", 0);
}

/* An fp8 checkpoint's config with --dtype: fp8_w8a8 keeps its weight blocks, bf16 drops them; no
 * weight_block_size is per-tensor; a malformed one is an error, not silently per-tensor. */
static void test_hf_fp8(void **state) {
    static const char *qwen_fp8 =
        "{\"hidden_size\": 2048, \"moe_intermediate_size\": 768, \"num_experts\": 128,"
        " \"num_experts_per_tok\": 8, \"quantization_config\": {\"activation_scheme\": \"dynamic\","
        " \"fmt\": \"e4m3\", \"quant_method\": \"fp8\", \"weight_block_size\": [128, 64]}}";
    krn_shape_t s;
    char err[256] = "";
    assert_int_equal(cli_model_config_parse(qwen_fp8, strlen(qwen_fp8), 1, 1, NULL, &s, err, sizeof err), MT_OK);
    assert_string_equal(s.dtype, "fp8_w8a8");
    assert_int_equal(s.block_n, 128);
    assert_int_equal(s.block_k, 64);
    assert_int_equal(cli_model_config_parse(qwen_fp8, strlen(qwen_fp8), 1, 1, "fp8_w8a8", &s, err, sizeof err), MT_OK);
    assert_int_equal(s.block_n, 128);
    assert_int_equal(s.block_k, 64);
    assert_int_equal(cli_model_config_parse(qwen_fp8, strlen(qwen_fp8), 1, 1, "bf16", &s, err, sizeof err), MT_OK);
    assert_string_equal(s.dtype, "bf16");
    assert_int_equal(s.block_n, 0);
    static const char *per_tensor =
        "{\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_local_experts\": 8,"
        " \"num_experts_per_tok\": 2, \"quantization_config\": {\"quant_method\": \"fp8\"}}";
    assert_int_equal(cli_model_config_parse(per_tensor, strlen(per_tensor), 1, 1, NULL, &s, err, sizeof err), MT_OK);
    assert_string_equal(s.dtype, "fp8_w8a8");
    assert_int_equal(s.block_n, 0);
    static const char *const bad[] = {"[128]", "[128, \"128\"]", "[0, 128]", "128", "[128, 128, 1]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"hidden_size\": 2048, \"moe_intermediate_size\": 768, \"num_experts\": 128,"
                 " \"num_experts_per_tok\": 8, \"quantization_config\": {\"quant_method\": \"fp8\","
                 " \"weight_block_size\": %s}}",
                 bad[i]);
        err[0] = '\0';
        assert_int_equal(cli_model_config_parse(text, strlen(text), 1, 1, NULL, &s, err, sizeof err), MT_INVAL);
        assert_non_null(strstr(err, "weight_block_size"));
    }
}

/* Qwen3.5's published configs nest the MoE fields under text_config, beside a vision_config
 * with a hidden_size of its own: the text tower's numbers are the shape. */
static void test_hf_qwen35_files(void **state) {
    static const struct {
        const char *dir;
        uint32_t tp, e, n, k;
    } cases[] = {
        {"qwen3.5-122b-a10b", 4, 256, 256, 3072},
        {"qwen3.5-122b-a10b", 1, 256, 1024, 3072},
        {"qwen3.5-35b-a3b", 2, 256, 256, 2048},
        {"qwen3.5-35b-a3b", 8, 256, 64, 2048},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512], err[300] = "";
        krn_shape_t s, p;
        snprintf(path, sizeof path, "%s/tests/fixtures/models/%s/config.json", MT_SOURCE_DIR, cases[i].dir);
        int rc = cli_model_config_load(path, cases[i].tp, 1, NULL, &s, err, sizeof err);
        if (rc != MT_OK) fail_msg("%s: %s", path, err);
        assert_int_equal(s.e, cases[i].e);
        assert_int_equal(s.n, cases[i].n);
        assert_int_equal(s.k, cases[i].k);
        assert_int_equal(s.topk, 8);
        assert_string_equal(s.dtype, "bf16");
        /* the preset of the same name gives the same shape */
        assert_int_equal(cli_preset_shape(cases[i].dir, cases[i].tp, 1, NULL, &p, err, sizeof err), MT_OK);
        assert_memory_equal(&s, &p, sizeof s);
    }
}

/* A quant_method moetune has no kernel for (AWQ, GPTQ, mxfp4, ...) is refused in one line naming
 * it, not tuned as bf16; --dtype says what to tune instead. */
static void test_hf_quant_refused(void **state) {
    static const char *const methods[] = {"awq", "gptq", "mxfp4", "compressed-tensors", "bitsandbytes"};
    krn_shape_t s;
    char err[300];
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"model_type\": \"qwen3_5_moe\", \"quantization_config\": {\"quant_method\": \"%s\","
                 " \"bits\": 4}, \"text_config\": {\"hidden_size\": 3072, \"moe_intermediate_size\": 1024,"
                 " \"num_experts\": 256, \"num_experts_per_tok\": 8}}",
                 methods[i]);
        err[0] = '\0';
        assert_int_equal(cli_model_config_parse(text, strlen(text), 4, 1, NULL, &s, err, sizeof err), MT_INVAL);
        if (!strstr(err, methods[i]) || !strstr(err, "--dtype") || strchr(err, '\n')) fail_msg("%s: %s", methods[i], err);
        /* told what to tune, it tunes that */
        assert_int_equal(cli_model_config_parse(text, strlen(text), 4, 1, "bf16", &s, err, sizeof err), MT_OK);
        assert_string_equal(s.dtype, "bf16");
        assert_int_equal(s.n, 256);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/models/qwen3.5-122b-a10b-awq/config.json", MT_SOURCE_DIR);
    assert_int_equal(cli_model_config_load(path, 4, 1, NULL, &s, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "quant_method awq"));
    assert_non_null(strstr(err, path));
}

static void test_hf_errors(void **state) {
    krn_shape_t s;
    char err[256] = "";
    const char *no_experts = "{\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_experts_per_tok\": 2}";
    assert_int_equal(cli_model_config_parse(no_experts, strlen(no_experts), 1, 1, NULL, &s, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "no experts"));
    const char *bad = "{\"hidden_size\": \"big\", \"intermediate_size\": 14336, \"num_local_experts\": 8,"
                      " \"num_experts_per_tok\": 2}";
    assert_int_equal(cli_model_config_parse(bad, strlen(bad), 1, 1, NULL, &s, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "hidden_size"));
    assert_int_equal(cli_model_config_parse("{oops", 5, 1, 1, NULL, &s, err, sizeof err), MT_INVAL);
    const char *mix = "{\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_local_experts\": 8,"
                      " \"num_experts_per_tok\": 2}";
    assert_int_equal(cli_model_config_parse(mix, strlen(mix), 3, 1, NULL, &s, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "not divisible by TP 3"));
    assert_int_equal(cli_model_config_load("/nonexistent/config.json", 1, 1, NULL, &s, err, sizeof err), MT_IO);
}

/* A FIFO (or any file that is not regular) is refused at once: reading one would block
 * until a writer comes. SIGALRM ends the test if the load blocks. */
static void test_not_regular(void **state) {
    char dir[] = "/tmp/mt-presets-XXXXXX", fifo[64], err[300];
    krn_shape_t s;
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/config.json", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(5);
    int rc = cli_model_config_load(fifo, 1, 1, NULL, &s, err, sizeof err);
    alarm(0);
    unlink(fifo);
    rmdir(dir);
    assert_int_equal(rc, MT_INVAL);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(cli_model_config_load("/dev/zero", 1, 1, NULL, &s, err, sizeof err), MT_INVAL);
    assert_int_equal(cli_model_config_load("/tmp", 1, 1, NULL, &s, err, sizeof err), MT_INVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_tp), cmocka_unit_test(test_presets_dtype), cmocka_unit_test(test_presets_ep),
        cmocka_unit_test(test_errors),     cmocka_unit_test(test_hf_families),   cmocka_unit_test(test_hf_fp8),
        cmocka_unit_test(test_hf_errors),  cmocka_unit_test(test_not_regular),   cmocka_unit_test(test_hf_qwen35_files),
        cmocka_unit_test(test_hf_quant_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
