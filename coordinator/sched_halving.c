/* sched_halving.c - successive halving's hooks in the scheduler: which shapes of a
 * halving sweep have their phase 2 planned, and planning it (halving.c, one transaction)
 * when a shape's phase-1 jobs are over. Runs on the event loop's thread, when no commit
 * batch is out (so the loop's transaction never waits on the writer's). See sched_int.h. */
#include <stdlib.h>

#include "halving.h"
#include "mt.h"
#include "sched_int.h"

/* A failed transition (a locked database) is tried again after this long. */
#define HALVING_RETRY_MS 1000

int sched_halving_add_shape(sweep_t *sw, uint64_t shape_id, bool planned_before) {
    size_t n = sw->n_hv + 1;
    uint64_t *ids = realloc(sw->hv_shapes, n * sizeof *ids);
    if (ids) sw->hv_shapes = ids;
    bool *planned = realloc(sw->hv_planned, n * sizeof *planned);
    if (planned) sw->hv_planned = planned;
    if (!ids || !planned) return MT_NOMEM;
    sw->hv_shapes[sw->n_hv] = shape_id;
    sw->hv_planned[sw->n_hv] = planned_before;
    sw->n_hv++;
    return MT_OK;
}

static int load_phase(void *ctx, uint64_t shape_id, uint32_t max_phase) {
    return sched_halving_add_shape(ctx, shape_id, max_phase >= 2);
}

int sched_halving_load(sched_t *s, sweep_t *sw) { return store_sweep_phases_each(s->db, sw->id, load_phase, sw); }

bool sched_halving_waiting(const sweep_t *sw) {
    for (size_t h = 0; sw->halving && h < sw->n_hv; h++)
        if (!sw->hv_planned[h]) return true;
    return false;
}

static void poll(sched_t *s, sweep_t *sw, uint64_t now_ms) {
    if (!sw->halving || !sw->halving_due || sw->state != S_RUNNING || s->inflight) return;
    if (now_ms && now_ms < sw->hv_retry_ms) return;
    bool retry = false, planned = false;
    size_t n_before = sw->n_jobs;
    for (size_t h = 0; h < sw->n_hv; h++) {
        bool open = sw->hv_planned[h];
        for (size_t i = 0; i < sw->n_jobs && !open; i++) {
            const job_t *j = sw->jobs[i];
            open = j->shape_id == sw->hv_shapes[h] && (j->state == J_PENDING || j->state == J_LEASED);
        }
        if (open) continue;
        halving_step_t st;
        int rc = halving_plan_shape(s->db, sw->id, sw->hv_shapes[h], sw->bs, sw->nb, sw->chunk, mt_wall_s(), &st);
        if (rc) {
            log_at(MT_LOG_WARN, "sweep %llu shape %llu: halving's phase 2 not planned yet (%s); retried",
                   (unsigned long long)sw->id, (unsigned long long)sw->hv_shapes[h],
                   rc == MT_NOMEM ? "out of memory" : store_errmsg(s->db));
            retry = true;
            sw->hv_retry_ms = now_ms + HALVING_RETRY_MS;
            continue;
        }
        sw->hv_planned[h] = true;
        planned = true;
        sw->pruned += st.pruned;
        log_at(MT_LOG_INFO, "sweep %llu shape %llu: halving phase 1 over: %u finalist rows in %u phase-2 jobs, %u rows "
               "pruned%s", (unsigned long long)sw->id, (unsigned long long)sw->hv_shapes[h], st.finalists, st.jobs,
               st.pruned, st.already ? " (planned before)" : "");
    }
    sw->halving_due = retry;
    if (!planned) return;
    int rc = sched_load_new_jobs(s, sw);
    if (rc) {
        log_at(MT_LOG_ERROR, "sweep %llu: loading its phase-2 jobs: %s; a restart loads them", (unsigned long long)sw->id,
               rc == MT_NOMEM ? "out of memory" : store_errmsg(s->db));
        sw->halving_due = true;
        return;
    }
    sched_sweep_check(s, sw);
    if (sw->n_jobs > n_before && now_ms) sched_dispatch_all(s, now_ms);
}

void sched_halving_poll_all(sched_t *s, uint64_t now_ms) {
    for (size_t i = 0; i < s->n_sweeps; i++) poll(s, s->sweeps[i], now_ms);
}
