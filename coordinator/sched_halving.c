/* sched_halving.c - successive halving's hooks in the scheduler: which shapes of a
 * halving sweep have their phase 2 planned, and the phase transition (halving.c),
 * carried by a commit batch so that the writer thread runs it in the batch's one
 * transaction: the loop never waits on it, and it is stored exactly when the batch is.
 * See sched_int.h. */
#include <stdlib.h>
#include <string.h>

#include "halving.h"
#include "mt.h"
#include "sched_int.h"

mt_status_t sched_halving_take(sched_t *s, bhalving_t **out, size_t *n_out) {
    bhalving_t *hv = NULL;
    size_t n = 0;
    *out = NULL;
    *n_out = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) {
        sweep_t *sw = s->sweeps[i];
        if (!sw->halving || !sw->halving_due || sw->state != WIRE_SWEEP_RUNNING) continue;
        for (size_t h = 0; h < sw->n_hv; h++) {
            /* a shape waits for its phase 2 while any of its jobs is pending or leased, and for
             * the ship guard's batch sizes between the keys while any phase-2 job is */
            bool gaps = sw->gaps && sw->hv_state[h] == HV_PLANNED;
            if ((sw->hv_state[h] != HV_WAIT && !gaps) || sw->hv_open[h]) continue;
            bhalving_t *a = mt_realloc(hv, (n + 1) * sizeof *a);
            uint32_t *bs = a ? mt_malloc(sw->nb * sizeof *bs) : NULL;
            if (a) hv = a;
            if (!a || !bs) {
                free(bs);
                for (size_t k = 0; k < n; k++) hv[k].sw->hv_state[hv[k].h] = hv[k].gaps ? HV_PLANNED : HV_WAIT;
                sched_halving_free(hv, n);
                return MT_NOMEM;
            }
            memcpy(bs, sw->bs, sw->nb * sizeof *bs);
            hv[n++] = (bhalving_t){.sw = sw,
                                   .h = h,
                                   .sweep_id = sw->id,
                                   .shape_id = sw->hv_shapes[h],
                                   .bs = bs,
                                   .nb = sw->nb,
                                   .chunk = sw->chunk,
                                   .decide = sw->decide,
                                   .gaps = gaps};
            sw->hv_state[h] = gaps ? HV_GAP_TAKEN : HV_TAKEN;
        }
        sw->halving_due = false; /* a job that ends sets it again */
    }
    *out = hv;
    *n_out = n;
    return MT_OK;
}

void sched_halving_done(sched_t *s, bhalving_t *hv, size_t n, bool committed, uint64_t now_ms) {
    for (size_t i = 0; i < n; i++) {
        sweep_t *sw = hv[i].sw;
        if (!committed) {
            if (now_ms) /* 0: the batch was never built */
                log_at(MT_LOG_WARN,
                       "sweep %llu shape %llu: halving's phase 2 not planned yet (its commit failed); "
                       "the next batch carries it again",
                       (unsigned long long)sw->id, (unsigned long long)hv[i].shape_id);
            sw->hv_state[hv[i].h] = hv[i].gaps ? HV_PLANNED : HV_WAIT; /* the next batch carries it again */
            sw->halving_due = true;
            continue;
        }
        /* a round of switch points planned: once its jobs are done, the next (guard.h) */
        sw->hv_state[hv[i].h] = hv[i].gaps && hv[i].st.already ? HV_GAPPED : HV_PLANNED;
        if (!hv[i].gaps && sw->gaps) sw->halving_due = true; /* its gaps once its phase 2 is over */
        sw->pruned += hv[i].st.pruned;
        if (!hv[i].st.already) sw->planned += hv[i].st.guard_new;   /* the ship guard's rows (guard.h) */
        if (!hv[i].st.already) sw->finalists += hv[i].st.finalists; /* planned before: counted at load */
        log_at(MT_LOG_INFO, "sweep %llu shape %llu: %s: %u finalist rows in %u phase-2 jobs, %u rows pruned%s",
               (unsigned long long)sw->id, (unsigned long long)hv[i].shape_id,
               hv[i].gaps       ? "side by side over, the batch sizes between the keys checked"
               : sw->decide > 0 ? "racing over, near-ties re-measured side by side"
                                : "halving phase 1 over",
               hv[i].st.finalists, hv[i].st.jobs, hv[i].st.pruned, hv[i].st.already ? " (planned before)" : "");
    }
    if (!committed) return;
    for (size_t i = 0; i < n; i++) {
        sweep_t *sw = hv[i].sw;
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++) seen = hv[k].sw == sw;
        if (seen || sw->state != WIRE_SWEEP_RUNNING) continue;
        int rc = sched_load_new_jobs(s, sw);
        if (rc) { /* not over: a restart loads them */
            log_at(MT_LOG_ERROR, "sweep %llu: loading its phase-2 jobs: %s; a restart loads them",
                   (unsigned long long)sw->id, rc == MT_NOMEM ? "out of memory" : store_errmsg(s->db));
            continue;
        }
        sched_sweep_check(s, sw);
    }
    sched_dispatch_all(s, now_ms);
}
