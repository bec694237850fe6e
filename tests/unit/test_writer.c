/* test_writer.c - the database writer thread and the scheduler's asynchronous
 * commit: a job's outcome comes back with its argument, a failed job rolls back,
 * one job at a time; a scheduler batch committed on the writer acks its results,
 * and a failed one keeps them buffered and unacknowledged until a retry commits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "writer.h"
#include "mt.h"
#include "scheduler.h"
#include "store.h"
#include "wire.h"
#include "sched_fx.h"

/* ---- writer thread alone */

typedef struct {
    const char *uuid;
    int fail; /* return this after the write */
} wjob_t;

static mt_status_t write_device(store_t *db, void *arg) {
    wjob_t *j = arg;
    Moetune__Gpu g = MOETUNE__GPU__INIT;
    uint64_t id = 0;
    g.name = "sim";
    g.uuid = (char *)j->uuid;
    int rc = store_device_upsert(db, &g, &id);
    return rc ? rc : j->fail;
}

/* What writer_poll returns with a finished job: its argument, its outcome and the reason. */
typedef struct {
    void *arg;
    int rc;
    char why[256];
} done_t;

/* writer_poll(w, ms) into *d; its code. */
static int poll_done(writer_t *w, int ms, done_t *d) {
    return writer_poll(w, ms, &d->arg, &d->rc, d->why, sizeof d->why);
}

/* Opens f's store and a writer on the same file (both asserted); the writer. */
static writer_t *open_writer(fx_t *f) {
    char err[256];
    writer_t *w = NULL;
    assert_int_equal(store_open(f->path, &f->db, err, sizeof err), MT_OK);
    assert_int_equal(writer_new(f->path, &w, err, sizeof err), MT_OK);
    return w;
}

static void test_writer_commit_and_failure(void **state) {
    fx_t *f = *state;
    done_t d = {.rc = -1};
    writer_t *w = open_writer(f);
    assert_true(writer_fd(w) >= 0);
    assert_false(writer_busy(w));
    assert_int_equal(poll_done(w, 0, &d), MT_AGAIN);

    wjob_t ok = {"GPU-ok", MT_OK}, bad = {"GPU-bad", MT_IO};
    assert_int_equal(writer_submit(w, write_device, &ok), MT_OK);
    assert_true(writer_busy(w));
    assert_int_equal(writer_submit(w, write_device, &bad), MT_BUSY); /* one at a time */
    assert_int_equal(poll_done(w, -1, &d), MT_OK);
    assert_ptr_equal(d.arg, &ok);
    assert_int_equal(d.rc, MT_OK);
    assert_false(writer_busy(w));
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-ok'"), 1);

    assert_int_equal(writer_submit(w, write_device, &bad), MT_OK);
    assert_int_equal(poll_done(w, -1, &d), MT_OK);
    assert_ptr_equal(d.arg, &bad);
    assert_int_equal(d.rc, MT_IO);
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-bad'"), 0); /* rolled back */
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM devices"), 1);
    writer_destroy(&w);
    assert_null(w);
    writer_destroy(&w);
}

/* writer_submit_prep: prep runs first, outside the transaction (its write stays when the
 * job's fn fails and rolls back); a failing prep skips fn and is reported with its code. */
typedef struct {
    wjob_t pre, fn;
    int pre_rc;
    int fn_calls;
} pjob_t;

static mt_status_t prep_device(store_t *db, void *arg) {
    pjob_t *j = arg;
    int rc = write_device(db, &j->pre);
    return rc ? rc : j->pre_rc;
}

static mt_status_t fn_device(store_t *db, void *arg) {
    pjob_t *j = arg;
    j->fn_calls++;
    return write_device(db, &j->fn);
}

static void test_writer_prep(void **state) {
    fx_t *f = *state;
    done_t d = {.rc = -1};
    writer_t *w = open_writer(f);
    pjob_t a = {.pre = {"GPU-pre-a", MT_OK}, .fn = {"GPU-fn-a", MT_IO}, .pre_rc = MT_OK};
    assert_int_equal(writer_submit_prep(w, prep_device, fn_device, &a), MT_OK);
    assert_int_equal(poll_done(w, -1, &d), MT_OK);
    assert_ptr_equal(d.arg, &a);
    assert_int_equal(d.rc, MT_IO);
    assert_int_equal(a.fn_calls, 1);
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-pre-a'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-fn-a'"), 0);
    pjob_t b = {.pre = {"GPU-pre-b", MT_OK}, .fn = {"GPU-fn-b", MT_OK}, .pre_rc = MT_INVAL};
    assert_int_equal(writer_submit_prep(w, prep_device, fn_device, &b), MT_OK);
    assert_int_equal(poll_done(w, -1, &d), MT_OK);
    assert_int_equal(d.rc, MT_INVAL);
    assert_string_equal(d.why, "");
    assert_int_equal(b.fn_calls, 0);
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-fn-b'"), 0);
    pjob_t c = {.pre = {"GPU-pre-c", MT_OK}, .fn = {"GPU-fn-c", MT_OK}, .pre_rc = MT_OK};
    assert_int_equal(writer_submit_prep(w, prep_device, fn_device, &c), MT_OK);
    assert_int_equal(poll_done(w, -1, &d), MT_OK);
    assert_int_equal(d.rc, MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-fn-c'"), 1);
    writer_destroy(&w);
}

static void test_writer_bad_path(void **state) {
    (void)state;
    char err[256] = "";
    writer_t *w = NULL;
    assert_int_not_equal(writer_new("/nonexistent-dir/x/y.db", &w, err, sizeof err), MT_OK);
    assert_null(w);
    assert_true(strlen(err) > 0);
}

/* ---- scheduler batches through the writer */

static void test_batch_failure_keeps_results(void **state) {
    fx_t *f = *state;
    char err[256];
    writer_t *wr = NULL;
    sched_batch_t *b = NULL;
    done_t d = {.rc = -1};
    fx_start(f, 1000, 30000);
    uint64_t sweep = fx_submit(f, 2, 16, NULL);
    fx_lease_t w = fx_lease(f, "w1", "sim", 0);
    assert_int_equal(w.j->n_configs, 2);
    assert_int_equal(fx_result(f, w.w, w.job, w.tok, 1, w.cfg[0], MOETUNE__STATUS__STATUS_OK, 1, true), MT_OK);

    /* a batch that fails: nothing acked, the result is kept */
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    assert_int_equal(sched_batch_results(b), 1);
    assert_int_equal(sched_pending(f->s), 1);
    sched_batch_t *b2 = NULL;
    assert_int_equal(sched_batch_take(f->s, &b2), MT_BUSY);
    assert_int_equal(sched_flush(f->s, 1), MT_BUSY);
    /* a result arriving while the batch is out */
    assert_int_equal(fx_result(f, w.w, w.job, w.tok, 2, w.cfg[1], MOETUNE__STATUS__STATUS_OK, 2, true), MT_OK);
    assert_int_equal(sched_pending(f->s), 2);
    sched_batch_done(f->s, b, MT_IO, "disk I/O error", 3);
    assert_int_equal(sched_counters(f->s)->commit_failures, 1);
    assert_int_equal(sched_counters(f->s)->results_committed, 0);
    assert_int_equal(sched_pending(f->s), 2);
    assert_false(fx_acked(f, "w1", 1));
    assert_false(fx_acked(f, "w1", 2));
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM results"), 0);

    /* the retry goes through the writer thread on its own connection */
    assert_int_equal(writer_new(f->path, &wr, err, sizeof err), MT_OK);
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    assert_int_equal(sched_batch_results(b), 2);
    assert_int_equal(writer_submit(wr, sched_batch_write, b), MT_OK);
    assert_int_equal(poll_done(wr, -1, &d), MT_OK);
    assert_ptr_equal(d.arg, b);
    assert_int_equal(d.rc, MT_OK);
    sched_batch_done(f->s, d.arg, d.rc, d.why, 4);
    assert_true(fx_acked(f, "w1", 1));
    assert_true(fx_acked(f, "w1", 2));
    assert_int_equal(sched_pending(f->s), 0);
    assert_int_equal(sched_counters(f->s)->results_committed, 4);
    assert_int_equal(fx_query_int(f, "SELECT count(*) FROM results"), 4);
    assert_string_equal(sched_job_state(f->s, w.job, NULL), "done");

    /* the finished job and sweep are written by the next batch */
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    assert_int_equal(sched_batch_results(b), 0);
    assert_int_equal(writer_submit(wr, sched_batch_write, b), MT_OK);
    assert_int_equal(poll_done(wr, -1, &d), MT_OK);
    sched_batch_done(f->s, d.arg, d.rc, d.why, 5);
    char sql[128];
    assert_int_equal(fx_query_int(f, mt_fmt(sql, sizeof sql, "SELECT count(*) FROM jobs WHERE id=%llu AND state='done'",
                                            (unsigned long long)w.job)),
                     1);
    assert_int_equal(
        fx_query_int(f, mt_fmt(sql, sizeof sql, "SELECT count(*) FROM sweeps WHERE id=%llu AND state='done'",
                               (unsigned long long)sweep)),
        1);
    assert_int_equal(sched_batch_take(f->s, &b), MT_AGAIN);
    writer_destroy(&wr);
}

/* A batch is capped at SCHED_BATCH_MAX results; the rest waits for the next. */
static void test_batch_cap(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 2, 16, NULL);
    fx_lease_t w = fx_lease(f, "w1", "sim", 0);
    /* the same config resent: each is buffered (inserts are idempotent) */
    for (uint64_t seq = 1; seq <= SCHED_BATCH_MAX + 3; seq++)
        assert_int_equal(fx_result(f, w.w, w.job, w.tok, seq, w.cfg[0], MOETUNE__STATUS__STATUS_OK, 1, true), MT_OK);
    assert_int_equal(fx_commit_batch(f, 2), SCHED_BATCH_MAX);
    assert_int_equal(sched_pending(f->s), 3);
    assert_int_equal(sched_counters(f->s)->results_committed, 2); /* one config, two batch sizes */
    assert_true(fx_acked(f, "w1", SCHED_BATCH_MAX));
    assert_false(fx_acked(f, "w1", SCHED_BATCH_MAX + 1));
    assert_int_equal(sched_flush(f->s, 3), MT_OK);
    assert_int_equal(sched_pending(f->s), 0);
    assert_true(fx_acked(f, "w1", SCHED_BATCH_MAX + 3));
}

/* A backlog (more results than a batch) commits first, alone, the results of a shape all of whose
 * configs have sent theirs, so its pass (and its phase 2) waits for one short commit, not for
 * the whole backlog; arrival order otherwise. C's sweep has 3 more jobs pending and C sends
 * SCHED_BATCH_MAX + 2 copies of one result; A's sweep, one job of 2 configs, sends both, last:
 * the first batch is A's 2, and A's job is done after it; then C's, a full batch and the rest. */
static void test_batch_backlog_order(void **state) {
    fx_t *f = *state;
    fx_start(f, 1000, 30000);
    fx_submit(f, 2, 16, NULL);
    fx_lease_t a = fx_lease(f, "A", "sim", 0);
    assert_int_equal(a.j->n_configs, 2);
    fx_submit(f, 4, 1, NULL);
    fx_lease_t c = fx_lease(f, "C", "sim", 0); /* the second sweep's first job: 3 more pending */
    assert_int_equal(c.j->n_configs, 1);
    assert_int_not_equal(c.j->sweep_id, a.j->sweep_id);
    for (uint64_t seq = 1; seq <= SCHED_BATCH_MAX + 2; seq++)
        assert_int_equal(fx_result(f, c.w, c.job, c.tok, seq, c.cfg[0], MOETUNE__STATUS__STATUS_OK, 1, true), MT_OK);
    for (uint64_t i = 0; i < 2; i++)
        assert_int_equal(fx_result(f, a.w, a.job, a.tok, i + 1, a.cfg[i], MOETUNE__STATUS__STATUS_OK, 1, true), MT_OK);
    assert_int_equal(fx_commit_batch(f, 2), 2);
    assert_true(fx_acked(f, "A", 1));
    assert_true(fx_acked(f, "A", 2));
    assert_string_equal(sched_job_state(f->s, a.job, NULL), "done");
    assert_false(fx_acked(f, "C", 1));
    assert_int_equal(sched_pending(f->s), SCHED_BATCH_MAX + 2);
    assert_int_equal(fx_commit_batch(f, 3), SCHED_BATCH_MAX);
    assert_true(fx_acked(f, "C", SCHED_BATCH_MAX));
    assert_false(fx_acked(f, "C", SCHED_BATCH_MAX + 1));
    assert_int_equal(sched_flush(f->s, 4), MT_OK);
    assert_int_equal(sched_pending(f->s), 0);
    assert_true(fx_acked(f, "C", SCHED_BATCH_MAX + 2));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_writer_commit_and_failure, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_writer_prep, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_writer_bad_path, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_batch_failure_keeps_results, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_batch_cap, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_batch_backlog_order, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
