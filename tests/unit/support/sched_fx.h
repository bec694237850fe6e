/*
 * sched_fx.h - the scheduler test fixture shared by test_sched.c and test_writer.c: a
 * scheduler on a temporary database whose sends are captured (decoded) in memory, a small
 * sweep, and helpers that deliver Hello and Result messages with a fake clock.
 */
#ifndef SCHED_FX_H
#define SCHED_FX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scheduler.h"
#include "store.h"
#include "tmpdb.h"
#include "wire.h"

#define MAX_MSGS 1024

typedef struct {
    tmpdb_t tmp;
    const char *path; /* tmp.path */
    store_t *db;
    sched_t *s;
    char rid[MAX_MSGS][32];
    wire_env_t *msg[MAX_MSGS];
    size_t n;
} fx_t;

/* cmocka setup/teardown: a temporary directory and database path; teardown removes them. */
int fx_setup(void **state);
int fx_teardown(void **state);
/* The scheduler's send function: decodes and keeps each message with its routing id in f. */
mt_status_t fx_capture(void *ctx, const uint8_t *rid, size_t len, wire_env_t *env);
/* Opens the store (once) and a scheduler with these periods; sends are captured into f->msg. */
void fx_start(fx_t *f, uint32_t hb, uint32_t lease);
/* Destroys the scheduler, closes the store, drops the captured messages. */
void fx_stop(fx_t *f);
/* fx_stop, then a new empty database in a new directory in place of the old ones. */
void fx_fresh(fx_t *f);
/* Drops the captured messages. */
void fx_clear(fx_t *f);
/* The first column of the first row of sql on a read-only connection (-1 when no row). */
int64_t fx_query_int(fx_t *f, const char *sql);
/* fx_spec fills x with a sweep spec named name: one shape (E=8, N=256, K=256, top-k 2), blocks
 * 16x64x64 and the first n_group_m of group_m {1, 16, 32, 64}, n_warps of num_warps {4, 8} and
 * n_stages of num_stages {2, 3, 4, 5}; the two batch sizes bs, in that order (the planner keeps
 * it); chunk configs a job (0: the planner's default). The arrays live in x: x->spec is valid
 * while x is. */
typedef struct {
    uint32_t bm[1], bn[1], bk[1], gm[4], nw[2], ns[4], bs[2];
    Moetune__Space sp;
    Moetune__Shape sh, *shp;
    Moetune__SweepSpec spec;
    Moetune__Measure measure; /* spec.measure: the defaults, but the decide step off (test_halving tests it) */
} fx_spec_t;
void fx_spec(fx_spec_t *x, const char *name, const uint32_t bs[2], size_t n_group_m, size_t n_warps, size_t n_stages,
             uint32_t chunk);
/* Submits x->spec (asserted MT_OK); the reply in *sub. */
void fx_submit_spec(fx_t *f, fx_spec_t *x, Moetune__Submitted *sub);
/* A small sweep named name: fx_spec's with n_stages configs (stages 2..), batch sizes {2, 1},
 * chunk configs a job, an optional device filter. The submit's code; *id (and *valid, the
 * configs the rules accept, when not NULL) on success, 0 otherwise. No asserts on the answer. */
int fx_submit_try(fx_t *f, const char *name, uint32_t n_stages, uint32_t chunk, const char *filter, uint64_t *id,
                  uint32_t *valid);
/* fx_submit_try's sweep named "small", asserted: all n_stages configs valid; its id. */
uint64_t fx_submit(fx_t *f, uint32_t n_stages, uint32_t chunk, const char *filter);
/* Packs env and unpacks it again (both asserted), as the coordinator receives it; the copy
 * is the caller's to wire_free. */
wire_env_t *fx_roundtrip(wire_env_t *env);
/* Packs and unpacks a Hello from worker id on GPU gpu, hands it to sched_on_hello and returns
 * its code; *left says whether the scheduler left the message unconsumed (freed here). */
int fx_hello_send(fx_t *f, const char *id, const char *gpu, uint64_t now, bool *left);
/* Delivers a Hello from id with GPU name gpu (asserted: consumed, MT_OK); the scheduler's worker. */
sched_worker_t *fx_hello(fx_t *f, const char *id, const char *gpu, uint64_t now);
/* Delivers a Result of the n measurements m (after sched_on_heard when heard); sched_on_result's code. */
int fx_result_of(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
                 Moetune__Measurement **m, size_t n, uint64_t now, bool heard);
/* Delivers a Result for batch sizes {1, 2} with one status (after sched_on_heard when heard);
 * sched_on_result's code. */
int fx_result(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
              Moetune__Status status, uint64_t now, bool heard);
/* fx_result with medians us and us + 1 (fx_result's are 10 and 11). */
int fx_result_us(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
                 Moetune__Status status, double us, uint64_t now, bool heard);
/* The last Job captured for rid, or NULL. */
const Moetune__Job *fx_last_job(fx_t *f, const char *rid);
/* Captured messages of one body to rid. */
size_t fx_count(fx_t *f, const char *rid, wire_body_t body);
/* One credit from the worker with routing id rid at now: the Job it was sent (asserted: one more
 * Job to rid than before). */
const Moetune__Job *fx_take(fx_t *f, const char *rid, uint64_t now);
/* A worker's first lease, the opening most scheduler tests share. */
typedef struct {
    sched_worker_t *w;
    const Moetune__Job *j;     /* the Job as captured: valid until fx_clear */
    uint64_t job, tok, cfg[8]; /* its id, lease token and first 8 config ids (0 past its end) */
} fx_lease_t;
/* Worker id on GPU gpu says hello at now (fx_hello) and takes one job (fx_take): that lease. */
fx_lease_t fx_lease(fx_t *f, const char *id, const char *gpu, uint64_t now);
/* Takes the scheduler's next batch and commits it on f->db at now (each step asserted MT_OK);
 * the number of results it carried. */
size_t fx_commit_batch(fx_t *f, uint64_t now);
/* Whether an Ack captured for rid lists seq. */
bool fx_acked(fx_t *f, const char *rid, uint64_t seq);

#endif
