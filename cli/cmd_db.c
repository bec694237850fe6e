/* cmd_db.c - the subcommands that read the database or files: results, export, lookup. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cmd.h"
#include "compare.h"
#include "export.h"
#include "lookup.h"
#include "mt.h"
#include "query.h"
#include "shipguard.h"
#include "states.h"
#include "store.h"

/* One key=value of --shape into the filter (mt_kv_fn). */
static mt_status_t shape_filter_field(void *ctx, const char *key, char *val, char *err, size_t errlen) {
    dbq_filter_t *f = ctx;
    static const struct {
        const char *key;
        size_t off;
    } fields[] = {{"E", offsetof(dbq_filter_t, e)},
                  {"N", offsetof(dbq_filter_t, n)},
                  {"K", offsetof(dbq_filter_t, k)},
                  {"topk", offsetof(dbq_filter_t, topk)}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strcasecmp(key, fields[i].key) != 0) continue;
        if (mt_parse_u32(val, 1, KRN_MAX_NK, (uint32_t *)((char *)f + fields[i].off)) != MT_OK) {
            char why[64];
            mt_fmt(err, errlen, "--shape: %s=%s is %s", key, val, mt_u32_problem(val, 1, KRN_MAX_NK, why, sizeof why));
            return MT_INVAL;
        }
        return MT_OK;
    }
    if (strcasecmp(key, "dtype") == 0 && strlen(val) < sizeof f->dtype) {
        snprintf(f->dtype, sizeof f->dtype, "%s", val);
        return MT_OK;
    }
    mt_fmt(err, errlen, "--shape: unknown field '%s' (E, N, K, topk, dtype)", key);
    return MT_INVAL;
}

mt_status_t cli_parse_shape_filter(const char *text, dbq_filter_t *f, char *err, size_t errlen) {
    return mt_parse_kv_list(text, "--shape: ", shape_filter_field, f, err, errlen);
}

/* Whether name is a results.status (states.h's table); names them all into list for the
 * usage line. */
static bool known_status(const char *name, char *list, size_t len) {
    size_t used = 0;
    int status;
    list[0] = '\0';
#define X(st, text, failed)                                                                                            \
    used += (size_t)snprintf(list + used, used < len ? len - used : 0, "%s%s", used ? ", " : "", text);
    WIRE_STATUSES(X)
#undef X
    return wire_status_parse(name, &status) == MT_OK;
}

typedef struct {
    bool json;
    size_t rows;
    shipguard_t *guard; /* marks the ship guard's rows (shipguard.h) */
} results_ctx_t;

static mt_status_t print_row(void *vctx, const dbq_result_t *r) {
    results_ctx_t *ctx = vctx;
    char shape[96], cfg[KRN_CONFIG_TEXT_LEN];
    krn_shape_name(&r->shape, shape, sizeof shape);
    krn_config_format(&r->config, cfg, sizeof cfg);
    if (ctx->json) {
        json_t *o = json_pack("{s:I, s:I, s:{s:i, s:i, s:i, s:i, s:s}, s:I, s:o, s:i, s:s,"
                              " s:f, s:f, s:f, s:f, s:i, s:o, s:o, s:s, s:s, s:o, s:I}",
                              "result", (json_int_t)r->result_id, "sweep", (json_int_t)r->sweep_id, "shape", "E",
                              (int)r->shape.e, "N", (int)r->shape.n, "K", (int)r->shape.k, "topk", (int)r->shape.topk,
                              "dtype", r->shape.dtype, "config_id", (json_int_t)r->config_id, "config",
                              exp_config_json(&r->config), "batch_size", (int)r->batch_size, "status", r->status,
                              "median_us", r->median_us, "min_us", r->min_us, "mean_us", r->mean_us, "stddev_us",
                              r->stddev_us, "samples", (int)r->samples, "detail", cli_json_text(r->detail), "device",
                              cli_json_text(r->device_name), "backend", r->backend, "compiler", r->compiler, "worker",
                              cli_json_text(r->worker_id), "created", (json_int_t)r->created);
        if (o) {
            json_object_set_new(o, "up_us", json_real(r->up_us));
            json_object_set_new(o, "down_us", json_real(r->down_us));
            json_object_set_new(o, "versions", cli_json_text(r->versions));
            json_object_set_new(o, "routing", r->shape.routing[0] ? json_string(r->shape.routing) : json_null());
            const char *role = shipguard_role(ctx->guard, r); /* a ship-guard row, not a searched one */
            json_object_set_new(o, "guard", role ? json_string(role) : json_null());
        }
        cli_print_json(stdout, o);
    } else {
        if (ctx->rows == 0)
            printf("%-6s %-34s %6s %-20s %-13s %11s %11s %7s  %-20s %s\n", "SWEEP", "SHAPE", "M",
                   "CONFIG (MxNxKxGxWxS)", "STATUS", "MEDIAN_US", "MIN_US", "SAMPLES", "DEVICE", "BACKEND");
        char full[128];
        snprintf(full, sizeof full, "%s,K=%u,topk=%u%s%.8s", shape, r->shape.k, r->shape.topk,
                 r->shape.routing[0] ? ",routing=" : "", r->shape.routing);
        const char *role = shipguard_role(ctx->guard, r);
        printf("%-6llu %-34.34s %6u %-20s %-13s %11.2f %11.2f %7u  %-20.20s %s%s%s\n", (unsigned long long)r->sweep_id,
               full, r->batch_size, cfg, r->status, r->median_us, r->min_us, r->samples, r->device_name, r->backend,
               role ? "  guard: " : "", role ? role : "");
    }
    ctx->rows++;
    return 0;
}

/* --compare-routing: one cell per (shape without its routing, config, batch size). */
typedef struct {
    krn_shape_t shape; /* routing cleared */
    uint64_t config_id;
    krn_config_t config;
    uint32_t bs;
    double uniform_us, captured_us;
    char routing[65];
} cmp_cell_t;

typedef struct {
    cmp_cell_t *cells;
    size_t n, cap;
} cmp_t;

static mt_status_t cmp_row(void *vctx, const dbq_result_t *r) {
    cmp_t *c = vctx;
    if (strcmp(r->status, "ok") != 0 || !(r->median_us > 0)) return 0;
    krn_shape_t sh;
    memset(&sh, 0, sizeof sh);
    sh.e = r->shape.e;
    sh.n = r->shape.n;
    sh.k = r->shape.k;
    sh.topk = r->shape.topk;
    sh.block_n = r->shape.block_n;
    sh.block_k = r->shape.block_k;
    snprintf(sh.dtype, sizeof sh.dtype, "%s", r->shape.dtype);
    cmp_cell_t *x = NULL;
    for (size_t i = 0; !x && i < c->n; i++) {
        cmp_cell_t *y = &c->cells[i];
        if (y->config_id == r->config_id && y->bs == r->batch_size && y->shape.e == sh.e && y->shape.n == sh.n &&
            y->shape.k == sh.k && y->shape.topk == sh.topk && y->shape.block_n == sh.block_n &&
            y->shape.block_k == sh.block_k && strcmp(y->shape.dtype, sh.dtype) == 0)
            x = y;
    }
    if (!x) {
        if (mt_grow((void **)&c->cells, &c->cap, c->n + 1, sizeof *c->cells, 256) != MT_OK) return MT_NOMEM;
        x = &c->cells[c->n++];
        memset(x, 0, sizeof *x);
        x->shape = sh;
        x->config_id = r->config_id;
        x->config = r->config;
        x->bs = r->batch_size;
    }
    /* the lowest median when several sweeps measured the same cell */
    double *slot = r->shape.routing[0] ? &x->captured_us : &x->uniform_us;
    if (*slot == 0 || r->median_us < *slot) *slot = r->median_us;
    if (r->shape.routing[0]) snprintf(x->routing, sizeof x->routing, "%s", r->shape.routing);
    return 0;
}

static int print_compare(const cmp_t *c, bool json) {
    size_t shown = 0;
    for (size_t i = 0; i < c->n; i++) {
        const cmp_cell_t *x = &c->cells[i];
        if (!(x->uniform_us > 0 && x->captured_us > 0)) continue;
        char shape[96], cfg[KRN_CONFIG_TEXT_LEN];
        krn_shape_name(&x->shape, shape, sizeof shape);
        krn_config_format(&x->config, cfg, sizeof cfg);
        double ratio = x->captured_us / x->uniform_us;
        if (json) {
            json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:s, s:i, s:f, s:f, s:f, s:s}", "shape", shape, "K",
                                  (int)x->shape.k, "topk", (int)x->shape.topk, "config_id", (json_int_t)x->config_id,
                                  "config", cfg, "batch_size", (int)x->bs, "uniform_us", x->uniform_us, "captured_us",
                                  x->captured_us, "ratio", ratio, "routing", x->routing);
            cli_print_json(stdout, o);
        } else {
            if (shown == 0)
                printf("%-34s %6s %-20s %12s %12s %7s  %s\n", "SHAPE", "M", "CONFIG (MxNxKxGxWxS)", "UNIFORM_US",
                       "CAPTURED_US", "RATIO", "ROUTING");
            char full[128];
            snprintf(full, sizeof full, "%s,K=%u,topk=%u", shape, x->shape.k, x->shape.topk);
            printf("%-34.34s %6u %-20s %12.2f %12.2f %7.3f  %.12s\n", full, x->bs, cfg, x->uniform_us, x->captured_us,
                   ratio, x->routing);
        }
        shown++;
    }
    if (!json && shown == 0) printf("(no config measured on both uniform and captured routing)\n");
    return MT_EXIT_OK;
}

/* --near-ties: the picks an export takes whose runner-up is within noise (export.h). */

/* One shape's near-ties of a sweep: the configs (picks and runners-up) and batch sizes that
 * one `tune --configs` re-measures side by side. */
typedef struct {
    krn_shape_t shape;
    char backend[16], kernel[16], routing[256];
    krn_config_t cfg[KRN_MAX_LIST];
    size_t n_cfg;
    uint32_t bs[64];
    size_t n_bs;
} tie_shape_t;

typedef struct {
    bool json;
    size_t shown;
    uint64_t sweep_id;
    const char *db;
    tie_shape_t *sh;
    size_t n_sh, cap_sh;
} ties_t;

static void add_tie_config(tie_shape_t *e, const krn_config_t *c) {
    for (size_t i = 0; i < e->n_cfg; i++)
        if (memcmp(&e->cfg[i], c, sizeof *c) == 0) return;
    if (e->n_cfg < KRN_MAX_LIST) e->cfg[e->n_cfg++] = *c;
}

/* Notes a near tie of b's shape for the re-measure hint; MT_NOMEM when it cannot. */
static mt_status_t note_tie(ties_t *t, const dbq_result_t *b, const dbq_result_t *u) {
    tie_shape_t *e = NULL;
    for (size_t i = 0; i < t->n_sh && !e; i++)
        if (memcmp(&t->sh[i].shape, &b->shape, sizeof b->shape) == 0 && strcmp(t->sh[i].backend, b->backend) == 0)
            e = &t->sh[i];
    if (!e) {
        if (mt_grow((void **)&t->sh, &t->cap_sh, t->n_sh + 1, sizeof *t->sh, 4) != MT_OK) return MT_NOMEM;
        e = &t->sh[t->n_sh++];
        memset(e, 0, sizeof *e);
        e->shape = b->shape;
        snprintf(e->backend, sizeof e->backend, "%s", b->backend);
        snprintf(e->routing, sizeof e->routing, "%s", b->routing_source);
        exp_version_of(b->versions, "kernel", e->kernel, sizeof e->kernel);
    }
    add_tie_config(e, &b->config);
    add_tie_config(e, &u->config);
    size_t i = 0;
    while (i < e->n_bs && e->bs[i] < b->batch_size) i++;
    if ((i == e->n_bs || e->bs[i] != b->batch_size) && e->n_bs < sizeof e->bs / sizeof e->bs[0]) {
        memmove(&e->bs[i + 1], &e->bs[i], (e->n_bs - i) * sizeof e->bs[0]);
        e->bs[i] = b->batch_size;
        e->n_bs++;
    }
    return MT_OK;
}

/* Prints, per shape of the sweep with near ties, the command that re-measures them side by side. */
static void print_tie_hints(ties_t *t) {
    for (size_t i = 0; i < t->n_sh; i++) {
        const tie_shape_t *e = &t->sh[i];
        char shape[160], text[KRN_CONFIG_TEXT_LEN];
        krn_shape_format(&e->shape, shape, sizeof shape);
        printf(
            "sweep %llu, to decide by measuring side by side: moetune tune --backend %s%s%s --shape %s%s%s --configs ",
            (unsigned long long)t->sweep_id, e->backend, e->kernel[0] ? " --kernel " : "", e->kernel, shape,
            e->routing[0] ? " --routing " : "", e->routing);
        for (size_t k = 0; k < e->n_cfg; k++)
            printf("%s%s", k ? "," : "", krn_config_format(&e->cfg[k], text, sizeof text));
        printf(" --batch-sizes ");
        for (size_t k = 0; k < e->n_bs; k++) printf("%s%u", k ? "," : "", e->bs[k]);
        printf(" --db %s --out recheck/\n", t->db);
    }
}

static mt_status_t print_tie(void *vctx, const dbq_result_t *b, const dbq_result_t *u) {
    ties_t *t = vctx;
    if (!u) return 0;
    double m = exp_margin_sd(b->median_us, b->stddev_us, u->median_us, u->stddev_us);
    if (!(m < EXP_NEAR_TIE_SD)) return 0;
    char shape[96], cb[64], cu[64];
    krn_shape_name(&b->shape, shape, sizeof shape);
    snprintf(cb, sizeof cb, "%ux%ux%ux%ux%ux%u", b->config.block_m, b->config.block_n, b->config.block_k,
             b->config.group_m, b->config.num_warps, b->config.num_stages);
    snprintf(cu, sizeof cu, "%ux%ux%ux%ux%ux%u", u->config.block_m, u->config.block_n, u->config.block_k,
             u->config.group_m, u->config.num_warps, u->config.num_stages);
    if (t->json) {
        json_t *o =
            json_pack("{s:I, s:s, s:i, s:i, s:o, s:i, s:I, s:s, s:f, s:f, s:{s:I, s:s, s:f, s:f}, s:f}", "sweep",
                      (json_int_t)t->sweep_id, "shape", shape, "K", (int)b->shape.k, "topk", (int)b->shape.topk,
                      "device", cli_json_text(b->device_name), "batch_size", (int)b->batch_size, "config_id",
                      (json_int_t)b->config_id, "config", cb, "median_us", b->median_us, "stddev_us", b->stddev_us,
                      "runner_up", "config_id", (json_int_t)u->config_id, "config", cu, "median_us", u->median_us,
                      "stddev_us", u->stddev_us, "margin_sd", m);
        cli_print_json(stdout, o);
    } else {
        if (t->shown == 0)
            printf("%-6s %-34s %6s %-20s %11s %-20s %11s %9s\n", "SWEEP", "SHAPE", "M", "PICK (MxNxKxGxWxS)",
                   "MEDIAN_US", "RUNNER-UP", "MEDIAN_US", "MARGIN_SD");
        char full[128];
        snprintf(full, sizeof full, "%s,K=%u,topk=%u", shape, b->shape.k, b->shape.topk);
        printf("%-6llu %-34.34s %6u %-20s %11.2f %-20s %11.2f %9.2f\n", (unsigned long long)t->sweep_id, full,
               b->batch_size, cb, b->median_us, cu, u->median_us, m);
        if (note_tie(t, b, u) != MT_OK) return MT_NOMEM;
    }
    t->shown++;
    return 0;
}

typedef struct {
    uint64_t *ids;
    size_t n, cap;
    uint64_t want;
} sweep_ids_t;

static mt_status_t add_sweep_id(void *ctx, const dbq_sweep_t *s) {
    sweep_ids_t *v = ctx;
    if (v->want && s->id != v->want) return 0;
    if (mt_grow((void **)&v->ids, &v->cap, v->n + 1, sizeof *v->ids, 16) != MT_OK) return MT_NOMEM;
    v->ids[v->n++] = s->id;
    return 0;
}

static int near_ties(const cli_cmd_t *cmd, dbq_t *q, const char *db, uint64_t sweep, bool json) {
    char err[400];
    sweep_ids_t v = {.want = sweep};
    ties_t t = {.json = json, .db = db};
    int rc = dbq_sweeps(q, NULL, add_sweep_id, &v, err, sizeof err);
    if (rc == MT_OK && sweep && v.n == 0) {
        mt_fmt(err, sizeof err, "no sweep %llu in the database", (unsigned long long)sweep);
        rc = MT_NOTFOUND;
    }
    for (size_t i = 0; rc == MT_OK && i < v.n; i++) {
        dbq_select_t sel = {.ids = &v.ids[i], .n_ids = 1};
        t.sweep_id = v.ids[i];
        size_t before = t.shown;
        rc = exp_pairs(q, &sel, NULL, print_tie, &t, err, sizeof err);
        if (rc == MT_OK && !json && t.shown > before) print_tie_hints(&t);
        t.n_sh = 0;
    }
    free(v.ids);
    free(t.sh);
    if (rc == MT_NOMEM) mt_fmt(err, sizeof err, "out of memory");
    if (rc != MT_OK) return cli_fail(cmd, err);
    if (!json && t.shown == 0)
        printf("(no near ties: every pick leads its runner-up by %g deviation or more)\n", EXP_NEAR_TIE_SD);
    return MT_EXIT_OK;
}

int cmd_results(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[400];
    dbq_t *q = NULL;
    dbq_filter_t f;
    memset(&f, 0, sizeof f);
    if (!o->db) return cli_usage(cmd, "--db FILE is required");
    f.sweep_id = o->sweep;
    f.batch_size = o->batch_size;
    f.limit = o->limit;
    f.best = o->best;
    if (o->shape && cli_parse_shape_filter(o->shape, &f, err, sizeof err) != MT_OK) return cli_usage(cmd, err);
    if (o->status) {
        char list[200], msg[260];
        if (!known_status(o->status, list, sizeof list))
            return cli_usage(cmd, mt_fmt(msg, sizeof msg, "--status: not one of %s", list));
        if (o->best && strcmp(o->status, "ok") != 0) return cli_usage(cmd, "--best picks among ok results only");
        snprintf(f.status, sizeof f.status, "%s", o->status);
    }
    if (o->compare_routing && (o->best || o->limit || o->sweep || (o->status && strcmp(o->status, "ok") != 0)))
        return cli_usage(cmd, "--compare-routing compares ok results of all sweeps (uniform and captured routing are "
                              "different sweeps); it takes no --sweep, --best, --limit or other --status");
    if (o->near_ties && (o->best || o->limit || o->status || o->compare_routing || o->shape || o->batch_size))
        return cli_usage(cmd, "--near-ties lists the picks within noise of their runner-up per sweep; it takes "
                              "only --sweep N and --json");
    if (dbq_open(o->db, &q, err, sizeof err) != MT_OK) return cli_fail(cmd, err);
    if (o->near_ties) {
        int code = near_ties(cmd, q, o->db, o->sweep, o->json);
        dbq_close(&q);
        return code;
    }
    if (o->compare_routing) {
        cmp_t c = {NULL, 0, 0};
        int rc = dbq_results(q, &f, cmp_row, &c, err, sizeof err);
        dbq_close(&q);
        if (rc == MT_NOMEM) mt_fmt(err, sizeof err, "out of memory");
        int code = rc == MT_OK ? print_compare(&c, o->json) : cli_fail(cmd, err);
        free(c.cells);
        return code;
    }
    results_ctx_t ctx = {o->json, 0, NULL};
    int rc = shipguard_load_all(q, NULL, &ctx.guard, err, sizeof err);
    if (rc == MT_OK) rc = dbq_results(q, &f, print_row, &ctx, err, sizeof err);
    shipguard_free(&ctx.guard);
    dbq_close(&q);
    if (rc != MT_OK) return cli_fail(cmd, err);
    if (!o->json && ctx.rows == 0) printf("(no results)\n");
    return MT_EXIT_OK;
}

int cli_export(const cli_cmd_t *cmd, const exp_opts_t *opts, bool json) {
    char err[1500];
    exp_report_t rep;
    exp_opts_t eo = *opts;
    if (!eo.changes) eo.changes = json ? stderr : stdout; /* --json: stdout holds only JSON */
    int rc = exp_run(&eo, &rep, err, sizeof err);
    if (rep.recovered)
        fprintf(json ? stderr : stdout, "%s: completed an export that was interrupted there first (%u files)\n",
                eo.out_dir, rep.recovered);
    for (size_t i = 0; i < rep.n_files; i++) {
        const exp_file_t *f = &rep.files[i];
        if (json) {
            char path[1100];
            snprintf(path, sizeof path, "%s/%s", eo.out_dir, f->path);
            json_t *j = json_pack("{s:o, s:s, s:i, s:i, s:b, s:b}", "file", cli_json_text(path), "state",
                                  exp_state_name(f->state), "entries", (int)f->entries, "changed", (int)f->changed,
                                  "simulated", f->simulated != 0, "partial", f->partial);
            if (j && f->partial) json_object_set_new(j, "coverage", json_string(f->coverage));
            if (j && f->sample) json_object_set_new(j, "sample", json_integer(f->sample));
            if (j && f->guard[0]) json_object_set_new(j, "guard", json_string(f->guard));
            cli_print_json(stdout, j);
            continue;
        }
        printf("%s/%s: %s, %u entries, %u changed%s", eo.out_dir, f->path, exp_state_name(f->state), f->entries,
               f->changed, f->simulated ? " (simulated)" : "");
        if (f->partial) printf(", PARTIAL: %s", f->coverage);
        if (f->sample) printf(", from a SAMPLE of %u configs per shape (--sample)", f->sample);
        printf("\n");
        if (f->guard[0]) printf("%s/%s: %s\n", eo.out_dir, f->path, f->guard);
    }
    if (rc != MT_OK && rep.n_files)
        fprintf(stderr, "moetune %s: the %zu file(s) listed above were exported before the error\n", cmd->name,
                rep.n_files);
    exp_report_clear(&rep);
    if (rc != MT_OK) return cli_fail(cmd, err);
    return MT_EXIT_OK;
}

int cli_run_export(const cli_cmd_t *cmd, const char *db, const char *out, uint64_t sweep, const char *engine, bool json,
                   bool force) {
    exp_opts_t eo = {
        .db_path = db, .out_dir = out, .sweep_id = sweep, .changes = json ? stderr : stdout, .force = force};
    if (engine && exp_engine_parse(engine, &eo.engine) != MT_OK)
        return cli_usage(cmd, "--engine: not one of sglang, vllm");
    return cli_export(cmd, &eo, json);
}

int cmd_export(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[200];
    uint64_t *ids = NULL;
    size_t n_ids = 0;
    exp_opts_t eo = {.db_path = o->db,
                     .out_dir = o->out,
                     .sweep_id = o->sweep,
                     .changes = stdout,
                     .latest = o->latest,
                     .partial = o->partial,
                     .force = o->force};
    if (!o->db) return cli_usage(cmd, "--db FILE is required");
    if (!o->out) return cli_usage(cmd, "--out DIR is required");
    if (o->engine && exp_engine_parse(o->engine, &eo.engine) != MT_OK)
        return cli_usage(cmd, "--engine: not one of sglang, vllm");
    if (o->sweep && (o->sweeps || o->latest))
        return cli_usage(cmd, "--sweep N takes one sweep: drop --sweeps/--latest");
    if (o->sweeps) {
        char *copy = mt_strdup(o->sweeps);
        if (!copy) return cli_fail(cmd, "out of memory");
        ids = mt_calloc(strlen(copy) / 2 + 2, sizeof *ids);
        int bad = !ids;
        for (char *save = NULL, *t = strtok_r(copy, ",", &save); !bad && t; t = strtok_r(NULL, ",", &save))
            bad = mt_parse_u64(t, &ids[n_ids]) != MT_OK || ids[n_ids++] == 0;
        bad = bad || n_ids == 0 || o->sweeps[strlen(o->sweeps) - 1] == ',' || o->sweeps[0] == ',' ||
              strstr(o->sweeps, ",,");
        free(copy);
        if (bad) {
            free(ids);
            mt_fmt(err, sizeof err, "--sweeps: '%s' is not a comma-separated list of sweep ids", o->sweeps);
            return cli_usage(cmd, err);
        }
        eo.sweep_ids = ids;
        eo.n_sweep_ids = n_ids;
    }
    eo.one_sweep = !o->sweep && !o->sweeps && !o->latest;
    int code = cli_export(cmd, &eo, false);
    free(ids);
    return code;
}

int cmd_lookup(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[400];
    uint32_t m, key;
    moetune_lookup_t *t = NULL;
    moetune_lookup_config_t c;
    if (mt_parse_u32(o->pos[1], 1, UINT32_MAX, &m) != MT_OK) return cli_usage(cmd, "M must be a positive batch size");
    if (moetune_lookup_load(o->pos[0], &t, err, sizeof err) != MOETUNE_LOOKUP_OK) return cli_fail(cmd, err);
    moetune_lookup_get(t, m, &c, &key);
    moetune_lookup_free(&t);
    /* the lookup library's config is its own (it links nothing of moetune): same fields, same order */
    const int v[KRN_N_FIELDS] = {c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages};
    if (o->json)
        printf("{\"batch_size\": %u, \"key\": %u", m, key);
    else
        printf("M=%u -> entry \"%u\":", m, key);
    for (size_t i = 0; i < KRN_N_FIELDS; i++)
        printf(o->json ? ", \"%s\": %d" : " %s=%d", krn_config_fields[i].file, v[i]);
    printf(o->json ? "}\n" : "\n");
    return MT_EXIT_OK;
}
