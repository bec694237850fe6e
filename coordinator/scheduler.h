/*
 * scheduler.h - the coordinator's in-memory model of sweeps, jobs and workers:
 * leases, credits, heartbeats, re-queues, attempts, crash quarantine, result
 * validation and the batched commit.
 *
 * The scheduler never touches a socket: it sends through the sched_send_fn it
 * is given, and every entry point takes the monotonic time in milliseconds, so
 * tests drive it with their own clock. State is loaded from the store at
 * sched_new() (leased jobs stay leased to their recorded holder for one lease
 * period) and written back in batched transactions by sched_flush() or a
 * writer thread (sched_batch_take/write/done).
 */
#ifndef COORD_SCHED_H
#define COORD_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "store.h"
#include "wire.h"

typedef struct sched sched_t;
typedef struct sched_worker sched_worker_t;
typedef struct sched_batch sched_batch_t;

/* How long the loop's connection waits on a locked database before giving up. */
#define SCHED_DB_BUSY_MS 200

/* Results in one commit batch at most: bounds a transaction (about 18 rows a result). */
#define SCHED_BATCH_MAX 256

/* Sends env to the worker whose routing id is rid. env is only read. Returns MT_OK or
 * the send's MT_* error. */
typedef mt_status_t (*sched_send_fn)(void *ctx, const uint8_t *rid, size_t rid_len, wire_env_t *env);

typedef struct {
    uint32_t heartbeat_ms; /* 0 = WIRE_HEARTBEAT_DEFAULT_MS */
    uint32_t lease_ms;     /* 0 = WIRE_LEASE_DEFAULT_MS */
    sched_send_fn send;
    void *send_ctx;
} sched_opts_t;

typedef struct {
    uint64_t bad_messages, rejected_results, results_committed, requeued_jobs, dead_workers, commit_failures;
    uint64_t committed_by_status[WIRE_N_STATUS]; /* results_committed by Moetune__Status value */
} sched_counters_t;

/* A StatusReply and the arrays behind it; release with sched_status_release(). */
typedef struct {
    Moetune__StatusReply reply;
    Moetune__Counters counters;
    Moetune__SweepStatus *sweeps, **sweep_ptrs;
    Moetune__WorkerInfo *workers, **worker_ptrs;
} sched_status_t;

/* Creates a scheduler over db (borrowed; must outlive it; its busy timeout is
 * set to SCHED_DB_BUSY_MS): loads every sweep and the open jobs of running
 * sweeps. A leased job stays leased to its recorded holder (jobs.worker_id,
 * jobs.lease_token) until now_ms + lease_ms; the holder is known as a worker that
 * is not alive until it says Hello. Leased jobs of finished sweeps become pending.
 * Returns NULL with a reason in err on failure. */
sched_t *sched_new(store_t *db, const sched_opts_t *opts, uint64_t now_ms, char *err, size_t errlen);

/* Releases the scheduler and every buffered result (uncommitted ones are lost:
 * call sched_flush first). NULL-safe, nulls *s. */
void sched_destroy(sched_t **s);

/* The live worker with routing id rid, or NULL (unknown or dead). */
sched_worker_t *sched_worker(sched_t *s, const uint8_t *rid, size_t rid_len);

/* Registers (or revives) the worker of a Hello and answers Welcome. Takes
 * ownership of *env (nulls it). A known id gets its credits reset and keeps the
 * jobs it holds; its next heartbeat settles them (sched_on_heartbeat). Leases of
 * sweeps bound to another measuring identity than the Hello's go back (its GPU,
 * toolkit or kernel changed). Refused with Error{WIRE_E_REFUSED} and MT_INVAL (env
 * left to the caller) when its worker id is not rid, or when a live worker of
 * another process (host, pid) holds that id. */
mt_status_t sched_on_hello(sched_t *s, const uint8_t *rid, size_t rid_len, wire_env_t **env, uint64_t now_ms);

/* Any message from w: it is alive. A lease of w's already expired returns to pending
 * with an attempt. Leases are not extended by being heard, only by progress: an
 * accepted Result, or sched_on_progress. */
void sched_on_heard(sched_t *s, sched_worker_t *w, uint64_t now_ms);

/* A Heartbeat's claim that w measures config cfg_id of job job_id now (0: none). It
 * extends w's leases by lease_ms when it is progress: the job is leased to w and still
 * waits for that config, and the config is new since w's last claim (once per config,
 * once per round for a side-by-side job) or the same one within the job's config
 * timeout. A worker that only heartbeats loses its leases after lease_ms. */
void sched_on_progress(sched_t *s, sched_worker_t *w, uint64_t job_id, uint64_t cfg_id, uint64_t now_ms);

/* A Heartbeat from w listing the n job ids it holds. The first one after a Hello
 * sends back to pending, without an attempt, every job w held at that Hello (or
 * since a restart) that it does not list. Later heartbeats change nothing. */
void sched_on_heartbeat(sched_t *s, sched_worker_t *w, const uint64_t *job_ids, size_t n, uint64_t now_ms);

/* Ready{credits}: adds credits (w keeps WIRE_MAX_HELD at most) and dispatches what w may
 * take: never more than WIRE_MAX_HELD jobs held at once; a credit over that waits until
 * one of its jobs ends. */
void sched_on_ready(sched_t *s, sched_worker_t *w, uint32_t credits, uint64_t now_ms);

/* A Result from w. It is accepted only when its job is leased, the token is the
 * job's, w holds the lease and it has not expired; anything else is rejected.
 * Accepted results are buffered (ownership of *env taken, *env
 * nulled) and acknowledged after sched_flush commits them; a rejected one is
 * counted and its seq acknowledged at the next flush (returns MT_INVAL). A first
 * crash of a config moves it into a new job at once (returns MT_OK).
 * A config a split moved out of the job (a worker with nothing to do took the back
 * half of the job's open configs; the holder, told, may have started one) is accepted from the holder,
 * also after the holder's own job is done while the config's new job still waits for
 * it, and its new rows count for the job that holds the config now. Acknowledged and
 * dropped without counting as rejected (returns MT_OK, *env left to the caller): such
 * a result once that config's rows are in; a result for a config of a done job whose
 * rows came from the holder of the job it was moved from; and, after a restart (the
 * database is the truth), a result for a config another open job of the sweep holds. */
mt_status_t sched_on_result(sched_t *s, sched_worker_t *w, wire_env_t **env, uint64_t now_ms);

/* A message from w that arrived but did not decode or validate (rej from wire_recv).
 * An invalid Result for a lease w holds (job, token) is rejected and its job goes
 * back to pending with an attempt (failed at max_attempts); one for a lease w does not
 * hold is only rejected. Anything else undecodable from a worker holding leases sends
 * them all back with an attempt: no lease waits on a message that was lost. Results
 * that pass the wire but cannot be stored (a config not in the job, wrong batch sizes)
 * from the holder are handled the same way by sched_on_result. */
void sched_on_bad(sched_t *s, sched_worker_t *w, const wire_reject_t *rej, uint64_t now_ms);

/* Bye: w's leased jobs return to pending without an attempt; w is gone. */
void sched_on_bye(sched_t *s, sched_worker_t *w, uint64_t now_ms);

/* Timers: heartbeats to live workers every period, dead workers (3 silent
 * periods), expired leases, the rate window. Cheap; call often. */
void sched_tick(sched_t *s, uint64_t now_ms);

/* Commits buffered results and state changes synchronously on the scheduler's
 * own store: one transaction per batch (see sched_batch_take) until nothing is
 * left to write, then sends the Acks. On a failed commit everything stays buffered,
 * nothing is acked, commit_failures counts it and MT_BUSY/MT_IO is returned.
 * MT_BUSY too while a batch taken with sched_batch_take is out. */
mt_status_t sched_flush(sched_t *s, uint64_t now_ms);

/* The asynchronous commit, for a writer thread (writer.h). sched_batch_take
 * moves up to SCHED_BATCH_MAX buffered results plus a snapshot of every changed
 * job and sweep into *batch; MT_OK, MT_AGAIN when there is nothing to write,
 * MT_BUSY while the previous batch is not done. Pending Acks of rejected results
 * go out at once. One batch is out at a time. */
mt_status_t sched_batch_take(sched_t *s, sched_batch_t **batch);

/* Writes a batch into db (inside the caller's transaction). Touches only the
 * batch, never the scheduler, so it may run on another thread while the
 * scheduler goes on. A writer_fn. */
mt_status_t sched_batch_write(store_t *db, void *batch);

/* Number of results in a batch. */
size_t sched_batch_results(const sched_batch_t *batch);

/* Takes a batch back. rc MT_OK (committed): the counts are applied, finished
 * jobs and sweeps are marked for the next batch, the results' Acks are sent.
 * Otherwise the results go back in front of the buffer unacknowledged, the jobs
 * and sweeps stay marked, commit_failures counts it and why is logged. Frees
 * the batch. */
void sched_batch_done(sched_t *s, sched_batch_t *batch, int rc, const char *why, uint64_t now_ms);

/* Results waiting for a commit (buffered or in a batch that is out). */
size_t sched_pending(const sched_t *s);

/* A submit in steps, so that planning and storing never block the event loop:
 *   sched_plan_new    (loop)           copies spec, defaults filled, into a plan job;
 *   sched_plan_build  (writer thread)  validates and expands it, outside any transaction
 *                                      (a writer_submit_prep prep);
 *   sched_plan_write  (writer thread)  stores it inside the writer's transaction;
 *   sched_plan_done   (loop)           builds the new sweep in memory from the plan (no
 *                                      read back) and starts dispatching it.
 * The build and write steps touch only the plan job, never the scheduler. */
typedef struct sched_plan sched_plan_t;

/* A plan job for spec (NULL is refused later, by the build). MT_OK with *out, or
 * MT_NOMEM with a reason in err. Release with sched_plan_free (or sched_plan_done). */
mt_status_t sched_plan_new(const Moetune__SweepSpec *spec, sched_plan_t **out, char *err, size_t errlen);
/* (loop) The device plan is planned for, and the database (db_path, read-only; NULL: none) its
 * warm start reads: the picks of earlier sweeps on that GPU model go first (planner.h). The
 * device: of the live workers that may measure its spec, the one of the most shared memory per
 * block, as the sweep binds to the model of its first lease and a smaller card's rule would drop
 * configs a larger one runs (a smaller card's worker judges those itself before compiling). None
 * connected: no device, Triton's tile rules alone, and no warm start. */
void sched_plan_device(const sched_t *s, sched_plan_t *plan, const char *db_path);

/* Validates and expands the plan job's spec (a writer_fn; db unused). MT_INVAL for a bad
 * spec, the reason kept in the job for sched_plan_done. */
mt_status_t sched_plan_build(store_t *db, void *plan);

/* Stores the built plan in db inside the caller's transaction (a writer_fn). */
mt_status_t sched_plan_write(store_t *db, void *plan);

/* Takes a plan job back and frees it (nulls *plan). rc is the job's outcome (MT_OK when
 * committed; why the writer's reason otherwise). On success the sweep joins the scheduler
 * and out is filled (queued_behind valid until the next submit). Otherwise returns the error with a one-line reason in err: MT_INVAL
 * for a bad spec, MT_IO/MT_BUSY for storage (nothing stored), or MT_NOMEM for memory
 * (the stored sweep is marked failed: never left running). */
mt_status_t sched_plan_done(sched_t *s, sched_plan_t **plan, int rc, const char *why, Moetune__Submitted *out,
                            uint64_t now_ms, char *err, size_t errlen);

/* Releases a plan job; NULL-safe, nulls *plan. */
void sched_plan_free(sched_plan_t **plan);

/* Cancels a sweep's pending and leased jobs. MT_NOTFOUND for an unknown sweep. */
mt_status_t sched_cancel(sched_t *s, uint64_t sweep_id, uint32_t *jobs_cancelled, uint64_t now_ms);

/* Fills out for one sweep (or all with sweep_id 0). Strings in it point into the
 * scheduler: send before the next call. MT_NOTFOUND for an unknown sweep. */
mt_status_t sched_status(sched_t *s, uint64_t sweep_id, uint64_t now_ms, sched_status_t *out);
void sched_status_release(sched_status_t *st);

/* Counters; bad_messages is counted by the caller through sched_count_bad(). */
const sched_counters_t *sched_counters(const sched_t *s);

/* The text of the last failed commit, "" when the last commit succeeded. */
const char *sched_storage_error(const sched_t *s);
void sched_count_bad(sched_t *s);

/* The state name of a job ("pending", ...) or NULL when the job is not in memory;
 * attempts through *attempts when not NULL. For tests and logs. */
const char *sched_job_state(const sched_t *s, uint64_t job_id, uint32_t *attempts);

#endif
