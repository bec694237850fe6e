/* sched_status.c - status replies, rates, GPU busy and counters, built from the
 * scheduler's memory on the event loop's thread. See scheduler.h and sched_int.h. */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mt.h"
#include "sched_int.h"

/* Timed kernel seconds over the sweep's wall time and its GPUs; 0 when unknown. */
static double sweep_gpu_busy(const sweep_t *sw) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* created and finished are whole seconds: a sweep of a few seconds reads a little less busy */
    double end = sw->state == WIRE_SWEEP_RUNNING || !sw->finished ? (double)ts.tv_sec + ts.tv_nsec * 1e-9
                                                                  : (double)sw->finished + 1;
    double wall = end - (double)sw->created;
    return sw->timed_us > 0 && wall > 0 && sw->n_devs ? sw->timed_us * 1e-6 / (wall * (double)sw->n_devs) : 0.0;
}

void sched_rate_sample(sched_t *s, uint64_t now_ms) {
    if (now_ms < s->next_rate) return;
    s->next_rate = now_ms + 1000;
    for (size_t i = 0; i < s->n_sweeps; i++) {
        sweep_t *sw = s->sweeps[i];
        if (sw->state != WIRE_SWEEP_RUNNING) continue;
        size_t slot = sw->rate_n % RATE_SLOTS;
        sw->rate_t[slot] = now_ms;
        sw->rate_done[slot] = sw->done;
        sw->rate_n++;
    }
}

static double sweep_rate(const sweep_t *sw, uint64_t now_ms) {
    if (sw->rate_n == 0) return 0.0;
    size_t oldest = sw->rate_n > RATE_SLOTS ? sw->rate_n % RATE_SLOTS : 0;
    uint64_t t0 = sw->rate_t[oldest];
    if (now_ms <= t0) return 0.0;
    return (double)(sw->done - sw->rate_done[oldest]) * 1000.0 / (double)(now_ms - t0);
}

/* An estimate of the finalist rows of sw's shapes still in phase 1, each shape taken as an
 * equal share of the plan: halving's share of the configs, or a decide step's
 * HALVING_DECIDE_EXPECT near-ties per batch size. */
static uint64_t finalists_ahead(const sweep_t *sw) {
    size_t waiting = 0;
    for (size_t h = 0; h < sw->n_hv; h++) waiting += sw->hv_state[h] != HV_PLANNED;
    if (sw->state != WIRE_SWEEP_RUNNING || !waiting || !sw->nb) return 0;
    uint64_t configs = sw->planned / ((uint64_t)sw->n_hv * sw->nb);
    if (sw->decide > 0) return waiting * sw->nb * (configs < HALVING_DECIDE_EXPECT ? configs : HALVING_DECIDE_EXPECT);
    return waiting * halving_finalists_estimate(configs ? configs : 1, sw->nb);
}

mt_status_t sched_status(sched_t *s, uint64_t sweep_id, uint64_t now_ms, sched_status_t *st) {
    memset(st, 0, sizeof *st);
    moetune__status_reply__init(&st->reply);
    moetune__counters__init(&st->counters);
    size_t n_sw = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) n_sw += sweep_id == 0 || s->sweeps[i]->id == sweep_id;
    if (sweep_id && n_sw == 0) return MT_NOTFOUND;
    st->sweeps = mt_calloc(n_sw ? n_sw : 1, sizeof *st->sweeps);
    st->sweep_ptrs = mt_calloc(n_sw ? n_sw : 1, sizeof *st->sweep_ptrs);
    st->workers = mt_calloc(s->n_workers ? s->n_workers : 1, sizeof *st->workers);
    st->worker_ptrs = mt_calloc(s->n_workers ? s->n_workers : 1, sizeof *st->worker_ptrs);
    if (!st->sweeps || !st->sweep_ptrs || !st->workers || !st->worker_ptrs) {
        sched_status_release(st);
        return MT_NOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) {
        sweep_t *sw = s->sweeps[i];
        if (sweep_id && sw->id != sweep_id) continue;
        Moetune__SweepStatus *o = &st->sweeps[k];
        moetune__sweep_status__init(o);
        o->sweep_id = sw->id;
        o->name = sw->name;
        o->state = (char *)wire_sweep_state_name(sw->state);
        o->results_planned = sw->planned;
        o->results_done = sw->done;
        o->results_failed = sw->failed;
        o->results_pruned = sw->pruned;
        o->timed_s = sw->timed_us * 1e-6;
        o->gpu_busy = sweep_gpu_busy(sw);
        for (int js = 0; js < WIRE_JOB_NSTATES; js++) o->jobs_total += sw->jobs_by_state[js];
        o->jobs_pending = sw->jobs_by_state[WIRE_JOB_PENDING];
        o->jobs_leased = sw->jobs_by_state[WIRE_JOB_LEASED];
        o->jobs_done = sw->jobs_by_state[WIRE_JOB_DONE];
        o->jobs_failed = sw->jobs_by_state[WIRE_JOB_FAILED];
        o->rate = sw->state == WIRE_SWEEP_RUNNING ? sweep_rate(sw, now_ms) : 0.0;
        o->created_s = (uint64_t)sw->created;
        if (sw->warm) o->warm_start = sw->warm;
        if (sw->halving) {
            /* a finished sweep's shapes are not in memory: its finalists tell how far it got */
            bool two = sw->state == WIRE_SWEEP_RUNNING ? !sched_halving_waiting(sw) : sw->finalists > 0;
            o->phase = two ? 2 : 1;
            o->finalists_planned = sw->finalists;
            o->finalists_done = sw->finalists_done;
            o->finalists_expected = sw->finalists + finalists_ahead(sw);
            o->finalist_rounds = WIRE_SIDE_BY_SIDE_ROUNDS;
            o->decide_step = sw->decide > 0;
        }
        st->sweep_ptrs[k++] = o;
    }
    st->reply.n_sweeps = k;
    st->reply.sweeps = st->sweep_ptrs;
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        const Moetune__Hello *h = w->hello ? w->hello->hello : NULL;
        Moetune__WorkerInfo *o = &st->workers[i];
        moetune__worker_info__init(o);
        o->worker_id = w->id;
        if (h) {
            o->host = h->host;
            o->pid = h->pid;
            o->backend = h->backend;
            o->gpu = h->gpu;
            o->compiler = h->compiler;
            o->kernel_hash = h->kernel_hash;
            o->versions = h->versions;
        }
        /* "away": known from the database after a restart, holding leases, not back yet */
        o->state = (char *)(!w->alive ? (w->n_held ? "away" : "dead") : w->n_held ? "busy" : "idle");
        o->jobs_leased = (uint32_t)w->n_held;
        o->results = w->results;
        o->last_seen_ms = now_ms - w->last_heard;
        st->worker_ptrs[i] = o;
    }
    st->reply.n_workers = s->n_workers;
    st->reply.workers = st->worker_ptrs;
    st->counters.bad_messages = s->c.bad_messages;
    st->counters.rejected_results = s->c.rejected_results;
    st->counters.results_committed = s->c.results_committed;
    st->counters.requeued_jobs = s->c.requeued_jobs;
    st->counters.dead_workers = s->c.dead_workers;
    st->counters.commit_failures = s->c.commit_failures;
    st->counters.storage_error = s->storage_err;
    st->counters.results_unacked = sched_pending(s);
    st->reply.counters = &st->counters;
    return MT_OK;
}

void sched_status_release(sched_status_t *st) {
    if (!st) return;
    free(st->sweeps);
    free(st->sweep_ptrs);
    free(st->workers);
    free(st->worker_ptrs);
    memset(st, 0, sizeof *st);
}

const sched_counters_t *sched_counters(const sched_t *s) { return &s->c; }
const char *sched_storage_error(const sched_t *s) { return s->storage_err; }
void sched_count_bad(sched_t *s) { s->c.bad_messages++; }

const char *sched_job_state(const sched_t *s, uint64_t job_id, uint32_t *attempts) {
    const job_t *j = sched_job_lookup(s, job_id);
    if (!j) return NULL;
    if (attempts) *attempts = j->attempts;
    return wire_job_state_name(j->state);
}
