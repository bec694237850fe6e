/* test_spec.c - flags and JSON spec files → SweepSpec, and their errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mt.h"
#include "planner.h"
#include "spec.h"

static void set_ok(cli_spec_t *s, const char *name, const char *val) {
    char err[400] = "";
    int rc = cli_spec_set(s, name, val, err, sizeof err);
    if (rc != MT_OK) fail_msg("--%s %s: %s", name, val, err);
}

static void set_bad(const char *name, const char *val, const char *reason_part) {
    cli_spec_t *s = cli_spec_new();
    char err[400] = "";
    assert_int_not_equal(cli_spec_set(s, name, val, err, sizeof err), MT_OK);
    if (!strstr(err, reason_part)) fail_msg("--%s %s: reason '%s' lacks '%s'", name, val, err, reason_part);
    cli_spec_destroy(&s);
    assert_null(s);
}

/* A spec of the settings given (name, value pairs, NULL-ended) that cli_spec_finish refuses
 * with a reason that contains reason_part. */
static void finish_bad(const char *reason_part, ...) {
    cli_spec_t *s = cli_spec_new();
    char err[400] = "";
    va_list ap;
    va_start(ap, reason_part);
    for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *))
        set_ok(s, k, va_arg(ap, const char *));
    va_end(ap);
    assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_INVAL);
    if (!strstr(err, reason_part)) fail_msg("reason '%s' lacks '%s'", err, reason_part);
    cli_spec_destroy(&s);
}

/* cli_spec_compare(a, b) answers (asserted) that they differ, naming what among the differences. */
static void assert_differs(const Moetune__SweepSpec *a, const Moetune__SweepSpec *b, const char *what) {
    bool same = true;
    char diff[1000] = "";
    int rc = cli_spec_compare(a, b, &same, diff, sizeof diff);
    if (rc) fprintf(stderr, "compare: %s\n", diff);
    assert_int_equal(rc, MT_OK);
    if (same || !strstr(diff, what)) fail_msg("same=%d, diff '%s' lacks '%s'", same, diff, what);
}

static void test_flags(void **state) {
    cli_spec_t *s = cli_spec_new();
    char err[400] = "";
    set_ok(s, "shape", "E=128,N=768,K=2048,topk=8");
    set_ok(s, "shape", "E=256,N=256,K=7168,topk=8,dtype=fp8_w8a8,block_shape=128x128");
    set_ok(s, "model", "qwen3-30b-a3b");
    set_ok(s, "tp", "2");
    set_ok(s, "batch-sizes", "1,2,4,64");
    set_ok(s, "block-m", "16,32");
    set_ok(s, "chunk", "8");
    set_ok(s, "name", "nightly");
    set_ok(s, "rsd-target", "0.02");
    set_ok(s, "config-timeout-ms", "1500");
    set_ok(s, "strategy", "halving");
    assert_int_equal(cli_spec_finish(s, false, err, sizeof err), MT_OK);
    const Moetune__SweepSpec *p = cli_spec_get(s);
    assert_non_null(p);
    assert_string_equal(p->name, "nightly");
    assert_int_equal(p->n_shapes, 3);
    assert_int_equal(p->shapes[0]->e, 128);
    assert_int_equal(p->shapes[1]->block_n, 128);
    assert_string_equal(p->shapes[1]->dtype, "fp8_w8a8");
    assert_int_equal(p->shapes[2]->e, 128); /* qwen3-30b-a3b at TP 2 */
    assert_int_equal(p->shapes[2]->n, 384);
    assert_int_equal(p->n_batch_sizes, 4);
    assert_int_equal(p->batch_sizes[3], 64);
    assert_non_null(p->space);
    assert_int_equal(p->space->n_block_m, 2);
    assert_int_equal(p->space->n_block_n, 4); /* not given: the default list */
    assert_int_equal(p->space->n_num_stages, 4);
    assert_int_equal(p->chunk, 8);
    assert_string_equal(p->strategy, "halving");
    assert_non_null(p->measure);
    assert_true(p->measure->rsd_target == 0.02);
    assert_int_equal(p->measure->timeout_ms, 1500);
    /* Packs and unpacks to the same work. */
    size_t len = moetune__sweep_spec__get_packed_size(p);
    uint8_t buf[4096];
    assert_true(len < sizeof buf);
    moetune__sweep_spec__pack(p, buf);
    Moetune__SweepSpec *back = moetune__sweep_spec__unpack(NULL, len, buf);
    assert_non_null(back);
    bool same = false;
    char diff[1000];
    assert_true(cli_spec_same_target(p, back));
    assert_int_equal(cli_spec_compare(back, p, &same, diff, sizeof diff), MT_OK);
    assert_true(same);
    back->batch_sizes[0] = 3;
    assert_differs(back, p, "batch sizes 3,2,4,64, now 1,2,4,64");
    moetune__sweep_spec__free_unpacked(back, NULL);
    cli_spec_destroy(&s);
}

/* --engines: which engines' fp8 block rules a triton sweep keeps; part of the work. */
static void test_engines(void **state) {
    cli_spec_t *s = cli_spec_new(), *t = cli_spec_new();
    char err[400] = "";
    set_ok(s, "shape", "E=256,N=256,K=7168,topk=8,dtype=fp8_w8a8,block_shape=128x128");
    set_ok(s, "engines", "sglang,vllm");
    assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_OK);
    const Moetune__SweepSpec *p = cli_spec_get(s);
    assert_int_equal(p->n_engines, 2);
    assert_string_equal(p->engines[0], "sglang");
    assert_string_equal(p->engines[1], "vllm");
    set_ok(t, "shape", "E=256,N=256,K=7168,topk=8,dtype=fp8_w8a8,block_shape=128x128");
    set_ok(t, "engines", "vllm");
    assert_int_equal(cli_spec_finish(t, true, err, sizeof err), MT_OK);
    assert_int_equal(cli_spec_get(t)->n_engines, 1);
    assert_differs(p, cli_spec_get(t), "engines");
    cli_spec_destroy(&s);
    cli_spec_destroy(&t);
    set_bad("engines", "trt", "not sglang, vllm or sglang,vllm");
    set_bad("engines", "sglang,sglang", "not sglang, vllm or sglang,vllm");
    set_bad("engines", "sglang,", "not sglang, vllm or sglang,vllm");
    set_bad("engines", "", "not sglang, vllm or sglang,vllm");
    set_bad("engines", "sglang,vllm,sglang", "not sglang, vllm or sglang,vllm");
}

/* --routing: a .npy that fits every shape gives each its sha256 and the spec the resolved path;
 * one that does not fit a shape, or is not there, is refused naming why. */
static void test_routing(void **state) {
    char path[] = "/tmp/test_spec_routing_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char hdr[] = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }";
    char buf[256];
    size_t hl = strlen(hdr), pad = 64 - (10 + hl + 1) % 64, hlen = hl + pad + 1;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)hlen;
    buf[9] = 0;
    memcpy(buf + 10, hdr, hl);
    memset(buf + 10 + hl, ' ', pad);
    buf[10 + hlen - 1] = '\n';
    const int32_t ids[4] = {0, 5, 6, 7};
    memcpy(buf + 10 + hlen, ids, sizeof ids);
    assert_int_equal(write(fd, buf, 10 + hlen + sizeof ids), (ssize_t)(10 + hlen + sizeof ids));
    close(fd);
    char err[400] = "";
    cli_spec_t *s = cli_spec_new();
    set_ok(s, "shape", "E=8,N=256,K=512,topk=2");
    set_ok(s, "shape", "E=16,N=256,K=512,topk=2");
    set_ok(s, "routing", path);
    assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_OK);
    const Moetune__SweepSpec *p = cli_spec_get(s);
    assert_string_equal(p->routing_path, path);
    assert_int_equal(p->routing_tokens, 2);
    assert_int_equal(strlen(p->shapes[0]->routing), 64);
    assert_string_equal(p->shapes[0]->routing, p->shapes[1]->routing);
    cli_spec_t *u = cli_spec_new();
    set_ok(u, "shape", "E=8,N=256,K=512,topk=2");
    set_ok(u, "shape", "E=16,N=256,K=512,topk=2");
    assert_int_equal(cli_spec_finish(u, true, err, sizeof err), MT_OK);
    assert_string_equal(cli_spec_get(u)->shapes[0]->routing, "");
    assert_differs(p, cli_spec_get(u), "routing");
    cli_spec_destroy(&u);
    cli_spec_destroy(&s);
    /* id 7 does not fit E=4; topk 2 does not fit topk=4 */
    static const struct {
        const char *shape, *why;
    } bad[] = {
        {"E=4,N=256,K=512,topk=2", "does not fit shape E=4,topk=2: expert id 7 is out of range 0..3 (E=4)"},
        {"E=8,N=256,K=512,topk=4", "2 experts per token, the shape has topk=4"},
    };
    for (size_t i = 0; i < 2; i++) {
        s = cli_spec_new();
        set_ok(s, "shape", bad[i].shape);
        set_ok(s, "routing", path);
        assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_INVAL);
        if (!strstr(err, bad[i].why)) fail_msg("'%s' lacks '%s'", err, bad[i].why);
        cli_spec_destroy(&s);
    }
    unlink(path);
    s = cli_spec_new();
    set_ok(s, "shape", "E=8,N=256,K=512,topk=2");
    set_ok(s, "routing", path);
    assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "No such file"));
    cli_spec_destroy(&s);
}

static void test_defaults(void **state) {
    cli_spec_t *s = cli_spec_new();
    char err[400] = "";
    set_ok(s, "shape", "E=128,N=768,K=2048,topk=8");
    set_ok(s, "shape", "E=128,N=768,K=2048,topk=8"); /* the same shape twice is tuned once */
    assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_OK);
    const Moetune__SweepSpec *p = cli_spec_get(s);
    assert_int_equal(p->n_shapes, 1);
    assert_int_equal(p->n_batch_sizes, 18);
    assert_int_equal(p->batch_sizes[17], 4096);
    assert_int_equal(p->space->n_block_m * p->space->n_block_n * p->space->n_block_k * p->space->n_group_m *
                         p->space->n_num_warps * p->space->n_num_stages,
                     1920);
    assert_string_equal(p->strategy, "exhaustive");
    assert_int_equal(p->chunk, 0); /* not given: the coordinator sizes each shape's jobs */
    assert_string_equal(p->name, "E=128,N=768,K=2048,topk=8");
    assert_null(p->measure);
    cli_spec_destroy(&s);
}

/* A finished spec of the given flags (pairs of name, value; NULL ends). Caller destroys. */
static cli_spec_t *made(const char *first, ...) {
    cli_spec_t *s = cli_spec_new();
    char err[400] = "";
    set_ok(s, "shape", "E=128,N=768,K=2048,topk=8");
    va_list ap;
    va_start(ap, first);
    for (const char *k = first; k; k = va_arg(ap, const char *)) set_ok(s, k, va_arg(ap, const char *));
    va_end(ap);
    if (cli_spec_finish(s, true, err, sizeof err) != MT_OK) fail_msg("finish: %s", err);
    return s;
}

/* Resume decisions compare expanded plans: absent and zero settings are the planner's
 * defaults, never wildcards; every difference is named. */
static void test_compare(void **state) {
    struct {
        const char *k, *v, *diff;
    } cases[] = {
        {"min-samples", "20", "min_samples 10, now 20"},
        {"max-samples", "50", "max_samples 100, now 50"},
        {"rsd-target", "0.05", "rsd_target 0.01, now 0.05"},
        {"warmup", "5", "warmup 2, now 5"},
        {"seed", "7", "seed 1, now 7"},
        {"budget-ms", "10", "budget_ms 1000, now 10"},
        {"config-timeout-ms", "500", "timeout_ms 60000, now 500"},
        {"chunk", "4", "chunk by shape, now 4"},
        {"max-attempts", "9", "max_attempts 3, now 9"},
        {"block-m", "16,32", "block_m 16,32,64,128,256, now 16,32"},
        {"batch-sizes", "1,2", "batch sizes 1,2,4,8"},
        {"device-filter", "H100", "device filter '', now 'H100'"},
        {"decide-margin", "0.05", "decide_margin 0.02, now 0.05"},
        {"decide-margin", "0", "decide_margin 0.02, now 0"},
    };
    cli_spec_t *base = made(NULL);
    bool same = true;
    char diff[1000];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_spec_t *now = made(cases[i].k, cases[i].v, NULL);
        assert_true(cli_spec_same_target(cli_spec_get(base), cli_spec_get(now)));
        assert_int_equal(cli_spec_compare(cli_spec_get(base), cli_spec_get(now), &same, diff, sizeof diff), MT_OK);
        if (same || !strstr(diff, cases[i].diff))
            fail_msg("--%s %s: same=%d, diff '%s' lacks '%s'", cases[i].k, cases[i].v, same, diff, cases[i].diff);
        cli_spec_destroy(&now);
    }
    /* The defaults given explicitly are the same work as none given. */
    cli_spec_t *now =
        made("min-samples", "10", "seed", "1", "rsd-target", "0.01", "warmup", "2", "decide-margin", "0.02", NULL);
    assert_int_equal(cli_spec_compare(cli_spec_get(base), cli_spec_get(now), &same, diff, sizeof diff), MT_OK);
    if (!same) fail_msg("explicit defaults differ: %s", diff);
    cli_spec_destroy(&now);
    /* Two settings changed: both named. */
    now = made("min-samples", "20", "seed", "3", NULL);
    assert_differs(cli_spec_get(base), cli_spec_get(now), "min_samples 10, now 20; seed 1, now 3");
    cli_spec_destroy(&now);
    /* Another name or shape is another target. */
    now = made("name", "other", NULL);
    assert_false(cli_spec_same_target(cli_spec_get(base), cli_spec_get(now)));
    cli_spec_destroy(&now);
    cli_spec_destroy(&base);
}

/* Whether the planner measures spec's side-by-side rounds each in a new child. */
static bool planned_fresh(const cli_spec_t *s) {
    Moetune__Measure m;
    plan_measure(cli_spec_get(s), &m);
    return m.fresh_rounds > 0;
}

/* --round-process: new by default where the sweep's workers are cuda ones (a new child per
 * round costs 0.3 s there) but for halving, same for triton (6 s), sim and any backend; given,
 * it holds. The default is the planner's: the spec carries no measurement settings for it. */
static void test_round_process_default(void **state) {
    static const struct {
        const char *backend, *given;
        bool fresh;
    } cases[] = {
        {"cuda", NULL, true},    {"triton", NULL, false}, {"sim", NULL, false}, {NULL, NULL, false},
        {"cuda", "same", false}, {"triton", "new", true}, {NULL, "new", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_spec_t *s = cases[i].backend && cases[i].given
                            ? made("worker-backend", cases[i].backend, "round-process", cases[i].given, NULL)
                        : cases[i].backend ? made("worker-backend", cases[i].backend, NULL)
                        : cases[i].given   ? made("round-process", cases[i].given, NULL)
                                           : made(NULL);
        bool fresh = planned_fresh(s);
        if (fresh != cases[i].fresh)
            fail_msg("backend %s, --round-process %s: fresh_rounds %d, want %d", cases[i].backend ? cases[i].backend : "-",
                     cases[i].given ? cases[i].given : "-", fresh, cases[i].fresh);
        if (!cases[i].given) assert_null(cli_spec_get(s)->measure);
        cli_spec_destroy(&s);
    }
    /* halving on cuda: one child unless asked */
    cli_spec_t *h = made("worker-backend", "cuda", "strategy", "halving", NULL);
    assert_false(planned_fresh(h));
    cli_spec_destroy(&h);
    h = made("worker-backend", "cuda", "strategy", "halving", "round-process", "new", NULL);
    assert_true(planned_fresh(h));
    cli_spec_destroy(&h);
    /* a cuda sweep resumed with `same` differs by that setting alone; `new` given is the default */
    cli_spec_t *a = made("worker-backend", "cuda", NULL), *b = made("worker-backend", "cuda", "round-process", "same", NULL);
    assert_differs(cli_spec_get(a), cli_spec_get(b), "round_process new, now same");
    cli_spec_destroy(&b);
    b = made("worker-backend", "cuda", "round-process", "new", NULL);
    bool same = false;
    char diff[1000] = "";
    assert_int_equal(cli_spec_compare(cli_spec_get(a), cli_spec_get(b), &same, diff, sizeof diff), MT_OK);
    if (!same) fail_msg("--round-process new on cuda differs from the default: %s", diff);
    cli_spec_destroy(&a);
    cli_spec_destroy(&b);
}

static void test_bad_flags(void **state) {
    set_bad("shape", "E=128,N=768", "");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,foo=1", "");
    set_bad("shape", "E=0,N=768,K=2048,topk=8", "E=0");
    set_bad("shape", "E=128,N=-5,K=2048,topk=8", "N=-5");
    set_bad("shape", "E=4,N=768,K=2048,topk=8", "topk=8 is larger than E=4");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,block_shape=128x128", "only to dtype=fp8_w8a8");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,dtype=bf16,block_shape=128x128", "only to dtype=fp8_w8a8");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,dtype=fp8_w8a8,block_shape=-1x5", "block_shape=-1x5 is not NxK");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,dtype=fp8_w8a8,block_shape=128x", "is not NxK");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,dtype=fp8_w8a8,block_shape=128x128x1", "is not NxK");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,E=64", "E is given twice");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,dtype=bf16,dtype=fp8_w8a8", "dtype is given twice");
    set_bad("shape", "E=128,N=768,K=2048,topk=8,dtype=fp8_w8a8,block_shape=128x128,block_shape=64x64",
            "block_shape is given twice");
    set_bad("batch-sizes", "1,0,4", "'0'");
    set_bad("batch-sizes", "1,-2", "'-2'");
    set_bad("batch-sizes", "1,2,2", "2 appears twice");
    set_bad("block-m", "", "empty");
    set_bad("chunk", "0", "--chunk 0");
    set_bad("model", "nosuch", "unknown model 'nosuch'");
    set_bad("tp", "0", "--tp 0");
    set_bad("dtype", "fp4", "--dtype fp4");
    set_bad("strategy", "random", "unknown strategy");
    set_bad("rsd-target", "2", "--rsd-target 2");
    set_bad("warmup", "0", "--warmup 0"); /* zero would be taken for the default 2 */
    set_bad("seed", "0", "--seed 0");     /* zero would be taken for the default 1 */
    set_bad("decide-margin", "1", "--decide-margin 1: not a fraction from 0 (off) to below 1");
    set_bad("race-margin", "-0.1", "--race-margin -0.1: not a fraction from 0 (off) to below 10");
    set_bad("nonsense", "1", "unknown spec option");

    finish_bad("no shape", NULL);
    finish_bad("--tp", "shape", "E=128,N=768,K=2048,topk=8", "tp", "2", NULL);
    finish_bad("not divisible by TP 3", "model", "mixtral-8x7b", "tp", "3", NULL);
    finish_bad("--min-samples 50", "shape", "E=128,N=768,K=2048,topk=8", "min-samples", "50", "max-samples", "10",
               NULL);
}

static void test_json(void **state) {
    const char *doc =
        "{\"name\": \"j\", \"shapes\": [\"E=128,N=768,K=2048,topk=8\","
        " {\"E\": 256, \"N\": 256, \"K\": 7168, \"topk\": 8, \"dtype\": \"fp8_w8a8\", \"block_shape\": [128, 128]}],"
        " \"models\": [{\"name\": \"gpt-oss-120b\", \"tp\": 4}], \"batch_sizes\": [1, 16, 256],"
        " \"space\": {\"block_m\": [16, 64], \"num_warps\": [4]}, \"chunk\": 32, \"strategy\": \"halving\","
        " \"measure\": {\"warmup\": 3, \"max_samples\": 50, \"seed\": 7, \"timeout_ms\": 9000}}";
    cli_spec_t *s = cli_spec_new();
    char err[400] = "";
    int rc = cli_spec_parse_json(s, doc, strlen(doc), err, sizeof err);
    if (rc != MT_OK) fail_msg("%s", err);
    assert_int_equal(cli_spec_finish(s, false, err, sizeof err), MT_OK);
    const Moetune__SweepSpec *p = cli_spec_get(s);
    assert_string_equal(p->name, "j");
    assert_int_equal(p->n_shapes, 3);
    assert_int_equal(p->shapes[1]->block_k, 128);
    assert_int_equal(p->shapes[2]->n, 720);
    assert_int_equal(p->n_batch_sizes, 3);
    assert_int_equal(p->space->n_block_m, 2);
    assert_int_equal(p->space->num_warps[0], 4);
    assert_int_equal(p->chunk, 32);
    assert_string_equal(p->strategy, "halving");
    assert_int_equal(p->measure->warmup, 3);
    assert_int_equal(p->measure->max_samples, 50);
    assert_int_equal(p->measure->seed, 7);
    assert_int_equal(p->measure->timeout_ms, 9000);
    cli_spec_destroy(&s);

    /* Through a file, as --spec does. */
    char path[] = "/tmp/test_spec_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"shapes\": [\"E=8,N=1792,K=4096,topk=2\"], \"batch_sizes\": [1, 2]}", f);
    fclose(f);
    s = cli_spec_new();
    set_ok(s, "spec", path);
    set_ok(s, "batch-sizes", "4"); /* a flag after --spec overrides the file */
    assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_OK);
    assert_int_equal(cli_spec_get(s)->n_batch_sizes, 1);
    assert_int_equal(cli_spec_get(s)->batch_sizes[0], 4);
    assert_int_equal(cli_spec_get(s)->shapes[0]->n, 1792);
    cli_spec_destroy(&s);
    unlink(path);
}

static void json_bad(const char *doc, const char *reason_part) {
    cli_spec_t *s = cli_spec_new();
    char err[400] = "";
    assert_int_not_equal(cli_spec_parse_json(s, doc, strlen(doc), err, sizeof err), MT_OK);
    if (!strstr(err, reason_part)) fail_msg("'%s': reason '%s' lacks '%s'", doc, err, reason_part);
    cli_spec_destroy(&s);
}

static void test_json_bad(void **state) {
    json_bad("{\"shapes\": [\"E=128\"", "not valid JSON");
    json_bad("[]", "not a JSON object");
    json_bad("{\"strategy\": \"random\"}", "unknown strategy");
    json_bad("{\"colour\": 1}", "unknown key \"colour\"");
    json_bad("{\"space\": {\"block_q\": [1]}}", "unknown key \"block_q\"");
    json_bad("{\"measure\": {\"warmup\": -1}}", "--warmup -1");
    json_bad("{\"batch_sizes\": [1, 0]}", "'0'");
    json_bad("{\"batch_sizes\": \"many\"}", "'many'");
    json_bad("{\"batch_sizes\": {\"a\": 1}}", "wrong type");
    json_bad("{\"shapes\": [{\"E\": 128, \"N\": 768, \"K\": 2048, \"topk\": 8, \"colour\": 1}]}",
             "unknown key \"colour\"");
    json_bad("{\"shapes\": [{\"E\": 128, \"N\": 0, \"K\": 2048, \"topk\": 8}]}", "N=0");
    json_bad("{\"shapes\": \"E=128,N=768,K=2048,topk=8\"}", "not an array");
    json_bad("{\"models\": [{\"name\": \"gpt-oss-20b\", \"pp\": 2}]}", "unknown key \"pp\"");
    cli_spec_t *s = cli_spec_new();
    char err[400];
    assert_int_not_equal(cli_spec_set(s, "spec", "/nonexistent/spec.json", err, sizeof err), MT_OK);
    assert_non_null(strstr(err, "/nonexistent/spec.json"));
    cli_spec_destroy(&s);
}

/* --configs (and JSON "configs"): exactly the listed configs in one job with racing off,
 * no default space beside them; a changed list is a changed sweep; bad text is refused. */
static void test_configs(void **state) {
    cli_spec_t *a = made("configs", "64x128x64x16x4x4,16x64x128x1x4x3", "configs", "128x256x64x1x8x4", NULL);
    const Moetune__SweepSpec *p = cli_spec_get(a);
    Moetune__Measure m;
    assert_non_null(p->space);
    assert_int_equal(p->space->n_configs, 3);
    assert_int_equal(p->space->n_block_m, 0);
    assert_int_equal(p->space->n_num_stages, 0);
    assert_int_equal(p->space->configs[1]->block_m, 16);
    assert_int_equal(p->space->configs[1]->num_stages, 3);
    assert_int_equal(p->space->configs[2]->num_warps, 8);
    assert_int_equal(p->chunk, 0);
    /* as planned: one job, racing off */
    plan_t *plan = NULL;
    char why[300];
    if (plan_build(p, &plan, why, sizeof why) != MT_OK) fail_msg("%s", why);
    assert_int_equal(plan->jobs, 1);
    assert_int_equal(plan->chunk, plan->configs_valid); /* the 3 listed and the ship guard's, one job */
    assert_true(plan->measure.race_margin < 0);
    plan_destroy(&plan);
    assert_non_null(strstr(p->name, ",K=2048,topk=8 (3 configs)"));

    /* The same list through JSON is the same sweep; another list is not. */
    const char *doc = "{\"shapes\": [\"E=128,N=768,K=2048,topk=8\"], \"configs\": [\"64x128x64x16x4x4\", "
                      "\"16x64x128x1x4x3\", \"128x256x64x1x8x4\"]}";
    cli_spec_t *j = cli_spec_new();
    char err[400] = "", diff[600] = "";
    bool same = false;
    if (cli_spec_parse_json(j, doc, strlen(doc), err, sizeof err) != MT_OK) fail_msg("%s", err);
    assert_int_equal(cli_spec_finish(j, true, err, sizeof err), MT_OK);
    assert_int_equal(cli_spec_compare(p, cli_spec_get(j), &same, diff, sizeof diff), MT_OK);
    if (!same) fail_msg("the same list differs: %s", diff);
    cli_spec_t *b = made("configs", "64x128x64x16x4x4,16x64x128x1x4x3,128x256x64x1x8x3", NULL);
    assert_int_equal(cli_spec_compare(p, cli_spec_get(b), &same, diff, sizeof diff), MT_OK);
    assert_false(same);
    assert_non_null(strstr(diff, "configs 3 listed, now 3 listed (other configs)"));
    cli_spec_destroy(&b);
    cli_spec_destroy(&j);
    cli_spec_destroy(&a);

    /* Racing stays as given. */
    a = made("configs", "64x128x64x16x4x4", "race-margin", "0.3", NULL);
    assert_true(cli_spec_get(a)->measure->race_margin > 0.29);
    plan_measure(cli_spec_get(a), &m);
    assert_true(m.race_margin > 0.29);
    cli_spec_destroy(&a);

    set_bad("configs", "64x128x64x16x4", "is not BLOCK_SIZE_MxNxKxGROUP_SIZE_Mxnum_warpsxnum_stages");
    set_bad("configs", "64x128x64x16x4x4,", "an empty or overlong config");
    set_bad("configs", "64x128x64x16x4x99", "64x128x64x16x4x99 is not");
    cli_spec_t *s = cli_spec_new();
    set_ok(s, "shape", "E=128,N=768,K=2048,topk=8");
    set_ok(s, "configs", "64x128x64x16x4x4");
    set_ok(s, "block-m", "16");
    assert_int_equal(cli_spec_finish(s, true, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "--configs and the value lists"));
    cli_spec_destroy(&s);
    json_bad("{\"configs\": \"64x128x64x16x4x4\"}", "not an array of configs");
    json_bad("{\"configs\": [7]}", "item 1 is not a string");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags),    cmocka_unit_test(test_engines),   cmocka_unit_test(test_routing),
        cmocka_unit_test(test_defaults), cmocka_unit_test(test_round_process_default),
        cmocka_unit_test(test_bad_flags), cmocka_unit_test(test_json),
        cmocka_unit_test(test_json_bad), cmocka_unit_test(test_compare),   cmocka_unit_test(test_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
