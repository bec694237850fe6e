/* sched_load.c - the scheduler's memory: built from the store at start (a restart:
 * sweeps, jobs, configs, racing bests, device binding, leases kept for their holders)
 * or for a submitted sweep, and released. Runs on the event loop's thread. See
 * sched_int.h. */
#include "scheduler.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard.h"
#include "halving.h"
#include "mt.h"
#include "planner.h"
#include "query.h"
#include "race.h"
#include "sched_int.h"

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void rng_seed(sched_t *s) {
    uint64_t seed = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &seed, sizeof seed) != (ssize_t)sizeof seed) seed = 0;
        close(fd);
    }
    s->rng = seed ^ (mt_now_us() * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)getpid();
    if (!s->rng) s->rng = 0x2545F4914F6CDD1DULL;
}

void sched_sweep_free(sweep_t *sw) {
    if (!sw) return;
    for (size_t i = 0; i < sw->n_jobs; i++) sched_job_free(sw->jobs[i]);
    free(sw->jobs);
    free(sw->name);
    free(sw->bs);
    free(sw->seen);
    free(sw->filter);
    free(sw->backend);
    free(sw->device);
    free(sw->routing_path);
    free(sw->warm);
    free(sw->devs);
    free(sw->hv_shapes);
    free(sw->hv_state);
    free(sw->hv_open);
    free(sw);
}

static mt_status_t load_device(void *ctx, uint64_t device_id) { return sched_sweep_note_device(ctx, device_id); }

typedef struct {
    sched_t *s;
    sweep_t *sw;
    job_t *job;
    int rc;
} load_ctx_t;

static mt_status_t load_cfg(void *ctx, uint64_t config_id) {
    load_ctx_t *lc = ctx;
    job_t *j = lc->job;
    jcfg_t *c = mt_realloc(j->cfgs, (j->n_cfgs + 1) * sizeof *c);
    if (!c) return MT_NOMEM;
    j->cfgs = c;
    c = &j->cfgs[j->n_cfgs++];
    memset(c, 0, sizeof *c);
    c->config_id = config_id;
    return MT_OK;
}

/* Fills a job's per-config committed row counts and decides whether it is done. */
static int job_load_rows(sched_t *s, job_t *j) {
    for (size_t i = 0; i < j->n_cfgs; i++) {
        uint32_t n = 0, at = 0;
        /* a finalist's phase-2 rows replace its phase-1 ones: only they count for its job, and
         * only at the job's batch sizes (a config can be a finalist at several, in several
         * phase-2 jobs: its rows from another job are not this one's) */
        int rc = MT_OK;
        for (size_t b = 0; !rc && b < (j->bs ? j->nb : 1); b++) { /* batch size 0: all of the sweep's */
            rc = store_result_count_from(s->db, j->sw->id, j->shape_id, j->cfgs[i].config_id, j->phase,
                                         j->bs ? j->bs[b] : 0, &at);
            n += at;
        }
        if (rc) return rc;
        if (n > sched_job_nb(j)) n = (uint32_t)sched_job_nb(j);
        j->cfgs[i].rows = n;
        j->rows_done += n;
    }
    j->rows_needed = (uint64_t)j->n_cfgs * sched_job_nb(j);
    return MT_OK;
}

static mt_status_t load_job(void *ctx, const store_job_row_t *row) {
    load_ctx_t *lc = ctx;
    if (sched_job_lookup(lc->s, row->id)) return MT_OK; /* in memory already (halving loads its new jobs) */
    job_t *j = mt_calloc(1, sizeof *j);
    if (!j) return MT_NOMEM;
    j->id = row->id;
    j->sw = lc->sw;
    j->shape_id = row->shape_id;
    j->phase = row->phase;
    if (row->batch_sizes) {
        int prc = halving_bs_parse(row->batch_sizes, lc->sw->bs, lc->sw->nb, &j->bs, &j->nb);
        if (prc && row->phase >= 2 && lc->sw->gaps) /* the ship guard's: a batch size between the keys */
            prc = guard_gap_bs_parse(row->batch_sizes, &j->bs, &j->nb);
        if (prc) {
            log_at(MT_LOG_ERROR, "job %llu: batch sizes '%.64s' are not the sweep's", (unsigned long long)row->id,
                   row->batch_sizes);
            sched_job_free(j);
            return prc;
        }
        qsort(j->bs, j->nb, sizeof *j->bs, cmp_u32);
    }
    j->state = WIRE_JOB_PENDING;
    j->attempts = row->attempts;
    j->token = row->lease_token;
    j->last_worker = row->worker_id ? mt_strdup(row->worker_id) : NULL;
    j->avoid = row->avoid_worker ? mt_strdup(row->avoid_worker) : NULL;
    int rc =
        (row->worker_id && !j->last_worker) || (row->avoid_worker && !j->avoid) ? MT_NOMEM : sched_job_index(lc->s, j);
    if (rc) {
        sched_job_free(j);
        return rc;
    }
    /* A lease survives a restart: the job stays leased to its recorded holder with a
     * fresh expiry, so the holder may come back and deliver what it has in flight. */
    wire_job_state_t stored;
    bool leased = wire_job_state_parse(row->state, &stored) == MT_OK && stored == WIRE_JOB_LEASED;
    if (leased && row->worker_id && *row->worker_id) {
        sched_t *s = lc->s;
        size_t len = strlen(row->worker_id);
        if (len > WIRE_MAX_ID) len = WIRE_MAX_ID;
        sched_worker_t *w = sched_worker_find(s, (const uint8_t *)row->worker_id, len);
        if (!w) w = sched_worker_add(s, (const uint8_t *)row->worker_id, len);
        if (!w || sched_worker_hold(w, j)) return MT_NOMEM;
        sched_set_job_state(j, WIRE_JOB_LEASED);
        j->lease_expires = s->load_now + s->o.lease_ms;
        j->lease_expires_wall_ms = sched_wall_ms() + s->o.lease_ms;
        j->reclaim = true;
    }
    return MT_OK;
}

/* Racing resumes from the committed results of a running sweep. */
static mt_status_t load_best(void *ctx, uint64_t shape_id, uint32_t bs, double median_us) {
    load_ctx_t *lc = ctx;
    return race_note(lc->s->race, lc->sw->id, shape_id, bs, median_us);
}

mt_status_t sched_load_new_jobs(sched_t *s, sweep_t *sw) {
    load_ctx_t lc = {.s = s, .sw = sw};
    size_t n_before = sw->n_jobs;
    int rc = store_jobs_open_each(s->db, sw->id, load_job, &lc);
    for (size_t i = n_before; !rc && i < sw->n_jobs; i++) {
        lc.job = sw->jobs[i];
        rc = store_job_configs_each(s->db, lc.job->id, load_cfg, &lc);
        if (!rc) rc = job_load_rows(s, lc.job);
        if (!rc && lc.job->rows_done >= lc.job->rows_needed) sched_job_finish(s, lc.job, WIRE_JOB_DONE);
    }
    return rc;
}

/* Takes a sweep out of memory again (it was the last one added) and frees it. */
static void sweep_unload(sched_t *s, sweep_t *sw) {
    if (s->n_sweeps && s->sweeps[s->n_sweeps - 1] == sw) s->n_sweeps--;
    for (size_t i = 0; i < sw->n_jobs; i++)
        if (sw->jobs[i]->id < s->cap_by_id) s->by_id[sw->jobs[i]->id] = NULL;
    sched_sweep_free(sw);
}

/* A sweep record from its row and its decoded spec; spec NULL (or without batch sizes):
 * the stored spec did not decode, and the sweep is kept as it is, never run. */
static int sweep_new(const store_sweep_row_t *row, const Moetune__SweepSpec *spec, sweep_t **out) {
    *out = NULL;
    sweep_t *sw = mt_calloc(1, sizeof *sw);
    if (!sw) return MT_NOMEM;
    sw->id = row->id;
    sw->name = mt_strdup(row->name ? row->name : "");
    if (!sw->name) goto nomem;
    sw->created = row->created;
    sw->planned = row->results_planned;
    if (wire_sweep_state_parse(row->state, &sw->state)) sw->state = WIRE_SWEEP_FAILED;
    if (!spec || spec->n_batch_sizes == 0) {
        log_at(MT_LOG_ERROR, "sweep %llu: stored spec does not decode; left as it is", (unsigned long long)row->id);
        if (sw->state == WIRE_SWEEP_RUNNING) sw->state = WIRE_SWEEP_FAILED;
        *out = sw;
        return MT_OK;
    }
    sw->nb = spec->n_batch_sizes;
    sw->bs = mt_malloc(sw->nb * sizeof *sw->bs);
    sw->seen = mt_calloc(sw->nb, sizeof *sw->seen);
    if (!sw->bs || !sw->seen) goto nomem;
    memcpy(sw->bs, spec->batch_sizes, sw->nb * sizeof *sw->bs);
    qsort(sw->bs, sw->nb, sizeof *sw->bs, cmp_u32);
    sw->filter = spec->device_filter && *spec->device_filter ? mt_strdup(spec->device_filter) : NULL;
    sw->backend = spec->backend && *spec->backend ? mt_strdup(spec->backend) : NULL;
    sw->routing_path = spec->routing_path && *spec->routing_path ? mt_strdup(spec->routing_path) : NULL;
    sw->warm = spec->warm_start && *spec->warm_start ? mt_strdup(spec->warm_start) : NULL;
    if ((spec->device_filter && *spec->device_filter && !sw->filter) ||
        (spec->backend && *spec->backend && !sw->backend) ||
        (spec->routing_path && *spec->routing_path && !sw->routing_path) ||
        (spec->warm_start && *spec->warm_start && !sw->warm))
        goto nomem;
    sw->max_attempts = spec->max_attempts ? spec->max_attempts : PLAN_DEFAULT_MAX_ATTEMPTS;
    sw->chunk = plan_chunk(spec);
    plan_measure(spec, &sw->measure);
    sw->listed = spec->space && spec->space->n_configs > 0;
    sw->decide = halving_decide_margin(spec->strategy, &sw->measure);
    sw->halving = halving_is(spec->strategy) || sw->decide > 0;
    sw->gaps = sw->halving && !spec->no_guard;
    if (sw->halving) {
        halving_measure(&sw->measure, 1, sw->decide > 0, &sw->measure1);
        halving_measure(&sw->measure, 2, sw->decide > 0, &sw->measure);
    }
    *out = sw;
    return MT_OK;
nomem:
    sched_sweep_free(sw);
    return MT_NOMEM;
}

mt_status_t sched_load_sweep(void *ctx, const store_sweep_row_t *row) {
    sched_t *s = ctx;
    sweep_t *sw = NULL;
    Moetune__SweepSpec *spec = moetune__sweep_spec__unpack(NULL, row->spec_len, row->spec);
    int rc = sweep_new(row, spec, &sw);
    if (rc) goto out;
    store_sweep_counts_t rows;
    rc = store_sweep_result_counts(s->db, sw->id, &rows);
    if (!rc) {
        sw->done = rows.done;
        sw->failed = rows.failed;
        sw->pruned = rows.pruned;
        sw->timed_us = rows.timed_us;
        sw->finalists_done = rows.phase2;
        rc = store_sweep_devices_each(s->db, sw->id, load_device, sw);
    }
    if (!rc && sw->halving) rc = store_sweep_finalists(s->db, sw->id, (uint32_t)sw->nb, &sw->finalists);
    if (rc) goto out;
    if (mt_grow((void **)&s->sweeps, &s->cap_sweeps, s->n_sweeps + 1, sizeof *s->sweeps, 16)) {
        rc = MT_NOMEM;
        goto out;
    }
    s->sweeps[s->n_sweeps++] = sw;
    if (sw->state != WIRE_SWEEP_RUNNING) {
        /* finished sweeps keep only their counts */
        uint32_t counts[WIRE_JOB_NSTATES];
        rc = store_job_state_counts(s->db, sw->id, counts);
        if (!rc) memcpy(sw->jobs_by_state, counts, sizeof counts);
        sw = NULL;
        goto out;
    }
    uint32_t counts[WIRE_JOB_NSTATES];
    rc = store_job_state_counts(s->db, sw->id, counts);
    if (rc) goto out;
    sw->jobs_by_state[WIRE_JOB_DONE] = counts[WIRE_JOB_DONE];
    sw->jobs_by_state[WIRE_JOB_FAILED] = counts[WIRE_JOB_FAILED];
    sw->jobs_by_state[WIRE_JOB_CANCELLED] = counts[WIRE_JOB_CANCELLED];
    char device[2048]; /* an identity: the Hello's strings it joins are bounded (wire_hello_invalid) */
    rc = store_sweep_device(s->db, sw->id, device, sizeof device);
    if (rc == MT_OK) {
        sw->device = mt_strdup(device);
        if (!sw->device) rc = MT_NOMEM;
    } else if (rc == MT_NOTFOUND) {
        rc = MT_OK;
    }
    if (rc) goto out;
    load_ctx_t lc = {.s = s, .sw = sw};
    rc = sw->halving ? sched_halving_load(s, sw) : MT_OK;
    if (!rc) rc = store_sweep_bests_each(s->db, sw->id, load_best, &lc);
    if (!rc) rc = store_jobs_open_each(s->db, sw->id, load_job, &lc);
    for (size_t i = 0; !rc && i < sw->n_jobs; i++) {
        lc.job = sw->jobs[i];
        rc = store_job_configs_each(s->db, lc.job->id, load_cfg, &lc);
        if (!rc) rc = job_load_rows(s, lc.job);
    }
    if (rc) goto out;
    /* a job whose every config is already committed is done (its row was not written yet) */
    for (size_t i = 0; i < sw->n_jobs; i++)
        if (sw->jobs[i]->rows_done >= sw->jobs[i]->rows_needed) sched_job_finish(s, sw->jobs[i], WIRE_JOB_DONE);
    sw->halving_due = sw->halving; /* the first batch plans a phase 2 that a restart interrupted */
    sched_sweep_check(s, sw);
    log_at(MT_LOG_INFO, "sweep %llu '%s' loaded: %u jobs pending, %llu of %llu results", (unsigned long long)sw->id,
           sw->name, sw->jobs_by_state[WIRE_JOB_PENDING], (unsigned long long)sw->done,
           (unsigned long long)sw->planned);
    sw = NULL;
out:
    if (spec) moetune__sweep_spec__free_unpacked(spec, NULL);
    if (rc && sw) sweep_unload(s, sw);
    return rc;
}

sched_t *sched_new(store_t *db, const sched_opts_t *opts, uint64_t now_ms, char *err, size_t errlen) {
    sched_t *s = mt_calloc(1, sizeof *s);
    uint32_t requeued = 0;
    if (!s) {
        mt_fmt(err, errlen, "out of memory");
        return NULL;
    }
    s->db = db;
    s->o = *opts;
    if (!s->o.heartbeat_ms) s->o.heartbeat_ms = WIRE_HEARTBEAT_DEFAULT_MS;
    if (!s->o.lease_ms) s->o.lease_ms = WIRE_LEASE_DEFAULT_MS;
    rng_seed(s);
    s->race = race_new();
    if (!s->race) {
        mt_fmt(err, errlen, "out of memory");
        free(s);
        return NULL;
    }
    /* The loop's own writes (hellos, submits, crashes) give up quickly on a locked
     * database instead of stalling every socket; they report and go on. */
    store_set_busy_ms(db, SCHED_DB_BUSY_MS);
    s->load_now = now_ms;
    int rc = store_requeue_leased(db, &requeued);
    if (!rc) rc = store_sweeps_each(db, sched_load_sweep, s);
    if (rc) {
        mt_fmt(err, errlen, "loading state: %s", rc == MT_NOMEM ? "out of memory" : store_errmsg(db));
        sched_destroy(&s);
        return NULL;
    }
    if (requeued) log_at(MT_LOG_INFO, "%u leased jobs of finished sweeps returned to pending", requeued);
    for (size_t i = 0; i < s->n_workers; i++)
        log_at(MT_LOG_INFO, "worker %s keeps %zu leases until %u ms from now unless it says hello", s->workers[i]->id,
               s->workers[i]->n_held, s->o.lease_ms);
    s->next_hb = now_ms + s->o.heartbeat_ms;
    s->next_rate = now_ms;
    return s;
}

void sched_destroy(sched_t **ps) {
    if (!ps || !*ps) return;
    sched_t *s = *ps;
    for (size_t i = 0; i < s->n_pending; i++) wire_free(&s->pending[i].env);
    free(s->pending);
    if (s->inflight) {
        for (size_t i = 0; i < s->inflight->n_res; i++) wire_free(&s->inflight->res[i].e.env);
        sched_batch_free(s->inflight);
    }
    for (size_t i = 0; i < s->n_sweeps; i++) sched_sweep_free(s->sweeps[i]);
    free(s->sweeps);
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        wire_free(&w->hello);
        free(w->identity);
        free(w->id);
        free(w->held);
        free(w->acks);
        free(w);
    }
    free(s->workers);
    free(s->by_id);
    free(s->dirty_jobs);
    free(s->shapes);
    free(s->cfgs);
    free(s->jc);
    free(s->jcp);
    free(s->jcfg);
    race_free(&s->race);
    free(s->best);
    free(s->jb);
    free(s->jbp);
    free(s->behind);
    free(s);
    *ps = NULL;
}

/* ---- a submitted sweep: planned and stored on the writer thread, built in memory from the plan */

struct sched_plan {
    Moetune__SweepSpec *spec; /* the submitted spec with defaults filled (unpacked copy, owned); NULL = none */
    plan_t *plan;             /* built by sched_plan_build, ids filled by sched_plan_write */
    char err[256];            /* the planner's reason, written on the writer thread */
    plan_device_t dev;        /* the device it is planned for (sched_plan_device) */
    bool has_dev;
    char *db_path; /* the database the warm start reads (read-only); NULL = no warm start */
};

/* The warm start's reader (plan_warm_fn) over the database's earlier results. */
typedef struct {
    dbq_t *q;
    const char *device, *backend;
} warm_ctx_t;

static size_t warm_from_db(void *ctx, const krn_shape_t *shape, krn_config_t *out, size_t max, char *source,
                           size_t srclen) {
    warm_ctx_t *w = ctx;
    dbq_pick_t picks[PLAN_MAX_WARM];
    krn_shape_t from;
    size_t n = 0;
    uint32_t n_sweeps = 0;
    char err[256], sh[96];
    if (max > PLAN_MAX_WARM) max = PLAN_MAX_WARM;
    if (!w->q) return 0; /* no database to read: the engine's picks alone */
    if (dbq_known_picks(w->q, w->device, w->backend, shape, picks, max, &n, &from, &n_sweeps, err, sizeof err)) {
        log_at(MT_LOG_WARN, "warm start: %s", err); /* a cold start, nothing lost */
        return 0;
    }
    for (size_t i = 0; i < n; i++) out[i] = picks[i].cfg;
    bool same = from.e == shape->e && from.n == shape->n && from.k == shape->k && from.topk == shape->topk;
    krn_shape_format(&from, sh, sizeof sh);
    mt_fmt(source, srclen, "the best of %u earlier sweep%s on %s for %s%s", n_sweeps, n_sweeps == 1 ? "" : "s",
           w->device, same ? "this shape" : "the nearest shape ", same ? "" : sh);
    return n;
}

/* Whether a worker of hello h may measure spec: its backend and device filter (the binding
 * comes later: sched_worker_matches). */
static bool hello_matches(const Moetune__Hello *h, const Moetune__SweepSpec *spec) {
    const char *name = h->gpu && h->gpu->name ? h->gpu->name : "";
    if (spec->backend && *spec->backend && (!h->backend || strcmp(h->backend, spec->backend) != 0)) return false;
    return !spec->device_filter || !*spec->device_filter || strstr(name, spec->device_filter) != NULL;
}

void sched_plan_device(const sched_t *s, sched_plan_t *sp, const char *db_path) {
    const Moetune__Gpu *best = NULL;
    const Moetune__Hello *bh = NULL;
    sp->has_dev = false;
    free(sp->db_path);
    sp->db_path = db_path && *db_path ? mt_strdup(db_path) : NULL;
    for (size_t i = 0; sp->spec && i < s->n_workers; i++) {
        const sched_worker_t *w = s->workers[i];
        const Moetune__Hello *h = w->alive && w->hello ? w->hello->hello : NULL;
        if (!h || !h->gpu || !h->gpu->smem_per_block || !hello_matches(h, sp->spec)) continue;
        if (!best || h->gpu->smem_per_block > best->smem_per_block) best = h->gpu, bh = h;
    }
    if (!best) return;
    krn_limits_default(&sp->dev.limits);
    sp->dev.limits.smem_per_block = best->smem_per_block;
    sp->dev.limits.cc_major = best->cc_major;
    sp->dev.limits.cc_minor = best->cc_minor;
    sp->dev.sim_triton = bh->versions && strstr(bh->versions, KRN_SIM_TRITON) != NULL;
    mt_fmt(sp->dev.name, sizeof sp->dev.name, "%s", best->name ? best->name : "");
    sp->has_dev = true;
}

mt_status_t sched_plan_new(const Moetune__SweepSpec *spec, sched_plan_t **out, char *err, size_t errlen) {
    *out = NULL;
    sched_plan_t *sp = mt_calloc(1, sizeof *sp);
    uint8_t *buf = NULL;
    int rc = MT_OK;
    if (!sp) goto nomem;
    if (spec) {
        /* A spec without batch sizes means the engines' default 18; the filled-in spec is the
         * one stored, so a restart plans and checks against the same list. */
        Moetune__SweepSpec filled = *spec;
        uint32_t default_bs[32];
        if (spec->n_batch_sizes == 0) {
            memcpy(default_bs, krn_default_batch_sizes, krn_n_default_batch_sizes * sizeof *default_bs);
            filled.batch_sizes = default_bs;
            filled.n_batch_sizes = krn_n_default_batch_sizes;
        }
        size_t len = moetune__sweep_spec__get_packed_size(&filled);
        buf = mt_malloc(len ? len : 1);
        if (!buf) goto nomem;
        moetune__sweep_spec__pack(&filled, buf);
        sp->spec = moetune__sweep_spec__unpack(NULL, len, buf);
        if (!sp->spec) goto nomem;
    }
    *out = sp;
    goto out;
nomem:
    mt_fmt(err, errlen, "out of memory");
    sched_plan_free(&sp);
    rc = MT_NOMEM;
out:
    free(buf);
    return rc;
}

void sched_plan_free(sched_plan_t **psp) {
    if (!psp || !*psp) return;
    sched_plan_t *sp = *psp;
    if (sp->spec) moetune__sweep_spec__free_unpacked(sp->spec, NULL);
    plan_destroy(&sp->plan);
    free(sp->db_path);
    free(sp);
    *psp = NULL;
}

mt_status_t sched_plan_build(store_t *db, void *arg) {
    sched_plan_t *sp = arg;
    (void)db;
    plan_destroy(&sp->plan);
    /* The warm start: earlier results of the backend on the GPU model the sweep is planned for,
     * then the engine's own picks (plan_build_on). */
    dbq_t *q = NULL;
    char qerr[256];
    warm_ctx_t w = {NULL, sp->dev.name, sp->spec ? sp->spec->backend : NULL};
    sp->dev.warm = NULL;
    if (sp->has_dev && w.backend && *w.backend && sp->dev.name[0]) {
        if (sp->db_path && dbq_open(sp->db_path, &q, qerr, sizeof qerr) == MT_OK)
            w.q = q;
        else if (sp->db_path)
            log_at(MT_LOG_WARN, "warm start: %s", qerr); /* the engine's picks still go first */
        sp->dev.warm = warm_from_db;
        sp->dev.warm_ctx = &w;
    }
    int rc = plan_build_on(sp->spec, sp->has_dev ? &sp->dev : NULL, &sp->plan, sp->err, sizeof sp->err);
    dbq_close(&q);
    sp->dev.warm = NULL;
    /* what the start came from goes into the stored spec, for status and the exports; never a
     * client's own text */
    if (!rc) {
        char *note = sp->plan->warm[0] ? mt_strdup(sp->plan->warm) : (char *)protobuf_c_empty_string;
        if (!note) return MT_NOMEM;
        if (sp->spec->warm_start && sp->spec->warm_start != protobuf_c_empty_string) free(sp->spec->warm_start);
        sp->spec->warm_start = note;
    }
    return rc;
}

mt_status_t sched_plan_write(store_t *db, void *arg) {
    sched_plan_t *sp = arg;
    if (!sp->plan) {
        mt_fmt(sp->err, sizeof sp->err, "no plan built");
        return MT_ERR;
    }
    return plan_write(db, sp->spec, sp->plan, mt_wall_s(), sp->err, sizeof sp->err);
}

/* The stored plan's sweep in memory, its jobs pending, from the plan's ids: nothing is
 * read back from the database. All or nothing. */
static int sweep_from_plan(sched_t *s, const sched_plan_t *sp) {
    const plan_t *p = sp->plan;
    store_sweep_row_t row = {.id = p->sweep_id,
                             .name = sp->spec->name ? sp->spec->name : "",
                             .state = wire_sweep_state_name(WIRE_SWEEP_RUNNING),
                             .results_planned = p->results_planned,
                             .created = p->created};
    sweep_t *sw = NULL;
    int rc = sweep_new(&row, sp->spec, &sw);
    if (rc) return rc;
    if (mt_grow((void **)&s->sweeps, &s->cap_sweeps, s->n_sweeps + 1, sizeof *s->sweeps, 16)) {
        sched_sweep_free(sw);
        return MT_NOMEM;
    }
    s->sweeps[s->n_sweeps++] = sw;
    /* in the order the jobs were stored (their ids): a warm start's first jobs of every shape, then the rest */
    size_t split = p->configs_warm ? 1 : SIZE_MAX;
    for (size_t k = 0; k < 2 * p->n_shapes; k++) {
        const plan_shape_t *ps = &p->shapes[p->order[k % p->n_shapes]];
        size_t from = k < p->n_shapes ? 0 : split, to = k < p->n_shapes ? split : SIZE_MAX;
        /* halving: every shape with jobs has its phase 2 to plan, as a load would say */
        if (!from && sw->halving && ps->n_jobs && sched_halving_add_shape(sw, ps->shape_id, false)) goto nomem;
        for (size_t jn = from; jn < ps->n_jobs && jn < to; jn++) {
            size_t first, n;
            plan_job_range(ps, jn, &first, &n);
            job_t *j = mt_calloc(1, sizeof *j);
            jcfg_t *cfgs = mt_calloc(n, sizeof *cfgs);
            if (!j || !cfgs) {
                free(j);
                free(cfgs);
                goto nomem;
            }
            j->id = ps->job_ids[jn];
            j->sw = sw;
            j->shape_id = ps->shape_id;
            j->phase = 1;
            j->state = WIRE_JOB_PENDING;
            j->cfgs = cfgs;
            j->n_cfgs = n;
            for (size_t i = 0; i < n; i++) cfgs[i].config_id = ps->config_ids[first + i];
            j->rows_needed = (uint64_t)n * sw->nb;
            if (sched_job_index(s, j)) {
                sched_job_free(j);
                goto nomem;
            }
        }
    }
    return MT_OK;
nomem:
    sweep_unload(s, sw);
    return MT_NOMEM;
}

mt_status_t sched_plan_done(sched_t *s, sched_plan_t **psp, int rc, const char *why, Moetune__Submitted *out,
                            uint64_t now_ms, char *err, size_t errlen) {
    sched_plan_t *sp = *psp;
    moetune__submitted__init(out);
    if (rc) {
        /* nothing was stored: the transaction rolled back, or planning refused the spec */
        if (sp->err[0])
            mt_fmt(err, errlen, "%s", sp->err);
        else
            mt_fmt(err, errlen, "storing the sweep: %s", why && *why ? why : "unknown error");
        if (rc != MT_INVAL && rc != MT_NOMEM && rc != MT_BUSY) rc = MT_IO;
        goto out;
    }
    const plan_t *p = sp->plan;
    /* sweeps ahead of it: running ones with work left, dispatched first (lower ids) */
    size_t n_behind = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) {
        const sweep_t *o = s->sweeps[i];
        if (o->state != WIRE_SWEEP_RUNNING || !(o->jobs_by_state[WIRE_JOB_PENDING] + o->jobs_by_state[WIRE_JOB_LEASED]))
            continue;
        if (mt_grow((void **)&s->behind, &s->cap_behind, n_behind + 1, sizeof *s->behind, 16)) break;
        s->behind[n_behind++] = o->id;
    }
    rc = sweep_from_plan(s, sp);
    if (rc) {
        /* stored but not in memory: mark it failed, or a restart would measure it unasked */
        mt_fmt(err, errlen, "loading sweep %llu: %s", (unsigned long long)p->sweep_id,
               rc == MT_NOMEM ? "out of memory" : store_errmsg(s->db));
        if (store_sweep_set_state(s->db, p->sweep_id, wire_sweep_state_name(WIRE_SWEEP_FAILED), mt_wall_s()))
            log_at(MT_LOG_ERROR, "sweep %llu could not be marked failed: %s", (unsigned long long)p->sweep_id,
                   store_errmsg(s->db));
        goto out;
    }
    out->sweep_id = p->sweep_id;
    out->jobs = p->jobs;
    out->configs_valid = p->configs_valid;
    out->configs_rejected = p->configs_rejected;
    out->configs_unsampled = p->configs_unsampled;
    out->results_planned = p->results_planned;
    mt_fmt(s->plan_rules, sizeof s->plan_rules, "%s", p->rules);
    out->rules = s->plan_rules;
    out->n_queued_behind = n_behind;
    out->queued_behind = n_behind ? s->behind : NULL;
    for (size_t i = 0; i < n_behind; i++) {
        const sweep_t *o = sched_sweep_lookup(s, s->behind[i]);
        log_at(MT_LOG_WARN,
               "sweep %llu queued behind running sweep %llu '%s' (%llu of %llu results): it is "
               "measured first",
               (unsigned long long)out->sweep_id, (unsigned long long)o->id, o->name, (unsigned long long)o->done,
               (unsigned long long)o->planned);
    }
    log_at(MT_LOG_INFO,
           "sweep %llu '%s' submitted: %u jobs, %u configs valid, %u rejected (%s), %u left out by the sample, "
           "%llu results planned",
           (unsigned long long)out->sweep_id, sp->spec->name ? sp->spec->name : "", out->jobs, out->configs_valid,
           out->configs_rejected, out->rules, out->configs_unsampled, (unsigned long long)out->results_planned);
    sched_dispatch_all(s, now_ms);
out:
    sched_plan_free(psp);
    return rc;
}
