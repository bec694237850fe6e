/* export_engine.c - the engine layouts (export.h "With an engine"): the best row per
 * (group, batch size), the up/down pairs of a split, the files' names and records. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine_check.h"
#include "export_int.h"
#include "export_layout.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "query.h"
#include "states.h"

/* ---- engine layouts (export.h "With an engine"; names in export_layout.c) */

#define MAX_SPLIT_BM 8

/* Best up and best down timing among the rows with one BLOCK_SIZE_M. */
typedef struct {
    uint32_t bm;
    dbq_result_t up, down;
    bool has_up, has_down;
} split_t;

/* What one (group, shape, batch size) needs: the best whole-layer row and, per
 * BLOCK_SIZE_M, the best rows of each GEMM alone. */
typedef struct {
    char *versions; /* owned; the rows' versions point here */
    uint64_t shape_id;
    uint32_t bs;
    dbq_result_t best;
    dbq_result_t second; /* the best row of another config: the runner-up (near ties) */
    bool has_second;
    split_t split[MAX_SPLIT_BM];
    size_t n_split;
    const split_t *pair; /* the chosen pair, set when the file is split */
    split_t guard_pair;  /* the ship guard's config for both GEMMs, where it beats the pair (shipguard.h) */
    bool dropped;        /* between two keys, where the engine's entry holds: no key */
} cell_t;

typedef struct {
    cell_t *cells;
    size_t n, cap;
    size_t last;            /* cell of the previous row: rows come grouped */
    char other_backend[16]; /* first non-triton row seen */
    uint64_t other_sweep;
    int rc_detail;            /* MT_INVAL when a row had too many BLOCK_SIZE_M values */
    char bad[400];            /* why a row was refused */
    exp_engine_t engine;      /* rows of configs this engine cannot run are not its */
    const shipguard_t *guard; /* rows measured only because of the guard are no pick (shipguard.h) */
} eng_t;

/* Rows alike in all that decides a file: one Triton build, kernel, versions, device, shape. */
static bool same_group(const dbq_result_t *a, const char *av, const dbq_result_t *b, const char *bv) {
    return a->shape_id == b->shape_id && strcmp(a->compiler, b->compiler) == 0 &&
           strcmp(a->kernel_hash, b->kernel_hash) == 0 && strcmp(a->device_name, b->device_name) == 0 &&
           strcmp(av, bv) == 0;
}

static bool cell_is(const cell_t *c, const dbq_result_t *r) {
    return c->bs == r->batch_size && same_group(&c->best, c->versions, r, r->versions);
}

static bool row_better(const dbq_result_t *a, double ta, const dbq_result_t *b, double tb) {
    return ta < tb || (ta == tb && a->config_id < b->config_id);
}

static void keep_row(dbq_result_t *dst, const dbq_result_t *src, const char *versions) {
    *dst = *src;
    dst->versions = versions;
}

static mt_status_t reduce_row(void *ctx, const dbq_result_t *r) {
    eng_t *g = ctx;
    if (exp_check_row(r, g->bad, sizeof g->bad) != MT_OK) return MT_INVAL;
    if (strcmp(r->backend, "triton") != 0) {
        if (!g->other_backend[0]) {
            snprintf(g->other_backend, sizeof g->other_backend, "%s", r->backend);
            g->other_sweep = r->sweep_id;
        }
        return 0;
    }
    /* A sweep for both engines measured the union of their fp8 block-scale spaces. */
    if (krn_engine_keeps(exp_engine_name(g->engine), &r->shape, &r->config, NULL, 0) != MT_OK) return 0;
    if (!shipguard_candidate(g->guard, r)) return 0;
    cell_t *c = NULL;
    if (g->n && cell_is(&g->cells[g->last], r)) c = &g->cells[g->last];
    for (size_t i = 0; !c && i < g->n; i++) {
        if (cell_is(&g->cells[i], r)) {
            c = &g->cells[i];
            g->last = i;
        }
    }
    if (!c) {
        if (mt_grow((void **)&g->cells, &g->cap, g->n + 1, sizeof *g->cells, 64) != MT_OK) return MT_NOMEM;
        c = &g->cells[g->n];
        memset(c, 0, sizeof *c);
        c->versions = mt_strdup(r->versions);
        if (!c->versions) return MT_NOMEM;
        c->shape_id = r->shape_id;
        c->bs = r->batch_size;
        keep_row(&c->best, r, c->versions);
        g->last = g->n++;
    } else if (row_better(r, r->median_us, &c->best, c->best.median_us)) {
        if (r->config_id != c->best.config_id) {
            keep_row(&c->second, &c->best, c->versions);
            c->has_second = true;
        }
        keep_row(&c->best, r, c->versions);
    } else if (r->config_id != c->best.config_id &&
               (!c->has_second || row_better(r, r->median_us, &c->second, c->second.median_us))) {
        keep_row(&c->second, r, c->versions);
        c->has_second = true;
    }
    if (r->up_us <= 0 && r->down_us <= 0) return 0;
    split_t *sp = NULL;
    for (size_t i = 0; !sp && i < c->n_split; i++)
        if (c->split[i].bm == r->config.block_m) sp = &c->split[i];
    if (!sp) {
        if (c->n_split == MAX_SPLIT_BM) {
            g->rc_detail = MT_INVAL;
            return MT_INVAL;
        }
        sp = &c->split[c->n_split++];
        sp->bm = r->config.block_m;
    }
    if (r->up_us > 0 && (!sp->has_up || row_better(r, r->up_us, &sp->up, sp->up.up_us))) {
        keep_row(&sp->up, r, c->versions);
        sp->has_up = true;
    }
    if (r->down_us > 0 && (!sp->has_down || row_better(r, r->down_us, &sp->down, sp->down.down_us))) {
        keep_row(&sp->down, r, c->versions);
        sp->has_down = true;
    }
    return 0;
}

static int cmp_cell(const void *pa, const void *pb) {
    const cell_t *a = pa, *b = pb;
    const dbq_result_t *x = &a->best, *y = &b->best;
    int d;
    if ((d = strcmp(x->compiler, y->compiler)) != 0) return d;
    if ((d = strcmp(x->device_name, y->device_name)) != 0) return d;
    if (x->shape.e != y->shape.e) return x->shape.e < y->shape.e ? -1 : 1;
    if (x->shape.n != y->shape.n) return x->shape.n < y->shape.n ? -1 : 1;
    if ((d = strcmp(x->shape.dtype, y->shape.dtype)) != 0) return d;
    if (x->shape.block_n != y->shape.block_n) return x->shape.block_n < y->shape.block_n ? -1 : 1;
    if (x->shape.block_k != y->shape.block_k) return x->shape.block_k < y->shape.block_k ? -1 : 1;
    if (x->shape.k != y->shape.k) return x->shape.k < y->shape.k ? -1 : 1;
    if (x->shape.topk != y->shape.topk) return x->shape.topk < y->shape.topk ? -1 : 1;
    if (a->shape_id != b->shape_id) return a->shape_id < b->shape_id ? -1 : 1;
    if ((d = strcmp(x->kernel_hash, y->kernel_hash)) != 0) return d;
    if ((d = strcmp(a->versions, b->versions)) != 0) return d;
    return a->bs < b->bs ? -1 : a->bs > b->bs;
}

/* Triton's version: from versions, else from the compiler "triton_3_6_0". */
static void triton_version(const cell_t *c, char *buf, size_t len) {
    exp_version_of(c->versions, "triton", buf, len);
    if (buf[0] || strncmp(c->best.compiler, "triton_", 7) != 0) return;
    snprintf(buf, len, "%s", c->best.compiler + 7);
    for (char *p = buf; *p; p++) {
        if (*p == '_') *p = '.';
    }
}

/* One file to write: cells [first, first + n) of one group. */
typedef struct {
    size_t first, n;
    char dir[1024];   /* folder of the file and its manifest */
    char name[400];   /* file name, without _down */
    char rel[512];    /* path relative to OUT */
    char sweeps[128]; /* the sweeps its rows came from, for messages */
    bool split;
} group_t;

static void group_sweeps(const eng_t *g, group_t *gr) {
    size_t used = 0;
    uint64_t seen[16];
    size_t n_seen = 0;
    gr->sweeps[0] = '\0';
    for (size_t i = gr->first; i < gr->first + gr->n; i++) {
        uint64_t id = g->cells[i].best.sweep_id;
        bool dup = false;
        for (size_t k = 0; k < n_seen; k++) dup = dup || seen[k] == id;
        if (dup || n_seen == 16) continue;
        seen[n_seen++] = id;
        int w =
            snprintf(gr->sweeps + used, sizeof gr->sweeps - used, "%s%llu", used ? "," : "", (unsigned long long)id);
        if (w < 0 || (size_t)w >= sizeof gr->sweeps - used) break;
        used += (size_t)w;
    }
}

static void describe(const cell_t *c, const group_t *gr, char *buf, size_t len) {
    mt_fmt(buf, len, "sweep%s %s (%s, kernel_hash %s, versions '%s')", strchr(gr->sweeps, ',') ? "s" : "", gr->sweeps,
           c->best.compiler, c->best.kernel_hash[0] ? c->best.kernel_hash : "none", c->versions);
}

/* The pair for one cell: lowest up + down among BLOCK_SIZE_M values with both. */
static const split_t *best_pair(const cell_t *c) {
    const split_t *best = NULL;
    for (size_t i = 0; i < c->n_split; i++) {
        const split_t *s = &c->split[i];
        if (!s->has_up || !s->has_down) continue;
        double sum = s->up.up_us + s->down.down_us;
        if (!best || sum < best->up.up_us + best->down.down_us ||
            (sum == best->up.up_us + best->down.down_us && s->bm < best->bm))
            best = s;
    }
    return best;
}

/* Adds the engine's fields to a manifest record; for a split file also the per-entry
 * comparison of the whole-layer best with the pair. */
static void engine_record(json_t *rec, const exp_opts_t *o, const eng_t *g, const group_t *gr, const char *tv,
                          bool down_file) {
    const cell_t *c0 = &g->cells[gr->first];
    char kernel[32], engine[64];
    exp_version_of(c0->versions, "kernel", kernel, sizeof kernel);
    exp_version_of(c0->versions, "engine", engine, sizeof engine);
    json_object_set_new(rec, "engine", json_string(exp_engine_name(o->engine)));
    json_object_set_new(rec, "kernel", kernel[0] ? json_string(kernel) : json_null());
    json_object_set_new(rec, "kernel_engine", engine[0] ? json_string(engine) : json_null());
    json_object_set_new(rec, "versions", json_string(c0->versions));
    json_object_set_new(rec, "triton_version", json_string(tv));
    if (o->engine != EXP_ENGINE_SGLANG) return;
    char down[420];
    mt_fmt(down, sizeof down, "%.*s_down.json", (int)(strlen(gr->name) - 5), gr->name);
    if (down_file) {
        json_object_set_new(rec, "role", json_string("down"));
        json_object_set_new(rec, "up_file", json_string(gr->name));
        json_object_set_new(
            rec, "entry_rule",
            json_string("down config of the pair (up, down) with the lowest up_us + down_us whose BLOCK_SIZE_M agree"));
    } else {
        json_object_set_new(rec, "role", json_string(gr->split ? "up" : "whole"));
        json_object_set_new(rec, "down_file", gr->split ? json_string(down) : json_null());
        json_object_set_new(
            rec, "entry_rule",
            json_string(
                gr->split
                    ? "up config of the pair (up, down) with the lowest up_us + down_us whose BLOCK_SIZE_M agree; "
                      "the engine runs the first GEMM with this file and the second with down_file"
                    : "best whole-layer config (lowest median); no down file: the rows lack separate up/down timings"));
    }
    json_t *entries = json_object_get(rec, "entries");
    for (size_t i = gr->first; i < gr->first + gr->n; i++) {
        const cell_t *c = &g->cells[i];
        char key[16];
        snprintf(key, sizeof key, "%u", c->bs);
        json_t *e = json_object_get(entries, key);
        if (!e) continue;
        json_object_set_new(e, "whole_layer_best_us", json_real(c->best.median_us));
        json_object_set_new(e, "whole_layer_best_config_id", json_integer((json_int_t)c->best.config_id));
        if (c->best.up_us > 0 && c->best.down_us > 0)
            json_object_set_new(e, "whole_layer_best_up_down_us", json_real(c->best.up_us + c->best.down_us));
        if (!c->pair) continue;
        if (down_file) {
            json_object_set_new(e, "down_us", json_real(c->pair->down.down_us));
        } else {
            json_object_set_new(e, "up_us", json_real(c->pair->up.up_us));
        }
        json_object_set_new(e, "split_up_us", json_real(c->pair->up.up_us));
        json_object_set_new(e, "split_down_us", json_real(c->pair->down.down_us));
        json_object_set_new(e, "split_sum_us", json_real(c->pair->up.up_us + c->pair->down.down_us));
        json_object_set_new(e, "split_block_m", json_integer(c->pair->bm));
    }
}

/* ---- the engine layouts: plan, lock, write */

/* Plans a group's file(s) and their manifest records. */
static int engine_group(run_t *x, const eng_t *g, group_t *gr, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    entry_t *ents = NULL;
    const cell_t *c0 = &g->cells[gr->first];
    char tv[64];
    triton_version(c0, tv, sizeof tv);
    ents = mt_calloc(gr->n + 1, sizeof *ents);
    if (!ents) return MT_NOMEM;
    for (int pass = 0; pass < (gr->split ? 2 : 1); pass++) {
        bool down = pass == 1;
        for (size_t i = 0; i < gr->n; i++) {
            const cell_t *c = &g->cells[gr->first + i];
            const dbq_result_t *r = !gr->split ? &c->best : down ? &c->pair->down : &c->pair->up;
            double cost = gr->split ? c->pair->up.up_us + c->pair->down.down_us : r->median_us;
            /* the margin is the whole layer's: a split pair's entry has none */
            ents[i] = (entry_t){c->bs, r->config, r, cost, gr->split, !gr->split && c->has_second ? &c->second : NULL};
        }
        char name[420], rel[540];
        if (down)
            mt_fmt(name, sizeof name, "%.*s_down.json", (int)(strlen(gr->name) - 5), gr->name);
        else
            mt_fmt(name, sizeof name, "%s", gr->name);
        if (o->engine == EXP_ENGINE_SGLANG)
            mt_fmt(rel, sizeof rel, "configs/%s/%s", c0->best.compiler, name);
        else
            mt_fmt(rel, sizeof rel, "%s", name);
        pend_t *p = NULL;
        rc = exp_plan_file(x, gr->dir, name, rel, ents, gr->n, o->engine == EXP_ENGINE_VLLM ? tv : NULL, c0->versions,
                           &c0->best, &p, err, errlen);
        if (rc != MT_OK) goto out;
        snprintf(p->meta.dir, sizeof p->meta.dir, "%s", c0->best.compiler);
        engine_record(p->rec, o, g, gr, tv, down);
    }
out:
    free(ents);
    return rc;
}

/* The engine's own get_config_file_name names every planned file as moetune does, where the
 * engine imports (engine_check.h); a disagreement refuses the export before anything is written. */
static int engine_names_check(const exp_opts_t *o, const eng_t *g, const group_t *groups, size_t n, char *err,
                              size_t errlen) {
    const char **devs = mt_calloc(n + 1, sizeof *devs), **names = mt_calloc(n + 1, sizeof *names);
    krn_shape_t *shapes = mt_calloc(n + 1, sizeof *shapes);
    int rc = devs && names && shapes ? MT_OK : MT_NOMEM;
    for (size_t k = 0; rc == MT_OK && k < n; k++) {
        devs[k] = g->cells[groups[k].first].best.device_name;
        shapes[k] = g->cells[groups[k].first].best.shape;
        names[k] = groups[k].name;
    }
    if (rc == MT_OK) rc = eng_check_names(o->engine, devs, shapes, names, n, o->changes, err, errlen);
    free(devs);
    free(names);
    free(shapes);
    return rc;
}

/* One cell's guard decision: it ships the guard's pick (the search's best kept as second), or is
 * dropped (between two keys, where the engine's entry holds: no key). */
static void guard_cell(void *ctx, size_t k, const dbq_result_t *ship) {
    cell_t *c = &((eng_t *)ctx)->cells[k];
    c->dropped = !ship;
    if (ship && ship != &c->best) {
        keep_row(&c->second, &c->best, c->versions);
        c->has_second = true;
        keep_row(&c->best, ship, c->versions);
    }
}

/* The ship guard over g's cells: each ships the guard's pick where that is never slower than the
 * engine's default or the incumbent; the keys first, since between them their entries run. */
static int guard_cells(const run_t *x, eng_t *g) {
    if (!g->n) return MT_OK;
    int rc = shipguard_ship_each(x->guard, &g->cells[0].best, g->n, sizeof *g->cells, guard_cell, g);
    size_t kept = 0;
    for (size_t k = 0; !rc && k < g->n; k++) {
        if (g->cells[k].dropped)
            free(g->cells[k].versions);
        else
            g->cells[kept++] = g->cells[k];
    }
    if (!rc) g->n = kept;
    return rc;
}

/* The refusal of two groups, other's and c's, that would write one file gr->rel: two
 * shapes, two devices, or two builds or versions. */
static void clash_text(const eng_t *g, const group_t *og, const cell_t *c, const group_t *gr, char *err,
                       size_t errlen) {
    const cell_t *other = &g->cells[og->first];
    char a[400], b[400], sa[128], sb[128];
    describe(other, og, a, sizeof a);
    describe(c, gr, b, sizeof b);
    exp_shape_text(&other->best.shape, sa, sizeof sa);
    exp_shape_text(&c->best.shape, sb, sizeof sb);
    if (other->shape_id != c->shape_id)
        mt_fmt(err, errlen,
               "two shapes, %s and %s, would both be written to %s (the name carries E and N "
               "only): %s and %s; export one sweep at a time with --sweep N into separate --out folders",
               sa, sb, gr->rel, a, b);
    else if (strcmp(other->best.device_name, c->best.device_name) != 0)
        mt_fmt(err, errlen,
               "results of two devices, %s and %s, would be merged into %s: %s and %s; "
               "export one sweep at a time with --sweep N",
               other->best.device_name, c->best.device_name, gr->rel, a, b);
    else
        mt_fmt(err, errlen,
               "results of different Triton builds, kernels or versions would be merged "
               "into %s: %s and %s; export one sweep at a time with --sweep N",
               gr->rel, a, b);
}

int exp_engine_run(run_t *x, dbq_t **q, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    eng_t g;
    group_t *groups = NULL;
    size_t n_groups = 0;
    entry_t *tmp = NULL;
    memset(&g, 0, sizeof g);
    g.engine = o->engine;
    g.guard = x->guard;
    rc = dbq_export_rows(*q, &x->sel, false, reduce_row, &g, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (g.rc_detail == MT_INVAL)
        mt_fmt(err, errlen, "more than %d BLOCK_SIZE_M values for one batch size", MAX_SPLIT_BM);
    else if (rc == MT_INVAL && g.bad[0])
        mt_fmt(err, errlen, "%s", g.bad);
    if (rc != MT_OK) goto out;
    rc = guard_cells(x, &g);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (rc != MT_OK) goto out;
    dbq_close(q);
    if (g.other_backend[0]) {
        bool sim = strcmp(g.other_backend, "sim") == 0;
        mt_fmt(err, errlen,
               "sweep %llu measured with the %s backend: %s; --engine exports triton results "
               "only (export it without --engine%s)",
               (unsigned long long)g.other_sweep, g.other_backend,
               sim ? "its numbers are simulated, never a measurement"
               : strcmp(g.other_backend, "cuda") == 0
                   ? "its configs are for moetune's CUDA kernel, which no engine runs"
                   : "its configs are not for an engine's Triton kernel",
               o->sweep_id ? "" : ", or pick a triton sweep with --sweep N");
        rc = MT_INVAL;
        goto out;
    }
    if (g.n == 0) {
        rc = exp_no_results(o, err, errlen);
        goto out;
    }
    qsort(g.cells, g.n, sizeof *g.cells, cmp_cell);
    groups = mt_calloc(g.n, sizeof *groups);
    tmp = mt_calloc(g.n, sizeof *tmp);
    if (!groups || !tmp) {
        rc = MT_NOMEM;
        goto out;
    }
    /* Plan every file from the rows first: nothing is created when one is refused. */
    for (size_t i = 0; i < g.n;) {
        const cell_t *c = &g.cells[i];
        size_t j = i + 1;
        while (j < g.n && same_group(&g.cells[j].best, g.cells[j].versions, &c->best, c->versions)) j++;
        rc = exp_check_dir_name(c->best.compiler, err, errlen);
        if (rc == MT_OK) rc = exp_check_device_name(&c->best, err, errlen);
        if (rc != MT_OK) goto out;
        group_t *gr = &groups[n_groups++];
        gr->first = i;
        gr->n = j - i;
        group_sweeps(&g, gr);
        exp_engine_file_name(o->engine, c->best.device_name, &c->best.shape, gr->name, sizeof gr->name);
        if (o->engine == EXP_ENGINE_SGLANG) {
            mt_fmt(gr->dir, sizeof gr->dir, "%s/configs/%s", o->out_dir, c->best.compiler);
            mt_fmt(gr->rel, sizeof gr->rel, "configs/%s/%s", c->best.compiler, gr->name);
        } else {
            mt_fmt(gr->dir, sizeof gr->dir, "%s", o->out_dir);
            mt_fmt(gr->rel, sizeof gr->rel, "%s", gr->name);
        }
        for (size_t k = 0; k + 1 < n_groups; k++) {
            if (strcmp(groups[k].rel, gr->rel) != 0) continue;
            clash_text(&g, &groups[k], c, gr, err, errlen);
            rc = MT_INVAL;
            goto out;
        }
        /* Split only when every batch size has a pair: a partial _down file would
         * hand some batch sizes a down config chosen for another up config. */
        gr->split = o->engine == EXP_ENGINE_SGLANG;
        for (size_t k = i; k < j; k++) {
            g.cells[k].pair = best_pair(&g.cells[k]);
            gr->split = gr->split && g.cells[k].pair;
        }
        if (!gr->split)
            for (size_t k = i; k < j; k++) g.cells[k].pair = NULL;
        for (size_t k = i; gr->split && k < j; k++) { /* the ship guard, whole layer against the pair */
            cell_t *ck = &g.cells[k];
            const dbq_result_t *lay = shipguard_layer(x->guard, &ck->best, ck->pair->up.up_us + ck->pair->down.down_us);
            if (!lay) continue;
            ck->guard_pair = (split_t){.bm = lay->config.block_m, .has_up = true, .has_down = true};
            keep_row(&ck->guard_pair.up, lay, ck->versions);
            keep_row(&ck->guard_pair.down, lay, ck->versions);
            ck->pair = &ck->guard_pair;
        }
        for (size_t k = i; k < j; k++)
            tmp[k - i] = (entry_t){g.cells[k].bs, g.cells[k].best.config, &g.cells[k].best, 0, false, NULL};
        rc = exp_check_coverage(x, &c->best, tmp, j - i, gr->rel, err, errlen);
        if (rc != MT_OK) goto out;
        i = j;
    }
    rc = engine_names_check(o, &g, groups, n_groups, err, errlen);
    if (rc != MT_OK) goto out;
    rc = exp_lock_out(x, err, errlen);
    if (rc != MT_OK) goto out;
    for (size_t k = 0; k < n_groups; k++) {
        rc = mt_mkdirs(groups[k].dir, err, errlen);
        if (rc != MT_OK) goto out;
    }
    for (size_t k = 0; k < n_groups; k++) {
        rc = engine_group(x, &g, &groups[k], err, errlen);
        if (rc != MT_OK) goto out;
    }
    rc = exp_commit(x, rep, err, errlen);
out:
    free(tmp);
    free(groups);
    for (size_t i = 0; i < g.n; i++) free(g.cells[i].versions);
    free(g.cells);
    return rc;
}
