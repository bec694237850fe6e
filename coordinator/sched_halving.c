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

static bool state_open(wire_job_state_t st) { return st == WIRE_JOB_PENDING || st == WIRE_JOB_LEASED; }

mt_status_t sched_halving_add_shape(sweep_t *sw, uint64_t shape_id, bool planned_before) {
    for (size_t h = 0; h < sw->n_hv; h++) { /* one slot a shape: its open count is kept in the first */
        if (sw->hv_shapes[h] != shape_id) continue;
        if (planned_before) sw->hv_state[h] = HV_PLANNED;
        return MT_OK;
    }
    size_t n = sw->n_hv + 1;
    uint64_t *ids = realloc(sw->hv_shapes, n * sizeof *ids);
    if (ids) sw->hv_shapes = ids;
    uint8_t *state = realloc(sw->hv_state, n * sizeof *state);
    if (state) sw->hv_state = state;
    uint32_t *open = realloc(sw->hv_open, n * sizeof *open);
    if (open) sw->hv_open = open;
    if (!ids || !state || !open) return MT_NOMEM;
    uint32_t n_open = 0; /* its jobs indexed before it was added */
    for (size_t i = 0; i < sw->n_jobs; i++) n_open += sw->jobs[i]->shape_id == shape_id && state_open(sw->jobs[i]->state);
    sw->hv_shapes[sw->n_hv] = shape_id;
    sw->hv_state[sw->n_hv] = planned_before ? HV_PLANNED : HV_WAIT;
    sw->hv_open[sw->n_hv] = n_open;
    sw->n_hv++;
    return MT_OK;
}

void sched_halving_count(job_t *j, wire_job_state_t from) {
    sweep_t *sw = j->sw;
    if (j->phase >= 2) sw->pending2 += (uint32_t)((int)(j->state == WIRE_JOB_PENDING) - (int)(from == WIRE_JOB_PENDING));
    int delta = (int)state_open(j->state) - (int)state_open(from);
    if (!delta) return;
    for (size_t h = 0; h < sw->n_hv; h++) {
        if (sw->hv_shapes[h] != j->shape_id) continue;
        sw->hv_open[h] += (uint32_t)delta; /* never below 0: every job is counted in before it leaves */
        return;
    }
}

static mt_status_t load_phase(void *ctx, uint64_t shape_id, uint32_t max_phase) {
    return sched_halving_add_shape(ctx, shape_id, max_phase >= 2);
}

mt_status_t sched_halving_load(sched_t *s, sweep_t *sw) {
    return store_sweep_phases_each(s->db, sw->id, load_phase, sw);
}

bool sched_halving_waiting(const sweep_t *sw) {
    for (size_t h = 0; sw->halving && h < sw->n_hv; h++)
        if (sw->hv_state[h] != (sw->gaps ? HV_GAPPED : HV_PLANNED)) return true;
    return false;
}

void sched_halving_free(bhalving_t *hv, size_t n) {
    for (size_t i = 0; hv && i < n; i++) free(hv[i].bs);
    free(hv);
}

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
            bhalving_t *a = realloc(hv, (n + 1) * sizeof *a);
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
        sw->hv_state[hv[i].h] = hv[i].gaps ? HV_GAPPED : HV_PLANNED;
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
