/* sched_fx.c - the scheduler test fixture. See sched_fx.h. */
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

#include "mt.h"
#include "sched_fx.h"
#include "tmpdb.h"

wire_env_t *fx_roundtrip(wire_env_t *env) {
    uint8_t *buf = NULL;
    size_t len = 0;
    wire_env_t *out = NULL;
    int code = 0;
    char err[128];
    assert_int_equal(wire_pack(env, &buf, &len), MT_OK);
    assert_int_equal(wire_unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &out, &code, err, sizeof err), MT_OK);
    free(buf);
    return out;
}

mt_status_t fx_capture(void *ctx, const uint8_t *rid, size_t len, wire_env_t *env) {
    fx_t *f = ctx;
    assert_true(f->n < MAX_MSGS);
    f->msg[f->n] = fx_roundtrip(env);
    snprintf(f->rid[f->n], sizeof f->rid[0], "%.*s", (int)len, (const char *)rid);
    f->n++;
    return MT_OK;
}

void fx_clear(fx_t *f) {
    for (size_t i = 0; i < f->n; i++) wire_free(&f->msg[i]);
    f->n = 0;
}

void fx_start(fx_t *f, uint32_t hb, uint32_t lease) {
    char err[256];
    sched_opts_t o = {.heartbeat_ms = hb, .lease_ms = lease, .send = fx_capture, .send_ctx = f};
    if (!f->db) assert_int_equal(store_open(f->path, &f->db, err, sizeof err), MT_OK);
    f->s = sched_new(f->db, &o, 0, err, sizeof err);
    assert_non_null(f->s);
}

void fx_stop(fx_t *f) {
    sched_destroy(&f->s);
    store_close(&f->db);
    fx_clear(f);
}

void fx_fresh(fx_t *f) {
    fx_stop(f);
    tmpdb_remove(&f->tmp);
    assert_int_equal(tmpdb_make(&f->tmp, "test"), 0);
    f->path = f->tmp.path;
}

int fx_setup(void **state) {
    fx_t *f = calloc(1, sizeof *f);
    if (!f || tmpdb_make(&f->tmp, "test") != 0) return -1;
    f->path = f->tmp.path;
    *state = f;
    return 0;
}

int fx_teardown(void **state) {
    fx_t *f = *state;
    fx_stop(f);
    tmpdb_remove(&f->tmp);
    free(f);
    return 0;
}

int64_t fx_query_int(fx_t *f, const char *sql) { return tmpdb_query_int(f->path, sql); }

void fx_spec(fx_spec_t *x, const char *name, const uint32_t bs[2], size_t n_group_m, size_t n_warps, size_t n_stages,
             uint32_t chunk) {
    static const uint32_t gm[] = {1, 16, 32, 64}, nw[] = {4, 8}, ns[] = {2, 3, 4, 5};
    assert_true(n_group_m <= 4 && n_warps <= 2 && n_stages <= 4);
    x->bm[0] = 16, x->bn[0] = 64, x->bk[0] = 64;
    memcpy(x->gm, gm, sizeof gm), memcpy(x->nw, nw, sizeof nw), memcpy(x->ns, ns, sizeof ns);
    x->bs[0] = bs[0], x->bs[1] = bs[1];
    moetune__space__init(&x->sp);
    moetune__shape__init(&x->sh);
    moetune__sweep_spec__init(&x->spec);
    x->sp.n_block_m = 1, x->sp.block_m = x->bm, x->sp.n_block_n = 1, x->sp.block_n = x->bn;
    x->sp.n_block_k = 1, x->sp.block_k = x->bk;
    x->sp.n_group_m = n_group_m, x->sp.group_m = x->gm, x->sp.n_num_warps = n_warps, x->sp.num_warps = x->nw;
    x->sp.n_num_stages = n_stages, x->sp.num_stages = x->ns;
    x->sh.e = 8, x->sh.n = 256, x->sh.k = 256, x->sh.topk = 2;
    x->shp = &x->sh;
    x->spec.name = (char *)name;
    x->spec.n_shapes = 1, x->spec.shapes = &x->shp;
    x->spec.n_batch_sizes = 2, x->spec.batch_sizes = x->bs;
    x->spec.space = &x->sp;
    x->spec.chunk = chunk;
    x->spec.no_guard = true; /* the scheduler's tests count the search's own rows; test_guard turns it on */
    moetune__measure__init(&x->measure);
    x->measure.decide_margin = -1;
    x->spec.measure = &x->measure;
}

/* Submits spec through the scheduler's plan steps, as the coordinator does with its writer
 * thread, here on the fixture's store in the calling thread. */
static int fx_plan_submit(sched_t *s, store_t *db, const Moetune__SweepSpec *spec, Moetune__Submitted *out,
                          uint64_t now_ms, char *err, size_t errlen) {
    sched_plan_t *sp = NULL;
    char why[512] = "";
    int rc = sched_plan_new(spec, &sp, err, errlen);
    if (rc) return rc;
    sched_plan_device(s, sp, NULL);
    rc = sched_plan_build(db, sp);
    if (!rc) {
        rc = store_begin(db);
        if (!rc) rc = sched_plan_write(db, sp);
        if (!rc) rc = store_commit(db);
        if (rc) {
            snprintf(why, sizeof why, "%s", store_errmsg(db));
            store_rollback(db);
        }
    }
    return sched_plan_done(s, &sp, rc, why, out, now_ms, err, errlen);
}

void fx_submit_spec(fx_t *f, fx_spec_t *x, Moetune__Submitted *sub) {
    char err[256];
    int rc = fx_plan_submit(f->s, f->db, &x->spec, sub, 0, err, sizeof err);
    if (rc) print_error("submit: %s\n", err);
    assert_int_equal(rc, MT_OK);
}

int fx_submit_try(fx_t *f, const char *name, uint32_t n_stages, uint32_t chunk, const char *filter, uint64_t *id,
                  uint32_t *valid) {
    fx_spec_t x;
    Moetune__Submitted sub;
    char err[256];
    fx_spec(&x, name, (const uint32_t[]){2, 1}, 1, 1, n_stages, chunk);
    x.spec.device_filter = (char *)filter;
    int rc = fx_plan_submit(f->s, f->db, &x.spec, &sub, 0, err, sizeof err);
    *id = rc ? 0 : sub.sweep_id;
    if (valid) *valid = rc ? 0 : sub.configs_valid;
    return rc;
}

uint64_t fx_submit(fx_t *f, uint32_t n_stages, uint32_t chunk, const char *filter) {
    uint64_t id = 0;
    uint32_t valid = 0;
    assert_int_equal(fx_submit_try(f, "small", n_stages, chunk, filter, &id, &valid), MT_OK);
    assert_int_equal(valid, n_stages);
    return id;
}

int fx_hello_send(fx_t *f, const char *id, const char *gpu, uint64_t now, bool *left) {
    Moetune__Hello h = MOETUNE__HELLO__INIT;
    Moetune__Gpu g = MOETUNE__GPU__INIT;
    wire_env_t env;
    g.name = (char *)gpu;
    g.uuid = (char *)id;
    h.worker_id = (char *)id;
    h.host = "host";
    h.pid = 42;
    h.backend = "sim";
    h.compiler = "sim";
    h.gpu = &g;
    wire_env_wrap(&env, &h.base);
    wire_env_t *out = fx_roundtrip(&env);
    int rc = sched_on_hello(f->s, (const uint8_t *)id, strlen(id), &out, now);
    *left = out != NULL;
    wire_free(&out);
    return rc;
}

sched_worker_t *fx_hello(fx_t *f, const char *id, const char *gpu, uint64_t now) {
    bool left = true;
    assert_int_equal(fx_hello_send(f, id, gpu, now, &left), MT_OK);
    assert_false(left);
    sched_worker_t *w = sched_worker(f->s, (const uint8_t *)id, strlen(id));
    assert_non_null(w);
    return w;
}

int fx_result_of(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
                 Moetune__Measurement **m, size_t n, uint64_t now, bool heard) {
    Moetune__Result r = MOETUNE__RESULT__INIT;
    wire_env_t env;
    r.job_id = job, r.lease_token = token, r.seq = seq, r.config_id = config;
    r.n_measurements = n, r.measurements = m;
    wire_env_wrap(&env, &r.base);
    wire_env_t *out = fx_roundtrip(&env);
    if (heard) sched_on_heard(f->s, w, now);
    int rc = sched_on_result(f->s, w, &out, now);
    wire_free(&out);
    return rc;
}

int fx_result(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
              Moetune__Status status, uint64_t now, bool heard) {
    return fx_result_us(f, w, job, token, seq, config, status, 10.0, now, heard);
}

int fx_result_us(fx_t *f, sched_worker_t *w, uint64_t job, uint64_t token, uint64_t seq, uint64_t config,
                 Moetune__Status status, double us, uint64_t now, bool heard) {
    Moetune__Measurement m[2], *pm[2] = {&m[0], &m[1]};
    for (int i = 0; i < 2; i++) {
        moetune__measurement__init(&m[i]);
        m[i].batch_size = (uint32_t)i + 1;
        m[i].status = status;
        m[i].median_us = m[i].min_us = m[i].mean_us = us + i;
        m[i].samples = 10;
        m[i].timed_us = 100.0;
    }
    return fx_result_of(f, w, job, token, seq, config, pm, 2, now, heard);
}

const Moetune__Job *fx_last_job(fx_t *f, const char *rid) {
    for (size_t i = f->n; i-- > 0;)
        if (strcmp(f->rid[i], rid) == 0 && f->msg[i]->body_case == MOETUNE__ENVELOPE__BODY_JOB) return f->msg[i]->job;
    return NULL;
}

size_t fx_count(fx_t *f, const char *rid, wire_body_t body) {
    size_t n = 0;
    for (size_t i = 0; i < f->n; i++) n += strcmp(f->rid[i], rid) == 0 && f->msg[i]->body_case == body;
    return n;
}

const Moetune__Job *fx_take(fx_t *f, const char *rid, uint64_t now) {
    sched_worker_t *w = sched_worker(f->s, (const uint8_t *)rid, strlen(rid));
    assert_non_null(w);
    size_t before = fx_count(f, rid, MOETUNE__ENVELOPE__BODY_JOB);
    sched_on_ready(f->s, w, 1, now);
    assert_int_equal(fx_count(f, rid, MOETUNE__ENVELOPE__BODY_JOB), before + 1);
    return fx_last_job(f, rid);
}

fx_lease_t fx_lease(fx_t *f, const char *id, const char *gpu, uint64_t now) {
    fx_lease_t l;
    memset(&l, 0, sizeof l);
    l.w = fx_hello(f, id, gpu, now);
    l.j = fx_take(f, id, now);
    l.job = l.j->job_id;
    l.tok = l.j->lease_token;
    for (size_t i = 0; i < l.j->n_configs && i < sizeof l.cfg / sizeof l.cfg[0]; i++)
        l.cfg[i] = l.j->configs[i]->config_id;
    return l;
}

size_t fx_commit_batch(fx_t *f, uint64_t now) {
    sched_batch_t *b = NULL;
    assert_int_equal(sched_batch_take(f->s, &b), MT_OK);
    size_t n = sched_batch_results(b);
    assert_int_equal(store_begin(f->db), MT_OK);
    assert_int_equal(sched_batch_write(f->db, b), MT_OK);
    assert_int_equal(store_commit(f->db), MT_OK);
    sched_batch_done(f->s, b, MT_OK, NULL, now);
    return n;
}

bool fx_acked(fx_t *f, const char *rid, uint64_t seq) {
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->rid[i], rid) || f->msg[i]->body_case != MOETUNE__ENVELOPE__BODY_ACK) continue;
        for (size_t k = 0; k < f->msg[i]->ack->n_seqs; k++)
            if (f->msg[i]->ack->seqs[k] == seq) return true;
    }
    return false;
}
