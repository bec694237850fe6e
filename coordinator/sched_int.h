/*
 * sched_int.h - the scheduler's private model, shared by its files; scheduler.h
 * is the public interface. Not for callers outside coordinator/sched*.c.
 *
 * Files, each calling only those below it (the entry points of scheduler.h are in the
 * upper four):
 *   sched_commit.c  the commit pipeline: sched_batch_take and sched_batch_done on
 *                   the loop, sched_batch_write on the writer thread, sched_flush
 *   sched_halving.c successive halving's phase transition when a shape's phase-1 jobs
 *                   are over (halving.c), carried by a commit batch
 *   sched_load.c    the scheduler's memory: built from the store (sched_new, a
 *                   restart: sweeps, jobs, configs, bests, device binding) or for
 *                   a submitted sweep (sched_plan_*), and released (sched_destroy)
 *   scheduler.c     workers' messages (hello, ready, heartbeat, result, bye), leases,
 *                   pick and dispatch, crash retries, timers, cancel
 *   sched_status.c  status replies, rates, GPU busy, counters
 *   sched_split.c   tail work: a leased job split for a worker that would idle,
 *                   and where the results of the configs a split moved belong
 *   sched_model.c   the shared model: job index and lookup, job state and its counts
 *                   (halving's open jobs per shape too), finishing a job, the sweep-over
 *                   check, workers (find, add, hold, match), acks, where a moved config
 *                   is now (sched_cfg_owner), freeing jobs and batches; it never
 *                   dispatches
 *
 * Threads: everything runs on the event loop's thread except sched_batch_write,
 * which runs on the writer thread (writer.h) and reads only its batch, never the
 * scheduler.
 */
#ifndef COORD_SCHED_INT_H
#define COORD_SCHED_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "halving.h"
#include "planner.h"
#include "mt.h"
#include "race.h"
#include "scheduler.h"

#include "states.h"

#define RATE_SLOTS 6 /* one sample a second: a ~5 s window */

typedef struct sweep sweep_t;
typedef struct job job_t;

typedef struct {
    uint64_t config_id;
    uint32_t rows;  /* committed rows (batch sizes) of this config */
    bool removed;   /* no longer this job's: moved into a crash-retry job, or moved by a split */
    bool moved;     /* removed by a split: its holder may still send it (accepted, credited to `to`) */
    job_t *to;      /* removed: the job it went to (a split's or a crash retry's) */
    bool twin_rows; /* rows came from the result of the holder of the job a split moved it from */
    bool received;  /* a Result for it was accepted and waits for its commit: a split leaves it */
    uint8_t claims; /* this lease: heartbeats that began claiming it is measured (lease renewal) */
} jcfg_t;

struct job {
    uint64_t id, shape_id, token;
    sweep_t *sw;
    wire_job_state_t state;
    uint32_t attempts;
    sched_worker_t *holder; /* while leased */
    size_t held_idx;        /* index in holder->held */
    size_t idx;             /* index in sw->jobs */
    char *last_worker;      /* current or last holder's id, for the row */
    char *avoid;            /* crash retry: run elsewhere when possible */
    uint64_t lease_expires; /* monotonic ms */
    int64_t lease_expires_wall_ms, finished;
    jcfg_t *cfgs;
    size_t n_cfgs;
    uint64_t rows_needed, rows_done;
    uint32_t phase; /* 1, or 2 for a halving sweep's finalists */
    uint32_t *bs;   /* its batch sizes, sorted, owned; NULL = the sweep's */
    size_t nb;      /* how many bs holds */
    bool dirty;
    bool reclaim; /* held across a Hello or a restart: the holder's first heartbeat must list it */
    /* this lease's progress: the config its holder last said it measures, and since when; a
     * claim renews the lease only while that config is open, for at most its config timeout */
    uint64_t claim_cfg, claim_since;
};

struct sweep {
    uint64_t id;
    char *name;
    wire_sweep_state_t state;
    int64_t created, finished;
    uint32_t *bs; /* batch sizes, sorted */
    size_t nb;
    uint32_t *seen; /* per batch size: stamp of the last result that had it */
    uint32_t stamp;
    char *filter;
    char *backend;      /* NULL = any worker's backend */
    char *device;       /* the measuring identity it is bound to by its first lease (sched_worker_identity);
                         * NULL = not yet */
    char *routing_path; /* the spec's routing file, sent with every job; NULL = uniform */
    char *warm;         /* the spec's warm_start: what its start came from; NULL = none */
    uint32_t max_attempts, chunk;
    Moetune__Measure measure;
    /* two phases (sched_halving.c): strategy "halving", or a racing sweep's decide step
     * (decide > 0, its margin); phase-1 jobs measure with measure1, phase 2 with measure
     * (racing off); per shape, where its phase 2 stands (HV_*) */
    bool halving;
    double decide;
    bool listed;      /* a list of configs (tune --configs): its jobs are never split (side by side) */
    bool halving_due; /* a phase-1 job ended: a shape's phase 2 may be due */
    bool gaps;        /* the ship guard's batch sizes between the keys follow each shape's phase 2 (guard.h) */
    Moetune__Measure measure1;
    uint64_t *hv_shapes;
    uint8_t *hv_state;
    uint32_t *hv_open; /* per shape of hv_shapes: its jobs pending or leased (sched_halving_count) */
    uint32_t pending2; /* its pending phase-2 jobs (sched_halving_count) */
    size_t n_hv;
    uint64_t finalists;      /* rows planned for phase 2 so far (SweepStatus.finalists_planned) */
    uint64_t finalists_done; /* of those, committed by a phase-2 job */
    uint64_t planned, done, failed, pruned;
    double timed_us; /* GPU time in timed kernels over its committed results */
    uint64_t *devs;  /* devices that committed results to it (GPU busy's denominator) */
    size_t n_devs, cap_devs;
    uint32_t jobs_by_state[WIRE_JOB_NSTATES];
    job_t **jobs; /* in id order */
    size_t n_jobs, cap_jobs, hint;
    bool dirty;
    uint64_t rate_t[RATE_SLOTS], rate_done[RATE_SLOTS];
    size_t rate_n;
};

struct sched_worker {
    uint8_t rid[WIRE_MAX_ID];
    size_t rid_len;
    uint64_t rid_hash;
    char *id;          /* worker id, owned (a restart knows it before any Hello) */
    wire_env_t *hello; /* the Hello it last sent, owned; NULL until it says Hello */
    char *identity;    /* its measuring identity from that Hello (sched_worker_identity), owned */
    uint64_t device_id;
    bool alive;
    bool await_hb;    /* said Hello while holding jobs: its next heartbeat settles them */
    uint32_t credits; /* at most WIRE_MAX_HELD */
    bool capped;      /* it has credits but holds WIRE_MAX_HELD jobs: dispatched when one ends */
    uint64_t last_heard, results;
    job_t **held;
    size_t n_held, cap_held;
    uint64_t *acks; /* seqs to acknowledge at the next flush */
    size_t n_acks, cap_acks;
};

/* An accepted Result waiting for its commit. */
typedef struct {
    wire_env_t *env;
    sched_worker_t *w;
    job_t *job;
    size_t cfg; /* index in job->cfgs */
    bool crash; /* a quarantining second crash: bump the crash count too */
} entry_t;

typedef struct {
    uint64_t id;
    krn_shape_t shape;
} shape_entry_t;

/* One accepted Result as the writer sees it: copied scalars and strings, and the
 * measurements of the entry's Envelope (owned by the batch while it is out). The
 * writer fills the new_* counts and device_id; the loop applies them when done. */
typedef struct {
    store_result_t base;
    const Moetune__Result *r;
    bool crash;
    char *strs[5];         /* copies behind base's worker_id, backend, compiler, kernel_hash, versions */
    Moetune__Hello *hello; /* a copy of the Hello of a worker not yet recorded (owned), or NULL */
    uint64_t device_id;    /* what recording it gave */
    uint32_t new_rows, new_failed, new_pruned;
    uint32_t new_replaced;                 /* halving: phase-1 rows its phase-2 rows replaced */
    uint32_t new_by_status[WIRE_N_STATUS]; /* new rows by Moetune__Status value */
    double new_timed_us;
} brow_t;

/* A result in a batch: the loop's entry (taken from the front of s->pending) and its row. */
typedef struct {
    entry_t e;  /* loop side */
    brow_t row; /* writer side */
} bres_t;

/* A changed job and the snapshot of its row the writer stores. */
typedef struct {
    job_t *job;           /* loop side */
    store_job_update_t u; /* writer side; u.worker_id owned */
} bjob_t;

/* Where a halving shape's phase 2 stands. */
enum { HV_WAIT, HV_TAKEN, HV_PLANNED, HV_GAP_TAKEN, HV_GAPPED };

/* A halving phase transition in a batch: the writer runs it in the batch's transaction. */
typedef struct {
    sweep_t *sw;                 /* loop side */
    size_t h;                    /* the shape's index in sw->hv_shapes */
    uint64_t sweep_id, shape_id; /* writer side from here */
    uint32_t *bs;                /* the sweep's batch sizes, a copy (owned) */
    size_t nb;
    uint32_t chunk;
    double decide;     /* the sweep's: 0 for halving */
    bool gaps;         /* phase 2 is over: the batch sizes between the keys (guard.h) */
    halving_step_t st; /* what the writer did */
} bhalving_t;

/* A changed sweep and the snapshot of its state the writer stores. */
typedef struct {
    sweep_t *sw; /* loop side */
    uint64_t id; /* writer side from here */
    const char *state;
    int64_t finished;
} bsweep_t;

struct sched_batch {
    bres_t *res;
    size_t n_res;
    bjob_t *jobs;
    size_t n_jobs;
    bsweep_t *sweeps;
    size_t n_sweeps;
    bhalving_t *hv;
    size_t n_hv;
};

struct sched {
    store_t *db;
    sched_opts_t o;
    sweep_t **sweeps; /* in id order */
    size_t n_sweeps, cap_sweeps;
    job_t **by_id; /* job id -> job, for jobs in memory */
    size_t cap_by_id;
    job_t **dirty_jobs;
    size_t n_dirty, cap_dirty;
    sched_worker_t **workers;
    size_t n_workers, cap_workers;
    entry_t *pending;
    size_t n_pending, cap_pending;
    shape_entry_t *shapes;
    size_t n_shapes, cap_shapes;
    krn_config_t *cfgs; /* config id -> config; block_m 0 = not loaded */
    size_t cap_cfgs;
    Moetune__JobConfig *jc; /* scratch for Job messages */
    Moetune__JobConfig **jcp;
    Moetune__Config *jcfg;
    size_t cap_jc;
    race_t *race; /* best committed medians, sent with each job and each Ack */
    double *best; /* scratch: a Job's best_us, an Ack's JobBest values */
    size_t cap_best;
    Moetune__JobBest *jb; /* scratch for an Ack's JobBests */
    Moetune__JobBest **jbp;
    size_t cap_jb, cap_jbp;
    uint64_t rng;
    uint64_t next_hb, next_rate;
    sched_batch_t *inflight; /* handed to a writer, not yet done */
    sched_counters_t c;
    char plan_rules[PLAN_RULES_LEN]; /* Submitted.rules of the last submit */
    uint64_t *behind;                /* Submitted.queued_behind of the last submit */
    size_t cap_behind;
    uint64_t load_now;     /* monotonic ms of the load, for the leases kept across a restart */
    char storage_err[256]; /* text of the last failed commit; empty once one succeeds */
    char err[512];
};

static inline int64_t sched_wall_ms(void) { return mt_wall_s() * 1000; }

/* The batch sizes a job measures: the sweep's, or a halving finalist's few. */
static inline const uint32_t *sched_job_bs(const job_t *j) { return j->bs ? j->bs : j->sw->bs; }
static inline size_t sched_job_nb(const job_t *j) { return j->bs ? j->nb : j->sw->nb; }
/* A config its job still waits for and no Result of which has come: in the job, without all its
 * rows, none waiting for a commit. */
static inline bool sched_cfg_open(const job_t *j, const jcfg_t *c) {
    return !c->removed && !c->received && c->rows < sched_job_nb(j);
}
static inline size_t sched_job_open_cfgs(const job_t *j) {
    size_t n = 0;
    for (size_t i = 0; i < j->n_cfgs; i++) n += sched_cfg_open(j, &j->cfgs[i]);
    return n;
}
/* The measurement settings a job is sent with: a halving sweep's (or a decide step's) phase 1
 * measures with measure1. */
static inline const Moetune__Measure *sched_job_measure(const job_t *j) {
    return j->sw->halving && j->phase == 1 ? &j->sw->measure1 : &j->sw->measure;
}
/* Whether j's measurement races: its Job and the Acks while it is held carry best_us. */
static inline bool sched_job_races(const job_t *j) { return sched_job_measure(j)->race_margin > 0; }
/* A job whose configs are measured side by side to be compared: a listed sweep's, or phase 2
 * of a halving sweep or a decide step (one batch size's finalists). It is never split across
 * GPUs, and its configs are measured in WIRE_SIDE_BY_SIDE_ROUNDS rounds. */
static inline bool sched_job_side_by_side(const job_t *j) { return j->sw->listed || (j->phase == 2 && j->sw->halving); }
static inline bool sched_job_has_bs(const job_t *j, uint32_t b) {
    for (size_t i = 0; j->bs && i < j->nb; i++)
        if (j->bs[i] == b) return true;
    return !j->bs;
}

/* The best committed median at each of j's batch sizes into out[0, sched_job_nb(j)) (0 = none
 * yet): a Job's best_us and an Ack's JobBest. */
void sched_job_bests(const sched_t *s, const job_t *j, double *out);

/* Sends env to w through the caller's sched_send_fn. */
static inline mt_status_t sched_send_env(sched_t *s, sched_worker_t *w, wire_env_t *env) {
    return s->o.send ? s->o.send(s->o.send_ctx, w->rid, w->rid_len, env) : MT_OK;
}

/* ---- sched_model.c: the shared model (no dispatch, no peer) */

/* Queues j's row for the next batch. */
void sched_job_dirty(sched_t *s, job_t *j);
/* Moves j to state, keeping its sweep's per-state counts. */
void sched_set_job_state(job_t *j, wire_job_state_t state);
/* Takes j out of its holder's held list (no holder: nothing). */
void sched_job_release(job_t *j);
/* Ends j (done, failed, cancelled): releases its holder, queues its row, ends its sweep when nothing is left. */
void sched_job_finish(sched_t *s, job_t *j, wire_job_state_t state);
/* A running sweep with no job pending or leased is over (failed when a job failed). */
void sched_sweep_check(sched_t *s, sweep_t *sw);
/* Makes room to index one more job of sw with this id; nothing else changes. */
mt_status_t sched_job_index_reserve(sched_t *s, sweep_t *sw, uint64_t id);
/* Indexes j by id and in its sweep: all or nothing (MT_NOMEM leaves no entry behind). */
mt_status_t sched_job_index(sched_t *s, job_t *j);
job_t *sched_job_lookup(const sched_t *s, uint64_t id);
/* Notes a device that committed results to sw (GPU busy counts each once). */
mt_status_t sched_sweep_note_device(sweep_t *sw, uint64_t device_id);
/* The job whose config *ci of j is now: j itself, or where a split or a crash retry moved
 * it (following later moves), *ci its index there; NULL when none holds it. */
job_t *sched_cfg_owner(job_t *j, size_t *ci);
void sched_job_free(job_t *j);
void sched_batch_free(sched_batch_t *b);

sched_worker_t *sched_worker_find(sched_t *s, const uint8_t *rid, size_t len);
/* A new worker record, not alive, with its routing id as its id until it says Hello. */
sched_worker_t *sched_worker_add(sched_t *s, const uint8_t *rid, size_t len);
/* Records j in w's held list (the caller sets the lease). */
mt_status_t sched_worker_hold(sched_worker_t *w, job_t *j);
/* Queues seq for w's next Ack. */
void sched_ack_push(sched_worker_t *w, uint64_t seq);
/* The GPU name w's Hello gave ("" before a Hello). */
const char *sched_worker_gpu(const sched_worker_t *w);
/* True when worker w may measure sweep sw (backend, device filter, the measuring identity it is
 * bound to). */
bool sched_worker_matches(const sched_worker_t *w, const sweep_t *sw);

/* Halving's bookkeeping. Loads sw's shapes and whether each one's phase 2 is planned (a
 * halving sweep's load). */
mt_status_t sched_halving_load(sched_t *s, sweep_t *sw);
/* Adds a shape of sw and whether its phase 2 is planned, with the count of its jobs already
 * indexed that are open; a shape already there keeps its slot (marked planned when planned
 * says so). MT_NOMEM leaves sw as it was. */
mt_status_t sched_halving_add_shape(sweep_t *sw, uint64_t shape_id, bool planned);
/* Keeps the count of j's shape's open (pending or leased) jobs and of its sweep's pending
 * phase-2 jobs: j was in state from (a closed state for a job just indexed) and is in
 * j->state now. Called by every state change. */
void sched_halving_count(job_t *j, wire_job_state_t from);
/* True while a shape of sw has no phase 2 planned: the sweep is not over. */
bool sched_halving_waiting(const sweep_t *sw);
void sched_halving_free(bhalving_t *hv, size_t n);

/* ---- sched_split.c: tail work */

/* Tail work for w, which holds nothing while nothing is pending for it: the back half of
 * the open configs of the leased job with the most, moved to a new pending job (stored at
 * once) and returned for w to lease; NULL when nothing splits or on failure (nothing
 * changed). */
job_t *sched_job_split(sched_t *s, sched_worker_t *w);
/* A result with the token of done job j for config_id: NULL to go on (*late set when a split
 * moved the config and its new job still waits for it), or why it is dropped quietly. */
const char *sched_late_result(job_t *j, uint64_t config_id, bool *late);
/* Another open job of j's sweep, shape and phase that holds config_id, else NULL. */
const job_t *sched_config_elsewhere(const job_t *j, uint64_t config_id);

/* ---- sched_status.c */

/* Samples each running sweep's committed count for its rate (once a second). */
void sched_rate_sample(sched_t *s, uint64_t now_ms);

/* ---- scheduler.c: the entry points of a worker's messages, leases and dispatch */

sweep_t *sched_sweep_lookup(sched_t *s, uint64_t id);
/* A measuring identity as one string: the GPU model, backend, compiler, kernel hash and versions
 * (triton: Triton, torch, Python, engine) joined by SCHED_ID_SEP, which no Hello string holds
 * (wire_hello_invalid). Every worker that measures a sweep has its sweep's identity. Returns a
 * new string (caller frees) or NULL on no memory. */
#define SCHED_ID_SEP '\x1f'
char *sched_identity_of(const char *gpu, const char *backend, const char *compiler, const char *kernel_hash,
                        const char *versions);
/* An identity for a log line: its parts joined by " / " into buf. */
const char *sched_identity_text(const char *identity, char *buf, size_t len);
/* Dispatches to every live worker with credits. */
void sched_dispatch_all(sched_t *s, uint64_t now_ms);
/* Dispatches to the workers that had credits while holding WIRE_MAX_HELD jobs and hold fewer now. */
void sched_dispatch_capped(sched_t *s, uint64_t now_ms);

/* ---- sched_load.c: memory from the store and for a submitted sweep */

/* Loads a sweep row into memory: counts, devices and, for a running sweep, its bests
 * and open jobs with their configs. A sched store_sweeps_each callback (ctx: sched_t). */
mt_status_t sched_load_sweep(void *ctx, const store_sweep_row_t *row);
void sched_sweep_free(sweep_t *sw);
/* Loads the running sweep's open jobs that are not in memory yet (halving's phase 2),
 * with their configs and committed rows; a job already complete is finished. */
mt_status_t sched_load_new_jobs(sched_t *s, sweep_t *sw);

/* ---- sched_halving.c: successive halving's phase transition (the logic is halving.c) */

/* For a commit batch: every shape of a running halving sweep whose phase-1 jobs are
 * over and whose phase 2 is not planned, marked taken (*hv owned by the caller, freed
 * with sched_halving_free). MT_NOMEM leaves them waiting. */
mt_status_t sched_halving_take(sched_t *s, bhalving_t **hv, size_t *n);
/* The batch came back: committed, each shape's phase 2 is planned, its pruned rows
 * counted and its jobs loaded and dispatched; otherwise the shapes wait for the next batch. */
void sched_halving_done(sched_t *s, bhalving_t *hv, size_t n, bool committed, uint64_t now_ms);

/* ---- sched_commit.c */

/* Sends every worker's queued Acks. */
void sched_send_acks(sched_t *s);

#endif
