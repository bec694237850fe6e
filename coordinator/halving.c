/* halving.c - successive halving: finalists and the phase transition. See halving.h. */
#include "halving.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"
#include "mt.h"

bool halving_is(const char *strategy) { return strategy && strcmp(strategy, "halving") == 0; }

bool halving_strategy_known(const char *strategy) {
    return !strategy || !*strategy || strcmp(strategy, "exhaustive") == 0 || halving_is(strategy);
}

double halving_decide_margin(const char *strategy, const Moetune__Measure *filled) {
    if (halving_is(strategy) || !(filled->race_margin > 0) || !(filled->decide_margin > 0)) return 0.0;
    return filled->decide_margin;
}

void halving_measure(const Moetune__Measure *sweep, uint32_t phase, bool decide, Moetune__Measure *out) {
    *out = *sweep;
    if (phase <= 1) {
        if (decide) return;
        out->min_samples = HALVING_PHASE1_SAMPLES;
        out->max_samples = HALVING_PHASE1_SAMPLES;
    } else {
        out->race_margin = -1.0;
    }
}

static int cmp_row(const void *a, const void *b) {
    const halving_row_t *x = a, *y = b;
    if (x->bi != y->bi) return x->bi < y->bi ? -1 : 1;
    if (x->median_us != y->median_us) return x->median_us < y->median_us ? -1 : 1;
    return (x->config_id > y->config_id) - (x->config_id < y->config_id);
}

uint64_t halving_finalists_estimate(uint64_t configs, size_t nb) {
    uint64_t keep = (configs + HALVING_KEEP_DIV - 1) / HALVING_KEEP_DIV;
    if (keep < HALVING_KEEP_MIN) keep = HALVING_KEEP_MIN;
    if (nb > 1) keep++;
    return (keep < configs ? keep : configs) * nb;
}

/* Sorts rows by batch size, then median (then config id), fills start[b] .. start[b + 1]
 * (start: nb + 1 entries) with batch size b's rows, fastest first, and ranks them. */
static mt_status_t rank_rows(halving_row_t *rows, size_t n, size_t nb, size_t *start) {
    for (size_t i = 0; i < n; i++)
        if (rows[i].bi >= nb) return MT_INVAL;
    if (n) qsort(rows, n, sizeof *rows, cmp_row);
    for (size_t i = 0, b = 0; b <= nb; b++) {
        while (i < n && rows[i].bi < b) i++;
        start[b] = i;
    }
    for (size_t b = 0; b < nb; b++)
        for (size_t k = start[b]; k < start[b + 1]; k++) rows[k].rank = (uint32_t)(k - start[b] + 1);
    return MT_OK;
}

/* Marks, among rows lo .. hi (one batch size, fastest first), per device the rows within window
 * (a ratio) of that device's own fastest: at most first_cap of the best's device, other_cap of
 * each other device whose fastest row is within HALVING_DEVICE_MARGIN of the best (at most
 * HALVING_DEVICE_MAX of them, the nearest first). Cards of one model read a few percent apart,
 * so each card's own leaders are compared side by side. Returns how many it marked that were
 * not marked. */
static size_t mark_devices(halving_row_t *rows, size_t lo, size_t hi, double window, size_t first_cap,
                           size_t other_cap) {
    struct {
        uint64_t id;
        double best;
        size_t kept;
    } dev[1 + HALVING_DEVICE_MAX];
    size_t nd = 0, added = 0;
    double reach = lo < hi ? rows[lo].median_us * (1.0 + HALVING_DEVICE_MARGIN) : 0.0;
    for (size_t k = lo; k < hi; k++) {
        halving_row_t *r = &rows[k];
        size_t d = 0;
        while (d < nd && dev[d].id != r->device_id) d++;
        if (d == nd) {
            if (nd == 1 + HALVING_DEVICE_MAX || r->median_us > reach) continue;
            dev[nd].id = r->device_id, dev[nd].best = r->median_us, dev[nd].kept = 0;
            nd++;
        }
        if (dev[d].kept == (d ? other_cap : first_cap) || r->median_us > dev[d].best * window) continue;
        dev[d].kept++;
        added += !r->finalist;
        r->finalist = true;
    }
    return added;
}

/* Marks, among rows lo .. hi (one batch size, fastest first), halving's finalists: its kept share
 * by rank, at least HALVING_KEEP_MIN; on several devices, of each other device the rows within
 * the kept share's spread (its slowest over the best) of that device's own fastest, at most half
 * the share: a card that reads a few percent slow keeps its own leaders. */
static void mark_halving(halving_row_t *rows, size_t lo, size_t hi) {
    size_t keep = (hi - lo + HALVING_KEEP_DIV - 1) / HALVING_KEEP_DIV;
    if (keep < HALVING_KEEP_MIN) keep = HALVING_KEEP_MIN;
    for (size_t k = lo; k < hi; k++) rows[k].finalist = rows[k].rank <= keep;
    if (hi - lo > keep)
        mark_devices(rows, lo, hi, rows[lo + keep - 1].median_us / rows[lo].median_us, 0, (keep + 1) / 2);
}

/* Marks, among rows lo .. hi (one batch size, fastest first), at most HALVING_DECIDE_MODES rows not
 * marked whose fastest sample beat the best's by more than half the margin, their median within
 * HALVING_MODE_REACH of the best's, the lowest fastest sample first. Returns how many. */
static size_t mark_modes(halving_row_t *rows, size_t lo, size_t hi, double margin) {
    size_t added = 0;
    if (lo == hi) return 0;
    double fastest = rows[lo].min_us > 0 ? rows[lo].min_us : rows[lo].median_us;
    double below = fastest * (1.0 - margin / 2), reach = rows[lo].median_us * (1.0 + HALVING_MODE_REACH);
    while (added < HALVING_DECIDE_MODES) {
        halving_row_t *pick = NULL;
        for (size_t k = lo; k < hi && rows[k].median_us <= reach; k++)
            if (!rows[k].finalist && rows[k].min_us > 0 && rows[k].min_us < below &&
                (!pick || rows[k].min_us < pick->min_us))
                pick = &rows[k];
        if (!pick) break;
        pick->finalist = true;
        added++;
    }
    return added;
}

/* Marks, among rows lo .. hi (one batch size, fastest first), the decide step's finalists: per
 * device (mark_devices) its rows within margin of its own fastest, at most HALVING_DECIDE_MAX of
 * the best's device and HALVING_DEVICE_NEAR of each other, and the rows of two modes
 * (mark_modes); then, up to HALVING_DECIDE_MIN, the next rows by rank within HALVING_MODE_REACH
 * of the best. None where that leaves the best alone. */
static void mark_decide(halving_row_t *rows, size_t lo, size_t hi, double margin) {
    for (size_t k = lo; k < hi; k++) rows[k].finalist = false;
    size_t marked = mark_devices(rows, lo, hi, 1.0 + margin, HALVING_DECIDE_MAX, HALVING_DEVICE_NEAR);
    marked += mark_modes(rows, lo, hi, margin);
    double reach = lo < hi ? rows[lo].median_us * (1.0 + HALVING_MODE_REACH) : 0.0;
    for (size_t k = lo; k < hi && marked < HALVING_DECIDE_MIN && rows[k].median_us <= reach; k++)
        if (!rows[k].finalist) {
            rows[k].finalist = true;
            marked++;
        }
    if (marked < 2)
        for (size_t k = lo; k < hi; k++) rows[k].finalist = false; /* the best alone: nothing to compare */
}

/* halving_choose (margin 0) and halving_choose_decide (margin > 0). */
static mt_status_t choose(halving_row_t *rows, size_t n, size_t nb, double margin) {
    size_t *start = mt_calloc(nb + 1, sizeof *start);
    if (!start) return MT_NOMEM;
    mt_status_t rc = rank_rows(rows, n, nb, start);
    for (size_t b = 0; !rc && b < nb; b++) {
        if (margin > 0)
            mark_decide(rows, start[b], start[b + 1], margin);
        else
            mark_halving(rows, start[b], start[b + 1]);
    }
    /* Halving's seeds: a neighbouring batch size's winner is measured here too, so a winner
     * that phase 1's few samples put just outside the kept share at this size gets its chance. */
    for (size_t b = 0; !rc && !(margin > 0) && b < nb; b++) {
        for (int d = -1; d <= 1; d += 2) {
            if ((d < 0 && b == 0) || (d > 0 && b + 1 >= nb)) continue;
            size_t o = (size_t)((long)b + d);
            if (start[o] == start[o + 1]) continue;
            uint64_t winner = rows[start[o]].config_id;
            for (size_t k = start[b]; k < start[b + 1]; k++)
                if (rows[k].config_id == winner) rows[k].finalist = true;
        }
    }
    free(start);
    return rc;
}

mt_status_t halving_choose(halving_row_t *rows, size_t n, size_t nb) { return choose(rows, n, nb, 0.0); }

mt_status_t halving_choose_decide(halving_row_t *rows, size_t n, size_t nb, double margin) {
    return choose(rows, n, nb, margin);
}

mt_status_t halving_bs_format(const uint32_t *bs, size_t n, char *buf, size_t len) {
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf + used, len - used, "%s%u", i ? "," : "", bs[i]);
        if (w < 0 || (size_t)w >= len - used) return MT_INVAL;
        used += (size_t)w;
    }
    return MT_OK;
}

mt_status_t halving_bs_parse(const char *text, const uint32_t *allowed, size_t n_allowed, uint32_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (!text || !*text) return MT_INVAL;
    uint32_t *v = mt_malloc(n_allowed * sizeof *v + 1);
    if (!v) return MT_NOMEM;
    size_t k = 0;
    const char *p = text;
    for (;;) {
        char *end = NULL;
        if (*p < '0' || *p > '9') break;
        unsigned long x = strtoul(p, &end, 10);
        bool ok = false;
        for (size_t i = 0; i < n_allowed && !ok; i++) ok = allowed[i] == x;
        for (size_t i = 0; i < k && ok; i++) ok = v[i] != x;
        if (!ok || k == n_allowed) break;
        v[k++] = (uint32_t)x;
        if (*end == '\0') {
            *out = v;
            *n = k;
            return MT_OK;
        }
        if (*end != ',') break;
        p = end + 1;
    }
    free(v);
    return MT_INVAL;
}

typedef struct {
    halving_row_t *rows;
    size_t n, cap;
    const uint32_t *bs;
    size_t nb;
} collect_t;

static mt_status_t collect(void *ctx, uint64_t config_id, uint32_t batch_size, double median_us, uint64_t device_id,
                           double min_us) {
    collect_t *c = ctx;
    size_t bi = c->nb;
    for (size_t i = 0; i < c->nb; i++)
        if (c->bs[i] == batch_size) bi = i;
    if (bi == c->nb || !(median_us > 0)) return MT_OK; /* not one of the sweep's: not a candidate */
    if (mt_grow((void **)&c->rows, &c->cap, c->n + 1, sizeof *c->rows, 256) != MT_OK) return MT_NOMEM;
    c->rows[c->n++] = (halving_row_t){
        .config_id = config_id, .device_id = device_id, .bi = (uint32_t)bi, .median_us = median_us, .min_us = min_us};
    return MT_OK;
}

typedef struct {
    bool planned;
    uint64_t shape_id;
} phase_probe_t;

static mt_status_t probe(void *ctx, uint64_t shape_id, uint32_t max_phase) {
    phase_probe_t *p = ctx;
    if (shape_id == p->shape_id && max_phase >= 2) p->planned = true;
    return MT_OK;
}

/* Prunes the non-finalists' rows (halving) and stores the phase-2 jobs, in the open transaction:
 * one job per batch size (at most chunk configs each, the fastest first), so a batch size's
 * finalists are measured side by side by one worker (sched_job_side_by_side); the largest
 * batch size's (the longest job) first, so it is leased first. The decide step (prune false)
 * prunes nothing. */
static int plan_rows(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb, uint32_t chunk,
                     bool prune, int64_t now_s, halving_row_t *rows, size_t n, halving_step_t *out) {
    int rc = MT_OK;
    char text[16];
    size_t *per_bs = mt_calloc(nb ? nb : 1, sizeof *per_bs);
    if (!per_bs) return MT_NOMEM;
    for (size_t i = 0; i < n; i++) per_bs[rows[i].bi]++;
    for (size_t i = 0; !rc && i < n; i++) {
        halving_row_t *r = &rows[i];
        if (r->finalist) {
            out->finalists++;
            continue;
        }
        if (!prune) continue;
        char detail[96];
        bool changed = false;
        mt_fmt(detail, sizeof detail, "halving: rank %u of %zu at phase 1 (%d samples)", r->rank, per_bs[r->bi],
               HALVING_PHASE1_SAMPLES);
        rc = store_result_prune(db, sweep_id, shape_id, r->config_id, bs[r->bi], 1, detail, &changed);
        if (!rc && changed) out->pruned++;
    }
    free(per_bs);
    for (size_t end = n; !rc && end > 0;) { /* rows are by batch size, fastest first */
        size_t start = end;
        while (start > 0 && rows[start - 1].bi == rows[end - 1].bi) start--;
        uint64_t job_id = 0;
        uint32_t in_job = 0;
        for (size_t i = start; !rc && i < end; i++) {
            if (!rows[i].finalist) continue;
            if (!job_id || in_job == chunk) {
                rc = halving_bs_format(&bs[rows[i].bi], 1, text, sizeof text);
                if (!rc) rc = store_job_insert_phase(db, sweep_id, shape_id, 2, text, NULL, now_s, &job_id);
                if (rc) break;
                out->jobs++;
                in_job = 0;
            }
            rc = store_job_config_insert(db, job_id, rows[i].config_id);
            in_job++;
        }
        end = start;
    }
    return rc;
}

mt_status_t halving_advance(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                            uint32_t chunk, double decide, int64_t now_s, halving_step_t *out) {
    collect_t c = {.bs = bs, .nb = nb};
    phase_probe_t p = {.shape_id = shape_id};
    memset(out, 0, sizeof *out);
    if (!chunk) chunk = 16;
    int rc = store_sweep_phases_each(db, sweep_id, probe, &p);
    if (!rc && p.planned) /* planned before: its phase 2 is over, the ship guard's gaps are next (guard.h) */
        return guard_gaps_advance(db, sweep_id, shape_id, bs, nb, now_s, out);
    if (!rc) rc = store_phase_rows_each(db, sweep_id, shape_id, 1, collect, &c);
    /* Phase 1 measured on several GPUs: each batch size's finalists in one job, so that one card
     * measures them all side by side (cards of one model read a few percent apart;
     * docs/performance.md). */
    for (size_t i = 1; i < c.n && chunk != UINT32_MAX; i++)
        if (c.rows[i].device_id != c.rows[0].device_id) chunk = UINT32_MAX;
    if (!rc) rc = decide > 0 ? halving_choose_decide(c.rows, c.n, nb, decide) : halving_choose(c.rows, c.n, nb);
    /* the ship guard: what the engine runs without the file, beside the finalists (guard.h); the
     * decide step's rows of a batch size in one job, so the guard's are beside all of them */
    guard_step_t gs = {0};
    if (!rc) rc = guard_advance(db, sweep_id, shape_id, bs, nb, &c.rows, &c.n, &c.cap, &gs);
    if (!rc && gs.rows && decide > 0) chunk = UINT32_MAX;
    if (!rc && gs.new_rows) rc = store_sweep_add_planned(db, sweep_id, gs.new_rows);
    out->guard_new = gs.new_rows;
    if (!rc) rc = plan_rows(db, sweep_id, shape_id, bs, nb, chunk, !(decide > 0), now_s, c.rows, c.n, out);
    free(c.rows);
    return rc;
}

mt_status_t halving_plan_shape(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                               uint32_t chunk, double decide, int64_t now_s, halving_step_t *out) {
    int rc = store_begin(db);
    if (rc) return rc;
    rc = halving_advance(db, sweep_id, shape_id, bs, nb, chunk, decide, now_s, out);
    if (!rc) rc = store_commit(db);
    if (rc) {
        store_rollback(db);
        memset(out, 0, sizeof *out);
    }
    return rc;
}
