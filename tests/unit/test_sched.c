/* test_sched.c - the scheduler driven through its API with a fake clock and a
 * capturing send function: credits, lease expiry and silent workers, attempts,
 * token checks, crash retry and quarantine, Bye, restart, device filter, and the
 * daemon loop over real loopback sockets with hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <zmq.h>

#include "convert.h"
#include "coord.h"
#include "mt.h"
#include "planner.h"
#include "scheduler.h"
#include "store.h"
#include "wire.h"
#include "sched_fx.h"

static bool g_skip_heard; /* deliver the next Result without sched_on_heard first */

/* Sends a Result for every batch size {1, 2} with one status. Returns sched_on_result's code. */
static int result(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
                  Moetune__Status status, uint64_t now) {
    bool heard = !g_skip_heard;
    g_skip_heard = false;
    return fx_result(f, w, job, token, seq, config, status, now, heard);
}

static void heartbeat(fx_t *f, sched_worker_t *w, const uint64_t *ids, size_t n, uint64_t now) {
    sched_on_heard(f->s, w, now);
    sched_on_heartbeat(f->s, w, ids, n, now);
}

/* Restarts the scheduler on the same database with a 1 s heartbeat and a 30 s lease (when the
 * armed allocation failure failed the load: once more, the hook spent). */
static void restart(fx_t *f) {
    char err[256];
    sched_opts_t o = {.heartbeat_ms = 1000, .lease_ms = 30000, .send = fx_capture, .send_ctx = f};
    sched_destroy(&f->s);
    f->s = sched_new(f->db, &o, 0, err, sizeof err);
    if (!f->s && mt_alloc_failed()) f->s = sched_new(f->db, &o, 0, err, sizeof err);
    assert_non_null(f->s);
}

/* job's lease still holds at tick alive and has lapsed at tick dead: pending again, one attempt. */
static void lapses(fx_t *f, uint64_t job, uint64_t alive, uint64_t dead) {
    sched_tick(f->s, alive);
    assert_string_equal(sched_job_state(f->s, job, NULL), "leased");
    sched_tick(f->s, dead);
    uint32_t attempts = 9;
    assert_string_equal(sched_job_state(f->s, job, &attempts), "pending");
    assert_int_equal(attempts, 1);
}

/* SweepSpec.warm_start is the coordinator's to write: a client's own text is neither stored nor
 * shown by status (a sweep without a warm start has none). */
static void test_warm_start_not_forged(void **state) {
    fx_t *f = *state;
    fx_spec_t x;
    Moetune__Submitted sub;
    sched_status_t st;
    fx_start(f, 1000, 30000);
    fx_spec(&x, "forged", (const uint32_t[]){2, 1}, 1, 1, 2, 1);
    x.spec.warm_start = "forged: 3 known picks first";
    fx_submit_spec(f, &x, &sub);
    assert_int_equal(fx_query_int(f, "SELECT instr(spec, CAST('forged:' AS BLOB)) FROM sweeps"), 0);
    assert_int_equal(sched_status(f->s, sub.sweep_id, 10, &st), MT_OK);
    assert_true(!st.reply.sweeps[0]->warm_start || !*st.reply.sweeps[0]->warm_start);
    sched_status_release(&st);
}

static void test_credits(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 3, 1, NULL);
    sched_worker_t *a = fx_hello(f, "A", "NVIDIA H100", 0);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_WELCOME), 1);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 0);
    sched_on_ready(f->s, a, 0, 1);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 0);
    sched_on_ready(f->s, a, 1, 1);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 1);
    uint64_t first = fx_last_job(f, "A")->job_id;
    sched_on_ready(f->s, a, 1, 2);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 2);
    assert_true(fx_last_job(f, "A")->job_id > first);
    /* a worker holds WIRE_MAX_HELD jobs at most, whatever credits it sends: the rest wait */
    sched_on_ready(f->s, a, 1000, 3);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 2);
    const Moetune__Job *j = fx_last_job(f, "A");
    assert_int_equal(j->n_configs, 1);
    assert_int_equal(j->n_batch_sizes, 2);
    assert_int_equal(j->measure->warmup, 2);
    assert_int_not_equal(j->lease_token, 0);
    /* a late submit waits too; once a job A holds is done, its kept credit takes the next */
    fx_submit(f, 2, 1, NULL);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 2);
    sched_status_t st;
    assert_int_equal(sched_status(f->s, 0, 10, &st), MT_OK);
    assert_int_equal(st.reply.n_sweeps, 2);
    assert_int_equal(st.reply.sweeps[0]->jobs_leased, 2);
    assert_int_equal(st.reply.n_workers, 1);
    assert_string_equal(st.reply.workers[0]->state, "busy");
    assert_int_equal(st.reply.workers[0]->jobs_leased, 2);
    sched_status_release(&st);
    const Moetune__Job *j1 = NULL;
    for (size_t i = 0; i < f->n && !j1; i++)
        if (f->msg[i]->body_case == MOETUNE__ENVELOPE__BODY_JOB && f->msg[i]->job->job_id == first) j1 = f->msg[i]->job;
    assert_non_null(j1);
    assert_int_equal(result(f, a, first, j1->lease_token, 1, j1->configs[0]->config_id, MOETUNE__STATUS__STATUS_OK, 4),
                     MT_OK);
    assert_int_equal(sched_flush(f->s, 5), MT_OK);
    assert_string_equal(sched_job_state(f->s, first, NULL), "done");
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 3);
    sched_on_ready(f->s, a, 1, 6); /* its credits stay at WIRE_MAX_HELD: nothing more now */
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 3);
    assert_int_equal(sched_status(f->s, 99, 10, &st), MT_NOTFOUND);
}

static void test_tokens_and_completion(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 2, 2, NULL);
    fx_lease_t a = fx_lease(f, "A", "gpu", 0);
    assert_int_equal(result(f, a.w, a.job, a.tok + 1, 1, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 1), MT_INVAL);
    assert_int_equal(result(f, a.w, a.job + 100, a.tok, 2, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 1), MT_INVAL);
    assert_int_equal(result(f, a.w, a.job, a.tok, 3, 9999, MOETUNE__STATUS__STATUS_OK, 1), MT_INVAL);
    assert_int_equal(sched_pending(f->s), 0);
    /* a config not in the job, from the holder: the job goes back with an attempt, leased anew */
    uint32_t att = 0;
    assert_string_equal(sched_job_state(f->s, a.job, &att), "pending");
    assert_int_equal(att, 1);
    sched_on_ready(f->s, a.w, 1, 1);
    assert_int_equal(fx_last_job(f, "A")->job_id, a.job);
    a.tok = fx_last_job(f, "A")->lease_token;
    assert_int_equal(result(f, a.w, a.job, a.tok, 4, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 1), MT_OK);
    assert_int_equal(result(f, a.w, a.job, a.tok, 5, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 1), MT_OK); /* resend */
    assert_int_equal(sched_pending(f->s), 2);
    assert_false(fx_acked(f, "A", 4));
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
    for (uint64_t seq = 1; seq <= 5; seq++) assert_true(fx_acked(f, "A", seq));
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 2);
    assert_int_equal(sched_counters(f->s)->rejected_results, 3);
    assert_int_equal(sched_counters(f->s)->results_committed, 2);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "leased");
    assert_int_equal(result(f, a.w, a.job, a.tok, 6, a.cfg[1], MOETUNE__STATUS__STATUS_TIMEOUT, 3), MT_OK);
    assert_int_equal(sched_flush(f->s, 3), MT_OK);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "done");
    assert_int_equal(sched_flush(f->s, 4), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE state = 'done'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'done'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE status = 'timeout'"), 2);
    sched_status_t st;
    assert_int_equal(sched_status(f->s, 0, 5, &st), MT_OK);
    assert_int_equal(st.reply.sweeps[0]->results_done, 4);
    assert_int_equal(st.reply.sweeps[0]->results_failed, 2);
    assert_int_equal(st.reply.sweeps[0]->jobs_done, 1);
    assert_string_equal(st.reply.sweeps[0]->state, "done");
    assert_int_equal(st.reply.workers[0]->results, 4);
    sched_status_release(&st);
    /* a result for a done job is rejected, still acknowledged */
    assert_int_equal(result(f, a.w, a.job, a.tok, 7, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 6), MT_INVAL);
    assert_int_equal(sched_flush(f->s, 6), MT_OK);
    assert_true(fx_acked(f, "A", 7));
}

static void test_silent_workers_and_attempts(void **state) {
    fx_t *f = *state;
    fx_start(f, 100, 30000);
    fx_submit(f, 1, 1, NULL);
    const char *ids[] = {"A", "B", "C"};
    uint64_t t = 0, job = 0, tok = 0;
    for (int k = 0; k < 3; k++) {
        fx_hello(f, ids[k], "gpu", t);
        const Moetune__Job *j = fx_take(f, ids[k], t);
        if (k) assert_int_equal(j->job_id, job);
        assert_int_not_equal(j->lease_token, tok);
        job = j->job_id;
        tok = j->lease_token;
        sched_tick(f->s, t + 250); /* 2.5 silent periods: still alive */
        assert_string_equal(sched_job_state(f->s, job, NULL), "leased");
        assert_non_null(sched_worker(f->s, (const uint8_t *)ids[k], 1));
        t += 400;
        sched_tick(f->s, t);
        uint32_t attempts = 0;
        const char *state_name = sched_job_state(f->s, job, &attempts);
        assert_int_equal(attempts, (uint32_t)k + 1);
        assert_string_equal(state_name, k < 2 ? "pending" : "failed");
        assert_null(sched_worker(f->s, (const uint8_t *)ids[k], 1));
        assert_int_equal(sched_counters(f->s)->dead_workers, (uint64_t)k + 1);
    }
    assert_int_equal(sched_flush(f->s, t), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT attempts FROM jobs"), 3);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE state = 'failed'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'failed'"), 1);
    assert_true(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_HEARTBEAT) >= 1);
}

static void test_lease_expiry_and_bye(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 200);
    fx_submit(f, 2, 1, NULL);
    fx_lease_t a = fx_lease(f, "A", "gpu", 0);
    sched_on_progress(f->s, a.w, a.job, a.cfg[0], 150); /* extends the lease to 350 */
    lapses(f, a.job, 300, 351);
    /* Bye gives jobs back without an attempt */
    uint32_t attempts = 0;
    sched_on_ready(f->s, a.w, 2, 360);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 3);
    sched_on_bye(f->s, a.w, 370);
    assert_string_equal(sched_job_state(f->s, a.job, &attempts), "pending");
    assert_int_equal(attempts, 1);
    assert_int_equal(sched_counters(f->s)->requeued_jobs, 3);
    assert_null(sched_worker(f->s, (const uint8_t *)"A", 1));
}

/* A sweep of n_stages configs, chunk a job: A leases a job, B says hello, and A's first config
 * crashes at tick 1 (accepted). *a is A's lease; B. */
static sched_worker_t *first_crash(fx_t *f, uint32_t n_stages, uint32_t chunk, fx_lease_t *a) {
    fx_start(f, 1000, 30000);
    fx_submit(f, n_stages, chunk, NULL);
    *a = fx_lease(f, "A", "gpu", 0);
    sched_worker_t *b = fx_hello(f, "B", "gpu", 0);
    assert_int_equal(result(f, a->w, a->job, a->tok, 1, a->cfg[0], MOETUNE__STATUS__STATUS_CRASHED, 1), MT_OK);
    return b;
}

static void test_crash_retry_and_quarantine(void **state) {
    fx_t *f = *state;
    fx_lease_t a;
    sched_worker_t *b = first_crash(f, 2, 2, &a);
    assert_int_equal(sched_pending(f->s), 0);
    assert_int_equal(sched_flush(f->s, 1), MT_OK);
    assert_true(fx_acked(f, "A", 1));
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 0);
    assert_int_equal(fx_query_int(f, "SELECT count FROM crashes"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE avoid_worker = 'A'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM job_configs"), 2);
    uint64_t retry = (uint64_t)fx_query_int(f, "SELECT id FROM jobs WHERE avoid_worker = 'A'");
    assert_string_equal(sched_job_state(f->s, retry, NULL), "pending");
    /* A may not take it while B lives */
    sched_on_ready(f->s, a.w, 1, 2);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 1);
    const Moetune__Job *jb = fx_take(f, "B", 2);
    assert_int_equal(jb->job_id, retry);
    assert_int_equal(jb->n_configs, 1);
    assert_int_equal(jb->configs[0]->config_id, a.cfg[0]);
    /* the second crash quarantines: rows stored as crashed */
    assert_int_equal(result(f, b, retry, jb->lease_token, 1, a.cfg[0], MOETUNE__STATUS__STATUS_CRASHED, 3), MT_OK);
    assert_int_equal(result(f, a.w, a.job, a.tok, 2, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 3), MT_OK);
    assert_int_equal(sched_flush(f->s, 3), MT_OK);
    assert_int_equal(sched_flush(f->s, 4), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE status = 'crashed'"), 2);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE status = 'ok'"), 2);
    assert_int_equal(fx_query_int(f, "SELECT count FROM crashes"), 2);
    assert_string_equal(sched_job_state(f->s, retry, NULL), "done");
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "done");
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'done'"), 1);
}

static void test_avoid_worker_alone(void **state) {
    fx_t *f = *state;
    fx_lease_t a;
    sched_worker_t *b = first_crash(f, 1, 1, &a);
    sched_on_ready(f->s, a.w, 1, 1);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 1);
    sched_on_bye(f->s, b, 2); /* A is now the only live worker: it gets the retry */
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 2);
}

static void test_restart_and_filter(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 2, 2, "H200");
    sched_worker_t *a = fx_hello(f, "A", "NVIDIA H100 80GB HBM3", 0);
    sched_on_ready(f->s, a, 1, 0);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 0);
    sched_worker_t *b = fx_hello(f, "B", "NVIDIA H200", 0);
    const Moetune__Job *j = fx_take(f, "B", 0);
    uint64_t job = j->job_id, tok = j->lease_token, c1 = j->configs[0]->config_id, c2 = j->configs[1]->config_id;
    assert_int_equal(result(f, b, job, tok, 1, c1, MOETUNE__STATUS__STATUS_OK, 1), MT_OK);
    assert_int_equal(sched_flush(f->s, 1), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE state = 'leased'"), 1);
    /* restart: the job stays leased to B (nothing else may deliver it) until B returns */
    fx_clear(f);
    restart(f);
    assert_string_equal(sched_job_state(f->s, job, NULL), "leased");
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND worker_id = 'B'"), 1);
    assert_null(sched_worker(f->s, (const uint8_t *)"B", 1));
    sched_status_t st;
    assert_int_equal(sched_status(f->s, 0, 5, &st), MT_OK);
    assert_int_equal(st.reply.n_workers, 1);
    assert_string_equal(st.reply.workers[0]->state, "away");
    assert_int_equal(st.reply.workers[0]->jobs_leased, 1);
    sched_status_release(&st);
    sched_worker_t *c = fx_hello(f, "C", "NVIDIA H200", 10);
    sched_on_ready(f->s, c, 1, 10);
    assert_int_equal(fx_count(f, "C", MOETUNE__ENVELOPE__BODY_JOB), 0); /* not dispatched again */
    assert_int_equal(result(f, c, job, tok, 1, c2, MOETUNE__STATUS__STATUS_OK, 10), MT_INVAL);
    b = fx_hello(f, "B", "NVIDIA H200", 10);
    uint64_t ids[] = {job};
    heartbeat(f, b, ids, 1, 11);
    assert_string_equal(sched_job_state(f->s, job, NULL), "leased");
    /* the holder's in-flight result with the old token is kept */
    assert_int_equal(result(f, b, job, tok, 2, c2, MOETUNE__STATUS__STATUS_OK, 12), MT_OK);
    assert_int_equal(sched_flush(f->s, 12), MT_OK);
    assert_true(fx_acked(f, "B", 2));
    assert_true(fx_acked(f, "C", 1));
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 4);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE worker_id = 'C'"), 0);
    assert_string_equal(sched_job_state(f->s, job, NULL), "done");
    assert_int_equal(sched_counters(f->s)->rejected_results, 1);
}

/* Racing: a job carries, per batch size, the best committed median of its worker's GPU
 * class; uncommitted results do not count; pruned rows count apart
 * from failures; a restart reloads the bests from the database. */
static void test_racing_bests(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 4, 1, NULL);
    fx_lease_t a = fx_lease(f, "A", "NVIDIA H200", 0);
    const Moetune__Job *j = a.j;
    assert_true(j->measure->race_margin > 0.19 && j->measure->race_margin < 0.21); /* the default */
    assert_int_equal(j->n_best_us, 2);
    assert_true(j->best_us[0] == 0 && j->best_us[1] == 0);
    assert_int_equal(result(f, a.w, a.job, a.tok, 1, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 1), MT_OK);
    j = fx_take(f, "A", 1); /* received, not committed: nothing to race against yet */
    assert_true(j->best_us[0] == 0 && j->best_us[1] == 0);
    uint64_t job2 = j->job_id, tok2 = j->lease_token, c2 = j->configs[0]->config_id;
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
    j = fx_take(f, "A", 2);
    assert_true(j->best_us[0] == 10.0 && j->best_us[1] == 11.0);
    uint64_t job3 = j->job_id;
    sched_worker_t *b = fx_hello(f, "B", "NVIDIA H100 80GB HBM3", 3);
    sched_on_ready(f->s, b, 1, 3);
    assert_null(fx_last_job(f, "B")); /* the sweep is bound to the H200s: an H100's best never mixes in */
    /* a pruned config: stored, counted as pruned, not as failed */
    assert_int_equal(result(f, a.w, job2, tok2, 2, c2, MOETUNE__STATUS__STATUS_PRUNED, 4), MT_OK);
    assert_int_equal(sched_flush(f->s, 4), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE status = 'pruned'"), 2);
    sched_status_t st;
    assert_int_equal(sched_status(f->s, 0, 5, &st), MT_OK);
    assert_int_equal(st.reply.sweeps[0]->results_pruned, 2);
    assert_int_equal(st.reply.sweeps[0]->results_failed, 0);
    /* GPU busy: 4 committed measurements of 100 us timed each, on one device */
    assert_true(st.reply.sweeps[0]->timed_s > 0.000399 && st.reply.sweeps[0]->timed_s < 0.000401);
    assert_true(st.reply.sweeps[0]->gpu_busy > 0);
    sched_status_release(&st);
    /* restart: the bests come back from the committed rows */
    sched_on_bye(f->s, a.w, 5); /* job 3 goes back to pending */
    assert_int_equal(sched_flush(f->s, 5), MT_OK);
    fx_clear(f);
    restart(f);
    assert_int_equal(sched_status(f->s, 0, 5, &st), MT_OK);
    assert_int_equal(st.reply.sweeps[0]->results_pruned, 2);
    assert_true(st.reply.sweeps[0]->timed_s > 0.000399 && st.reply.sweeps[0]->timed_s < 0.000401);
    assert_true(st.reply.sweeps[0]->gpu_busy > 0); /* the device came back from the rows */
    sched_status_release(&st);
    fx_hello(f, "C", "NVIDIA H200", 10);
    j = fx_take(f, "C", 10);
    assert_int_equal(j->job_id, job3);
    assert_true(j->best_us[0] == 10.0 && j->best_us[1] == 11.0);
}

/* Restart: a holder that does not come back loses its leases at expiry, with an attempt. */
static void test_restart_holder_gone(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 500);
    fx_submit(f, 1, 1, NULL);
    fx_lease_t a = fx_lease(f, "A", "gpu", 0);
    assert_int_equal(sched_flush(f->s, 0), MT_OK);
    sched_destroy(&f->s);
    fx_clear(f);
    f->s = NULL;
    char err[256];
    sched_opts_t o = {.heartbeat_ms = 1000, .lease_ms = 500, .send = fx_capture, .send_ctx = f};
    f->s = sched_new(f->db, &o, 10000, err, sizeof err); /* restarted at t = 10 s */
    assert_non_null(f->s);
    lapses(f, a.job, 10400, 10501);
    /* back too late: its result is rejected and nothing is stored */
    a.w = fx_hello(f, "A", "gpu", 10600);
    assert_int_equal(result(f, a.w, a.job, a.tok, 1, (uint64_t)fx_query_int(f, "SELECT config_id FROM job_configs"),
                            MOETUNE__STATUS__STATUS_OK, 10600),
                     MT_INVAL);
    assert_int_equal(sched_flush(f->s, 10600), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 0);
    assert_true(fx_acked(f, "A", 1));
}

/* A re-Hello keeps the leases; the first heartbeat gives back, without an attempt, what it does not list. */
static void test_rehello_heartbeat(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 2, 1, NULL);
    sched_worker_t *a = fx_hello(f, "A", "gpu", 0);
    sched_on_ready(f->s, a, 2, 0);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 2);
    const Moetune__Job *j2 = fx_last_job(f, "A");
    uint64_t job2 = j2->job_id, tok2 = j2->lease_token, cfg2 = j2->configs[0]->config_id;
    uint64_t job1 = job2 - 1;
    a = fx_hello(f, "A", "gpu", 100);
    assert_string_equal(sched_job_state(f->s, job1, NULL), "leased");
    assert_string_equal(sched_job_state(f->s, job2, NULL), "leased");
    uint64_t ids[] = {job1};
    heartbeat(f, a, ids, 1, 110);
    uint32_t attempts = 9;
    assert_string_equal(sched_job_state(f->s, job1, NULL), "leased");
    assert_string_equal(sched_job_state(f->s, job2, &attempts), "pending");
    assert_int_equal(attempts, 0);
    /* later heartbeats settle nothing more */
    heartbeat(f, a, NULL, 0, 120);
    assert_string_equal(sched_job_state(f->s, job1, NULL), "leased");
    assert_int_equal(result(f, a, job2, tok2, 1, cfg2, MOETUNE__STATUS__STATUS_OK, 130), MT_INVAL);
    assert_int_equal(sched_flush(f->s, 130), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 0);
}

/* Forged, replayed, foreign, late and unknown results: each rejected, counted, acked, nothing stored. */
/* Another connection that holds the write lock until unlock_db. */
static sqlite3 *lock_db(fx_t *f) {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    return db;
}

static void unlock_db(sqlite3 *db) {
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* A Hello that arrives while another connection holds the write lock cannot be recorded:
 * the worker still gets work, and its device and worker rows are written with its first
 * results, so no result row lacks its device. */
static void test_hello_while_locked(void **state) {
    fx_t *f = *state;
    fx_start(f, 100000, 30000);
    fx_submit(f, 2, 2, NULL);
    sqlite3 *lock = lock_db(f);
    sched_worker_t *a = fx_hello(f, "A", "locked-gpu", 0);
    unlock_db(lock);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM workers WHERE worker_id = 'A'"), 0);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM devices WHERE name = 'locked-gpu'"), 0);

    const Moetune__Job *j = fx_take(f, "A", 0);
    uint64_t job = j->job_id, tok = j->lease_token, c1 = j->configs[0]->config_id, c2 = j->configs[1]->config_id;
    assert_int_equal(result(f, a, job, tok, 1, c1, MOETUNE__STATUS__STATUS_OK, 1), MT_OK);
    assert_int_equal(result(f, a, job, tok, 2, c2, MOETUNE__STATUS__STATUS_OK, 1), MT_OK);
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
    assert_true(fx_acked(f, "A", 1) && fx_acked(f, "A", 2));
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 4);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results r JOIN devices d ON d.id = r.device_id"
                                     " WHERE d.name = 'locked-gpu' AND r.worker_id = 'A'"),
                     4);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM workers w JOIN devices d ON d.id = w.device_id"
                                     " WHERE w.worker_id = 'A' AND d.name = 'locked-gpu'"),
                     1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM devices"), 1);
}

/* A commit that carries only job rows (a lease, no results) fails on a locked database:
 * nothing is lost, and the job row is written by the next commit. */
static void test_job_rows_commit_fails(void **state) {
    fx_t *f = *state;
    fx_start(f, 100000, 30000);
    fx_submit(f, 2, 2, NULL);
    fx_hello(f, "A", "gpu", 0);
    assert_int_equal(sched_flush(f->s, 0), MT_OK);
    sqlite3 *lock = lock_db(f);
    const Moetune__Job *j = fx_take(f, "A", 1);
    uint64_t job = j->job_id;
    assert_int_not_equal(sched_flush(f->s, 2), MT_OK);
    assert_int_equal(sched_counters(f->s)->commit_failures, 1);
    assert_int_equal(sched_pending(f->s), 0);
    assert_string_equal(sched_job_state(f->s, job, NULL), "leased");
    unlock_db(lock);
    assert_int_equal(sched_flush(f->s, 3), MT_OK);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM jobs WHERE id = %llu AND state = 'leased'",
             (unsigned long long)job);
    assert_int_equal(fx_query_int(f, sql), 1);
}

static void test_lease_discipline(void **state) {
    fx_t *f = *state;
    fx_start(f, 100000, 1000);
    fx_submit(f, 2, 2, NULL);
    fx_lease_t a = fx_lease(f, "A", "gpu", 0);
    sched_worker_t *b = fx_hello(f, "B", "gpu", 0);
    assert_int_equal(result(f, a.w, a.job, a.tok, 1, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 10), MT_OK);
    assert_int_equal(sched_flush(f->s, 10), MT_OK);
    const char *rows_sql = "SELECT COUNT(*) FROM results";
    int64_t rows = fx_query_int(f, rows_sql);
    assert_int_equal(rows, 2);
    uint64_t rej = sched_counters(f->s)->rejected_results;
    /* forged token */
    assert_int_equal(result(f, a.w, a.job, a.tok ^ 0x5a5a, 2, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 20), MT_INVAL);
    /* unknown job */
    assert_int_equal(result(f, a.w, 9999, a.tok, 3, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 20), MT_INVAL);
    /* the right token from a worker that does not hold the lease */
    assert_int_equal(result(f, b, a.job, a.tok, 1, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 20), MT_INVAL);
    assert_int_equal(sched_flush(f->s, 20), MT_OK);
    assert_int_equal(fx_query_int(f, rows_sql), rows);
    assert_int_equal(sched_counters(f->s)->rejected_results, rej + 3);
    assert_true(fx_acked(f, "A", 2) && fx_acked(f, "A", 3) && fx_acked(f, "B", 1));
    /* after expiry (before any timer ran): rejected although token and holder match */
    g_skip_heard = true;
    assert_int_equal(result(f, a.w, a.job, a.tok, 4, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 1500), MT_INVAL);
    assert_int_equal(sched_flush(f->s, 1500), MT_OK);
    assert_int_equal(fx_query_int(f, rows_sql), rows);
    sched_tick(f->s, 1500);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "pending");
    /* the lease moves to B: A's replay of its old token and A with B's token are rejected */
    const Moetune__Job *jb = fx_take(f, "B", 1600);
    assert_int_equal(jb->job_id, a.job);
    uint64_t tok2 = jb->lease_token;
    assert_int_not_equal(tok2, a.tok);
    assert_int_equal(result(f, a.w, a.job, a.tok, 5, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 1610), MT_INVAL);
    assert_int_equal(result(f, a.w, a.job, tok2, 6, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 1610), MT_INVAL);
    assert_int_equal(sched_flush(f->s, 1610), MT_OK);
    assert_int_equal(fx_query_int(f, rows_sql), rows);
    assert_int_equal(sched_counters(f->s)->rejected_results, rej + 6);
    assert_int_equal(sched_pending(f->s), 0);
    /* the holder's result is stored */
    assert_int_equal(result(f, b, a.job, tok2, 2, a.cfg[1], MOETUNE__STATUS__STATUS_OK, 1620), MT_OK);
    assert_int_equal(sched_flush(f->s, 1620), MT_OK);
    assert_int_equal(fx_query_int(f, rows_sql), rows + 2);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE worker_id = 'B'"), 2);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE worker_id = 'A'"), 2);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "done");
    assert_int_equal(sched_counters(f->s)->rejected_results, rej + 6);
}

/* ---- the daemon over loopback sockets */

static void *run_coord(void *arg) {
    coord_run(arg);
    return NULL;
}

static wire_env_t *recv_env_ms(void *sock, long ms) {
    uint8_t id[WIRE_MAX_ID];
    size_t id_len = 0;
    wire_env_t *env = NULL;
    wire_reject_t rej;
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0) return NULL;
    if (wire_recv(sock, false, id, &id_len, WIRE_DEFAULT_MAX_BYTES, 0, &env, &rej) != MT_OK) return NULL;
    return env;
}

static wire_env_t *recv_env(void *sock) { return recv_env_ms(sock, 5000); }

/* The next answer on sock: an Error (asserted), whose message contains part when not NULL;
 * its code. */
static uint32_t error_code(void *sock, const char *part) {
    wire_env_t *e = recv_env(sock);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_ERROR);
    uint32_t code = e->error->code;
    if (part) assert_non_null(strstr(e->error->message, part));
    wire_free(&e);
    return code;
}

static void send_submit(void *cl, Moetune__SweepSpec *spec) {
    Moetune__Submit sub = MOETUNE__SUBMIT__INIT;
    wire_env_t env;
    sub.spec = spec;
    wire_env_wrap(&env, &sub.base);
    assert_int_equal(wire_send(cl, NULL, 0, &env, 0, NULL, 0), MT_OK);
}

static void send_status(void *cl) {
    Moetune__StatusRequest sr = MOETUNE__STATUS_REQUEST__INIT;
    wire_env_t env;
    wire_env_wrap(&env, &sr.base);
    assert_int_equal(wire_send(cl, NULL, 0, &env, 0, NULL, 0), MT_OK);
}

/* A status reply (asserted) and its number of sweeps. */
static size_t status_sweeps(void *cl) {
    send_status(cl);
    wire_env_t *e = recv_env_ms(cl, 60000);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_STATUS_REPLY);
    size_t n = e->status_reply->n_sweeps;
    wire_free(&e);
    return n;
}

typedef struct {
    coord_t *c;
    pthread_t th;
    void *ctx, *wk, *cl;
} daemon_t;

/* A coordinator on f's database with this heartbeat, run on its own thread, and two DEALERs
 * connected to it: wk (the worker "W1") and cl (a client). */
static void daemon_start(fx_t *f, daemon_t *d, uint32_t heartbeat_ms) {
    char err[256];
    coord_opts_t o = {
        .db_path = f->path, .bind = "tcp://127.0.0.1:*", .control = "tcp://127.0.0.1:*", .heartbeat_ms = heartbeat_ms};
    memset(d, 0, sizeof *d);
    assert_int_equal(coord_new(&o, &d->c, err, sizeof err), MT_OK);
    assert_int_equal(pthread_create(&d->th, NULL, run_coord, d->c), 0);
    d->ctx = zmq_ctx_new();
    d->wk = zmq_socket(d->ctx, ZMQ_DEALER);
    d->cl = zmq_socket(d->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(d->wk, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(d->cl, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(d->wk, ZMQ_ROUTING_ID, "W1", 2);
    assert_int_equal(zmq_connect(d->wk, coord_endpoint(d->c, 0)), 0);
    assert_int_equal(zmq_connect(d->cl, coord_endpoint(d->c, 1)), 0);
}

static void daemon_stop(daemon_t *d) {
    zmq_close(d->wk);
    zmq_close(d->cl);
    zmq_ctx_term(d->ctx);
    coord_stop(d->c);
    pthread_join(d->th, NULL);
    coord_destroy(&d->c);
}

static void test_daemon_hostile_input(void **state) {
    fx_t *f = *state;
    daemon_t d;
    daemon_start(f, &d, 100);
    /* garbage, an empty frame, multi-frame junk: each answered with an Error */
    zmq_send(d.wk, "\xff\x01garbage", 9, 0);
    error_code(d.wk, NULL);
    zmq_send(d.wk, "", 0, 0);
    error_code(d.wk, NULL);
    zmq_send(d.wk, "a", 1, ZMQ_SNDMORE);
    zmq_send(d.wk, "b", 1, 0);
    error_code(d.wk, NULL);
    /* a Ready before Hello: say hello first */
    Moetune__Ready rd = MOETUNE__READY__INIT;
    wire_env_t env;
    rd.credits = 1;
    wire_env_wrap(&env, &rd.base);
    assert_int_equal(wire_send(d.wk, NULL, 0, &env, 0, NULL, 0), MT_OK);
    assert_int_equal(error_code(d.wk, NULL), WIRE_E_HELLO);
    /* a worker body on the control socket */
    assert_int_equal(wire_send(d.cl, NULL, 0, &env, 0, NULL, 0), MT_OK);
    assert_int_equal(error_code(d.cl, NULL), WIRE_E_BODY);
    /* an invalid spec is refused with a reason */
    Moetune__SweepSpec spec = MOETUNE__SWEEP_SPEC__INIT;
    send_submit(d.cl, &spec);
    assert_int_equal(error_code(d.cl, "no shapes"), WIRE_E_SPEC);
    /* status counts the bad messages (4 on the worker socket, 1 on control) */
    send_status(d.cl);
    wire_env_t *e = recv_env(d.cl);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_STATUS_REPLY);
    assert_int_equal(e->status_reply->counters->bad_messages, 4);
    assert_int_equal(e->status_reply->n_sweeps, 0);
    wire_free(&e);
    Moetune__Cancel cn = MOETUNE__CANCEL__INIT;
    cn.sweep_id = 5;
    wire_env_wrap(&env, &cn.base);
    assert_int_equal(wire_send(d.cl, NULL, 0, &env, 0, NULL, 0), MT_OK);
    assert_int_equal(error_code(d.cl, NULL), WIRE_E_NOTFOUND);
    daemon_stop(&d);
    assert_null(d.c);
}

/* ---- a submit is planned off the loop (issue 8.11) */

/* n shapes x the default 1920-config space and the default 18 batch sizes. */
static void spec_of_shapes(Moetune__SweepSpec *spec, Moetune__Shape *sh, Moetune__Shape **shp, size_t n) {
    moetune__sweep_spec__init(spec);
    for (size_t i = 0; i < n; i++) {
        moetune__shape__init(&sh[i]);
        sh[i].e = 64, sh[i].n = 128 * (uint32_t)(i + 1), sh[i].k = 4096, sh[i].topk = 4, sh[i].dtype = "bf16";
        shp[i] = &sh[i];
    }
    spec->name = "bound";
    spec->batch_sizes = (uint32_t *)krn_default_batch_sizes;
    spec->n_batch_sizes = krn_n_default_batch_sizes;
    spec->n_shapes = n;
    spec->shapes = shp;
}

/* While a submit at the plan bound (52 shapes x 1920 configs) is planned and stored, the loop
 * answers a status request (no sweep yet) and a worker's Hello; the Submitted reply comes
 * after them with the sweep's id and counts, and the sweep's jobs in memory are the stored
 * ones (a dispatched Job carries its stored configs). */
static void test_daemon_plans_off_the_loop(void **state) {
    fx_t *f = *state;
    Moetune__Shape sh[52], *shp[52];
    Moetune__SweepSpec spec;
    spec_of_shapes(&spec, sh, shp, 52);
    uint32_t valid = 0, rejected = 0, jobs = 0;
    char err[256];
    int rc = plan_count(&spec, &valid, &rejected, &jobs, err, sizeof err);
    if (rc) print_error("plan_count: %s\n", err);
    assert_int_equal(rc, MT_OK);
    assert_true(valid + rejected > 99000 && valid + rejected <= PLAN_MAX_CONFIGS);
    daemon_t d;
    daemon_start(f, &d, 60000); /* long: a slow plan (a sanitizer build) must not make the test's worker dead */
    assert_int_equal(status_sweeps(d.cl), 0); /* connected */
    send_submit(d.cl, &spec);
    send_status(d.cl);
    /* a worker says hello meanwhile */
    Moetune__Hello h = MOETUNE__HELLO__INIT;
    Moetune__Gpu g = MOETUNE__GPU__INIT;
    wire_env_t env;
    g.name = "gpu";
    h.worker_id = "W1", h.host = "host", h.pid = 1, h.backend = "sim", h.gpu = &g;
    wire_env_wrap(&env, &h.base);
    assert_int_equal(wire_send(d.wk, NULL, 0, &env, 0, NULL, 0), MT_OK);
    /* the status is answered first, before the sweep exists */
    wire_env_t *e = recv_env_ms(d.cl, 60000);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_STATUS_REPLY);
    assert_int_equal(e->status_reply->n_sweeps, 0);
    wire_free(&e);
    e = recv_env_ms(d.wk, 60000);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_WELCOME);
    wire_free(&e);
    /* then the submit's reply, with what plan_count says */
    e = recv_env_ms(d.cl, 120000);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_SUBMITTED);
    assert_int_equal(e->submitted->sweep_id, 1);
    assert_int_equal(e->submitted->jobs, jobs);
    assert_int_equal(e->submitted->configs_valid, valid);
    assert_int_equal(e->submitted->configs_rejected, rejected);
    assert_int_equal(e->submitted->results_planned, (uint64_t)valid * 18);
    wire_free(&e);
    send_status(d.cl);
    e = recv_env_ms(d.cl, 60000);
    assert_non_null(e);
    assert_int_equal(e->status_reply->n_sweeps, 1);
    const Moetune__SweepStatus *ss = e->status_reply->sweeps[0];
    assert_string_equal(ss->state, "running");
    assert_int_equal(ss->jobs_total, jobs);
    assert_int_equal(ss->jobs_pending, jobs);
    assert_int_equal(ss->results_planned, (uint64_t)valid * 18);
    wire_free(&e);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE sweep_id = 1"), jobs);
    /* one credit: the first job, with the configs stored for it */
    Moetune__Ready rd = MOETUNE__READY__INIT;
    rd.credits = 1;
    wire_env_wrap(&env, &rd.base);
    assert_int_equal(wire_send(d.wk, NULL, 0, &env, 0, NULL, 0), MT_OK);
    do {
        wire_free(&e);
        e = recv_env_ms(d.wk, 10000);
        assert_non_null(e);
    } while (e->body_case == MOETUNE__ENVELOPE__BODY_HEARTBEAT);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_JOB);
    const Moetune__Job *jb = e->job;
    assert_int_equal(jb->sweep_id, 1);
    assert_int_equal(jb->job_id, fx_query_int(f, "SELECT MIN(id) FROM jobs WHERE sweep_id = 1"));
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM job_configs WHERE job_id = %llu", (unsigned long long)jb->job_id);
    assert_int_equal(jb->n_configs, fx_query_int(f, sql));
    for (size_t i = 0; i < jb->n_configs; i++) {
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM job_configs WHERE job_id = %llu AND config_id = %llu",
                 (unsigned long long)jb->job_id, (unsigned long long)jb->configs[i]->config_id);
        assert_int_equal(fx_query_int(f, sql), 1);
    }
    assert_int_equal(jb->n_batch_sizes, 18);
    wire_free(&e);
    daemon_stop(&d);
}

/* A plan that cannot be stored (another connection holds the write lock past the writer's
 * wait) answers its client with the storage error and leaves no sweep, in memory or in the
 * database; the loop answers status meanwhile, and a later submit works. */
static void test_daemon_plan_storage_error(void **state) {
    fx_t *f = *state;
    Moetune__Shape sh[1], *shp[1];
    Moetune__SweepSpec spec;
    spec_of_shapes(&spec, sh, shp, 1);
    daemon_t d;
    daemon_start(f, &d, 60000); /* long: a slow plan (a sanitizer build) must not make the test's worker dead */
    assert_int_equal(status_sweeps(d.cl), 0);
    sqlite3 *lk = NULL;
    assert_int_equal(sqlite3_open(f->path, &lk), SQLITE_OK);
    tmpdb_exec(lk, "BEGIN IMMEDIATE");
    send_submit(d.cl, &spec);
    assert_int_equal(status_sweeps(d.cl), 0); /* answered while the plan waits for the lock */
    wire_env_t *e = recv_env_ms(d.cl, 60000);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_ERROR);
    assert_int_equal(e->error->code, WIRE_E_INTERNAL);
    assert_non_null(strstr(e->error->message, "storing the sweep"));
    assert_non_null(strstr(e->error->message, "locked"));
    wire_free(&e);
    tmpdb_exec(lk, "ROLLBACK");
    sqlite3_close(lk);
    assert_int_equal(status_sweeps(d.cl), 0);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps"), 0);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs"), 0);
    /* the next submit is planned and runs */
    send_submit(d.cl, &spec);
    e = recv_env_ms(d.cl, 60000);
    assert_non_null(e);
    assert_int_equal(e->body_case, MOETUNE__ENVELOPE__BODY_SUBMITTED);
    uint64_t id = e->submitted->sweep_id;
    assert_true(id >= 1);
    wire_free(&e);
    assert_int_equal(status_sweeps(d.cl), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'running'"), 1);
    daemon_stop(&d);
}

/* A Result the coordinator cannot accept from the lease holder (an invalid one from the wire,
 * one for a config not in the job, an undecodable message) sends the job back with an attempt,
 * and --max-attempts fails it: the sweep ends instead of waiting on a lease forever. */
static void test_invalid_results_requeue(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 1, 1, NULL);
    fx_lease_t a = fx_lease(f, "A", "gpu", 0);
    uint32_t attempts = 0;
    /* 1: the wire rejected a Result naming this lease (e.g. an infinite latency) */
    wire_reject_t rej = {.code = WIRE_E_INVALID, .job_id = a.job, .lease_token = a.tok, .seq = 1};
    snprintf(rej.reason, sizeof rej.reason, "result: negative or non-finite latency");
    sched_on_bad(f->s, a.w, &rej, 1);
    assert_string_equal(sched_job_state(f->s, a.job, &attempts), "pending");
    assert_int_equal(attempts, 1);
    assert_int_equal(sched_counters(f->s)->rejected_results, 1);
    /* the same claim again, now stale (the lease is gone): rejected, no second attempt */
    sched_on_bad(f->s, a.w, &rej, 2);
    assert_string_equal(sched_job_state(f->s, a.job, &attempts), "pending");
    assert_int_equal(attempts, 1);
    /* 2: a config that is not in the job, from the holder */
    const Moetune__Job *j = fx_take(f, "A", 3);
    assert_int_equal(j->job_id, a.job);
    a.tok = j->lease_token;
    assert_int_equal(result(f, a.w, a.job, a.tok, 2, a.cfg[0] + 1000, MOETUNE__STATUS__STATUS_OK, 4), MT_INVAL);
    assert_string_equal(sched_job_state(f->s, a.job, &attempts), "pending");
    assert_int_equal(attempts, 2);
    /* 3: an undecodable message from a worker holding the lease: it goes back too */
    sched_on_ready(f->s, a.w, 1, 5);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "leased");
    wire_reject_t garbage = {.code = WIRE_E_DECODE};
    snprintf(garbage.reason, sizeof garbage.reason, "5 bytes do not decode as an Envelope");
    sched_on_bad(f->s, a.w, &garbage, 6);
    assert_string_equal(sched_job_state(f->s, a.job, &attempts), "failed"); /* max_attempts 3 */
    assert_int_equal(attempts, 3);
    assert_int_equal(sched_flush(f->s, 7), MT_OK);
    assert_true(fx_acked(f, "A", 1));
    assert_true(fx_acked(f, "A", 2));
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE state = 'failed' AND attempts = 3"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'failed'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 0);
    /* garbage from a worker holding nothing changes nothing */
    sched_on_bad(f->s, a.w, &garbage, 8);
    assert_int_equal(sched_counters(f->s)->requeued_jobs, 3);
}

/* Runs scenario on a fresh database and scheduler (1 s heartbeat, 30 s lease) for n = 1, 2, ...
 * below max: the scenario arms mt_alloc_fail_at(n) where its failures are to begin, disarms it,
 * checks what it left and returns whether the armed failure fired. Ends with the first run in
 * which no allocation was left to fail (asserted); the number of runs. */
static unsigned long each_alloc_failure(fx_t *f, unsigned long max, bool (*scenario)(fx_t *f, unsigned long n)) {
    bool fired = true;
    unsigned long n;
    for (n = 1; fired && n < max; n++) {
        fx_fresh(f);
        fx_start(f, 1000, 30000);
        fired = scenario(f, n);
    }
    assert_false(fired); /* the loop reached a run in which no allocation was left to fail */
    return n - 1;
}

/* A first crash's retry job with its n-th allocation failing: memory and database agree (the
 * retry job exists in both or in neither; no entry points at freed memory). */
static bool crash_failing_at(fx_t *f, unsigned long n) {
    /* 16 jobs of one config: the retry job is the 17th, so the sweep's job list grows */
    fx_spec_t x;
    Moetune__Submitted sub;
    fx_spec(&x, "alloc", (const uint32_t[]){1, 2}, 4, 2, 2, 1);
    fx_submit_spec(f, &x, &sub);
    assert_int_equal(sub.jobs, 16);
    fx_lease_t a = fx_lease(f, "A", "gpu", 0);
    sched_worker_t *b = fx_hello(f, "B", "gpu", 0);
    mt_alloc_fail_at(n);
    result(f, a.w, a.job, a.tok, 1, a.cfg[0], MOETUNE__STATUS__STATUS_CRASHED, 1);
    bool fired = mt_alloc_failed();
    mt_alloc_fail_at(0);
    int64_t db_jobs = fx_query_int(f, "SELECT COUNT(*) FROM jobs");
    int64_t retry = fx_query_int(f, "SELECT id FROM jobs WHERE avoid_worker = 'A'");
    assert_true(db_jobs == 16 || db_jobs == 17);
    for (uint64_t id = 1; id <= 18; id++) {
        bool in_db = (int64_t)id <= db_jobs; /* ids are 1..n */
        const char *st = sched_job_state(f->s, id, NULL);
        if (in_db)
            assert_non_null(st);
        else
            assert_null(st);
    }
    if (retry > 0) {
        /* the retry job is real: a B (not A) gets exactly that config (a worker holds 2 jobs at
         * most: eight of them take the 16 pending) */
        sched_on_ready(f->s, b, 2, 2);
        for (int k = 1; k < 8; k++) {
            char name[8];
            snprintf(name, sizeof name, "B%d", k);
            sched_on_ready(f->s, fx_hello(f, name, "gpu", 2), 2, 2);
        }
        bool seen = false;
        for (size_t i = 0; i < f->n; i++) {
            const Moetune__Envelope *e = f->msg[i];
            if (f->rid[i][0] != 'B' || e->body_case != MOETUNE__ENVELOPE__BODY_JOB) continue;
            if (e->job->job_id == (uint64_t)retry) {
                assert_int_equal(e->job->n_configs, 1);
                assert_int_equal(e->job->configs[0]->config_id, a.cfg[0]);
                seen = true;
            }
        }
        assert_true(seen);
    } else {
        /* not recorded: the job went back whole and nothing was committed */
        assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM job_configs"), 16);
        assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM crashes"), 0);
    }
    return fired;
}

/* Every allocation of a first crash's retry job fails in turn. */
static void test_crash_allocation_failures(void **state) {
    assert_true(each_alloc_failure(*state, 200, crash_failing_at) >= 3);
}

/* ---- every scenario under failing allocations (issue 13's habit) */

/* A Hello from id that may fail (no asserts on the scheduler's answer); the live worker or NULL. */
static sched_worker_t *try_hello(fx_t *f, const char *id, uint64_t now) {
    bool left;
    fx_hello_send(f, id, "gpu", now, &left);
    return sched_worker(f->s, (const uint8_t *)id, strlen(id));
}

static int try_submit(fx_t *f, const char *name, uint64_t *id) { return fx_submit_try(f, name, 4, 1, NULL, id, NULL); }

/* Memory agrees with the database: every job in memory has its stored state, every open job
 * of a running sweep is in memory, and each sweep's committed count is its stored rows. */
static void check_consistent(fx_t *f) {
    char sql[256];
    int64_t max_job = fx_query_int(f, "SELECT COALESCE(MAX(id), 0) FROM jobs");
    for (int64_t id = 1; id <= max_job + 1; id++) {
        const char *st = sched_job_state(f->s, (uint64_t)id, NULL);
        if (st) {
            snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM jobs WHERE id = %lld AND state = '%s'", (long long)id, st);
            if (fx_query_int(f, sql) != 1) print_error("job %lld: %s in memory\n", (long long)id, st);
            assert_int_equal(fx_query_int(f, sql), 1);
        }
        snprintf(sql, sizeof sql,
                 "SELECT COUNT(*) FROM jobs j JOIN sweeps s ON s.id = j.sweep_id WHERE j.id = %lld AND "
                 "s.state = 'running' AND j.state IN ('pending', 'leased')",
                 (long long)id);
        if (fx_query_int(f, sql) == 1) assert_non_null(st);
    }
    sched_status_t stt;
    assert_int_equal(sched_status(f->s, 0, 0, &stt), MT_OK);
    assert_int_equal(stt.reply.n_sweeps, fx_query_int(f, "SELECT COUNT(*) FROM sweeps"));
    for (size_t i = 0; i < stt.reply.n_sweeps; i++) {
        const Moetune__SweepStatus *ss = stt.reply.sweeps[i];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM results WHERE sweep_id = %llu",
                 (unsigned long long)ss->sweep_id);
        assert_int_equal(ss->results_done, fx_query_int(f, sql));
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM sweeps WHERE id = %llu AND state = '%s'",
                 (unsigned long long)ss->sweep_id, ss->state);
        assert_int_equal(fx_query_int(f, sql), 1);
    }
    sched_status_release(&stt);
}

/* One sweep of 8 configs (warps 4,8 x stages 2..5) in one job of 8, batch sizes {2, 1}; its id. */
static uint64_t submit_8(fx_t *f) {
    fx_spec_t x;
    Moetune__Submitted sub;
    fx_spec(&x, "eight", (const uint32_t[]){2, 1}, 1, 2, 4, 8);
    fx_submit_spec(f, &x, &sub);
    assert_int_equal(sub.configs_valid, 8);
    assert_int_equal(sub.jobs, 1);
    assert_int_equal(sub.results_planned, 16);
    return sub.sweep_id;
}

/* Flushes and returns the sweep's committed count, which never exceeds its plan and always
 * equals its stored rows. */
static uint64_t flush_done(fx_t *f, uint64_t now) {
    sched_status_t st;
    assert_int_equal(sched_flush(f->s, now), MT_OK);
    assert_int_equal(sched_status(f->s, 0, now, &st), MT_OK);
    uint64_t done = st.reply.sweeps[0]->results_done;
    assert_true(done <= st.reply.sweeps[0]->results_planned);
    assert_int_equal(done, fx_query_int(f, "SELECT COUNT(*) FROM results"));
    sched_status_release(&st);
    return done;
}

/* The first n configs of l's job, in order, as results from its holder (seqs 1..n) at now:
 * each accepted. */
static void first_results(fx_t *f, const fx_lease_t *l, int n, uint64_t now) {
    for (int i = 0; i < n; i++)
        assert_int_equal(result(f, l->w, l->job, l->tok, (uint64_t)i + 1, l->cfg[i], MOETUNE__STATUS__STATUS_OK, now),
                         MT_OK);
}

/* The split fixture: A takes the one job of 8 configs (a), then B, with nothing pending,
 * takes the back half of it (b: A's configs 4..7, back to front). */
static void split_setup(fx_t *f, fx_lease_t *a, fx_lease_t *b) {
    fx_start(f, 1000, 30000);
    submit_8(f);
    *a = fx_lease(f, "A", "gpu", 1);
    assert_int_equal(a->j->n_configs, 8);
    *b = fx_lease(f, "B", "gpu", 2);
}

/* A listed sweep's job (tune --configs) measures its configs side by side on one GPU: a
 * worker with nothing to do does not split it. */
static void test_split_not_listed(void **state) {
    fx_t *f = *state;
    fx_spec_t x;
    Moetune__Submitted sub;
    Moetune__Config cfg[4], *ptr[4];
    fx_start(f, 1000, 30000);
    fx_spec(&x, "listed", (const uint32_t[]){2, 1}, 1, 1, 1, 4);
    for (uint32_t i = 0; i < 4; i++) {
        krn_config_t c = {16, 64, 64, 1, 4, 2 + i};
        moetune__config__init(&cfg[i]);
        wire_config_to_msg(&c, &cfg[i]);
        ptr[i] = &cfg[i];
    }
    x.sp.n_block_m = x.sp.n_block_n = x.sp.n_block_k = x.sp.n_group_m = x.sp.n_num_warps = x.sp.n_num_stages = 0;
    x.sp.n_configs = 4, x.sp.configs = ptr;
    fx_submit_spec(f, &x, &sub);
    assert_int_equal(sub.configs_valid, 4);
    assert_int_equal(sub.jobs, 1);
    fx_hello(f, "A", "gpu", 0);
    sched_worker_t *b = fx_hello(f, "B", "gpu", 0);
    assert_int_equal(fx_take(f, "A", 1)->n_configs, 4);
    fx_clear(f);
    sched_on_ready(f->s, b, 1, 2);
    assert_int_equal(fx_count(f, "B", MOETUNE__ENVELOPE__BODY_JOB), 0);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs"), 1);
}

/* The tail: B has nothing pending while A holds a job of 8 configs, so B takes the back 4 of
 * them in a new job (stored: job_configs moved). A's kept configs finish A's job; A's result
 * for a moved config is stored once and credits B's job (which then waits only for the rest);
 * B's own result for it changes nothing; A's later result for a moved config, after its job
 * is done, is acknowledged and dropped without counting as rejected. Every planned row is
 * stored exactly once, and memory agrees with the database, also after a restart. */
static void test_split_tail(void **state) {
    fx_t *f = *state;
    fx_lease_t a, b;
    split_setup(f, &a, &b);
    assert_int_not_equal(b.job, a.job);
    assert_int_equal(b.j->n_configs, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(b.j->configs[i]->config_id, a.cfg[7 - i]); /* the back half, back to front */
    assert_int_equal(b.j->n_batch_sizes, 2);
    assert_string_equal(sched_job_state(f->s, b.job, NULL), "leased");
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs"), 2);
    char sql[160];
    for (int i = 0; i < 8; i++) {
        snprintf(sql, sizeof sql, "SELECT job_id FROM job_configs WHERE config_id = %llu",
                 (unsigned long long)a.cfg[i]);
        assert_int_equal(fx_query_int(f, sql), i < 4 ? (int64_t)a.job : (int64_t)b.job);
    }
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM job_configs"), 8);
    /* A measures its job in order: 0..3 (kept) then 4 (moved: as a worker that ignores the notice) */
    uint64_t seq = 1;
    for (int i = 0; i < 3; i++)
        assert_int_equal(result(f, a.w, a.job, a.tok, seq++, a.cfg[i], MOETUNE__STATUS__STATUS_OK, 3), MT_OK);
    assert_int_equal(flush_done(f, 3), 6);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "leased");
    assert_int_equal(result(f, a.w, a.job, a.tok, seq++, a.cfg[3], MOETUNE__STATUS__STATUS_OK, 4), MT_OK);
    assert_int_equal(result(f, a.w, a.job, a.tok, seq++, a.cfg[4], MOETUNE__STATUS__STATUS_OK, 4), MT_OK);
    assert_int_equal(flush_done(f, 4), 10);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "done"); /* its 4 kept configs */
    for (uint64_t q = 1; q < seq; q++) assert_true(fx_acked(f, "A", q));
    /* B measures 4 too: stored once, nothing counted twice */
    assert_int_equal(result(f, b.w, b.job, b.tok, 1, a.cfg[4], MOETUNE__STATUS__STATUS_OK, 5), MT_OK);
    assert_int_equal(result(f, b.w, b.job, b.tok, 2, a.cfg[5], MOETUNE__STATUS__STATUS_OK, 5), MT_OK);
    assert_int_equal(result(f, b.w, b.job, b.tok, 3, a.cfg[6], MOETUNE__STATUS__STATUS_OK, 5), MT_OK);
    assert_int_equal(flush_done(f, 5), 14);
    assert_string_equal(sched_job_state(f->s, b.job, NULL), "leased"); /* 7 is still to come */
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM results WHERE config_id = %llu AND worker_id = 'A'",
             (unsigned long long)a.cfg[4]);
    assert_int_equal(fx_query_int(f, sql), 2); /* A's rows kept, B's duplicates not stored */
    /* A's result for moved 5 after its job is done: acked, dropped, not a rejection */
    assert_int_equal(result(f, a.w, a.job, a.tok, seq, a.cfg[5], MOETUNE__STATUS__STATUS_OK, 6), MT_OK);
    assert_int_equal(flush_done(f, 6), 14);
    assert_true(fx_acked(f, "A", seq));
    assert_int_equal(sched_counters(f->s)->rejected_results, 0);
    assert_int_equal(sched_counters(f->s)->requeued_jobs, 0);
    assert_int_equal(result(f, b.w, b.job, b.tok, 4, a.cfg[7], MOETUNE__STATUS__STATUS_OK, 7), MT_OK);
    assert_int_equal(flush_done(f, 7), 16);
    assert_int_equal(flush_done(f, 8), 16);
    assert_string_equal(sched_job_state(f->s, b.job, NULL), "done");
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'done'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE state = 'done'"), 2);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM (SELECT DISTINCT config_id, batch_size FROM results)"), 16);
    assert_int_equal(sched_counters(f->s)->results_committed, 16);
    assert_int_equal(sched_counters(f->s)->rejected_results, 0);
    check_consistent(f);
    restart(f);
    check_consistent(f);
}

/* A restart after a split: the database is the truth (the moved configs are the new job's).
 * The old holder, reclaiming its lease, sends a moved config: acknowledged and dropped, its
 * job neither requeued nor charged an attempt; its kept configs finish it, and the new job's
 * holder finishes the rest: every planned row once. */
static void test_split_restart(void **state) {
    fx_t *f = *state;
    fx_lease_t a, b;
    split_setup(f, &a, &b);
    assert_int_equal(flush_done(f, 2), 0);
    restart(f);
    fx_clear(f);
    a.w = fx_hello(f, "A", "gpu", 1);
    b.w = fx_hello(f, "B", "gpu", 1);
    heartbeat(f, a.w, &a.job, 1, 1);
    heartbeat(f, b.w, &b.job, 1, 1);
    first_results(f, &a, 4, 2);
    assert_int_equal(result(f, a.w, a.job, a.tok, 5, a.cfg[4], MOETUNE__STATUS__STATUS_OK, 2), MT_OK);
    uint32_t att = 9;
    assert_string_equal(sched_job_state(f->s, a.job, &att), "leased");
    assert_int_equal(att, 0);
    assert_int_equal(flush_done(f, 3), 8); /* A's 4 kept configs; its moved one dropped */
    assert_true(fx_acked(f, "A", 5));
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "done");
    for (int i = 4; i < 8; i++)
        assert_int_equal(result(f, b.w, b.job, b.tok, (uint64_t)i, a.cfg[i], MOETUNE__STATUS__STATUS_OK, 4), MT_OK);
    assert_int_equal(flush_done(f, 4), 16);
    assert_int_equal(flush_done(f, 5), 16);
    assert_string_equal(sched_job_state(f->s, b.job, NULL), "done");
    assert_int_equal(sched_counters(f->s)->rejected_results, 0);
    assert_int_equal(sched_counters(f->s)->requeued_jobs, 0);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'done'"), 1);
    check_consistent(f);
}

/* The holder and the worker that split its job meet in the middle: the new job lists the moved
 * configs back to front, the holder, its own job done, goes on into them front to back. Its
 * result for a moved config the new job still needs is accepted and credited there; the other
 * worker's later result for that config, its job done by then, is acked and dropped, not
 * rejected; every row once, counts never above the plan. */
static void test_split_meet(void **state) {
    fx_t *f = *state;
    fx_lease_t a, b;
    split_setup(f, &a, &b);
    first_results(f, &a, 4, 2);
    assert_int_equal(result(f, b.w, b.job, b.tok, 1, a.cfg[7], MOETUNE__STATUS__STATUS_OK, 2), MT_OK);
    assert_int_equal(result(f, b.w, b.job, b.tok, 2, a.cfg[6], MOETUNE__STATUS__STATUS_OK, 2), MT_OK);
    assert_int_equal(flush_done(f, 2), 12);
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "done");
    /* A goes on: 4 and 5, which B has not reached */
    assert_int_equal(result(f, a.w, a.job, a.tok, 5, a.cfg[4], MOETUNE__STATUS__STATUS_OK, 3), MT_OK);
    assert_int_equal(sched_pending(f->s), 1);
    assert_int_equal(flush_done(f, 3), 14);
    assert_string_equal(sched_job_state(f->s, b.job, NULL), "leased");
    assert_int_equal(result(f, a.w, a.job, a.tok, 6, a.cfg[5], MOETUNE__STATUS__STATUS_OK, 4), MT_OK);
    assert_int_equal(flush_done(f, 4), 16);
    assert_string_equal(sched_job_state(f->s, b.job, NULL), "done"); /* A's two results finished it */
    assert_int_equal(flush_done(f, 5), 16);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'done'"), 1);
    /* B reaches 5: its job is done with rows from A: dropped; A's 6 (B's): its rows are in: dropped */
    assert_int_equal(result(f, b.w, b.job, b.tok, 3, a.cfg[5], MOETUNE__STATUS__STATUS_OK, 6), MT_OK);
    assert_int_equal(result(f, a.w, a.job, a.tok, 7, a.cfg[6], MOETUNE__STATUS__STATUS_OK, 6), MT_OK);
    assert_int_equal(flush_done(f, 6), 16);
    assert_true(fx_acked(f, "B", 3));
    assert_true(fx_acked(f, "A", 7));
    assert_int_equal(sched_counters(f->s)->rejected_results, 0);
    assert_int_equal(sched_counters(f->s)->results_committed, 16);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE worker_id = 'A'"), 12);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE worker_id = 'B'"), 4);
    /* a result for a done job that no split touched is still rejected */
    assert_int_equal(result(f, a.w, a.job, a.tok, 8, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 7), MT_INVAL);
    assert_int_equal(sched_counters(f->s)->rejected_results, 1);
    check_consistent(f);
}

/* The moved configs of a split, as its holder was told at once (Ack.moved for job): their
 * count, ids into ids[0, cap). */
static size_t moved_told(fx_t *f, const char *rid, uint64_t job, uint64_t *ids, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->rid[i], rid) || f->msg[i]->body_case != MOETUNE__ENVELOPE__BODY_ACK) continue;
        const Moetune__Ack *a = f->msg[i]->ack;
        for (size_t k = 0; k < a->n_moved; k++) {
            if (a->moved[k]->job_id != job) continue;
            for (size_t c = 0; c < a->moved[k]->n_config_ids; c++)
                if (n < cap) ids[n++] = a->moved[k]->config_ids[c];
        }
    }
    return n;
}

/* The holder of a split job is told at once which configs left it (Ack.moved: the new job's,
 * nothing else), so it skips them; the worker that took them is told nothing. */
static void test_split_tells_holder(void **state) {
    fx_t *f = *state;
    fx_lease_t a, b;
    split_setup(f, &a, &b);
    uint64_t ids[16];
    assert_int_equal(moved_told(f, "A", a.job, ids, 16), 4);
    for (int i = 0; i < 4; i++) assert_int_equal(ids[i], b.j->configs[i]->config_id);
    assert_int_equal(moved_told(f, "B", a.job, ids, 16), 0);
    assert_int_equal(moved_told(f, "A", b.job, ids, 16), 0);
}

/* A config whose Result has come (waiting for its commit) is not open to a split: A sent 6 of
 * its 8 configs, uncommitted, so B's split counts 2 open and takes the back one only, not 4 of
 * which 2 are measured already. */
static void test_split_leaves_received(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    submit_8(f);
    fx_lease_t a = fx_lease(f, "A", "gpu", 1);
    first_results(f, &a, 6, 2);
    assert_int_equal(sched_pending(f->s), 6);
    fx_lease_t b = fx_lease(f, "B", "gpu", 2);
    assert_int_equal(b.j->n_configs, 1);
    assert_int_equal(b.j->configs[0]->config_id, a.cfg[7]);
    uint64_t ids[16];
    assert_int_equal(moved_told(f, "A", a.job, ids, 16), 1);
    assert_int_equal(ids[0], a.cfg[7]);
    /* every row once: A's 6 and 7th, B's last */
    assert_int_equal(result(f, a.w, a.job, a.tok, 7, a.cfg[6], MOETUNE__STATUS__STATUS_OK, 3), MT_OK);
    assert_int_equal(result(f, b.w, b.job, b.tok, 1, a.cfg[7], MOETUNE__STATUS__STATUS_OK, 3), MT_OK);
    assert_int_equal(flush_done(f, 3), 16);
    assert_int_equal(flush_done(f, 4), 16);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'done'"), 1);
    check_consistent(f);
}

/* l's config ci at batch sizes {1, 2} with medians us and us + 1, from its holder. */
static int result_us(fx_t *f, const fx_lease_t *l, uint64_t seq, int ci, double us, uint64_t now) {
    return fx_result_us(f, l->w, l->job, l->tok, seq, l->cfg[ci], MOETUNE__STATUS__STATUS_OK, us, now, true);
}

/* At the end, an idle worker splits the job of the shape whose best at its slowest batch size
 * is the largest (its side-by-side decide jobs will take longest), before a job with more open
 * configs of a quicker shape: sweep 2's best is 501 us, sweep 1's 11 us, and B takes from
 * sweep 2's job although sweep 1's has more open configs. Without bests, the most open. */
static void test_split_prefers_slow_shape(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    uint64_t sw1 = submit_8(f);
    fx_lease_t a = fx_lease(f, "A", "gpu", 1);
    uint64_t sw2 = submit_8(f);
    fx_lease_t c = fx_lease(f, "C", "gpu", 1);
    assert_int_not_equal(sw1, sw2);
    assert_int_equal(result_us(f, &a, 1, 0, 10.0, 2), MT_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(result_us(f, &c, (uint64_t)i + 1, i, 500.0 + i, 2), MT_OK);
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
    fx_lease_t b = fx_lease(f, "B", "gpu", 3); /* sweep 1's job: 7 open; sweep 2's: 5 open */
    assert_int_equal(b.j->sweep_id, sw2);
    assert_int_equal(b.j->n_configs, 2);
    assert_int_equal(b.j->configs[0]->config_id, c.cfg[7]);
    assert_int_equal(b.j->configs[1]->config_id, c.cfg[6]);
    /* D: sweep 2's job has 3 open (A's 7 in sweep 1): still sweep 2, its back one */
    fx_lease_t d = fx_lease(f, "D", "gpu", 4);
    assert_int_equal(d.j->sweep_id, sw2);
    assert_int_equal(d.j->n_configs, 1);
    assert_int_equal(d.j->configs[0]->config_id, c.cfg[5]);
    assert_int_equal(sched_flush(f->s, 5), MT_OK);
    check_consistent(f);
}

/* Splitting is bounded: a job with one open config is never split, a worker already holding
 * a job never splits one, and a sweep it may not measure is not split for it. */
static void test_split_bounds(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    submit_8(f);
    fx_lease_t a = fx_lease(f, "A", "NVIDIA H100", 1);
    sched_worker_t *other = fx_hello(f, "O", "NVIDIA H200", 1);
    sched_on_ready(f->s, other, 1, 1); /* the sweep is bound to the H100 */
    assert_int_equal(fx_count(f, "O", MOETUNE__ENVELOPE__BODY_JOB), 0);
    first_results(f, &a, 7, 2);
    assert_int_equal(flush_done(f, 2), 14);
    sched_worker_t *b = fx_hello(f, "B", "NVIDIA H100", 3);
    sched_on_ready(f->s, b, 1, 3);
    assert_int_equal(fx_count(f, "B", MOETUNE__ENVELOPE__BODY_JOB), 0); /* one open config: kept */
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs"), 1);
    /* a second sweep (O gone): B takes its job; A, holding one, splits none of it */
    sched_on_bye(f->s, other, 3);
    submit_8(f);
    assert_int_equal(fx_count(f, "B", MOETUNE__ENVELOPE__BODY_JOB), 1);
    const Moetune__Job *jb = fx_last_job(f, "B");
    assert_int_equal(jb->n_configs, 8); /* B took the pending job (A holds one already) */
    sched_on_ready(f->s, a.w, 1, 4);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs"), 2);
}

/* Submit, hello, dispatch, results, the batched commit, heartbeat, cancel and a restart, with the
 * n-th allocation failing: no crash, no leak (ASan), and afterwards (commits retried unarmed)
 * memory agrees with the database, also after one more restart. */
static bool scenario_failing_at(fx_t *f, unsigned long n) {
    uint64_t sw1 = 0, sw2 = 0;
    mt_alloc_fail_at(n);
    try_submit(f, "one", &sw1);
    try_submit(f, "two", &sw2);
    sched_worker_t *a = try_hello(f, "A", 0);
    sched_worker_t *b = try_hello(f, "B", 0);
    if (a) sched_on_ready(f->s, a, 3, 1);
    if (b) sched_on_ready(f->s, b, 1, 1);
    uint64_t seq = 1;
    for (size_t i = 0; a && i < f->n; i++) {
        const Moetune__Envelope *e = f->msg[i];
        if (strcmp(f->rid[i], "A") || e->body_case != MOETUNE__ENVELOPE__BODY_JOB) continue;
        for (size_t k = 0; k < e->job->n_configs; k++)
            fx_result(f, a, e->job->job_id, e->job->lease_token, seq++, e->job->configs[k]->config_id,
                      MOETUNE__STATUS__STATUS_OK, 2, true);
    }
    sched_flush(f->s, 3);
    if (b) {
        uint64_t held[1] = {0};
        sched_on_heartbeat(f->s, b, held, 0, 4);
    }
    uint32_t cancelled = 0;
    if (sw2) sched_cancel(f->s, sw2, &cancelled, 5);
    sched_flush(f->s, 6);
    restart(f);
    bool fired = mt_alloc_failed();
    mt_alloc_fail_at(0);
    for (int k = 0; k < 10 && sched_flush(f->s, 7) != MT_OK; k++) {}
    assert_int_equal(sched_pending(f->s), 0);
    check_consistent(f);
    restart(f);
    check_consistent(f);
    return fired;
}

/* The scenario with every one of its allocations failing in turn. */
static void test_alloc_failure_scenarios(void **state) {
    unsigned long runs = each_alloc_failure(*state, 2000, scenario_failing_at);
    print_message("allocation failure scenarios: %lu runs\n", runs);
    assert_true(runs >= 10);
}

/* A mixed fleet never splits a sweep: its first lease binds it to that GPU model, other models
 * get none of its jobs (before or after a restart) and take the next sweep instead. */
static void test_mixed_fleet_binds_sweep(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    uint64_t sw1 = fx_submit(f, 4, 1, NULL);
    fx_lease_t a = fx_lease(f, "A", "NVIDIA H100 80GB HBM3", 0);
    sched_worker_t *b = fx_hello(f, "B", "NVIDIA H200", 0);
    assert_int_equal(a.j->sweep_id, sw1);
    sched_on_ready(f->s, b, 4, 0);
    assert_int_equal(fx_count(f, "B", MOETUNE__ENVELOPE__BODY_JOB), 0);
    assert_int_equal(result(f, a.w, a.job, a.tok, 1, a.cfg[0], MOETUNE__STATUS__STATUS_OK, 1), MT_OK);
    assert_int_equal(sched_flush(f->s, 1), MT_OK);
    /* restart: the binding comes back from the stored results */
    fx_clear(f);
    restart(f);
    b = fx_hello(f, "B", "NVIDIA H200", 10);
    sched_on_ready(f->s, b, 4, 10);
    assert_int_equal(fx_count(f, "B", MOETUNE__ENVELOPE__BODY_JOB), 0);
    sched_worker_t *c = fx_hello(f, "C", "NVIDIA H100 80GB HBM3", 10);
    sched_on_ready(f->s, c, 4, 10);
    assert_int_equal(fx_count(f, "C", MOETUNE__ENVELOPE__BODY_JOB), WIRE_MAX_HELD); /* of the 3 left */
    /* a second sweep: the idle H200 takes it and binds it */
    uint64_t sw2 = fx_submit(f, 2, 1, NULL);
    const Moetune__Job *jb = fx_last_job(f, "B");
    assert_non_null(jb);
    assert_int_equal(jb->sweep_id, sw2);
    assert_int_equal(fx_count(f, "B", MOETUNE__ENVELOPE__BODY_JOB), 2);
}

/* A Hello from a peer with routing id rid: worker id, GPU name, compiler, kernel hash, host
 * and pid as given (backend sim). sched_on_hello's code; *refused whether an Error{WIRE_E_REFUSED}
 * went to rid. */
static int hello_as(fx_t *f, const char *rid, const char *id, const char *gpu, const char *compiler, const char *hash,
                    const char *host, uint32_t pid, uint64_t now, bool *refused) {
    Moetune__Gpu g = MOETUNE__GPU__INIT;
    Moetune__Hello h = MOETUNE__HELLO__INIT;
    wire_env_t env;
    g.name = (char *)gpu;
    g.uuid = (char *)id;
    h.worker_id = (char *)id;
    h.host = (char *)host;
    h.pid = pid;
    h.backend = "sim";
    h.compiler = (char *)compiler;
    h.kernel_hash = (char *)hash;
    h.gpu = &g;
    wire_env_wrap(&env, &h.base);
    wire_env_t *out = fx_roundtrip(&env);
    size_t errors = fx_count(f, rid, MOETUNE__ENVELOPE__BODY_ERROR);
    int rc = sched_on_hello(f->s, (const uint8_t *)rid, strlen(rid), &out, now);
    wire_free(&out);
    *refused = fx_count(f, rid, MOETUNE__ENVELOPE__BODY_ERROR) > errors;
    if (*refused) {
        for (size_t i = f->n; i-- > 0;)
            if (strcmp(f->rid[i], rid) == 0 && f->msg[i]->body_case == MOETUNE__ENVELOPE__BODY_ERROR) {
                assert_int_equal(f->msg[i]->error->code, WIRE_E_REFUSED);
                break;
            }
    }
    return rc;
}

/* A lease is renewed by progress only: being heard, or a heartbeat that claims nothing, a
 * config the job does not wait for or one already claimed, renews nothing; a claim of a new
 * open config does, and the same claim does for at most the config timeout (60 s); a Result
 * does. A peer that takes jobs and only heartbeats loses them after one lease. */
static void claim(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t cfg, uint64_t now) {
    sched_on_heard(f->s, w, now);
    sched_on_progress(f->s, w, job, cfg, now);
}

static void test_leases_renewed_by_progress(void **state) {
    fx_t *f = *state;
    fx_start(f, 20000, 30000); /* silent 60 s: dead; the test's gaps stay shorter */
    fx_submit(f, 4, 2, NULL);
    fx_lease_t a = fx_lease(f, "A", "gpu", 0);
    heartbeat(f, a.w, &a.job, 1, 20000);
    claim(f, a.w, 0, 0, 20000);                /* claims nothing */
    claim(f, a.w, a.job, 9999, 20000);         /* not a config of the job */
    claim(f, a.w, a.job + 1, a.cfg[0], 20000); /* not its job */
    lapses(f, a.job, 30000, 30001);

    sched_on_ready(f->s, a.w, 1, 30002);
    const Moetune__Job *j = fx_last_job(f, "A");
    uint64_t job = j->job_id, tok = j->lease_token, c0 = j->configs[0]->config_id, c1 = j->configs[1]->config_id;
    claim(f, a.w, job, c0, 50000);  /* a config begun: the lease runs to 80000 */
    claim(f, a.w, job, c0, 75000);  /* the same one within its 60 s: to 105000 */
    claim(f, a.w, job, c0, 100000); /* to 130000 */
    claim(f, a.w, job, c0, 115000); /* 65 s on one config: no longer */
    sched_tick(f->s, 130000);
    assert_string_equal(sched_job_state(f->s, job, NULL), "leased");
    /* a config claimed again after another one is not progress: it was claimed once */
    claim(f, a.w, job, c1, 129000); /* to 159000 */
    claim(f, a.w, job, c0, 150000); /* c0 again: nothing */
    sched_tick(f->s, 159001);
    uint32_t att = 0;
    assert_string_equal(sched_job_state(f->s, job, &att), "pending");
    assert_int_equal(att, 2);

    /* a Result renews: the job's next lease lives on results */
    sched_on_ready(f->s, a.w, 1, 159002);
    j = fx_last_job(f, "A");
    assert_int_equal(j->job_id, job);
    tok = j->lease_token;
    assert_int_equal(result(f, a.w, job, tok, 10, c0, MOETUNE__STATUS__STATUS_OK, 180000), MT_OK);
    claim(f, a.w, job, c0, 190000); /* its result is in: not progress */
    sched_tick(f->s, 210000);
    assert_string_equal(sched_job_state(f->s, job, NULL), "leased");
    sched_tick(f->s, 210001); /* its third lapse: failed at the sweep's max_attempts (3) */
    assert_string_equal(sched_job_state(f->s, job, &att), "failed");
    assert_int_equal(att, 3);
}

/* A sweep is bound to the whole measuring identity of its first lease: a worker with the same
 * GPU name but another compiler or kernel build gets none of it; a worker whose identity
 * changes on a second Hello (same process) gives back what it holds. */
static void test_identity_binds_sweep(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 4, 1, NULL);
    bool refused = true;
    assert_int_equal(hello_as(f, "A", "A", "NVIDIA H200", "cuda_12_8", "k1", "h", 1, 0, &refused), MT_OK);
    assert_false(refused);
    sched_worker_t *a = sched_worker(f->s, (const uint8_t *)"A", 1);
    sched_on_ready(f->s, a, 1, 0);
    uint64_t held = fx_last_job(f, "A")->job_id;
    const char *other[][2] = {{"cuda_13_0", "k1"}, {"cuda_12_8", "k2"}};
    for (int i = 0; i < 2; i++) {
        const char *rid = i ? "C" : "B";
        assert_int_equal(hello_as(f, rid, rid, "NVIDIA H200", other[i][0], other[i][1], "h", 2 + i, 0, &refused),
                         MT_OK);
        sched_on_ready(f->s, sched_worker(f->s, (const uint8_t *)rid, 1), 2, 0);
        assert_int_equal(fx_count(f, rid, MOETUNE__ENVELOPE__BODY_JOB), 0);
    }
    sched_worker_t *d = NULL;
    assert_int_equal(hello_as(f, "D", "D", "NVIDIA H200", "cuda_12_8", "k1", "h", 9, 0, &refused), MT_OK);
    d = sched_worker(f->s, (const uint8_t *)"D", 1);
    sched_on_ready(f->s, d, 1, 0);
    assert_int_equal(fx_count(f, "D", MOETUNE__ENVELOPE__BODY_JOB), 1);
    /* A says hello again, from the same process, as another GPU: its lease goes back, no attempt */
    assert_int_equal(hello_as(f, "A", "A", "NVIDIA H100", "cuda_12_8", "k1", "h", 1, 5, &refused), MT_OK);
    assert_false(refused);
    uint32_t att = 9;
    assert_string_equal(sched_job_state(f->s, held, &att), "pending");
    assert_int_equal(att, 0);
    sched_on_ready(f->s, a, 2, 5);
    assert_int_equal(fx_count(f, "A", MOETUNE__ENVELOPE__BODY_JOB), 1); /* nothing new for an H100 */
}

/* A Hello is refused for good (Error WIRE_E_REFUSED) when its worker id is not its routing id,
 * or when a live worker of another process holds the id; the same process reconnecting, or
 * another one once the holder is dead, is welcomed. */
static void test_hello_refusals(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    bool refused = false;
    assert_int_equal(hello_as(f, "X", "Y", "gpu", "sim", "k", "h", 1, 0, &refused), MT_INVAL);
    assert_true(refused);
    assert_null(sched_worker(f->s, (const uint8_t *)"X", 1));
    assert_int_equal(hello_as(f, "W", "W", "gpu", "sim", "k", "h1", 10, 0, &refused), MT_OK);
    assert_false(refused);
    sched_worker_t *w = sched_worker(f->s, (const uint8_t *)"W", 1);
    sched_on_heard(f->s, w, 1000);
    assert_int_equal(hello_as(f, "W", "W", "gpu", "sim", "k", "h2", 10, 1500, &refused), MT_INVAL);
    assert_true(refused);
    assert_int_equal(hello_as(f, "W", "W", "gpu", "sim", "k", "h1", 11, 1600, &refused), MT_INVAL);
    assert_true(refused);
    assert_int_equal(fx_count(f, "W", MOETUNE__ENVELOPE__BODY_WELCOME), 1);
    assert_int_equal(hello_as(f, "W", "W", "gpu", "sim", "k", "h1", 10, 1700, &refused), MT_OK);
    assert_false(refused);
    assert_int_equal(fx_count(f, "W", MOETUNE__ENVELOPE__BODY_WELCOME), 2);
    sched_tick(f->s, 5000); /* silent 3.3 periods: dead */
    assert_null(sched_worker(f->s, (const uint8_t *)"W", 1));
    assert_int_equal(hello_as(f, "W", "W", "gpu", "sim", "k", "h2", 20, 5001, &refused), MT_OK);
    assert_false(refused);
}

/* A Result of config at batch sizes {1, 2} with these ok medians, delivered by w. */
static void result_at(fx_t *f, sched_worker_t *w, const Moetune__Job *j, uint64_t seq, uint64_t config,
                      const double med[2], uint64_t now) {
    Moetune__Measurement m[2], *pm[2] = {&m[0], &m[1]};
    for (int i = 0; i < 2; i++) {
        moetune__measurement__init(&m[i]);
        m[i].batch_size = (uint32_t)i + 1;
        m[i].status = MOETUNE__STATUS__STATUS_OK;
        m[i].median_us = m[i].min_us = m[i].mean_us = med[i];
        m[i].samples = 10;
    }
    assert_int_equal(fx_result_of(f, w, j->job_id, j->lease_token, seq, config, pm, 2, now, true), MT_OK);
}

/* The best median at batch size bs of job in the last Ack to rid: -1 when that Ack has no best
 * for the job. */
static double acked_best(fx_t *f, const char *rid, const Moetune__Job *job, uint32_t bs) {
    for (size_t i = f->n; i-- > 0;) {
        if (strcmp(f->rid[i], rid) || f->msg[i]->body_case != MOETUNE__ENVELOPE__BODY_ACK) continue;
        const Moetune__Ack *a = f->msg[i]->ack;
        for (size_t k = 0; k < a->n_best; k++) {
            if (a->best[k]->job_id != job->job_id) continue;
            assert_int_equal(a->best[k]->n_best_us, job->n_batch_sizes);
            for (size_t b = 0; b < job->n_batch_sizes; b++)
                if (job->batch_sizes[b] == bs) return a->best[k]->best_us[b];
        }
        return -1.0;
    }
    return -1.0;
}

/* Racing keeps a held job current: each Ack carries, for every racing job its worker holds, the
 * best committed so far at each of the job's batch sizes, whichever worker measured it; a job
 * leased before those results prunes against them from its next config on. */
static void test_ack_carries_best(void **state) {
    fx_t *f = *state;
    fx_spec_t x;
    Moetune__Submitted sub;
    fx_spec(&x, "bests", (const uint32_t[]){1, 2}, 3, 1, 4, 6); /* 12 configs, 2 jobs; racing on */
    fx_start(f, 1000, 30000);
    fx_submit_spec(f, &x, &sub);
    assert_int_equal(sub.jobs, 2);
    sched_worker_t *a = fx_hello(f, "A", "NVIDIA H200", 0);
    sched_worker_t *b = fx_hello(f, "B", "NVIDIA H200", 0);
    const Moetune__Job *ja = fx_take(f, "A", 0), *jb = fx_take(f, "B", 0);
    assert_true(ja->best_us[0] == 0 && jb->best_us[0] == 0); /* leased before any result */
    result_at(f, b, jb, 1, jb->configs[0]->config_id, (const double[2]){50.0, 60.0}, 1);
    assert_int_equal(sched_flush(f->s, 1), MT_OK);
    assert_true(acked_best(f, "B", jb, 1) == 50.0 && acked_best(f, "B", jb, 2) == 60.0);
    result_at(f, a, ja, 1, ja->configs[0]->config_id, (const double[2]){80.0, 55.0}, 2);
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
    /* A's job learns B's 50 at batch size 1 and keeps its own 55 at 2 */
    assert_true(acked_best(f, "A", ja, 1) == 50.0);
    assert_true(acked_best(f, "A", ja, 2) == 55.0);
}

int main(void) {
    mt_log_init("test_sched", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_credits, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_warm_start_not_forged, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_leases_renewed_by_progress, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_identity_binds_sweep, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_hello_refusals, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_ack_carries_best, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_tokens_and_completion, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_silent_workers_and_attempts, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry_and_bye, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_crash_retry_and_quarantine, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_avoid_worker_alone, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_restart_and_filter, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_restart_holder_gone, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_rehello_heartbeat, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lease_discipline, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_hello_while_locked, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_job_rows_commit_fails, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_daemon_hostile_input, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_daemon_plans_off_the_loop, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_daemon_plan_storage_error, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_racing_bests, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_results_requeue, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_crash_allocation_failures, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_mixed_fleet_binds_sweep, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failure_scenarios, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_tail, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_not_listed, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_bounds, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_restart, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_meet, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_tells_holder, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_leaves_received, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_split_prefers_slow_shape, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
