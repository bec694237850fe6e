/* test_sim.c - the sim backend: determinism, configs that win at different batch
 * sizes, static-rule rejection, fault specs, wrong results and the RSD stop rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "sim.h"
#include "space.h"

static void shape_default(krn_shape_t *s) {
    char err[128];
    assert_int_equal(krn_shape_parse("E=128,N=768,K=2048,topk=8", s, err, sizeof err), MT_OK);
}

static void measure_default(wrk_measure_t *m) {
    memset(m, 0, sizeof *m);
    m->warmup = 3;
    m->min_samples = 5;
    m->max_samples = 50;
    m->rsd_target = 0.01;
    m->seed = 1234;
}

static void *open_sim(const char *faults) {
    wrk_backend_opts_t o;
    wrk_device_t dev;
    char err[256] = "";
    void *st = NULL;
    memset(&o, 0, sizeof o);
    o.sim_faults = faults;
    assert_int_equal(wrk_backend_sim.open(&o, &st, &dev, err, sizeof err), MT_OK);
    assert_non_null(st);
    return st;
}

/* A measurement on the sim backend: the default shape, a config, measure_default's settings
 * and the backend it runs on (st, opened by the test). */
typedef struct {
    krn_shape_t s;
    krn_config_t c;
    wrk_measure_t m;
    uint32_t regs, spills;
    char err[128];
    void *st;
} sim_case_t;

static void sim_case(sim_case_t *k, krn_config_t c) {
    memset(k, 0, sizeof *k);
    shape_default(&k->s);
    k->c = c;
    measure_default(&k->m);
}

/* k's config measured at bs[0, n) into out; the backend's code. */
static int sim_measure(sim_case_t *k, const uint32_t *bs, size_t n, wrk_meas_t *out) {
    return wrk_backend_sim.measure(k->st, &k->s, &k->c, bs, n, &k->m, out, &k->regs, &k->spills, k->err, sizeof k->err);
}

/* open() with o fails, leaves no state and names part of o in its reason. */
static void open_refused(const wrk_backend_opts_t *o, const char *part) {
    wrk_device_t dev;
    char err[256] = "";
    void *st = NULL;
    assert_int_equal(wrk_backend_sim.open(o, &st, &dev, err, sizeof err), MT_ERR);
    assert_null(st);
    assert_non_null(strstr(err, part));
}

static void test_find(void **unused) {
    (void)unused;
    assert_ptr_equal(wrk_backend_find("sim"), &wrk_backend_sim);
    assert_null(wrk_backend_find("nope"));
    assert_null(wrk_backend_find(NULL));
    assert_non_null(strstr(wrk_backend_names(), "sim"));
}

static void test_device(void **unused) {
    (void)unused;
    wrk_backend_opts_t o;
    wrk_device_t a, b;
    char err[256];
    void *st = NULL;
    memset(&o, 0, sizeof o);
    assert_int_equal(wrk_backend_sim.open(&o, &st, &a, err, sizeof err), MT_OK);
    wrk_backend_sim.close(&st);
    assert_null(st);
    o.gpu_index = 3;
    assert_int_equal(wrk_backend_sim.open(&o, &st, &b, err, sizeof err), MT_OK);
    wrk_backend_sim.close(&st);
    assert_string_equal(a.compiler, "sim");
    assert_string_equal(a.name, "NVIDIA H200");
    assert_int_equal(a.sm_count, 132);
    assert_int_equal(strncmp(a.uuid, "SIM-", 4), 0);
    assert_string_not_equal(a.uuid, b.uuid);
    assert_string_equal(a.kernel_hash, b.kernel_hash);
    o.sim_device = "h100";
    assert_int_equal(wrk_backend_sim.open(&o, &st, &b, err, sizeof err), MT_OK);
    wrk_backend_sim.close(&st);
    assert_non_null(strstr(b.name, "H100"));
    o.sim_device = "z9000";
    open_refused(&o, "z9000");
}

static void test_determinism(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t a[4], b[4], d[4];
    uint32_t bs[4] = {1, 64, 512, 4096};
    sim_case(&k, (krn_config_t){64, 128, 128, 16, 4, 3});
    k.st = open_sim(NULL);
    assert_int_equal(sim_measure(&k, bs, 4, a), MT_OK);
    assert_int_equal(sim_measure(&k, bs, 4, b), MT_OK);
    k.m.seed = 99;
    assert_int_equal(sim_measure(&k, bs, 4, d), MT_OK);
    int differs = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(a[i].status, MOETUNE__STATUS__STATUS_OK);
        assert_true(a[i].median_us > 0 && a[i].min_us > 0 && a[i].min_us <= a[i].median_us);
        assert_true(a[i].samples >= 5 && a[i].samples <= 50);
        assert_memory_equal(&a[i].median_us, &b[i].median_us, sizeof(double));
        assert_memory_equal(&a[i].mean_us, &b[i].mean_us, sizeof(double));
        assert_memory_equal(&a[i].stddev_us, &b[i].stddev_us, sizeof(double));
        assert_int_equal(a[i].samples, b[i].samples);
        if (a[i].mean_us != d[i].mean_us) differs = 1;
    }
    assert_true(differs); /* another seed draws other noise */
    assert_true(a[3].median_us > a[0].median_us);
    assert_true(k.regs > 0);
    wrk_backend_sim.close(&k.st);
}

/* The noise-free argmin over the default space at batch size m. */
static double best_at(const krn_shape_t *s, uint32_t m, krn_config_t *best) {
    krn_space_t space;
    krn_limits_t lim;
    char why[160];
    double best_us = 0;
    krn_space_default(&space);
    krn_limits_default(&lim);
    for (size_t i = 0; i < krn_space_size(&space); i++) {
        krn_config_t c;
        krn_space_at(&space, i, &c);
        if (krn_check(s, &c, &lim, why, sizeof why) != MT_OK) continue;
        double us = wrk_sim_latency_us(s, &c, m);
        assert_true(us > 0 && us < 1e9);
        if (best_us == 0 || us < best_us) {
            best_us = us;
            *best = c;
        }
    }
    return best_us;
}

static void test_winners_differ(void **unused) {
    (void)unused;
    krn_shape_t s;
    krn_config_t small, large, c;
    shape_default(&s);
    double t1 = best_at(&s, 1, &small);
    double t4096 = best_at(&s, 4096, &large);
    assert_memory_not_equal(&small, &large, sizeof small);
    assert_true(small.block_m <= 32);
    assert_true(large.block_m >= 64);
    assert_true(t4096 > 10 * t1);
    double prev = 0;
    for (size_t i = 0; i < krn_n_default_batch_sizes; i++) {
        double t = best_at(&s, krn_default_batch_sizes[i], &c);
        assert_true(t >= prev);
        prev = t;
    }
    /* Neither winner is best at the other end: the choice matters. */
    assert_true(wrk_sim_latency_us(&s, &large, 1) > t1 * 1.05);
    assert_true(wrk_sim_latency_us(&s, &small, 4096) > t4096 * 1.05);
}

static void test_invalid(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[2];
    uint32_t bs[2] = {1, 8};
    sim_case(&k, (krn_config_t){256, 256, 256, 1, 4, 5}); /* far over shared memory and registers */
    k.regs = k.spills = 7;
    k.st = open_sim(NULL);
    assert_int_equal(sim_measure(&k, bs, 2, out), MT_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(out[i].status, MOETUNE__STATUS__STATUS_INVALID);
        assert_true(strlen(out[i].detail) > 0);
        assert_int_equal(out[i].samples, 0);
    }
    k.c = (krn_config_t){64, 64, 128, 1, 4, 3};
    k.s.k = 2000; /* not a multiple of BLOCK_SIZE_K */
    assert_int_equal(sim_measure(&k, bs, 2, out), MT_OK);
    assert_int_equal(out[0].status, MOETUNE__STATUS__STATUS_INVALID);
    assert_non_null(strstr(out[0].detail, "BLOCK_SIZE_K"));
    wrk_backend_sim.close(&k.st);
}

/* A sim worker given a Triton kernel stands in for it: its hello says so (the planner then plans
 * with Triton's rules), and it follows Triton's rules on its simulated device: no divisibility
 * rule, and the shared memory of sm_120 (99 KiB per block) refuses what an H200 runs. */
static void test_triton_stand_in(void **unused) {
    (void)unused;
    static const struct {
        const char *device;
        uint32_t cc, smem;
        int fits; /* 128x128x128x1x4x3 needs 128 KiB off Hopper (2 buffers of 64 KiB) */
    } devs[] = {{"h200", 9, 232448, 1}, {"rtx-pro-6000", 12, 101376, 0}};
    for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++) {
        wrk_backend_opts_t o;
        wrk_device_t dev;
        char err[256] = "";
        sim_case_t k;
        wrk_meas_t out[2];
        uint32_t bs[2] = {1, 8};
        memset(&o, 0, sizeof o);
        o.kernel = "moetune";
        o.sim_device = devs[d].device;
        sim_case(&k, (krn_config_t){64, 64, 128, 1, 4, 3});
        assert_int_equal(wrk_backend_sim.open(&o, &k.st, &dev, err, sizeof err), MT_OK);
        assert_string_equal(dev.versions, "kernel=moetune " KRN_SIM_TRITON);
        assert_int_equal(dev.cc_major, devs[d].cc);
        assert_int_equal(dev.smem_per_block, devs[d].smem);
        k.s.k = 2000; /* not a multiple of BLOCK_SIZE_K: Triton masks the tail */
        assert_int_equal(sim_measure(&k, bs, 2, out), MT_OK);
        assert_int_equal(out[0].status, MOETUNE__STATUS__STATUS_OK);
        k.s.k = 2048;
        k.c = (krn_config_t){128, 128, 128, 1, 4, 3};
        assert_int_equal(sim_measure(&k, bs, 2, out), MT_OK);
        if (devs[d].fits) {
            assert_int_equal(out[1].status, MOETUNE__STATUS__STATUS_OK);
        } else {
            assert_int_equal(out[1].status, MOETUNE__STATUS__STATUS_INVALID);
            assert_string_equal(out[1].detail,
                                "Triton needs at least 131072 B of shared memory > 101376 B per block on sm_120");
        }
        wrk_backend_sim.close(&k.st);
    }
}

static void test_fault_parse(void **unused) {
    (void)unused;
    wrk_sim_faults_t f;
    char err[256];
    assert_int_equal(wrk_sim_faults_parse(NULL, &f, err, sizeof err), MT_OK);
    assert_int_equal(f.n_crash + f.n_hang + f.n_wrong, 0);
    assert_int_equal(wrk_sim_faults_parse("crash=64x128x64x1x4x3,crash=16x32x64x1x4x2,hang=32x64x128x16x4x4,"
                                          "wrong=128x128x64x32x8x3,crash_rate=0.25,slow_start_ms=40,slowdown=1.25",
                                          &f, err, sizeof err),
                     MT_OK);
    assert_int_equal(f.n_crash, 2);
    assert_int_equal(f.crash[0].block_m, 64);
    assert_int_equal(f.crash[0].block_n, 128);
    assert_int_equal(f.crash[0].num_stages, 3);
    assert_int_equal(f.crash[1].block_m, 16);
    assert_int_equal(f.n_hang, 1);
    assert_int_equal(f.hang[0].group_m, 16);
    assert_int_equal(f.n_wrong, 1);
    assert_int_equal(f.wrong[0].num_warps, 8);
    assert_true(f.crash_rate == 0.25);
    assert_int_equal(f.slow_start_ms, 40);
    assert_true(f.slowdown == 1.25);

    static const char *bad[] = {"crash=64x128",
                                "crash=64x128x64x1x4x3x9",
                                "crash_rate=1.5",
                                "crash_rate=x",
                                "bogus=1",
                                "slow_start_ms=-3",
                                "crash",
                                "=5",
                                "wrong=0x1x1x1x1x1",
                                "slowdown=0",
                                "slowdown=x",
                                "slowdown=101"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(wrk_sim_faults_parse(bad[i], &f, err, sizeof err), MT_INVAL);
        assert_true(strlen(err) > 0);
    }
    /* A bad spec makes open() fail with the reason. */
    wrk_backend_opts_t o;
    memset(&o, 0, sizeof o);
    o.sim_faults = "crash=1x2";
    open_refused(&o, "crash=1x2");
}

static void test_crash_draw(void **unused) {
    (void)unused;
    wrk_sim_faults_t f;
    krn_shape_t s;
    krn_space_t space;
    char err[128];
    shape_default(&s);
    krn_space_default(&space);
    assert_int_equal(wrk_sim_faults_parse("crash_rate=0.3", &f, err, sizeof err), MT_OK);
    size_t hits = 0, n = krn_space_size(&space), changed = 0;
    for (size_t i = 0; i < n; i++) {
        krn_config_t c;
        krn_space_at(&space, i, &c);
        int a = wrk_sim_crash_draw(&f, 7, &s, &c, 1000);
        assert_int_equal(a, wrk_sim_crash_draw(&f, 7, &s, &c, 1000));
        hits += (size_t)a;
        if (a != wrk_sim_crash_draw(&f, 7, &s, &c, 1001)) changed++;
    }
    /* About 30% die, and another process draws differently for many configs. */
    assert_true(hits > n / 5 && hits < n * 2 / 5);
    assert_true(changed > n / 5);
    assert_int_equal(wrk_sim_faults_parse("crash_rate=0", &f, err, sizeof err), MT_OK);
    krn_config_t c0 = {64, 64, 64, 1, 4, 3};
    assert_int_equal(wrk_sim_crash_draw(&f, 7, &s, &c0, 1000), 0);
}

static void test_wrong(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[3];
    uint32_t bs[3] = {1, 2, 4};
    sim_case(&k, (krn_config_t){64, 128, 64, 1, 4, 3}); /* wrong; with 4 stages right */
    k.st = open_sim("wrong=64x128x64x1x4x3");
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(out[i].status, MOETUNE__STATUS__STATUS_WRONG_RESULT);
    k.c.num_stages = 4;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(out[i].status, MOETUNE__STATUS__STATUS_OK);
    wrk_backend_sim.close(&k.st);
}

/* slowdown=X scales every latency: the same seed gives X times the numbers. */
static void test_slowdown(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t base[2], slow[2];
    uint32_t bs[2] = {16, 256};
    sim_case(&k, (krn_config_t){64, 128, 64, 1, 4, 3});
    k.st = open_sim(NULL);
    assert_int_equal(sim_measure(&k, bs, 2, base), MT_OK);
    wrk_backend_sim.close(&k.st);
    k.st = open_sim("slowdown=1.25");
    assert_int_equal(sim_measure(&k, bs, 2, slow), MT_OK);
    wrk_backend_sim.close(&k.st);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(slow[i].status, MOETUNE__STATUS__STATUS_OK);
        assert_true(fabs(slow[i].median_us / base[i].median_us - 1.25) < 1e-9);
    }
}

static void test_rsd_stop(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[3];
    uint32_t bs[3] = {1, 256, 4096};
    sim_case(&k, (krn_config_t){64, 128, 128, 16, 4, 3});
    k.st = open_sim(NULL);
    /* A target any sample set meets: stop exactly at min_samples. */
    k.m.min_samples = 7;
    k.m.max_samples = 40;
    k.m.rsd_target = 10.0;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(out[i].samples, 7);
    /* A target no sample set meets: stop exactly at max_samples. */
    k.m.rsd_target = 1e-12;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i].samples, 40);
        assert_true(out[i].stddev_us > 0);
        assert_true(out[i].stddev_us / out[i].mean_us < 0.2);
    }
    /* max below min: min wins. */
    k.m.min_samples = 12;
    k.m.max_samples = 3;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(out[i].samples, 12);
    /* A realistic 1% target stops somewhere in between for at least one size. */
    k.m.min_samples = 5;
    k.m.max_samples = 200;
    k.m.rsd_target = 0.01;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    int early = 0;
    for (int i = 0; i < 3; i++) {
        assert_true(out[i].samples >= 5 && out[i].samples <= 200);
        if (out[i].samples < 200) early = 1;
    }
    assert_true(early);
    wrk_backend_sim.close(&k.st);
}

/* The racing tests' case: one config at 1, 256 and 4096 tokens, 7 samples each, measured once
 * without racing into ref. */
static void racing_case(sim_case_t *k, uint32_t bs[3], wrk_meas_t ref[3]) {
    sim_case(k, (krn_config_t){64, 128, 128, 16, 4, 3});
    k->st = open_sim(NULL);
    k->m.min_samples = 7;
    k->m.rsd_target = 10.0;
    assert_int_equal(sim_measure(k, bs, 3, ref), MT_OK);
}

/* Racing: a config slower than the best by more than the margin stops after
 * WRK_RACE_SAMPLES samples as PRUNED with what it measured (after 1 when that one is beyond
 * the best by WRK_RACE_FAR margins); one within the margin, an
 * unknown best (0) or racing off (margin 0) is sampled to the RSD rule. */
static void test_racing(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[3], ref[3];
    uint32_t bs[3] = {1, 256, 4096};
    racing_case(&k, bs, ref);
    double best[3] = {ref[0].median_us / 1.3, ref[1].median_us * 2, 0};
    k.m.best_us = best;
    k.m.race_margin = 0.2;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    assert_int_equal(out[0].status, MOETUNE__STATUS__STATUS_PRUNED);
    assert_int_equal(out[0].samples, WRK_RACE_SAMPLES);
    assert_true(out[0].median_us > best[0] * 1.2);
    assert_non_null(strstr(out[0].detail, "pruned"));
    /* far beyond the best (2x, more than 1 + WRK_RACE_FAR x 0.2): the first sample decides alone */
    best[0] = ref[0].median_us / 2;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    assert_int_equal(out[0].status, MOETUNE__STATUS__STATUS_PRUNED);
    assert_int_equal(out[0].samples, 1);
    assert_true(out[0].median_us > best[0] * 1.4);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(out[i].status, MOETUNE__STATUS__STATUS_OK);
        assert_int_equal(out[i].samples, 7);
        assert_true(out[i].median_us == ref[i].median_us);
    }
    /* within the margin: 1.1x the best is not pruned at margin 0.2 */
    best[0] = ref[0].median_us / 1.1;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    assert_int_equal(out[0].status, MOETUNE__STATUS__STATUS_OK);
    /* racing off */
    best[0] = ref[0].median_us / 2;
    k.m.race_margin = 0;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    assert_int_equal(out[0].status, MOETUNE__STATUS__STATUS_OK);
    assert_int_equal(out[0].samples, 7);
    wrk_backend_sim.close(&k.st);
}

/* Racing on the check's layer (wrk_check_lost): from a config's second batch size of the call
 * on, a check layer beyond the best by more than WRK_CHECK_FAR margins is PRUNED alone, on
 * that one sample, before any replay; at the first batch size the same config
 * pays its first replay; one beyond the margin but not that far races on its replays. */
static void test_check_racing(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[3], ref[3];
    uint32_t bs[3] = {1, 256, 4096};
    racing_case(&k, bs, ref);
    double best[3] = {ref[0].median_us / 2, ref[1].median_us / 2, ref[2].median_us / 1.3};
    k.m.best_us = best;
    k.m.race_margin = 0.2;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(out[i].status, MOETUNE__STATUS__STATUS_PRUNED);
    assert_int_equal(out[0].samples, 1);
    assert_non_null(strstr(out[0].detail, "fastest of 1 samples"));
    assert_int_equal(out[1].samples, 1);
    assert_non_null(strstr(out[1].detail, "the check's layer"));
    assert_true(out[1].median_us > best[1] * (1 + WRK_CHECK_FAR * 0.2));
    /* 1.3x: beyond the margin, within WRK_CHECK_FAR margins: the check's layer is timed and
     * the race goes on to both replays */
    assert_int_equal(out[2].samples, WRK_RACE_SAMPLES);
    assert_non_null(strstr(out[2].detail, "fastest of 2 samples"));
    /* racing off: no check decides */
    k.m.race_margin = 0;
    assert_int_equal(sim_measure(&k, bs, 3, out), MT_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i].status, MOETUNE__STATUS__STATUS_OK);
        assert_true(out[i].median_us == ref[i].median_us);
    }
    wrk_backend_sim.close(&k.st);
}

/* The check's threshold (wrk_check_lost) is WRK_CHECK_FAR margins beyond the best, never under
 * 1 + WRK_CHECK_FLOOR: a margin of 0.1 keeps 1.5x, not 1.25x (a winner's check layer read up to
 * 1.26x its graph's median on an H200); a wider margin widens it; never at a config's first
 * batch size, never without a best or a margin. */
static void test_check_floor(void **unused) {
    (void)unused;
    double best[2] = {100.0, 100.0};
    wrk_measure_t m = {.race_margin = 0.1, .best_us = best};
    assert_false(wrk_check_lost(&m, 1, 140.0));
    assert_true(wrk_check_lost(&m, 1, 151.0));
    assert_false(wrk_check_lost(&m, 0, 1000.0));
    m.race_margin = 0.4;
    assert_false(wrk_check_lost(&m, 1, 190.0));
    assert_true(wrk_check_lost(&m, 1, 201.0));
    best[1] = 0.0;
    assert_false(wrk_check_lost(&m, 1, 1000.0));
    best[1] = 100.0;
    m.race_margin = 0.0;
    assert_false(wrk_check_lost(&m, 1, 1000.0));
}

/* Settling (wrk_settled): with an RSD target never met, a config in the race whose mean lies
 * beyond the best by more than the settle margin plus two standard errors stops at
 * WRK_SETTLE_SAMPLES (before min_samples), OK, and says so; one at the best, settling off or racing off samples to
 * max_samples. */
static void test_settling(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[2], ref[2];
    uint32_t bs[2] = {256, 4096};
    sim_case(&k, (krn_config_t){64, 128, 128, 16, 4, 3});
    k.st = open_sim(NULL);
    k.m.min_samples = 6;
    k.m.max_samples = 60;
    k.m.rsd_target = 1e-9;
    k.m.budget_ms = 0;
    assert_int_equal(sim_measure(&k, bs, 2, ref), MT_OK);
    assert_int_equal(ref[0].samples, 60);
    double best[2] = {ref[0].mean_us / 1.3, ref[1].mean_us};
    k.m.best_us = best;
    k.m.race_margin = 0.5;
    k.m.settle_margin = WRK_SETTLE_MARGIN;
    assert_int_equal(sim_measure(&k, bs, 2, out), MT_OK);
    assert_int_equal(out[0].status, MOETUNE__STATUS__STATUS_OK);
    assert_int_equal(WRK_SETTLE_SAMPLES, 4);
    assert_int_equal(out[0].samples, 4);
    double ratio = 0;
    assert_int_equal(sscanf(out[0].detail, "settled: mean %lfx the best after 4 samples", &ratio), 1);
    assert_true(ratio > 1.25 && ratio < 1.35);
    assert_int_equal(out[1].status, MOETUNE__STATUS__STATUS_OK);
    assert_int_equal(out[1].samples, 60);
    assert_null(strstr(out[1].detail, "settled"));
    for (int off = 0; off < 2; off++) {
        if (off)
            k.m.race_margin = 0;
        else
            k.m.settle_margin = 0;
        assert_int_equal(sim_measure(&k, bs, 2, out), MT_OK);
        assert_int_equal(out[0].samples, 60);
        assert_null(strstr(out[0].detail, "settled"));
    }
    wrk_backend_sim.close(&k.st);
}

/* The stop rule (wrk_precise): with an RSD target under the sim's noise, a config still stops
 * before max_samples once the standard error of its mean is under half the target, and not
 * while the RSD arm alone would hold it. */
static void test_stop_rule(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[1];
    uint32_t bs[1] = {4096};
    sim_case(&k, (krn_config_t){64, 128, 128, 16, 4, 3});
    k.st = open_sim(NULL);
    k.m.min_samples = 6;
    k.m.max_samples = 200;
    k.m.budget_ms = 0;
    k.m.rsd_target = 0.003;
    assert_int_equal(sim_measure(&k, bs, 1, out), MT_OK);
    double rsd = out[0].stddev_us / out[0].mean_us, sem = rsd / sqrt((double)out[0].samples);
    assert_true(rsd > k.m.rsd_target);
    assert_true(sem < WRK_SEM_FRACTION * k.m.rsd_target);
    assert_true(out[0].samples > k.m.min_samples && out[0].samples < k.m.max_samples);
    /* a target above the noise: the RSD arm, at min_samples */
    k.m.rsd_target = 0.05;
    assert_int_equal(sim_measure(&k, bs, 1, out), MT_OK);
    assert_int_equal(out[0].samples, 6);
    wrk_backend_sim.close(&k.st);
}

static void test_time_scale(void **unused) {
    (void)unused;
    sim_case_t k;
    wrk_meas_t out[1];
    uint32_t bs[1] = {64};
    wrk_backend_opts_t o;
    wrk_device_t dev;
    sim_case(&k, (krn_config_t){64, 128, 128, 16, 4, 3});
    memset(&o, 0, sizeof o);
    o.sim_time_scale = 1.0;
    assert_int_equal(wrk_backend_sim.open(&o, &k.st, &dev, k.err, sizeof k.err), MT_OK);
    uint64_t t0 = mt_now_ms();
    assert_int_equal(sim_measure(&k, bs, 1, out), MT_OK);
    uint64_t dt = mt_now_ms() - t0;
    assert_true(dt >= 45 && dt < 2000); /* about the 50 ms simulated compile */
    wrk_backend_sim.close(&k.st);
    o.sim_time_scale = -1;
    assert_int_equal(wrk_backend_sim.open(&o, &k.st, &dev, k.err, sizeof k.err), MT_ERR);
}

/* The simulated compiler: announced configs compile WRK_SIM_POOL at a time from the
 * announcement, so a job's later configs are ready when measured; one never announced costs a
 * whole compile when measured; a compiled one costs nothing again; an announced one whose
 * compile has not started yet costs at most one compile. */
static void test_compile_ahead(void **unused) {
    (void)unused;
    wrk_sim_compiler_t c;
    memset(&c, 0, sizeof c);
    const uint64_t T = 1000000, C = 50000; /* announced at 1 s, 50 ms per compile */
    for (uint64_t k = 1; k <= 2 * WRK_SIM_POOL + 1; k++) wrk_sim_compile_ahead(&c, k, T, C);
    assert_int_equal(wrk_sim_compile_wait_us(&c, 1, T, C), C);                /* the first: a whole compile */
    assert_int_equal(wrk_sim_compile_wait_us(&c, 1, T + C, C), 0);            /* compiled */
    assert_int_equal(wrk_sim_compile_wait_us(&c, WRK_SIM_POOL, T + C, C), 0); /* compiled beside it */
    assert_int_equal(wrk_sim_compile_wait_us(&c, WRK_SIM_POOL + 1, T + C + 10000, C), C - 10000); /* second wave */
    assert_int_equal(wrk_sim_compile_wait_us(&c, 2 * WRK_SIM_POOL + 1, T + 3 * C, C), 0);         /* third wave, done */
    assert_int_equal(wrk_sim_compile_wait_us(&c, 999, T + 3 * C, C), C);                          /* never announced */
    assert_int_equal(wrk_sim_compile_wait_us(&c, 999, T + 4 * C, C), 0); /* after its compile */
    /* announcing a known config again queues nothing */
    wrk_sim_compile_ahead(&c, 2, T + 3 * C, C);
    assert_int_equal(wrk_sim_compile_wait_us(&c, 2, T + 3 * C, C), 0);
    /* a backlog: the last of 3 x WRK_SIM_POOL announced at once would be ready after 3
     * compiles, but the measuring process compiles it itself in one */
    memset(&c, 0, sizeof c);
    for (uint64_t k = 1; k <= 3 * WRK_SIM_POOL; k++) wrk_sim_compile_ahead(&c, k, T, C);
    assert_int_equal(wrk_sim_compile_wait_us(&c, 3 * WRK_SIM_POOL, T, C), C);
    assert_int_equal(wrk_sim_compile_wait_us(&c, 3 * WRK_SIM_POOL, T + C, C), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),          cmocka_unit_test(test_device),
        cmocka_unit_test(test_determinism),   cmocka_unit_test(test_winners_differ),
        cmocka_unit_test(test_invalid),       cmocka_unit_test(test_fault_parse),
        cmocka_unit_test(test_crash_draw),    cmocka_unit_test(test_wrong),
        cmocka_unit_test(test_rsd_stop),      cmocka_unit_test(test_racing),
        cmocka_unit_test(test_check_racing),  cmocka_unit_test(test_check_floor),
        cmocka_unit_test(test_settling),      cmocka_unit_test(test_stop_rule),
        cmocka_unit_test(test_slowdown),      cmocka_unit_test(test_time_scale),
        cmocka_unit_test(test_compile_ahead), cmocka_unit_test(test_triton_stand_in),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
