/* presets.c - model presets (values from each model's published config.json) and Hugging Face config parsing. */
#include "presets.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "mt.h"

const cli_preset_t cli_presets[] = {
    {"mixtral-8x7b", NULL, 8, 2, 4096, 14336, NULL, 0, 0},
    {"mixtral-8x22b", NULL, 8, 2, 6144, 16384, NULL, 0, 0},
    /* DeepSeek-V3/R1 and Kimi-K2 ship only fp8 e4m3 weights with 128x128 block scales. */
    {"deepseek-v3", "deepseek-r1", 256, 8, 7168, 2048, "fp8_w8a8", 128, 128},
    {"kimi-k2", NULL, 384, 8, 7168, 2048, "fp8_w8a8", 128, 128},
    {"qwen3-30b-a3b", NULL, 128, 8, 2048, 768, NULL, 0, 0},
    {"qwen3-235b-a22b", NULL, 128, 8, 4096, 1536, NULL, 0, 0},
    /* Qwen's -FP8 checkpoints of the same models: 128x128 weight blocks. */
    {"qwen3-30b-a3b-fp8", NULL, 128, 8, 2048, 768, "fp8_w8a8", 128, 128},
    {"qwen3-235b-a22b-fp8", NULL, 128, 8, 4096, 1536, "fp8_w8a8", 128, 128},
    {"qwen3-next-80b-a3b", NULL, 512, 10, 2048, 512, NULL, 0, 0},
    {"qwen3.5-397b-a17b", NULL, 512, 10, 4096, 1024, NULL, 0, 0},
    /* The routed experts only; the shared expert is a separate dense MLP that the engines do not fuse. */
    {"qwen3.5-122b-a10b", NULL, 256, 8, 3072, 1024, NULL, 0, 0},
    {"qwen3.5-35b-a3b", NULL, 256, 8, 2048, 512, NULL, 0, 0},
    {"gpt-oss-20b", NULL, 32, 4, 2880, 2880, NULL, 0, 0},
    {"gpt-oss-120b", NULL, 128, 4, 2880, 2880, NULL, 0, 0},
};
const size_t cli_n_presets = sizeof cli_presets / sizeof cli_presets[0];

const cli_preset_t *cli_preset_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < cli_n_presets; i++) {
        if (strcasecmp(name, cli_presets[i].name) == 0) return &cli_presets[i];
        if (cli_presets[i].alias && strcasecmp(name, cli_presets[i].alias) == 0) return &cli_presets[i];
    }
    return NULL;
}

mt_status_t cli_preset_dims_shape(const char *what, uint32_t experts, uint32_t topk, uint32_t hidden,
                                  uint32_t moe_intermediate, uint32_t tp, uint32_t ep, const char *dtype,
                                  krn_shape_t *shape, char *err, size_t errlen) {
    if (tp == 0 || ep == 0) {
        mt_fmt(err, errlen, "%s: --tp and --ep must be at least 1", what);
        return MT_INVAL;
    }
    if (moe_intermediate % tp != 0) {
        mt_fmt(err, errlen, "%s: moe intermediate size %u is not divisible by TP %u", what, moe_intermediate, tp);
        return MT_INVAL;
    }
    if (experts % ep != 0) {
        mt_fmt(err, errlen, "%s: %u experts are not divisible by EP %u", what, experts, ep);
        return MT_INVAL;
    }
    memset(shape, 0, sizeof *shape);
    shape->e = experts / ep;
    shape->n = moe_intermediate / tp;
    shape->k = hidden;
    shape->topk = topk;
    snprintf(shape->dtype, sizeof shape->dtype, "%s", dtype ? dtype : "bf16");
    char why[200];
    if (krn_shape_check(shape, why, sizeof why) != MT_OK) {
        mt_fmt(err, errlen, "%s at TP %u, EP %u: %s", what, tp, ep, why);
        return MT_INVAL;
    }
    return MT_OK;
}

mt_status_t cli_preset_shape(const char *name, uint32_t tp, uint32_t ep, const char *dtype, krn_shape_t *shape,
                             char *err, size_t errlen) {
    const cli_preset_t *p = cli_preset_find(name);
    if (!p) {
        char list[512] = "";
        size_t used = 0;
        for (size_t i = 0; i < cli_n_presets && used < sizeof list; i++) {
            int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", cli_presets[i].name);
            if (n < 0) break;
            used += (size_t)n;
        }
        mt_fmt(err, errlen, "unknown model '%s' (known: %s)", name ? name : "", list);
        return MT_NOTFOUND;
    }
    if (!dtype) dtype = p->dtype ? p->dtype : "bf16";
    int rc = cli_preset_dims_shape(p->name, p->experts, p->topk, p->hidden, p->moe_intermediate, tp, ep, dtype, shape,
                                   err, errlen);
    if (rc == MT_OK && strcmp(shape->dtype, "fp8_w8a8") == 0) {
        shape->block_n = p->fp8_block_n;
        shape->block_k = p->fp8_block_k;
    }
    return rc;
}

/* Finds the first of names at the top level, then under text_config. */
static json_t *find_field(json_t *root, const char *const *names) {
    json_t *scopes[2] = {root, json_object_get(root, "text_config")};
    for (size_t s = 0; s < 2; s++) {
        if (!json_is_object(scopes[s])) continue;
        for (size_t i = 0; names[i]; i++) {
            json_t *v = json_object_get(scopes[s], names[i]);
            if (v && !json_is_null(v)) return v;
        }
    }
    return NULL;
}

static const char *const k_experts[] = {"num_local_experts", "n_routed_experts", "num_experts", NULL};
static const char *const k_topk[] = {"num_experts_per_tok", "experts_per_token", NULL};
static const char *const k_inter[] = {"moe_intermediate_size", "intermediate_size", NULL};
static const char *const k_hidden[] = {"hidden_size", NULL};
static const char *const k_quant[] = {"quantization_config", NULL};

mt_status_t cli_model_config_parse(const char *text, size_t len, uint32_t tp, uint32_t ep, const char *dtype,
                                   krn_shape_t *shape, char *err, size_t errlen) {
    int rc = MT_OK;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        mt_fmt(err, errlen, "model config is not a JSON object%s%s", root ? "" : ": ", root ? "" : jerr.text);
        rc = MT_INVAL;
        goto out;
    }
    static const struct {
        const char *what;
        const char *const *names;
    } need[] = {
        {"experts (num_local_experts, n_routed_experts or num_experts)", k_experts},
        {"experts per token (num_experts_per_tok or experts_per_token)", k_topk},
        {"intermediate size (moe_intermediate_size or intermediate_size)", k_inter},
        {"hidden_size", k_hidden},
    };
    uint32_t vals[4];
    for (size_t i = 0; i < 4; i++) {
        json_t *v = find_field(root, need[i].names);
        if (!v) {
            mt_fmt(err, errlen, "model config has no %s", need[i].what);
            rc = MT_INVAL;
            goto out;
        }
        if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > KRN_MAX_NK) {
            mt_fmt(err, errlen, "model config: %s is not a positive integer", need[i].what);
            rc = MT_INVAL;
            goto out;
        }
        vals[i] = (uint32_t)json_integer_value(v);
    }
    char qdtype[16] = "bf16";
    uint32_t bn = 0, bk = 0;
    json_t *q = find_field(root, k_quant);
    const char *method = json_is_object(q) ? json_string_value(json_object_get(q, "quant_method")) : NULL;
    /* Weights moetune has no kernel for (AWQ, GPTQ, mxfp4, ...) would be tuned as bf16 and the
     * files named for a layer the engine never runs: refused unless --dtype says what to tune. */
    if (method && strcmp(method, "fp8") != 0 && !dtype) {
        mt_fmt(err, errlen,
               "model config: quantization_config.quant_method %s is not one moetune tunes (bf16, fp8); give "
               "--dtype bf16 or --dtype fp8_w8a8 to tune that layer instead",
               method);
        rc = MT_INVAL;
        goto out;
    }
    if (method && strcmp(method, "fp8") == 0) {
        snprintf(qdtype, sizeof qdtype, "fp8_w8a8");
        json_t *wbs = json_object_get(q, "weight_block_size");
        if (wbs && !json_is_null(wbs)) {
            json_t *a = json_array_get(wbs, 0), *b = json_array_get(wbs, 1);
            if (!json_is_array(wbs) || json_array_size(wbs) != 2 || !json_is_integer(a) || !json_is_integer(b) ||
                json_integer_value(a) <= 0 || json_integer_value(b) <= 0 ||
                json_integer_value(a) > KRN_MAX_BLOCK_SCALE || json_integer_value(b) > KRN_MAX_BLOCK_SCALE) {
                mt_fmt(err, errlen,
                       "model config: quantization_config.weight_block_size is not [n, k] "
                       "(two positive integers)");
                rc = MT_INVAL;
                goto out;
            }
            bn = (uint32_t)json_integer_value(a);
            bk = (uint32_t)json_integer_value(b);
        }
    }
    rc = cli_preset_dims_shape("model config", vals[0], vals[1], vals[3], vals[2], tp, ep, dtype ? dtype : qdtype,
                               shape, err, errlen);
    /* The weights' block scales hold whatever dtype is asked of fp8. */
    if (rc == MT_OK && strcmp(shape->dtype, "fp8_w8a8") == 0) {
        shape->block_n = bn;
        shape->block_k = bk;
    }
out:
    json_decref(root);
    return rc;
}

mt_status_t cli_model_config_load(const char *path, uint32_t tp, uint32_t ep, const char *dtype, krn_shape_t *shape,
                                  char *err, size_t errlen) {
    enum { MAX_CONFIG = (1 << 16) - 1 };
    char *buf = NULL;
    size_t len = 0;
    /* mt_read_regular: without blocking, regular files only (a FIFO or device would block,
     * or never end, where a config.json is expected) */
    int rc = mt_read_regular(path, MAX_CONFIG, &buf, &len, err, errlen);
    if (rc == MT_INVAL && strstr(err, "larger than"))
        mt_fmt(err, errlen, "%s: larger than %d bytes, not a model config", path, MAX_CONFIG);
    if (rc != MT_OK) return rc == MT_NOTFOUND ? MT_IO : rc;
    rc = cli_model_config_parse(buf, len, tp, ep, dtype, shape, err, errlen);
    if (rc != MT_OK) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", err);
        mt_fmt(err, errlen, "%s: %s", path, inner);
    }
    free(buf);
    return rc;
}
