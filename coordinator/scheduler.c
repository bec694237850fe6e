/* scheduler.c - leases, credits, heartbeats, re-queues and the batched commit. See scheduler.h. */
#include "scheduler.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "convert.h"
#include "halving.h"
#include "mt.h"
#include "planner.h"
#include "race.h"

enum { J_PENDING, J_LEASED, J_DONE, J_FAILED, J_CANCELLED, J_NSTATES };
static const char *const g_job_state[J_NSTATES] = {"pending", "leased", "done", "failed", "cancelled"};

enum { S_RUNNING, S_DONE, S_CANCELLED, S_FAILED, S_NSTATES };
static const char *const g_sweep_state[S_NSTATES] = {"running", "done", "cancelled", "failed"};

#define RATE_SLOTS 6        /* one sample a second: a ~5 s window */
#define DEAD_PERIODS 3

typedef struct sweep sweep_t;
typedef struct job job_t;

typedef struct {
    uint64_t config_id;
    uint32_t rows;           /* committed rows (batch sizes) of this config */
    bool removed;            /* moved into a crash-retry job */
} jcfg_t;

struct job {
    uint64_t id, shape_id, token;
    sweep_t *sw;
    int state;
    uint32_t attempts;
    sched_worker_t *holder;  /* while leased */
    size_t held_idx;         /* index in holder->held */
    size_t idx;              /* index in sw->jobs */
    char *last_worker;       /* current or last holder's id, for the row */
    char *avoid;             /* crash retry: run elsewhere when possible */
    uint64_t lease_expires;  /* monotonic ms */
    int64_t lease_expires_wall_ms, finished;
    jcfg_t *cfgs;
    size_t n_cfgs;
    uint64_t rows_needed, rows_done;
    uint32_t phase;          /* 1, or 2 for a halving sweep's finalists */
    uint32_t *bs;            /* its batch sizes, sorted, owned; NULL = the sweep's */
    size_t nb;               /* how many it measures */
    bool dirty;
    bool reclaim;            /* held across a Hello or a restart: the holder's first heartbeat must list it */
};

struct sweep {
    uint64_t id;
    char *name;
    int state;
    int64_t created, finished;
    uint32_t *bs;            /* batch sizes, sorted */
    size_t nb;
    uint32_t *seen;          /* per batch size: stamp of the last result that had it */
    uint32_t stamp;
    char *filter;
    char *backend;           /* NULL = any worker's backend */
    char *device;            /* the GPU model it is bound to by its first lease; NULL = not yet */
    char *routing_path;      /* the spec's routing file, sent with every job; NULL = uniform */
    uint32_t max_attempts, chunk;
    Moetune__Measure measure;
    bool halving;            /* strategy halving: phase 1 jobs use measure1; measure races off */
    bool halving_due;        /* a phase-1 job ended: see whether a shape's phase 2 is due */
    uint64_t hv_retry_ms;    /* a failed transition is tried again from then (monotonic ms) */
    Moetune__Measure measure1;
    uint64_t *hv_shapes;     /* halving: every shape of the sweep, and whether its phase 2 is planned */
    bool *hv_planned;
    size_t n_hv;
    uint64_t planned, done, failed, pruned;
    double timed_us;         /* GPU time in timed kernels over its committed results */
    uint64_t *devs;          /* devices that committed results to it (GPU busy's denominator) */
    size_t n_devs, cap_devs;
    uint32_t jobs_by_state[J_NSTATES];
    job_t **jobs;            /* in id order */
    size_t n_jobs, cap_jobs, hint;
    bool dirty;
    uint64_t rate_t[RATE_SLOTS], rate_done[RATE_SLOTS];
    size_t rate_n;
};

struct sched_worker {
    uint8_t rid[WIRE_MAX_ID];
    size_t rid_len;
    uint64_t rid_hash;
    char *id;                /* worker id, owned (a restart knows it before any Hello) */
    wire_env_t *hello;       /* the Hello it last sent, owned; NULL until it says Hello */
    uint64_t device_id;
    bool alive;
    bool await_hb;           /* said Hello while holding jobs: its next heartbeat settles them */
    uint32_t credits;
    uint64_t last_heard, results;
    job_t **held;
    size_t n_held, cap_held;
    uint64_t *acks;          /* seqs to acknowledge at the next flush */
    size_t n_acks, cap_acks;
};

typedef struct {
    wire_env_t *env;
    sched_worker_t *w;
    job_t *job;
    size_t cfg;
    bool crash;              /* a quarantining second crash: bump the crash count too */
    uint32_t new_rows, new_failed, new_pruned;
    uint32_t new_replaced;   /* halving: phase-1 rows a finalist's phase-2 rows replaced */
    uint32_t new_by_status[SCHED_N_STATUS]; /* new rows by Moetune__Status value */
    double new_timed_us;
} entry_t;

typedef struct {
    uint64_t id;
    krn_shape_t shape;
} shape_entry_t;

/* One accepted Result as the writer sees it: copied scalars and strings, and the
 * measurements of the entry's Envelope (owned by the batch while it is out). */
typedef struct {
    store_result_t base;
    const Moetune__Result *r;
    bool crash;
    char *strs[5];           /* copies behind base's worker_id, backend, compiler, kernel_hash, versions */
    Moetune__Hello *hello;   /* a copy of the Hello of a worker not yet recorded (owned), or NULL */
    uint64_t device_id;      /* what recording it gave */
    uint32_t new_rows, new_failed, new_pruned, new_replaced;
    uint32_t new_by_status[SCHED_N_STATUS]; /* new rows by Moetune__Status value */
    double new_timed_us;
} brow_t;

struct sched_batch {
    entry_t *entries;        /* taken from the front of s->pending */
    brow_t *rows;            /* one per entry */
    size_t n_entries;
    job_t **jobs;            /* dirty jobs and their snapshots */
    store_job_update_t *jobu;
    size_t n_jobs;
    sweep_t **sweeps;        /* dirty sweeps and their snapshots */
    const char **sweep_state;
    int64_t *sweep_finished;
    uint64_t *sweep_id;
    size_t n_sweeps;
};

static void batch_free(sched_batch_t *b);


struct sched {
    store_t *db;
    sched_opts_t o;
    sweep_t **sweeps;
    size_t n_sweeps, cap_sweeps;
    job_t **by_id;           /* job id -> job, for jobs in memory */
    size_t cap_by_id;
    job_t **dirty_jobs;
    size_t n_dirty, cap_dirty;
    sched_worker_t **workers;
    size_t n_workers, cap_workers;
    entry_t *pending;
    size_t n_pending, cap_pending;
    shape_entry_t *shapes;
    size_t n_shapes, cap_shapes;
    krn_config_t *cfgs;      /* config id -> config; block_m 0 = not loaded */
    size_t cap_cfgs;
    Moetune__JobConfig *jc;  /* scratch for Job messages */
    Moetune__JobConfig **jcp;
    Moetune__Config *jcfg;
    size_t cap_jc;
    race_t *race;            /* best committed medians, sent with each job */
    double *best;            /* scratch: a job's best_us */
    size_t cap_best;
    uint64_t rng;
    uint64_t next_hb, next_rate;
    sched_batch_t *inflight;      /* handed to a writer, not yet done */
    sched_counters_t c;
    uint64_t *behind;        /* Submitted.queued_behind of the last submit */
    size_t cap_behind;
    uint64_t load_now;       /* monotonic ms of the load, for the leases kept across a restart */
    char storage_err[256];   /* text of the last failed commit; empty once one succeeds */
    char err[512];
};

/* ---- small helpers */

static int load_device(void *ctx, uint64_t device_id);

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return MT_OK;
    size_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *p = mt_realloc(*arr, n * elem);
    if (!p) return MT_NOMEM;
    memset((char *)p + *cap * elem, 0, (n - *cap) * elem);
    *arr = p;
    *cap = n;
    return MT_OK;
}

static uint64_t rng_next(sched_t *s) {
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    uint64_t v = x * 2685821657736338717ULL;
    return v ? v : 1;
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

static int64_t wall_ms(void) { return mt_wall_s() * 1000; }

static int send_env(sched_t *s, sched_worker_t *w, wire_env_t *env) {
    return s->o.send ? s->o.send(s->o.send_ctx, w->rid, w->rid_len, env) : MT_OK;
}

static const char *gpu_name(const sched_worker_t *w) {
    const Moetune__Hello *h = w->hello ? w->hello->hello : NULL;
    return h && h->gpu && h->gpu->name ? h->gpu->name : "";
}

/* A sweep's results are for one kernel: a worker of another backend measures another kernel.
 * And for one GPU model: once leased to one, a sweep is measured only by that model, so every
 * device that measures a sweep measures all of it (a mixed fleet never splits one). */
static bool worker_matches(const sched_worker_t *w, const sweep_t *sw) {
    const Moetune__Hello *h = w->hello ? w->hello->hello : NULL;
    if (sw->backend && (!h || !h->backend || strcmp(h->backend, sw->backend) != 0)) return false;
    if (sw->device && strcmp(gpu_name(w), sw->device) != 0) return false;
    return !sw->filter || !*sw->filter || strstr(gpu_name(w), sw->filter) != NULL;
}

static int bs_index(const sweep_t *sw, uint32_t b) {
    size_t lo = 0, hi = sw->nb;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sw->bs[mid] < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sw->nb && sw->bs[lo] == b ? (int)lo : -1;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The batch sizes a job measures: the sweep's, or a halving finalist's few. */
static const uint32_t *job_bs(const job_t *j) { return j->bs ? j->bs : j->sw->bs; }
static size_t job_nb(const job_t *j) { return j->bs ? j->nb : j->sw->nb; }

static bool job_has_bs(const job_t *j, uint32_t b) {
    for (size_t i = 0; j->bs && i < j->nb; i++)
        if (j->bs[i] == b) return true;
    return !j->bs;
}

/* ---- caches */

static const krn_shape_t *shape_get(sched_t *s, uint64_t id) {
    for (size_t i = 0; i < s->n_shapes; i++)
        if (s->shapes[i].id == id) return &s->shapes[i].shape;
    if (grow((void **)&s->shapes, &s->cap_shapes, s->n_shapes + 1, sizeof *s->shapes)) return NULL;
    shape_entry_t *e = &s->shapes[s->n_shapes];
    if (store_shape_get(s->db, id, &e->shape)) return NULL;
    e->id = id;
    s->n_shapes++;
    return &e->shape;
}

static const krn_config_t *config_get(sched_t *s, uint64_t id) {
    if (id >= s->cap_cfgs && grow((void **)&s->cfgs, &s->cap_cfgs, id + 1, sizeof *s->cfgs)) return NULL;
    krn_config_t *c = &s->cfgs[id];
    if (c->block_m == 0 && store_config_get(s->db, id, c)) {
        memset(c, 0, sizeof *c);
        return NULL;
    }
    return c;
}

/* ---- state changes */

static void job_dirty(sched_t *s, job_t *j) {
    if (j->dirty) return;
    if (grow((void **)&s->dirty_jobs, &s->cap_dirty, s->n_dirty + 1, sizeof *s->dirty_jobs)) {
        log_at(MT_LOG_ERROR, "out of memory queueing job %llu", (unsigned long long)j->id);
        return;
    }
    s->dirty_jobs[s->n_dirty++] = j;
    j->dirty = true;
}

static void set_job_state(job_t *j, int state) {
    j->sw->jobs_by_state[j->state]--;
    j->state = state;
    j->sw->jobs_by_state[state]++;
}

static void release_holder(job_t *j) {
    sched_worker_t *w = j->holder;
    if (!w) return;
    size_t i = j->held_idx;
    w->held[i] = w->held[--w->n_held];
    w->held[i]->held_idx = i;
    j->holder = NULL;
}

/* A sweep is over when no job is pending or leased. */
static void sweep_check(sched_t *s, sweep_t *sw) {
    if (sw->state != S_RUNNING || sw->jobs_by_state[J_PENDING] || sw->jobs_by_state[J_LEASED]) return;
    for (size_t h = 0; sw->halving && h < sw->n_hv; h++) {
        if (!sw->hv_planned[h]) {
            sw->halving_due = true; /* not over: a shape's phase 2 is still to plan */
            return;
        }
    }
    sw->state = sw->jobs_by_state[J_FAILED] ? S_FAILED : S_DONE;
    sw->finished = mt_wall_s();
    sw->dirty = true;
    race_forget(s->race, sw->id);
    log_at(MT_LOG_INFO, "sweep %llu '%s' %s: %llu results, %llu not ok", (unsigned long long)sw->id, sw->name,
           g_sweep_state[sw->state], (unsigned long long)sw->done, (unsigned long long)sw->failed);
}

static void job_finish(sched_t *s, job_t *j, int state) {
    release_holder(j);
    set_job_state(j, state);
    j->finished = mt_wall_s();
    if (j->phase == 1 && j->sw->halving) j->sw->halving_due = true;
    job_dirty(s, j);
    log_at(MT_LOG_INFO, "job %llu (sweep %llu) %s after %u attempts", (unsigned long long)j->id,
           (unsigned long long)j->sw->id, g_job_state[state], j->attempts);
    sweep_check(s, j->sw);
}

/* Back to pending (or failed at max_attempts) from whatever lease it had. */
static void job_requeue(sched_t *s, job_t *j, bool count_attempt, const char *why) {
    if (j->state != J_LEASED && j->state != J_PENDING) return;
    release_holder(j);
    if (count_attempt) j->attempts++;
    s->c.requeued_jobs++;
    if (count_attempt && j->attempts >= j->sw->max_attempts) {
        log_at(MT_LOG_WARN, "job %llu failed: %s (attempt %u of %u)", (unsigned long long)j->id, why, j->attempts,
               j->sw->max_attempts);
        job_finish(s, j, J_FAILED);
        return;
    }
    log_at(MT_LOG_INFO, "job %llu back to pending: %s (attempts %u)", (unsigned long long)j->id, why, j->attempts);
    if (j->state != J_PENDING) set_job_state(j, J_PENDING);
    if (j->idx < j->sw->hint) j->sw->hint = j->idx;
    job_dirty(s, j);
}

/* Makes room to index one more job of sw with this id; nothing else changes. */
static int job_index_reserve(sched_t *s, sweep_t *sw, uint64_t id) {
    if (id >= s->cap_by_id && grow((void **)&s->by_id, &s->cap_by_id, id + 1, sizeof *s->by_id)) return MT_NOMEM;
    return grow((void **)&sw->jobs, &sw->cap_jobs, sw->n_jobs + 1, sizeof *sw->jobs);
}

/* Indexes j by id and in its sweep: all or nothing (MT_NOMEM leaves no entry behind). */
static int job_index(sched_t *s, job_t *j) {
    if (job_index_reserve(s, j->sw, j->id)) return MT_NOMEM;
    sweep_t *sw = j->sw;
    s->by_id[j->id] = j;
    j->idx = sw->n_jobs;
    sw->jobs[sw->n_jobs++] = j;
    sw->jobs_by_state[j->state]++;
    return MT_OK;
}

static job_t *job_lookup(const sched_t *s, uint64_t id) { return id < s->cap_by_id ? s->by_id[id] : NULL; }

static void job_free(job_t *j) {
    if (!j) return;
    free(j->cfgs);
    free(j->bs);
    free(j->last_worker);
    free(j->avoid);
    free(j);
}

/* ---- loading */

static sched_worker_t *worker_find(sched_t *s, const uint8_t *rid, size_t len);
static sched_worker_t *worker_add(sched_t *s, const uint8_t *rid, size_t len);
static int worker_hold(sched_worker_t *w, job_t *j);

static void sweep_free(sweep_t *sw) {
    if (!sw) return;
    for (size_t i = 0; i < sw->n_jobs; i++) job_free(sw->jobs[i]);
    free(sw->jobs);
    free(sw->name);
    free(sw->bs);
    free(sw->seen);
    free(sw->filter);
    free(sw->backend);
    free(sw->device);
    free(sw->routing_path);
    free(sw->devs);
    free(sw->hv_shapes);
    free(sw->hv_planned);
    free(sw);
}

typedef struct {
    sched_t *s;
    sweep_t *sw;
    job_t *job;
    int rc;
} load_ctx_t;

static int load_cfg(void *ctx, uint64_t config_id) {
    load_ctx_t *lc = ctx;
    job_t *j = lc->job;
    jcfg_t *c = realloc(j->cfgs, (j->n_cfgs + 1) * sizeof *c);
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
        uint32_t n = 0;
        /* a finalist's phase-2 rows replace its phase-1 ones: only they count for its job */
        int rc = store_result_count_from(s->db, j->sw->id, j->shape_id, j->cfgs[i].config_id, j->phase, &n);
        if (rc) return rc;
        if (n > job_nb(j)) n = (uint32_t)job_nb(j);
        j->cfgs[i].rows = n;
        j->rows_done += n;
    }
    j->rows_needed = (uint64_t)j->n_cfgs * job_nb(j);
    return MT_OK;
}

static int load_job(void *ctx, const store_job_row_t *row) {
    load_ctx_t *lc = ctx;
    if (job_lookup(lc->s, row->id)) return MT_OK; /* in memory already (halving loads its new jobs) */
    job_t *j = mt_calloc(1, sizeof *j);
    if (!j) return MT_NOMEM;
    j->id = row->id;
    j->sw = lc->sw;
    j->shape_id = row->shape_id;
    j->phase = row->phase;
    if (row->batch_sizes) {
        int prc = halving_bs_parse(row->batch_sizes, lc->sw->bs, lc->sw->nb, &j->bs, &j->nb);
        if (prc) {
            log_at(MT_LOG_ERROR, "job %llu: batch sizes '%.64s' are not the sweep's", (unsigned long long)row->id,
                   row->batch_sizes);
            job_free(j);
            return prc;
        }
        qsort(j->bs, j->nb, sizeof *j->bs, cmp_u32);
    }
    j->state = J_PENDING;
    j->attempts = row->attempts;
    j->token = row->lease_token;
    j->last_worker = row->worker_id ? mt_strdup(row->worker_id) : NULL;
    j->avoid = row->avoid_worker ? mt_strdup(row->avoid_worker) : NULL;
    int rc = (row->worker_id && !j->last_worker) || (row->avoid_worker && !j->avoid) ? MT_NOMEM : job_index(lc->s, j);
    if (rc) {
        job_free(j);
        return rc;
    }
    /* A lease survives a restart: the job stays leased to its recorded holder with a
     * fresh expiry, so the holder may come back and deliver what it has in flight. */
    if (strcmp(row->state, "leased") == 0 && row->worker_id && *row->worker_id) {
        sched_t *s = lc->s;
        size_t len = strlen(row->worker_id);
        if (len > WIRE_MAX_ID) len = WIRE_MAX_ID;
        sched_worker_t *w = worker_find(s, (const uint8_t *)row->worker_id, len);
        if (!w) w = worker_add(s, (const uint8_t *)row->worker_id, len);
        if (!w || worker_hold(w, j)) return MT_NOMEM;
        set_job_state(j, J_LEASED);
        j->lease_expires = s->load_now + s->o.lease_ms;
        j->lease_expires_wall_ms = wall_ms() + s->o.lease_ms;
        j->reclaim = true;
    }
    return MT_OK;
}

/* Loads (or reloads after planning) a sweep row into memory. */
/* Racing resumes from the committed results of a running sweep. */
static int load_best(void *ctx, uint64_t shape_id, uint32_t bs, double median_us) {
    load_ctx_t *lc = ctx;
    return race_note(lc->s->race, lc->sw->id, shape_id, bs, median_us);
}

static void dispatch_all(sched_t *s, uint64_t now_ms);

/* Halving: a shape of the sweep and whether its phase 2 is planned. */
static int load_phase(void *ctx, uint64_t shape_id, uint32_t max_phase) {
    sweep_t *sw = ctx;
    size_t n = sw->n_hv + 1;
    uint64_t *ids = realloc(sw->hv_shapes, n * sizeof *ids);
    if (ids) sw->hv_shapes = ids;
    bool *planned = realloc(sw->hv_planned, n * sizeof *planned);
    if (planned) sw->hv_planned = planned;
    if (!ids || !planned) return MT_NOMEM;
    sw->hv_shapes[sw->n_hv] = shape_id;
    sw->hv_planned[sw->n_hv] = max_phase >= 2;
    sw->n_hv++;
    return MT_OK;
}

/* Halving: every shape of sw whose phase-1 jobs are all over gets its phase 2
 * (halving_plan_shape: one transaction), whose jobs are loaded like a restart's. A
 * transaction that fails is retried by the next tick; the sweep is not over before. */
static void halving_poll(sched_t *s, sweep_t *sw, uint64_t now_ms) {
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
            sw->hv_retry_ms = now_ms + 1000;
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
    load_ctx_t lc = {.s = s, .sw = sw};
    int rc = store_jobs_open_each(s->db, sw->id, load_job, &lc);
    for (size_t i = n_before; !rc && i < sw->n_jobs; i++) {
        lc.job = sw->jobs[i];
        rc = store_job_configs_each(s->db, lc.job->id, load_cfg, &lc);
        if (!rc) rc = job_load_rows(s, lc.job);
        if (!rc && lc.job->rows_done >= lc.job->rows_needed) job_finish(s, lc.job, J_DONE);
    }
    if (rc) {
        log_at(MT_LOG_ERROR, "sweep %llu: loading its phase-2 jobs: %s; a restart loads them",
               (unsigned long long)sw->id, rc == MT_NOMEM ? "out of memory" : store_errmsg(s->db));
        sw->halving_due = true;
        return;
    }
    sweep_check(s, sw);
    if (sw->n_jobs > n_before && now_ms) dispatch_all(s, now_ms);
}

static void halving_poll_all(sched_t *s, uint64_t now_ms) {
    for (size_t i = 0; i < s->n_sweeps; i++) halving_poll(s, s->sweeps[i], now_ms);
}

static int load_sweep(void *ctx, const store_sweep_row_t *row) {
    sched_t *s = ctx;
    int rc = MT_OK;
    Moetune__SweepSpec *spec = moetune__sweep_spec__unpack(NULL, row->spec_len, row->spec);
    sweep_t *sw = calloc(1, sizeof *sw);
    if (!sw) {
        rc = MT_NOMEM;
        goto out;
    }
    sw->id = row->id;
    sw->name = mt_strdup(row->name ? row->name : "");
    if (!sw->name) {
        rc = MT_NOMEM;
        goto out;
    }
    sw->created = row->created;
    sw->planned = row->results_planned;
    sw->state = S_FAILED;
    for (int i = 0; i < S_NSTATES; i++)
        if (strcmp(row->state, g_sweep_state[i]) == 0) sw->state = i;
    if (!spec || spec->n_batch_sizes == 0) {
        log_at(MT_LOG_ERROR, "sweep %llu: stored spec does not decode; left as it is", (unsigned long long)row->id);
        if (sw->state == S_RUNNING) sw->state = S_FAILED;
    } else {
        sw->nb = spec->n_batch_sizes;
        sw->bs = malloc(sw->nb * sizeof *sw->bs);
        sw->seen = calloc(sw->nb, sizeof *sw->seen);
        if (!sw->bs || !sw->seen) {
            rc = MT_NOMEM;
            goto out;
        }
        memcpy(sw->bs, spec->batch_sizes, sw->nb * sizeof *sw->bs);
        qsort(sw->bs, sw->nb, sizeof *sw->bs, cmp_u32);
        sw->filter = spec->device_filter && *spec->device_filter ? mt_strdup(spec->device_filter) : NULL;
        sw->backend = spec->backend && *spec->backend ? mt_strdup(spec->backend) : NULL;
        sw->routing_path = spec->routing_path && *spec->routing_path ? mt_strdup(spec->routing_path) : NULL;
        if ((spec->device_filter && *spec->device_filter && !sw->filter) ||
            (spec->backend && *spec->backend && !sw->backend) ||
            (spec->routing_path && *spec->routing_path && !sw->routing_path)) {
            rc = MT_NOMEM;
            goto out;
        }
        sw->max_attempts = spec->max_attempts ? spec->max_attempts : PLAN_DEFAULT_MAX_ATTEMPTS;
        sw->chunk = spec->chunk ? spec->chunk : PLAN_DEFAULT_CHUNK;
        plan_measure(spec, &sw->measure);
        sw->halving = halving_is(spec->strategy);
        if (sw->halving) {
            halving_measure(&sw->measure, 1, &sw->measure1);
            halving_measure(&sw->measure, 2, &sw->measure);
        }
    }
    store_sweep_counts_t rows;
    rc = store_sweep_result_counts(s->db, sw->id, &rows);
    if (!rc) {
        sw->done = rows.done;
        sw->failed = rows.failed;
        sw->pruned = rows.pruned;
        sw->timed_us = rows.timed_us;
        rc = store_sweep_devices_each(s->db, sw->id, load_device, sw);
    }
    if (rc) goto out;
    if (grow((void **)&s->sweeps, &s->cap_sweeps, s->n_sweeps + 1, sizeof *s->sweeps)) {
        rc = MT_NOMEM;
        goto out;
    }
    s->sweeps[s->n_sweeps++] = sw;
    if (sw->state != S_RUNNING) {
        /* finished sweeps keep only their counts */
        uint32_t counts[J_NSTATES];
        rc = store_job_state_counts(s->db, sw->id, counts);
        if (!rc) memcpy(sw->jobs_by_state, counts, sizeof counts);
        sw = NULL;
        goto out;
    }
    uint32_t counts[J_NSTATES];
    rc = store_job_state_counts(s->db, sw->id, counts);
    if (rc) goto out;
    sw->jobs_by_state[J_DONE] = counts[J_DONE];
    sw->jobs_by_state[J_FAILED] = counts[J_FAILED];
    sw->jobs_by_state[J_CANCELLED] = counts[J_CANCELLED];
    char device[256];
    rc = store_sweep_device(s->db, sw->id, device, sizeof device);
    if (rc == MT_OK) {
        sw->device = mt_strdup(device);
        if (!sw->device) rc = MT_NOMEM;
    } else if (rc == MT_NOTFOUND) {
        rc = MT_OK;
    }
    if (rc) goto out;
    load_ctx_t lc = {.s = s, .sw = sw};
    rc = sw->halving ? store_sweep_phases_each(s->db, sw->id, load_phase, sw) : MT_OK;
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
        if (sw->jobs[i]->rows_done >= sw->jobs[i]->rows_needed) job_finish(s, sw->jobs[i], J_DONE);
    sw->halving_due = sw->halving; /* sched_new plans a phase 2 that a restart interrupted */
    sweep_check(s, sw);
    log_at(MT_LOG_INFO, "sweep %llu '%s' loaded: %u jobs pending, %llu of %llu results", (unsigned long long)sw->id,
           sw->name, sw->jobs_by_state[J_PENDING], (unsigned long long)sw->done, (unsigned long long)sw->planned);
    sw = NULL;
out:
    if (spec) moetune__sweep_spec__free_unpacked(spec, NULL);
    if (rc && sw) {
        if (s->n_sweeps && s->sweeps[s->n_sweeps - 1] == sw) s->n_sweeps--;
        for (size_t i = 0; i < sw->n_jobs; i++)
            if (sw->jobs[i]->id < s->cap_by_id) s->by_id[sw->jobs[i]->id] = NULL;
        sweep_free(sw);
    }
    return rc;
}

sched_t *sched_new(store_t *db, const sched_opts_t *opts, uint64_t now_ms, char *err, size_t errlen) {
    sched_t *s = calloc(1, sizeof *s);
    uint32_t requeued = 0;
    if (!s) {
        mt_fmt(err, errlen, "out of memory");
        return NULL;
    }
    s->db = db;
    s->o = *opts;
    if (!s->o.heartbeat_ms) s->o.heartbeat_ms = 1000;
    if (!s->o.lease_ms) s->o.lease_ms = 30000;
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
    if (!rc) rc = store_sweeps_each(db, load_sweep, s);
    if (!rc) halving_poll_all(s, 0);
    if (rc) {
        mt_fmt(err, errlen, "loading state: %s", rc == MT_NOMEM ? "out of memory" : store_errmsg(db));
        sched_destroy(&s);
        return NULL;
    }
    if (requeued) log_at(MT_LOG_INFO, "%u leased jobs of finished sweeps returned to pending", requeued);
    for (size_t i = 0; i < s->n_workers; i++)
        log_at(MT_LOG_INFO, "worker %s keeps %zu leases until %u ms from now unless it says hello",
               s->workers[i]->id, s->workers[i]->n_held, s->o.lease_ms);
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
        for (size_t i = 0; i < s->inflight->n_entries; i++) wire_free(&s->inflight->entries[i].env);
        batch_free(s->inflight);
    }
    for (size_t i = 0; i < s->n_sweeps; i++) sweep_free(s->sweeps[i]);
    free(s->sweeps);
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        wire_free(&w->hello);
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
    free(s->behind);
    free(s);
    *ps = NULL;
}

/* ---- workers */

static sched_worker_t *worker_find(sched_t *s, const uint8_t *rid, size_t len) {
    uint64_t h = mt_fnv1a(MT_FNV_INIT, rid, len);
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        if (w->rid_hash == h && w->rid_len == len && memcmp(w->rid, rid, len) == 0) return w;
    }
    return NULL;
}

/* A new worker record, not alive, with its routing id as its id until it says Hello. */
static sched_worker_t *worker_add(sched_t *s, const uint8_t *rid, size_t len) {
    if (grow((void **)&s->workers, &s->cap_workers, s->n_workers + 1, sizeof *s->workers)) return NULL;
    sched_worker_t *w = calloc(1, sizeof *w);
    char *id = malloc(len + 1);
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
static int worker_hold(sched_worker_t *w, job_t *j) {
    if (grow((void **)&w->held, &w->cap_held, w->n_held + 1, sizeof *w->held)) return MT_NOMEM;
    j->holder = w;
    j->held_idx = w->n_held;
    w->held[w->n_held++] = j;
    return MT_OK;
}

sched_worker_t *sched_worker(sched_t *s, const uint8_t *rid, size_t rid_len) {
    sched_worker_t *w = worker_find(s, rid, rid_len);
    return w && w->alive ? w : NULL;
}

static void ack_push(sched_worker_t *w, uint64_t seq) {
    if (grow((void **)&w->acks, &w->cap_acks, w->n_acks + 1, sizeof *w->acks)) return;
    w->acks[w->n_acks++] = seq;
}

/* Every job w holds goes back to pending. */
static void worker_release_all(sched_t *s, sched_worker_t *w, bool count_attempt, const char *why) {
    while (w->n_held) job_requeue(s, w->held[w->n_held - 1], count_attempt, why);
}

static void dispatch(sched_t *s, sched_worker_t *w, uint64_t now_ms);
static void send_acks(sched_t *s);

static void dispatch_all(sched_t *s, uint64_t now_ms) {
    for (size_t i = 0; i < s->n_workers; i++)
        if (s->workers[i]->alive && s->workers[i]->credits) dispatch(s, s->workers[i], now_ms);
}

int sched_on_hello(sched_t *s, const uint8_t *rid, size_t rid_len, wire_env_t **env, uint64_t now_ms) {
    const Moetune__Hello *h = (*env)->hello;
    char *id = strdup(h->worker_id ? h->worker_id : "");
    if (!id) return MT_NOMEM;
    sched_worker_t *w = worker_find(s, rid, rid_len);
    if (!w) w = worker_add(s, rid, rid_len);
    if (!w) {
        free(id);
        return MT_NOMEM;
    }
    /* It keeps its leases; its first heartbeat says which of them it still holds. */
    w->await_hb = w->n_held > 0;
    for (size_t i = 0; i < w->n_held; i++) w->held[i]->reclaim = true;
    if (w->n_held)
        log_at(MT_LOG_INFO, "worker %s said hello holding %zu leases; its heartbeat settles them", id, w->n_held);
    wire_free(&w->hello);
    w->hello = *env;
    *env = NULL;
    free(w->id);
    w->id = id;
    w->alive = true;
    w->credits = 0;
    w->last_heard = now_ms;
    w->device_id = 0;
    uint64_t dev = 0;
    if (store_hello(s->db, h, mt_wall_s(), &dev))
        log_at(MT_LOG_WARN, "worker %s: not recorded yet (%s); it is recorded with its first results",
               w->id, store_errmsg(s->db));
    else
        w->device_id = dev;
    log_at(MT_LOG_INFO, "worker %s joined: host %s pid %u backend %s gpu '%s'", w->id, h->host ? h->host : "",
           h->pid, h->backend ? h->backend : "", gpu_name(w));
    wire_env_t out;
    Moetune__Welcome wel = MOETUNE__WELCOME__INIT;
    wire_env_init(&out);
    wel.heartbeat_ms = s->o.heartbeat_ms;
    wel.lease_ms = s->o.lease_ms;
    out.body_case = MOETUNE__ENVELOPE__BODY_WELCOME;
    out.welcome = &wel;
    send_env(s, w, &out);
    dispatch_all(s, now_ms); /* jobs it gave back may go to others */
    return MT_OK;
}

void sched_on_heard(sched_t *s, sched_worker_t *w, uint64_t now_ms) {
    bool changed = false;
    w->last_heard = now_ms;
    /* an expired lease is not revived by a late message: the job goes back first */
    for (size_t i = 0; i < w->n_held;) {
        job_t *j = w->held[i];
        if (now_ms > j->lease_expires) {
            job_requeue(s, j, true, "lease expired");
            changed = true;
            continue;
        }
        j->lease_expires = now_ms + s->o.lease_ms;
        i++;
    }
    if (changed) dispatch_all(s, now_ms);
}

void sched_on_heartbeat(sched_t *s, sched_worker_t *w, const uint64_t *job_ids, size_t n, uint64_t now_ms) {
    if (!w->await_hb) return;
    w->await_hb = false;
    bool changed = false;
    for (size_t i = 0; i < w->n_held;) {
        job_t *j = w->held[i];
        bool listed = false;
        for (size_t k = 0; k < n && !listed; k++) listed = job_ids[k] == j->id;
        if (!j->reclaim || listed) {
            j->reclaim = false;
            i++;
            continue;
        }
        j->reclaim = false;
        job_requeue(s, j, false, "its worker no longer holds it");
        changed = true;
    }
    if (changed) dispatch_all(s, now_ms);
}

void sched_on_ready(sched_t *s, sched_worker_t *w, uint32_t credits, uint64_t now_ms) {
    uint64_t c = (uint64_t)w->credits + credits;
    w->credits = c > 1024 ? 1024 : (uint32_t)c;
    dispatch(s, w, now_ms);
}

void sched_on_bye(sched_t *s, sched_worker_t *w, uint64_t now_ms) {
    log_at(MT_LOG_INFO, "worker %s said bye", w->id);
    worker_release_all(s, w, false, "its worker left");
    w->alive = false;
    w->credits = 0;
    dispatch_all(s, now_ms);
}

/* ---- dispatch */

static bool other_live_worker(const sched_t *s, const sched_worker_t *w, const sweep_t *sw) {
    for (size_t i = 0; i < s->n_workers; i++) {
        const sched_worker_t *o = s->workers[i];
        if (o != w && o->alive && worker_matches(o, sw)) return true;
    }
    return false;
}

/* The first pending job in (sweep id, job id) order that w may take. */
static job_t *pick(sched_t *s, sched_worker_t *w) {
    for (size_t i = 0; i < s->n_sweeps; i++) {
        sweep_t *sw = s->sweeps[i];
        if (sw->state != S_RUNNING || !sw->jobs_by_state[J_PENDING] || !worker_matches(w, sw)) continue;
        while (sw->hint < sw->n_jobs && sw->jobs[sw->hint]->state != J_PENDING) sw->hint++;
        int other = -1;
        for (size_t k = sw->hint; k < sw->n_jobs; k++) {
            job_t *j = sw->jobs[k];
            if (j->state != J_PENDING) continue;
            if (j->avoid && strcmp(j->avoid, w->id) == 0) {
                if (other < 0) other = other_live_worker(s, w, sw);
                if (other) continue;
            }
            return j;
        }
    }
    return NULL;
}

/* Builds and sends the Job for j leased to w. MT_NOTFOUND when nothing is left to measure. */
static int send_job(sched_t *s, sched_worker_t *w, job_t *j) {
    const krn_shape_t *sh = shape_get(s, j->shape_id);
    if (!sh) return MT_IO;
    if (j->n_cfgs > s->cap_jc) {
        void *a = realloc(s->jc, j->n_cfgs * sizeof *s->jc);
        if (a) s->jc = a;
        void *b = realloc(s->jcp, j->n_cfgs * sizeof *s->jcp);
        if (b) s->jcp = b;
        void *c = realloc(s->jcfg, j->n_cfgs * sizeof *s->jcfg);
        if (c) s->jcfg = c;
        if (!a || !b || !c) return MT_NOMEM;
        s->cap_jc = j->n_cfgs;
    }
    size_t n = 0;
    for (size_t i = 0; i < j->n_cfgs; i++) {
        const jcfg_t *c = &j->cfgs[i];
        if (c->removed || c->rows >= job_nb(j)) continue;
        const krn_config_t *k = config_get(s, c->config_id);
        if (!k) return MT_IO;
        moetune__job_config__init(&s->jc[n]);
        wire_config_to_msg(k, &s->jcfg[n]);
        s->jc[n].config_id = c->config_id;
        s->jc[n].config = &s->jcfg[n];
        s->jcp[n] = &s->jc[n];
        n++;
    }
    if (n == 0) return MT_NOTFOUND;
    if (grow((void **)&s->best, &s->cap_best, job_nb(j), sizeof *s->best)) return MT_NOMEM;
    for (size_t i = 0; i < job_nb(j); i++)
        s->best[i] = race_best(s->race, j->sw->id, j->shape_id, job_bs(j)[i]);
    Moetune__Shape shape;
    wire_shape_to_msg(sh, &shape);
    Moetune__Job job = MOETUNE__JOB__INIT;
    job.job_id = j->id;
    job.lease_token = j->token;
    job.sweep_id = j->sw->id;
    job.shape = &shape;
    job.n_configs = n;
    job.configs = s->jcp;
    job.n_batch_sizes = job_nb(j);
    job.batch_sizes = (uint32_t *)job_bs(j);
    job.measure = j->sw->halving && j->phase == 1 ? &j->sw->measure1 : &j->sw->measure;
    job.n_best_us = job_nb(j);
    job.best_us = s->best;
    job.routing_path = j->sw->routing_path ? j->sw->routing_path : "";
    wire_env_t env;
    wire_env_init(&env);
    env.body_case = MOETUNE__ENVELOPE__BODY_JOB;
    env.job = &job;
    return send_env(s, w, &env);
}

static void dispatch(sched_t *s, sched_worker_t *w, uint64_t now_ms) {
    while (w->alive && w->credits) {
        job_t *j = pick(s, w);
        if (!j) return;
        if (grow((void **)&w->held, &w->cap_held, w->n_held + 1, sizeof *w->held)) return;
        char *holder_id = mt_strdup(w->id); /* the job row's worker_id, before anything is sent */
        char *device = j->sw->device ? NULL : mt_strdup(gpu_name(w));
        if (!holder_id || (!j->sw->device && !device)) {
            free(holder_id);
            free(device);
            return;
        }
        j->reclaim = false;
        uint64_t old_token = j->token;
        j->token = rng_next(s);
        int rc = send_job(s, w, j);
        if (rc == MT_NOTFOUND) {
            free(holder_id);
            free(device);
            j->token = old_token;
            job_finish(s, j, J_DONE);
            continue;
        }
        if (rc) {
            free(holder_id);
            free(device);
            j->token = old_token;
            log_at(MT_LOG_ERROR, "job %llu not sent to %s (%d)", (unsigned long long)j->id, w->id, rc);
            return;
        }
        if (device) {
            j->sw->device = device;
            log_at(MT_LOG_INFO, "sweep %llu bound to GPU model '%s' (its first lease, to %s): only that model "
                   "measures it, so its answer is for one device, from the whole space",
                   (unsigned long long)j->sw->id, device, w->id);
        }
        set_job_state(j, J_LEASED);
        worker_hold(w, j); /* room was made above */
        w->credits--;
        j->lease_expires = now_ms + s->o.lease_ms;
        j->lease_expires_wall_ms = wall_ms() + s->o.lease_ms;
        free(j->last_worker);
        j->last_worker = holder_id;
        job_dirty(s, j);
        log_at(MT_LOG_INFO, "job %llu (sweep %llu) leased to %s, attempt %u", (unsigned long long)j->id,
               (unsigned long long)j->sw->id, w->id, j->attempts + 1);
    }
}

/* ---- results */

static int reject(sched_t *s, sched_worker_t *w, uint64_t seq, uint64_t job_id, const char *why) {
    s->c.rejected_results++;
    ack_push(w, seq);
    log_at(MT_LOG_WARN, "result seq %llu from %s for job %llu rejected: %s", (unsigned long long)seq, w->id,
           (unsigned long long)job_id, why);
    return MT_INVAL;
}

/* A Result from the lease holder, with the job's token, that cannot be stored: the
 * job goes back to pending with an attempt (failed at max_attempts), so a worker
 * that keeps sending what cannot be stored never holds a lease forever. */
static int reject_holder(sched_t *s, sched_worker_t *w, job_t *j, uint64_t seq, const char *why, uint64_t now_ms) {
    char reason[224];
    reject(s, w, seq, j->id, why);
    job_requeue(s, j, true, mt_fmt(reason, sizeof reason, "its holder sent a result that cannot be stored (%s)", why));
    dispatch_all(s, now_ms);
    return MT_INVAL;
}

void sched_on_bad(sched_t *s, sched_worker_t *w, const wire_reject_t *rej, uint64_t now_ms) {
    char why[320];
    job_t *j = rej->job_id ? job_lookup(s, rej->job_id) : NULL;
    if (j && j->state == J_LEASED && j->holder == w && j->token == rej->lease_token) {
        reject_holder(s, w, j, rej->seq, rej->reason, now_ms);
        return;
    }
    if (rej->job_id) {
        /* an invalid Result for a lease it does not hold: stale, nothing waits on it */
        reject(s, w, rej->seq, rej->job_id, rej->reason);
        return;
    }
    if (!w->n_held) return;
    /* which job it was about is unknown: every lease it holds goes back, with an attempt */
    mt_fmt(why, sizeof why, "its holder sent a message that does not decode (%s)", rej->reason);
    worker_release_all(s, w, true, why);
    dispatch_all(s, now_ms);
}

/* First crash of a config: take it out of its job into a new job that avoids w.
 * Written at once in its own transaction (rare). Memory for the new job is taken
 * before the commit, so memory and database never disagree: on any failure neither
 * changes and the caller requeues the job. */
static int crash_first(sched_t *s, sched_worker_t *w, job_t *j, size_t ci, uint64_t now_ms) {
    jcfg_t *c = &j->cfgs[ci];
    uint64_t new_id = 0;
    uint32_t count = 0;
    job_t *nj = mt_calloc(1, sizeof *nj);
    jcfg_t *ncfg = mt_calloc(1, sizeof *ncfg);
    char *avoid = mt_strdup(w->id);
    if (!nj || !ncfg || !avoid) goto nomem;
    int rc = store_begin(s->db);
    if (!rc) rc = store_crash_bump(s->db, j->sw->id, j->shape_id, c->config_id, w->id, &count);
    if (!rc) rc = store_job_config_delete(s->db, j->id, c->config_id);
    char bs_text[2048] = "";
    uint32_t *nbs = j->bs ? malloc(j->nb * sizeof *nbs) : NULL;
    if (j->bs && (!nbs || halving_bs_format(j->bs, j->nb, bs_text, sizeof bs_text))) {
        free(nbs);
        store_rollback(s->db);
        goto nomem;
    }
    if (nbs) memcpy(nbs, j->bs, j->nb * sizeof *nbs);
    nj->bs = nbs; /* the retry keeps the job's phase and batch sizes */
    nj->nb = j->nb;
    nj->phase = j->phase;
    if (!rc) rc = store_job_insert_phase(s->db, j->sw->id, j->shape_id, j->phase, j->bs ? bs_text : NULL, w->id,
                                         mt_wall_s(), &new_id);
    if (!rc) rc = store_job_config_insert(s->db, new_id, c->config_id);
    if (!rc && job_index_reserve(s, j->sw, new_id)) {
        store_rollback(s->db);
        goto nomem;
    }
    if (!rc) rc = store_commit(s->db);
    if (rc) {
        log_at(MT_LOG_ERROR, "crash of config %llu in job %llu not recorded: %s", (unsigned long long)c->config_id,
               (unsigned long long)j->id, store_errmsg(s->db));
        store_rollback(s->db);
        s->c.commit_failures++;
        job_free(nj);
        free(ncfg);
        free(avoid);
        return rc;
    }
    nj->id = new_id;
    nj->sw = j->sw;
    nj->shape_id = j->shape_id;
    nj->state = J_PENDING;
    nj->avoid = avoid;
    nj->cfgs = ncfg;
    nj->n_cfgs = 1;
    ncfg->config_id = c->config_id;
    nj->rows_needed = job_nb(nj);
    job_index(s, nj); /* room reserved above: cannot fail */
    c->removed = true;
    j->rows_needed -= job_nb(j);
    j->rows_done -= c->rows;
    log_at(MT_LOG_WARN, "config %llu crashed %s's child in job %llu: retried alone in job %llu elsewhere",
           (unsigned long long)c->config_id, w->id, (unsigned long long)j->id, (unsigned long long)new_id);
    if (j->rows_done >= j->rows_needed && (j->state == J_PENDING || j->state == J_LEASED)) job_finish(s, j, J_DONE);
    dispatch_all(s, now_ms);
    return MT_OK;
nomem:
    log_at(MT_LOG_ERROR, "out of memory recording the crash of config %llu in job %llu",
           (unsigned long long)c->config_id, (unsigned long long)j->id);
    job_free(nj);
    free(ncfg);
    free(avoid);
    return MT_NOMEM;
}

int sched_on_result(sched_t *s, sched_worker_t *w, wire_env_t **env, uint64_t now_ms) {
    const Moetune__Result *r = (*env)->result;
    char why[160];
    job_t *j = job_lookup(s, r->job_id);
    /* Only the current lease may deliver: leased, same token, same holder, not expired. */
    if (!j) return reject(s, w, r->seq, r->job_id, "unknown job");
    if (j->state != J_LEASED) {
        mt_fmt(why, sizeof why, "job is %s, not leased", g_job_state[j->state]);
        return reject(s, w, r->seq, r->job_id, why);
    }
    if (r->lease_token != j->token) return reject(s, w, r->seq, r->job_id, "lease token is not the job's");
    if (j->holder != w) {
        mt_fmt(why, sizeof why, "lease is held by %s", j->holder ? j->holder->id : "nobody");
        return reject(s, w, r->seq, r->job_id, why);
    }
    if (now_ms > j->lease_expires) return reject(s, w, r->seq, r->job_id, "lease expired");
    size_t ci = j->n_cfgs;
    for (size_t i = 0; i < j->n_cfgs; i++) {
        if (j->cfgs[i].config_id == r->config_id && !j->cfgs[i].removed) {
            ci = i;
            break;
        }
    }
    if (ci == j->n_cfgs) {
        mt_fmt(why, sizeof why, "config %llu is not in the job", (unsigned long long)r->config_id);
        return reject_holder(s, w, j, r->seq, why, now_ms);
    }
    sweep_t *sw = j->sw;
    if (r->n_measurements != job_nb(j)) {
        mt_fmt(why, sizeof why, "%zu measurements for %zu batch sizes", r->n_measurements, job_nb(j));
        return reject_holder(s, w, j, r->seq, why, now_ms);
    }
    if (++sw->stamp == 0) {
        memset(sw->seen, 0, sw->nb * sizeof *sw->seen);
        sw->stamp = 1;
    }
    size_t crashed = 0;
    for (size_t i = 0; i < r->n_measurements; i++) {
        int bi = bs_index(sw, r->measurements[i]->batch_size);
        if (bi < 0 || !job_has_bs(j, r->measurements[i]->batch_size) || sw->seen[bi] == sw->stamp) {
            mt_fmt(why, sizeof why, "batch size %u is not one of the job's or repeats",
                   r->measurements[i]->batch_size);
            return reject_holder(s, w, j, r->seq, why, now_ms);
        }
        sw->seen[bi] = sw->stamp;
        if (r->measurements[i]->status == MOETUNE__STATUS__STATUS_CRASHED) crashed++;
    }
    bool crash = crashed == r->n_measurements;
    if (crash) {
        uint32_t count = 0;
        int rc = store_crash_count(s->db, sw->id, j->shape_id, r->config_id, &count);
        if (!rc && count == 0) rc = crash_first(s, w, j, ci, now_ms);
        if (rc) {
            /* not recorded (storage): the job runs again later, so nothing is lost */
            job_requeue(s, j, false, "its crash could not be recorded");
            dispatch_all(s, now_ms);
        }
        if (rc || count == 0) {
            ack_push(w, r->seq);
            return rc;
        }
        log_at(MT_LOG_WARN, "config %llu crashed again on %s: quarantined", (unsigned long long)r->config_id, w->id);
    }
    if (grow((void **)&s->pending, &s->cap_pending, s->n_pending + 1, sizeof *s->pending)) return MT_NOMEM;
    entry_t *e = &s->pending[s->n_pending++];
    memset(e, 0, sizeof *e);
    e->env = *env;
    *env = NULL;
    e->w = w;
    e->job = j;
    e->cfg = ci;
    e->crash = crash;
    log_at(MT_LOG_DEBUG, "result seq %llu from %s: job %llu config %llu", (unsigned long long)r->seq, w->id,
           (unsigned long long)j->id, (unsigned long long)r->config_id);
    return MT_OK;
}

size_t sched_pending(const sched_t *s) { return s->n_pending + (s->inflight ? s->inflight->n_entries : 0); }

static void batch_free(sched_batch_t *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n_entries; i++) {
        for (int k = 0; k < 5; k++) free(b->rows[i].strs[k]);
        if (b->rows[i].hello) moetune__hello__free_unpacked(b->rows[i].hello, NULL);
    }
    for (size_t i = 0; i < b->n_jobs; i++) free((char *)b->jobu[i].worker_id);
    free(b->entries);
    free(b->rows);
    free(b->jobs);
    free(b->jobu);
    free(b->sweeps);
    free(b->sweep_state);
    free(b->sweep_finished);
    free(b->sweep_id);
    free(b);
}

static char *dup_or_null(const char *p) { return p ? strdup(p) : NULL; }

static int brow_fill(brow_t *br, const entry_t *e, int64_t now_s) {
    const Moetune__Result *r = e->env->result;
    const Moetune__Hello *h = e->w->hello ? e->w->hello->hello : NULL;
    br->strs[0] = dup_or_null(e->w->id);
    br->strs[1] = dup_or_null(h ? h->backend : NULL);
    br->strs[2] = dup_or_null(h ? h->compiler : NULL);
    br->strs[3] = dup_or_null(h ? h->kernel_hash : NULL);
    br->strs[4] = dup_or_null(h ? h->versions : NULL);
    if (!br->strs[0] || (h && ((h->backend && !br->strs[1]) || (h->compiler && !br->strs[2]) ||
                               (h->kernel_hash && !br->strs[3]) || (h->versions && !br->strs[4]))))
        return MT_NOMEM;
    br->base = (store_result_t){
        .sweep_id = e->job->sw->id,
        .shape_id = e->job->shape_id,
        .config_id = r->config_id,
        .job_id = e->job->id,
        .device_id = e->w->device_id,
        .registers = r->registers,
        .spills = r->spills,
        .worker_id = br->strs[0],
        .backend = br->strs[1],
        .compiler = br->strs[2],
        .kernel_hash = br->strs[3],
        .versions = br->strs[4],
        .created = now_s,
        .phase = e->job->phase,
    };
    br->r = r;
    br->crash = e->crash;
    /* Its Hello could not be recorded (a locked database): the writer records the device
     * and the worker in the same transaction as these rows, so no row lacks its device. */
    if (!e->w->device_id && h) {
        size_t len = moetune__hello__get_packed_size(h);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf) return MT_NOMEM;
        moetune__hello__pack(h, buf);
        br->hello = moetune__hello__unpack(NULL, len, buf);
        free(buf);
        if (!br->hello) return MT_NOMEM;
    }
    return MT_OK;
}

int sched_batch_take(sched_t *s, sched_batch_t **out) {
    *out = NULL;
    if (s->inflight) return MT_BUSY;
    size_t n_sw = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) n_sw += s->sweeps[i]->dirty;
    size_t n_e = s->n_pending < SCHED_BATCH_MAX ? s->n_pending : SCHED_BATCH_MAX;
    if (!n_e && !s->n_dirty && !n_sw) {
        send_acks(s); /* rejections need no commit */
        return MT_AGAIN;
    }
    sched_batch_t *b = calloc(1, sizeof *b);
    if (!b) return MT_NOMEM;
    size_t nj = s->n_dirty;
    b->entries = calloc(n_e ? n_e : 1, sizeof *b->entries);
    b->rows = calloc(n_e ? n_e : 1, sizeof *b->rows);
    b->jobs = calloc(nj ? nj : 1, sizeof *b->jobs);
    b->jobu = calloc(nj ? nj : 1, sizeof *b->jobu);
    b->sweeps = calloc(n_sw ? n_sw : 1, sizeof *b->sweeps);
    b->sweep_state = calloc(n_sw ? n_sw : 1, sizeof *b->sweep_state);
    b->sweep_finished = calloc(n_sw ? n_sw : 1, sizeof *b->sweep_finished);
    b->sweep_id = calloc(n_sw ? n_sw : 1, sizeof *b->sweep_id);
    if (!b->entries || !b->rows || !b->jobs || !b->jobu || !b->sweeps || !b->sweep_state || !b->sweep_finished ||
        !b->sweep_id)
        goto nomem;
    int64_t now_s = mt_wall_s();
    for (size_t i = 0; i < n_e; i++) {
        b->n_entries++; /* counted first so batch_free releases partial copies */
        if (brow_fill(&b->rows[i], &s->pending[i], now_s)) goto nomem;
    }
    for (size_t i = 0; i < nj; i++) {
        job_t *j = s->dirty_jobs[i];
        b->jobs[i] = j;
        b->jobu[i] = (store_job_update_t){
            .id = j->id,
            .state = g_job_state[j->state],
            .attempts = j->attempts,
            .worker_id = dup_or_null(j->last_worker),
            .lease_token = j->token,
            .lease_expires_ms = j->state == J_LEASED ? j->lease_expires_wall_ms : 0,
            .finished = j->state >= J_DONE ? j->finished : 0,
        };
        b->n_jobs++;
        if (j->last_worker && !b->jobu[i].worker_id) goto nomem;
    }
    for (size_t i = 0; i < s->n_sweeps; i++) {
        sweep_t *sw = s->sweeps[i];
        if (!sw->dirty) continue;
        b->sweeps[b->n_sweeps] = sw;
        b->sweep_id[b->n_sweeps] = sw->id;
        b->sweep_state[b->n_sweeps] = g_sweep_state[sw->state];
        b->sweep_finished[b->n_sweeps] = sw->finished;
        b->n_sweeps++;
    }
    /* everything copied: move ownership into the batch */
    if (n_e) { /* s->pending may be NULL when only job or sweep states changed */
        memcpy(b->entries, s->pending, n_e * sizeof *b->entries);
        memmove(s->pending, s->pending + n_e, (s->n_pending - n_e) * sizeof *s->pending);
        s->n_pending -= n_e;
    }
    for (size_t i = 0; i < nj; i++) b->jobs[i]->dirty = false;
    s->n_dirty = 0;
    for (size_t i = 0; i < b->n_sweeps; i++) b->sweeps[i]->dirty = false;
    s->inflight = b;
    send_acks(s);
    *out = b;
    return MT_OK;
nomem:
    batch_free(b);
    log_at(MT_LOG_ERROR, "out of memory building a commit batch; kept for the next try");
    return MT_NOMEM;
}

int sched_batch_write(store_t *db, void *arg) {
    sched_batch_t *b = arg;
    int rc = MT_OK;
    for (size_t i = 0; !rc && i < b->n_entries; i++) {
        brow_t *br = &b->rows[i];
        store_result_t row = br->base;
        br->new_rows = br->new_failed = br->new_pruned = br->new_replaced = 0;
        br->new_timed_us = 0;
        memset(br->new_by_status, 0, sizeof br->new_by_status);
        if (br->hello) {
            rc = store_hello(db, br->hello, row.created, &br->device_id);
            row.device_id = br->device_id;
        }
        for (size_t k = 0; !rc && k < br->r->n_measurements; k++) {
            const Moetune__Measurement *m = br->r->measurements[k];
            int outcome = STORE_ROW_KEPT;
            row.batch_size = m->batch_size;
            row.status = m->status;
            row.median_us = m->median_us;
            row.min_us = m->min_us;
            row.mean_us = m->mean_us;
            row.stddev_us = m->stddev_us;
            row.samples = m->samples;
            row.detail = m->detail;
            row.up_us = m->up_us;
            row.down_us = m->down_us;
            row.timed_us = m->timed_us;
            rc = store_result_put(db, &row, &outcome);
            if (!rc && outcome != STORE_ROW_KEPT) {
                /* a finalist's phase-2 row replaces its phase-1 ok row: counted for its job, not as a new row */
                if (outcome == STORE_ROW_NEW)
                    br->new_rows++;
                else
                    br->new_replaced++;
                br->new_timed_us += m->timed_us;
                if (m->status == MOETUNE__STATUS__STATUS_PRUNED)
                    br->new_pruned++;
                else if (m->status != MOETUNE__STATUS__STATUS_OK)
                    br->new_failed++;
                if (outcome == STORE_ROW_NEW)
                    br->new_by_status[(unsigned)m->status < SCHED_N_STATUS ? (unsigned)m->status : 0]++;
            }
        }
        if (!rc && br->crash) {
            uint32_t count = 0;
            rc = store_crash_bump(db, row.sweep_id, row.shape_id, row.config_id, row.worker_id, &count);
        }
    }
    for (size_t i = 0; !rc && i < b->n_jobs; i++) rc = store_job_update(db, &b->jobu[i]);
    for (size_t i = 0; !rc && i < b->n_sweeps; i++)
        rc = store_sweep_set_state(db, b->sweep_id[i], b->sweep_state[i], b->sweep_finished[i]);
    return rc;
}

size_t sched_batch_results(const sched_batch_t *b) { return b->n_entries; }

static void send_acks(sched_t *s) {
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        if (!w->n_acks) continue;
        Moetune__Ack ack = MOETUNE__ACK__INIT;
        ack.n_seqs = w->n_acks;
        ack.seqs = w->acks;
        wire_env_t env;
        wire_env_init(&env);
        env.body_case = MOETUNE__ENVELOPE__BODY_ACK;
        env.ack = &ack;
        send_env(s, w, &env);
        w->n_acks = 0;
    }
}

/* Applies committed entries to the in-memory counts. */
/* A committed Result's ok medians become the best its sweep races against. */
static void race_note_entry(sched_t *s, const entry_t *e) {
    const Moetune__Result *r = e->env->result;
    for (size_t k = 0; k < r->n_measurements; k++) {
        const Moetune__Measurement *m = r->measurements[k];
        if (m->status == MOETUNE__STATUS__STATUS_OK &&
            race_note(s->race, e->job->sw->id, e->job->shape_id, m->batch_size, m->median_us))
            log_at(MT_LOG_WARN, "racing: out of memory noting a best; that batch size races less");
    }
}

/* GPU busy counts each device that measured the sweep once. */
static int sweep_note_device(sweep_t *sw, uint64_t device_id) {
    for (size_t i = 0; i < sw->n_devs; i++)
        if (sw->devs[i] == device_id) return MT_OK;
    if (grow((void **)&sw->devs, &sw->cap_devs, sw->n_devs + 1, sizeof *sw->devs)) return MT_NOMEM;
    sw->devs[sw->n_devs++] = device_id;
    return MT_OK;
}

static int load_device(void *ctx, uint64_t device_id) { return sweep_note_device(ctx, device_id); }

/* Timed kernel seconds over the sweep's wall time and its GPUs; 0 when unknown. */
static double sweep_gpu_busy(const sweep_t *sw) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* created and finished are whole seconds: a sweep of a few seconds reads a little less busy */
    double end = sw->state == S_RUNNING || !sw->finished ? (double)ts.tv_sec + ts.tv_nsec * 1e-9 : (double)sw->finished + 1;
    double wall = end - (double)sw->created;
    return sw->timed_us > 0 && wall > 0 && sw->n_devs ? sw->timed_us * 1e-6 / (wall * (double)sw->n_devs) : 0.0;
}

static void apply_entry(sched_t *s, entry_t *e) {
    job_t *j = e->job;
    sweep_t *sw = j->sw;
    jcfg_t *c = &j->cfgs[e->cfg];
    c->rows += e->new_rows + e->new_replaced;
    if (!c->removed) j->rows_done += e->new_rows + e->new_replaced;
    sw->done += e->new_rows;
    sw->failed += e->new_failed;
    sw->pruned += e->new_pruned;
    sw->timed_us += e->new_timed_us;
    if (e->new_rows && e->w->device_id) sweep_note_device(sw, e->w->device_id);
    s->c.results_committed += e->new_rows;
    for (int k = 0; k < SCHED_N_STATUS; k++) s->c.committed_by_status[k] += e->new_by_status[k];
    e->w->results += e->new_rows;
    ack_push(e->w, e->env->result->seq);
    if (j->rows_done >= j->rows_needed && (j->state == J_PENDING || j->state == J_LEASED)) job_finish(s, j, J_DONE);
}

void sched_batch_done(sched_t *s, sched_batch_t *b, int rc, const char *why, uint64_t now_ms) {
    if (!b) return;
    if (s->inflight == b) s->inflight = NULL;
    if (rc) {
        /* keep everything: the entries go back in front of what arrived since, the
         * jobs and sweeps are written again with their state at the next try */
        s->c.commit_failures++;
        why = why && *why ? why : "unknown error";
        if (!s->storage_err[0])
            log_at(MT_LOG_WARN, "storage: commit of %zu results failed, kept unacknowledged and retried: %s",
                   b->n_entries, why);
        else
            log_at(MT_LOG_DEBUG, "storage: commit of %zu results failed again: %s", b->n_entries, why);
        mt_fmt(s->storage_err, sizeof s->storage_err, "%s", why);
        if (!b->n_entries) {
            /* only job and sweep rows: nothing to put back */
        } else if (grow((void **)&s->pending, &s->cap_pending, s->n_pending + b->n_entries, sizeof *s->pending)) {
            log_at(MT_LOG_ERROR, "out of memory keeping %zu results; their workers resend them", b->n_entries);
            for (size_t i = 0; i < b->n_entries; i++) wire_free(&b->entries[i].env);
        } else {
            memmove(s->pending + b->n_entries, s->pending, s->n_pending * sizeof *s->pending);
            memcpy(s->pending, b->entries, b->n_entries * sizeof *s->pending);
            s->n_pending += b->n_entries;
        }
        for (size_t i = 0; i < b->n_jobs; i++) job_dirty(s, b->jobs[i]);
        for (size_t i = 0; i < b->n_sweeps; i++) b->sweeps[i]->dirty = true;
        batch_free(b);
        send_acks(s);
        return;
    }
    if (s->storage_err[0]) {
        log_at(MT_LOG_INFO, "storage: commits succeed again (%zu results in this one, %zu waiting)", b->n_entries,
               sched_pending(s) - b->n_entries);
        s->storage_err[0] = '\0';
    }
    for (size_t i = 0; i < b->n_entries; i++) {
        entry_t *e = &b->entries[i];
        if (b->rows[i].hello && !e->w->device_id) {
            e->w->device_id = b->rows[i].device_id;
            log_at(MT_LOG_INFO, "worker %s recorded with its results", e->w->id);
        }
        e->new_rows = b->rows[i].new_rows;
        e->new_failed = b->rows[i].new_failed;
        e->new_pruned = b->rows[i].new_pruned;
        e->new_replaced = b->rows[i].new_replaced;
        e->new_timed_us = b->rows[i].new_timed_us;
        race_note_entry(s, e);
        memcpy(e->new_by_status, b->rows[i].new_by_status, sizeof e->new_by_status);
        apply_entry(s, e);
        wire_free(&e->env);
    }
    batch_free(b);
    send_acks(s);
    halving_poll_all(s, now_ms);
}

int sched_flush(sched_t *s, uint64_t now_ms) {
    int rc = MT_OK;
    do {
        sched_batch_t *b = NULL;
        rc = sched_batch_take(s, &b);
        if (rc == MT_AGAIN) return MT_OK;
        if (rc) return rc;
        rc = store_begin(s->db);
        if (!rc) rc = sched_batch_write(s->db, b);
        if (!rc) rc = store_commit(s->db);
        if (rc) store_rollback(s->db);
        sched_batch_done(s, b, rc, rc ? store_errmsg(s->db) : NULL, now_ms);
    } while (!rc); /* a commit can finish jobs and sweeps: their rows go in the next batch */
    return rc;
}

/* ---- timers */

void sched_tick(sched_t *s, uint64_t now_ms) {
    bool changed = false;
    if (now_ms >= s->next_hb) {
        s->next_hb = now_ms + s->o.heartbeat_ms;
        Moetune__Heartbeat hb = MOETUNE__HEARTBEAT__INIT;
        hb.sent_ms = now_ms;
        wire_env_t env;
        wire_env_init(&env);
        env.body_case = MOETUNE__ENVELOPE__BODY_HEARTBEAT;
        env.heartbeat = &hb;
        for (size_t i = 0; i < s->n_workers; i++) {
            sched_worker_t *w = s->workers[i];
            if (!w->alive) continue;
            if (now_ms - w->last_heard > (uint64_t)DEAD_PERIODS * s->o.heartbeat_ms) {
                log_at(MT_LOG_WARN, "worker %s dead: silent for %llu ms", w->id,
                       (unsigned long long)(now_ms - w->last_heard));
                w->alive = false;
                w->credits = 0;
                s->c.dead_workers++;
                worker_release_all(s, w, true, "its worker went silent");
                changed = true;
                continue;
            }
            send_env(s, w, &env);
        }
    }
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        for (size_t k = 0; k < w->n_held;) {
            job_t *j = w->held[k];
            if (now_ms > j->lease_expires) {
                job_requeue(s, j, true, "lease expired");
                changed = true;
            } else {
                k++;
            }
        }
    }
    if (now_ms >= s->next_rate) {
        s->next_rate = now_ms + 1000;
        for (size_t i = 0; i < s->n_sweeps; i++) {
            sweep_t *sw = s->sweeps[i];
            if (sw->state != S_RUNNING) continue;
            size_t slot = sw->rate_n % RATE_SLOTS;
            sw->rate_t[slot] = now_ms;
            sw->rate_done[slot] = sw->done;
            sw->rate_n++;
        }
    }
    if (changed) dispatch_all(s, now_ms);
    halving_poll_all(s, now_ms); /* retries a phase transition that did not commit */
}

/* ---- control */

static sweep_t *sweep_lookup(sched_t *s, uint64_t id) {
    for (size_t i = 0; i < s->n_sweeps; i++)
        if (s->sweeps[i]->id == id) return s->sweeps[i];
    return NULL;
}

int sched_submit(sched_t *s, const Moetune__SweepSpec *spec, Moetune__Submitted *out, uint64_t now_ms, char *err,
                 size_t errlen) {
    /* A spec without batch sizes means the engines' default 18; the filled-in spec is the
     * one stored, so a restart plans and checks against the same list. */
    Moetune__SweepSpec filled;
    uint32_t default_bs[32];
    if (spec && spec->n_batch_sizes == 0) {
        filled = *spec;
        memcpy(default_bs, krn_default_batch_sizes, krn_n_default_batch_sizes * sizeof *default_bs);
        filled.batch_sizes = default_bs;
        filled.n_batch_sizes = krn_n_default_batch_sizes;
        spec = &filled;
    }
    /* A submit waits longer than the loop's other writes for the writer thread's commit. */
    store_set_busy_ms(s->db, SCHED_SUBMIT_BUSY_MS);
    int rc = plan_store(s->db, spec, out, err, errlen);
    store_set_busy_ms(s->db, SCHED_DB_BUSY_MS);
    if (rc) return rc;
    /* load the new sweep through the same path as a restart */
    const char *state = "running";
    store_sweep_row_t row = {.id = out->sweep_id, .name = spec->name ? spec->name : "", .state = state,
                             .results_planned = out->results_planned, .created = mt_wall_s()};
    size_t len = moetune__sweep_spec__get_packed_size(spec);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    moetune__sweep_spec__pack(spec, buf);
    row.spec = buf;
    row.spec_len = len;
    /* sweeps ahead of it: running ones with work left, dispatched first (lower ids) */
    size_t n_behind = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) {
        const sweep_t *o = s->sweeps[i];
        if (o->state != S_RUNNING || !(o->jobs_by_state[J_PENDING] + o->jobs_by_state[J_LEASED])) continue;
        if (grow((void **)&s->behind, &s->cap_behind, n_behind + 1, sizeof *s->behind)) break;
        s->behind[n_behind++] = o->id;
    }
    rc = load_sweep(s, &row);
    free(buf);
    if (rc) {
        /* stored but not loaded: mark it failed, or a restart would measure it unasked */
        mt_fmt(err, errlen, "loading sweep %llu: %s", (unsigned long long)out->sweep_id,
               rc == MT_NOMEM ? "out of memory" : store_errmsg(s->db));
        if (store_sweep_set_state(s->db, out->sweep_id, g_sweep_state[S_FAILED], mt_wall_s()))
            log_at(MT_LOG_ERROR, "sweep %llu could not be marked failed: %s", (unsigned long long)out->sweep_id,
                   store_errmsg(s->db));
        return rc;
    }
    out->n_queued_behind = n_behind;
    out->queued_behind = n_behind ? s->behind : NULL;
    for (size_t i = 0; i < n_behind; i++) {
        const sweep_t *o = sweep_lookup(s, s->behind[i]);
        log_at(MT_LOG_WARN, "sweep %llu queued behind running sweep %llu '%s' (%llu of %llu results): it is "
               "measured first", (unsigned long long)out->sweep_id, (unsigned long long)o->id, o->name,
               (unsigned long long)o->done, (unsigned long long)o->planned);
    }
    log_at(MT_LOG_INFO, "sweep %llu '%s' submitted: %u jobs, %u configs valid, %u rejected, %llu results planned",
           (unsigned long long)out->sweep_id, row.name, out->jobs, out->configs_valid, out->configs_rejected,
           (unsigned long long)out->results_planned);
    dispatch_all(s, now_ms);
    return MT_OK;
}


int sched_cancel(sched_t *s, uint64_t sweep_id, uint32_t *jobs_cancelled, uint64_t now_ms) {
    sweep_t *sw = sweep_lookup(s, sweep_id);
    uint32_t n = 0;
    if (!sw) return MT_NOTFOUND;
    if (sw->state == S_RUNNING) {
        sw->state = S_CANCELLED; /* first, so finishing jobs do not mark it done */
        sw->finished = mt_wall_s();
        sw->dirty = true;
        for (size_t i = 0; i < sw->n_jobs; i++) {
            job_t *j = sw->jobs[i];
            if (j->state == J_PENDING || j->state == J_LEASED) {
                job_finish(s, j, J_CANCELLED);
                n++;
            }
        }
        log_at(MT_LOG_INFO, "sweep %llu cancelled: %u jobs", (unsigned long long)sweep_id, n);
    }
    *jobs_cancelled = n;
    (void)now_ms;
    return MT_OK;
}

static double sweep_rate(const sweep_t *sw, uint64_t now_ms) {
    if (sw->rate_n == 0) return 0.0;
    size_t oldest = sw->rate_n > RATE_SLOTS ? sw->rate_n % RATE_SLOTS : 0;
    uint64_t t0 = sw->rate_t[oldest];
    if (now_ms <= t0) return 0.0;
    return (double)(sw->done - sw->rate_done[oldest]) * 1000.0 / (double)(now_ms - t0);
}

int sched_status(sched_t *s, uint64_t sweep_id, uint64_t now_ms, sched_status_t *st) {
    memset(st, 0, sizeof *st);
    moetune__status_reply__init(&st->reply);
    moetune__counters__init(&st->counters);
    size_t n_sw = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) n_sw += sweep_id == 0 || s->sweeps[i]->id == sweep_id;
    if (sweep_id && n_sw == 0) return MT_NOTFOUND;
    st->sweeps = calloc(n_sw ? n_sw : 1, sizeof *st->sweeps);
    st->sweep_ptrs = calloc(n_sw ? n_sw : 1, sizeof *st->sweep_ptrs);
    st->workers = calloc(s->n_workers ? s->n_workers : 1, sizeof *st->workers);
    st->worker_ptrs = calloc(s->n_workers ? s->n_workers : 1, sizeof *st->worker_ptrs);
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
        o->state = (char *)g_sweep_state[sw->state];
        o->results_planned = sw->planned;
        o->results_done = sw->done;
        o->results_failed = sw->failed;
        o->results_pruned = sw->pruned;
        o->timed_s = sw->timed_us * 1e-6;
        o->gpu_busy = sweep_gpu_busy(sw);
        for (int js = 0; js < J_NSTATES; js++) o->jobs_total += sw->jobs_by_state[js];
        o->jobs_pending = sw->jobs_by_state[J_PENDING];
        o->jobs_leased = sw->jobs_by_state[J_LEASED];
        o->jobs_done = sw->jobs_by_state[J_DONE];
        o->jobs_failed = sw->jobs_by_state[J_FAILED];
        o->rate = sw->state == S_RUNNING ? sweep_rate(sw, now_ms) : 0.0;
        o->created_s = (uint64_t)sw->created;
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
    const job_t *j = job_lookup(s, job_id);
    if (!j) return NULL;
    if (attempts) *attempts = j->attempts;
    return g_job_state[j->state];
}
