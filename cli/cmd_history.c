/* cmd_history.c - moetune history: per sweep, in time order, the best latency and config
 * per batch size with the sweep's device, driver, toolkit, Triton and kernel versions. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "compare.h"
#include "mt.h"

static void date_text(int64_t t, char *buf, size_t len) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M", &tm)) snprintf(buf, len, "-");
}

/* The best of prev for the same shape and batch size, or NULL. */
static const cmp_best_t *find_best(const cmp_sweep_t *prev, const cmp_best_t *b) {
    if (!prev) return NULL;
    for (size_t i = 0; i < prev->n_best; i++) {
        const cmp_best_t *p = &prev->best[i];
        char x[128], y[128];
        cmp_shape_text(&p->shape, x, sizeof x);
        cmp_shape_text(&b->shape, y, sizeof y);
        if (p->batch_size == b->batch_size && strcmp(x, y) == 0 && strcmp(p->shape.dtype, b->shape.dtype) == 0)
            return p;
    }
    return NULL;
}

/* "value" or "value (was old)" when it changed since the previous sweep. */
static void field(char *buf, size_t len, const char *now, const char *was) {
    if (was && strcmp(now, was) != 0)
        snprintf(buf, len, "%s (was %s)", *now ? now : "-", *was ? was : "-");
    else
        snprintf(buf, len, "%s", *now ? now : "-");
}

static json_t *sweep_json(const cmp_sweep_t *s) {
    /* every text from the database goes through cli_json_text: a name that is not UTF-8
     * must not drop the sweep */
    json_t *o =
        json_pack("{s:I, s:o, s:o, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "sweep", (json_int_t)s->id, "name",
                  cli_json_text(s->name), "state", cli_json_text(s->state), "created", (json_int_t)s->created, "device",
                  cli_json_text(s->device), "driver", cli_json_text(s->driver), "toolkit", cli_json_text(s->toolkit),
                  "backend", cli_json_text(s->backend), "compiler", cli_json_text(s->compiler), "triton",
                  cli_json_text(s->triton), "kernel", cli_json_text(s->kernel));
    json_object_set_new(o, "guard", shipguard_counts_json(&s->guard));
    json_t *arr = json_array();
    if (!o || !arr) {
        json_decref(o);
        json_decref(arr);
        return NULL;
    }
    for (size_t i = 0; i < s->n_best; i++) {
        const cmp_best_t *b = &s->best[i];
        char shape[128], cfg[64];
        cmp_shape_text(&b->shape, shape, sizeof shape);
        krn_config_format(&b->config, cfg, sizeof cfg);
        cli_json_append(arr, json_pack("{s:s, s:i, s:s, s:f, s:f, s:i}", "shape", shape, "batch_size",
                                       (int)b->batch_size, "config", cfg, "median_us", b->median_us, "stddev_us",
                                       b->stddev_us, "samples", (int)b->samples));
    }
    json_object_set_new(o, "best", arr);
    return o;
}

int cmd_history(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[400];
    dbq_t *q = NULL;
    dbq_filter_t sf;
    dbq_hist_filter_t f;
    cmp_sweeps_t s;
    memset(&sf, 0, sizeof sf);
    memset(&f, 0, sizeof f);
    if (!o->db) return cli_usage(cmd, "--db FILE is required");
    if (!o->shape) return cli_usage(cmd, "--shape E=..,N=..[,K=..][,topk=..][,dtype=..] is required");
    if (cli_parse_shape_filter(o->shape, &sf, err, sizeof err) != MT_OK) return cli_usage(cmd, err);
    f.e = sf.e;
    f.n = sf.n;
    f.k = sf.k;
    f.topk = sf.topk;
    snprintf(f.dtype, sizeof f.dtype, "%s", sf.dtype);
    f.batch_size = o->batch_size;
    if (o->device) snprintf(f.device, sizeof f.device, "%s", o->device);
    if (o->backend) snprintf(f.backend, sizeof f.backend, "%s", o->backend);
    if (dbq_open(o->db, &q, err, sizeof err) != MT_OK) return cli_fail(cmd, err);
    int rc = cmp_load(q, &f, &s, err, sizeof err);
    dbq_close(&q);
    if (rc != MT_OK) return cli_fail(cmd, err);
    if (o->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < s.n; i++) cli_json_append(arr, sweep_json(&s.v[i]));
        cli_print_json(stdout, json_pack("{s:o}", "sweeps", arr));
        cmp_sweeps_clear(&s);
        return MT_EXIT_OK;
    }
    if (s.n == 0) printf("(no ok results for this shape)\n");
    for (size_t i = 0; i < s.n; i++) {
        const cmp_sweep_t *w = &s.v[i], *p = i ? &s.v[i - 1] : NULL;
        char date[32], dev[300], drv[80], tk[80], tr[80], kn[200], comp[120];
        date_text(w->created, date, sizeof date);
        field(dev, sizeof dev, w->device, p ? p->device : NULL);
        field(drv, sizeof drv, w->driver, p ? p->driver : NULL);
        field(tk, sizeof tk, w->toolkit, p ? p->toolkit : NULL);
        field(tr, sizeof tr, w->triton, p ? p->triton : NULL);
        field(kn, sizeof kn, w->kernel, p ? p->kernel : NULL);
        field(comp, sizeof comp, w->compiler, p ? p->compiler : NULL);
        printf("sweep %llu '%s' %s (%s)%s\n  device %s; driver %s; toolkit %s; %s %s; triton %s; kernel %s\n",
               (unsigned long long)w->id, w->name, date, w->state, w->n_devices > 1 ? " [several devices]" : "", dev,
               drv, tk, w->backend, comp, tr, kn);
        char guard[200];
        shipguard_counts_text(&w->guard, guard, sizeof guard);
        printf("  guard: %s\n", guard);
        printf("  %-40s %6s %-20s %11s %9s\n", "SHAPE", "M", "CONFIG", "BEST_US", "VS PREV");
        for (size_t k = 0; k < w->n_best; k++) {
            const cmp_best_t *b = &w->best[k], *pb = find_best(p, b);
            char shape[128], cfg[64], vs[32] = "-";
            cmp_shape_text(&b->shape, shape, sizeof shape);
            krn_config_format(&b->config, cfg, sizeof cfg);
            if (pb && pb->median_us > 0)
                snprintf(vs, sizeof vs, "%+.2f%%", (b->median_us - pb->median_us) / pb->median_us * 100.0);
            printf("  %-40.40s %6u %-20s %11.2f %9s\n", shape, b->batch_size, cfg, b->median_us, vs);
        }
    }
    cmp_sweeps_clear(&s);
    return MT_EXIT_OK;
}
