/* planner.c - sweep spec -> jobs. See planner.h. */
#include "planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "engines.h"
#include "guard.h"
#include "halving.h"
#include "order.h"
#include "mt.h"
#include "race.h"

void plan_measure(const Moetune__SweepSpec *spec, Moetune__Measure *out) {
    const Moetune__Measure *m = spec ? spec->measure : NULL;
    wire_measure_fill(m, out);
    /* racing is on unless turned off (negative) or the space is a list; 0 is "not given" */
    bool listed = spec && spec->space && spec->space->n_configs;
    double race = spec && halving_is(spec->strategy) ? HALVING_RACE_DEFAULT_MARGIN : RACE_DEFAULT_MARGIN;
    out->race_margin = m && m->race_margin != 0 ? m->race_margin : listed ? -1.0 : race;
    /* the decide step likewise (halving_decide_margin: only where racing is on) */
    out->decide_margin = m && m->decide_margin != 0 ? m->decide_margin : listed ? -1.0 : HALVING_DECIDE_DEFAULT_MARGIN;
    /* On an H100 a config keeps one of two levels up to 4 % apart for the life of a process; a
     * new child per round draws it again, for 0.33 s on cuda (6.4 s on triton: one child there).
     * Halving's finalists keep one child: its 5-minute target had no 24 s to spare. */
    bool cuda = spec && spec->backend && strcmp(spec->backend, "cuda") == 0;
    out->fresh_rounds = m && m->fresh_rounds != 0 ? m->fresh_rounds : cuda && !halving_is(spec->strategy) ? 1 : -1;
}

uint32_t plan_chunk(const Moetune__SweepSpec *spec) {
    if (spec->chunk) return spec->chunk;
    if (spec->space && spec->space->n_configs) return (uint32_t)spec->space->n_configs;
    return 0;
}

/* Each shape's chunk and the order its jobs are stored in. Without a chunk in the spec, the
 * cheapest shape by the cost model gets PLAN_DEFAULT_CHUNK configs per job and a costlier one
 * fewer, in proportion (at least PLAN_MIN_CHUNK), so any job takes about as long as another.
 * The costliest shape's jobs come first (the scheduler leases in job order): its first pass,
 * and the decide step or halving phase 2 that waits on it, end early while cheaper shapes'
 * jobs keep the workers busy, instead of a slow shape's last job and its decide step ending
 * the sweep with the other workers idle. */
static mt_status_t plan_shape_chunks(plan_t *p) {
    double cheapest = 0.0;
    p->order = mt_malloc((p->n_shapes ? p->n_shapes : 1) * sizeof *p->order);
    if (!p->order) return MT_NOMEM;
    for (size_t i = 0; i < p->n_shapes; i++) {
        plan_shape_t *ps = &p->shapes[i];
        ps->cost_us = ord_shape_cost_us(&ps->shape, p->batch_sizes, p->n_batch_sizes, ps->valid, ps->n_valid);
        if (ps->n_valid && ps->cost_us > 0 && (cheapest == 0.0 || ps->cost_us < cheapest)) cheapest = ps->cost_us;
    }
    for (size_t i = 0; i < p->n_shapes; i++) {
        plan_shape_t *ps = &p->shapes[i];
        ps->chunk = p->chunk;
        if (!ps->chunk) {
            double c = ps->cost_us > 0 ? PLAN_DEFAULT_CHUNK * cheapest / ps->cost_us : PLAN_DEFAULT_CHUNK;
            ps->chunk = c < PLAN_MIN_CHUNK ? PLAN_MIN_CHUNK : (uint32_t)(c + 0.5);
        }
        /* insertion sort, costliest first; equal costs keep the spec's order */
        size_t k = i;
        while (k > 0 && p->shapes[p->order[k - 1]].cost_us < ps->cost_us) {
            p->order[k] = p->order[k - 1];
            k--;
        }
        p->order[k] = i;
    }
    return MT_OK;
}

/* One source of a shape's known picks and how many of them went first, for p->warm. */
typedef struct {
    char what[240];
    size_t n;
} warm_src_t;

#define WARM_MAX_SRCS 6

/* Moves c to the end of ps's known picks when its rules kept it and it is not one of them
 * yet (at most PLAN_MAX_WARM); true when it moved. */
static bool warm_take(plan_shape_t *ps, const krn_config_t *c) {
    if (ps->n_warm >= PLAN_MAX_WARM) return false;
    for (size_t j = 0; j < ps->n_valid; j++) {
        if (memcmp(&ps->valid[j], c, sizeof *c) != 0) continue;
        if (j < ps->n_warm) return false;
        memmove(&ps->valid[ps->n_warm + 1], &ps->valid[ps->n_warm], (j - ps->n_warm) * sizeof *ps->valid);
        ps->valid[ps->n_warm++] = *c;
        return true;
    }
    return false;
}

/* The source named what among srcs[0..*n) (added when new, the last one shared when full). */
static warm_src_t *warm_src(warm_src_t *srcs, size_t *n, const char *what) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp(srcs[i].what, what) == 0) return &srcs[i];
    if (*n == WARM_MAX_SRCS) return &srcs[*n - 1];
    mt_fmt(srcs[*n].what, sizeof srcs[*n].what, "%s", what);
    srcs[*n].n = 0;
    return &srcs[(*n)++];
}

/* How an incumbent's file is named in p->warm: "sglang's bundled file for NVIDIA H200
 * (triton_3_4_0)" from its engine, its name's device and its folder, "for E=128,N=384 on ..."
 * when the name is another shape's than sh; a --baseline file (no engine) by its name. */
static void warm_file_label(const Moetune__Incumbent *in, const krn_shape_t *sh, char *out, size_t len) {
    const char *src = in->source && *in->source ? in->source : "a config file";
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    if (!in->engine || !*in->engine) {
        mt_fmt(out, len, "the --baseline file %s", base);
        return;
    }
    char dev[200] = "", folder[96] = "", other[64] = "";
    unsigned e = 0, n = 0;
    if (sscanf(base, "E=%u,N=%u,", &e, &n) == 2 && (e != sh->e || n != sh->n))
        snprintf(other, sizeof other, "E=%u,N=%u on ", e, n);
    const char *d = strstr(base, "device_name=");
    if (d) {
        snprintf(dev, sizeof dev, " for %s%s", other, d + strlen("device_name="));
        char *name = dev + 5 + strlen(other); /* the device, up to ",dtype=..." or ".json" */
        char *end = strstr(name, ".json"), *comma = strchr(name, ',');
        if (comma && (!end || comma < end)) end = comma;
        if (end) *end = '\0';
        for (char *p = name; *p; p++)
            if (*p == '_') *p = ' ';
    }
    char tdir[80]; /* the folder above the file: SGLang's triton_X_Y_Z */
    if (mt_triton_dir(src, tdir, sizeof tdir)) snprintf(folder, sizeof folder, " (%s)", tdir);
    mt_fmt(out, len, "%s's bundled file%s%s", in->engine, dev, folder);
}

/* The engine's own known picks for shape i after the database's: the entries of the files it
 * would load (the spec's incumbents, which tune found in the engine's package), else of its file
 * for another GPU or the nearest shape (warm_files), then its default config at every batch
 * size; each counted under its source in srcs. */
static void warm_engine(plan_t *p, const Moetune__SweepSpec *spec, size_t i, warm_src_t *srcs, size_t *n_srcs) {
    plan_shape_t *ps = &p->shapes[i];
    char label[240];
    size_t n_inc = spec ? spec->n_incumbents : 0, n_files = spec ? spec->n_warm_files : 0;
    for (size_t k = 0; k < n_inc + n_files; k++) {
        const Moetune__Incumbent *in = k < n_inc ? spec->incumbents[k] : spec->warm_files[k - n_inc];
        if (!in || in->shape != i || !in->config) continue;
        krn_config_t c;
        wire_config_from_msg(in->config, &c);
        warm_file_label(in, &ps->shape, label, sizeof label);
        warm_src_t *s = warm_src(srcs, n_srcs, label);
        if (warm_take(ps, &c)) s->n++;
    }
    const char *engines[2];
    size_t ne = guard_engines(spec, engines);
    warm_src_t *def = NULL;
    for (size_t b = 0; b < p->n_batch_sizes; b++) {
        for (size_t e = 0; e < ne; e++) {
            const char *rules[2];
            size_t nr = guard_default_rules(engines[e], rules);
            for (size_t r = 0; r < nr; r++) {
                krn_config_t c;
                const char *why;
                if (guard_default_config(rules[r], &ps->shape, p->batch_sizes[b], &c, &why) != MT_OK) continue;
                if (!warm_take(ps, &c)) continue;
                if (!def) def = warm_src(srcs, n_srcs, "engine default");
                def->n++;
            }
        }
    }
}

/* Appends to p->warm (used bytes in *used) shape ps's line: the database's alone as
 * "N known picks first (SRC)", else "N known picks first: a from SRC, ..., c engine defaults"
 * ("1 known pick", "1 engine default"). */
static void warm_line(plan_t *p, const plan_shape_t *ps, const warm_src_t *srcs, size_t n_srcs, size_t *used) {
    char sh[96], line[1024];
    size_t n_used = 0, at = 0;
    for (size_t k = 0; k < n_srcs; k++) n_used += srcs[k].n ? 1 : 0;
    krn_shape_format(&ps->shape, sh, sizeof sh);
    if (n_used == 1 && srcs[0].n) {
        mt_fmt(line, sizeof line, "%s: %zu known pick%s first (%s)", sh, ps->n_warm, ps->n_warm == 1 ? "" : "s",
               srcs[0].what);
    } else {
        int w = snprintf(line, sizeof line, "%s: %zu known pick%s first:", sh, ps->n_warm, ps->n_warm == 1 ? "" : "s");
        at = w > 0 && (size_t)w < sizeof line ? (size_t)w : 0;
        for (size_t k = 0, m = 0; k < n_srcs && at < sizeof line; k++) {
            if (!srcs[k].n) continue;
            bool def = strcmp(srcs[k].what, "engine default") == 0;
            w = snprintf(line + at, sizeof line - at, "%s %zu %s%s%s", m++ ? "," : "", srcs[k].n, def ? "" : "from ",
                         srcs[k].what, def && srcs[k].n > 1 ? "s" : "");
            if (w > 0) at = at + (size_t)w < sizeof line ? at + (size_t)w : sizeof line - 1;
        }
    }
    int w = snprintf(p->warm + *used, sizeof p->warm - *used, "%s%s", *used ? "; " : "", line);
    if (w > 0) *used = *used + (size_t)w < sizeof p->warm ? *used + (size_t)w : sizeof p->warm - 1;
}

/* The warm start (dev->warm): each shape's known picks that its rules kept move to the front of
 * its order, the rest keeping theirs: the database's first, then the engine's (warm_engine);
 * p->warm lists where they came from. */
static void plan_warm(plan_t *p, const Moetune__SweepSpec *spec, const plan_device_t *dev) {
    size_t used = 0;
    for (size_t i = 0; i < p->n_shapes; i++) {
        plan_shape_t *ps = &p->shapes[i];
        krn_config_t picks[PLAN_MAX_WARM];
        warm_src_t srcs[WARM_MAX_SRCS];
        size_t n_srcs = 1;
        srcs[0].what[0] = '\0';
        srcs[0].n = 0;
        size_t n = dev->warm(dev->warm_ctx, &ps->shape, picks, PLAN_MAX_WARM, srcs[0].what, sizeof srcs[0].what);
        ps->n_warm = 0;
        for (size_t k = 0; k < n && k < PLAN_MAX_WARM; k++)
            if (warm_take(ps, &picks[k])) srcs[0].n++;
        warm_engine(p, spec, i, srcs, &n_srcs);
        p->configs_warm += (uint32_t)ps->n_warm;
        if (ps->n_warm) warm_line(p, ps, srcs, n_srcs, &used);
    }
}

void plan_destroy(plan_t **pp) {
    if (!pp || !*pp) return;
    plan_t *p = *pp;
    for (size_t i = 0; i < p->n_shapes; i++) {
        free(p->shapes[i].valid);
        free(p->shapes[i].rejected);
        free(p->shapes[i].config_ids);
        free(p->shapes[i].job_ids);
    }
    free(p->shapes);
    free(p->order);
    free(p->batch_sizes);
    free(p);
    *pp = NULL;
}

/* Where each field's list lives in Moetune__Space (KRN_F_* order). */
static const struct {
    size_t n_off, v_off; /* offsets of n_x and x */
} g_lists[KRN_N_FIELDS] = {
#define X(f, file, opt, max) {offsetof(Moetune__Space, n_##f), offsetof(Moetune__Space, f)},
    KRN_CONFIG_FIELDS(X)
#undef X
};

static int has_dup(const uint32_t *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (v[i] == v[j]) return 1;
    return 0;
}

/* A list of configs (Space.configs) is the space itself: each config in its fields'
 * bounds, none repeated, at most KRN_MAX_LIST, and no value lists beside it. */
static int build_list(const Moetune__Space *sp, size_t lists, krn_space_t *out, char *err, size_t errlen) {
    if (lists) {
        mt_fmt(err, errlen, "space: a list of configs and value lists (block_m, ...) exclude each other");
        return MT_INVAL;
    }
    if (sp->n_configs > KRN_MAX_LIST) {
        mt_fmt(err, errlen, "space: %zu configs listed (at most %d)", sp->n_configs, KRN_MAX_LIST);
        return MT_INVAL;
    }
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sp->n_configs; i++) {
        if (!sp->configs[i]) {
            mt_fmt(err, errlen, "space: config %zu is empty", i + 1);
            return MT_INVAL;
        }
        krn_config_t c;
        wire_config_from_msg(sp->configs[i], &c);
        int f = krn_config_bad_field(&c);
        if (f >= 0) {
            mt_fmt(err, errlen, "space: config %zu: %s value %u is out of range 1..%u", i + 1,
                   krn_config_fields[f].file, KRN_CONFIG_GET(&c, f), krn_config_fields[f].max);
            return MT_INVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (memcmp(&out->list[j], &c, sizeof c) == 0) {
                char t[KRN_CONFIG_TEXT_LEN];
                mt_fmt(err, errlen, "space: config %s is listed twice", krn_config_format(&c, t, sizeof t));
                return MT_INVAL;
            }
        }
        out->list[i] = c;
    }
    out->n_list = (uint32_t)sp->n_configs;
    return MT_OK;
}

/* Empty space (or none) means the default space; otherwise every list must be
 * non-empty, at most KRN_MAX_VALUES long, positive and unique. A space with
 * configs listed is exactly those (build_list). */
static int build_space(const Moetune__Space *sp, krn_space_t *out, char *err, size_t errlen) {
    size_t total = 0;
    for (size_t i = 0; sp && i < KRN_N_FIELDS; i++) total += *(const size_t *)((const char *)sp + g_lists[i].n_off);
    if (sp && sp->n_configs) return build_list(sp, total, out, err, errlen);
    if (total == 0) {
        krn_space_default(out);
        return MT_OK;
    }
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < KRN_N_FIELDS; i++) {
        const krn_config_field_t *f = &krn_config_fields[i];
        size_t n = *(const size_t *)((const char *)sp + g_lists[i].n_off);
        const uint32_t *v = *(uint32_t *const *)((const char *)sp + g_lists[i].v_off);
        if (n == 0) {
            mt_fmt(err, errlen, "space: %s list is empty", f->name);
            return MT_INVAL;
        }
        if (n > KRN_MAX_VALUES) {
            mt_fmt(err, errlen, "space: %s has %zu values (at most %d)", f->name, n, KRN_MAX_VALUES);
            return MT_INVAL;
        }
        for (size_t j = 0; j < n; j++) {
            if (v[j] == 0 || v[j] > f->max) {
                mt_fmt(err, errlen, "space: %s value %u is out of range 1..%u", f->name, v[j], f->max);
                return MT_INVAL;
            }
        }
        if (has_dup(v, n)) {
            mt_fmt(err, errlen, "space: %s has a repeated value", f->name);
            return MT_INVAL;
        }
        memcpy(out->values[i], v, n * sizeof *v);
        out->n[i] = (uint32_t)n;
    }
    return MT_OK;
}

/* A config's place in the sample: its fields and the seed, mixed (splitmix64's finaliser
 * over FNV-1a), so that any sample size takes a prefix of one fixed shuffle. */
static uint64_t sample_key(const krn_config_t *c, uint64_t seed) {
    return mt_mix64(mt_fnv1a(MT_FNV_INIT ^ seed, c, sizeof *c));
}

typedef struct {
    uint64_t key;
    krn_config_t cfg;
} keyed_config_t;

static int by_key(const void *a, const void *b) {
    const keyed_config_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return memcmp(&x->cfg, &y->cfg, sizeof x->cfg);
}

/* Keeps a fixed pseudo-random n of the *len configs (the lowest sample keys); the caller
 * orders them after. */
static int plan_sample(krn_config_t *v, size_t *len, size_t n, uint64_t seed) {
    keyed_config_t *k = mt_calloc(*len, sizeof *k);
    if (!k) return MT_NOMEM;
    for (size_t i = 0; i < *len; i++) k[i] = (keyed_config_t){sample_key(&v[i], seed), v[i]};
    qsort(k, *len, sizeof *k, by_key);
    for (size_t i = 0; i < n; i++) v[i] = k[i].cfg;
    *len = n;
    free(k);
    return MT_OK;
}

static int shape_eq(const krn_shape_t *a, const krn_shape_t *b) {
    return a->e == b->e && a->n == b->n && a->k == b->k && a->topk == b->topk && a->block_n == b->block_n &&
           a->block_k == b->block_k && strcmp(a->dtype, b->dtype) == 0 && strcmp(a->routing, b->routing) == 0;
}

mt_status_t plan_build(const Moetune__SweepSpec *spec, plan_t **out, char *err, size_t errlen) {
    return plan_build_on(spec, NULL, out, err, errlen);
}

/* Which static rules a sweep of backend plans with on dev, as p->rules says it. */
static void plan_rules_line(plan_t *p, const char *backend, bool triton_rules, const plan_device_t *dev,
                            const krn_limits_t *cuda_limits) {
    if (!triton_rules)
        mt_fmt(p->rules, sizeof p->rules,
               "%s: moetune's CUDA kernel (divisibility, MMA tiles, registers, %u B shared memory per block)", backend,
               cuda_limits->smem_per_block);
    else if (!dev)
        mt_fmt(p->rules, sizeof p->rules,
               "%s: Triton's, no device yet (its worker judges shared memory before compiling)", backend);
    else
        mt_fmt(p->rules, sizeof p->rules, "%s: Triton's on %s (sm_%u%u, %u B shared memory per block)", backend,
               dev->name[0] ? dev->name : "its device", dev->limits.cc_major, dev->limits.cc_minor,
               dev->limits.smem_per_block);
}

/* The spec's own consistency, before anything is built. */
static int plan_check_spec(const Moetune__SweepSpec *spec, char *err, size_t errlen) {
    if (!spec) {
        mt_fmt(err, errlen, "no spec");
        return MT_INVAL;
    }
    if (!halving_strategy_known(spec->strategy)) {
        mt_fmt(err, errlen, "unknown strategy '%.64s' (known: exhaustive, halving)", spec->strategy);
        return MT_INVAL;
    }
    if (spec->space && spec->space->sample && spec->space->n_configs) {
        mt_fmt(err, errlen, "a list of configs is measured whole: a sample of it does not apply");
        return MT_INVAL;
    }
    if (halving_is(spec->strategy) && spec->space && spec->space->n_configs) {
        mt_fmt(err, errlen,
               "a list of configs is measured side by side to the RSD rule: strategy halving does not "
               "apply to it");
        return MT_INVAL;
    }
    if (spec->n_shapes == 0) {
        mt_fmt(err, errlen, "the spec has no shapes");
        return MT_INVAL;
    }
    if (spec->n_batch_sizes == 0) {
        mt_fmt(err, errlen, "the spec has no batch sizes");
        return MT_INVAL;
    }
    for (size_t i = 0; i < spec->n_batch_sizes; i++) {
        uint32_t b = spec->batch_sizes[i];
        if (b == 0 || b > PLAN_MAX_BATCH) {
            mt_fmt(err, errlen, "batch size %u is out of range 1..%u", b, PLAN_MAX_BATCH);
            return MT_INVAL;
        }
    }
    if (has_dup(spec->batch_sizes, spec->n_batch_sizes)) {
        mt_fmt(err, errlen, "batch sizes repeat a value");
        return MT_INVAL;
    }
    return MT_OK;
}

/* The measuring settings p->measure took from the spec, in range. */
static int plan_check_measure(const plan_t *p, char *err, size_t errlen) {
    if (p->measure.min_samples > p->measure.max_samples) {
        mt_fmt(err, errlen, "measure: min_samples %u > max_samples %u", p->measure.min_samples, p->measure.max_samples);
        return MT_INVAL;
    }
    if (!(p->measure.race_margin < 10.0)) {
        mt_fmt(err, errlen, "measure: race margin %g is not below 10 (1000 %%); negative turns racing off",
               p->measure.race_margin);
        return MT_INVAL;
    }
    if (!(p->measure.decide_margin < 1.0)) {
        mt_fmt(err, errlen, "measure: decide margin %g is not below 1 (100 %%); negative turns it off",
               p->measure.decide_margin);
        return MT_INVAL;
    }
    return MT_OK;
}

/* The engines a triton sweep's files are for (the spec's, else both): a block-scale shape
 * keeps what any can run. */
static int plan_engines(const Moetune__SweepSpec *spec, const char *const **engines_out, size_t *n_out, char *err,
                        size_t errlen) {
    static const char *const all[] = {
#define PLAN_ENGINE_NAME(id, name, display, env) name,
        KRN_ENGINES(PLAN_ENGINE_NAME)
#undef PLAN_ENGINE_NAME
    };
    *engines_out = all;
    *n_out = KRN_ENGINE_COUNT;
    if (!spec->n_engines) return MT_OK;
    for (size_t i = 0; i < spec->n_engines; i++) {
        const char *e = spec->engines[i] ? spec->engines[i] : "";
        if (!krn_engine_find(e)) {
            mt_fmt(err, errlen, "engine '%.32s' is not one of " KRN_ENGINE_NAMES, e);
            return MT_INVAL;
        }
    }
    *engines_out = (const char *const *)spec->engines;
    *n_out = spec->n_engines;
    return MT_OK;
}

/* Shape i of p (read from the spec) against the routing file and the shapes before it. */
static int plan_check_shape(const Moetune__SweepSpec *spec, const plan_t *p, size_t i, char *err, size_t errlen) {
    const plan_shape_t *ps = &p->shapes[i];
    bool has_file = spec->routing_path && *spec->routing_path;
    if (has_file != (ps->shape.routing[0] != '\0')) {
        mt_fmt(err, errlen, "shape %zu: %s", i + 1,
               has_file ? "the spec names a routing file but the shape has no routing hash"
                        : "the shape has a routing hash but the spec names no routing file");
        return MT_INVAL;
    }
    if (i > 0 && strcmp(ps->shape.routing, p->shapes[0].shape.routing) != 0) {
        mt_fmt(err, errlen, "shape %zu: another routing than shape 1 (one routing file per sweep)", i + 1);
        return MT_INVAL;
    }
    for (size_t j = 0; j < i; j++) {
        if (shape_eq(&p->shapes[j].shape, &ps->shape)) {
            mt_fmt(err, errlen, "shape %zu repeats shape %zu", i + 1, j + 1);
            return MT_INVAL;
        }
    }
    return MT_OK;
}

/* The static rules a sweep plans with. */
typedef struct {
    bool triton_rules, cuda;
    const krn_limits_t *tlimits, *limits;
    const char *const *engines;
    size_t n_engines;
} plan_rules_t;

/* Sorts the n_space configs of p's space into ps's valid and rejected (with the reason) by
 * the rules; the first reason goes to first_why (PLAN_REASON_LEN) when it is empty. */
static void plan_judge_shape(const plan_t *p, plan_shape_t *ps, size_t n_space, const plan_rules_t *rules,
                             char *first_why) {
    char why[PLAN_REASON_LEN];
    for (size_t c = 0; c < n_space; c++) {
        krn_config_t cfg;
        krn_space_at(&p->space, c, &cfg);
        int ok = rules->triton_rules ? krn_check_triton_on(&ps->shape, &cfg, rules->tlimits, why, sizeof why)
                                     : krn_check(&ps->shape, &cfg, rules->limits, why, sizeof why);
        if (ok == MT_OK && rules->cuda && strcmp(ps->shape.dtype, "bf16") != 0) {
            /* moetune's CUDA kernel is bf16 only; the fp8 layer is the triton backend's. */
            mt_fmt(why, sizeof why, "the cuda backend runs bf16 only (%s needs --backend triton)", ps->shape.dtype);
            ok = MT_INVAL;
        }
        if (ok == MT_OK && rules->triton_rules && ps->shape.block_n) {
            char ewhy[PLAN_REASON_LEN];
            size_t len = 0;
            ok = MT_INVAL;
            for (size_t e = 0; e < rules->n_engines && ok != MT_OK; e++) {
                ok = krn_engine_keeps(rules->engines[e], &ps->shape, &cfg, ewhy, sizeof ewhy);
                if (ok != MT_OK) {
                    int w = snprintf(why + len, sizeof why - len, "%s%s", len ? "; " : "", ewhy);
                    if (w > 0) len = len + (size_t)w < sizeof why ? len + (size_t)w : sizeof why - 1;
                }
            }
        }
        if (ok == MT_OK) {
            ps->valid[ps->n_valid++] = cfg;
        } else {
            plan_rejection_t *r = &ps->rejected[ps->n_rejected++];
            r->cfg = cfg;
            snprintf(r->reason, sizeof r->reason, "%s", why);
            if (!first_why[0]) snprintf(first_why, PLAN_REASON_LEN, "%s", why);
        }
    }
}

mt_status_t plan_build_on(const Moetune__SweepSpec *spec, const plan_device_t *dev, plan_t **out, char *err,
                          size_t errlen) {
    int rc = MT_OK;
    plan_t *p = NULL;
    *out = NULL;
    rc = plan_check_spec(spec, err, errlen);
    if (rc != MT_OK) return rc;
    p = mt_calloc(1, sizeof *p);
    if (!p) goto nomem;
    rc = build_space(spec->space, &p->space, err, errlen);
    if (rc) goto out;
    p->chunk = plan_chunk(spec);
    p->sample = spec->space ? spec->space->sample : 0;
    p->max_attempts = spec->max_attempts ? spec->max_attempts : PLAN_DEFAULT_MAX_ATTEMPTS;
    plan_measure(spec, &p->measure);
    rc = plan_check_measure(p, err, errlen);
    if (rc != MT_OK) goto out;
    p->batch_sizes = mt_malloc(spec->n_batch_sizes * sizeof *p->batch_sizes);
    p->shapes = mt_calloc(spec->n_shapes, sizeof *p->shapes);
    if (!p->batch_sizes || !p->shapes) goto nomem;
    memcpy(p->batch_sizes, spec->batch_sizes, spec->n_batch_sizes * sizeof *p->batch_sizes);
    p->n_batch_sizes = spec->n_batch_sizes;

    krn_limits_t limits;
    krn_limits_default(&limits);
    const char *backend = spec->backend && *spec->backend ? spec->backend : "cuda";
    bool triton = strcmp(backend, "triton") == 0;
    if (!triton && strcmp(backend, "cuda") != 0 && strcmp(backend, "sim") != 0) {
        mt_fmt(err, errlen, "backend '%s' is not one of cuda, triton, sim", backend);
        rc = MT_INVAL;
        goto out;
    }
    const char *const *engines = NULL;
    size_t n_engines = 0;
    rc = plan_engines(spec, &engines, &n_engines, err, errlen);
    if (rc != MT_OK) goto out;
    bool cuda = strcmp(backend, "cuda") == 0 && spec->backend && *spec->backend;
    /* Triton's rules: the triton backend's, and those of a sim worker standing in for it; with
     * the shared memory of the device the sweep is planned for, when one is known. */
    bool triton_rules = triton || (strcmp(backend, "sim") == 0 && dev && dev->sim_triton);
    const krn_limits_t *tlimits = dev ? &dev->limits : NULL;
    plan_rules_line(p, backend, triton_rules, triton_rules ? dev : NULL, &limits);
    const plan_rules_t rules = {triton_rules, cuda, tlimits, &limits, engines, n_engines};
    size_t n_space = krn_space_size(&p->space);
    uint64_t n_total = (uint64_t)n_space * spec->n_shapes; /* at most 16^6 x 4096: no overflow */
    if (n_total > PLAN_MAX_CONFIGS) {
        mt_fmt(err, errlen,
               "the spec expands to %llu configs (%zu shapes x %zu configs of the space), over the limit of %u "
               "per sweep: narrow the space or submit the shapes in several sweeps",
               (unsigned long long)n_total, spec->n_shapes, n_space, PLAN_MAX_CONFIGS);
        rc = MT_INVAL;
        goto out;
    }
    char first_why[PLAN_REASON_LEN] = "";
    size_t n_empty = 0;               /* shapes with no valid config */
    const plan_shape_t *empty = NULL; /* the first of them */
    for (size_t i = 0; i < spec->n_shapes; i++) {
        plan_shape_t *ps = &p->shapes[i];
        char serr[200];
        if (wire_shape_from_msg(spec->shapes[i], &ps->shape, serr, sizeof serr)) {
            mt_fmt(err, errlen, "shape %zu: %s", i + 1, serr);
            rc = MT_INVAL;
            goto out;
        }
        p->n_shapes = i + 1;
        rc = plan_check_shape(spec, p, i, err, errlen);
        if (rc != MT_OK) goto out;
        ps->valid = mt_malloc(n_space * sizeof *ps->valid);
        ps->rejected = mt_malloc(n_space * sizeof *ps->rejected);
        if (!ps->valid || !ps->rejected) goto nomem;
        plan_judge_shape(p, ps, n_space, &rules, first_why);
        if (!ps->n_valid && !n_empty++) empty = ps;
        if (p->sample && ps->n_valid > p->sample) {
            p->configs_unsampled += (uint32_t)(ps->n_valid - p->sample);
            if (plan_sample(ps->valid, &ps->n_valid, p->sample, p->measure.seed)) goto nomem;
        }
        /* most promising first by the cost model, one BLOCK_SIZE_M after another, so every
         * job and every prefix of the sweep spans the space, an interrupted sweep's picks are
         * not biased to one corner, and racing meets a strong best early (order.h).
         * Deterministic: the same spec gives the same jobs. */
        if (ord_configs(&ps->shape, p->batch_sizes, p->n_batch_sizes, ps->valid, ps->n_valid)) goto nomem;
        p->configs_valid += (uint32_t)ps->n_valid;
        p->configs_rejected += (uint32_t)ps->n_rejected;
        p->results_planned += (uint64_t)ps->n_valid * p->n_batch_sizes;
    }
    if (n_empty == p->n_shapes) {
        mt_fmt(err, errlen, "no config of the space passes the static rules for any shape (%s)", first_why);
        rc = MT_INVAL;
        goto out;
    }
    if (empty) { /* the sweep would end 'done' without that shape's config file */
        char sh[160], more[64] = "";
        krn_shape_format(&empty->shape, sh, sizeof sh);
        if (n_empty > 1) mt_fmt(more, sizeof more, " (and %zu more shapes)", n_empty - 1);
        mt_fmt(err, errlen,
               "shape %s%s: no config of the space passes the static rules (%s); leave it out of the sweep%s", sh, more,
               empty->rejected[0].reason, /* the space is never empty: all of it was rejected */
               triton_rules ? "" : ", or tune the engines' kernel with --backend triton, which masks the edges");
        rc = MT_INVAL;
        goto out;
    }
    /* the ship guard: a listed space's one job also measures the engine's default and the incumbent */
    if (guard_plan_listed(spec, p)) goto nomem;
    if (plan_shape_chunks(p)) goto nomem;
    if (dev && dev->warm && !p->space.n_list) plan_warm(p, spec, dev); /* a listed space is measured whole */
    for (size_t i = 0; i < p->n_shapes; i++) p->jobs += (uint32_t)plan_shape_jobs(&p->shapes[i]);
    *out = p;
    return MT_OK;
nomem:
    mt_fmt(err, errlen, "out of memory");
    rc = MT_NOMEM;
out:
    plan_destroy(&p);
    return rc;
}

mt_status_t plan_count(const Moetune__SweepSpec *spec, uint32_t *valid, uint32_t *rejected, uint32_t *jobs, char *err,
                       size_t errlen) {
    plan_t *p = NULL;
    int rc = plan_build(spec, &p, err, errlen);
    if (rc) return rc;
    *valid = p->configs_valid;
    *rejected = p->configs_rejected;
    *jobs = p->jobs;
    plan_destroy(&p);
    return MT_OK;
}

/* Writes one shape's jobs from_job .. to_job - 1 (and their configs) inside the open transaction,
 * keeping their ids; from_job 0 also writes its rejections. */
static int store_shape(store_t *db, plan_shape_t *ps, uint64_t sweep_id, int64_t now, size_t from_job, size_t to_job) {
    uint64_t config_id = 0, job_id = 0;
    size_t n_jobs = plan_shape_jobs(ps);
    int rc = MT_OK;
    if (from_job == 0) {
        free(ps->config_ids);
        free(ps->job_ids);
        ps->n_jobs = 0;
        ps->config_ids = mt_calloc(ps->n_valid ? ps->n_valid : 1, sizeof *ps->config_ids);
        ps->job_ids = mt_calloc(n_jobs ? n_jobs : 1, sizeof *ps->job_ids);
        if (!ps->config_ids || !ps->job_ids) return MT_NOMEM;
        for (size_t i = 0; !rc && i < ps->n_rejected; i++) {
            rc = store_config_upsert(db, &ps->rejected[i].cfg, &config_id);
            if (!rc) rc = store_rejected_insert(db, sweep_id, ps->shape_id, config_id, ps->rejected[i].reason);
        }
    }
    for (size_t jn = from_job; !rc && jn < n_jobs && jn < to_job; jn++) {
        size_t first, n;
        plan_job_range(ps, jn, &first, &n);
        rc = store_job_insert(db, sweep_id, ps->shape_id, NULL, now, &job_id);
        if (!rc) ps->job_ids[ps->n_jobs++] = job_id;
        for (size_t i = first; !rc && i < first + n; i++) {
            rc = store_config_upsert(db, &ps->valid[i], &config_id);
            if (!rc) rc = store_job_config_insert(db, job_id, config_id);
            if (!rc) ps->config_ids[i] = config_id;
        }
    }
    return rc;
}

size_t plan_shape_jobs(const plan_shape_t *ps) {
    size_t rest = ps->n_valid - ps->n_warm;
    return (ps->n_warm ? 1 : 0) + (rest + ps->chunk - 1) / ps->chunk;
}

void plan_job_range(const plan_shape_t *ps, size_t jn, size_t *first, size_t *n) {
    size_t size = ps->n_warm && jn == 0 ? ps->n_warm : ps->chunk;
    *first = ps->n_warm ? (jn ? ps->n_warm + (jn - 1) * ps->chunk : 0) : jn * ps->chunk;
    *n = ps->n_valid - *first < size ? ps->n_valid - *first : size;
}

mt_status_t plan_write(store_t *db, const Moetune__SweepSpec *spec, plan_t *p, int64_t now, char *err, size_t errlen) {
    uint64_t sweep_id = 0;
    size_t len = moetune__sweep_spec__get_packed_size(spec);
    uint8_t *packed = mt_malloc(len ? len : 1);
    if (!packed) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    moetune__sweep_spec__pack(spec, packed);
    int rc = store_sweep_insert(db, spec->name, packed, len, now, &sweep_id);
    if (!rc && spec->routing_path && *spec->routing_path)
        rc = store_routing_insert(db, p->shapes[0].shape.routing, spec->routing_path, spec->routing_tokens,
                                  p->shapes[0].shape.topk, now);
    /* shapes keep the spec's order (ids); their jobs are stored costliest shape first */
    for (size_t i = 0; !rc && i < p->n_shapes; i++)
        rc = store_shape_upsert(db, &p->shapes[i].shape, &p->shapes[i].shape_id);
    /* a warm start's first jobs (the known picks) of every shape before any other job */
    size_t first = p->configs_warm ? 1 : SIZE_MAX;
    for (size_t i = 0; !rc && i < p->n_shapes; i++)
        rc = store_shape(db, &p->shapes[p->order[i]], sweep_id, now, 0, first);
    for (size_t i = 0; !rc && first == 1 && i < p->n_shapes; i++)
        rc = store_shape(db, &p->shapes[p->order[i]], sweep_id, now, 1, SIZE_MAX);
    if (!rc) rc = guard_write_listed(db, spec, p, sweep_id); /* the ship guard's rows (guard.h) */
    if (!rc) rc = store_sweep_set_planned(db, sweep_id, p->results_planned);
    free(packed);
    if (rc == MT_NOMEM) {
        mt_fmt(err, errlen, "out of memory");
        return rc;
    }
    if (rc) {
        mt_fmt(err, errlen, "storing the sweep: %s", store_errmsg(db));
        return rc;
    }
    p->sweep_id = sweep_id;
    p->created = now;
    return MT_OK;
}
