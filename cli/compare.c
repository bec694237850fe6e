/* compare.c - sweeps side by side and the noise-aware diff (see compare.h). */
#include "compare.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "export_layout.h"
#include "guard_counts.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "states.h"

void cmp_shape_text(const krn_shape_t *s, char *buf, size_t len) {
    char tail[64] = "";
    if (s->block_n || s->block_k) snprintf(tail, sizeof tail, ",block_shape=[%u, %u]", s->block_n, s->block_k);
    snprintf(buf, len, "E=%u,N=%u,K=%u,topk=%u%s%s%s", s->e, s->n, s->k, s->topk,
             strcmp(s->dtype, "bf16") && *s->dtype ? ",dtype=" : "", strcmp(s->dtype, "bf16") ? s->dtype : "", tail);
}


static int shape_cmp(const krn_shape_t *x, const krn_shape_t *y) {
    const uint32_t a[] = {x->e, x->n, x->k, x->topk, x->block_n, x->block_k};
    const uint32_t b[] = {y->e, y->n, y->k, y->topk, y->block_n, y->block_k};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return strcmp(x->dtype, y->dtype);
}

static int best_cmp(const cmp_best_t *x, const cmp_best_t *y) {
    int c = shape_cmp(&x->shape, &y->shape);
    if (c) return c;
    return (x->batch_size > y->batch_size) - (x->batch_size < y->batch_size);
}

static int best_qsort(const void *a, const void *b) { return best_cmp(a, b); }

void cmp_sweeps_clear(cmp_sweeps_t *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->v[i].best);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static mt_status_t on_best(void *vctx, const dbq_result_t *r) {
    cmp_sweeps_t *s = vctx;
    cmp_sweep_t *w = s->n ? &s->v[s->n - 1] : NULL;
    if (!w || w->id != r->sweep_id) {
        if (mt_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v, 16)) return MT_NOMEM;
        w = &s->v[s->n++];
        memset(w, 0, sizeof *w);
        w->id = r->sweep_id;
        snprintf(w->device, sizeof w->device, "%s", r->device_name);
        snprintf(w->driver, sizeof w->driver, "%s", r->driver_version);
        snprintf(w->toolkit, sizeof w->toolkit, "%s", r->cuda_version);
        snprintf(w->backend, sizeof w->backend, "%s", r->backend);
        snprintf(w->compiler, sizeof w->compiler, "%s", r->compiler);
        exp_version_of(r->versions, "triton", w->triton, sizeof w->triton);
        exp_version_of(r->versions, "kernel", w->kernel, sizeof w->kernel);
        if (!w->kernel[0]) snprintf(w->kernel, sizeof w->kernel, "%s", r->kernel_hash);
        w->n_devices = 1;
    } else if (strcmp(w->device, r->device_name) != 0 && w->n_devices == 1) {
        w->n_devices = 2;
        snprintf(w->other_device, sizeof w->other_device, "%s", r->device_name);
    }
    if (mt_grow((void **)&w->best, &w->cap_best, w->n_best + 1, sizeof *w->best, 16)) return MT_NOMEM;
    cmp_best_t *b = &w->best[w->n_best++];
    b->shape = r->shape;
    b->batch_size = r->batch_size;
    b->config = r->config;
    b->median_us = r->median_us;
    b->stddev_us = r->stddev_us;
    b->samples = r->samples;
    return 0;
}

static mt_status_t on_sweep_row(void *vctx, const dbq_sweep_t *row) {
    cmp_sweeps_t *s = vctx;
    for (size_t i = 0; i < s->n; i++) {
        if (s->v[i].id != row->id) continue;
        snprintf(s->v[i].name, sizeof s->v[i].name, "%s", row->name);
        snprintf(s->v[i].state, sizeof s->v[i].state, "%s", row->state);
        s->v[i].created = row->created;
        s->v[i].finished = row->finished;
        s->v[i].results_planned = row->results_planned;
    }
    return 0;
}

mt_status_t cmp_load(dbq_t *q, const dbq_hist_filter_t *filter, cmp_sweeps_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int rc = dbq_history(q, filter, on_best, out, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (!rc) rc = dbq_sweeps(q, NULL, on_sweep_row, out, err, errlen);
    if (rc) {
        cmp_sweeps_clear(out);
        return rc;
    }
    /* several devices in one sweep interleave in the walk: sort by shape, batch size */
    for (size_t i = 0; i < out->n; i++) qsort(out->v[i].best, out->v[i].n_best, sizeof *out->v[i].best, best_qsort);
    for (size_t i = 0; !rc && i < out->n; i++) rc = guard_counts_get(q, out->v[i].id, filter, &out->v[i].guard, err, errlen);
    if (rc) cmp_sweeps_clear(out);
    return rc;
}

/* ---- last / prev */

typedef struct {
    uint64_t want, found_id; /* want: a sweep id to find (resolve by id) */
    uint64_t last_done;
    bool exists;
    uint8_t *spec; /* of the sweep looked up, name cleared */
    size_t spec_len;
    uint64_t before; /* candidates must be older than this */
    uint64_t *cands; /* done sweeps with the same spec, newest last */
    size_t n_cands, cap_cands;
} walk_ctx_t;

/* Packs spec with what does not change the measurements cleared, so sweeps named per
 * night, or stored by an older version, compare equal: the name; how jobs are cut and
 * retried (chunk, max_attempts: older versions stored their defaults, newer ones 0); the
 * backend (an older spec has none; compared on the results instead, cmp_previous); an
 * engine list naming both engines (empty = both). */
static uint8_t *spec_key(const void *blob, size_t len, size_t *out_len) {
    Moetune__SweepSpec *sp = moetune__sweep_spec__unpack(NULL, len, blob);
    if (!sp) return NULL;
    char *name = sp->name, *backend = sp->backend;
    size_t n_engines = sp->n_engines;
    sp->name = (char *)"";
    sp->backend = (char *)"";
    sp->chunk = 0;
    sp->max_attempts = 0;
    if (sp->n_engines == 2) sp->n_engines = 0;
    size_t n = moetune__sweep_spec__get_packed_size(sp);
    uint8_t *buf = mt_malloc(n ? n : 1);
    if (buf) *out_len = moetune__sweep_spec__pack(sp, buf);
    sp->name = name;
    sp->backend = backend;
    sp->n_engines = n_engines;
    moetune__sweep_spec__free_unpacked(sp, NULL);
    return buf;
}

static mt_status_t on_resolve(void *vctx, const dbq_sweep_t *row) {
    walk_ctx_t *c = vctx;
    if (row->id == c->want) {
        c->exists = true;
        c->spec = spec_key(row->spec, row->spec_len, &c->spec_len);
    }
    if (wire_sweep_is(row->state, WIRE_SWEEP_DONE)) c->last_done = row->id;
    return 0;
}

static mt_status_t on_candidate(void *vctx, const dbq_sweep_t *row) {
    walk_ctx_t *c = vctx;
    if (row->id >= c->before || !wire_sweep_is(row->state, WIRE_SWEEP_DONE)) return 0;
    size_t n = 0;
    uint8_t *k = spec_key(row->spec, row->spec_len, &n);
    bool same = k && c->spec && n == c->spec_len && memcmp(k, c->spec, n) == 0;
    free(k);
    if (!same) return 0;
    if (mt_grow((void **)&c->cands, &c->cap_cands, c->n_cands + 1, sizeof *c->cands, 16)) return MT_NOMEM;
    c->cands[c->n_cands++] = row->id;
    return 0;
}

/* The device names of a sweep's ok results: the first, and whether there are others; and
 * the backend of its results into be (16 bytes). */
static int sweep_device(dbq_t *q, uint64_t id, char *dev, size_t len, bool *several, char be[16], char *err,
                        size_t errlen) {
    cmp_sweeps_t s;
    dbq_hist_filter_t f;
    memset(&f, 0, sizeof f);
    f.sweep_id = id;
    dev[0] = '\0';
    be[0] = '\0';
    *several = false;
    int rc = cmp_load(q, &f, &s, err, errlen);
    if (rc) return rc;
    if (s.n) {
        snprintf(dev, len, "%s", s.v[0].device);
        snprintf(be, 16, "%s", s.v[0].backend);
        *several = s.v[0].n_devices > 1;
    }
    cmp_sweeps_clear(&s);
    return MT_OK;
}

mt_status_t cmp_previous(dbq_t *q, uint64_t sweep, uint64_t *prev, char *err, size_t errlen) {
    walk_ctx_t c;
    memset(&c, 0, sizeof c);
    c.want = sweep;
    c.before = sweep;
    char dev[128], cdev[128], be[16], cbe[16];
    bool several = false, csev = false;
    int rc = dbq_sweeps(q, NULL, on_resolve, &c, err, errlen);
    if (rc) goto out;
    if (!c.exists) {
        mt_fmt(err, errlen, "no sweep %llu", (unsigned long long)sweep);
        rc = MT_NOTFOUND;
        goto out;
    }
    if (!c.spec) {
        mt_fmt(err, errlen, "sweep %llu: its stored spec does not decode", (unsigned long long)sweep);
        rc = MT_INVAL;
        goto out;
    }
    rc = dbq_sweeps(q, NULL, on_candidate, &c, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (rc) goto out;
    rc = sweep_device(q, sweep, dev, sizeof dev, &several, be, err, errlen);
    if (rc) goto out;
    if (!dev[0]) {
        mt_fmt(err, errlen, "sweep %llu has no ok results", (unsigned long long)sweep);
        rc = MT_NOTFOUND;
        goto out;
    }
    rc = MT_NOTFOUND;
    mt_fmt(err, errlen, "no earlier done sweep of the same spec on %s than sweep %llu", dev, (unsigned long long)sweep);
    for (size_t i = c.n_cands; i-- > 0;) {
        int r2 = sweep_device(q, c.cands[i], cdev, sizeof cdev, &csev, cbe, err, errlen);
        if (r2) {
            rc = r2;
            break;
        }
        if (strcmp(cdev, dev) == 0 && (!be[0] || !cbe[0] || strcmp(be, cbe) == 0)) {
            *prev = c.cands[i];
            rc = MT_OK;
            break;
        }
    }
out:
    free(c.spec);
    free(c.cands);
    return rc;
}

mt_status_t cmp_resolve(dbq_t *q, const char *ref, uint64_t *id, char *err, size_t errlen) {
    walk_ctx_t c;
    memset(&c, 0, sizeof c);
    bool is_last = strcmp(ref, "last") == 0, is_prev = strcmp(ref, "prev") == 0;
    if (!is_last && !is_prev && (mt_parse_u64(ref, &c.want) != MT_OK || c.want == 0)) {
        mt_fmt(err, errlen, "'%s' is not a sweep id, last or prev", ref);
        return MT_INVAL;
    }
    int rc = dbq_sweeps(q, NULL, on_resolve, &c, err, errlen);
    free(c.spec);
    if (rc) return rc;
    if (!is_last && !is_prev) {
        if (!c.exists) {
            mt_fmt(err, errlen, "no sweep %s", ref);
            return MT_NOTFOUND;
        }
        *id = c.want;
        return MT_OK;
    }
    if (!c.last_done) {
        mt_fmt(err, errlen, "%s: no sweep has finished as done", ref);
        return MT_NOTFOUND;
    }
    if (is_last) {
        *id = c.last_done;
        return MT_OK;
    }
    return cmp_previous(q, c.last_done, id, err, errlen);
}

/* ---- diff */

static int load_one(dbq_t *q, uint64_t id, const char *device, cmp_sweep_t *out, char *err, size_t errlen) {
    cmp_sweeps_t s;
    dbq_hist_filter_t f;
    memset(&f, 0, sizeof f);
    memset(out, 0, sizeof *out);
    f.sweep_id = id;
    if (device) snprintf(f.device, sizeof f.device, "%s", device);
    int rc = cmp_load(q, &f, &s, err, errlen);
    if (rc) return rc;
    if (s.n == 0) {
        cmp_sweeps_clear(&s);
        mt_fmt(err, errlen, "sweep %llu has no ok results%s%s", (unsigned long long)id, device ? " on " : "",
               device ? device : "");
        return MT_NOTFOUND;
    }
    if (s.v[0].n_devices > 1) {
        mt_fmt(err, errlen, "sweep %llu was measured on several devices (%s, %s, ...): pick one with --device",
               (unsigned long long)id, s.v[0].device, s.v[0].other_device);
        cmp_sweeps_clear(&s);
        return MT_INVAL;
    }
    *out = s.v[0];
    s.v[0].best = NULL;
    cmp_sweeps_clear(&s);
    return MT_OK;
}

static double rsd(const cmp_best_t *b) { return b->median_us > 0 ? b->stddev_us / b->median_us : 0.0; }

static void judge(cmp_entry_t *e, double threshold) {
    if (!e->a || !e->b) {
        e->verdict = e->a ? CMP_REMOVED : CMP_ADDED;
        return;
    }
    e->change_pct = e->a->median_us > 0 ? (e->b->median_us - e->a->median_us) / e->a->median_us * 100.0 : 0.0;
    double ra = rsd(e->a), rb = rsd(e->b);
    e->noise_pct = 2.0 * sqrt(ra * ra + rb * rb) * 100.0;
    e->beyond_noise = fabs(e->change_pct) > e->noise_pct;
    if (!e->beyond_noise)
        e->verdict = CMP_SAME;
    else if (e->change_pct > 0)
        e->verdict = e->change_pct > threshold ? CMP_REGRESSION : CMP_SLOWER;
    else
        e->verdict = -e->change_pct > threshold ? CMP_IMPROVEMENT : CMP_FASTER;
}

mt_status_t cmp_diff(dbq_t *q, uint64_t a, uint64_t b, double threshold, const char *device, cmp_diff_t *d, char *err,
                     size_t errlen) {
    memset(d, 0, sizeof *d);
    d->threshold_pct = threshold;
    int rc = load_one(q, a, device, &d->a, err, errlen);
    if (!rc) rc = load_one(q, b, device, &d->b, err, errlen);
    if (rc) goto fail;
    d->e = mt_calloc(d->a.n_best + d->b.n_best + 1, sizeof *d->e);
    if (!d->e) {
        mt_fmt(err, errlen, "out of memory");
        rc = MT_NOMEM;
        goto fail;
    }
    /* both lists are sorted by (shape, batch size): merge them */
    size_t i = 0, j = 0;
    while (i < d->a.n_best || j < d->b.n_best) {
        cmp_entry_t *e = &d->e[d->n++];
        int c = i == d->a.n_best ? 1 : j == d->b.n_best ? -1 : best_cmp(&d->a.best[i], &d->b.best[j]);
        if (c <= 0) e->a = &d->a.best[i++];
        if (c >= 0) e->b = &d->b.best[j++];
        judge(e, threshold);
        d->regressions += e->verdict == CMP_REGRESSION;
        d->improvements += e->verdict == CMP_IMPROVEMENT;
    }
    return MT_OK;
fail:
    cmp_diff_clear(d);
    return rc;
}

void cmp_diff_clear(cmp_diff_t *d) {
    if (!d) return;
    free(d->a.best);
    free(d->b.best);
    free(d->e);
    memset(d, 0, sizeof *d);
}

const char *cmp_verdict_name(cmp_verdict_t v) {
    static const char *const names[] = {"same", "regression", "improvement", "slower", "faster", "added", "removed"};
    return v <= CMP_REMOVED ? names[v] : "?";
}

static json_t *side_json(const cmp_best_t *b) {
    if (!b) return json_null();
    char cfg[KRN_CONFIG_TEXT_LEN];
    krn_config_format(&b->config, cfg, sizeof cfg);
    return json_pack("{s:s, s:o, s:f, s:f, s:i}", "config_text", cfg, "config", exp_config_json(&b->config),
                     "median_us", b->median_us, "stddev_us", b->stddev_us, "samples", (int)b->samples);
}

/* Texts from the database go through cli_json_text: a name that is not UTF-8 is escaped,
 * never the reason the output is empty. */
static json_t *sweep_json(const cmp_sweep_t *s) {
    return json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "sweep", (json_int_t)s->id, "name",
                     cli_json_text(s->name), "device", cli_json_text(s->device), "driver", cli_json_text(s->driver),
                     "toolkit", cli_json_text(s->toolkit), "backend", cli_json_text(s->backend), "compiler",
                     cli_json_text(s->compiler), "triton", cli_json_text(s->triton), "kernel",
                     cli_json_text(s->kernel), "guard", shipguard_counts_json(&s->guard));
}

static void sweep_line(FILE *out, const char *label, const cmp_sweep_t *s) {
    fprintf(out, "%s sweep %llu '%s': %s, driver %s, toolkit %s, %s %s, triton %s, kernel %s\n", label,
            (unsigned long long)s->id, s->name, s->device, *s->driver ? s->driver : "-", *s->toolkit ? s->toolkit : "-",
            s->backend, s->compiler, *s->triton ? s->triton : "-", *s->kernel ? s->kernel : "-");
}

void cmp_diff_print(const cmp_diff_t *d, bool json, FILE *out) {
    if (json) {
        json_t *root = json_pack("{s:o, s:o, s:f, s:I, s:I}", "old", sweep_json(&d->a), "new", sweep_json(&d->b),
                                 "threshold_pct", d->threshold_pct, "regressions", (json_int_t)d->regressions,
                                 "improvements", (json_int_t)d->improvements);
        json_t *arr = json_array();
        for (size_t i = 0; i < d->n; i++) {
            const cmp_entry_t *e = &d->e[i];
            const cmp_best_t *any = e->a ? e->a : e->b;
            char shape[128];
            cmp_shape_text(&any->shape, shape, sizeof shape);
            json_t *o =
                json_pack("{s:s, s:i, s:o, s:o, s:s}", "shape", shape, "batch_size", (int)any->batch_size, "old",
                          side_json(e->a), "new", side_json(e->b), "verdict", cmp_verdict_name(e->verdict));
            if (o && e->a && e->b) {
                json_object_set_new(o, "change_pct", json_real(e->change_pct));
                json_object_set_new(o, "noise_pct", json_real(e->noise_pct));
                json_object_set_new(o, "beyond_noise", json_boolean(e->beyond_noise));
            }
            cli_json_append(arr, o);
        }
        if (!root || json_object_set_new(root, "entries", arr) != 0) cli_json_incomplete = true;
        cli_print_json(out, root);
        return;
    }
    sweep_line(out, "old:", &d->a);
    sweep_line(out, "new:", &d->b);
    fprintf(out, "%-40s %6s %-20s %10s %-20s %10s %8s %7s  %s\n", "SHAPE", "M", "OLD CONFIG", "OLD_US", "NEW CONFIG",
            "NEW_US", "CHANGE", "NOISE", "VERDICT");
    for (size_t i = 0; i < d->n; i++) {
        const cmp_entry_t *e = &d->e[i];
        const cmp_best_t *any = e->a ? e->a : e->b;
        char shape[128], ca[64] = "-", cb[64] = "-", ua[32] = "-", ub[32] = "-", ch[32] = "-", nz[32] = "-";
        cmp_shape_text(&any->shape, shape, sizeof shape);
        if (e->a) {
            krn_config_format(&e->a->config, ca, sizeof ca);
            snprintf(ua, sizeof ua, "%.2f", e->a->median_us);
        }
        if (e->b) {
            krn_config_format(&e->b->config, cb, sizeof cb);
            snprintf(ub, sizeof ub, "%.2f", e->b->median_us);
        }
        if (e->a && e->b) {
            snprintf(ch, sizeof ch, "%+.2f%%", e->change_pct);
            snprintf(nz, sizeof nz, "%.2f%%", e->noise_pct);
        }
        fprintf(out, "%-40.40s %6u %-20s %10s %-20s %10s %8s %7s  %s\n", shape, any->batch_size, ca, ua, cb, ub, ch, nz,
                cmp_verdict_name(e->verdict));
    }
    fprintf(out, "%zu entries: %zu regressions beyond noise and %.1f%%, %zu improvements\n", d->n, d->regressions,
            d->threshold_pct, d->improvements);
    char ga[200], gb[200];
    shipguard_counts_text(&d->a.guard, ga, sizeof ga);
    shipguard_counts_text(&d->b.guard, gb, sizeof gb);
    fprintf(out, "guard: old sweep %llu: %s; new sweep %llu: %s\n", (unsigned long long)d->a.id, ga,
            (unsigned long long)d->b.id, gb);
}
