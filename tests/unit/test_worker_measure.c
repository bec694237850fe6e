/* test_worker_measure.c - a worker given a Job whose measurement settings are left 0 measures
 * with the planner's defaults (convert.h's WIRE_MEASURE_DEFAULTS), not numbers of its backend's
 * own; racing bests, rounds and settling reach its backend; it asks for its next job before
 * the end of its last and skips the configs a split took from it. A fake coordinator (a ROUTER
 * socket in this process) welcomes a sim worker running in a thread, sends it Jobs, reads what
 * it sends and shuts it down. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "convert.h"
#include "mt.h"
#include "parent.h"
#include "wire.h"

typedef struct {
    wrk_parent_t *p;
    int rc;
} run_t;

static void *run(void *arg) {
    run_t *r = arg;
    r->rc = wrk_parent_run(r->p);
    return NULL;
}

/* The next message from the worker whose body is want (others are skipped); NULL after 20 s. */
static wire_env_t *next(void *sock, wire_body_t want, uint8_t *rid, size_t *rid_len) {
    uint64_t end = mt_now_ms() + 20000;
    while (mt_now_ms() < end) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 200) <= 0) continue;
        wire_env_t *env = NULL;
        wire_reject_t rej;
        if (wire_recv(sock, true, rid, rid_len, WIRE_DEFAULT_MAX_BYTES, 0, &env, &rej) != MT_OK) continue;
        if (env->body_case == want) return env;
        wire_free(&env);
    }
    return NULL;
}

/* Sends one message of body case body (msg: its message, the Envelope's oneof member). */
static void send_to(void *sock, const uint8_t *rid, size_t rid_len, wire_body_t body, void *msg) {
    char err[200];
    wire_env_t env;
    wire_env_init(&env);
    env.body_case = body;
    env.hello = msg; /* the members of the oneof share one pointer */
    assert_int_equal(wire_send(sock, rid, rid_len, &env, 0, err, sizeof err), MT_OK);
}

/* A worker on a fake coordinator: started, welcomed, Ready read. */
typedef struct {
    void *ctx, *sock;
    run_t r;
    pthread_t th;
    uint8_t rid[WIRE_MAX_ID];
    size_t rid_len;
} fake_t;

/* fake_start at sim time scale scale. */
static void fake_start_at(fake_t *f, double scale);

static void fake_start(fake_t *f) { fake_start_at(f, 0); }

static void fake_start_at(fake_t *f, double scale) {
    char ep[128], err[300];
    size_t ep_len = sizeof ep;
    memset(f, 0, sizeof *f);
    f->ctx = zmq_ctx_new();
    f->sock = zmq_socket(f->ctx, ZMQ_ROUTER);
    assert_int_equal(zmq_bind(f->sock, "tcp://127.0.0.1:*"), 0);
    assert_int_equal(zmq_getsockopt(f->sock, ZMQ_LAST_ENDPOINT, ep, &ep_len), 0);
    wrk_parent_opts_t o;
    memset(&o, 0, sizeof o);
    o.endpoint = ep;
    o.backend = "sim";
    o.worker_id = "measure-w0";
    o.bopts.sim_time_scale = scale;
    f->r.rc = -1;
    assert_int_equal(wrk_parent_new(&o, &f->r.p, err, sizeof err), MT_OK);
    assert_int_equal(pthread_create(&f->th, NULL, run, &f->r), 0);
    wire_env_t *env = next(f->sock, MOETUNE__ENVELOPE__BODY_HELLO, f->rid, &f->rid_len);
    assert_non_null(env);
    wire_free(&env);
    Moetune__Welcome w = MOETUNE__WELCOME__INIT;
    w.heartbeat_ms = 1000, w.lease_ms = 30000;
    send_to(f->sock, f->rid, f->rid_len, MOETUNE__ENVELOPE__BODY_WELCOME, &w);
    env = next(f->sock, MOETUNE__ENVELOPE__BODY_READY, f->rid, &f->rid_len);
    assert_non_null(env);
    wire_free(&env);
}

static void fake_stop(fake_t *f) {
    Moetune__Shutdown sd = MOETUNE__SHUTDOWN__INIT;
    sd.reason = "test over";
    send_to(f->sock, f->rid, f->rid_len, MOETUNE__ENVELOPE__BODY_SHUTDOWN, &sd);
    assert_int_equal(pthread_join(f->th, NULL), 0);
    assert_int_equal(f->r.rc, 0);
    wrk_parent_destroy(&f->r.p);
    zmq_close(f->sock);
    zmq_ctx_term(f->ctx);
}

static void test_zero_measure_gets_planner_defaults(void **state) {
    (void)state;
    fake_t f;
    char err[200];
    fake_start(&f);

    /* every setting 0 but a relative-deviation target any sample set meets: the worker stops at
     * min_samples, so the samples say which minimum it used */
    krn_shape_t sh;
    assert_int_equal(krn_shape_parse("E=8,N=1024,K=1024,topk=2", &sh, err, sizeof err), MT_OK);
    krn_config_t cfg = {.block_m = 64, .block_n = 64, .block_k = 64, .group_m = 1, .num_warps = 4, .num_stages = 3};
    Moetune__Shape msh;
    Moetune__Config mc;
    wire_shape_to_msg(&sh, &msh);
    wire_config_to_msg(&cfg, &mc);
    Moetune__JobConfig jc = MOETUNE__JOB_CONFIG__INIT, *pjc = &jc;
    jc.config_id = 7, jc.config = &mc;
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    m.rsd_target = 0.5;
    uint32_t bs[] = {1, 64};
    Moetune__Job job = MOETUNE__JOB__INIT;
    job.job_id = 1, job.lease_token = 11, job.sweep_id = 1, job.shape = &msh, job.n_configs = 1, job.configs = &pjc;
    job.n_batch_sizes = 2, job.batch_sizes = bs, job.measure = &m;
    send_to(f.sock, f.rid, f.rid_len, MOETUNE__ENVELOPE__BODY_JOB, &job);

    wire_env_t *env = next(f.sock, MOETUNE__ENVELOPE__BODY_RESULT, f.rid, &f.rid_len);
    assert_non_null(env);
    Moetune__Result *res = env->result;
    assert_int_equal(res->n_measurements, 2);
    Moetune__Measure def;
    wire_measure_fill(NULL, &def);
    for (size_t i = 0; i < res->n_measurements; i++) {
        assert_int_equal(res->measurements[i]->status, MOETUNE__STATUS__STATUS_OK);
        if (res->measurements[i]->samples != def.min_samples)
            fail_msg("batch size %u: %u samples, not the default min_samples %u", res->measurements[i]->batch_size,
                     res->measurements[i]->samples, def.min_samples);
    }
    wire_free(&env);

    fake_stop(&f);
}

/* Sends job id of two configs (ids 1 and 2) at batch size 64 with m, rounds and best (the
 * racing best at 64, 0 = none). */
static void send_job(fake_t *f, uint64_t id, const Moetune__Measure *m, uint32_t rounds, double best) {
    char err[200];
    krn_shape_t sh;
    assert_int_equal(krn_shape_parse("E=8,N=1024,K=1024,topk=2", &sh, err, sizeof err), MT_OK);
    krn_config_t cfg[2] = {
        {.block_m = 64, .block_n = 64, .block_k = 64, .group_m = 1, .num_warps = 4, .num_stages = 3},
        {.block_m = 32, .block_n = 128, .block_k = 64, .group_m = 1, .num_warps = 4, .num_stages = 3}};
    Moetune__Shape msh;
    Moetune__Config mc[2];
    Moetune__JobConfig jc[2], *pjc[2] = {&jc[0], &jc[1]};
    wire_shape_to_msg(&sh, &msh);
    for (int i = 0; i < 2; i++) {
        wire_config_to_msg(&cfg[i], &mc[i]);
        moetune__job_config__init(&jc[i]);
        jc[i].config_id = (uint64_t)i + 1, jc[i].config = &mc[i];
    }
    uint32_t bs = 64;
    Moetune__Job job = MOETUNE__JOB__INIT;
    job.job_id = id, job.lease_token = 11, job.sweep_id = 1, job.shape = &msh, job.n_configs = 2, job.configs = pjc;
    job.n_batch_sizes = 1, job.batch_sizes = &bs, job.measure = (Moetune__Measure *)m, job.rounds = rounds;
    job.n_best_us = 1, job.best_us = &best;
    send_to(f->sock, f->rid, f->rid_len, MOETUNE__ENVELOPE__BODY_JOB, &job);
}

/* send_job, then fills samples[2] and medians[2] (NULL: not wanted) from its two Results (by
 * config id 1 and 2), each asserted OK. */
static void run_job(fake_t *f, uint64_t id, const Moetune__Measure *m, uint32_t rounds, double best,
                    uint32_t samples[2], double *medians) {
    send_job(f, id, m, rounds, best);
    samples[0] = samples[1] = 0;
    for (int k = 0; k < 2; k++) {
        wire_env_t *env = next(f->sock, MOETUNE__ENVELOPE__BODY_RESULT, f->rid, &f->rid_len);
        assert_non_null(env);
        Moetune__Result *res = env->result;
        assert_int_equal(res->job_id, id);
        assert_int_equal(res->n_measurements, 1);
        assert_int_equal(res->measurements[0]->status, MOETUNE__STATUS__STATUS_OK);
        assert_true(res->config_id == 1 || res->config_id == 2);
        samples[res->config_id - 1] = res->measurements[0]->samples;
        if (medians) medians[res->config_id - 1] = res->measurements[0]->median_us;
        wire_free(&env);
    }
}

/* An Ack's job best (what other workers committed since the lease) reaches the job's next
 * config: a job leased with no best, then told 1 us at its batch size while its first config
 * compiles (50 ms at time scale 1), prunes its second config; the same job without the Ack
 * measures both. */
static void test_ack_best_prunes(void **state) {
    (void)state;
    fake_t f;
    fake_start_at(&f, 1.0);
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    m.min_samples = 3, m.max_samples = 5, m.rsd_target = 0.5, m.race_margin = 0.2;
    for (int told = 0; told < 2; told++) {
        uint64_t id = 10 + (uint64_t)told;
        double told_best = 1.0;
        send_job(&f, id, &m, 1, 0.0);
        if (told) {
            Moetune__JobBest jb = MOETUNE__JOB_BEST__INIT, *pjb = &jb;
            jb.job_id = id, jb.n_best_us = 1, jb.best_us = &told_best;
            Moetune__Ack ack = MOETUNE__ACK__INIT;
            ack.n_best = 1, ack.best = &pjb;
            send_to(f.sock, f.rid, f.rid_len, MOETUNE__ENVELOPE__BODY_ACK, &ack);
        }
        int status[3] = {0, 0, 0};
        for (int k = 0; k < 2; k++) {
            wire_env_t *env = next(f.sock, MOETUNE__ENVELOPE__BODY_RESULT, f.rid, &f.rid_len);
            assert_non_null(env);
            assert_int_equal(env->result->job_id, id);
            assert_true(env->result->config_id == 1 || env->result->config_id == 2);
            status[env->result->config_id] = env->result->measurements[0]->status;
            wire_free(&env);
        }
        assert_int_equal(status[2], told ? MOETUNE__STATUS__STATUS_PRUNED : MOETUNE__STATUS__STATUS_OK);
        if (!told) assert_int_equal(status[1], MOETUNE__STATUS__STATUS_OK);
    }
    fake_stop(&f);
}

/* A side-by-side job (Job.rounds): each config's one Result pools its rounds' samples, and the
 * rounds share one measurement's time budget. The sim stops a config at min_samples when the
 * deviation target is met at once, and at the budget (simulated time, deterministic at time
 * scale 0) when it never is. */
static void test_rounds(void **state) {
    (void)state;
    fake_t f;
    fake_start(&f);
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    uint32_t one[2], four[2];
    m.min_samples = 3, m.rsd_target = 0.5;
    run_job(&f, 1, &m, 4, 0, four, NULL);
    assert_int_equal(four[0], 4 * 3);
    assert_int_equal(four[1], 4 * 3);
    /* the budget decides: a deviation target no sample set meets, samples without a cap */
    m.rsd_target = 1e-12, m.max_samples = 1000000, m.budget_ms = 40;
    run_job(&f, 2, &m, 1, 0, one, NULL);
    run_job(&f, 3, &m, 4, 0, four, NULL);
    for (int i = 0; i < 2; i++) {
        if (one[i] < 20 || four[i] < one[i] * 3 / 4 || four[i] > one[i] * 5 / 4)
            fail_msg("config %d: %u samples in one round of the budget, %u in four rounds sharing it", i + 1, one[i],
                     four[i]);
    }
    fake_stop(&f);
}

/* A side-by-side job's Result lists each round's median in its detail, in the order measured,
 * and the Result's median is the fastest of them; a job of one round lists none. The sim at
 * time scale 0 reads a config alike every round, so the rounds' medians agree. */
static void test_rounds_in_detail(void **state) {
    (void)state;
    fake_t f;
    fake_start(&f);
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    m.min_samples = 3, m.rsd_target = 0.5;
    for (uint32_t rounds = 1; rounds <= 3; rounds += 2) {
        send_job(&f, 20 + rounds, &m, rounds, 0);
        for (int k = 0; k < 2; k++) {
            wire_env_t *env = next(f.sock, MOETUNE__ENVELOPE__BODY_RESULT, f.rid, &f.rid_len);
            assert_non_null(env);
            const Moetune__Measurement *r = env->result->measurements[0];
            assert_int_equal(r->status, MOETUNE__STATUS__STATUS_OK);
            const char *at = strstr(r->detail, "rounds ");
            if (rounds == 1) {
                if (at) fail_msg("a job of one round lists rounds: '%s'", r->detail);
                wire_free(&env);
                continue;
            }
            if (!at) fail_msg("no rounds in the detail: '%s'", r->detail);
            double us[4], lo = 1e300;
            int n = sscanf(at, "rounds %lf %lf %lf %lf", &us[0], &us[1], &us[2], &us[3]);
            if (n != 3) fail_msg("%d rounds listed, not 3: '%s'", n, r->detail);
            for (int i = 0; i < n; i++) {
                assert_true(us[i] > 0);
                if (us[i] < lo) lo = us[i];
                if (fabs(us[i] - us[0]) > 1e-4 * us[0]) fail_msg("the sim's rounds read apart: '%s'", r->detail);
            }
            if (fabs(lo - r->median_us) > 1e-4 * r->median_us)
                fail_msg("median %.6g is not the fastest round: '%s'", r->median_us, r->detail);
            wire_free(&env);
        }
    }
    fake_stop(&f);
}

/* Settling reaches the backend from the worker's parent for a racing job, and never for a
 * side-by-side one: against a best well below both configs (and a deviation target no sample
 * set meets) a plain job stops each at min_samples, the same job in 2 rounds samples both to
 * max_samples in each round. */
static void test_settling_not_in_rounds(void **state) {
    (void)state;
    fake_t f;
    fake_start(&f);
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    uint32_t n[2];
    double med[2];
    m.min_samples = 4, m.max_samples = 30, m.rsd_target = 1e-12, m.budget_ms = 100000, m.race_margin = -1;
    run_job(&f, 1, &m, 1, 0, n, med);
    assert_int_equal(n[0], 30);
    assert_int_equal(n[1], 30);
    double best = (med[0] < med[1] ? med[0] : med[1]) / 1.3;
    m.race_margin = 0.5; /* 1.3x the best stays in the race */
    run_job(&f, 2, &m, 1, best, n, NULL);
    assert_int_equal(n[0], 4);
    assert_int_equal(n[1], 4);
    run_job(&f, 3, &m, 2, best, n, NULL);
    assert_int_equal(n[0], 2 * 30);
    assert_int_equal(n[1], 2 * 30);
    fake_stop(&f);
}

/* Sends job id of n configs (ids 1..n: 64x64x64, group 1, warps 4 or 8, stages 2..) at batch
 * sizes {1, 64}, measurement defaults, racing off. */
static void send_job_n(fake_t *f, uint64_t id, size_t n) {
    char err[200];
    krn_shape_t sh;
    assert_int_equal(krn_shape_parse("E=8,N=1024,K=1024,topk=2", &sh, err, sizeof err), MT_OK);
    Moetune__Shape msh;
    Moetune__Config mc[8];
    Moetune__JobConfig jc[8], *pjc[8];
    assert_true(n <= 8);
    wire_shape_to_msg(&sh, &msh);
    for (size_t i = 0; i < n; i++) {
        krn_config_t cfg = {.block_m = 64,
                            .block_n = 64,
                            .block_k = 64,
                            .group_m = 1,
                            .num_warps = i % 2 ? 8 : 4,
                            .num_stages = 2 + (uint32_t)(i / 2)};
        wire_config_to_msg(&cfg, &mc[i]);
        moetune__job_config__init(&jc[i]);
        jc[i].config_id = i + 1, jc[i].config = &mc[i];
        pjc[i] = &jc[i];
    }
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    m.rsd_target = 0.5, m.race_margin = -1;
    uint32_t bs[] = {1, 64};
    Moetune__Job job = MOETUNE__JOB__INIT;
    job.job_id = id, job.lease_token = 11, job.sweep_id = 1, job.shape = &msh, job.n_configs = n, job.configs = pjc;
    job.n_batch_sizes = 2, job.batch_sizes = bs, job.measure = &m;
    send_to(f->sock, f->rid, f->rid_len, MOETUNE__ENVELOPE__BODY_JOB, &job);
}

/* The next Ready or Result from the worker (heartbeats skipped): its body, and for a Result its
 * job and config ids; 0 after 20 s. */
static wire_body_t next_event(fake_t *f, uint64_t *job, uint64_t *cfg) {
    uint64_t end = mt_now_ms() + 20000;
    while (mt_now_ms() < end) {
        zmq_pollitem_t it = {f->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 200) <= 0) continue;
        wire_env_t *env = NULL;
        wire_reject_t rej;
        if (wire_recv(f->sock, true, f->rid, &f->rid_len, WIRE_DEFAULT_MAX_BYTES, 0, &env, &rej) != MT_OK) continue;
        wire_body_t b = env->body_case;
        if (b == MOETUNE__ENVELOPE__BODY_RESULT) *job = env->result->job_id, *cfg = env->result->config_id;
        wire_free(&env);
        if (b == MOETUNE__ENVELOPE__BODY_RESULT || b == MOETUNE__ENVELOPE__BODY_READY) return b;
    }
    return 0;
}

/* A worker holding one job (credits 1, the sim's default) asks for its next one when the job's
 * last 3 configs remain, not when it ends: of a job of 5 configs, 2 Results come before its
 * Ready and 3 after; the job's end sends none, and the next job, sent then, is measured after
 * the first one's last config. */
static void test_ready_before_the_end(void **state) {
    (void)state;
    fake_t f;
    fake_start(&f);
    send_job_n(&f, 21, 5);
    uint64_t job = 0, cfg = 0;
    for (uint64_t k = 1; k <= 2; k++) {
        assert_int_equal(next_event(&f, &job, &cfg), MOETUNE__ENVELOPE__BODY_RESULT);
        assert_int_equal(job, 21);
        assert_int_equal(cfg, k);
    }
    assert_int_equal(next_event(&f, &job, &cfg), MOETUNE__ENVELOPE__BODY_READY);
    send_job_n(&f, 22, 2);
    for (uint64_t k = 3; k <= 5; k++) {
        assert_int_equal(next_event(&f, &job, &cfg), MOETUNE__ENVELOPE__BODY_RESULT);
        assert_int_equal(job, 21);
        assert_int_equal(cfg, k);
    }
    /* job 22 has 2 configs: its credit goes back as it starts, before its Results */
    assert_int_equal(next_event(&f, &job, &cfg), MOETUNE__ENVELOPE__BODY_READY);
    for (uint64_t k = 1; k <= 2; k++) {
        assert_int_equal(next_event(&f, &job, &cfg), MOETUNE__ENVELOPE__BODY_RESULT);
        assert_int_equal(job, 22);
        assert_int_equal(cfg, k);
    }
    fake_stop(&f);
}

/* A split took configs 5 and 6 of a held job of 6 (Ack.moved, sent while its first config
 * compiles, 50 ms at time scale 1): the worker measures 1..4 and goes on to its next job, never
 * to 5 or 6. */
static void test_moved_configs_skipped(void **state) {
    (void)state;
    fake_t f;
    fake_start_at(&f, 1.0);
    send_job_n(&f, 31, 6);
    uint64_t ids[2] = {6, 5};
    Moetune__JobMoved jm = MOETUNE__JOB_MOVED__INIT, *pjm = &jm;
    jm.job_id = 31, jm.n_config_ids = 2, jm.config_ids = ids;
    Moetune__Ack ack = MOETUNE__ACK__INIT;
    ack.n_moved = 1, ack.moved = &pjm;
    send_to(f.sock, f.rid, f.rid_len, MOETUNE__ENVELOPE__BODY_ACK, &ack);
    uint64_t job = 0, cfg = 0, want = 1;
    int readies = 0;
    while (want <= 4) {
        wire_body_t b = next_event(&f, &job, &cfg);
        assert_int_not_equal(b, 0);
        if (b == MOETUNE__ENVELOPE__BODY_READY) {
            readies++;
            continue;
        }
        assert_int_equal(job, 31);
        assert_int_equal(cfg, want++);
    }
    if (readies == 0) assert_int_equal(next_event(&f, &job, &cfg), MOETUNE__ENVELOPE__BODY_READY);
    send_job_n(&f, 32, 1);
    wire_body_t b;
    while ((b = next_event(&f, &job, &cfg)) == MOETUNE__ENVELOPE__BODY_READY) {}
    assert_int_equal(b, MOETUNE__ENVELOPE__BODY_RESULT);
    assert_int_equal(job, 32); /* not config 5 or 6 of job 31 */
    assert_int_equal(cfg, 1);
    fake_stop(&f);
}

int main(void) {
    mt_log_init("test_worker_measure", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_measure_gets_planner_defaults),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_rounds_in_detail),
        cmocka_unit_test(test_settling_not_in_rounds),
        cmocka_unit_test(test_ack_best_prunes),
        cmocka_unit_test(test_ready_before_the_end),
        cmocka_unit_test(test_moved_configs_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
