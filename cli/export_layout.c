/* export_layout.c - how the engines name and read config files (see export_layout.h), and
 * the near-tie margin (export.h) that the export and the ship guard both use. */
#include "export_layout.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engines.h"
#include "export.h"
#include "query.h"

mt_status_t exp_engine_parse(const char *name, exp_engine_t *engine) {
    const krn_engine_t *e = krn_engine_find(name);
    if (!e) return MT_INVAL;
    *engine = e->id == KRN_ENGINE_SGLANG ? EXP_ENGINE_SGLANG : EXP_ENGINE_VLLM;
    return MT_OK;
}

const char *exp_engine_name(exp_engine_t e) {
    return e == EXP_ENGINE_SGLANG ? krn_engine_get(KRN_ENGINE_SGLANG)->name
           : e == EXP_ENGINE_VLLM ? krn_engine_get(KRN_ENGINE_VLLM)->name
                                  : "";
}

/* vLLM writes any device whose name has the token H200 as NVIDIA_H200. */
static bool has_token(const char *s, const char *tok) {
    size_t n = strlen(tok);
    for (const char *p = s; (p = strstr(p, tok)) != NULL; p += n) {
        bool start = p == s || p[-1] == ' ' || p[-1] == '_';
        bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '_';
        if (start && end) return true;
    }
    return false;
}

void exp_engine_file_name(exp_engine_t engine, const char *device_name, const krn_shape_t *sh, char *buf, size_t len) {
    char dev[sizeof((dbq_result_t *)0)->device_name];
    if (engine == EXP_ENGINE_VLLM && has_token(device_name, "H200"))
        snprintf(dev, sizeof dev, "NVIDIA_H200");
    else
        snprintf(dev, sizeof dev, "%s", device_name);
    for (char *p = dev; *p; p++) {
        if (*p == ' ' || *p == '/' || *p == '\\') *p = '_';
    }
    int n = snprintf(buf, len, "E=%u,N=%u,device_name=%s", sh->e, sh->n, dev);
    if (n > 0 && (size_t)n < len && strcmp(sh->dtype, "bf16") != 0)
        n += snprintf(buf + n, len - (size_t)n, ",dtype=%s", sh->dtype);
    if (n > 0 && (size_t)n < len && sh->block_n)
        n += snprintf(buf + n, len - (size_t)n,
                      engine == EXP_ENGINE_VLLM ? ",block_shape=[%u,%u]" : ",block_shape=[%u, %u]", sh->block_n,
                      sh->block_k);
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ".json");
}

json_t *exp_config_json(const krn_config_t *c) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < KRN_N_FIELDS; i++)
        json_object_set_new(o, krn_config_fields[i].file, json_integer(KRN_CONFIG_GET(c, i)));
    return o;
}

void exp_version_of(const char *versions, const char *key, char *buf, size_t len) {
    size_t n = strlen(key);
    buf[0] = '\0';
    for (const char *p = versions; p && *p;) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ' ');
        size_t tl = end ? (size_t)(end - p) : strlen(p);
        if (tl > n && strncmp(p, key, n) == 0 && p[n] == '=') {
            snprintf(buf, len, "%.*s", (int)(tl - n - 1), p + n + 1);
            return;
        }
        p = end;
    }
}

double exp_margin_sd(double best_us, double best_sd, double ru_us, double ru_sd) {
    double gap = ru_us - best_us;
    double sd = sqrt(best_sd * best_sd + ru_sd * ru_sd);
    if (gap == 0) return 0.0;
    return sd > 0 ? gap / sd : INFINITY;
}
