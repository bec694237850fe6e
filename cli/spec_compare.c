/* spec_compare.c - two sweep specs side by side: whether they are for the same target, and
 * the settings that differ, in words (see spec.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "mt.h"
#include "planner.h"
#include "shipguard.h"
#include "spec.h"

static bool u32s_eq(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static bool str_eq(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

bool cli_spec_same_target(const Moetune__SweepSpec *a, const Moetune__SweepSpec *b) {
    if (!a || !b || !str_eq(a->name, b->name) || !str_eq(a->backend, b->backend)) return false;
    if (a->n_shapes != b->n_shapes) return false;
    for (size_t i = 0; i < a->n_shapes; i++) {
        const Moetune__Shape *x = a->shapes[i], *y = b->shapes[i];
        if (x->e != y->e || x->n != y->n || x->k != y->k || x->topk != y->topk || !str_eq(x->dtype, y->dtype) ||
            x->block_n != y->block_n || x->block_k != y->block_k || !str_eq(x->routing, y->routing))
            return false;
    }
    return true;
}

/* Appends "what: A (was) vs B (now)" to the diff text. */
static void add_diff(char *diff, size_t len, size_t *n, const char *what, const char *was, const char *now) {
    size_t used = strlen(diff);
    if (used + 1 < len) snprintf(diff + used, len - used, "%s%s %s, now %s", *n ? "; " : "", what, was, now);
    (*n)++;
}

static void diff_u64(char *diff, size_t len, size_t *n, const char *what, uint64_t was, uint64_t now) {
    if (was == now) return;
    char a[32], b[32];
    snprintf(a, sizeof a, "%llu", (unsigned long long)was);
    snprintf(b, sizeof b, "%llu", (unsigned long long)now);
    add_diff(diff, len, n, what, a, b);
}

static void list_text(const uint32_t *v, size_t nv, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < nv && used + 12 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%u", i ? "," : "", v[i]);
    if (nv == 0) snprintf(buf, len, "(none)");
}

static void diff_list(char *diff, size_t len, size_t *n, const char *what, const uint32_t *was, size_t nwas,
                      const uint32_t *now, size_t nnow) {
    if (u32s_eq(was, nwas, now, nnow)) return;
    char a[200], b[200];
    list_text(was, nwas, a, sizeof a);
    list_text(now, nnow, b, sizeof b);
    add_diff(diff, len, n, what, a, b);
}

static void diff_str(char *diff, size_t len, size_t *n, const char *what, const char *was, const char *now) {
    if (str_eq(was, now)) return;
    char a[140], b[140];
    snprintf(a, sizeof a, "'%s'", was ? was : "");
    snprintf(b, sizeof b, "'%s'", now ? now : "");
    add_diff(diff, len, n, what, a, b);
}

/* A margin: negative is off, shown as 0 (the option's "off"). */
static void diff_margin(char *diff, size_t len, size_t *n, const char *what, double was, double now) {
    if (was == now) return;
    char a[32], b[32];
    snprintf(a, sizeof a, "%g", was > 0 ? was : 0.0);
    snprintf(b, sizeof b, "%g", now > 0 ? now : 0.0);
    add_diff(diff, len, n, what, a, b);
}

mt_status_t cli_spec_compare(const Moetune__SweepSpec *was, const Moetune__SweepSpec *now, bool *same, char *diff,
                             size_t len) {
    int rc = MT_OK;
    plan_t *pa = NULL, *pb = NULL;
    size_t n = 0;
    *same = false;
    diff[0] = '\0';
    char why[300];
    if (plan_build(was, &pa, why, sizeof why) != MT_OK) {
        mt_fmt(diff, len, "the stored spec does not plan: %s", why);
        rc = MT_INVAL;
        goto out;
    }
    if (plan_build(now, &pb, why, sizeof why) != MT_OK) {
        mt_fmt(diff, len, "%s", why);
        rc = MT_INVAL;
        goto out;
    }
    const char *sa = was->strategy && *was->strategy ? was->strategy : "exhaustive";
    const char *sb = now->strategy && *now->strategy ? now->strategy : "exhaustive";
    diff_str(diff, len, &n, "name", was->name, now->name);
    diff_str(diff, len, &n, "backend", was->backend, now->backend);
    diff_str(diff, len, &n, "strategy", sa, sb);
    diff_str(diff, len, &n, "device filter", was->device_filter, now->device_filter);
    diff_str(diff, len, &n, "routing", was->routing_path, now->routing_path);
    diff_str(diff, len, &n, "guard", was->no_guard ? "off" : "on", now->no_guard ? "off" : "on");
    if (!cli_guard_same_incumbents(was, now)) /* the --baseline entries, wherever the file lay */
        add_diff(diff, len, &n, "baseline", was->n_incumbents ? "given" : "none",
                 now->n_incumbents ? "other entries" : "none");
    {
        char ea[64] = "", eb[64] = "";
        for (size_t i = 0; i < was->n_engines; i++)
            snprintf(ea + strlen(ea), sizeof ea - strlen(ea), "%s%s", i ? "," : "", was->engines[i]);
        for (size_t i = 0; i < now->n_engines; i++)
            snprintf(eb + strlen(eb), sizeof eb - strlen(eb), "%s%s", i ? "," : "", now->engines[i]);
        diff_str(diff, len, &n, "engines", ea, eb);
    }
    diff_list(diff, len, &n, "batch sizes", pa->batch_sizes, pa->n_batch_sizes, pb->batch_sizes, pb->n_batch_sizes);
    const krn_space_t *x = &pa->space, *y = &pb->space;
    for (int f = 0; f < KRN_N_FIELDS; f++)
        diff_list(diff, len, &n, krn_config_fields[f].name, x->values[f], x->n[f], y->values[f], y->n[f]);
    if (x->n_list != y->n_list || (x->n_list && memcmp(x->list, y->list, x->n_list * sizeof x->list[0]) != 0)) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%u listed", x->n_list);
        snprintf(b, sizeof b, "%u listed%s", y->n_list, x->n_list == y->n_list ? " (other configs)" : "");
        add_diff(diff, len, &n, "configs", a, b);
    }
    if (pa->sample != pb->sample) {
        char a[32] = "all", b[32] = "all";
        if (pa->sample) snprintf(a, sizeof a, "%u", pa->sample);
        if (pb->sample) snprintf(b, sizeof b, "%u", pb->sample);
        add_diff(diff, len, &n, "sample", a, b);
    }
    if (pa->chunk != pb->chunk) { /* 0: the coordinator sizes each shape's jobs */
        char a[32] = "by shape", b[32] = "by shape";
        if (pa->chunk) snprintf(a, sizeof a, "%u", pa->chunk);
        if (pb->chunk) snprintf(b, sizeof b, "%u", pb->chunk);
        add_diff(diff, len, &n, "chunk", a, b);
    }
    diff_u64(diff, len, &n, "max_attempts", pa->max_attempts, pb->max_attempts);
    const Moetune__Measure *m = &pa->measure, *o = &pb->measure;
    diff_u64(diff, len, &n, "warmup", m->warmup, o->warmup);
    diff_u64(diff, len, &n, "min_samples", m->min_samples, o->min_samples);
    diff_u64(diff, len, &n, "max_samples", m->max_samples, o->max_samples);
    diff_u64(diff, len, &n, "budget_ms", m->budget_ms, o->budget_ms);
    diff_u64(diff, len, &n, "timeout_ms", m->timeout_ms, o->timeout_ms);
    diff_u64(diff, len, &n, "seed", m->seed, o->seed);
    if (m->rsd_target != o->rsd_target) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%g", m->rsd_target);
        snprintf(b, sizeof b, "%g", o->rsd_target);
        add_diff(diff, len, &n, "rsd_target", a, b);
    }
    diff_margin(diff, len, &n, "race_margin", m->race_margin, o->race_margin);
    diff_margin(diff, len, &n, "decide_margin", m->decide_margin, o->decide_margin);
    if ((m->fresh_rounds > 0) != (o->fresh_rounds > 0))
        add_diff(diff, len, &n, "round_process", m->fresh_rounds > 0 ? "new" : "same",
                 o->fresh_rounds > 0 ? "new" : "same");
    /* The same space can expand differently when the static rules changed since. */
    if (pa->n_shapes != pb->n_shapes) {
        diff_u64(diff, len, &n, "shapes", pa->n_shapes, pb->n_shapes);
    } else {
        for (size_t i = 0; i < pa->n_shapes; i++) {
            const plan_shape_t *p = &pa->shapes[i], *q = &pb->shapes[i];
            bool eq = p->n_valid == q->n_valid &&
                      (p->n_valid == 0 || memcmp(p->valid, q->valid, p->n_valid * sizeof *p->valid) == 0);
            if (!eq) {
                char what[160], sh[96];
                krn_shape_name(&p->shape, sh, sizeof sh);
                mt_fmt(what, sizeof what, "valid configs of %s,K=%u", sh, p->shape.k);
                char a[32], b[32];
                snprintf(a, sizeof a, "%zu", p->n_valid);
                snprintf(b, sizeof b, "%zu%s", q->n_valid, p->n_valid == q->n_valid ? " (other configs)" : "");
                add_diff(diff, len, &n, what, a, b);
            }
        }
    }
    *same = n == 0;
out:
    plan_destroy(&pa);
    plan_destroy(&pb);
    return rc;
}
