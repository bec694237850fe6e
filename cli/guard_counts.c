/* guard_counts.c - what the ship guard did to a sweep (see guard_counts.h). */
#include "guard_counts.h"

#include <stdlib.h>
#include <string.h>

#include "export.h"

typedef struct {
    dbq_result_t *best; /* per cell, its pick (exp_pairs) */
    size_t n, cap;
} picks_t;

/* Keeps each cell's pick as exp_pairs finds it (the guard's own configs left out as export does). */
static mt_status_t keep_pick(void *ctx, const dbq_result_t *best, const dbq_result_t *runner_up) {
    picks_t *x = ctx;
    (void)runner_up;
    if (mt_grow((void **)&x->best, &x->cap, x->n + 1, sizeof *x->best, 64) != MT_OK) return MT_NOMEM;
    x->best[x->n] = *best;
    x->best[x->n++].versions = ""; /* the walk's copy, valid during the call only */
    return MT_OK;
}

mt_status_t guard_counts_get(dbq_t *q, uint64_t sweep, const dbq_hist_filter_t *only, shipguard_counts_t *c,
                             char *err, size_t errlen) {
    dbq_select_t sel = {&sweep, 1, false};
    shipguard_t *g = NULL;
    picks_t x = {0};
    memset(c, 0, sizeof *c);
    int rc = shipguard_load_all(q, &sel, &g, err, errlen);
    if (rc == MT_OK && shipguard_count_engine(g)) {
        rc = exp_pairs(q, &sel, g, keep_pick, &x, err, errlen);
        if (rc == MT_OK) rc = shipguard_count_picks(g, x.best, x.n, only, c);
    }
    free(x.best);
    shipguard_free(&g);
    return rc;
}
