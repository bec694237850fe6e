/* test_wire.c - Envelope round trip, and rejection of truncated, oversized,
 * wrong-version, bodiless and random messages, directly and over ZeroMQ. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "mt.h"
#include "wire.h"

static uint8_t *pack_result(size_t *len, uint32_t n_meas) {
    wire_env_t env;
    Moetune__Result r = MOETUNE__RESULT__INIT;
    Moetune__Measurement *ms = calloc(n_meas, sizeof *ms);
    Moetune__Measurement **pm = calloc(n_meas, sizeof *pm);
    for (uint32_t i = 0; i < n_meas; i++) {
        moetune__measurement__init(&ms[i]);
        ms[i].batch_size = i + 1;
        ms[i].status = MOETUNE__STATUS__STATUS_OK;
        ms[i].median_us = 10.5 + i;
        ms[i].min_us = 10.0 + i;
        ms[i].mean_us = 10.7 + i;
        ms[i].stddev_us = 0.05;
        ms[i].samples = 20;
        pm[i] = &ms[i];
    }
    r.job_id = 7;
    r.lease_token = 0xfeedfacecafebeefULL;
    r.seq = 3;
    r.config_id = 42;
    r.n_measurements = n_meas;
    r.measurements = pm;
    wire_env_wrap(&env, &r.base);
    uint8_t *buf = NULL;
    assert_int_equal(wire_pack(&env, &buf, len), MT_OK);
    free(pm);
    free(ms);
    return buf;
}

/* env as a Ready of credits, its body in r. */
static void ready_env(wire_env_t *env, Moetune__Ready *r, uint32_t credits) {
    moetune__ready__init(r);
    r->credits = credits;
    wire_env_wrap(env, &r->base);
}

/* What wire_unpack answered: the envelope (the caller's to wire_free), the error code and the reason. */
typedef struct {
    wire_env_t *env;
    int code;
    char err[256];
} unpacked_t;

/* wire_unpack of buf[0, len) under the limit max into *u (its envelope and code cleared first); its code. */
static int unpack(const uint8_t *buf, size_t len, size_t max, unpacked_t *u) {
    u->env = NULL;
    u->code = 0;
    return wire_unpack(buf, len, max, &u->env, &u->code, u->err, sizeof u->err);
}

/* env packed (asserted) and unpacked again under the default limit into *u; unpack's code. */
static int roundtrip(wire_env_t *env, unpacked_t *u) {
    uint8_t *buf;
    size_t len;
    assert_int_equal(wire_pack(env, &buf, &len), MT_OK);
    int rc = unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, u);
    free(buf);
    return rc;
}

/* env through roundtrip, asserted accepted when good (the copy in u->env, the caller's to
 * wire_free) or refused as invalid otherwise (no copy). Returns good. */
static bool roundtrip_valid(wire_env_t *env, bool good, unpacked_t *u) {
    int rc = roundtrip(env, u);
    if (good) {
        if (rc) print_message("refused: %s\n", u->err);
        assert_int_equal(rc, MT_OK);
        return true;
    }
    assert_int_equal(rc, MT_INVAL);
    assert_null(u->env);
    assert_int_equal(u->code, WIRE_E_INVALID);
    return false;
}

static void test_round_trip(void **state) {
    (void)state;
    size_t len;
    uint8_t *buf = pack_result(&len, 18);
    unpacked_t u;
    assert_int_equal(unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &u), MT_OK);
    assert_int_equal(u.env->protocol_version, WIRE_PROTOCOL_VERSION);
    assert_int_equal(u.env->body_case, MOETUNE__ENVELOPE__BODY_RESULT);
    assert_int_equal(u.env->result->job_id, 7);
    assert_true(u.env->result->lease_token == 0xfeedfacecafebeefULL);
    assert_int_equal(u.env->result->n_measurements, 18);
    assert_int_equal(u.env->result->measurements[17]->batch_size, 18);
    assert_true(u.env->result->measurements[4]->median_us == 14.5);
    wire_free(&u.env);
    assert_null(u.env);
    free(buf);
}

static void test_truncated(void **state) {
    (void)state;
    size_t len;
    uint8_t *buf = pack_result(&len, 18);
    int rejected = 0;
    /* Every strict prefix must either fail to decode or fail validation; none may crash. */
    for (size_t cut = 0; cut < len; cut++) {
        unpacked_t u;
        if (unpack(buf, cut, WIRE_DEFAULT_MAX_BYTES, &u) != MT_OK) {
            assert_null(u.env);
            assert_true(u.code == WIRE_E_DECODE || u.code == WIRE_E_BODY || u.code == WIRE_E_VERSION ||
                        u.code == WIRE_E_INVALID);
            rejected++;
        } else {
            wire_free(&u.env);
        }
    }
    /* The Result is the envelope's last field, so no strict prefix is a whole message: a
     * cut inside it does not decode, a cut before it leaves no body (or no version). */
    assert_int_equal(rejected, (int)len);
    free(buf);
}

static void test_oversized(void **state) {
    (void)state;
    size_t len;
    uint8_t *buf = pack_result(&len, 18);
    unpacked_t u;
    assert_int_equal(unpack(buf, len, len - 1, &u), MT_INVAL);
    assert_int_equal(u.code, WIRE_E_TOO_LARGE);
    assert_non_null(strstr(u.err, "limit"));
    free(buf);
}

static void test_wrong_version(void **state) {
    (void)state;
    wire_env_t env;
    Moetune__Ready ready;
    ready_env(&env, &ready, 1);
    env.protocol_version = 99;
    /* wire_pack always stamps the current version; pack by hand to send a wrong one. */
    size_t len = moetune__envelope__get_packed_size(&env);
    uint8_t *buf = malloc(len);
    moetune__envelope__pack(&env, buf);
    unpacked_t u;
    assert_int_equal(unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &u), MT_INVAL);
    assert_int_equal(u.code, WIRE_E_VERSION);
    free(buf);
}

static void test_no_body_and_bad_fields(void **state) {
    (void)state;
    wire_env_t env;
    wire_env_init(&env);
    unpacked_t u;
    assert_int_equal(roundtrip(&env, &u), MT_INVAL);
    assert_int_equal(u.code, WIRE_E_BODY);

    /* An OK measurement with a negative latency is data, and invalid. */
    Moetune__Measurement m = MOETUNE__MEASUREMENT__INIT;
    Moetune__Measurement *pm = &m;
    Moetune__Result r = MOETUNE__RESULT__INIT;
    m.batch_size = 1;
    m.status = MOETUNE__STATUS__STATUS_OK;
    m.median_us = -1;
    r.job_id = 1;
    r.config_id = 1;
    r.n_measurements = 1;
    r.measurements = &pm;
    wire_env_wrap(&env, &r.base);
    roundtrip_valid(&env, false, &u);

    /* up_us/down_us: 0 (not measured) and a latency pass, NaN, infinity and negatives do not. */
    m.median_us = m.min_us = m.mean_us = 10.0;
    m.samples = 10;
    const double up[] = {0.0, 6.5, NAN, INFINITY, -1.0};
    const int good[] = {1, 1, 0, 0, 0};
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++) {
        for (int which = 0; which < 2; which++) {
            m.up_us = which ? 1.0 : up[i];
            m.down_us = which ? up[i] : 1.0;
            if (roundtrip_valid(&env, good[i], &u)) {
                assert_true(u.env->result->measurements[0]->up_us == m.up_us);
                assert_true(u.env->result->measurements[0]->down_us == m.down_us);
                wire_free(&u.env);
            }
        }
    }
}

/* Job.rounds: up to WIRE_MAX_ROUNDS is a job; one more is malformed. */
static void test_job_rounds(void **state) {
    (void)state;
    Moetune__Shape shape = MOETUNE__SHAPE__INIT;
    shape.e = 128, shape.n = 768, shape.k = 2048, shape.topk = 8, shape.dtype = "bf16";
    Moetune__Config cfg = MOETUNE__CONFIG__INIT;
    cfg.block_m = 64, cfg.block_n = 128, cfg.block_k = 64, cfg.group_m = 1, cfg.num_warps = 4, cfg.num_stages = 3;
    Moetune__JobConfig jc = MOETUNE__JOB_CONFIG__INIT, *pjc = &jc;
    jc.config_id = 1;
    jc.config = &cfg;
    Moetune__Measure meas = MOETUNE__MEASURE__INIT;
    uint32_t bs = 16;
    Moetune__Job job = MOETUNE__JOB__INIT;
    job.job_id = 3;
    job.shape = &shape;
    job.n_configs = 1;
    job.configs = &pjc;
    job.n_batch_sizes = 1;
    job.batch_sizes = &bs;
    job.measure = &meas;
    wire_env_t env;
    wire_env_wrap(&env, &job.base);
    const uint32_t rounds[] = {0, 1, WIRE_SIDE_BY_SIDE_ROUNDS, WIRE_MAX_ROUNDS, WIRE_MAX_ROUNDS + 1, 1000000};
    const int good[] = {1, 1, 1, 1, 0, 0};
    for (size_t i = 0; i < sizeof rounds / sizeof rounds[0]; i++) {
        unpacked_t u;
        job.rounds = rounds[i];
        if (roundtrip_valid(&env, good[i], &u)) {
            assert_int_equal(u.env->job->rounds, rounds[i]);
            wire_free(&u.env);
        }
    }
}

/* An Ack's job bests: one per batch size of a held job, finite and non-negative, a job id set. */
static void test_ack_best(void **state) {
    (void)state;
    uint64_t seq = 9;
    double best[2] = {12.5, 0.0};
    Moetune__JobBest jb = MOETUNE__JOB_BEST__INIT, *pjb = &jb;
    jb.job_id = 4;
    jb.n_best_us = 2;
    jb.best_us = best;
    Moetune__Ack ack = MOETUNE__ACK__INIT;
    ack.n_seqs = 1;
    ack.seqs = &seq;
    ack.n_best = 1;
    ack.best = &pjb;
    wire_env_t env;
    wire_env_wrap(&env, &ack.base);
    unpacked_t u;
    assert_true(roundtrip_valid(&env, true, &u));
    assert_int_equal(u.env->ack->n_best, 1);
    assert_int_equal(u.env->ack->best[0]->job_id, 4);
    assert_true(u.env->ack->best[0]->best_us[0] == 12.5 && u.env->ack->best[0]->best_us[1] == 0.0);
    wire_free(&u.env);
    const double bad[] = {-1.0, INFINITY, NAN, 1e13};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        best[1] = bad[i];
        roundtrip_valid(&env, false, &u);
    }
    best[1] = 3.0;
    jb.job_id = 0;
    roundtrip_valid(&env, false, &u);
    jb.job_id = 4;
    jb.n_best_us = 0;
    roundtrip_valid(&env, false, &u);
}

/* An Ack's moved lists (a split took configs from a held job): a job id and 1..65536 config
 * ids each, at most WIRE_MAX_CREDITS lists; an Ack of only such a list is valid. */
static void test_ack_moved(void **state) {
    (void)state;
    uint64_t ids[2] = {17, 23};
    Moetune__JobMoved jm = MOETUNE__JOB_MOVED__INIT, *pjm = &jm;
    jm.job_id = 4;
    jm.n_config_ids = 2;
    jm.config_ids = ids;
    Moetune__Ack ack = MOETUNE__ACK__INIT;
    ack.n_moved = 1;
    ack.moved = &pjm;
    wire_env_t env;
    wire_env_wrap(&env, &ack.base);
    unpacked_t u;
    assert_true(roundtrip_valid(&env, true, &u));
    assert_int_equal(u.env->ack->n_seqs, 0);
    assert_int_equal(u.env->ack->n_moved, 1);
    assert_int_equal(u.env->ack->moved[0]->job_id, 4);
    assert_int_equal(u.env->ack->moved[0]->n_config_ids, 2);
    assert_int_equal(u.env->ack->moved[0]->config_ids[1], 23);
    wire_free(&u.env);
    jm.job_id = 0;
    assert_false(roundtrip_valid(&env, false, &u));
    jm.job_id = 4;
    jm.n_config_ids = 0;
    assert_false(roundtrip_valid(&env, false, &u));
}

/* Every latency field of every status is finite and non-negative: +Inf, NaN and negatives in
 * min/mean/stddev (or in a failed measurement's median) are invalid, never stored. */
static void test_non_finite_latencies(void **state) {
    (void)state;
    Moetune__Measurement m = MOETUNE__MEASUREMENT__INIT;
    Moetune__Measurement *pm = &m;
    Moetune__Result r = MOETUNE__RESULT__INIT;
    wire_env_t env;
    unpacked_t u;
    r.job_id = 7, r.config_id = 3, r.lease_token = 99, r.seq = 5;
    r.n_measurements = 1, r.measurements = &pm;
    wire_env_wrap(&env, &r.base);
    const double bad[] = {INFINITY, NAN, -INFINITY, -0.5, 1e12};
    const Moetune__Status statuses[] = {MOETUNE__STATUS__STATUS_OK, MOETUNE__STATUS__STATUS_TIMEOUT};
    for (size_t si = 0; si < 2; si++) {
        for (size_t field = 0; field < 4; field++) {
            for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
                double *f[] = {&m.median_us, &m.min_us, &m.mean_us, &m.stddev_us};
                m.batch_size = 1;
                m.status = statuses[si];
                m.median_us = m.min_us = m.mean_us = 10.0;
                m.stddev_us = 0.5;
                *f[field] = bad[b];
                roundtrip_valid(&env, false, &u);
            }
        }
    }
    /* the same fields finite pass, for a failed measurement zeros too */
    m.status = MOETUNE__STATUS__STATUS_TIMEOUT;
    m.median_us = m.min_us = m.mean_us = m.stddev_us = 0;
    roundtrip_valid(&env, true, &u);
    wire_free(&u.env);
}

/* Every field of an ok Measurement is checked with its relations: samples (1..WIRE_MAX_SAMPLES),
 * min no slower than the median and the mean, a median in the plausible range, a standard
 * deviation no set of that many samples can exceed. */
static void test_measurement_relations(void **state) {
    (void)state;
    Moetune__Measurement m = MOETUNE__MEASUREMENT__INIT;
    Moetune__Measurement *pm = &m;
    Moetune__Result r = MOETUNE__RESULT__INIT;
    wire_env_t env;
    unpacked_t u;
    r.job_id = 7, r.config_id = 3, r.lease_token = 99, r.seq = 5;
    r.n_measurements = 1, r.measurements = &pm;
    wire_env_wrap(&env, &r.base);
    static const struct {
        double median, min, mean, sd;
        uint32_t samples;
        bool good;
    } k[] = {
        {10, 9.9, 10.1, 0.05, 10, true},
        {10, 9.9, 10.1, 0.05, 0, false}, /* no samples */
        {10, 20, 10.1, 0.05, 10, false},
        {10, 10.2, 10.1, 0.05, 10, false}, /* min over median, mean */
        {10, 9.9, 10.1, 1e11, 10, false},
        {10, 9.9, 10.1, 31.9, 10, true}, /* sd vs mean x sqrt(n) */
        {10, 9.9, 10.1, 32.0, 10, false},
        {1e-9, 1e-9, 1e-9, 0, 10, false}, /* 1e-9 us */
        {0.4, 0.4, 0.4, 0, 1, false},
        {0.5, 0.5, 0.5, 0, 1, true}, /* the floor */
        {2e9, 1e9, 2e9, 0, 1, false},
        {10, 9.9, 10.1, 0.05, 4000000000u, false},
        {10, 9.9, 10.1, 0.05, WIRE_MAX_SAMPLES, true},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        for (int pruned = 0; pruned < 2; pruned++) {
            m.batch_size = 1;
            m.status = pruned ? MOETUNE__STATUS__STATUS_PRUNED : MOETUNE__STATUS__STATUS_OK;
            m.median_us = k[i].median, m.min_us = k[i].min, m.mean_us = k[i].mean, m.stddev_us = k[i].sd;
            m.samples = k[i].samples;
            if (roundtrip_valid(&env, k[i].good, &u)) wire_free(&u.env);
        }
    }
    /* a detail over WIRE_MAX_DETAIL */
    char detail[WIRE_MAX_DETAIL + 2];
    memset(detail, 'd', sizeof detail - 1);
    detail[sizeof detail - 1] = '\0';
    m.status = MOETUNE__STATUS__STATUS_OK, m.median_us = 10, m.min_us = 9.9, m.mean_us = 10, m.stddev_us = 0;
    m.samples = 3, m.detail = detail;
    roundtrip_valid(&env, false, &u);
    detail[WIRE_MAX_DETAIL] = '\0';
    if (roundtrip_valid(&env, true, &u)) wire_free(&u.env);
}

/* A Hello's names are data: control characters anywhere, and in a GPU name or worker id the
 * separators of the engines' file names, are refused, as are names too long to keep whole. */
static void test_hello_names(void **state) {
    (void)state;
    Moetune__Gpu g = MOETUNE__GPU__INIT;
    Moetune__Hello h = MOETUNE__HELLO__INIT;
    wire_env_t env;
    unpacked_t u;
    h.gpu = &g;
    h.backend = "cuda";
    h.compiler = "cuda_13_0";
    h.host = "node1";
    h.versions = "kernel=moetune triton=3.6.0";
    wire_env_wrap(&env, &h.base);
    char long_name[WIRE_MAX_GPU_NAME + 2];
    memset(long_name, 'A', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    static const struct {
        const char *id, *gpu, *compiler, *host;
        bool good;
    } k[] = {
        {"node1-7-gpu0", "NVIDIA H200", "cuda_13_0", "node1", true},
        {"node1-7-gpu0", "NVIDIA H200,dtype=fp8_w8a8", "cuda_13_0", "node1", false},
        {"node1-7-gpu0", "NVIDIA H200=x", "cuda_13_0", "node1", false},
        {"node1-7-gpu0", "NVIDIA\nH200", "cuda_13_0", "node1", false},
        {"node1-7-gpu0", "NVIDIA H200\x7f", "cuda_13_0", "node1", false},
        {"node1-7-gpu0", "", "cuda_13_0", "node1", false},
        {"node1-7-gpu0", NULL, "cuda_13_0", "node1", false}, /* the long name */
        {"w,1", "NVIDIA H200", "cuda_13_0", "node1", false},
        {"w=1", "NVIDIA H200", "cuda_13_0", "node1", false},
        {"w\t1", "NVIDIA H200", "cuda_13_0", "node1", false},
        {"w1", "NVIDIA H200", "../cuda", "node1", false},
        {"w1", "NVIDIA H200", "cuda/13", "node1", false},
        {"w1", "NVIDIA H200", "cuda_13_0", "node\n1", false},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        h.worker_id = (char *)k[i].id;
        g.name = (char *)(k[i].gpu ? k[i].gpu : long_name);
        h.compiler = (char *)k[i].compiler;
        h.host = (char *)k[i].host;
        assert_int_equal(wire_hello_invalid(&h) == NULL, k[i].good);
        if (roundtrip_valid(&env, k[i].good, &u)) wire_free(&u.env);
    }
    long_name[WIRE_MAX_GPU_NAME] = '\0'; /* exactly the longest: kept whole */
    g.name = long_name;
    h.worker_id = "w1";
    h.host = "node1";
    if (roundtrip_valid(&env, true, &u)) wire_free(&u.env);
}

/* wire_result_max_bytes bounds every Result of n measurements (a packed worst case fits). */
static void test_result_max_bytes(void **state) {
    (void)state;
    for (size_t n = 1; n <= 64; n *= 4) {
        Moetune__Measurement *m = calloc(n, sizeof *m), **pm = calloc(n, sizeof *pm);
        char detail[WIRE_MAX_DETAIL + 1];
        memset(detail, 'z', WIRE_MAX_DETAIL);
        detail[WIRE_MAX_DETAIL] = '\0';
        for (size_t i = 0; i < n; i++) {
            moetune__measurement__init(&m[i]);
            m[i].batch_size = 1048576, m[i].status = MOETUNE__STATUS__STATUS_OK, m[i].samples = WIRE_MAX_SAMPLES;
            m[i].median_us = m[i].min_us = m[i].mean_us = m[i].stddev_us = 123.456;
            m[i].up_us = m[i].down_us = m[i].timed_us = 1e9;
            m[i].detail = detail;
            pm[i] = &m[i];
        }
        Moetune__Result r = MOETUNE__RESULT__INIT;
        r.job_id = r.lease_token = r.seq = r.config_id = UINT64_MAX - 1;
        r.registers = r.spills = 255;
        r.n_measurements = n, r.measurements = pm;
        wire_env_t env;
        wire_env_wrap(&env, &r.base);
        uint8_t *buf;
        size_t len;
        assert_int_equal(wire_pack(&env, &buf, &len), MT_OK);
        assert_true(len <= wire_result_max_bytes(n));
        assert_true(wire_result_max_bytes(n) < len + 64 + 16 * n); /* and not far over */
        free(buf);
        free(m);
        free(pm);
    }
    /* one Result of 18 batch sizes does not fit the smallest --max-msg-bytes of before */
    assert_true(wire_result_max_bytes(18) > 1024);
}

/* wire_recv names the lease an invalid Result claims, so the coordinator can requeue its job. */
static void test_recv_invalid_result_names_lease(void **state) {
    (void)state;
    void *ctx = zmq_ctx_new();
    void *a = zmq_socket(ctx, ZMQ_PAIR), *b = zmq_socket(ctx, ZMQ_PAIR);
    assert_int_equal(zmq_bind(a, "inproc://bad-result"), 0);
    assert_int_equal(zmq_connect(b, "inproc://bad-result"), 0);
    Moetune__Measurement m = MOETUNE__MEASUREMENT__INIT;
    Moetune__Measurement *pm = &m;
    Moetune__Result r = MOETUNE__RESULT__INIT;
    wire_env_t env, *out = NULL;
    wire_reject_t rej;
    char err[128];
    m.batch_size = 1, m.status = MOETUNE__STATUS__STATUS_OK;
    m.median_us = 5, m.min_us = INFINITY, m.mean_us = 5;
    r.job_id = 11, r.config_id = 2, r.lease_token = 1234, r.seq = 77;
    r.n_measurements = 1, r.measurements = &pm;
    wire_env_wrap(&env, &r.base);
    assert_int_equal(wire_send(b, NULL, 0, &env, 0, err, sizeof err), MT_OK);
    assert_int_equal(wire_recv(a, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, 0, &out, &rej), MT_INVAL);
    assert_int_equal(rej.code, WIRE_E_INVALID);
    assert_int_equal(rej.job_id, 11);
    assert_int_equal(rej.lease_token, 1234);
    assert_int_equal(rej.seq, 77);
    /* an undecodable message names no lease */
    assert_int_equal(zmq_send(b, "\xff\xff\xff", 3, 0), 3);
    assert_int_equal(wire_recv(a, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, 0, &out, &rej), MT_INVAL);
    assert_int_equal(rej.code, WIRE_E_DECODE);
    assert_int_equal(rej.job_id, 0);
    zmq_close(a);
    zmq_close(b);
    zmq_ctx_term(ctx);
}

static void test_random_bytes(void **state) {
    (void)state;
    uint64_t x = 88172645463325252ULL;
    int accepted = 0;
    for (int round = 0; round < 20000; round++) {
        uint8_t buf[256];
        size_t len = (size_t)(round % 255) + 1;
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (uint8_t)x;
        }
        unpacked_t u;
        if (unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &u) == MT_OK) {
            /* Whatever decodes must carry the right version and a body. */
            assert_int_equal(u.env->protocol_version, WIRE_PROTOCOL_VERSION);
            assert_int_not_equal(u.env->body_case, MOETUNE__ENVELOPE__BODY__NOT_SET);
            accepted++;
            wire_free(&u.env);
        } else {
            assert_null(u.env);
            assert_true(u.code >= WIRE_E_DECODE && u.code <= WIRE_E_INVALID);
        }
    }
    assert_true(accepted < 200); /* random bytes almost never form a valid message */
}

static void test_roles(void **state) {
    (void)state;
    assert_true(wire_allowed(WIRE_FROM_WORKER, MOETUNE__ENVELOPE__BODY_RESULT));
    assert_false(wire_allowed(WIRE_FROM_WORKER, MOETUNE__ENVELOPE__BODY_JOB));
    assert_false(wire_allowed(WIRE_FROM_WORKER, MOETUNE__ENVELOPE__BODY_SUBMIT));
    assert_true(wire_allowed(WIRE_FROM_CLIENT, MOETUNE__ENVELOPE__BODY_SUBMIT));
    assert_false(wire_allowed(WIRE_FROM_CLIENT, MOETUNE__ENVELOPE__BODY_RESULT));
    assert_true(wire_allowed(WIRE_FROM_COORDINATOR, MOETUNE__ENVELOPE__BODY_ACK));
    /* heartbeats go both ways */
    assert_true(wire_allowed(WIRE_FROM_COORDINATOR, MOETUNE__ENVELOPE__BODY_HEARTBEAT));
    assert_true(wire_allowed(WIRE_FROM_WORKER, MOETUNE__ENVELOPE__BODY_HEARTBEAT));
    assert_false(wire_allowed(WIRE_FROM_CLIENT, MOETUNE__ENVELOPE__BODY_HEARTBEAT));
    assert_string_equal(wire_body_name(MOETUNE__ENVELOPE__BODY_HELLO), "hello");
}

/* Over a real ROUTER/DEALER pair: garbage and multi-frame junk are rejected with a
 * reason and the identity, and a good message after them still arrives. */
static void test_socket_recv(void **state) {
    (void)state;
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    assert_int_equal(zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "w1", 2), 0);
    assert_int_equal(zmq_bind(router, "inproc://wire-test"), 0);
    assert_int_equal(zmq_connect(dealer, "inproc://wire-test"), 0);

    zmq_send(dealer, "\xff\xff\xff", 3, 0);
    zmq_send(dealer, "a", 1, ZMQ_SNDMORE);
    zmq_send(dealer, "b", 1, 0);
    wire_env_t env;
    Moetune__Ready ready;
    ready_env(&env, &ready, 2);
    char err[256];
    assert_int_equal(wire_send(dealer, NULL, 0, &env, 0, err, sizeof err), MT_OK);

    uint8_t id[WIRE_MAX_ID];
    size_t id_len = 0;
    wire_env_t *out = NULL;
    wire_reject_t rej;
    assert_int_equal(wire_recv(router, true, id, &id_len, WIRE_DEFAULT_MAX_BYTES, 0, &out, &rej), MT_INVAL);
    assert_int_equal(id_len, 2);
    assert_memory_equal(id, "w1", 2);
    assert_int_equal(rej.code, WIRE_E_DECODE);
    assert_int_equal(wire_recv(router, true, id, &id_len, WIRE_DEFAULT_MAX_BYTES, 0, &out, &rej), MT_INVAL);
    assert_non_null(strstr(rej.reason, "more than one"));
    assert_int_equal(wire_recv(router, true, id, &id_len, WIRE_DEFAULT_MAX_BYTES, 0, &out, &rej), MT_OK);
    assert_int_equal(out->body_case, MOETUNE__ENVELOPE__BODY_READY);
    assert_int_equal(out->ready->credits, 2);
    wire_free(&out);
    assert_int_equal(wire_recv(router, true, id, &id_len, WIRE_DEFAULT_MAX_BYTES, ZMQ_DONTWAIT, &out, &rej), MT_AGAIN);

    /* An Error reply reaches the dealer. */
    wire_send_error(router, "w1", 2, WIRE_E_DECODE, "bad bytes");
    assert_int_equal(wire_recv(dealer, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, 0, &out, &rej), MT_OK);
    assert_int_equal(out->body_case, MOETUNE__ENVELOPE__BODY_ERROR);
    assert_int_equal(out->error->code, WIRE_E_DECODE);
    assert_string_equal(out->error->message, "bad bytes");
    wire_free(&out);

    int linger = 0;
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(dealer);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_wrong_version),
        cmocka_unit_test(test_no_body_and_bad_fields),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_socket_recv),
        cmocka_unit_test(test_non_finite_latencies),
        cmocka_unit_test(test_measurement_relations),
        cmocka_unit_test(test_hello_names),
        cmocka_unit_test(test_result_max_bytes),
        cmocka_unit_test(test_job_rounds),
        cmocka_unit_test(test_ack_best),
        cmocka_unit_test(test_ack_moved),
        cmocka_unit_test(test_recv_invalid_result_names_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
