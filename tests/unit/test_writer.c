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

#define MAX_MSGS 1024

typedef struct {
    char dir[64], path[128];
    store_t *db;
    sched_t *s;
    char rid[MAX_MSGS][32];
    wire_env_t *msg[MAX_MSGS];
    size_t n;
} fx_t;

static int capture(void *ctx, const uint8_t *rid, size_t len, wire_env_t *env) {
    fx_t *f = ctx;
    uint8_t *buf = NULL;
    size_t blen = 0;
    int code = 0;
    char err[128];
    assert_true(f->n < MAX_MSGS);
    assert_int_equal(wire_pack(env, &buf, &blen), MT_OK);
    assert_int_equal(wire_unpack(buf, blen, WIRE_DEFAULT_MAX_BYTES, &f->msg[f->n], &code, err, sizeof err), MT_OK);
    free(buf);
    snprintf(f->rid[f->n], sizeof f->rid[0], "%.*s", (int)len, (const char *)rid);
    f->n++;
    return MT_OK;
}

static void fx_clear(fx_t *f) {
    for (size_t i = 0; i < f->n; i++) wire_free(&f->msg[i]);
    f->n = 0;
}

static void fx_start(fx_t *f, uint32_t hb, uint32_t lease) {
    char err[256];
    sched_opts_t o = {.heartbeat_ms = hb, .lease_ms = lease, .send = capture, .send_ctx = f};
    if (!f->db) assert_int_equal(store_open(f->path, &f->db, err, sizeof err), MT_OK);
    f->s = sched_new(f->db, &o, 0, err, sizeof err);
    assert_non_null(f->s);
}

static void fx_stop(fx_t *f) {
    sched_destroy(&f->s);
    store_close(&f->db);
    fx_clear(f);
}

static int setup(void **state) {
    fx_t *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/mt_writer_XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->path, sizeof f->path, "%s/t.db", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx_t *f = *state;
    char p[160];
    const char *sfx[] = {"", "-wal", "-shm"};
    fx_stop(f);
    for (int i = 0; i < 3; i++) unlink(mt_fmt(p, sizeof p, "%s%s", f->path, sfx[i]));
    rmdir(f->dir);
    free(f);
    return 0;
}

static int64_t query_int(fx_t *f, const char *sql) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* A small sweep: one shape, n_stages configs (stages 2..), batch sizes {1, 2}. */
static uint64_t submit(fx_t *f, uint32_t n_stages, uint32_t chunk, const char *filter) {
    static uint32_t bm[] = {16}, bn[] = {64}, bk[] = {64}, gm[] = {1}, nw[] = {4}, ns[] = {2, 3, 4, 5};
    static uint32_t bs[] = {2, 1};
    Moetune__Space sp = MOETUNE__SPACE__INIT;
    Moetune__Shape sh = MOETUNE__SHAPE__INIT;
    Moetune__Shape *shp = &sh;
    Moetune__SweepSpec spec = MOETUNE__SWEEP_SPEC__INIT;
    Moetune__Submitted sub;
    char err[256];
    sp.n_block_m = 1, sp.block_m = bm, sp.n_block_n = 1, sp.block_n = bn, sp.n_block_k = 1, sp.block_k = bk;
    sp.n_group_m = 1, sp.group_m = gm, sp.n_num_warps = 1, sp.num_warps = nw;
    sp.n_num_stages = n_stages, sp.num_stages = ns;
    sh.e = 8, sh.n = 256, sh.k = 256, sh.topk = 2;
    spec.name = "small";
    spec.n_shapes = 1, spec.shapes = &shp;
    spec.n_batch_sizes = 2, spec.batch_sizes = bs;
    spec.space = &sp;
    spec.chunk = chunk;
    spec.device_filter = (char *)filter;
    assert_int_equal(sched_submit(f->s, &spec, &sub, 0, err, sizeof err), MT_OK);
    assert_int_equal(sub.configs_valid, n_stages);
    return sub.sweep_id;
}

static sched_worker_t *hello(fx_t *f, const char *id, const char *gpu, uint64_t now) {
    Moetune__Hello h = MOETUNE__HELLO__INIT;
    Moetune__Gpu g = MOETUNE__GPU__INIT;
    wire_env_t env, *out = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    int code;
    char err[128];
    g.name = (char *)gpu;
    g.uuid = (char *)id;
    h.worker_id = (char *)id;
    h.host = "host";
    h.pid = 42;
    h.backend = "sim";
    h.compiler = "sim";
    h.gpu = &g;
    wire_env_init(&env);
    env.body_case = MOETUNE__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    assert_int_equal(wire_pack(&env, &buf, &len), MT_OK);
    assert_int_equal(wire_unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &out, &code, err, sizeof err), MT_OK);
    free(buf);
    assert_int_equal(sched_on_hello(f->s, (const uint8_t *)id, strlen(id), &out, now), MT_OK);
    assert_null(out);
    sched_worker_t *w = sched_worker(f->s, (const uint8_t *)id, strlen(id));
    assert_non_null(w);
    return w;
}

/* Sends a Result for every batch size {1, 2} with one status. Returns sched_on_result's code. */
static int result(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
                  Moetune__Status status, uint64_t now) {
    Moetune__Measurement m[2], *pm[2] = {&m[0], &m[1]};
    Moetune__Result r = MOETUNE__RESULT__INIT;
    wire_env_t env, *out = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    int code;
    char err[128];
    for (int i = 0; i < 2; i++) {
        moetune__measurement__init(&m[i]);
        m[i].batch_size = (uint32_t)i + 1;
        m[i].status = status;
        m[i].median_us = m[i].min_us = m[i].mean_us = 10.0 + i;
        m[i].samples = 10;
    }
    r.job_id = job, r.lease_token = token, r.seq = seq, r.config_id = config;
    r.n_measurements = 2, r.measurements = pm;
    wire_env_init(&env);
    env.body_case = MOETUNE__ENVELOPE__BODY_RESULT;
    env.result = &r;
    assert_int_equal(wire_pack(&env, &buf, &len), MT_OK);
    assert_int_equal(wire_unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &out, &code, err, sizeof err), MT_OK);
    free(buf);
    sched_on_heard(f->s, w, now);
    int rc = sched_on_result(f->s, w, &out, now);
    wire_free(&out);
    return rc;
}

static const Moetune__Job *last_job(fx_t *f, const char *rid) {
    for (size_t i = f->n; i-- > 0;)
        if (strcmp(f->rid[i], rid) == 0 && f->msg[i]->body_case == MOETUNE__ENVELOPE__BODY_JOB) return f->msg[i]->job;
    return NULL;
}

static bool acked(fx_t *f, const char *rid, uint64_t seq) {
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->rid[i], rid) || f->msg[i]->body_case != MOETUNE__ENVELOPE__BODY_ACK) continue;
        for (size_t k = 0; k < f->msg[i]->ack->n_seqs; k++)
            if (f->msg[i]->ack->seqs[k] == seq) return true;
    }
    return false;
}


/* ---- writer thread alone */

typedef struct {
    const char *uuid;
    int fail;                /* return this after the write */
} wjob_t;

static int write_device(store_t *db, void *arg) {
    wjob_t *j = arg;
    Moetune__Gpu g = MOETUNE__GPU__INIT;
    uint64_t id = 0;
    g.name = "sim";
    g.uuid = (char *)j->uuid;
    int rc = store_device_upsert(db, &g, &id);
    return rc ? rc : j->fail;
}

static void test_writer_commit_and_failure(void **state) {
    fx_t *f = *state;
    char err[256], why[256];
    writer_t *w = NULL;
    void *arg = NULL;
    int rc = -1;
    assert_int_equal(store_open(f->path, &f->db, err, sizeof err), MT_OK);
    assert_int_equal(writer_new(f->path, &w, err, sizeof err), MT_OK);
    assert_true(writer_fd(w) >= 0);
    assert_false(writer_busy(w));
    assert_int_equal(writer_poll(w, 0, &arg, &rc, why, sizeof why), MT_AGAIN);

    wjob_t ok = {"GPU-ok", MT_OK}, bad = {"GPU-bad", MT_IO};
    assert_int_equal(writer_submit(w, write_device, &ok), MT_OK);
    assert_true(writer_busy(w));
    assert_int_equal(writer_submit(w, write_device, &bad), MT_BUSY); /* one at a time */
    assert_int_equal(writer_poll(w, -1, &arg, &rc, why, sizeof why), MT_OK);
    assert_ptr_equal(arg, &ok);
    assert_int_equal(rc, MT_OK);
    assert_false(writer_busy(w));
    assert_int_equal(query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-ok'"), 1);

    assert_int_equal(writer_submit(w, write_device, &bad), MT_OK);
    assert_int_equal(writer_poll(w, -1, &arg, &rc, why, sizeof why), MT_OK);
    assert_ptr_equal(arg, &bad);
    assert_int_equal(rc, MT_IO);
    assert_int_equal(query_int(f, "SELECT count(*) FROM devices WHERE uuid='GPU-bad'"), 0); /* rolled back */
    assert_int_equal(query_int(f, "SELECT count(*) FROM devices"), 1);
    writer_destroy(&w);
    assert_null(w);
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
    char err[256], why[256];
    writer_t *wr = NULL;
    sched_batch_t *b = NULL;
    void *arg = NULL;
    int rc = -1;
    fx_start(f, 1000, 30000);
    uint64_t sweep = submit(f, 2, 16, NULL);
    sched_worker_t *w = hello(f, "w1", "sim", 0);
    sched_on_ready(f->s, w, 1, 0);
    const Moetune__Job *job = last_job(f, "w1");
    assert_non_null(job);
    assert_int_equal(job->n_configs, 2);
    uint64_t jid = job->job_id, tok = job->lease_token;
    uint64_t c0 = job->configs[0]->config_id, c1 = job->configs[1]->config_id;
    assert_int_equal(result(f, w, jid, tok, 1, c0, MOETUNE__STATUS__STATUS_OK, 1), MT_OK);

    /* a batch that fails: nothing acked, the result is kept */
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    assert_int_equal(sched_batch_results(b), 1);
    assert_int_equal(sched_pending(f->s), 1);
    sched_batch_t *b2 = NULL;
    assert_int_equal(sched_batch_take(f->s, &b2), MT_BUSY);
    assert_int_equal(sched_flush(f->s, 1), MT_BUSY);
    /* a result arriving while the batch is out */
    assert_int_equal(result(f, w, jid, tok, 2, c1, MOETUNE__STATUS__STATUS_OK, 2), MT_OK);
    assert_int_equal(sched_pending(f->s), 2);
    sched_batch_done(f->s, b, MT_IO, "disk I/O error", 3);
    assert_int_equal(sched_counters(f->s)->commit_failures, 1);
    assert_int_equal(sched_counters(f->s)->results_committed, 0);
    assert_int_equal(sched_pending(f->s), 2);
    assert_false(acked(f, "w1", 1));
    assert_false(acked(f, "w1", 2));
    assert_int_equal(query_int(f, "SELECT count(*) FROM results"), 0);

    /* the retry goes through the writer thread on its own connection */
    assert_int_equal(writer_new(f->path, &wr, err, sizeof err), MT_OK);
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    assert_int_equal(sched_batch_results(b), 2);
    assert_int_equal(writer_submit(wr, sched_batch_write, b), MT_OK);
    assert_int_equal(writer_poll(wr, -1, &arg, &rc, why, sizeof why), MT_OK);
    assert_ptr_equal(arg, b);
    assert_int_equal(rc, MT_OK);
    sched_batch_done(f->s, arg, rc, why, 4);
    assert_true(acked(f, "w1", 1));
    assert_true(acked(f, "w1", 2));
    assert_int_equal(sched_pending(f->s), 0);
    assert_int_equal(sched_counters(f->s)->results_committed, 4);
    assert_int_equal(query_int(f, "SELECT count(*) FROM results"), 4);
    assert_string_equal(sched_job_state(f->s, jid, NULL), "done");

    /* the finished job and sweep are written by the next batch */
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    assert_int_equal(sched_batch_results(b), 0);
    assert_int_equal(writer_submit(wr, sched_batch_write, b), MT_OK);
    assert_int_equal(writer_poll(wr, -1, &arg, &rc, why, sizeof why), MT_OK);
    sched_batch_done(f->s, arg, rc, why, 5);
    char sql[128];
    assert_int_equal(query_int(f, mt_fmt(sql, sizeof sql, "SELECT count(*) FROM jobs WHERE id=%llu AND state='done'",
                                         (unsigned long long)jid)),
                     1);
    assert_int_equal(query_int(f, mt_fmt(sql, sizeof sql, "SELECT count(*) FROM sweeps WHERE id=%llu AND state='done'",
                                         (unsigned long long)sweep)),
                     1);
    assert_int_equal(sched_batch_take(f->s, &b), MT_AGAIN);
    writer_destroy(&wr);
}

/* A batch is capped at SCHED_BATCH_MAX results; the rest waits for the next. */
static void test_batch_cap(void **state) {
    fx_t *f = *state;
    sched_batch_t *b = NULL;
    fx_start(f, 1000, 30000);
    submit(f, 2, 16, NULL);
    sched_worker_t *w = hello(f, "w1", "sim", 0);
    sched_on_ready(f->s, w, 1, 0);
    const Moetune__Job *job = last_job(f, "w1");
    uint64_t jid = job->job_id, tok = job->lease_token, c0 = job->configs[0]->config_id;
    /* the same config resent: each is buffered (inserts are idempotent) */
    for (uint64_t seq = 1; seq <= SCHED_BATCH_MAX + 3; seq++)
        assert_int_equal(result(f, w, jid, tok, seq, c0, MOETUNE__STATUS__STATUS_OK, 1), MT_OK);
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    assert_int_equal(sched_batch_results(b), SCHED_BATCH_MAX);
    assert_int_equal(store_begin(f->db), MT_OK);
    assert_int_equal(sched_batch_write(f->db, b), MT_OK);
    assert_int_equal(store_commit(f->db), MT_OK);
    sched_batch_done(f->s, b, MT_OK, NULL, 2);
    assert_int_equal(sched_pending(f->s), 3);
    assert_int_equal(sched_counters(f->s)->results_committed, 2); /* one config, two batch sizes */
    assert_true(acked(f, "w1", SCHED_BATCH_MAX));
    assert_false(acked(f, "w1", SCHED_BATCH_MAX + 1));
    assert_int_equal(sched_flush(f->s, 3), MT_OK);
    assert_int_equal(sched_pending(f->s), 0);
    assert_true(acked(f, "w1", SCHED_BATCH_MAX + 3));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_writer_commit_and_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_bad_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_failure_keeps_results, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_cap, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
