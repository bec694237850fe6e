/* sched_model.c - the scheduler's shared model, below its other files: growing and
 * indexing jobs, job state and the counts that follow it, finishing a job, the sweep-over
 * check, workers (find, add, hold), acks, and freeing jobs and commit batches. Nothing here
 * dispatches or talks to a peer; the entry points (scheduler.c and the sched_*.c files above
 * this one) do. See sched_int.h. */
#include <stdlib.h>
#include <string.h>

#include "halving.h"
#include "mt.h"
#include "race.h"
#include "sched_int.h"

/* ---- workers and jobs */

const char *sched_worker_gpu(const sched_worker_t *w) {
    const Moetune__Hello *h = w->hello ? w->hello->hello : NULL;
    return h && h->gpu && h->gpu->name ? h->gpu->name : "";
}

/* A sweep's results are for one kernel: a worker of another backend measures another kernel.
 * And for one measuring identity (GPU model, backend, compiler and toolkit, kernel hash,
 * versions): once leased to one, a sweep is measured only by workers of that identity, so every
 * row of a sweep comes from the same kernel build on the same model (a mixed fleet never
 * splits one). */
bool sched_worker_matches(const sched_worker_t *w, const sweep_t *sw) {
    const Moetune__Hello *h = w->hello ? w->hello->hello : NULL;
    if (!h || !w->identity) return false;
    if (sw->backend && (!h->backend || strcmp(h->backend, sw->backend) != 0)) return false;
    if (sw->device && strcmp(w->identity, sw->device) != 0) return false;
    return !sw->filter || !*sw->filter || strstr(sched_worker_gpu(w), sw->filter) != NULL;
}

void sched_job_dirty(sched_t *s, job_t *j) {
    if (j->dirty) return;
    if (mt_grow((void **)&s->dirty_jobs, &s->cap_dirty, s->n_dirty + 1, sizeof *s->dirty_jobs, 16)) {
        log_at(MT_LOG_ERROR, "out of memory queueing job %llu", (unsigned long long)j->id);
        return;
    }
    s->dirty_jobs[s->n_dirty++] = j;
    j->dirty = true;
}

void sched_set_job_state(job_t *j, wire_job_state_t state) {
    wire_job_state_t from = j->state;
    j->sw->jobs_by_state[j->state]--;
    j->state = state;
    j->sw->jobs_by_state[state]++;
    sched_halving_count(j, from);
}

void sched_job_release(job_t *j) {
    sched_worker_t *w = j->holder;
    if (!w) return;
    j->claim_cfg = 0;
    size_t i = j->held_idx;
    w->held[i] = w->held[--w->n_held];
    w->held[i]->held_idx = i;
    j->holder = NULL;
}

/* A sweep is over when no job is pending or leased. */
void sched_sweep_check(sched_t *s, sweep_t *sw) {
    if (sw->state != WIRE_SWEEP_RUNNING || sw->jobs_by_state[WIRE_JOB_PENDING] || sw->jobs_by_state[WIRE_JOB_LEASED])
        return;
    if (sched_halving_waiting(sw)) {
        sw->halving_due = true; /* not over: a shape's phase 2 is still to plan */
        return;
    }
    sw->state = sw->jobs_by_state[WIRE_JOB_FAILED] ? WIRE_SWEEP_FAILED : WIRE_SWEEP_DONE;
    sw->finished = mt_wall_s();
    sw->dirty = true;
    race_forget(s->race, sw->id);
    log_at(MT_LOG_INFO, "sweep %llu '%s' %s: %llu results, %llu not ok", (unsigned long long)sw->id, sw->name,
           wire_sweep_state_name(sw->state), (unsigned long long)sw->done, (unsigned long long)sw->failed);
}

void sched_job_finish(sched_t *s, job_t *j, wire_job_state_t state) {
    sched_job_release(j);
    sched_set_job_state(j, state);
    j->finished = mt_wall_s();
    if (j->phase == 1 && j->sw->halving) j->sw->halving_due = true;
    sched_job_dirty(s, j);
    log_at(MT_LOG_INFO, "job %llu (sweep %llu) %s after %u attempts", (unsigned long long)j->id,
           (unsigned long long)j->sw->id, wire_job_state_name(state), j->attempts);
    sched_sweep_check(s, j->sw);
}

/* Makes room to index one more job of sw with this id; nothing else changes. */
mt_status_t sched_job_index_reserve(sched_t *s, sweep_t *sw, uint64_t id) {
    if (id >= s->cap_by_id && mt_grow((void **)&s->by_id, &s->cap_by_id, id + 1, sizeof *s->by_id, 16)) return MT_NOMEM;
    return mt_grow((void **)&sw->jobs, &sw->cap_jobs, sw->n_jobs + 1, sizeof *sw->jobs, 16);
}

/* Indexes j by id and in its sweep: all or nothing (MT_NOMEM leaves no entry behind). */
mt_status_t sched_job_index(sched_t *s, job_t *j) {
    if (sched_job_index_reserve(s, j->sw, j->id)) return MT_NOMEM;
    sweep_t *sw = j->sw;
    s->by_id[j->id] = j;
    j->idx = sw->n_jobs;
    sw->jobs[sw->n_jobs++] = j;
    sw->jobs_by_state[j->state]++;
    sched_halving_count(j, WIRE_JOB_DONE); /* counted in as if from a closed state */
    return MT_OK;
}

job_t *sched_job_lookup(const sched_t *s, uint64_t id) { return id < s->cap_by_id ? s->by_id[id] : NULL; }

/* GPU busy counts each device that measured the sweep once. */
mt_status_t sched_sweep_note_device(sweep_t *sw, uint64_t device_id) {
    for (size_t i = 0; i < sw->n_devs; i++)
        if (sw->devs[i] == device_id) return MT_OK;
    if (mt_grow((void **)&sw->devs, &sw->cap_devs, sw->n_devs + 1, sizeof *sw->devs, 16)) return MT_NOMEM;
    sw->devs[sw->n_devs++] = device_id;
    return MT_OK;
}

sched_worker_t *sched_worker_find(sched_t *s, const uint8_t *rid, size_t len) {
    uint64_t h = mt_fnv1a(MT_FNV_INIT, rid, len);
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        if (w->rid_hash == h && w->rid_len == len && memcmp(w->rid, rid, len) == 0) return w;
    }
    return NULL;
}

/* A new worker record, not alive, with its routing id as its id until it says Hello. */
sched_worker_t *sched_worker_add(sched_t *s, const uint8_t *rid, size_t len) {
    if (mt_grow((void **)&s->workers, &s->cap_workers, s->n_workers + 1, sizeof *s->workers, 16)) return NULL;
    sched_worker_t *w = mt_calloc(1, sizeof *w);
    char *id = mt_malloc(len + 1);
    if (!w || !id) {
        free(w);
        free(id);
        return NULL;
    }
    memcpy(id, rid, len);
    id[len] = '\0';
    w->id = id;
    memcpy(w->rid, rid, len);
    w->rid_len = len;
    w->rid_hash = mt_fnv1a(MT_FNV_INIT, rid, len);
    s->workers[s->n_workers++] = w;
    return w;
}

/* Records j in w's held list (the caller sets the lease). */
mt_status_t sched_worker_hold(sched_worker_t *w, job_t *j) {
    if (mt_grow((void **)&w->held, &w->cap_held, w->n_held + 1, sizeof *w->held, 16)) return MT_NOMEM;
    j->holder = w;
    j->held_idx = w->n_held;
    w->held[w->n_held++] = j;
    return MT_OK;
}

sched_worker_t *sched_worker(sched_t *s, const uint8_t *rid, size_t rid_len) {
    sched_worker_t *w = sched_worker_find(s, rid, rid_len);
    return w && w->alive ? w : NULL;
}

void sched_ack_push(sched_worker_t *w, uint64_t seq) {
    if (mt_grow((void **)&w->acks, &w->cap_acks, w->n_acks + 1, sizeof *w->acks, 16)) return;
    w->acks[w->n_acks++] = seq;
}

void sched_job_bests(const sched_t *s, const job_t *j, double *out) {
    for (size_t i = 0; i < sched_job_nb(j); i++)
        out[i] = race_best(s->race, j->sw->id, j->shape_id, sched_job_bs(j)[i]);
}

/* ---- halving bookkeeping: open jobs per shape (sched_halving.c runs the phases) */

static bool state_open(wire_job_state_t st) { return st == WIRE_JOB_PENDING || st == WIRE_JOB_LEASED; }

mt_status_t sched_halving_add_shape(sweep_t *sw, uint64_t shape_id, bool planned_before) {
    for (size_t h = 0; h < sw->n_hv; h++) { /* one slot a shape: its open count is kept in the first */
        if (sw->hv_shapes[h] != shape_id) continue;
        if (planned_before) sw->hv_state[h] = HV_PLANNED;
        return MT_OK;
    }
    size_t n = sw->n_hv + 1;
    uint64_t *ids = mt_realloc(sw->hv_shapes, n * sizeof *ids);
    if (ids) sw->hv_shapes = ids;
    uint8_t *state = mt_realloc(sw->hv_state, n * sizeof *state);
    if (state) sw->hv_state = state;
    uint32_t *open = mt_realloc(sw->hv_open, n * sizeof *open);
    if (open) sw->hv_open = open;
    if (!ids || !state || !open) return MT_NOMEM;
    uint32_t n_open = 0; /* its jobs indexed before it was added */
    for (size_t i = 0; i < sw->n_jobs; i++)
        n_open += sw->jobs[i]->shape_id == shape_id && state_open(sw->jobs[i]->state);
    sw->hv_shapes[sw->n_hv] = shape_id;
    sw->hv_state[sw->n_hv] = planned_before ? HV_PLANNED : HV_WAIT;
    sw->hv_open[sw->n_hv] = n_open;
    sw->n_hv++;
    return MT_OK;
}

void sched_halving_count(job_t *j, wire_job_state_t from) {
    sweep_t *sw = j->sw;
    if (j->phase >= 2)
        sw->pending2 += (uint32_t)((int)(j->state == WIRE_JOB_PENDING) - (int)(from == WIRE_JOB_PENDING));
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

/* ---- freeing */

void sched_job_free(job_t *j) {
    if (!j) return;
    free(j->cfgs);
    free(j->bs);
    free(j->last_worker);
    free(j->avoid);
    free(j);
}

size_t sched_pending(const sched_t *s) { return s->n_pending + (s->inflight ? s->inflight->n_res : 0); }

void sched_batch_free(sched_batch_t *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n_res; i++) {
        for (int k = 0; k < 5; k++) free(b->res[i].row.strs[k]);
        if (b->res[i].row.hello) moetune__hello__free_unpacked(b->res[i].row.hello, NULL);
    }
    for (size_t i = 0; i < b->n_jobs; i++) free((char *)b->jobs[i].u.worker_id);
    free(b->res);
    free(b->jobs);
    free(b->sweeps);
    sched_halving_free(b->hv, b->n_hv);
    free(b);
}

/* Bounded: a config moves a few times. */
job_t *sched_cfg_owner(job_t *j, size_t *ci) {
    for (int hops = 0; j && hops < 64; hops++) {
        const jcfg_t *c = &j->cfgs[*ci];
        if (!c->removed) return j;
        job_t *t = c->to;
        size_t k = 0;
        while (t && k < t->n_cfgs && t->cfgs[k].config_id != c->config_id) k++;
        if (!t || k == t->n_cfgs) return NULL;
        j = t;
        *ci = k;
    }
    return NULL;
}
