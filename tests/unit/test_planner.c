/* test_planner.c - plan counts over the default space, rejection reasons, job
 * chunking, storing a plan, and refusal of invalid specs with nothing stored. */
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

#include "convert.h"
#include "guard.h"
#include "halving.h"
#include "mt.h"
#include "planner.h"
#include "race.h"
#include "store.h"
#include "tmpdb.h"

static tmpdb_t g_db = {.tag = "plan"}; /* each test's own (tmpdb_setup) */

static int64_t query_int(const char *sql) { return tmpdb_query_int(g_db.path, sql); }

/* No sweep, job, config or rejected config in the database: a refused or failed start left
 * nothing behind. */
static void assert_nothing_stored(void) {
    static const char *const tables[] = {"sweeps", "jobs", "configs", "rejected"};
    char sql[64];
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        mt_fmt(sql, sizeof sql, "SELECT COUNT(*) FROM %s", tables[i]);
        if (query_int(sql) != 0) fail_msg("%s: %lld rows", tables[i], (long long)query_int(sql));
    }
}

/* A spec with up to 4 shapes and the default batch sizes. */
typedef struct {
    Moetune__SweepSpec spec;
    Moetune__Shape shapes[4];
    Moetune__Shape *shape_ptrs[4];
    uint32_t bs[32];
} spec_t;

static void spec_init(spec_t *s, const uint32_t (*shapes)[4], size_t n) {
    memset(s, 0, sizeof *s);
    moetune__sweep_spec__init(&s->spec);
    s->spec.name = "t";
    for (size_t i = 0; i < n; i++) {
        moetune__shape__init(&s->shapes[i]);
        s->shapes[i].e = shapes[i][0];
        s->shapes[i].n = shapes[i][1];
        s->shapes[i].k = shapes[i][2];
        s->shapes[i].topk = shapes[i][3];
        s->shape_ptrs[i] = &s->shapes[i];
    }
    s->spec.n_shapes = n;
    s->spec.shapes = s->shape_ptrs;
    memcpy(s->bs, krn_default_batch_sizes, krn_n_default_batch_sizes * sizeof s->bs[0]);
    s->spec.n_batch_sizes = krn_n_default_batch_sizes;
    s->spec.batch_sizes = s->bs;
}

static const uint32_t QWEN[1][4] = {{128, 768, 2048, 8}};

static bool has_reason(const plan_t *p, const char *needle) {
    for (size_t i = 0; i < p->n_shapes; i++)
        for (size_t k = 0; k < p->shapes[i].n_rejected; k++)
            if (strstr(p->shapes[i].rejected[k].reason, needle)) return true;
    return false;
}

static void test_default_space_counts(void **state) {
    spec_t s;
    char err[256];
    plan_t *p = NULL;
    spec_init(&s, QWEN, 1);
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_int_equal(p->configs_valid + p->configs_rejected, 1920);
    assert_true(p->configs_valid > 0);
    assert_true(p->configs_rejected > 0);
    assert_int_equal(p->results_planned, (uint64_t)p->configs_valid * 18);
    assert_int_equal(p->jobs, (p->configs_valid + 15) / 16);
    assert_int_equal(p->chunk, 0); /* none given: by shape; one shape is its own cheapest */
    assert_int_equal(p->shapes[0].chunk, 16);
    assert_int_equal(p->max_attempts, 3);
    assert_int_equal(p->measure.warmup, 2);
    assert_int_equal(p->measure.min_samples, 10);
    assert_int_equal(p->measure.max_samples, 100);
    assert_true(p->measure.rsd_target > 0.0099 && p->measure.rsd_target < 0.0101);
    assert_int_equal(p->measure.budget_ms, 1000);
    assert_int_equal(p->measure.timeout_ms, 60000);
    assert_int_equal(p->measure.seed, 1);
    assert_true(has_reason(p, "shared memory"));
    assert_string_equal(p->shapes[0].shape.dtype, "bf16");
    uint32_t v = 0, r = 0, j = 0;
    assert_int_equal(plan_count(&s.spec, &v, &r, &j, err, sizeof err), MT_OK);
    assert_int_equal(v, p->configs_valid);
    assert_int_equal(r, p->configs_rejected);
    assert_int_equal(j, p->jobs);
    plan_destroy(&p);
    assert_null(p);
}

/* A triton sweep keeps every config of the default space (Triton masks tails and the device
 * judges shared memory); the CUDA kernel's rules reject some; an unknown backend is refused. */
static void test_triton_rules(void **state) {
    spec_t s;
    char err[256];
    plan_t *cuda = NULL, *triton = NULL;
    spec_init(&s, (const uint32_t[][4]){{32, 2880, 2880, 4}}, 1);
    assert_int_equal(plan_build(&s.spec, &cuda, err, sizeof err), MT_OK);
    s.spec.backend = "triton";
    assert_int_equal(plan_build(&s.spec, &triton, err, sizeof err), MT_OK);
    assert_true(cuda->configs_rejected > 0);
    assert_int_equal(triton->configs_rejected, 0);
    assert_int_equal(triton->configs_valid, 1920);
    assert_int_equal(triton->results_planned, 1920u * 18);
    plan_destroy(&cuda);
    plan_destroy(&triton);
    s.spec.backend = "rocm";
    assert_int_equal(plan_build(&s.spec, &triton, err, sizeof err), MT_INVAL);
    assert_string_equal(err, "backend 'rocm' is not one of cuda, triton, sim");
    assert_null(triton);
}

/* A triton sweep planned for a device drops the configs whose shared memory cannot fit it, with
 * the rule's reason: 616 of the default space on sm_90, 944 on sm_120; none without a device. A sim
 * sweep follows the same rules when its device stands in for Triton, else the CUDA kernel's. */
static void test_triton_device_rules(void **state) {
    static const struct {
        const char *backend, *key;
        bool sim_triton;
        uint32_t rejected;
        const char *rules;
    } cases[] = {
        {"triton", NULL, false, 0,
         "triton: Triton's, no device yet (its worker judges shared memory before compiling)"},
        {"triton", "sm_90", false, 616, "triton: Triton's on GPU X (sm_90, 232448 B shared memory per block)"},
        {"triton", "sm_120", false, 944, "triton: Triton's on GPU X (sm_120, 101376 B shared memory per block)"},
        {"sim", "sm_90", true, 616, "sim: Triton's on GPU X (sm_90, 232448 B shared memory per block)"},
        {"sim", "sm_120", true, 944, "sim: Triton's on GPU X (sm_120, 101376 B shared memory per block)"},
    };
    (void)state;
    spec_t s;
    char err[256];
    spec_init(&s, (const uint32_t[][4]){{128, 768, 2048, 8}}, 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_t *p = NULL;
        plan_device_t dev = {.sim_triton = cases[i].sim_triton, .name = "GPU X"};
        if (cases[i].key) dev.limits = krn_device_find(cases[i].key)->limits;
        s.spec.backend = (char *)cases[i].backend;
        assert_int_equal(plan_build_on(&s.spec, cases[i].key ? &dev : NULL, &p, err, sizeof err), MT_OK);
        assert_int_equal(p->configs_rejected, cases[i].rejected);
        assert_int_equal(p->configs_valid, 1920 - cases[i].rejected);
        assert_string_equal(p->rules, cases[i].rules);
        for (size_t r = 0; r < p->shapes[0].n_rejected; r++)
            assert_non_null(strstr(p->shapes[0].rejected[r].reason, "shared memory > "));
        plan_destroy(&p);
    }
    /* a sim device that does not stand in for Triton: the CUDA kernel's rules */
    plan_t *p = NULL, *cuda = NULL;
    plan_device_t dev = {.limits = krn_device_find("sm_90")->limits, .name = "GPU X"};
    s.spec.backend = "sim";
    assert_int_equal(plan_build_on(&s.spec, &dev, &p, err, sizeof err), MT_OK);
    assert_int_equal(plan_build(&s.spec, &cuda, err, sizeof err), MT_OK);
    assert_int_equal(p->configs_rejected, cuda->configs_rejected);
    assert_non_null(strstr(p->rules, "moetune's CUDA kernel"));
    plan_destroy(&p);
    plan_destroy(&cuda);
}

/* fp8 with 128x128 weight blocks on the triton backend: each engine's tuner prunes BLOCK_SIZE_K/N
 * its own way (docs/engines.md): SGLang keeps BK dividing 128 (1280 of 1920), vLLM BK and BN that are
 * multiples of 128 (640); a sweep for both measures the union once (BK 64 or 128: 1280, plus BK 256
 * with BN 128 or 256: 320). */
static void test_fp8_block_engines(void **state) {
    spec_t s;
    char err[256];
    plan_t *p = NULL;
    spec_init(&s, (const uint32_t[][4]){{256, 256, 7168, 8}}, 1);
    s.shapes[0].dtype = "fp8_w8a8";
    s.shapes[0].block_n = 128;
    s.shapes[0].block_k = 128;
    s.spec.backend = "triton";
    char *sgl[] = {"sglang"}, *vllm[] = {"vllm"}, *both[] = {"vllm", "sglang"}, *bad[] = {"trt"};
    const struct {
        char **engines;
        size_t n;
        uint32_t valid;
    } cases[] = {{NULL, 0, 1600}, {sgl, 1, 1280}, {vllm, 1, 640}, {both, 2, 1600}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s.spec.engines = cases[i].engines;
        s.spec.n_engines = cases[i].n;
        assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
        assert_int_equal(p->configs_valid, cases[i].valid);
        assert_int_equal(p->configs_rejected, 1920 - cases[i].valid);
        for (size_t c = 0; c < p->shapes[0].n_valid; c++) {
            const krn_config_t *k = &p->shapes[0].valid[c];
            bool sg = 128 % k->block_k == 0, vl = k->block_k % 128 == 0 && k->block_n % 128 == 0;
            bool want = cases[i].n == 1 ? (cases[i].engines == sgl ? sg : vl) : (sg || vl);
            assert_true(want);
        }
        plan_destroy(&p);
    }
    s.spec.engines = sgl;
    s.spec.n_engines = 1;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(has_reason(p, "SGLang: BLOCK_SIZE_K=256 does not divide block_k=128"));
    plan_destroy(&p);
    s.spec.n_engines = 0;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(has_reason(p, "SGLang: BLOCK_SIZE_K=256 does not divide block_k=128; vLLM: BLOCK_SIZE_N/K=64/256 "
                              "are not multiples of block 128x128"));
    plan_destroy(&p);
    s.spec.engines = bad;
    s.spec.n_engines = 1;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_string_equal(err, "engine 'trt' is not one of sglang, vllm");
    /* Per-tensor fp8 has no block rule: every config stays. */
    s.spec.n_engines = 0;
    s.shapes[0].block_n = s.shapes[0].block_k = 0;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_int_equal(p->configs_valid, 1920);
    plan_destroy(&p);
}

/* moetune's CUDA kernel is bf16 only: an fp8 shape of a cuda sweep is rejected config by config
 * with the reason stored; a sweep of only fp8 shapes is refused naming it; sim keeps fp8. */
static void test_cuda_rejects_fp8(void **state) {
    spec_t s;
    char err[256];
    plan_t *p = NULL;
    spec_init(&s, (const uint32_t[][4]){{128, 768, 2048, 8}, {128, 768, 2048, 8}}, 2);
    s.shapes[1].dtype = "fp8_w8a8";
    s.spec.backend = "cuda";
    /* a sweep in which one shape has no valid config is refused, naming it: it would end 'done'
     * without that shape's config file */
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_null(p);
    assert_non_null(strstr(err, "shape E=128,N=768,K=2048,topk=8,dtype=fp8_w8a8"));
    assert_non_null(strstr(err, "the cuda backend runs bf16 only (fp8_w8a8 needs --backend triton)"));
    s.spec.n_shapes = 1;
    s.shape_ptrs[0] = &s.shapes[1];
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "the cuda backend runs bf16 only"));
    s.spec.backend = "sim";
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(p->configs_valid > 0);
    plan_destroy(&p);
}

static void test_divisibility_and_chunks(void **state) {
    static const uint32_t shapes[3][4] = {{32, 2880, 2880, 4}, {128, 768, 2048, 8}, {8, 1792, 4096, 2}};
    spec_t s;
    char err[256];
    plan_t *p = NULL;
    spec_init(&s, shapes, 3);
    s.spec.chunk = 7;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(has_reason(p, "not a multiple"));
    uint32_t jobs = 0, valid = 0;
    for (size_t i = 0; i < p->n_shapes; i++) {
        assert_int_equal(p->shapes[i].n_valid + p->shapes[i].n_rejected, 1920);
        jobs += (uint32_t)((p->shapes[i].n_valid + 6) / 7);
        valid += (uint32_t)p->shapes[i].n_valid;
    }
    assert_int_equal(p->jobs, jobs);
    assert_int_equal(p->configs_valid, valid);
    assert_int_equal(p->configs_rejected, 3 * 1920 - valid);
    /* K=2880 is no multiple of 128 or 256: only BLOCK_SIZE_K=64 survives */
    for (size_t i = 0; i < p->shapes[0].n_valid; i++) assert_int_equal(p->shapes[0].valid[i].block_k, 64);
    plan_destroy(&p);
}

/* gpt-oss at TP 2 and 4 (N = 1440, 720: multiples of 32 only) has no config moetune's CUDA
 * kernel (no tail handling) can run: beside a shape that has some, the sweep is refused with
 * the first such shape, how many more, its reason and the way out; the triton backend, whose
 * kernel masks the edges, plans all three. */
static void test_shape_without_configs(void **state) {
    spec_t s;
    char err[512];
    plan_t *p = NULL;
    spec_init(&s, (const uint32_t[][4]){{32, 2880, 2880, 4}, {32, 1440, 2880, 4}, {32, 720, 2880, 4}}, 3);
    s.spec.backend = "sim";
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_null(p);
    assert_non_null(strstr(err, "shape E=32,N=1440,K=2880,topk=4 (and 1 more shapes): no config of the space "
                                "passes the static rules"));
    assert_non_null(strstr(err, "not a multiple of"));
    assert_non_null(strstr(err, "--backend triton"));
    s.spec.backend = "triton";
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    for (size_t i = 0; i < 3; i++) assert_true(p->shapes[i].n_valid > 0);
    plan_destroy(&p);
    s.spec.n_shapes = 1; /* the first alone has configs */
    s.spec.backend = "sim";
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    plan_destroy(&p);
}

/* Validates spec and stores it in one transaction through the planner's API (plan_build,
 * plan_write), as the coordinator's writer does: an invalid spec or a storage failure stores
 * nothing. Fills out; the reason in err. */
static mt_status_t plan_store(store_t *db, const Moetune__SweepSpec *spec, Moetune__Submitted *out, char *err,
                              size_t errlen) {
    plan_t *p = NULL;
    int rc = plan_build(spec, &p, err, errlen);
    if (rc) return rc;
    /* one transaction: a sweep is stored with all its jobs or not at all, so a failed or
     * interrupted start never leaves a 'running' sweep behind to be measured later */
    rc = store_begin(db);
    if (rc) {
        mt_fmt(err, errlen, "storing the sweep: %s", store_errmsg(db));
    } else {
        rc = plan_write(db, spec, p, mt_wall_s(), err, errlen);
        if (!rc && (rc = store_commit(db)) != MT_OK) mt_fmt(err, errlen, "storing the sweep: %s", store_errmsg(db));
    }
    if (rc) {
        store_rollback(db);
        goto out;
    }
    moetune__submitted__init(out);
    out->sweep_id = p->sweep_id;
    out->jobs = p->jobs;
    out->configs_valid = p->configs_valid;
    out->configs_rejected = p->configs_rejected;
    out->configs_unsampled = p->configs_unsampled;
    out->results_planned = p->results_planned;
out:
    plan_destroy(&p);
    return rc;
}

/* Plans and stores s's spec in the test's database (asserted MT_OK); the reply in *sub. */
static void store_spec(spec_t *s, Moetune__Submitted *sub) {
    char err[256];
    store_t *db = NULL;
    assert_int_equal(store_open(g_db.path, &db, err, sizeof err), MT_OK);
    int rc = plan_store(db, &s->spec, sub, err, sizeof err);
    store_close(&db);
    if (rc) fail_msg("plan_store: %s", err);
}

static void test_store_plan(void **state) {
    spec_t s;
    Moetune__Submitted sub;
    spec_init(&s, QWEN, 1);
    s.spec.chunk = 100;
    store_spec(&s, &sub);
    assert_int_equal(sub.sweep_id, 1);
    assert_int_equal(sub.configs_valid + sub.configs_rejected, 1920);
    assert_int_equal(sub.jobs, (sub.configs_valid + 99) / 100);
    assert_int_equal(sub.results_planned, (uint64_t)sub.configs_valid * 18);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sweeps WHERE state = 'running'"), 1);
    assert_int_equal(query_int("SELECT results_planned FROM sweeps"), (int64_t)sub.results_planned);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE state = 'pending'"), sub.jobs);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs"), sub.configs_valid);
    assert_int_equal(query_int("SELECT COUNT(*) FROM rejected"), sub.configs_rejected);
    assert_int_equal(query_int("SELECT COUNT(*) FROM configs"), 1920);
    assert_int_equal(query_int("SELECT COUNT(*) FROM shapes"), 1);
    assert_int_equal(query_int("SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM job_configs GROUP BY job_id)"), 100);
    assert_int_equal(query_int("SELECT length(spec) > 0 FROM sweeps"), 1);
}

/* The test's known picks: one the sm_90 rule rejects, one outside the space, two it plans. */
static size_t test_picks(void *ctx, const krn_shape_t *shape, krn_config_t *out, size_t max, char *source,
                         size_t srclen) {
    static const char *const picks[] = {"256x256x256x1x4x5", "64x128x64x16x4x3", "16x16x16x1x1x1", "16x64x128x1x4x3"};
    size_t n = 0;
    (*(int *)ctx)++;
    for (size_t i = 0; i < 4 && n < max; i++) assert_int_equal(krn_config_parse(picks[i], &out[n++]), MT_OK);
    mt_fmt(source, srclen, "test picks of E=%u", shape->e);
    return n;
}

/* Whether c is the default config of one of the spec's engines (guard_engines, vLLM's both rules)
 * at one of batch sizes bs[0..nb) for sh. */
static bool engine_default(const Moetune__SweepSpec *spec, const krn_shape_t *sh, const krn_config_t *c) {
    static const char *const rules[] = {"sglang", "vllm", "vllm-2026"};
    const char *engines[2];
    size_t ne = guard_engines(spec, engines);
    for (size_t b = 0; b < spec->n_batch_sizes; b++)
        for (size_t r = 0; r < 3; r++) {
            bool used = false;
            for (size_t e = 0; e < ne; e++) used |= !strncmp(rules[r], engines[e], strlen(engines[e]));
            krn_config_t d;
            const char *why;
            if (used && guard_default_config(rules[r], sh, spec->batch_sizes[b], &d, &why) == MT_OK &&
                !memcmp(&d, c, sizeof d))
                return true;
        }
    return false;
}

/* w holds c's configs, its first n_warm (from first on: want's) moved to the front, the
 * rest in c's order. */
static void assert_reordered(const plan_shape_t *w, const plan_shape_t *c) {
    char a[KRN_CONFIG_TEXT_LEN], b[KRN_CONFIG_TEXT_LEN];
    assert_int_equal(w->n_valid, c->n_valid);
    size_t k = w->n_warm;
    for (size_t j = 0; j < c->n_valid; j++) {
        bool warm = false;
        for (size_t i = 0; i < w->n_warm; i++) warm |= !memcmp(&w->valid[i], &c->valid[j], sizeof c->valid[j]);
        if (warm) continue;
        assert_string_equal(krn_config_format(&w->valid[k++], b, sizeof b),
                            krn_config_format(&c->valid[j], a, sizeof a));
    }
    assert_int_equal(k, w->n_valid);
}

/* A warm start: each shape's known picks that its rules keep go first in its order (its first
 * job), then the engines' defaults that lie in the space, the rest keep the cost model's order,
 * and every shape's first job is stored before any other job of the sweep. */
static void test_warm_start_order(void **state) {
    spec_t s;
    char err[256], want[512];
    plan_t *cold = NULL, *warm = NULL;
    int calls = 0;
    store_t *db = NULL;
    spec_init(&s, (const uint32_t[][4]){{128, 768, 2048, 8}, {8, 14336, 4096, 2}}, 2);
    s.spec.backend = "triton";
    plan_device_t dev = {.limits = krn_device_find("sm_90")->limits, .name = "GPU X"};
    assert_int_equal(plan_build_on(&s.spec, &dev, &cold, err, sizeof err), MT_OK);
    dev.warm = test_picks;
    dev.warm_ctx = &calls;
    assert_int_equal(plan_build_on(&s.spec, &dev, &warm, err, sizeof err), MT_OK);
    assert_int_equal(calls, 2);
    assert_int_equal(warm->configs_warm, warm->shapes[0].n_warm + warm->shapes[1].n_warm);
    mt_fmt(want, sizeof want,
           "E=128,N=768,K=2048,topk=8: %zu known picks first: 2 from test picks of E=128, %zu engine defaults; "
           "E=8,N=14336,K=4096,topk=2: %zu known picks first: 2 from test picks of E=8, %zu engine defaults",
           warm->shapes[0].n_warm, warm->shapes[0].n_warm - 2, warm->shapes[1].n_warm, warm->shapes[1].n_warm - 2);
    assert_string_equal(warm->warm, want);
    for (size_t i = 0; i < 2; i++) {
        const plan_shape_t *w = &warm->shapes[i], *c = &cold->shapes[i];
        char a[KRN_CONFIG_TEXT_LEN];
        assert_true(w->n_warm > 2);
        assert_string_equal(krn_config_format(&w->valid[0], a, sizeof a), "64x128x64x16x4x3");
        assert_string_equal(krn_config_format(&w->valid[1], a, sizeof a), "16x64x128x1x4x3");
        for (size_t j = 2; j < w->n_warm; j++) assert_true(engine_default(&s.spec, &w->shape, &w->valid[j]));
        for (size_t j = w->n_warm; j < w->n_valid; j++) assert_false(engine_default(&s.spec, &w->shape, &w->valid[j]));
        assert_reordered(w, c);
    }
    /* stored: the first job of each shape holds its picks and comes before every other job */
    assert_int_equal(store_open(g_db.path, &db, err, sizeof err), MT_OK);
    assert_int_equal(store_begin(db), MT_OK);
    assert_int_equal(plan_write(db, &s.spec, warm, 1, err, sizeof err), MT_OK);
    assert_int_equal(store_commit(db), MT_OK);
    store_close(&db);
    for (size_t i = 0; i < 2; i++) {
        const plan_shape_t *w = &warm->shapes[i];
        assert_true(w->job_ids[0] <= 2);
        for (size_t j = 1; j < w->n_jobs; j++) assert_true(w->job_ids[j] > 2);
        char sql[512];
        mt_fmt(sql, sizeof sql,
               "SELECT COUNT(*) FROM job_configs jc JOIN configs c ON c.id = jc.config_id WHERE jc.job_id = %llu AND "
               "((c.block_m = 64 AND c.block_n = 128 AND c.block_k = 64 AND c.group_m = 16 AND c.num_stages = 3) OR "
               "(c.block_m = 16 AND c.block_n = 64 AND c.block_k = 128 AND c.group_m = 1 AND c.num_stages = 3))",
               (unsigned long long)w->job_ids[0]);
        assert_int_equal(query_int(sql), 2);
    }
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs"), warm->jobs);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs"), warm->configs_valid);
    plan_destroy(&cold);
    plan_destroy(&warm);
}

static size_t no_picks(void *ctx, const krn_shape_t *shape, krn_config_t *out, size_t max, char *source,
                       size_t srclen) {
    (void)ctx, (void)shape, (void)out, (void)max, (void)source, (void)srclen;
    return 0;
}

/* Plans spec warm on dev for its one shape: its first configs are first[0..n), then engine
 * defaults, the rest in cold's order; its text names sources, then the defaults. */
static void check_warm(const Moetune__SweepSpec *spec, const plan_device_t *dev, const plan_shape_t *cold,
                       const char *const *first, size_t n, const char *sources) {
    plan_t *warm = NULL;
    char err[256], want[512], a[KRN_CONFIG_TEXT_LEN];
    assert_int_equal(plan_build_on(spec, dev, &warm, err, sizeof err), MT_OK);
    const plan_shape_t *w = &warm->shapes[0];
    assert_true(w->n_warm > n);
    for (size_t j = 0; j < n; j++) assert_string_equal(krn_config_format(&w->valid[j], a, sizeof a), first[j]);
    for (size_t j = n; j < w->n_warm; j++) assert_true(engine_default(spec, &w->shape, &w->valid[j]));
    assert_reordered(w, cold);
    mt_fmt(want, sizeof want, "E=128,N=768,K=2048,topk=8: %zu known picks first: %s, %zu engine default%s", w->n_warm,
           sources, w->n_warm - n, w->n_warm - n == 1 ? "" : "s");
    assert_string_equal(warm->warm, want);
    plan_destroy(&warm);
}

/* The engine's own files (the spec's incumbents) come after the database's picks and before the
 * engines' defaults, each entry once and only where the space and its rules keep it; the text
 * names the file by engine, device and Triton folder, and a --baseline file by its name. */
static void test_warm_start_engine_files(void **state) {
    (void)state;
    static const char *const entries[] = {"16x64x128x1x4x3", "32x64x128x1x8x3", "16x16x16x1x1x1", "32x64x128x1x8x3"};
    spec_t s;
    char err[256];
    plan_t *cold = NULL;
    int calls = 0;
    Moetune__Incumbent inc[5], *ptrs[5];
    Moetune__Config cfg[5];
    spec_init(&s, QWEN, 1);
    s.spec.backend = "triton";
    for (size_t i = 0; i < 5; i++) {
        krn_config_t c;
        assert_int_equal(krn_config_parse(i < 4 ? entries[i] : "64x64x64x1x4x4", &c), MT_OK);
        moetune__config__init(&cfg[i]);
        wire_config_to_msg(&c, &cfg[i]);
        moetune__incumbent__init(&inc[i]);
        inc[i].config = &cfg[i];
        inc[i].key = (uint32_t)(i + 1);
        inc[i].engine = i < 4 ? "sglang" : "";
        inc[i].source =
            i < 4 ? "/pkg/sglang/configs/triton_3_4_0/E=128,N=768,device_name=NVIDIA_H200.json" : "/t/mine.json";
        ptrs[i] = &inc[i];
    }
    s.spec.incumbents = ptrs;
    s.spec.n_incumbents = 4;
    plan_device_t dev = {.limits = krn_device_find("sm_90")->limits, .name = "NVIDIA H200"};
    assert_int_equal(plan_build_on(&s.spec, &dev, &cold, err, sizeof err), MT_OK);
    dev.warm = test_picks;
    dev.warm_ctx = &calls;
    check_warm(&s.spec, &dev, &cold->shapes[0],
               (const char *[]){"64x128x64x16x4x3", "16x64x128x1x4x3", "32x64x128x1x8x3"}, 3,
               "2 from test picks of E=128, 1 from sglang's bundled file for NVIDIA H200 (triton_3_4_0)");
    /* nothing in the database: the file's entries first; a --baseline file by its name */
    dev.warm = no_picks;
    s.spec.n_incumbents = 5;
    check_warm(&s.spec, &dev, &cold->shapes[0],
               (const char *[]){"16x64x128x1x4x3", "32x64x128x1x8x3", "64x64x64x1x4x4"}, 3,
               "2 from sglang's bundled file for NVIDIA H200 (triton_3_4_0), 1 from the --baseline file mine.json");
    /* no incumbent: the engine's file for the nearest shape (SweepSpec.warm_files), named so */
    Moetune__Incumbent *near = &inc[1];
    near->source = "/pkg/configs/triton_3_6_0/E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3,dtype=bf16.json";
    s.spec.n_incumbents = 0;
    s.spec.warm_files = &near;
    s.spec.n_warm_files = 1;
    check_warm(&s.spec, &dev, &cold->shapes[0], (const char *[]){"32x64x128x1x8x3"}, 1,
               "1 from sglang's bundled file for E=128,N=384 on NVIDIA H100 80GB HBM3 (triton_3_6_0)");
    plan_destroy(&cold);
}

/* Without a chunk, a costlier shape's jobs hold fewer configs, in proportion to the cost
 * model's estimate, and are stored (and so leased) first; shapes keep the spec's ids. */
static void test_chunks_by_shape(void **state) {
    /* Qwen3-30B-A3B's shape, then Mixtral-8x22B's (several times costlier per config) */
    static const uint32_t shapes[2][4] = {{128, 768, 2048, 8}, {8, 16384, 6144, 2}};
    spec_t s;
    char err[256];
    plan_t *p = NULL;
    spec_init(&s, shapes, 2);
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    const plan_shape_t *cheap = &p->shapes[0], *dear = &p->shapes[1];
    assert_true(dear->cost_us > 4 * cheap->cost_us);
    assert_int_equal(cheap->chunk, 16);
    assert_true(dear->chunk >= PLAN_MIN_CHUNK && dear->chunk <= 4);
    /* about equal job lengths: chunk x cost within a factor 1.5 of the cheap shape's */
    double ratio = dear->chunk * dear->cost_us / (cheap->chunk * cheap->cost_us);
    if (ratio < 0.67 || ratio > 1.5) fail_msg("job cost ratio %.2f", ratio);
    assert_int_equal(p->order[0], 1);
    assert_int_equal(p->order[1], 0);
    assert_int_equal(p->jobs, (cheap->n_valid + 15) / 16 + (dear->n_valid + dear->chunk - 1) / dear->chunk);
    plan_destroy(&p);

    Moetune__Submitted sub;
    store_spec(&s, &sub);
    assert_int_equal(query_int("SELECT COUNT(*) FROM shapes WHERE id = 1 AND e = 128"), 1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM shapes WHERE id = 2 AND e = 8"), 1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs"), sub.jobs);
    /* every job of the costly shape (2) before any of the cheap one (1) */
    assert_true(query_int("SELECT MAX(id) FROM jobs WHERE shape_id = 2") <
                query_int("SELECT MIN(id) FROM jobs WHERE shape_id = 1"));
    assert_int_equal(query_int("SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM job_configs JOIN jobs ON jobs.id = "
                               "job_id WHERE shape_id = 1 GROUP BY job_id)"),
                     16);

    (void)state;
}

typedef void (*spoil_fn)(spec_t *s);
static void spoil_no_shapes(spec_t *s) { s->spec.n_shapes = 0; }
static void spoil_zero_batch(spec_t *s) { s->bs[3] = 0; }
static void spoil_big_batch(spec_t *s) { s->bs[3] = PLAN_MAX_BATCH + 1; }
static void spoil_dup_batch(spec_t *s) { s->bs[3] = s->bs[2]; }
static void spoil_no_batch(spec_t *s) { s->spec.n_batch_sizes = 0; }
static void spoil_topk(spec_t *s) { s->shapes[0].topk = s->shapes[0].e + 1; }
static void spoil_strategy(spec_t *s) { s->spec.strategy = "random-guess"; }
static void spoil_dtype(spec_t *s) { s->shapes[0].dtype = "int3"; }
static Moetune__Space g_space;
static uint32_t g_bm[] = {16, 32};
static void spoil_space(spec_t *s) {
    moetune__space__init(&g_space);
    g_space.n_block_m = 2; /* the other lists empty */
    g_space.block_m = g_bm;
    s->spec.space = &g_space;
}

/* Every list at 16 values: 16^6 = 16,777,216 configs for one shape, each value in range. */
static Moetune__Space g_huge;
static uint32_t g_vals[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static void spoil_huge_space(spec_t *s) {
    moetune__space__init(&g_huge);
    g_huge.n_block_m = g_huge.n_block_n = g_huge.n_block_k = 16;
    g_huge.n_group_m = g_huge.n_num_warps = g_huge.n_num_stages = 16;
    g_huge.block_m = g_huge.block_n = g_huge.block_k = g_vals;
    g_huge.group_m = g_huge.num_warps = g_huge.num_stages = g_vals;
    s->spec.space = &g_huge;
}

static void test_invalid_specs(void **state) {
    static const struct {
        spoil_fn fn;
        const char *needle;
    } cases[] = {
        {spoil_no_shapes, "no shapes"},
        {spoil_zero_batch, "batch size 0"},
        {spoil_big_batch, "out of range"},
        {spoil_dup_batch, "repeat"},
        {spoil_no_batch, "no batch sizes"},
        {spoil_topk, "topk"},
        {spoil_strategy, "unknown strategy"},
        {spoil_dtype, "dtype"},
        {spoil_space, "list is empty"},
        {spoil_huge_space,
         "expands to 16777216 configs (1 shapes x 16777216 configs of the space), over the limit of 100000"},
    };
    char err[256];
    store_t *db = NULL;
    assert_int_equal(store_open(g_db.path, &db, err, sizeof err), MT_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec_t s;
        Moetune__Submitted sub;
        plan_t *p = NULL;
        spec_init(&s, QWEN, 1);
        cases[i].fn(&s);
        err[0] = '\0';
        assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
        assert_null(p);
        if (!strstr(err, cases[i].needle)) fail_msg("case %zu: reason '%s' lacks '%s'", i, err, cases[i].needle);
        err[0] = '\0';
        assert_int_equal(plan_store(db, &s.spec, &sub, err, sizeof err), MT_INVAL);
        assert_non_null(strstr(err, cases[i].needle));
    }
    store_close(&db);
    assert_nothing_stored();
}

/* A start that fails after the sweep row (here: every job insert fails, and so would the mark
 * as failed) leaves no sweep behind: nothing a later run would measure unasked. */
static void test_failed_start_leaves_nothing(void **state) {
    spec_t s;
    char err[256];
    store_t *db = NULL;
    sqlite3 *raw = NULL;
    Moetune__Submitted sub;
    spec_init(&s, QWEN, 1);
    assert_int_equal(store_open(g_db.path, &db, err, sizeof err), MT_OK);
    assert_int_equal(sqlite3_open(g_db.path, &raw), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(raw,
                     "CREATE TRIGGER no_jobs BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'disk full'); END;"
                     "CREATE TRIGGER no_marks BEFORE UPDATE ON sweeps BEGIN SELECT RAISE(ABORT, 'disk full'); END;",
                     NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_not_equal(plan_store(db, &s.spec, &sub, err, sizeof err), MT_OK);
    assert_non_null(strstr(err, "disk full"));
    store_close(&db);
    sqlite3_close(raw);
    assert_nothing_stored();
}

static void test_custom_space_and_measure(void **state) {
    spec_t s;
    char err[256];
    plan_t *p = NULL;
    static uint32_t bm[] = {16, 64}, bn[] = {64}, bk[] = {64, 128}, gm[] = {1}, nw[] = {4}, ns[] = {2, 3, 4};
    Moetune__Space sp = MOETUNE__SPACE__INIT;
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    sp.n_block_m = 2, sp.block_m = bm, sp.n_block_n = 1, sp.block_n = bn, sp.n_block_k = 2, sp.block_k = bk;
    sp.n_group_m = 1, sp.group_m = gm, sp.n_num_warps = 1, sp.num_warps = nw, sp.n_num_stages = 3, sp.num_stages = ns;
    m.warmup = 3;
    m.seed = 9;
    spec_init(&s, QWEN, 1);
    s.spec.space = &sp;
    s.spec.measure = &m;
    s.spec.strategy = "exhaustive";
    s.spec.max_attempts = 5;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_int_equal(p->configs_valid + p->configs_rejected, 12);
    assert_int_equal(p->measure.warmup, 3);
    assert_int_equal(p->measure.seed, 9);
    assert_int_equal(p->measure.max_samples, 100);
    assert_int_equal(p->max_attempts, 5);
    /* racing and its decide step on at their default margins; a negative decide margin stays off */
    assert_true(p->measure.race_margin == RACE_DEFAULT_MARGIN);
    assert_true(p->measure.decide_margin == HALVING_DECIDE_DEFAULT_MARGIN);
    plan_destroy(&p);
    m.decide_margin = -1;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(p->measure.decide_margin < 0);
    plan_destroy(&p);
}

/* A halving sweep races at HALVING_RACE_DEFAULT_MARGIN unless a margin is given; racing's own
 * default stays; a listed space races at neither. */
static void test_halving_margin(void **state) {
    spec_t s;
    plan_t *p = NULL;
    char err[256] = "";
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    spec_init(&s, QWEN, 1);
    s.spec.strategy = "halving";
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(p->measure.race_margin == HALVING_RACE_DEFAULT_MARGIN);
    assert_true(HALVING_RACE_DEFAULT_MARGIN < RACE_DEFAULT_MARGIN);
    plan_destroy(&p);
    m.race_margin = 0.3;
    s.spec.measure = &m;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(p->measure.race_margin == 0.3);
    plan_destroy(&p);
    s.spec.measure = NULL;
    s.spec.strategy = "exhaustive";
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_true(p->measure.race_margin == RACE_DEFAULT_MARGIN);
    plan_destroy(&p);
}

/* Both strategies plan the same jobs: halving's phases are the scheduler's. */
static void test_halving_accepted(void **state) {
    spec_t s;
    char err[256] = "";
    uint32_t v_ex = 0, r_ex = 0, j_ex = 0, v_hv = 0, r_hv = 0, j_hv = 0;
    spec_init(&s, QWEN, 1);
    s.spec.strategy = "exhaustive";
    assert_int_equal(plan_count(&s.spec, &v_ex, &r_ex, &j_ex, err, sizeof err), MT_OK);
    s.spec.strategy = "halving";
    assert_int_equal(plan_count(&s.spec, &v_hv, &r_hv, &j_hv, err, sizeof err), MT_OK);
    assert_int_equal(v_hv, v_ex);
    assert_int_equal(j_hv, j_ex);
    s.spec.strategy = "halvingx";
    assert_int_equal(plan_count(&s.spec, &v_hv, &r_hv, &j_hv, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "known: exhaustive, halving"));
}

/* A list of configs is the space itself: exactly those configs, in one job when the chunk
 * holds them; a list beside value lists, a repeat, a field out of range or more than
 * KRN_MAX_LIST configs are refused. */
static void test_config_list(void **state) {
    spec_t s;
    char err[256] = "";
    plan_t *p = NULL;
    static const krn_config_t want[3] = {{64, 128, 64, 16, 4, 4}, {16, 64, 128, 1, 4, 3}, {128, 256, 64, 1, 8, 4}};
    Moetune__Config cfg[KRN_MAX_LIST + 1];
    Moetune__Config *ptr[KRN_MAX_LIST + 1];
    for (size_t i = 0; i < KRN_MAX_LIST + 1; i++) {
        moetune__config__init(&cfg[i]);
        wire_config_to_msg(&want[i % 3], &cfg[i]); /* past 3 only the count is read */
        ptr[i] = &cfg[i];
    }
    Moetune__Space sp = MOETUNE__SPACE__INIT;
    sp.n_configs = 3;
    sp.configs = ptr;
    spec_init(&s, QWEN, 1);
    s.spec.space = &sp;
    s.spec.chunk = 3;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    /* the listed configs and, beside them in the one job, the ship guard's two defaults
     * (M <= E and M > E: 16x32x64x1x4x3, 64x64x32x8x4x3) */
    assert_int_equal(p->configs_valid + p->configs_rejected, 5);
    assert_int_equal(p->configs_valid, 5);
    assert_int_equal(p->jobs, 1);
    for (size_t i = 0; i < 3; i++) {
        bool found = false;
        for (size_t k = 0; k < p->shapes[0].n_valid; k++)
            found = found || memcmp(&p->shapes[0].valid[k], &want[i], sizeof want[i]) == 0;
        if (!found) fail_msg("listed config %zu is not in the plan", i);
    }
    plan_destroy(&p);
    /* no chunk and no measure given: one job of all the listed configs, racing and its decide
     * step off */
    s.spec.chunk = 0;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_OK);
    assert_int_equal(p->chunk, 5);
    assert_int_equal(p->jobs, 1);
    assert_true(p->measure.race_margin < 0);
    assert_true(p->measure.decide_margin < 0);
    plan_destroy(&p);
    s.spec.chunk = 3;

    static uint32_t bm[] = {64};
    sp.n_block_m = 1, sp.block_m = bm;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "exclude each other"));
    sp.n_block_m = 0, sp.block_m = NULL;

    cfg[2] = cfg[0];
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "64x128x64x16x4x4 is listed twice"));
    wire_config_to_msg(&want[2], &cfg[2]);

    cfg[1].block_m = 0;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "config 2: BLOCK_SIZE_M value 0 is out of range"));
    wire_config_to_msg(&want[1], &cfg[1]);

    s.spec.strategy = "halving";
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "strategy halving does not apply"));
    s.spec.strategy = NULL;

    sp.n_configs = KRN_MAX_LIST + 1;
    assert_int_equal(plan_build(&s.spec, &p, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "65 configs listed (at most 64)"));
    assert_null(p);
}

static bool in_list(const krn_config_t *v, size_t n, const krn_config_t *c) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&v[i], c, sizeof *c) == 0) return true;
    return false;
}

/* Space.sample: a fixed pseudo-random N of each shape's valid configs. Counted, the same for the
 * same spec, a prefix of one shuffle (a smaller sample is inside a larger), another with another
 * seed, spread over the space (not its first corner), everything when N is not below the valid
 * count; refused beside a list of configs. */
static void test_sample(void **state) {
    spec_t s;
    char err[256] = "";
    plan_t *all = NULL, *a = NULL, *b = NULL, *small = NULL, *other = NULL, *big = NULL;
    Moetune__Space sp = MOETUNE__SPACE__INIT;
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    spec_init(&s, QWEN, 1);
    assert_int_equal(plan_build(&s.spec, &all, err, sizeof err), MT_OK);
    size_t n_all = all->shapes[0].n_valid;
    assert_true(n_all > 1000);
    assert_int_equal(all->configs_unsampled, 0);
    s.spec.space = &sp;
    sp.sample = 100;
    assert_int_equal(plan_build(&s.spec, &a, err, sizeof err), MT_OK);
    assert_int_equal(a->configs_valid, 100);
    assert_int_equal(a->shapes[0].n_valid, 100);
    assert_int_equal(a->configs_unsampled, n_all - 100);
    assert_int_equal(a->configs_rejected, all->configs_rejected); /* left out is not rejected */
    assert_int_equal(a->results_planned, 100 * 18);
    assert_int_equal(a->jobs, (100 + a->shapes[0].chunk - 1) / a->shapes[0].chunk);
    const krn_config_t *v = a->shapes[0].valid;
    bool bm[257] = {false}, bn[257] = {false};
    for (size_t i = 0; i < 100; i++) {
        assert_true(in_list(all->shapes[0].valid, n_all, &v[i]));
        assert_false(in_list(v, i, &v[i])); /* no config twice */
        bm[v[i].block_m] = bn[v[i].block_n] = true;
    }
    /* the space order's first 100 are all BLOCK_SIZE_M 16, BLOCK_SIZE_N 32: a sample is spread */
    static const uint32_t bms[] = {16, 32, 64, 128, 256}, bns[] = {32, 64, 128, 256};
    for (size_t i = 0; i < 5; i++)
        if (!bm[bms[i]]) fail_msg("the sample of 100 has no BLOCK_SIZE_M %u", bms[i]);
    for (size_t i = 0; i < 4; i++)
        if (!bn[bns[i]]) fail_msg("the sample of 100 has no BLOCK_SIZE_N %u", bns[i]);
    assert_int_equal(plan_build(&s.spec, &b, err, sizeof err), MT_OK);
    assert_int_equal(b->shapes[0].n_valid, 100);
    assert_memory_equal(b->shapes[0].valid, v, 100 * sizeof *v); /* the same spec, the same jobs */
    sp.sample = 40;
    assert_int_equal(plan_build(&s.spec, &small, err, sizeof err), MT_OK);
    assert_int_equal(small->shapes[0].n_valid, 40);
    for (size_t i = 0; i < 40; i++) assert_true(in_list(v, 100, &small->shapes[0].valid[i]));
    sp.sample = 100;
    m.seed = 2;
    s.spec.measure = &m;
    assert_int_equal(plan_build(&s.spec, &other, err, sizeof err), MT_OK);
    size_t shared = 0;
    for (size_t i = 0; i < 100; i++) shared += in_list(v, 100, &other->shapes[0].valid[i]);
    if (shared > 50) fail_msg("seeds 1 and 2 share %zu of 100 sampled configs", shared);
    s.spec.measure = NULL;
    sp.sample = (uint32_t)n_all;
    assert_int_equal(plan_build(&s.spec, &big, err, sizeof err), MT_OK);
    assert_int_equal(big->configs_valid, n_all);
    assert_int_equal(big->configs_unsampled, 0);
    plan_destroy(&all), plan_destroy(&a), plan_destroy(&b), plan_destroy(&small), plan_destroy(&other);
    plan_destroy(&big);

    Moetune__Config cfg = MOETUNE__CONFIG__INIT, *ptr = &cfg;
    static const krn_config_t one = {64, 128, 64, 16, 4, 4};
    wire_config_to_msg(&one, &cfg);
    sp.n_configs = 1, sp.configs = &ptr, sp.sample = 1;
    assert_int_equal(plan_build(&s.spec, &a, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "a sample of it does not apply"));
    assert_null(a);
}

int main(void) {
    mt_log_init("test_planner", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_space_counts),
        cmocka_unit_test(test_divisibility_and_chunks),
        cmocka_unit_test(test_shape_without_configs),
        cmocka_unit_test_prestate_setup_teardown(test_chunks_by_shape, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_store_plan, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_warm_start_order, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test(test_warm_start_engine_files),
        cmocka_unit_test_prestate_setup_teardown(test_invalid_specs, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_failed_start_leaves_nothing, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test(test_custom_space_and_measure),
        cmocka_unit_test(test_halving_margin),
        cmocka_unit_test(test_halving_accepted),
        cmocka_unit_test(test_config_list),
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_triton_rules),
        cmocka_unit_test(test_triton_device_rules),
        cmocka_unit_test(test_fp8_block_engines),
        cmocka_unit_test(test_cuda_rejects_fp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
