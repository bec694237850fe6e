/* spec.c - flags / JSON → Moetune__SweepSpec, table-driven (see spec.h). */
#define _DEFAULT_SOURCE
#include "spec.h"

#include <errno.h>
#include <stdio.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "engines.h"
#include "shipguard.h"
#include "mt.h"
#include "planner.h"
#include "presets.h"
#include "routing.h"

#define MAX_MODELS 16

struct cli_spec {
    Moetune__SweepSpec spec;
    Moetune__Space space;
    Moetune__Measure measure;
    bool measure_set;
    krn_shape_t shapes[CLI_SPEC_MAX_SHAPES];
    size_t n_shapes;
    Moetune__Shape pb_shapes[CLI_SPEC_MAX_SHAPES];
    Moetune__Shape *pb_ptrs[CLI_SPEC_MAX_SHAPES];
    char *models[MAX_MODELS];
    size_t n_models;
    char *model_cfgs[MAX_MODELS];
    size_t n_model_cfgs;
    uint32_t tp, ep;
    bool tp_set, ep_set;
    char dtype[16];
    uint32_t batch[CLI_SPEC_MAX_BATCH];
    size_t n_batch;
    uint32_t space_vals[KRN_N_FIELDS][KRN_MAX_VALUES];
    size_t n_space[KRN_N_FIELDS];
    Moetune__Config cfgs[KRN_MAX_LIST]; /* --configs: exactly these (Space.configs) */
    Moetune__Config *cfg_ptrs[KRN_MAX_LIST];
    size_t n_cfgs;
    uint32_t sample; /* --sample: Space.sample */
    char name[128], strategy[32], device_filter[128], backend[16];
    char engine_names[2][8];
    char routing[4096]; /* --routing as given; the resolved path goes into the spec */
    char routing_abs[4096];
    char *engines[2];
    size_t n_engines;
    cli_guard_t *guard; /* --baseline files and folders, or the engine's (shipguard.h) */
    bool baseline;      /* --baseline given */
    bool no_guard;      /* --guard off */
    int depth;          /* nesting of spec files, to refuse a file that includes itself */
    bool finished;
};

typedef mt_status_t (*setter_fn)(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                                 size_t errlen);

typedef struct {
    cli_spec_opt_t o;
    setter_fn fn;
    intptr_t arg; /* which field: an offset or an index, depending on fn */
} opt_def_t;

static mt_status_t set_shape(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                             size_t errlen) {
    if (s->n_shapes == CLI_SPEC_MAX_SHAPES) {
        mt_fmt(err, errlen, "--%s: more than %d shapes", opt, CLI_SPEC_MAX_SHAPES);
        return MT_INVAL;
    }
    char why[200];
    if (krn_shape_parse(val, &s->shapes[s->n_shapes], why, sizeof why) != MT_OK) {
        mt_fmt(err, errlen, "--%s %s: %s", opt, val, why);
        return MT_INVAL;
    }
    s->n_shapes++;
    return MT_OK;
}

static int add_str(char **arr, size_t *n, const char *opt, const char *val, char *err, size_t errlen) {
    if (*n == MAX_MODELS) {
        mt_fmt(err, errlen, "--%s: given more than %d times", opt, MAX_MODELS);
        return MT_INVAL;
    }
    if (!*val) {
        mt_fmt(err, errlen, "--%s: empty value", opt);
        return MT_INVAL;
    }
    arr[*n] = mt_strdup(val);
    if (!arr[*n]) return MT_NOMEM;
    (*n)++;
    return MT_OK;
}

static mt_status_t set_model(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                             size_t errlen) {
    if (!cli_preset_find(val)) {
        krn_shape_t tmp;
        cli_preset_shape(val, 1, 1, NULL, &tmp, err, errlen);
        return MT_INVAL;
    }
    return add_str(s->models, &s->n_models, opt, val, err, errlen);
}

static mt_status_t set_model_cfg(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                                 size_t errlen) {
    return add_str(s->model_cfgs, &s->n_model_cfgs, opt, val, err, errlen);
}

static mt_status_t set_par(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err, size_t errlen) {
    uint32_t v;
    if (mt_parse_u32(val, 1, 1 << 20, &v) != MT_OK) {
        mt_fmt(err, errlen, "--%s %s: not a positive integer", opt, val);
        return MT_INVAL;
    }
    if (arg == (const void *)0) {
        s->tp = v;
        s->tp_set = true;
    } else {
        s->ep = v;
        s->ep_set = true;
    }
    return MT_OK;
}

static mt_status_t set_dtype(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                             size_t errlen) {
    if (strcmp(val, "bf16") != 0 && strcmp(val, "fp8_w8a8") != 0) {
        mt_fmt(err, errlen, "--%s %s: not one of bf16, fp8_w8a8", opt, val);
        return MT_INVAL;
    }
    snprintf(s->dtype, sizeof s->dtype, "%s", val);
    return MT_OK;
}

static int parse_list(const char *opt, const char *val, uint32_t max, size_t max_n, uint32_t *dst, size_t *n_dst,
                      char *err, size_t errlen) {
    uint32_t *vals = NULL;
    size_t n = 0;
    char why[160];
    int rc = mt_parse_u32_list(val, 1, max, &vals, &n, why, sizeof why);
    if (rc == MT_NOMEM) return rc;
    if (rc != MT_OK) {
        mt_fmt(err, errlen, "--%s %s: %s", opt, val, why);
        return MT_INVAL;
    }
    if (n > max_n) {
        mt_fmt(err, errlen, "--%s: more than %zu values", opt, max_n);
        free(vals);
        return MT_INVAL;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (vals[i] == vals[j]) {
                mt_fmt(err, errlen, "--%s: %u appears twice", opt, vals[i]);
                free(vals);
                return MT_INVAL;
            }
        }
    }
    memcpy(dst, vals, n * sizeof *vals);
    *n_dst = n;
    free(vals);
    return MT_OK;
}

static mt_status_t set_batch(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                             size_t errlen) {
    return parse_list(opt, val, PLAN_MAX_BATCH, CLI_SPEC_MAX_BATCH, s->batch, &s->n_batch, err, errlen);
}

static mt_status_t set_space(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                             size_t errlen) {
    intptr_t i = (intptr_t)arg;
    return parse_list(opt, val, krn_config_fields[i].max, KRN_MAX_VALUES, s->space_vals[i], &s->n_space[i], err,
                      errlen);
}

/* --baseline FILE|DIR: kept for cli_guard_resolve at finish; repeatable. */
static mt_status_t set_baseline(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                                size_t errlen) {
    (void)arg, (void)opt;
    if (!s->guard && !(s->guard = cli_guard_new())) return MT_NOMEM;
    s->baseline = true;
    return cli_guard_add_baseline(s->guard, val, err, errlen);
}

/* --guard on|off. */
static mt_status_t set_guard(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                             size_t errlen) {
    (void)arg;
    if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
        mt_fmt(err, errlen, "--%s %s: on or off", opt, val);
        return MT_INVAL;
    }
    s->no_guard = strcmp(val, "off") == 0;
    return MT_OK;
}

/* --configs 64x128x64x16x4x4,...: appends each config; repeatable. */
static mt_status_t set_configs(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                               size_t errlen) {
    const char *p = val;
    do {
        size_t len = strcspn(p, ",");
        char one[KRN_CONFIG_TEXT_LEN];
        krn_config_t c;
        if (len == 0 || len >= sizeof one) {
            mt_fmt(err, errlen, "--%s %s: an empty or overlong config", opt, val);
            return MT_INVAL;
        }
        memcpy(one, p, len);
        one[len] = '\0';
        if (krn_config_parse(one, &c) != MT_OK) {
            mt_fmt(err, errlen,
                   "--%s: %s is not BLOCK_SIZE_MxNxKxGROUP_SIZE_Mxnum_warpsxnum_stages (e.g. 64x128x64x16x4x4)", opt,
                   one);
            return MT_INVAL;
        }
        if (s->n_cfgs == KRN_MAX_LIST) {
            mt_fmt(err, errlen, "--%s: more than %d configs", opt, KRN_MAX_LIST);
            return MT_INVAL;
        }
        moetune__config__init(&s->cfgs[s->n_cfgs]);
        wire_config_to_msg(&c, &s->cfgs[s->n_cfgs]);
        s->n_cfgs++;
        p += len;
    } while (*p++ == ',');
    return MT_OK;
}

static mt_status_t set_text(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                            size_t errlen) {
    size_t off = (size_t)(intptr_t)arg;
    char *dst = (char *)s + off;
    size_t cap = off == offsetof(cli_spec_t, strategy) ? sizeof s->strategy : sizeof s->name;
    if (strlen(val) >= cap) {
        mt_fmt(err, errlen, "--%s: longer than %zu characters", opt, cap - 1);
        return MT_INVAL;
    }
    for (const char *p = val; *p; p++) {
        if ((unsigned char)*p < 0x20) {
            mt_fmt(err, errlen, "--%s: control characters are not allowed", opt);
            return MT_INVAL;
        }
    }
    if (off == offsetof(cli_spec_t, strategy) && strcmp(val, "exhaustive") != 0 && strcmp(val, "halving") != 0) {
        mt_fmt(err, errlen, "--%s %s: unknown strategy (known: exhaustive, halving)", opt, val);
        return MT_INVAL;
    }
    snprintf(dst, cap, "%s", val);
    return MT_OK;
}

/* "sglang", "vllm" or both, comma-separated, each once. */
static mt_status_t set_engines(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                               size_t errlen) {
    size_t n = 0;
    const char *p = val;
    while (*p) {
        size_t len = strcspn(p, ",");
        char one[8] = "";
        if (len == 0 || len >= sizeof one || n == 2) goto bad;
        memcpy(one, p, len);
        if (!krn_engine_find(one)) goto bad;
        if (n == 1 && strcmp(one, s->engine_names[0]) == 0) goto bad;
        snprintf(s->engine_names[n++], sizeof s->engine_names[0], "%s", one);
        p += len;
        if (*p == ',' && !*++p) goto bad;
    }
    if (n == 0) goto bad;
    s->n_engines = n;
    return MT_OK;
bad:
    mt_fmt(err, errlen, "--%s %s: not " KRN_ENGINE_NAMES " or " KRN_ENGINE_ALL, opt, val);
    return MT_INVAL;
}

static mt_status_t set_routing(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                               size_t errlen) {
    if (!*val || strlen(val) >= sizeof s->routing) {
        mt_fmt(err, errlen, "--%s: empty or longer than %zu characters", opt, sizeof s->routing - 1);
        return MT_INVAL;
    }
    snprintf(s->routing, sizeof s->routing, "%s", val);
    return MT_OK;
}

/* Reads --routing's file and gives every shape its hash: a .npy must fit each shape (topk,
 * ids below E); any other file is a PyTorch capture that the triton helper reads and checks. */
static int resolve_routing(cli_spec_t *s, char *err, size_t errlen) {
    char why[600], sha[65] = "";
    uint32_t tokens = 0;
    if (!realpath(s->routing, s->routing_abs)) {
        mt_fmt(err, errlen, "--routing %s: %s", s->routing, strerror(errno));
        return MT_INVAL;
    }
    FILE *f = NULL;
    if (mt_fopen_regular(s->routing_abs, &f, why, sizeof why) != MT_OK) {
        mt_fmt(err, errlen, "--routing %s", why);
        return MT_INVAL;
    }
    char magic[6] = "";
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == 6 && memcmp(magic, "\x93NUMPY", 6) == 0) {
        krn_routing_t r;
        if (krn_routing_load(s->routing_abs, &r, why, sizeof why) != MT_OK) {
            mt_fmt(err, errlen, "--routing %s", why);
            return MT_INVAL;
        }
        for (size_t i = 0; i < s->n_shapes; i++) {
            char one[200];
            if (krn_routing_check(&r, s->shapes[i].e, s->shapes[i].topk, one, sizeof one) != MT_OK) {
                mt_fmt(err, errlen, "--routing %s does not fit shape E=%u,topk=%u: %s", s->routing, s->shapes[i].e,
                       s->shapes[i].topk, one);
                krn_routing_clear(&r);
                return MT_INVAL;
            }
        }
        snprintf(sha, sizeof sha, "%s", r.sha256);
        tokens = r.tokens;
        krn_routing_clear(&r);
    } else if (krn_routing_file_sha256(s->routing_abs, sha, why, sizeof why) != MT_OK) {
        mt_fmt(err, errlen, "--routing %s", why);
        return MT_INVAL;
    }
    for (size_t i = 0; i < s->n_shapes; i++) snprintf(s->shapes[i].routing, sizeof s->shapes[i].routing, "%s", sha);
    s->spec.routing_tokens = tokens;
    return MT_OK;
}

/* Unsigned fields of the spec and its Measure: arg = offset into cli_spec_t. */
typedef struct {
    size_t off;
    uint32_t min, max;
    bool measure;
} u32_field_t;
static const u32_field_t k_u32_fields[] = {
    {offsetof(cli_spec_t, spec.chunk), 1, 100000, false},
    {offsetof(cli_spec_t, spec.max_attempts), 1, 1000, false},
    /* 0 cannot be sent: on the wire a zero is "the default" (5), so it is refused here. */
    {offsetof(cli_spec_t, measure.warmup), 1, 100000, true},
    {offsetof(cli_spec_t, measure.min_samples), 1, 1000000, true},
    {offsetof(cli_spec_t, measure.max_samples), 1, 1000000, true},
    {offsetof(cli_spec_t, measure.budget_ms), 1, 3600000, true},
    {offsetof(cli_spec_t, measure.timeout_ms), 1, 86400000, true},
    {offsetof(cli_spec_t, sample), 1, PLAN_MAX_CONFIGS, false},
};

static mt_status_t set_u32(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err, size_t errlen) {
    const u32_field_t *f = &k_u32_fields[(intptr_t)arg];
    uint32_t v;
    if (mt_parse_u32(val, f->min, f->max, &v) != MT_OK) {
        mt_fmt(err, errlen, "--%s %s: not an integer in %u..%u", opt, val, f->min, f->max);
        return MT_INVAL;
    }
    *(uint32_t *)((char *)s + f->off) = v;
    if (f->measure) s->measure_set = true;
    return MT_OK;
}

/* The fractions of the Measure: arg = index. rsd_target lies above 0 and below 1; a margin
 * from 0 to below max, where 0 turns its step off, stored as -1, since 0 in the spec means
 * "the default". */
typedef struct {
    size_t off;
    double max;
    bool zero_off;
} frac_field_t;
static const frac_field_t k_frac_fields[] = {
    {offsetof(cli_spec_t, measure.rsd_target), 1.0, false},
    {offsetof(cli_spec_t, measure.race_margin), 10.0, true},
    {offsetof(cli_spec_t, measure.decide_margin), 1.0, true},
};

static mt_status_t set_fraction(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                                size_t errlen) {
    const frac_field_t *f = &k_frac_fields[(intptr_t)arg];
    double v;
    bool ok = mt_parse_double(val, &v) == MT_OK && v < f->max && (f->zero_off ? v >= 0.0 : v > 0.0);
    if (!ok && f->zero_off)
        mt_fmt(err, errlen, "--%s %s: not a fraction from 0 (off) to below %g (0.2 = 20%%)", opt, val, f->max);
    else if (!ok)
        mt_fmt(err, errlen, "--%s %s: not a fraction between 0 and 1 (0.01 = 1%%)", opt, val);
    if (!ok) return MT_INVAL;
    *(double *)((char *)s + f->off) = v > 0 ? v : -1.0;
    s->measure_set = true;
    return MT_OK;
}

static mt_status_t set_seed(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                            size_t errlen) {
    uint64_t v;
    /* As for warmup: a zero seed would silently be the default seed 1. */
    if (mt_parse_u64(val, &v) != MT_OK || v == 0) {
        mt_fmt(err, errlen, "--%s %s: not a positive integer (the default is 1)", opt, val);
        return MT_INVAL;
    }
    s->measure.seed = v;
    s->measure_set = true;
    return MT_OK;
}

static mt_status_t set_round_process(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                                     size_t errlen) {
    if (strcmp(val, "same") != 0 && strcmp(val, "new") != 0) {
        mt_fmt(err, errlen, "--%s %s: not same or new", opt, val);
        return MT_INVAL;
    }
    s->measure.fresh_rounds = strcmp(val, "new") == 0 ? 1 : -1;
    s->measure_set = true;
    return MT_OK;
}

static mt_status_t set_specfile(cli_spec_t *s, const void *arg, const char *opt, const char *val, char *err,
                                size_t errlen) {
    return cli_spec_load_json(s, val, err, errlen);
}

#define ARG(x) ((intptr_t)(x))
static const opt_def_t k_opts[] = {
    {{"shape", "E=..,N=..,K=..,topk=..[,dtype=..][,block_shape=NxK]", "a shape to tune (repeatable)"}, set_shape, 0},
    {{"model", "NAME", "a model preset (repeatable); see --tp/--ep"}, set_model, 0},
    {{"model-config", "config.json", "a Hugging Face config.json (repeatable)"}, set_model_cfg, 0},
    {{"tp", "N", "tensor parallel size for --model/--model-config (N = intermediate / TP; default 1)"}, set_par, 0},
    {{"ep", "N", "expert parallel size for --model/--model-config (E = experts / EP; default 1)"}, set_par, 1},
    {{"dtype", "bf16|fp8_w8a8",
      "dtype of --model/--model-config shapes (default: what the checkpoint ships, e.g. deepseek-v3 fp8_w8a8 with "
      "128x128 blocks; fp8_w8a8 keeps its blocks, else per-tensor scales)"},
     set_dtype,
     0},
    {{"batch-sizes", "1,2,4,..", "batch sizes (default the engines' 18: 1 .. 4096)"}, set_batch, 0},
    {{"block-m", "LIST", "BLOCK_SIZE_M values (default 16,32,64,128,256)"}, set_space, KRN_F_block_m},
    {{"block-n", "LIST", "BLOCK_SIZE_N values (default 32,64,128,256)"}, set_space, KRN_F_block_n},
    {{"block-k", "LIST", "BLOCK_SIZE_K values (default 64,128,256)"}, set_space, KRN_F_block_k},
    {{"group-m", "LIST", "GROUP_SIZE_M values (default 1,16,32,64)"}, set_space, KRN_F_group_m},
    {{"num-warps", "LIST", "num_warps values (default 4,8)"}, set_space, KRN_F_num_warps},
    {{"num-stages", "LIST", "num_stages values (default 2,3,4,5)"}, set_space, KRN_F_num_stages},
    {{"configs", "CFG,..",
      "exactly these configs (BLOCK_SIZE_MxNxKxGROUP_SIZE_Mxnum_warpsxnum_stages, e.g. 64x128x64x16x4x4; at most 64), "
      "instead of a space: re-measures a few picks side by side in one job per shape; racing is off unless "
      "--race-margin is given"},
     set_configs,
     0},
    {{"sample", "N",
      "of each shape's valid configs, a fixed pseudo-random N (the same for the same spec and --seed); the rest is "
      "not measured, and the files' manifest says the picks come from a sample"},
     set_u32,
     7},
    {{"name", "NAME", "sweep name (default derived from the shapes)"}, set_text, ARG(offsetof(cli_spec_t, name))},
    {{"strategy", "exhaustive|halving",
      "search strategy (default exhaustive): halving measures every config at 5 samples, then the best sixteenth per "
      "batch size (and its neighbours' winners) to the RSD rule, side by side in 5 rounds"},
     set_text,
     ARG(offsetof(cli_spec_t, strategy))},
    {{"device-filter", "TEXT", "only workers whose GPU name contains TEXT"},
     set_text,
     ARG(offsetof(cli_spec_t, device_filter))},
    {{"worker-backend", "cuda|triton|sim",
      "only workers of this backend measure the sweep; triton uses Triton's static rules (submit; tune sets it from "
      "--backend)"},
     set_text,
     ARG(offsetof(cli_spec_t, backend))},
    {{"routing", "FILE",
      "captured top-k expert ids every batch size draws its tokens from (NumPy .npy int32/int64 [tokens, topk], or a "
      "PyTorch .pt capture the triton helper reads; the path must be readable by the workers); default uniform random "
      "routing"},
     set_routing,
     0},
    {{"engines", KRN_ENGINE_ALL,
      "the engines whose files a triton sweep is for: an fp8 block shape keeps the configs any of them can run "
      "(submit; default both; tune sets it from --engine)"},
     set_engines,
     0},
    {{"chunk", "N", "configs per job (default: 16 for the cheapest shape, fewer for a costlier one)"}, set_u32, 0},
    {{"max-attempts", "N", "leases a job may fail before it is failed (default 3)"}, set_u32, 1},
    {{"warmup", "N", "warm-up runs per measurement (default 2)"}, set_u32, 2},
    {{"min-samples", "N", "fewest timed samples (default 10)"}, set_u32, 3},
    {{"max-samples", "N", "most timed samples (default 100)"}, set_u32, 4},
    {{"budget-ms", "MS", "time budget per config and batch size (default 1000)"}, set_u32, 5},
    {{"config-timeout-ms", "MS", "time limit per config, all batch sizes (default 60000)"}, set_u32, 6},
    {{"rsd-target", "X", "stop sampling under this relative deviation, or a mean known to half of it (default 0.01)"},
     set_fraction,
     0},
    {{"seed", "N", "input and routing seed (default 1)"}, set_seed, 0},
    {{"race-margin", "X",
      "racing: stop a config whose first samples are this fraction slower than the best so far (default 0.2, 0.1 "
      "with --strategy halving; 0 = off)"},
     set_fraction,
     1},
    {{"decide-margin", "X",
      "racing's last step: per shape and batch size, the configs within this fraction of the best (at most 4; at "
      "least 3 where the next are within 5 %) are re-measured side by side (one job per batch size, 5 rounds), racing "
      "off, and those measurements pick "
      "(default 0.02; 0 = off)"},
     set_fraction,
     2},
    {{"round-process", "same|new",
      "a side-by-side job's rounds (the decide step, halving's finalists, --configs): each in a new measuring "
      "process (new: the worker starts its backend's child afresh between rounds, so a level a config keeps for "
      "the whole life of a process is drawn again each round; the default for the cuda backend, about 0.3 s a "
      "round there, but for --strategy halving) or all in the worker's one (same: the default elsewhere; a new "
      "triton child costs about 6 s)"},
     set_round_process,
     0},
    {{"baseline", "FILE|DIR",
      "the ship guard's incumbent: the config file the engine would load without this sweep's (FILE; its name says "
      "its shape), or an engine's config folder searched as the engine searches it (DIR); its entry nearest each "
      "batch size is measured beside the finalists and a pick must beat it; repeatable. Without it, tune takes the "
      "file the engine in its interpreter ships for this GPU and shape (a sim tune: with --python)"},
     set_baseline,
     0},
    {{"guard", "on|off",
      "the ship guard (default on): the engine's default config and the --baseline entry for each batch size are "
      "measured beside the finalists, and export never ships a config slower than either; off measures the search "
      "alone"},
     set_guard,
     0},
    {{"spec", "FILE.json", "read the spec from a JSON file (flags after it override)"}, set_specfile, 0},
};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

const cli_spec_opt_t *cli_spec_opt_at(size_t i) { return i < N_OPTS ? &k_opts[i].o : NULL; }

static const opt_def_t *find_opt(const char *name) {
    for (size_t i = 0; i < N_OPTS; i++) {
        if (strcmp(k_opts[i].o.name, name) == 0) return &k_opts[i];
    }
    return NULL;
}

bool cli_spec_knows(const char *name) { return name && find_opt(name) != NULL; }

cli_spec_t *cli_spec_new(void) {
    cli_spec_t *s = mt_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->tp = 1;
    s->ep = 1;
    return s;
}

void cli_spec_destroy(cli_spec_t **sp) {
    if (!sp || !*sp) return;
    cli_spec_t *s = *sp;
    for (size_t i = 0; i < s->n_models; i++) free(s->models[i]);
    for (size_t i = 0; i < s->n_model_cfgs; i++) free(s->model_cfgs[i]);
    cli_guard_destroy(&s->guard);
    free(s);
    *sp = NULL;
}

mt_status_t cli_spec_set(cli_spec_t *s, const char *name, const char *value, char *err, size_t errlen) {
    const opt_def_t *d = find_opt(name ? name : "");
    if (!d) {
        mt_fmt(err, errlen, "unknown spec option '%s'", name ? name : "");
        return MT_NOTFOUND;
    }
    if (s->finished) {
        mt_fmt(err, errlen, "spec already finished");
        return MT_INVAL;
    }
    return d->fn(s, (const void *)d->arg, d->o.name, value ? value : "", err, errlen);
}

/* Writes a JSON scalar or an array of scalars as option text ("1,2,4"). */
static int json_to_text(json_t *v, char *buf, size_t len) {
    if (json_is_string(v)) {
        snprintf(buf, len, "%s", json_string_value(v));
        return MT_OK;
    }
    if (json_is_integer(v)) {
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return MT_OK;
    }
    if (json_is_real(v)) {
        snprintf(buf, len, "%.17g", json_real_value(v));
        return MT_OK;
    }
    if (json_is_array(v)) {
        size_t used = 0, i;
        json_t *x;
        buf[0] = '\0';
        json_array_foreach(v, i, x) {
            if (!json_is_integer(x)) return MT_INVAL;
            int n = snprintf(buf + used, len - used, "%s%" JSON_INTEGER_FORMAT, i ? "," : "", json_integer_value(x));
            if (n < 0 || (size_t)n >= len - used) return MT_INVAL;
            used += (size_t)n;
        }
        return MT_OK;
    }
    return MT_INVAL;
}

/* Applies one JSON value to option opt (JSON key key, for the error text). */
static int apply_json(cli_spec_t *s, const char *key, const char *opt, json_t *v, char *err, size_t errlen) {
    char text[4096];
    if (json_to_text(v, text, sizeof text) != MT_OK) {
        mt_fmt(err, errlen, "spec key \"%s\": wrong type", key);
        return MT_INVAL;
    }
    return cli_spec_set(s, opt, text, err, errlen);
}

static int apply_shape_json(cli_spec_t *s, json_t *v, char *err, size_t errlen) {
    if (json_is_string(v)) return cli_spec_set(s, "shape", json_string_value(v), err, errlen);
    if (!json_is_object(v)) {
        mt_fmt(err, errlen, "spec \"shapes\": each shape is a string or an object");
        return MT_INVAL;
    }
    char text[256] = "";
    size_t used = 0;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        static const char *const known[] = {"E", "N", "K", "topk", "dtype", "block_shape"};
        bool ok = false;
        for (size_t i = 0; i < 6; i++) ok = ok || strcmp(k, known[i]) == 0;
        if (!ok) {
            mt_fmt(err, errlen, "spec shape: unknown key \"%s\" (known: E, N, K, topk, dtype, block_shape)", k);
            return MT_INVAL;
        }
        char val[64];
        if (strcmp(k, "block_shape") == 0) {
            if (!json_is_array(x) || json_array_size(x) != 2 || !json_is_integer(json_array_get(x, 0)) ||
                !json_is_integer(json_array_get(x, 1))) {
                mt_fmt(err, errlen, "spec shape: block_shape is not [n, k]");
                return MT_INVAL;
            }
            snprintf(val, sizeof val, "%" JSON_INTEGER_FORMAT "x%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_array_get(x, 0)), json_integer_value(json_array_get(x, 1)));
        } else if (json_is_integer(x) || json_is_string(x)) {
            json_to_text(x, val, sizeof val);
        } else {
            mt_fmt(err, errlen, "spec shape: %s has the wrong type", k);
            return MT_INVAL;
        }
        int n = snprintf(text + used, sizeof text - used, "%s%s=%s", used ? "," : "", k, val);
        if (n < 0 || (size_t)n >= sizeof text - used) {
            mt_fmt(err, errlen, "spec shape too long");
            return MT_INVAL;
        }
        used += (size_t)n;
    }
    return cli_spec_set(s, "shape", text, err, errlen);
}

/* Key of the JSON document → option; special keys handled in cli_spec_parse_json. */
static const struct {
    const char *key, *opt;
} k_json_keys[] = {
    {"name", "name"},
    {"tp", "tp"},
    {"ep", "ep"},
    {"dtype", "dtype"},
    {"batch_sizes", "batch-sizes"},
    {"strategy", "strategy"},
    {"device_filter", "device-filter"},
    {"backend", "worker-backend"},
    {"engines", "engines"},
    {"routing", "routing"},
    {"chunk", "chunk"},
    {"max_attempts", "max-attempts"},
    {"sample", "sample"},
};
static const struct {
    const char *key, *opt;
} k_json_space[] = {
#define X(f, file, opt, max) {#f, opt},
    KRN_CONFIG_FIELDS(X)
#undef X
};
static const struct {
    const char *key, *opt;
} k_json_measure[] = {
    {"warmup", "warmup"},
    {"min_samples", "min-samples"},
    {"max_samples", "max-samples"},
    {"rsd_target", "rsd-target"},
    {"budget_ms", "budget-ms"},
    {"timeout_ms", "config-timeout-ms"},
    {"seed", "seed"},
    {"race_margin", "race-margin"},
    {"decide_margin", "decide-margin"},
    {"round_process", "round-process"},
};
#define LOOKUP_KEY(table, name_, out)                                                                                  \
    do {                                                                                                               \
        (out) = NULL;                                                                                                  \
        for (size_t i_ = 0; i_ < sizeof(table) / sizeof(table)[0]; i_++)                                               \
            if (strcmp((table)[i_].key, (name_)) == 0) (out) = (table)[i_].opt;                                        \
    } while (0)

static int apply_object(cli_spec_t *s, const char *what, json_t *obj, int which, char *err, size_t errlen) {
    if (!json_is_object(obj)) {
        mt_fmt(err, errlen, "spec \"%s\" is not an object", what);
        return MT_INVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        const char *opt;
        if (which == 0)
            LOOKUP_KEY(k_json_space, k, opt);
        else
            LOOKUP_KEY(k_json_measure, k, opt);
        if (!opt) {
            mt_fmt(err, errlen, "spec \"%s\": unknown key \"%s\"", what, k);
            return MT_INVAL;
        }
        int rc = apply_json(s, k, opt, v, err, errlen);
        if (rc != MT_OK) return rc;
    }
    return MT_OK;
}

static int apply_models(cli_spec_t *s, json_t *arr, char *err, size_t errlen) {
    size_t i;
    json_t *m;
    if (!json_is_array(arr)) {
        mt_fmt(err, errlen, "spec \"models\" is not an array");
        return MT_INVAL;
    }
    json_array_foreach(arr, i, m) {
        int rc;
        if (json_is_string(m)) {
            rc = cli_spec_set(s, "model", json_string_value(m), err, errlen);
        } else if (json_is_object(m)) {
            const char *k;
            json_t *v;
            rc = MT_OK;
            json_object_foreach(m, k, v) {
                if (strcmp(k, "name") != 0 && strcmp(k, "tp") != 0 && strcmp(k, "ep") != 0) {
                    mt_fmt(err, errlen, "spec model: unknown key \"%s\" (known: name, tp, ep)", k);
                    return MT_INVAL;
                }
                rc = apply_json(s, k, strcmp(k, "name") == 0 ? "model" : k, v, err, errlen);
                if (rc != MT_OK) return rc;
            }
            if (!json_object_get(m, "name")) {
                mt_fmt(err, errlen, "spec model: no \"name\"");
                return MT_INVAL;
            }
        } else {
            mt_fmt(err, errlen, "spec \"models\": each model is a name or {\"name\", \"tp\", \"ep\"}");
            return MT_INVAL;
        }
        if (rc != MT_OK) return rc;
    }
    return MT_OK;
}

/* One item of a JSON array: the i-th (from 0) of key's value. */
typedef mt_status_t (*item_fn)(cli_spec_t *s, const char *key, size_t i, json_t *x, char *err, size_t errlen);

static mt_status_t item_shape(cli_spec_t *s, const char *key, size_t i, json_t *x, char *err, size_t errlen) {
    return apply_shape_json(s, x, err, errlen);
}

static mt_status_t item_model_config(cli_spec_t *s, const char *key, size_t i, json_t *x, char *err, size_t errlen) {
    return apply_json(s, key, "model-config", x, err, errlen);
}

static mt_status_t item_config(cli_spec_t *s, const char *key, size_t i, json_t *x, char *err, size_t errlen) {
    if (!json_is_string(x)) {
        mt_fmt(err, errlen, "spec \"%s\": item %zu is not a string", key, i + 1);
        return MT_INVAL;
    }
    return cli_spec_set(s, "configs", json_string_value(x), err, errlen);
}

/* Applies each item of v, key's value, with fn; what follows "is not an array" in the error. */
static int apply_array(cli_spec_t *s, const char *key, json_t *v, const char *what, item_fn fn, char *err,
                       size_t errlen) {
    size_t i;
    json_t *x;
    if (!json_is_array(v)) {
        mt_fmt(err, errlen, "spec \"%s\" is not an array%s", key, what);
        return MT_INVAL;
    }
    json_array_foreach(v, i, x) {
        int rc = fn(s, key, i, x, err, errlen);
        if (rc != MT_OK) return rc;
    }
    return MT_OK;
}

mt_status_t cli_spec_parse_json(cli_spec_t *s, const char *text, size_t len, char *err, size_t errlen) {
    int rc = MT_OK;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        mt_fmt(err, errlen, "spec is not valid JSON (line %d: %s)", jerr.line, jerr.text);
        return MT_INVAL;
    }
    if (!json_is_object(root)) {
        mt_fmt(err, errlen, "spec is not a JSON object");
        rc = MT_INVAL;
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        const char *opt;
        LOOKUP_KEY(k_json_keys, k, opt);
        if (opt) {
            rc = apply_json(s, k, opt, v, err, errlen);
        } else if (strcmp(k, "shapes") == 0) {
            rc = apply_array(s, k, v, "", item_shape, err, errlen);
        } else if (strcmp(k, "models") == 0) {
            rc = apply_models(s, v, err, errlen);
        } else if (strcmp(k, "model_configs") == 0) {
            rc = apply_array(s, k, v, " of paths", item_model_config, err, errlen);
        } else if (strcmp(k, "space") == 0) {
            rc = apply_object(s, k, v, 0, err, errlen);
        } else if (strcmp(k, "configs") == 0) {
            rc = apply_array(s, k, v, " of configs such as \"64x128x64x16x4x4\"", item_config, err, errlen);
        } else if (strcmp(k, "measure") == 0) {
            rc = apply_object(s, k, v, 1, err, errlen);
        } else {
            mt_fmt(err, errlen, "spec: unknown key \"%s\"", k);
            rc = MT_INVAL;
        }
        if (rc != MT_OK) goto out;
    }
out:
    json_decref(root);
    return rc;
}

mt_status_t cli_spec_load_json(cli_spec_t *s, const char *path, char *err, size_t errlen) {
    int rc = MT_OK;
    char *buf = NULL;
    size_t len = 0;
    char inner[400];
    if (s->depth > 0) {
        mt_fmt(err, errlen, "%s: a spec file cannot load another spec file", path);
        return MT_INVAL;
    }
    rc = mt_read_regular(path, (1u << 20) - 1, &buf, &len, inner, sizeof inner);
    if (rc != MT_OK) {
        mt_fmt(err, errlen, "--spec %s", inner);
        return rc == MT_NOMEM ? MT_NOMEM : MT_INVAL;
    }
    s->depth++;
    rc = cli_spec_parse_json(s, buf, len, inner, sizeof inner);
    s->depth--;
    if (rc != MT_OK) mt_fmt(err, errlen, "--spec %s: %s", path, inner);
    free(buf);
    return rc;
}

static int add_resolved(cli_spec_t *s, const krn_shape_t *sh, char *err, size_t errlen) {
    if (s->n_shapes == CLI_SPEC_MAX_SHAPES) {
        mt_fmt(err, errlen, "more than %d shapes", CLI_SPEC_MAX_SHAPES);
        return MT_INVAL;
    }
    s->shapes[s->n_shapes++] = *sh;
    return MT_OK;
}

static bool shape_eq(const krn_shape_t *a, const krn_shape_t *b) {
    return a->e == b->e && a->n == b->n && a->k == b->k && a->topk == b->topk && strcmp(a->dtype, b->dtype) == 0 &&
           a->block_n == b->block_n && a->block_k == b->block_k;
}

/* The shapes of --model and --model-config beside --shape's, each once; MT_INVAL when none. */
static int finish_shapes(cli_spec_t *s, const char *dtype, char *err, size_t errlen) {
    int rc = MT_OK;
    for (size_t i = 0; i < s->n_models; i++) {
        krn_shape_t sh;
        rc = cli_preset_shape(s->models[i], s->tp, s->ep, dtype, &sh, err, errlen);
        if (rc != MT_OK) return MT_INVAL;
        rc = add_resolved(s, &sh, err, errlen);
        if (rc != MT_OK) return rc;
    }
    for (size_t i = 0; i < s->n_model_cfgs; i++) {
        krn_shape_t sh;
        rc = cli_model_config_load(s->model_cfgs[i], s->tp, s->ep, dtype, &sh, err, errlen);
        if (rc != MT_OK) return MT_INVAL;
        rc = add_resolved(s, &sh, err, errlen);
        if (rc != MT_OK) return rc;
    }
    /* The same shape named twice (a preset and its --shape) is tuned once. */
    size_t kept = 0;
    for (size_t i = 0; i < s->n_shapes; i++) {
        bool dup = false;
        for (size_t j = 0; j < kept; j++) dup = dup || shape_eq(&s->shapes[i], &s->shapes[j]);
        if (!dup) s->shapes[kept++] = s->shapes[i];
    }
    s->n_shapes = kept;
    if (s->n_shapes == 0) {
        mt_fmt(err, errlen, "no shape to tune: give --shape, --model or --model-config");
        return MT_INVAL;
    }
    return MT_OK;
}

/* The sweep's name when none is given: its first shape, and how many more. */
static void finish_name(cli_spec_t *s) {
    if (s->name[0]) return;
    char sh[96];
    krn_shape_name(&s->shapes[0], sh, sizeof sh);
    if (s->n_shapes == 1)
        mt_fmt(s->name, sizeof s->name, "%s,K=%u,topk=%u", sh, s->shapes[0].k, s->shapes[0].topk);
    else
        mt_fmt(s->name, sizeof s->name, "%s,K=%u,topk=%u +%zu shapes", sh, s->shapes[0].k, s->shapes[0].topk,
               s->n_shapes - 1);
    /* A re-measure is its own sweep, not a changed copy of the one it checks; so is a sample. */
    size_t used = strlen(s->name);
    if (s->n_cfgs) mt_fmt(s->name + used, sizeof s->name - used, " (%zu configs)", s->n_cfgs);
    if (s->sample) mt_fmt(s->name + used, sizeof s->name - used, " (sample of %u)", s->sample);
}

/* Fills the SweepSpec message from the finished options; routing_tokens as resolved. */
static void finish_message(cli_spec_t *s, uint32_t routing_tokens, bool any_space) {
    /* Assemble the message; init() clears the scalars kept in it, so save them. */
    uint32_t chunk = s->spec.chunk, max_attempts = s->spec.max_attempts;
    moetune__sweep_spec__init(&s->spec);
    s->spec.chunk = chunk;
    s->spec.max_attempts = max_attempts;
    s->spec.name = s->name;
    s->spec.strategy = s->strategy;
    s->spec.device_filter = s->device_filter;
    s->spec.backend = s->backend;
    s->spec.routing_path = s->routing_abs;
    s->spec.routing_tokens = routing_tokens;
    for (size_t i = 0; i < s->n_engines; i++) s->engines[i] = s->engine_names[i];
    s->spec.n_engines = s->n_engines;
    s->spec.engines = s->n_engines ? s->engines : NULL;
    for (size_t i = 0; i < s->n_shapes; i++) {
        wire_shape_to_msg(&s->shapes[i], &s->pb_shapes[i]);
        s->pb_ptrs[i] = &s->pb_shapes[i];
    }
    s->spec.n_shapes = s->n_shapes;
    s->spec.shapes = s->pb_ptrs;
    s->spec.n_batch_sizes = s->n_batch;
    s->spec.batch_sizes = s->batch;
    moetune__space__init(&s->space);
    size_t *counts[KRN_N_FIELDS] = {
#define X(f, file, opt, max) &s->space.n_##f,
        KRN_CONFIG_FIELDS(X)
#undef X
    };
    uint32_t **lists[KRN_N_FIELDS] = {
#define X(f, file, opt, max) &s->space.f,
        KRN_CONFIG_FIELDS(X)
#undef X
    };
    for (int i = 0; i < KRN_N_FIELDS; i++) {
        *counts[i] = s->n_space[i];
        *lists[i] = s->space_vals[i];
        any_space = any_space || s->n_space[i];
    }
    for (size_t i = 0; i < s->n_cfgs; i++) s->cfg_ptrs[i] = &s->cfgs[i];
    s->space.n_configs = s->n_cfgs;
    s->space.configs = s->n_cfgs ? s->cfg_ptrs : NULL;
    s->space.sample = s->sample;
    s->spec.space = any_space || s->n_cfgs || s->sample ? &s->space : NULL;
    /* no chunk stays 0: the coordinator sizes each shape's jobs (planner.h plan_chunk) */
    if (s->measure_set) {
        Moetune__Measure m = s->measure;
        moetune__measure__init(&s->measure);
#define X(f, def) s->measure.f = m.f;
        WIRE_MEASURE_DEFAULTS(X)
#undef X
        s->measure.race_margin = m.race_margin;
        s->measure.decide_margin = m.decide_margin;
        s->measure.fresh_rounds = m.fresh_rounds;
        s->spec.measure = &s->measure;
    }
}

mt_status_t cli_spec_finish(cli_spec_t *s, bool fill_defaults, char *err, size_t errlen) {
    int rc = MT_OK;
    const char *dtype = s->dtype[0] ? s->dtype : NULL;
    if (s->finished) {
        mt_fmt(err, errlen, "spec already finished");
        return MT_INVAL;
    }
    if ((s->tp_set || s->ep_set || dtype) && s->n_models == 0 && s->n_model_cfgs == 0) {
        mt_fmt(err, errlen, "--tp, --ep and --dtype apply only with --model or --model-config");
        return MT_INVAL;
    }
    rc = finish_shapes(s, dtype, err, errlen);
    if (rc != MT_OK) return rc;
    uint32_t routing_tokens = 0;
    if (s->routing[0]) {
        rc = resolve_routing(s, err, errlen);
        if (rc != MT_OK) return rc;
        routing_tokens = s->spec.routing_tokens;
    }
    if (s->measure.min_samples && s->measure.max_samples && s->measure.min_samples > s->measure.max_samples) {
        mt_fmt(err, errlen, "--min-samples %u is larger than --max-samples %u", s->measure.min_samples,
               s->measure.max_samples);
        return MT_INVAL;
    }
    bool any_space = false;
    for (int i = 0; i < KRN_N_FIELDS; i++) any_space = any_space || s->n_space[i];
    if (s->n_cfgs && any_space) {
        mt_fmt(err, errlen, "--configs and the value lists (--block-m, ...) exclude each other");
        return MT_INVAL;
    }
    if (s->n_cfgs && s->sample) {
        mt_fmt(err, errlen, "--configs and --sample exclude each other: listed configs are all measured");
        return MT_INVAL;
    }
    if (fill_defaults && s->n_batch == 0) {
        for (size_t i = 0; i < krn_n_default_batch_sizes; i++) s->batch[i] = krn_default_batch_sizes[i];
        s->n_batch = krn_n_default_batch_sizes;
    }
    /* A space with some lists given gets the default for the others: the planner takes
     * a whole space or none. */
    if ((fill_defaults && !s->n_cfgs) || any_space) {
        krn_space_t def;
        krn_space_default(&def);
        for (int i = 0; i < KRN_N_FIELDS; i++) {
            if (s->n_space[i]) continue;
            memcpy(s->space_vals[i], def.values[i], def.n[i] * sizeof(uint32_t));
            s->n_space[i] = def.n[i];
        }
    }
    if (fill_defaults) {
        if (!s->strategy[0]) snprintf(s->strategy, sizeof s->strategy, "exhaustive");
        if (!s->spec.max_attempts) s->spec.max_attempts = PLAN_DEFAULT_MAX_ATTEMPTS;
    }
    finish_name(s);
    finish_message(s, routing_tokens, any_space);
    s->spec.no_guard = s->no_guard;
    if (s->guard) {
        rc = cli_guard_resolve(s->guard, &s->spec, s->shapes, s->n_shapes, NULL, err, errlen);
        if (rc != MT_OK) return rc;
    }
    s->finished = true;
    return MT_OK;
}

bool cli_spec_engine_incumbent_wanted(const cli_spec_t *s) { return s && s->finished && !s->no_guard && !s->baseline; }

mt_status_t cli_spec_engine_incumbent(cli_spec_t *s, const cli_guard_engine_t *e, FILE *say) {
    if (!cli_spec_engine_incumbent_wanted(s)) return MT_OK;
    if (!s->guard && !(s->guard = cli_guard_new())) return MT_NOMEM;
    return cli_guard_engine_folder(s->guard, &s->spec, s->shapes, s->n_shapes, e, say);
}

const Moetune__SweepSpec *cli_spec_get(const cli_spec_t *s) { return s && s->finished ? &s->spec : NULL; }
