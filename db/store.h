/*
 * store.h - the coordinator's side of the SQLite store: open and migrate, every
 * write statement, and the reads the coordinator needs at start and on demand.
 *
 * The coordinator is the only writer. Every statement is prepared once when the
 * store opens (a table of SQL in store.c) and reused with bound parameters.
 * Functions return MT_OK, MT_BUSY (database locked), MT_NOTFOUND, or MT_IO with
 * sqlite3_errmsg text available from store_errmsg(). Strings passed in are only
 * read; strings handed to callbacks live until the callback returns.
 */
#ifndef DB_STORE_H
#define DB_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moetune.pb-c.h"
#include "mt.h"
#include "space.h"
#include "states.h"

#define STORE_SCHEMA_VERSION 6

typedef struct store store_t;

/* One results row; strings may be NULL. */
typedef struct {
    uint64_t sweep_id, shape_id, config_id, job_id, device_id;
    uint32_t batch_size;
    int status; /* Moetune__Status value */
    double median_us, min_us, mean_us, stddev_us;
    uint32_t samples, registers, spills;
    const char *detail, *worker_id, *backend, *compiler, *kernel_hash;
    const char *versions;  /* the measuring worker's Hello.versions; NULL or "" stores NULL */
    double up_us, down_us; /* GEMM1 / GEMM2 alone, medians; 0 = not measured */
    double timed_us;       /* GPU time in the measurement's timed kernels */
    int64_t created;       /* wall-clock seconds */
    uint32_t phase;        /* the measuring job's phase (halving); 0 reads as 1 */
} store_result_t;

/* The mutable part of a jobs row. */
typedef struct {
    uint64_t id;
    const char *state; /* a job state's name (states.h) */
    uint32_t attempts;
    const char *worker_id; /* NULL keeps SQL NULL */
    uint64_t lease_token;
    int64_t lease_expires_ms; /* wall-clock ms, 0 = NULL */
    int64_t finished;         /* wall-clock seconds, 0 = NULL */
} store_job_update_t;

/* A jobs row as loaded at start. */
typedef struct {
    uint64_t id, sweep_id, shape_id, lease_token;
    const char *state, *worker_id, *avoid_worker;
    uint32_t attempts;
    uint32_t phase;          /* 1, or 2 for a halving sweep's finalists */
    const char *batch_sizes; /* its batch sizes ("1,16,256"); NULL = the sweep's */
} store_job_row_t;

/* A sweeps row as loaded at start; spec points at the packed SweepSpec. */
typedef struct {
    uint64_t id;
    const char *name, *state;
    const void *spec;
    size_t spec_len;
    uint64_t results_planned;
    int64_t created;
} store_sweep_row_t;

/* Opens (creating when missing) the database at path, applies the schema when
 * user_version is 0 or the upgrades (ALTER TABLE, one transaction) from an older version, and sets WAL, synchronous=NORMAL, busy_timeout and
 * foreign_keys. On success *out is a new store the caller closes with
 * store_close(). On failure returns MT_IO (MT_BUSY when the database stays locked,
 * MT_NOMEM, or MT_INVAL for a database of a newer schema, a non-empty database of another
 * program (refused before anything is written to it) or a path that is not a regular
 * file) with a one-line reason in err. */
mt_status_t store_open(const char *path, store_t **out, char *err, size_t errlen);

/* Finalizes every statement and closes the database; NULL-safe, nulls *s. */
void store_close(store_t **s);

/* The last error text of this store (sqlite3_errmsg or our own). */
const char *store_errmsg(const store_t *s);

/* The embedded schema text, identical to db/schema.sql. */
const char *store_schema_sql(void);

/* PRAGMA user_version of the open database. */
mt_status_t store_user_version(store_t *s, int *version);

/* Transactions. store_begin starts an IMMEDIATE transaction; store_rollback is
 * best effort and always leaves the connection outside a transaction. */
mt_status_t store_begin(store_t *s);
mt_status_t store_commit(store_t *s);
void store_rollback(store_t *s);

/* How long a statement waits for a lock held by another connection (ms). */
void store_set_busy_ms(store_t *s, int ms);

/* Turns every 'leased' job of a sweep that is not running into 'pending' (the
 * leases of running sweeps survive a restart); *n (may be NULL) gets how many. */
mt_status_t store_requeue_leased(store_t *s, uint32_t *n);

/* ---- devices and workers */
/* Inserts or refreshes the device row for gpu (keyed by uuid, or by name when
 * the uuid is empty); *id gets its row id. */
mt_status_t store_device_upsert(store_t *s, const Moetune__Gpu *gpu, uint64_t *id);
/* Records a worker's Hello: its device (store_device_upsert) and its workers row;
 * *device_id gets the device's row id. */
mt_status_t store_hello(store_t *s, const Moetune__Hello *hello, int64_t now_s, uint64_t *device_id);

/* ---- planning */
mt_status_t store_sweep_insert(store_t *s, const char *name, const void *spec, size_t spec_len, int64_t created,
                               uint64_t *id);
mt_status_t store_sweep_set_planned(store_t *s, uint64_t sweep_id, uint64_t results_planned);
/* state is one of the sweeps.state values; finished 0 stores NULL. */
mt_status_t store_sweep_set_state(store_t *s, uint64_t sweep_id, const char *state, int64_t finished);
mt_status_t store_shape_upsert(store_t *s, const krn_shape_t *shape, uint64_t *id);
mt_status_t store_config_upsert(store_t *s, const krn_config_t *cfg, uint64_t *id);
mt_status_t store_rejected_insert(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                                  const char *reason);
/* New pending job; avoid_worker may be NULL. */
/* Records a routing file a sweep is planned on (kept once per sha256). */
mt_status_t store_routing_insert(store_t *s, const char *sha256, const char *source, uint32_t tokens, uint32_t topk,
                                 int64_t now);

mt_status_t store_job_insert(store_t *s, uint64_t sweep_id, uint64_t shape_id, const char *avoid_worker,
                             int64_t created, uint64_t *id);
/* A new pending job of a phase (halving: 1 or 2) measuring only batch_sizes
 * ("1,16,256"; NULL = the sweep's). store_job_insert is phase 1, all batch sizes. */
mt_status_t store_job_insert_phase(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint32_t phase,
                                   const char *batch_sizes, const char *avoid_worker, int64_t created, uint64_t *id);
mt_status_t store_job_config_insert(store_t *s, uint64_t job_id, uint64_t config_id);
mt_status_t store_job_config_delete(store_t *s, uint64_t job_id, uint64_t config_id);
mt_status_t store_job_update(store_t *s, const store_job_update_t *u);

/* ---- results and crashes */
/* What store_result_put did with a row. */
enum { STORE_ROW_KEPT, STORE_ROW_NEW, STORE_ROW_REPLACED };
/* Inserts r; when its key exists, replaces it only when r->phase is later than the
 * stored row's (halving's finalists), so a resent result is written once and a phase-1
 * row never overwrites a phase-2 one. *outcome says which. */
mt_status_t store_result_put(store_t *s, const store_result_t *r, int *outcome);
/* Halving: turns one ok row of phase into 'pruned' with detail; *changed when it did. */
mt_status_t store_result_prune(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                               uint32_t batch_size, uint32_t phase, const char *detail, bool *changed);
/* Adds one crash of (sweep, shape, config) by worker; *count gets the new total. */
mt_status_t store_crash_bump(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                             const char *worker_id, uint32_t *count);
/* Current crash count (0 when none). */
mt_status_t store_crash_count(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id, uint32_t *count);

/* ---- reads for start-up */
/* The callbacks of the walks below (store_*_each) return an MT_* status: one other than
 * MT_OK stops the walk and is what the walk returns. */
typedef mt_status_t (*store_sweep_cb)(void *ctx, const store_sweep_row_t *row);
typedef mt_status_t (*store_job_cb)(void *ctx, const store_job_row_t *row);
typedef mt_status_t (*store_id_cb)(void *ctx, uint64_t id);
/* Calls cb for every sweep in id order. */
mt_status_t store_sweeps_each(store_t *s, store_sweep_cb cb, void *ctx);
/* Calls cb for every pending or leased job of sweep_id in id order. */
mt_status_t store_jobs_open_each(store_t *s, uint64_t sweep_id, store_job_cb cb, void *ctx);
/* Calls cb for every config id of job_id in id order. */
mt_status_t store_job_configs_each(store_t *s, uint64_t job_id, store_id_cb cb, void *ctx);
mt_status_t store_shape_get(store_t *s, uint64_t id, krn_shape_t *shape);
mt_status_t store_config_get(store_t *s, uint64_t id, krn_config_t *cfg);
/* Committed rows of (sweep, shape, config). */
mt_status_t store_result_count(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id, uint32_t *n);
/* Committed rows of (sweep, shape, config) measured in phase or later, at batch_size (0: at any). */
mt_status_t store_result_count_from(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                                    uint32_t phase, uint32_t batch_size, uint32_t *n);
/* Halving: calls fn for every ok row of (sweep, shape) measured in phase, by config and batch size,
 * with the device (devices.id) that measured it (0: none stored) and its fastest sample (0: none). */
typedef mt_status_t (*store_phase_row_fn)(void *ctx, uint64_t config_id, uint32_t batch_size, double median_us,
                                          uint64_t device_id, double min_us);
mt_status_t store_phase_rows_each(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint32_t phase,
                                  store_phase_row_fn fn, void *ctx);
/* Halving: per shape of a sweep's jobs, the latest phase planned for it, in shape order. */
typedef mt_status_t (*store_shape_phase_fn)(void *ctx, uint64_t shape_id, uint32_t max_phase);
mt_status_t store_sweep_phases_each(store_t *s, uint64_t sweep_id, store_shape_phase_fn fn, void *ctx);
/* What a sweep's committed rows add up to, in one pass over them. */
typedef struct {
    uint64_t done;   /* rows */
    uint64_t failed; /* a status other than ok and pruned */
    uint64_t pruned; /* racing's */
    double timed_us; /* GPU time in their timed kernels */
    uint64_t phase2; /* halving: rows measured by a phase-2 job (finalists re-measured) */
} store_sweep_counts_t;
mt_status_t store_sweep_result_counts(store_t *s, uint64_t sweep_id, store_sweep_counts_t *out);
/* Halving: the (config, batch size) rows of a sweep's phase-2 jobs, the finalists planned
 * so far; nb is the sweep's batch-size count (a job without its own list measures all). */
mt_status_t store_sweep_finalists(store_t *s, uint64_t sweep_id, uint32_t nb, uint64_t *n);
/* Racing: per (shape, batch size) of a sweep, the lowest committed ok median. */
typedef mt_status_t (*store_best_fn)(void *ctx, uint64_t shape_id, uint32_t batch_size, double median_us);
mt_status_t store_sweep_bests_each(store_t *s, uint64_t sweep_id, store_best_fn fn, void *ctx);
/* Calls cb for every device that committed results to the sweep (GPU busy's GPUs). */
mt_status_t store_sweep_devices_each(store_t *s, uint64_t sweep_id, store_id_cb cb, void *ctx);
/* The measuring identity a sweep is measured by: the GPU model name (devices.name),
 * backend, compiler, kernel hash and versions joined by char(31), of its first stored
 * result, else of the first of its jobs' holders known to the store. MT_NOTFOUND when
 * none has been leased yet. */
mt_status_t store_sweep_device(store_t *s, uint64_t sweep_id, char *name, size_t len);
/* Jobs of a sweep per state, indexed by wire_job_state_t (states.h). */
mt_status_t store_job_state_counts(store_t *s, uint64_t sweep_id, uint32_t counts[WIRE_JOB_NSTATES]);

/* ---- the ship guard (coordinator/guard.h) */

/* One guard row: a config the engine would run at batch_size without the sweep's file. */
typedef struct {
    uint64_t sweep_id, shape_id, config_id;
    uint32_t batch_size;
    const char *role;   /* "default", "incumbent"; between keys: "nearest", "other" */
    const char *engine; /* "sglang" or "vllm" */
    bool searched;      /* in the sweep's searched space for the shape */
    const char *source; /* the rule, or the incumbent file and key */
} store_guard_row_t;
/* Stores (or replaces) one guard row. */
mt_status_t store_guard_put(store_t *s, const store_guard_row_t *g);
/* A copy of the sweep's packed SweepSpec into *spec (caller frees), *len bytes; MT_NOTFOUND. */
mt_status_t store_sweep_spec_get(store_t *s, uint64_t sweep_id, void **spec, size_t *len);
/* Adds add to the sweep's results_planned (rows the guard plans beyond the searched space). */
mt_status_t store_sweep_add_planned(store_t *s, uint64_t sweep_id, uint64_t add);
/* Whether config_id is in a first-pass job of (sweep, shape) or has a first-pass row there. */
mt_status_t store_config_searched(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id, bool *searched);
/* The ship guard's rounds between the keys: every ok phase-2 row of (sweep, shape) (the side-by-side
 * measurements) with its deviation, in no particular order. */
typedef mt_status_t (*store_side_row_fn)(void *ctx, uint64_t config_id, uint32_t batch_size, double median_us,
                                         double stddev_us);
mt_status_t store_side_rows_each(store_t *s, uint64_t sweep_id, uint64_t shape_id, store_side_row_fn fn, void *ctx);
/* Every guard row of (sweep, shape): its batch size, config, role (text valid during the call) and
 * searched flag. */
typedef mt_status_t (*store_guard_row_fn)(void *ctx, uint32_t batch_size, uint64_t config_id, const char *role,
                                          bool searched);
mt_status_t store_guard_rows_each(store_t *s, uint64_t sweep_id, uint64_t shape_id, store_guard_row_fn fn, void *ctx);

#endif
