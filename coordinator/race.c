/* race.c - the racing table. See race.h. */
#include "race.h"

#include <stdlib.h>

#include "mt.h"

typedef struct {
    uint64_t sweep_id, shape_id;
    uint32_t bs;
    double best_us;
} race_entry_t;

struct race {
    race_entry_t *e;
    size_t n, cap;
    size_t hint; /* where the last lookup ended: a job's batch sizes are asked for in a row */
};

race_t *race_new(void) { return calloc(1, sizeof(race_t)); }

void race_free(race_t **pr) {
    if (!pr || !*pr) return;
    free((*pr)->e);
    free(*pr);
    *pr = NULL;
}

/* A few hundred entries at most (running sweeps x shapes x batch sizes): a scan, from where
 * the last one ended. A shape's batch sizes are noted together, so they sit side by side and the
 * next lookup (a job's or a Result's next batch size) is mostly the next entry; a full scan of a
 * cluster sweep's 600 entries per lookup was a few % of the loop's time. */
static race_entry_t *find(race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs) {
    for (size_t k = 0; k < r->n; k++) {
        size_t i = (r->hint + k) % r->n;
        race_entry_t *e = &r->e[i];
        if (e->sweep_id == sweep_id && e->shape_id == shape_id && e->bs == bs) {
            r->hint = i + 1 < r->n ? i + 1 : 0;
            return e;
        }
    }
    return NULL;
}

mt_status_t race_note(race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs, double median_us) {
    if (!(median_us > 0)) return MT_OK;
    race_entry_t *e = find(r, sweep_id, shape_id, bs);
    if (e) {
        if (median_us < e->best_us) e->best_us = median_us;
        return MT_OK;
    }
    if (mt_grow((void **)&r->e, &r->cap, r->n + 1, sizeof *r->e, 64) != MT_OK) return MT_NOMEM;
    r->e[r->n++] = (race_entry_t){sweep_id, shape_id, bs, median_us};
    return MT_OK;
}

double race_best(race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs) {
    const race_entry_t *e = r ? find(r, sweep_id, shape_id, bs) : NULL;
    return e ? e->best_us : 0.0;
}

double race_shape_top(const race_t *r, uint64_t sweep_id, uint64_t shape_id) {
    double top = 0.0;
    for (size_t i = 0; r && i < r->n; i++)
        if (r->e[i].sweep_id == sweep_id && r->e[i].shape_id == shape_id && r->e[i].best_us > top)
            top = r->e[i].best_us;
    return top;
}

void race_forget(race_t *r, uint64_t sweep_id) {
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->e[i].sweep_id != sweep_id) r->e[k++] = r->e[i];
    r->n = k;
    r->hint = 0;
}

size_t race_size(const race_t *r) { return r ? r->n : 0; }
