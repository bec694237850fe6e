/* guard.c - the ship guard's configs in a sweep's last side-by-side step. See guard.h. */
#include "guard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "mt.h"

/* ---- the engines' default configs (get_default_config; shared/ENGINES.md) */

static krn_config_t cfg6(uint32_t bm, uint32_t bn, uint32_t bk, uint32_t gm, uint32_t w, uint32_t st) {
    return (krn_config_t){.block_m = bm, .block_n = bn, .block_k = bk, .group_m = gm, .num_warps = w, .num_stages = st};
}

/* bf16/fp16 (and vLLM's fp8 per tensor): 64/64/32 GROUP 8, or 16/32/64 GROUP 1 when M <= E;
 * warps and stages left to Triton. */
static const char *plain_default(const char *engine, const krn_shape_t *sh, uint32_t m, krn_config_t *out) {
    bool small = m <= sh->e;
    *out = small ? cfg6(16, 32, 64, 1, GUARD_TRITON_WARPS, GUARD_TRITON_STAGES)
                 : cfg6(64, 64, 32, 8, GUARD_TRITON_WARPS, GUARD_TRITON_STAGES);
    if (strcmp(engine, "vllm") == 0)
        return small ? "vllm get_default_config, M <= E" : "vllm get_default_config, M > E";
    return small ? "sglang get_default_config, M <= E" : "sglang get_default_config, M > E";
}

/* vLLM's newer heuristic (its 2026 fused_moe.py): tiles grow with M; fp8 with a block shape keeps
 * BLOCK_SIZE_K and narrows BLOCK_SIZE_N to 64 for M <= 8. */
static const char *vllm_next_default(const krn_shape_t *sh, uint32_t m, krn_config_t *out) {
    bool fp8 = strcmp(sh->dtype, "fp8_w8a8") == 0;
    if (fp8 && sh->block_n && sh->block_k) {
        bool narrow = m <= 8 && sh->block_n % 64 == 0;
        *out = cfg6(m <= 64 ? 16 : 64, narrow ? 64 : sh->block_n, sh->block_k, m <= 16 ? 1 : 32, 4,
                    narrow && m <= 4 ? 4 : 3);
        return "vllm-2026 get_default_config, fp8 block-wise";
    }
    uint32_t bm = m <= 32 ? 16 : m <= 96 ? 32 : m <= 512 ? 64 : 128;
    uint32_t per_expert = sh->e ? m / sh->e : m;
    *out = cfg6(bm, m <= 64 ? 64 : 128, fp8 || m <= 64 ? 128 : 64, per_expert > 128 ? 16 : 1, m <= 128 ? 4 : 8,
                m <= 32 ? 4 : 3);
    return "vllm-2026 get_default_config, by M";
}

mt_status_t guard_default_config(const char *engine, const krn_shape_t *sh, uint32_t m, krn_config_t *out,
                                 const char **rule) {
    if (engine && strcmp(engine, "vllm-2026") == 0) {
        *rule = vllm_next_default(sh, m, out);
        return MT_OK;
    }
    bool sglang = engine && strcmp(engine, "sglang") == 0, vllm = engine && strcmp(engine, "vllm") == 0;
    if (!sglang && !vllm) return MT_INVAL;
    bool fp8 = strcmp(sh->dtype, "fp8_w8a8") == 0, block = sh->block_n && sh->block_k;
    if (fp8 && block) { /* both engines: BLOCK_SIZE_N and _K from the block shape */
        *out = cfg6(64, sh->block_n, sh->block_k, 32, 4, 3);
        *rule = sglang ? "sglang get_default_config, fp8 block-wise" : "vllm get_default_config, fp8 block-wise";
    } else if (fp8 && sglang) { /* SGLang's fp8 per tensor has its own */
        bool small = m <= sh->e;
        *out = small ? cfg6(64, 128, 128, 1, 4, 4) : cfg6(128, 256, 128, 32, 8, 4);
        *rule = small ? "sglang get_default_config, fp8, M <= E" : "sglang get_default_config, fp8, M > E";
    } else {
        *rule = plain_default(engine, sh, m, out);
    }
    return MT_OK;
}

size_t guard_default_rules(const char *engine, const char *rules[2]) {
    if (!engine || (strcmp(engine, "sglang") != 0 && strcmp(engine, "vllm") != 0)) return 0;
    rules[0] = engine;
    if (strcmp(engine, "sglang") == 0) return 1;
    rules[1] = "vllm-2026";
    return 2;
}

uint32_t guard_nearest_key(const uint32_t *keys, size_t n, uint32_t m) {
    uint32_t best = 0;
    uint64_t best_d = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        uint64_t d = keys[i] > m ? (uint64_t)keys[i] - m : (uint64_t)m - keys[i];
        if (d < best_d || (d == best_d && keys[i] < best)) {
            best = keys[i];
            best_d = d;
        }
    }
    return best;
}

size_t guard_engines(const Moetune__SweepSpec *spec, const char *names[2]) {
    size_t n = 0;
    for (size_t i = 0; spec && i < spec->n_engines && n < 2; i++) {
        const char *e = spec->engines[i] ? spec->engines[i] : "";
        if ((strcmp(e, "sglang") == 0 || strcmp(e, "vllm") == 0) && !(n == 1 && strcmp(names[0], e) == 0))
            names[n++] = strcmp(e, "sglang") == 0 ? "sglang" : "vllm";
    }
    if (n) return n;
    names[n++] = "sglang";
    if (spec && spec->backend && strcmp(spec->backend, "triton") == 0) names[n++] = "vllm";
    return n;
}

/* ---- planning */

/* One guard config of a batch size. */
typedef struct {
    krn_config_t cfg;
    const char *role, *engine;
    char source[256];
} want_t;

/* The index of shape in spec's shapes (dtype and block shape included), or -1. */
static int spec_shape(const Moetune__SweepSpec *spec, const krn_shape_t *sh) {
    for (size_t i = 0; i < spec->n_shapes; i++) {
        krn_shape_t s;
        char why[128];
        if (wire_shape_from_msg(spec->shapes[i], &s, why, sizeof why) != MT_OK) continue;
        if (s.e == sh->e && s.n == sh->n && s.k == sh->k && s.topk == sh->topk && strcmp(s.dtype, sh->dtype) == 0 &&
            s.block_n == sh->block_n && s.block_k == sh->block_k)
            return (int)i;
    }
    return -1;
}

/* An entry of no engine ("": a file given by itself) stands for every engine's. */
static bool engine_fits(const Moetune__Incumbent *in, const char *engine) {
    return !in->engine || !*in->engine || strcmp(in->engine, engine) == 0;
}

/* The incumbent entry of engine's file for shape si at m (nearest key), into w; false when
 * the spec has none. */
static bool incumbent_at(const Moetune__SweepSpec *spec, int si, const char *engine, uint32_t m, want_t *w) {
    uint32_t keys[256];
    size_t nk = 0;
    for (size_t i = 0; i < spec->n_incumbents && nk < 256; i++) {
        const Moetune__Incumbent *in = spec->incumbents[i];
        if ((int)in->shape == si && in->config && engine_fits(in, engine)) keys[nk++] = in->key;
    }
    if (!nk) return false;
    uint32_t key = guard_nearest_key(keys, nk, m);
    for (size_t i = 0; i < spec->n_incumbents; i++) {
        const Moetune__Incumbent *in = spec->incumbents[i];
        if ((int)in->shape != si || !in->config || in->key != key || !engine_fits(in, engine)) continue;
        wire_config_from_msg(in->config, &w->cfg);
        w->role = "incumbent";
        w->engine = engine;
        mt_fmt(w->source, sizeof w->source, "%s, key %u", in->source && *in->source ? in->source : "file", key);
        return true;
    }
    return false;
}

/* Guard rows sort first within their batch size, then rows as ranked (median, config id). */
static int cmp_guard_first(const void *a, const void *b) {
    const halving_row_t *x = a, *y = b;
    if (x->bi != y->bi) return x->bi < y->bi ? -1 : 1;
    if (x->guard != y->guard) return x->guard ? -1 : 1;
    if (x->median_us != y->median_us) return x->median_us < y->median_us ? -1 : 1;
    return (x->config_id > y->config_id) - (x->config_id < y->config_id);
}

static bool listed(const Moetune__SweepSpec *spec, const krn_config_t *c);

/* Whether the search measured config c (id cid) of the shape: a listed space's own list, since
 * the guard's configs join its jobs; else whether a first-pass job held it. */
static int searched_by(store_t *db, const Moetune__SweepSpec *spec, uint64_t sweep_id, uint64_t shape_id,
                       const krn_config_t *c, uint64_t cid, bool *searched) {
    if (spec->space && spec->space->n_configs) {
        *searched = listed(spec, c);
        return MT_OK;
    }
    return store_config_searched(db, sweep_id, shape_id, cid, searched);
}

/* Stores guard config w for batch size bsz: the config (its id in *cid), whether the search
 * measured it (*searched, searched_by), and its guard row. */
static int put_want(store_t *db, const Moetune__SweepSpec *spec, uint64_t sweep_id, uint64_t shape_id, uint32_t bsz,
                    const want_t *w, uint64_t *cid, bool *searched) {
    int rc = store_config_upsert(db, &w->cfg, cid);
    if (!rc) rc = searched_by(db, spec, sweep_id, shape_id, &w->cfg, *cid, searched);
    store_guard_row_t row = {.sweep_id = sweep_id,
                             .shape_id = shape_id,
                             .config_id = *cid,
                             .batch_size = bsz,
                             .role = w->role,
                             .engine = w->engine,
                             .searched = *searched,
                             .source = w->source};
    if (!rc) rc = store_guard_put(db, &row);
    return rc;
}

/* Records batch size b's guard configs w[0..nw) and marks them (and the best) in the rows. */
static int mark_size(store_t *db, const Moetune__SweepSpec *spec, uint64_t sweep_id, uint64_t shape_id, uint32_t bsz,
                     uint32_t b, const want_t *w, size_t nw, halving_row_t **rows, size_t *n, size_t *cap,
                     guard_step_t *out) {
    int rc = MT_OK;
    halving_row_t *best = NULL;
    for (size_t i = 0; i < *n; i++)
        if ((*rows)[i].bi == b && (!best || (*rows)[i].rank < best->rank)) best = &(*rows)[i];
    uint64_t best_id = best ? best->config_id : 0;
    bool differs = false, best_was = best && best->finalist;
    for (size_t g = 0; !rc && g < nw; g++) {
        uint64_t cid = 0;
        bool searched = false;
        rc = put_want(db, spec, sweep_id, shape_id, bsz, &w[g], &cid, &searched);
        if (rc) break;
        out->rows++;
        differs = differs || cid != best_id;
        halving_row_t *have = NULL;
        for (size_t i = 0; i < *n && !have; i++)
            if ((*rows)[i].bi == b && (*rows)[i].config_id == cid) have = &(*rows)[i];
        if (!have) {
            if (mt_grow((void **)rows, cap, *n + 1, sizeof **rows, 64) != MT_OK) return MT_NOMEM;
            have = &(*rows)[(*n)++];
            *have = (halving_row_t){.config_id = cid, .bi = b};
            out->new_rows += !searched;
        }
        if (!have->finalist) out->finalists++;
        have->finalist = true;
        have->guard = true;
        /* a grown array moved: find the best again by id */
        best = NULL;
        for (size_t i = 0; i < *n && best_id && !best; i++)
            if ((*rows)[i].bi == b && (*rows)[i].config_id == best_id) best = &(*rows)[i];
    }
    if (!rc && differs && best && !best->finalist) {
        best->finalist = true;
        out->finalists++;
    } else if (!rc && !differs && best && !best_was) {
        best->finalist = false; /* the guard's config is the best: nothing to compare it with */
        out->finalists--;
    }
    return rc;
}

/* The guard configs of (shape si of spec, batch size m) for engines[0..ne) into w (GUARD_MAX). */
static size_t wants_at(const Moetune__SweepSpec *spec, int si, const krn_shape_t *sh, uint32_t m,
                       const char *const *engines, size_t ne, want_t *w) {
    size_t nw = 0;
    for (size_t e = 0; e < ne; e++) {
        const char *rules[2];
        size_t nr = guard_default_rules(engines[e], rules);
        if (!nr) continue;
        for (size_t r = 0; r < nr; r++) { /* vLLM: which rule runs depends on its release, so both */
            const char *rule = "";
            memset(&w[nw], 0, sizeof w[nw]);
            guard_default_config(rules[r], sh, m, &w[nw].cfg, &rule);
            w[nw].role = "default";
            w[nw].engine = rules[r];
            mt_fmt(w[nw].source, sizeof w[nw].source, "%s", rule);
            nw++;
        }
        if (si >= 0 && incumbent_at(spec, si, engines[e], m, &w[nw])) nw++;
    }
    return nw;
}

mt_status_t guard_advance(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                          halving_row_t **rows, size_t *n, size_t *cap, guard_step_t *out) {
    void *blob = NULL;
    size_t len = 0;
    Moetune__SweepSpec *spec = NULL;
    krn_shape_t sh;
    memset(out, 0, sizeof *out);
    int rc = store_sweep_spec_get(db, sweep_id, &blob, &len);
    if (!rc) rc = store_shape_get(db, shape_id, &sh);
    if (!rc) {
        spec = moetune__sweep_spec__unpack(NULL, len, blob);
        if (!spec) rc = MT_INVAL;
    }
    const char *engines[2];
    size_t ne = rc || spec->no_guard ? 0 : guard_engines(spec, engines);
    int si = rc ? -1 : spec_shape(spec, &sh);
    if (si < 0) ne = 0; /* a shape its spec does not name: nothing is known of its engines */
    for (uint32_t b = 0; !rc && ne && b < nb; b++) {
        want_t w[GUARD_MAX];
        size_t nw = wants_at(spec, si, &sh, bs[b], engines, ne, w);
        rc = mark_size(db, spec, sweep_id, shape_id, bs[b], b, w, nw, rows, n, cap, out);
    }
    if (!rc && *n) qsort(*rows, *n, sizeof **rows, cmp_guard_first);
    moetune__sweep_spec__free_unpacked(spec, NULL);
    free(blob);
    return rc;
}

/* ---- a listed space: the guard's configs join its one job a shape */

static bool listed(const Moetune__SweepSpec *spec, const krn_config_t *c) {
    for (size_t i = 0; spec->space && i < spec->space->n_configs; i++) {
        krn_config_t l;
        wire_config_from_msg(spec->space->configs[i], &l);
        if (memcmp(&l, c, sizeof l) == 0) return true;
    }
    return false;
}

mt_status_t guard_plan_listed(const Moetune__SweepSpec *spec, plan_t *p) {
    if (!spec->space || !spec->space->n_configs || spec->no_guard) return MT_OK;
    const char *engines[2];
    size_t ne = guard_engines(spec, engines);
    uint32_t most = 0;
    for (size_t i = 0; i < p->n_shapes; i++) {
        plan_shape_t *ps = &p->shapes[i];
        for (size_t b = 0; b < p->n_batch_sizes; b++) {
            want_t w[GUARD_MAX];
            size_t nw = wants_at(spec, (int)i, &ps->shape, p->batch_sizes[b], engines, ne, w);
            for (size_t g = 0; g < nw; g++) {
                bool have = false;
                for (size_t k = 0; k < ps->n_valid && !have; k++)
                    have = memcmp(&ps->valid[k], &w[g].cfg, sizeof w[g].cfg) == 0;
                if (have) continue;
                krn_config_t *v = mt_realloc(ps->valid, (ps->n_valid + 1) * sizeof *v);
                if (!v) return MT_NOMEM;
                ps->valid = v;
                ps->valid[ps->n_valid++] = w[g].cfg;
                p->configs_valid++;
                p->results_planned += p->n_batch_sizes;
            }
        }
        if (ps->n_valid > most) most = (uint32_t)ps->n_valid;
    }
    if (p->chunk && most > p->chunk) p->chunk = most; /* one side-by-side job a shape, as listed */
    return MT_OK;
}

mt_status_t guard_write_listed(store_t *db, const Moetune__SweepSpec *spec, const plan_t *p, uint64_t sweep_id) {
    if (!spec->space || !spec->space->n_configs || spec->no_guard) return MT_OK;
    const char *engines[2];
    size_t ne = guard_engines(spec, engines);
    int rc = MT_OK;
    for (size_t i = 0; !rc && i < p->n_shapes; i++) {
        const plan_shape_t *ps = &p->shapes[i];
        for (size_t b = 0; !rc && b < p->n_batch_sizes; b++) {
            want_t w[GUARD_MAX];
            size_t nw = wants_at(spec, (int)i, &ps->shape, p->batch_sizes[b], engines, ne, w);
            for (size_t g = 0; !rc && g < nw; g++) {
                uint64_t cid = 0;
                rc = store_config_upsert(db, &w[g].cfg, &cid);
                store_guard_row_t row = {.sweep_id = sweep_id,
                                         .shape_id = ps->shape_id,
                                         .config_id = cid,
                                         .batch_size = p->batch_sizes[b],
                                         .role = w[g].role,
                                         .engine = w[g].engine,
                                         .searched = listed(spec, &w[g].cfg),
                                         .source = w[g].source};
                if (!rc) rc = store_guard_put(db, &row);
            }
        }
    }
    return rc;
}

/* ---- the batch sizes between the keys */

typedef struct {
    uint64_t cfg;
    uint32_t m;
    double us, sd;
} side_t;

typedef struct {
    uint64_t cfg;
    uint32_t m;
    char role[12];
    bool searched;
} grow_t;

/* What a shape's side-by-side step and switch points measured, and its guard rows. */
typedef struct {
    side_t *side;
    size_t n_side, cap_side;
    grow_t *g;
    size_t n_g, cap_g;
} seen_t;

static mt_status_t seen_side(void *ctx, uint64_t cfg, uint32_t m, double us, double sd) {
    seen_t *s = ctx;
    if (mt_grow((void **)&s->side, &s->cap_side, s->n_side + 1, sizeof *s->side, 64) != MT_OK) return MT_NOMEM;
    s->side[s->n_side++] = (side_t){cfg, m, us, sd};
    return MT_OK;
}

static mt_status_t seen_guard(void *ctx, uint32_t m, uint64_t cfg, const char *role, bool searched) {
    seen_t *s = ctx;
    if (mt_grow((void **)&s->g, &s->cap_g, s->n_g + 1, sizeof *s->g, 64) != MT_OK) return MT_NOMEM;
    grow_t *r = &s->g[s->n_g++];
    *r = (grow_t){.cfg = cfg, .m = m, .searched = searched};
    mt_fmt(r->role, sizeof r->role, "%s", role);
    return MT_OK;
}

/* Whether a guard row of role (NULL: any) holds cfg (0: any) at m (0: at any batch size); with
 * any_searched false, only rows with searched = 0 count. */
static bool seen_role(const seen_t *s, uint32_t m, uint64_t cfg, const char *role, bool any_searched) {
    for (size_t i = 0; i < s->n_g; i++) {
        const grow_t *r = &s->g[i];
        if ((!m || r->m == m) && (!cfg || r->cfg == cfg) && (!role || strcmp(r->role, role) == 0) &&
            (any_searched || !r->searched))
            return true;
    }
    return false;
}

/* Per batch size of the sweep, its searched pick so far: the fastest ok row of the latest phase
 * there whose config is not one of the guard's outside the searched space. */
typedef struct {
    const seen_t *seen; /* the shape's guard rows */
    const uint32_t *bs;
    size_t nb;
    uint64_t *cfg;
    double *us;
    uint32_t phase;
    bool *from2; /* the batch size has a phase-2 row: phase 1 does not decide there */
} picks_t;

static mt_status_t pick_row(void *ctx, uint64_t config_id, uint32_t batch_size, double median_us, uint64_t device_id,
                            double min_us) {
    picks_t *p = ctx;
    (void)device_id, (void)min_us;
    if (seen_role(p->seen, 0, config_id, NULL, false)) return MT_OK; /* measured only because of the guard */
    for (size_t i = 0; i < p->nb; i++) {
        if (p->bs[i] != batch_size || !(median_us > 0)) continue;
        if (p->phase == 1 && p->from2[i]) return MT_OK;
        if (p->phase == 2) p->from2[i] = true;
        if (!p->cfg[i] || median_us < p->us[i] || (median_us == p->us[i] && config_id < p->cfg[i]))
            p->cfg[i] = config_id, p->us[i] = median_us;
    }
    return MT_OK;
}

/* One switch point's job under construction: its configs (deduplicated) and its context. */
typedef struct {
    store_t *db;
    const Moetune__SweepSpec *spec;
    int si;
    const krn_shape_t *sh;
    uint64_t sweep_id, shape_id;
    uint32_t m;
    const char *const *engines;
    size_t ne;
    uint64_t ids[2 * (GUARD_MAX + 1) + GUARD_MAX];
    size_t n_ids;
} gap_t;

static void gap_keep(gap_t *g, uint64_t cid) {
    for (size_t k = 0; k < g->n_ids; k++)
        if (g->ids[k] == cid) return;
    g->ids[g->n_ids++] = cid;
}

/* Records at g's switch point, with role ("nearest": the key whose entry the engine takes there;
 * "other": the other neighbour), every config key could ship: its searched pick, and the guard's
 * configs of key (the defaults and the incumbent entry at M = key), since export may ship either. */
static int gap_key(gap_t *g, const char *role, uint32_t key, uint64_t pick) {
    char src[300];
    krn_config_t kc;
    bool searched = false;
    mt_fmt(src, sizeof src, "key %u's pick", key);
    int rc = store_config_get(g->db, pick, &kc);
    if (!rc) rc = searched_by(g->db, g->spec, g->sweep_id, g->shape_id, &kc, pick, &searched);
    store_guard_row_t row = {.sweep_id = g->sweep_id,
                             .shape_id = g->shape_id,
                             .config_id = pick,
                             .batch_size = g->m,
                             .role = role,
                             .engine = "",
                             .searched = searched,
                             .source = src};
    if (!rc) rc = store_guard_put(g->db, &row);
    gap_keep(g, pick);
    want_t w[GUARD_MAX];
    size_t nw = wants_at(g->spec, g->si, g->sh, key, g->engines, g->ne, w);
    for (size_t i = 0; !rc && i < nw; i++) {
        char engine[48];
        mt_fmt(engine, sizeof engine, "%s-%s", w[i].engine, w[i].role); /* one row per engine and role */
        mt_fmt(src, sizeof src, "key %u's %s (%s)", key, w[i].role, w[i].source);
        want_t k = w[i];
        k.role = role, k.engine = engine;
        mt_fmt(k.source, sizeof k.source, "%s", src);
        uint64_t cid = 0;
        rc = put_want(g->db, g->spec, g->sweep_id, g->shape_id, g->m, &k, &cid, &searched);
        if (!rc) gap_keep(g, cid);
    }
    return rc;
}

/* Stores one switch point m's job (phase 2, side by side): every config either neighbour key
 * could ship (gap_key), and the defaults and incumbent at m itself; and its guard rows. */
static int plan_gap(gap_t *g, uint32_t m, uint32_t near_key, uint64_t near, uint32_t other_key, uint64_t other,
                    int64_t now_s, halving_step_t *out) {
    want_t w[GUARD_MAX];
    char text[16];
    uint64_t job_id = 0;
    g->m = m;
    g->n_ids = 0;
    size_t nw = wants_at(g->spec, g->si, g->sh, m, g->engines, g->ne, w);
    mt_fmt(text, sizeof text, "%u", m);
    int rc = store_job_insert_phase(g->db, g->sweep_id, g->shape_id, 2, text, NULL, now_s, &job_id);
    if (!rc) rc = gap_key(g, "nearest", near_key, near);
    if (!rc) rc = gap_key(g, "other", other_key, other);
    for (size_t i = 0; !rc && i < nw; i++) {
        uint64_t cid = 0;
        bool searched = false;
        rc = put_want(g->db, g->spec, g->sweep_id, g->shape_id, m, &w[i], &cid, &searched);
        if (!rc) gap_keep(g, cid);
    }
    for (size_t k = 0; !rc && k < g->n_ids; k++) rc = store_job_config_insert(g->db, job_id, g->ids[k]);
    if (!rc) {
        out->jobs++;
        out->finalists += (uint32_t)g->n_ids;
        out->guard_new += (uint32_t)g->n_ids; /* a batch size of no key: every row is new */
    }
    return rc;
}

/* Whether the engine may switch configs between keys b and b + 1: unless both picks are one
 * config and no guard config differs from it there, the entries the file ships may differ. */
static bool may_switch(const gap_t *g, const picks_t *p, size_t b) {
    if (!p->cfg[b] || !p->cfg[b + 1]) return false;
    if (p->cfg[b] != p->cfg[b + 1]) return true;
    for (size_t k = b; k <= b + 1; k++) {
        want_t w[GUARD_MAX];
        size_t nw = wants_at(g->spec, g->si, g->sh, p->bs[k], g->engines, g->ne, w);
        krn_config_t pick;
        if (nw && store_config_get(g->db, p->cfg[k], &pick) != MT_OK) return true;
        for (size_t i = 0; i < nw; i++)
            if (memcmp(&w[i].cfg, &pick, sizeof pick) != 0) return true;
    }
    return false;
}

/* ---- further rounds: a key added between two keys moves the engine's switch points */

/* The rounds of switch points a shape gets: the first, and at most GUARD_GAP_ROUNDS - 1 more. */
#define GUARD_GAP_ROUNDS 3

static const side_t *row_of(const seen_t *s, uint32_t m, uint64_t cfg) {
    for (size_t i = 0; i < s->n_side; i++)
        if (s->side[i].m == m && s->side[i].cfg == cfg) return &s->side[i];
    return NULL;
}

/* As export ranks: the fastest row at m that may be a pick (a guard-only config only where it is
 * the default's or the incumbent's there). */
static const side_t *best_at(const seen_t *s, uint32_t m) {
    const side_t *best = NULL;
    for (size_t i = 0; i < s->n_side; i++) {
        const side_t *r = &s->side[i];
        if (r->m != m || (best && (r->us > best->us || (r->us == best->us && r->cfg > best->cfg)))) continue;
        bool only = seen_role(s, 0, r->cfg, NULL, false);
        if (!only || seen_role(s, m, r->cfg, "default", true) || seen_role(s, m, r->cfg, "incumbent", true)) best = r;
    }
    return best;
}

/* Whether other is not beaten by best beyond the noise (export's rule, exp_margin_sd under MT_NEAR_TIE_SD). */
static bool within_noise(const side_t *best, const side_t *other) {
    double sd = sqrt(best->sd * best->sd + other->sd * other->sd);
    return other->us <= best->us || (sd > 0 && (other->us - best->us) / sd < MT_NEAR_TIE_SD);
}

/* The config export ships at m as a key: the incumbent's where it holds, else the default's, else
 * the best; 0 when nothing was measured there. */
static uint64_t ship_at(const seen_t *s, uint32_t m) {
    static const char *const roles[2] = {"incumbent", "default"};
    const side_t *b = best_at(s, m);
    for (size_t k = 0; b && k < 2; k++) {
        const side_t *f = NULL;
        for (size_t i = 0; i < s->n_g; i++) {
            const side_t *r = s->g[i].m == m && !strcmp(s->g[i].role, roles[k]) ? row_of(s, m, s->g[i].cfg) : NULL;
            if (r && (!f || r->us < f->us)) f = r;
        }
        if (f && within_noise(b, f)) return f->cfg;
    }
    return b ? b->cfg : 0;
}

/* Whether export adds a key at switch point m where the engine runs config near: it was measured
 * there and the best beats it beyond the noise. */
static bool added_at(const seen_t *s, uint32_t m, uint64_t near) {
    const side_t *n = row_of(s, m, near), *b = best_at(s, m);
    return n && b && b->cfg != near && !within_noise(b, n);
}

/* One key of the file as export would write it: its batch size, config, and searched pick. */
typedef struct {
    uint32_t key;
    uint64_t cfg, pick;
} lkey_t;

static int lay_insert(lkey_t **lay, size_t *n, size_t *cap, uint32_t key, uint64_t cfg, uint64_t pick) {
    if (mt_grow((void **)lay, cap, *n + 1, sizeof **lay, 16) != MT_OK) return MT_NOMEM;
    size_t at = *n;
    while (at > 0 && (*lay)[at - 1].key > key) at--;
    memmove(&(*lay)[at + 1], &(*lay)[at], (*n - at) * sizeof **lay);
    (*lay)[at] = (lkey_t){key, cfg, pick};
    (*n)++;
    return MT_OK;
}

/* One round over layout lay[0..n): plans the switch points not yet measured (within the rounds'
 * bound), else collects into add[] the measured points export would make keys. */
static int round_once(gap_t *g, const seen_t *s, const lkey_t *lay, size_t n, bool may_plan, uint32_t *add,
                      size_t *n_add, bool *unmeasured, int64_t now_s, halving_step_t *out) {
    int rc = MT_OK;
    *n_add = 0;
    *unmeasured = false;
    for (size_t i = 0; !rc && i + 1 < n; i++) {
        uint32_t k1 = lay[i].key, k2 = lay[i + 1].key, mid = k1 + (k2 - k1) / 2;
        if (lay[i].cfg == lay[i + 1].cfg) continue; /* one config: the engine switches nothing */
        for (uint32_t pt = mid; !rc && pt <= mid + 1; pt++) {
            if (pt <= k1 || pt >= k2) continue;
            const lkey_t *near = pt <= mid ? &lay[i] : &lay[i + 1], *other = pt <= mid ? &lay[i + 1] : &lay[i];
            if (!seen_role(s, pt, 0, "nearest", true)) {
                if (may_plan) rc = plan_gap(g, pt, near->key, near->pick, other->key, other->pick, now_s, out);
                *unmeasured = true;
            } else if (added_at(s, pt, near->cfg)) {
                add[(*n_add)++] = pt;
            }
        }
    }
    return rc;
}

/* Later rounds: from what was measured, the file export would write (its keys' configs and the
 * switch points it would add as keys); its switch points not yet measured are planned, as long
 * as they lie within GUARD_GAP_ROUNDS rounds (beyond, export lists them unchecked). s holds the
 * shape's guard rows; its side-by-side rows are read into it here. */
static int rounds_advance(gap_t *g, const picks_t *p, seen_t *s, int64_t now_s, halving_step_t *out) {
    lkey_t *lay = NULL;
    size_t n = 0, cap = 0;
    uint32_t *add = NULL;
    int rc = store_side_rows_each(g->db, g->sweep_id, g->shape_id, seen_side, s);
    for (size_t b = 0; !rc && b < p->nb; b++) {
        uint64_t cfg = ship_at(s, p->bs[b]);
        if (p->cfg[b]) rc = lay_insert(&lay, &n, &cap, p->bs[b], cfg ? cfg : p->cfg[b], p->cfg[b]);
    }
    for (int round = 1; !rc && n; round++) {
        size_t n_add = 0;
        bool unmeasured = false;
        uint32_t *a = mt_realloc(add, 2 * n * sizeof *add);
        if (!a) {
            rc = MT_NOMEM;
            break;
        }
        add = a;
        rc = round_once(g, s, lay, n, round <= GUARD_GAP_ROUNDS, add, &n_add, &unmeasured, now_s, out);
        if (rc || unmeasured || !n_add) break; /* planned (or past the bound), or the file is final */
        for (size_t i = 0; !rc && i < n_add; i++) {
            const side_t *b = best_at(s, add[i]);
            rc = lay_insert(&lay, &n, &cap, add[i], ship_at(s, add[i]), b ? b->cfg : 0);
        }
    }
    free(add);
    free(lay);
    return rc;
}

mt_status_t guard_gaps_advance(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                               int64_t now_s, halving_step_t *out) {
    void *blob = NULL;
    size_t len = 0;
    Moetune__SweepSpec *spec = NULL;
    krn_shape_t sh;
    seen_t seen = {0};
    memset(out, 0, sizeof *out);
    out->already = true;
    picks_t p = {.seen = &seen,
                 .bs = bs,
                 .nb = nb,
                 .cfg = mt_calloc(nb + 1, sizeof *p.cfg),
                 .us = mt_calloc(nb + 1, sizeof *p.us),
                 .from2 = mt_calloc(nb + 1, sizeof *p.from2)};
    int rc = p.cfg && p.us && p.from2 ? MT_OK : MT_NOMEM;
    if (!rc) rc = store_sweep_spec_get(db, sweep_id, &blob, &len);
    if (!rc) rc = store_shape_get(db, shape_id, &sh);
    if (!rc) {
        spec = moetune__sweep_spec__unpack(NULL, len, blob);
        if (!spec) rc = MT_INVAL;
    }
    int si = spec ? spec_shape(spec, &sh) : -1;
    if (!rc && spec && !spec->no_guard && si >= 0) {
        const char *engines[2];
        gap_t g = {.db = db,
                   .spec = spec,
                   .si = si,
                   .sh = &sh,
                   .sweep_id = sweep_id,
                   .shape_id = shape_id,
                   .engines = engines,
                   .ne = guard_engines(spec, engines)};
        rc = store_guard_rows_each(db, sweep_id, shape_id, seen_guard, &seen);
        bool have = seen_role(&seen, 0, 0, "nearest", true); /* the first round was planned */
        p.phase = 2;
        if (!rc) rc = store_phase_rows_each(db, sweep_id, shape_id, 2, pick_row, &p);
        p.phase = 1;
        if (!rc) rc = store_phase_rows_each(db, sweep_id, shape_id, 1, pick_row, &p);
        if (!rc && have) rc = rounds_advance(&g, &p, &seen, now_s, out); /* a later round */
        /* the engine takes key b's entry up to mid (a tie: the smaller key), key b + 1's after */
        for (size_t b = 0; !rc && !have && b + 1 < nb; b++) {
            uint32_t k1 = bs[b], k2 = bs[b + 1], mid = k1 + (k2 - k1) / 2;
            if (!may_switch(&g, &p, b)) continue; /* one config either side: no switch */
            if (mid > k1) rc = plan_gap(&g, mid, k1, p.cfg[b], k2, p.cfg[b + 1], now_s, out);
            if (!rc && mid + 1 < k2) rc = plan_gap(&g, mid + 1, k2, p.cfg[b + 1], k1, p.cfg[b], now_s, out);
        }
        if (!rc && out->guard_new) rc = store_sweep_add_planned(db, sweep_id, out->guard_new);
        out->already = !out->jobs; /* jobs planned: once they are done, the next round (guard.h) */
    }
    moetune__sweep_spec__free_unpacked(spec, NULL);
    free(blob);
    free(p.cfg);
    free(p.us);
    free(p.from2);
    free(seen.side);
    free(seen.g);
    return rc;
}

mt_status_t guard_gap_bs_parse(const char *text, uint32_t **out, size_t *n) {
    uint32_t m = 0;
    *out = NULL;
    *n = 0;
    if (!text || mt_parse_u32(text, 1, PLAN_MAX_BATCH, &m) != MT_OK) return MT_INVAL;
    *out = mt_malloc(sizeof **out);
    if (!*out) return MT_NOMEM;
    **out = m;
    *n = 1;
    return MT_OK;
}
