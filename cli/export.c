/* export.c - config files and manifest from the store (see export.h). */
#include "export.h"
#include "engine_check.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compare.h"
#include "engines.h"
#include "exports.h"
#include "lock.h"
#include "lookup.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "query.h"
#include "shipguard.h"
#include "states.h"

#include "export_int.h"

const char *exp_state_name(exp_state_t s) {
    static const char *const names[] = {"new", "changed", "unchanged"};
    return (unsigned)s < 3 ? names[s] : "?";
}

void exp_report_clear(exp_report_t *r) {
    if (!r) return;
    free(r->files);
    r->files = NULL;
    r->n_files = 0;
}

static void file_name(const dbq_result_t *r, char *buf, size_t len) {
    char dev[sizeof r->device_name];
    snprintf(dev, sizeof dev, "%s", r->device_name);
    for (char *p = dev; *p; p++) {
        if (*p == ' ' || *p == '/' || *p == '\\') *p = '_';
    }
    int n = snprintf(buf, len, "E=%u,N=%u,device_name=%s", r->shape.e, r->shape.n, dev);
    if (n > 0 && (size_t)n < len && strcmp(r->shape.dtype, "bf16") != 0)
        n += snprintf(buf + n, len - (size_t)n, ",dtype=%s", r->shape.dtype);
    if (n > 0 && (size_t)n < len && r->shape.block_n)
        n += snprintf(buf + n, len - (size_t)n, ",block_shape=[%u, %u]", r->shape.block_n, r->shape.block_k);
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ".json");
}

static mt_status_t collect(void *ctx, const dbq_result_t *row, const dbq_result_t *ru) {
    rowvec_t *v = ctx;
    if (exp_check_row(row, v->bad, sizeof v->bad) != MT_OK) return MT_INVAL;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        dbq_result_t *grown = mt_realloc(v->rows, cap * sizeof *grown);
        if (!grown) return MT_NOMEM;
        v->rows = grown;
        grown = mt_realloc(v->ru, cap * sizeof *grown);
        if (!grown) return MT_NOMEM;
        v->ru = grown;
        v->cap = cap;
    }
    v->rows[v->n] = *row;
    if (ru)
        v->ru[v->n] = *ru;
    else
        memset(&v->ru[v->n], 0, sizeof v->ru[v->n]);
    v->rows[v->n].versions = ""; /* points into the statement; this layout does not use it */
    v->ru[v->n++].versions = "";
    return 0;
}

/* ---- selection and coverage */

static void sel_init(run_t *x) {
    const exp_opts_t *o = x->o;
    memset(&x->sel, 0, sizeof x->sel);
    if (o->sweep_id) {
        x->one_id = o->sweep_id;
        x->sel.ids = &x->one_id;
        x->sel.n_ids = 1;
    } else {
        x->sel.ids = o->sweep_ids;
        x->sel.n_ids = o->sweep_ids ? o->n_sweep_ids : 0;
    }
    x->sel.latest = o->latest;
}

static mt_status_t cov_collect(void *ctx, const dbq_coverage_t *c) {
    run_t *x = ctx;
    if (mt_grow((void **)&x->cov, &x->cap_cov, x->n_cov + 1, sizeof *x->cov, 64) != MT_OK) return MT_NOMEM;
    x->cov[x->n_cov++] = *c;
    return 0;
}

/* Notes each sweep of the coverage whose spec measures a sample of the space (--sample); the
 * specs of sweeps the export does not read are not unpacked. */
static mt_status_t sample_collect(void *ctx, const dbq_sweep_t *s) {
    run_t *x = ctx;
    bool covered = false;
    for (size_t i = 0; i < x->n_cov && !covered; i++) covered = x->cov[i].sweep_id == s->id;
    if (!covered) return 0;
    Moetune__SweepSpec *spec = moetune__sweep_spec__unpack(NULL, s->spec_len, s->spec);
    uint32_t n = spec && spec->space ? spec->space->sample : 0;
    char *warm = spec && spec->warm_start && *spec->warm_start ? mt_strdup(spec->warm_start) : NULL;
    bool lost = spec && spec->warm_start && *spec->warm_start && !warm;
    moetune__sweep_spec__free_unpacked(spec, NULL);
    if (lost) return MT_NOMEM;
    if (!n && !warm) return 0;
    if (mt_grow((void **)&x->sampled, &x->cap_sampled, x->n_sampled + 1, sizeof *x->sampled, 8) != MT_OK) {
        free(warm);
        return MT_NOMEM;
    }
    x->sampled[x->n_sampled++] = (struct sampled){s->id, n, warm};
    return 0;
}

/* Reads the coverage of the selection; with one_sweep, refuses several sweeps. */
static int load_coverage(run_t *x, dbq_t *q, char *err, size_t errlen) {
    int rc = dbq_coverage(q, &x->sel, cov_collect, x, err, errlen);
    if (rc == MT_OK) rc = dbq_sweeps(q, NULL, sample_collect, x, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (rc != MT_OK || !x->o->one_sweep) return rc;
    char list[200] = "";
    size_t used = 0, n = 0;
    for (size_t i = 0; i < x->n_cov; i++) {
        if (i && x->cov[i].sweep_id == x->cov[i - 1].sweep_id) continue; /* rows come by sweep */
        n++;
        if (used + 24 < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%llu", used ? ", " : "",
                                     (unsigned long long)x->cov[i].sweep_id);
    }
    if (n <= 1) return MT_OK;
    mt_fmt(err, errlen,
           "the database holds results of %zu sweeps (%s): export one with --sweep N, merge some "
           "with --sweeps A,B, or take the newest per file with --latest",
           n, list);
    return MT_INVAL;
}

/* ---- today's layout: OUT/<compiler or sim>/name.json */

typedef struct {
    size_t first, n;
    char dir[1024];
    char name[400];
    char rel[512];
} plain_t;

typedef struct {
    rowvec_t *v;
    bool *drop;
} guarded_t;

/* One row's guard decision: the row shipped (the search's best kept as runner-up), or dropped
 * (between two keys, where the engine's entry holds: no key). */
static void guard_row(void *ctx, size_t k, const dbq_result_t *ship) {
    guarded_t *y = ctx;
    y->drop[k] = !ship;
    if (ship && ship != &y->v->rows[k]) {
        y->v->ru[k] = y->v->rows[k];
        y->v->rows[k] = *ship;
    }
}

/* The ship guard over v: never slower than the default or the incumbent; the keys are decided
 * first, since between two keys the file's own entry at the nearest key is what the engine runs. */
static int guard_rows(run_t *x, rowvec_t *v) {
    guarded_t y = {v, mt_calloc(v->n + 1, sizeof *y.drop)};
    int rc = y.drop ? shipguard_ship_each(x->guard, v->rows, v->n, sizeof *v->rows, guard_row, &y) : MT_NOMEM;
    size_t kept = 0;
    for (size_t k = 0; !rc && k < v->n; k++) {
        if (y.drop[k]) continue;
        v->rows[kept] = v->rows[k];
        v->ru[kept++] = v->ru[k];
    }
    if (!rc) v->n = kept;
    free(y.drop);
    return rc;
}

static int plain_run(run_t *x, dbq_t **q, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    rowvec_t v;
    plain_t *files = NULL;
    size_t n_files = 0;
    entry_t *ents = NULL;
    memset(&v, 0, sizeof v);
    rc = exp_pairs(*q, &x->sel, x->guard, collect, &v, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (rc == MT_INVAL && v.bad[0]) mt_fmt(err, errlen, "%s", v.bad);
    if (rc != MT_OK) goto out;
    rc = guard_rows(x, &v);
    if (rc != MT_OK) goto out;
    dbq_close(q);
    if (v.n == 0) {
        rc = exp_no_results(o, err, errlen);
        goto out;
    }
    files = mt_calloc(v.n, sizeof *files);
    ents = mt_calloc(v.n + 1, sizeof *ents);
    if (!files || !ents) {
        rc = MT_NOMEM;
        goto out;
    }
    for (size_t k = 0; k < v.n; k++)
        ents[k] = (entry_t){v.rows[k].batch_size,
                            v.rows[k].config,
                            &v.rows[k],
                            v.rows[k].median_us,
                            false,
                            v.ru[k].config_id ? &v.ru[k] : NULL};
    /* Plan every file from the rows first: nothing is created when one is refused. */
    for (size_t i = 0; i < v.n;) {
        const dbq_result_t *r = &v.rows[i];
        size_t j = i + 1;
        while (j < v.n && v.rows[j].shape_id == r->shape_id && strcmp(v.rows[j].export_dir, r->export_dir) == 0 &&
               strcmp(v.rows[j].device_name, r->device_name) == 0)
            j++;
        rc = exp_check_dir_name(r->export_dir, err, errlen);
        if (rc == MT_OK) rc = exp_check_device_name(r, err, errlen);
        if (rc != MT_OK) goto out;
        plain_t *pf = &files[n_files++];
        pf->first = i;
        pf->n = j - i;
        file_name(r, pf->name, sizeof pf->name);
        mt_fmt(pf->dir, sizeof pf->dir, "%s/%s", o->out_dir, r->export_dir);
        mt_fmt(pf->rel, sizeof pf->rel, "%s/%s", r->export_dir, pf->name);
        for (size_t k = 0; k + 1 < n_files; k++) {
            if (strcmp(files[k].rel, pf->rel) != 0) continue;
            char a[128], b[128];
            exp_shape_text(&v.rows[files[k].first].shape, a, sizeof a);
            exp_shape_text(&r->shape, b, sizeof b);
            mt_fmt(err, errlen,
                   "two shapes, %s and %s, would both be written to %s (the name carries E and N "
                   "only); export one sweep at a time with --sweep N into separate --out folders",
                   a, b, pf->rel);
            rc = MT_INVAL;
            goto out;
        }
        for (size_t k = i + 1; k < j; k++) {
            if (strcmp(v.rows[k].kernel_hash, r->kernel_hash) == 0) continue;
            mt_fmt(err, errlen,
                   "%s would mix results of two kernel sources: kernel_hash %s (sweep %llu) and %s "
                   "(sweep %llu); export one sweep at a time with --sweep N",
                   pf->rel, r->kernel_hash[0] ? r->kernel_hash : "none", (unsigned long long)r->sweep_id,
                   v.rows[k].kernel_hash[0] ? v.rows[k].kernel_hash : "none", (unsigned long long)v.rows[k].sweep_id);
            rc = MT_INVAL;
            goto out;
        }
        rc = exp_check_coverage(x, r, &ents[i], j - i, pf->rel, err, errlen);
        if (rc != MT_OK) goto out;
        i = j;
    }
    rc = exp_lock_out(x, err, errlen);
    if (rc != MT_OK) goto out;
    for (size_t k = 0; k < n_files; k++) {
        plain_t *pf = &files[k];
        pend_t *p = NULL;
        rc = mt_mkdirs(pf->dir, err, errlen);
        if (rc != MT_OK) goto out;
        rc = exp_plan_file(x, pf->dir, pf->name, pf->rel, &ents[pf->first], pf->n, NULL, NULL, &v.rows[pf->first], &p,
                           err, errlen);
        if (rc != MT_OK) goto out;
    }
    rc = exp_commit(x, rep, err, errlen);
out:
    free(ents);
    free(files);
    free(v.rows);
    free(v.ru);
    return rc;
}

mt_status_t exp_run(const exp_opts_t *o, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    dbq_t *q = NULL;
    run_t x;
    struct sigaction ign, old_xfsz;
    memset(rep, 0, sizeof *rep);
    memset(&x, 0, sizeof x);
    x.o = o;
    x.lock_fd = -1;
    sel_init(&x);
    /* A file size limit must be an error (EFBIG) like a full disk, not a silent death. */
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, &old_xfsz);
    rc = dbq_open(o->db_path, &q, err, errlen);
    if (rc != MT_OK) goto out;
    /* asked before any file is written: an export it could not record writes nothing */
    rc = dbx_exports_writable(o->db_path, err, errlen);
    if (rc != MT_OK) goto out;
    rc = load_coverage(&x, q, err, errlen);
    if (rc == MT_OK) rc = shipguard_load(q, &x.sel, o->engine, &x.guard, err, errlen);
    if (rc != MT_OK) goto out;
    rc = o->engine != EXP_ENGINE_NONE ? exp_engine_run(&x, &q, rep, err, errlen) : plain_run(&x, &q, rep, err, errlen);
out:
    rep->recovered = x.recovered;
    exp_run_free(&x);
    dbq_close(&q);
    sigaction(SIGXFSZ, &old_xfsz, NULL);
    return rc;
}
