/* test_halving.c - successive halving: the finalists' rule (share, minimum, neighbours'
 * winners), the phases' measurement settings, batch-size lists, and the phase transition
 * on a store (pruned rows with their rank, phase-2 jobs by shared batch sizes, idempotent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "halving.h"
#include "mt.h"
#include "sched_fx.h"
#include "sched_int.h"
#include "scheduler.h"
#include "store.h"
#include "tmpdb.h"
#include "wire.h"

static tmpdb_t g_db = {.tag = "halving"}; /* each test's own (tmpdb_setup) */

static int64_t query_int(const char *sql) { return tmpdb_query_int(g_db.path, sql); }

static const halving_row_t *find(const halving_row_t *rows, size_t n, uint64_t cfg, uint32_t bi) {
    for (size_t i = 0; i < n; i++)
        if (rows[i].config_id == cfg && rows[i].bi == bi) return &rows[i];
    fail_msg("no row for config %llu at %u", (unsigned long long)cfg, bi);
    return NULL;
}

/* 40 configs at 3 batch sizes: ceil(40 / 16) = 3 is under the minimum, so the best 4 of
 * each go on; config 40 wins batch size 0 only, and is a finalist at batch size 1 (its
 * neighbour) though it ranks last there, but not at batch size 2 (no neighbour of 0). */
static void test_choose(void **state) {
    enum { N_CFG = 40, NB = 3 };
    halving_row_t rows[N_CFG * NB];
    size_t n = 0;
    for (uint32_t b = 0; b < NB; b++) {
        for (uint64_t c = 1; c <= N_CFG; c++) {
            double us = 100.0 + (double)c; /* config 1 fastest ... */
            if (c == 40) us = b == 0 ? 50.0 : 1000.0;
            rows[n++] = (halving_row_t){.config_id = c, .bi = b, .median_us = us};
        }
    }
    assert_int_equal(halving_choose(rows, n, NB), MT_OK);
    size_t finalists[NB] = {0};
    for (size_t i = 0; i < n; i++) finalists[rows[i].bi] += rows[i].finalist;
    assert_int_equal(finalists[0], 4); /* 40, 1, 2, 3; batch size 1's winner (1) is one already */
    assert_true(find(rows, n, 40, 0)->finalist);
    assert_int_equal(find(rows, n, 40, 0)->rank, 1);
    assert_int_equal(find(rows, n, 4, 0)->rank, 5);
    assert_false(find(rows, n, 4, 0)->finalist);
    assert_true(find(rows, n, 4, 1)->finalist);  /* ranks 4 at batch size 1 */
    assert_true(find(rows, n, 40, 1)->finalist); /* seeded: batch size 0's winner */
    assert_int_equal(find(rows, n, 40, 1)->rank, 40);
    assert_false(find(rows, n, 40, 2)->finalist); /* batch size 1's winner is config 1 */
    assert_int_equal(finalists[1], 5);
    assert_int_equal(finalists[2], 4);
    halving_row_t bad = {.config_id = 1, .bi = 3, .median_us = 1};
    assert_int_equal(halving_choose(&bad, 1, NB), MT_INVAL);
}

/* 100 configs at one batch size: ceil(100 / 16) = 7 go on; ties keep the lower config id first. */
static void test_choose_share(void **state) {
    halving_row_t rows[100];
    for (uint64_t c = 0; c < 100; c++) rows[c] = (halving_row_t){.config_id = 100 - c, .bi = 0, .median_us = 5.0};
    assert_int_equal(halving_choose(rows, 100, 1), MT_OK);
    size_t k = 0;
    for (size_t i = 0; i < 100; i++) k += rows[i].finalist;
    assert_int_equal(k, 7);
    assert_int_equal(find(rows, 100, 1, 0)->rank, 1);
    assert_true(find(rows, 100, 7, 0)->finalist);
    assert_false(find(rows, 100, 8, 0)->finalist);
    assert_int_equal(halving_choose(NULL, 0, 4), MT_OK);
}

/* The decide rule: at each batch size the configs within the margin of the best, at most
 * HALVING_DECIDE_MAX; a best past the margin of every other is re-measured with the next by
 * rank within HALVING_MODE_REACH, up to HALVING_DECIDE_MIN in all; none where the best stands
 * alone even so; ranks as halving_choose. */
static void test_choose_decide(void **state) {
    enum { NB = 5 };
    static const double us[NB][6] = {
        {100.0, 101.0, 101.5, 101.9, 101.95, 110.0}, /* five within 2 %: the best four */
        {100.0, 105.5, 106.0, 107.0, 108.0, 109.0},  /* the best alone within 5 %: no re-measure */
        {100.5, 100.0, 130.0, 140.0, 150.0, 160.0},  /* two within the margin, none within the reach */
        {100.0, 103.0, 104.5, 104.9, 108.0, 109.0},  /* a lone best and its two nearest */
        {100.0, 101.0, 104.0, 110.0, 120.0, 130.0},  /* a near-tie and the next */
    };
    halving_row_t rows[NB * 6];
    size_t n = 0;
    for (uint32_t b = 0; b < NB; b++)
        for (uint64_t c = 0; c < 6; c++)
            rows[n++] = (halving_row_t){.config_id = c + 1, .bi = b, .median_us = us[b][c]};
    assert_int_equal(halving_choose_decide(rows, n, NB, 0.02), MT_OK);
    size_t finalists[NB] = {0};
    for (size_t i = 0; i < n; i++) finalists[rows[i].bi] += rows[i].finalist;
    assert_int_equal(finalists[0], HALVING_DECIDE_MAX);
    assert_int_equal(finalists[1], 0);
    assert_int_equal(finalists[2], 2);
    assert_int_equal(finalists[3], HALVING_DECIDE_MIN);
    assert_true(find(rows, n, 3, 3)->finalist);
    assert_false(find(rows, n, 4, 3)->finalist); /* within the reach, past the minimum */
    assert_int_equal(finalists[4], HALVING_DECIDE_MIN);
    assert_true(find(rows, n, 3, 4)->finalist);
    assert_true(find(rows, n, 4, 0)->finalist);
    assert_false(find(rows, n, 5, 0)->finalist); /* within 2 %, past the cap */
    assert_int_equal(find(rows, n, 5, 0)->rank, 5);
    assert_int_equal(find(rows, n, 2, 2)->rank, 1);
    assert_true(find(rows, n, 1, 2)->finalist);
    assert_false(find(rows, n, 3, 2)->finalist);
    halving_row_t bad = {.config_id = 1, .bi = NB, .median_us = 1};
    assert_int_equal(halving_choose_decide(&bad, 1, NB, 0.02), MT_INVAL);
    /* only racing sweeps decide, and not when turned off */
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    m.race_margin = 0.2, m.decide_margin = 0.02;
    assert_true(halving_decide_margin("exhaustive", &m) > 0.019);
    assert_true(halving_decide_margin("halving", &m) == 0.0);
    m.race_margin = -1;
    assert_true(halving_decide_margin("exhaustive", &m) == 0.0);
    m.race_margin = 0.2, m.decide_margin = -1;
    assert_true(halving_decide_margin("exhaustive", &m) == 0.0);
}

/* Rows of two modes: a row whose fastest sample beat the best's by more than half the margin,
 * its median within HALVING_MODE_REACH of the best's, joins the decide step, at most
 * HALVING_DECIDE_MODES a batch size, the lowest fastest sample first; one whose fastest sample is
 * only a little below, whose median is past the reach, whose fastest sample is not known (0) or
 * is below the best's median but not the best's own fastest does not; a best with a two-mode
 * row for company is re-measured beside it. */
static void test_choose_modes(void **state) {
    enum { NB = 5, NC = 6 };
    static const double us[NB][NC][2] = {
        /* c1 best, c2 and c3 two modes (c3's fastest lower), c4 past the cap, c5 past the reach,
         * c6 a near-tie */
        {{100.0, 99.5}, {103.0, 97.0}, {104.0, 96.0}, {104.5, 98.0}, {106.0, 90.0}, {101.0, 100.8}},
        /* c4's fastest sample 0.6 % below the best's: not two modes (three near-ties, so no
         * fill up to HALVING_DECIDE_MIN) */
        {{100.0, 99.8}, {101.0, 100.9}, {101.5, 101.2}, {103.0, 99.2}, {122.0, 121.0}, {123.0, 122.0}},
        /* the best's only company is a row of two modes */
        {{100.0, 99.9}, {104.0, 95.0}, {120.0, 119.0}, {121.0, 120.0}, {122.0, 121.0}, {123.0, 122.0}},
        /* fastest samples not known */
        {{100.0, 0.0}, {101.0, 0.0}, {101.5, 0.0}, {103.0, 0.0}, {121.0, 0.0}, {122.0, 0.0}},
        /* c4 3 % below the best's median, not below the best's own fastest sample (96) */
        {{100.0, 96.0}, {101.0, 99.0}, {101.5, 99.0}, {103.0, 97.0}, {122.0, 121.0}, {123.0, 122.0}},
    };
    halving_row_t rows[NB * NC];
    size_t n = 0;
    for (uint32_t b = 0; b < NB; b++)
        for (uint64_t c = 0; c < NC; c++)
            rows[n++] = (halving_row_t){.config_id = c + 1, .bi = b, .median_us = us[b][c][0], .min_us = us[b][c][1]};
    assert_int_equal(halving_choose_decide(rows, n, NB, 0.02), MT_OK);
    size_t finalists[NB] = {0};
    for (size_t i = 0; i < n; i++) finalists[rows[i].bi] += rows[i].finalist;
    assert_int_equal(finalists[0], 2 + HALVING_DECIDE_MODES);
    assert_true(find(rows, n, 1, 0)->finalist);
    assert_true(find(rows, n, 6, 0)->finalist);
    assert_true(find(rows, n, 3, 0)->finalist);
    assert_true(find(rows, n, 2, 0)->finalist);
    assert_false(find(rows, n, 4, 0)->finalist); /* two modes, past the cap */
    assert_false(find(rows, n, 5, 0)->finalist); /* its median past the reach */
    for (uint32_t b = 1; b <= 4; b += (b == 1 ? 2 : 1)) {
        assert_int_equal(finalists[b], 3);
        assert_false(find(rows, n, 4, b)->finalist);
    }
    assert_int_equal(finalists[2], 2);
    assert_true(find(rows, n, 2, 2)->finalist);
}

/* A sweep on several GPUs: each device whose fastest row is within HALVING_DEVICE_MARGIN of the
 * best (at most HALVING_DEVICE_MAX besides the best's, the nearest first) adds, in the decide
 * step, its rows within the margin of its own fastest (at most HALVING_DEVICE_NEAR), though past
 * the margin of the best; a device past the cap or the device margin adds none; a best whose
 * only company is another device's rows is re-measured. Halving adds each such device's rows
 * within its kept share's spread of the device's own fastest, at most half the share. */
static void test_choose_devices(void **state) {
    (void)state;
    enum { NB = 3 };
    /* config, device, median at batch sizes 0, 1, 2 */
    static const struct {
        uint64_t c, dev;
        double us[NB];
    } k[] = {
        {1, 1, {100.0, 100.0, 100.0}},
        {2, 1, {100.5, 120.0, 120.0}}, /* a near-tie at 0 */
        {3, 1, {110.0, 121.0, 121.0}},
        {4, 2, {103.0, 106.0, 104.0}}, /* device 2's best: past 2 %, within 5 % at 0 and 2 */
        {5, 2, {103.5, 107.0, 104.5}}, /* device 2's near-tie */
        {6, 3, {104.0, 130.0, 130.0}}, /* device 3's best */
        {7, 4, {104.5, 130.0, 130.0}}, /* device 4's best: past the cap at 0 */
        {8, 5, {106.0, 130.0, 130.0}}, /* past the device margin */
        {9, 2, {103.8, 130.0, 130.0}}, /* device 2's third near-tie at 0: past HALVING_DEVICE_NEAR */
    };
    enum { NK = sizeof k / sizeof k[0] };
    halving_row_t rows[NK * NB];
    size_t n = 0;
    for (uint32_t b = 0; b < NB; b++)
        for (size_t i = 0; i < NK; i++)
            rows[n++] = (halving_row_t){.config_id = k[i].c, .device_id = k[i].dev, .bi = b, .median_us = k[i].us[b]};
    assert_int_equal(halving_choose_decide(rows, n, NB, 0.02), MT_OK);
    static const bool want[NB][NK] = {
        {true, true, false, true, true, true, false, false, false},
        {false, false, false, false, false, false, false, false, false}, /* device 2's best is 6 % off */
        {true, false, false, true, true, false, false, false, false},
    };
    for (uint32_t b = 0; b < NB; b++)
        for (size_t i = 0; i < NK; i++)
            if (find(rows, n, k[i].c, b)->finalist != want[b][i])
                fail_msg("config %llu at batch size %u: finalist %d, want %d", (unsigned long long)k[i].c, b,
                         find(rows, n, k[i].c, b)->finalist, want[b][i]);
    /* the same rows from one device: the near-ties, filled up to HALVING_DECIDE_MIN by rank
     * within the reach: at 0 the best, config 2 and config 4 (103); at 1 none (the next is 6 %
     * off); at 2 the best, config 4 and config 5 (104, 104.5) */
    for (size_t i = 0; i < n; i++) rows[i].device_id = 7;
    assert_int_equal(halving_choose_decide(rows, n, NB, 0.02), MT_OK);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) kept += rows[i].finalist;
    assert_int_equal(kept, 2 * HALVING_DECIDE_MIN);
    assert_true(find(rows, n, 4, 0)->finalist);
    assert_true(find(rows, n, 5, 2)->finalist);
    /* halving: 40 configs of device 1 at 101 .. 140 keep the best 4 (101 .. 104, a spread of
     * 2.97 %); device 2's rows within that spread of its own fastest (104.5 .. 107.6) go on, at
     * most 2 (half the share): at 0 its 104.5 (rank 5) and 105.5, not its third (107.5); at 1 its
     * 104.5, not its 108 (past the spread); device 1's fifth (105) at neither */
    halving_row_t h[43 * 2];
    static const double dev2[2][3] = {{104.5, 105.5, 107.5}, {104.5, 108.0, 130.0}};
    size_t nh = 0;
    for (uint32_t b = 0; b < 2; b++) {
        for (uint64_t c = 1; c <= 40; c++)
            h[nh++] = (halving_row_t){.config_id = c, .device_id = 1, .bi = b, .median_us = 100.0 + c};
        for (uint64_t c = 41; c <= 43; c++)
            h[nh++] = (halving_row_t){.config_id = c, .device_id = 2, .bi = b, .median_us = dev2[b][c - 41]};
    }
    assert_int_equal(halving_choose(h, nh, 2), MT_OK);
    static const uint64_t on[2][3] = {{41, 42, 0}, {41, 0, 0}};
    for (uint32_t b = 0; b < 2; b++) {
        assert_true(find(h, nh, 4, b)->finalist);
        assert_false(find(h, nh, 5, b)->finalist);
        for (uint64_t c = 41; c <= 43; c++)
            if (find(h, nh, c, b)->finalist != (on[b][0] == c || on[b][1] == c))
                fail_msg("halving: config %llu at batch size %u", (unsigned long long)c, b);
    }
    assert_int_equal(find(h, nh, 41, 0)->rank, 5);
}

/* The progress estimate of a shape's finalists: the kept share (at least 4) plus one
 * neighbour's winner per batch size, never more than every config. */
static void test_finalists_estimate(void **state) {
    (void)state;
    assert_int_equal(halving_finalists_estimate(12, 2), 10);
    assert_int_equal(halving_finalists_estimate(1152, 18), (72 + 1) * 18);
    assert_int_equal(halving_finalists_estimate(100, 1), 7); /* ceil(100 / 16), no neighbour */
    assert_int_equal(halving_finalists_estimate(3, 5), 15);
}

static void test_measure(void **state) {
    Moetune__Measure sweep = MOETUNE__MEASURE__INIT, m;
    sweep.min_samples = 10;
    sweep.max_samples = 100;
    sweep.rsd_target = 0.01;
    sweep.race_margin = 0.2;
    sweep.warmup = 5;
    halving_measure(&sweep, 1, false, &m);
    assert_int_equal(m.min_samples, HALVING_PHASE1_SAMPLES);
    assert_int_equal(m.max_samples, HALVING_PHASE1_SAMPLES);
    assert_true(m.race_margin == 0.2);
    assert_int_equal(m.warmup, 5);
    halving_measure(&sweep, 2, false, &m);
    assert_int_equal(m.min_samples, 10);
    assert_int_equal(m.max_samples, 100);
    assert_true(m.rsd_target == 0.01);
    assert_true(m.race_margin < 0); /* racing off: a finalist is measured to the RSD rule */
    assert_true(halving_is("halving"));
    assert_false(halving_is("exhaustive"));
    assert_true(halving_strategy_known(NULL));
    assert_true(halving_strategy_known(""));
    assert_true(halving_strategy_known("exhaustive"));
    assert_false(halving_strategy_known("Halving"));
}

static void test_bs_lists(void **state) {
    static const uint32_t all[] = {1, 16, 256, 4096};
    char buf[64];
    uint32_t *v = NULL;
    size_t n = 0;
    assert_int_equal(halving_bs_format(all, 4, buf, sizeof buf), MT_OK);
    assert_string_equal(buf, "1,16,256,4096");
    assert_int_equal(halving_bs_format(all, 4, buf, 8), MT_INVAL);
    assert_int_equal(halving_bs_parse("16,4096", all, 4, &v, &n), MT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(v[0], 16);
    assert_int_equal(v[1], 4096);
    free(v);
    static const char *const bad[] = {"", "16,", ",16", "2", "16,16", "16;256", "16 ", "-1", "1,16,256,4096,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(halving_bs_parse(bad[i], all, 4, &v, &n), MT_INVAL);
        assert_null(v);
    }
    assert_int_equal(halving_bs_parse(NULL, all, 4, &v, &n), MT_INVAL);
}

/* The store seed_rows filled, and the sweep and shape it stored. */
typedef struct {
    store_t *s;
    uint64_t sweep, shape;
} seeded_t;

static const uint32_t k_seed_bs[] = {1, 2};

/* A sweep of one shape with 20 configs (ids 1..20) with a phase-1 row each at batch sizes
 * 1 and 2, medians us(c, b), measured by GPU devices.id 1 (configs 1..split) and 2 (the
 * rest); config 10's row at batch size 2 is racing's pruned one. The store is the caller's to
 * close. */
static void seed_rows(seeded_t *x, double (*us)(uint32_t c, size_t b), uint32_t split) {
    char err[256];
    uint64_t job = 0, dev[2] = {0};
    krn_shape_t sh = {.e = 8, .n = 256, .k = 256, .topk = 2, .dtype = "bf16"};
    assert_int_equal(store_open(g_db.path, &x->s, err, sizeof err), MT_OK);
    for (size_t i = 0; i < 2; i++) {
        Moetune__Gpu gpu = MOETUNE__GPU__INIT;
        gpu.name = "NVIDIA H100 80GB HBM3";
        gpu.uuid = i ? "GPU-2" : "GPU-1";
        assert_int_equal(store_device_upsert(x->s, &gpu, &dev[i]), MT_OK);
        assert_int_equal(dev[i], i + 1);
    }
    assert_int_equal(store_sweep_insert(x->s, "hv", "", 0, 1, &x->sweep), MT_OK);
    assert_int_equal(store_shape_upsert(x->s, &sh, &x->shape), MT_OK);
    assert_int_equal(store_job_insert(x->s, x->sweep, x->shape, NULL, 1, &job), MT_OK);
    for (uint32_t c = 1; c <= 20; c++) {
        krn_config_t cfg = {16, 64, 64, c, 4, 2};
        uint64_t id = 0;
        int outcome = STORE_ROW_KEPT;
        assert_int_equal(store_config_upsert(x->s, &cfg, &id), MT_OK);
        assert_int_equal(id, c);
        for (size_t b = 0; b < 2; b++) {
            store_result_t r = {.sweep_id = x->sweep,
                                .shape_id = x->shape,
                                .config_id = id,
                                .job_id = job,
                                .device_id = dev[c > split],
                                .batch_size = k_seed_bs[b],
                                .status = MOETUNE__STATUS__STATUS_OK,
                                .median_us = us(c, b),
                                .min_us = us(c, b),
                                .samples = 5,
                                .backend = "sim",
                                .compiler = "sim",
                                .created = 1,
                                .phase = 1};
            if (c == 10 && b == 1) r.status = MOETUNE__STATUS__STATUS_PRUNED; /* racing's: not a candidate */
            assert_int_equal(store_result_put(x->s, &r, &outcome), MT_OK);
        }
    }
}

/* halving_plan_shape of the seeded shape at its batch sizes {1, 2}, chunk configs a job and the
 * decide step's margin, at now (asserted MT_OK): the step. */
static halving_step_t plan(const seeded_t *x, uint32_t chunk, double margin, uint64_t now) {
    halving_step_t st;
    assert_int_equal(halving_plan_shape(x->s, x->sweep, x->shape, k_seed_bs, 2, chunk, margin, now, &st), MT_OK);
    return st;
}

static double halving_us(uint32_t c, size_t b) { return b == 0 ? 10.0 + c : 40.0 - c; }

/* A shape with 20 configs measured at phase 1 at two batch sizes: the transition keeps the
 * best 4 at each (configs 1-4 at 1, 17-20 at 2; plus each side's winner at the other), prunes
 * the 32 others with their rank in one transaction, stores phase-2 jobs of one batch size each
 * (at most chunk configs, the fastest first; the largest batch size's first), and a second
 * call changes nothing. */
static void test_plan_shape(void **state) {
    seeded_t x;
    seed_rows(&x, halving_us, 20);
    halving_step_t st = plan(&x, 3, 0, 7);
    assert_false(st.already);
    assert_int_equal(st.finalists, 10); /* 4 + 1 seeded at each batch size */
    assert_int_equal(st.pruned, 20 - 5 + 19 - 5);
    /* five finalists a batch size, three a job: two jobs each */
    assert_int_equal(st.jobs, 4);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE phase = 2 AND batch_sizes = '1'"), 2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE phase = 2 AND batch_sizes = '2'"), 2);
    assert_true(query_int("SELECT MAX(id) FROM jobs WHERE phase = 2 AND batch_sizes = '2'") <
                query_int("SELECT MIN(id) FROM jobs WHERE phase = 2 AND batch_sizes = '1'"));
    /* batch size 1's first job: its three fastest, side by side */
    assert_int_equal(
        query_int("SELECT COUNT(*) FROM job_configs WHERE job_id ="
                  " (SELECT MIN(id) FROM jobs WHERE phase = 2 AND batch_sizes = '1') AND config_id IN (1, 2, 3)"),
        3);
    assert_int_equal(
        query_int("SELECT COUNT(*) FROM job_configs WHERE job_id ="
                  " (SELECT MIN(id) FROM jobs WHERE phase = 2 AND batch_sizes = '2') AND config_id IN (20, 19, 18)"),
        3);
    /* the seeded winners are measured at both batch sizes, in one job of each */
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND jc.config_id IN (1, 20)"),
                     4);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.phase = 2"),
                     10);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE status = 'ok'"), 10);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE status = 'pruned' AND detail LIKE 'halving:%'"), 29);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE config_id = 5 AND batch_size = 1"
                               " AND detail = 'halving: rank 5 of 20 at phase 1 (5 samples)'"),
                     1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE config_id = 10 AND batch_size = 2"
                               " AND detail IS NULL AND status = 'pruned'"),
                     1);
    /* again (a restart that finds phase 2 planned): nothing changes */
    st = plan(&x, 3, 0, 8);
    assert_true(st.already);
    assert_int_equal(st.jobs, 0);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE phase = 2"), 4);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE status = 'ok'"), 10);
    store_close(&x.s);
}

/* bs 1: configs 1-5 within 2 % of the best (100 + 0.5 (c - 1)); bs 2: configs 1 and 20 within
 * it, every other far behind. */
static double decide_us(uint32_t c, size_t b) {
    if (b == 0) return 100.0 + 0.5 * (c - 1);
    return c == 1 ? 100.0 : c == 20 ? 100.5 : 200.0;
}

/* The decide step on a store: one phase-2 job per batch size with its near-ties (at most
 * HALVING_DECIDE_MAX), the largest batch size's stored (and so leased) first, nothing pruned,
 * idempotent. */
static void test_plan_decide(void **state) {
    seeded_t x;
    seed_rows(&x, decide_us, 20);
    halving_step_t st = plan(&x, 16, 0.02, 7);
    assert_false(st.already);
    assert_int_equal(st.finalists, HALVING_DECIDE_MAX + 2);
    assert_int_equal(st.pruned, 0);
    assert_int_equal(st.jobs, 2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND j.batch_sizes = '1' AND jc.config_id IN (1, 2, 3, 4)"),
                     4);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND j.batch_sizes = '2' AND jc.config_id IN (1, 20)"),
                     2);
    assert_true(query_int("SELECT id FROM jobs WHERE phase = 2 AND batch_sizes = '2'") <
                query_int("SELECT id FROM jobs WHERE phase = 2 AND batch_sizes = '1'"));
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.phase = 2"),
                     6);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE status = 'ok'"), 39);
    st = plan(&x, 16, 0.02, 8);
    assert_true(st.already);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE phase = 2"), 2);
    store_close(&x.s);
}

/* bs 1: config 1 (100) ahead of every other by more than 2 %; configs 2, 3 and 4 within 5 %
 * (103, 104.5, 104.8); bs 2: config 1 and, within 5 %, config 5 (104) alone. */
static double lone_us(uint32_t c, size_t b) {
    if (c == 1) return 100.0;
    if (b == 0) return c == 2 ? 103.0 : c == 3 ? 104.5 : c == 4 ? 104.8 : 150.0 + c;
    return c == 5 ? 104.0 : 200.0;
}

/* A best past the margin of every other is re-measured on a store with its nearest rows within
 * HALVING_MODE_REACH, up to HALVING_DECIDE_MIN: at bs 1 the best and the next two (not the
 * third within the reach), at bs 2 the best and its one row within the reach. */
static void test_plan_lone_best(void **state) {
    seeded_t x;
    seed_rows(&x, lone_us, 20);
    halving_step_t st = plan(&x, 16, 0.02, 7);
    assert_int_equal(st.finalists, HALVING_DECIDE_MIN + 2);
    assert_int_equal(st.jobs, 2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND j.batch_sizes = '1' AND jc.config_id IN (1, 2, 3)"),
                     3);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND j.batch_sizes = '2' AND jc.config_id IN (1, 5)"),
                     2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.phase = 2"),
                     HALVING_DECIDE_MIN + 2);
    store_close(&x.s);
}

/* bs 1: device 1's best (config 1, 100) stands alone within 2 %, device 2's (config 11) is 3 %
 * behind; bs 2: device 2's best (config 11) is 6 % behind. */
static double devices_us(uint32_t c, size_t b) {
    if (c == 1) return 100.0;
    if (c == 11) return b == 0 ? 103.0 : 106.0;
    return 150.0 + c;
}

/* Sweeps measured on two GPUs (configs 1-10 on one, 11-20 on the other), on a store, the rows'
 * devices reaching the rules. Halving (sweep 1, test_plan_shape's rows): each batch size's 5
 * finalists go out in one phase-2 job, past chunk (3), so one card measures them side by side.
 * The decide step (sweep 2): the other card's best within HALVING_DEVICE_MARGIN is re-measured
 * beside the best (bs 1), and a best with no company within either margin is not (bs 2). */
static void test_plan_devices(void **state) {
    seeded_t x;
    seed_rows(&x, halving_us, 10);
    halving_step_t st = plan(&x, 3, 0, 7);
    assert_int_equal(st.finalists, 10);
    assert_int_equal(st.jobs, 2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE phase = 2 AND batch_sizes = '1'"), 1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND j.batch_sizes = '2' AND jc.config_id IN (17, 18, 19, 20, 1)"),
                     5);
    store_close(&x.s);
    seed_rows(&x, devices_us, 10);
    assert_int_equal(x.sweep, 2);
    st = plan(&x, 16, 0.02, 7);
    assert_int_equal(st.finalists, 2);
    assert_int_equal(st.jobs, 1);
    assert_int_equal(
        query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.sweep_id = 2"
                  " AND j.phase = 2 AND j.batch_sizes = '1' AND jc.config_id IN (1, 11)"),
        2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE sweep_id = 2 AND phase = 2 AND batch_sizes = '2'"), 0);
    store_close(&x.s);
}

/* bs 1: configs 1, 3 and 4 (100, 101, 101.5) within 2 %, config 2 (104) past it; bs 2: the same. */
static double modes_us(uint32_t c, size_t b) {
    (void)b;
    return c == 1 ? 100.0 : c == 2 ? 104.0 : c == 3 ? 101.0 : c == 4 ? 101.5 : 150.0 + c;
}

/* The decide step on a store reads each row's fastest sample: config 2's row at batch size 1,
 * whose fastest sample (95) beat the best's median by 5 %, is re-measured beside the three
 * near-ties; at batch size 2, where its fastest sample is its median, only they are (three:
 * no fill up to HALVING_DECIDE_MIN). */
static void test_plan_modes(void **state) {
    seeded_t x;
    seed_rows(&x, modes_us, 20);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(g_db.path, &db), SQLITE_OK);
    tmpdb_exec(db, "UPDATE results SET min_us = 95.0 WHERE config_id = 2 AND batch_size = 1");
    sqlite3_close(db);
    halving_step_t st = plan(&x, 16, 0.02, 7);
    assert_int_equal(st.finalists, 4 + 3);
    assert_int_equal(st.jobs, 2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND j.batch_sizes = '1' AND jc.config_id IN (1, 2, 3, 4)"),
                     4);
    assert_int_equal(query_int("SELECT COUNT(*) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id"
                               " WHERE j.phase = 2 AND j.batch_sizes = '2' AND jc.config_id = 2"),
                     0);
    store_close(&x.s);
}

/* A Result of config for the batch sizes bs[0, n) with medians med[]. sched_on_result's code. */
static int send_result(fx_t *f, sched_worker_t *w, const Moetune__Job *j, uint64_t seq, uint64_t config,
                       const uint32_t *bs, const double *med, size_t n, uint64_t now) {
    Moetune__Measurement m[4], *pm[4];
    for (size_t i = 0; i < n; i++) {
        moetune__measurement__init(&m[i]);
        pm[i] = &m[i];
        m[i].batch_size = bs[i];
        m[i].status = MOETUNE__STATUS__STATUS_OK;
        m[i].median_us = m[i].min_us = m[i].mean_us = med[i];
        m[i].stddev_us = 0.1;
        m[i].samples = j->measure->max_samples;
    }
    return fx_result_of(f, w, j->job_id, j->lease_token, seq, config, pm, n, now, true);
}

/* Phase 1 at bs 1 ranks configs by id, at bs 2 the other way round. */
static double phase1_us(uint64_t config, uint32_t bs) {
    return bs == 1 ? 10.0 + (double)config : 100.0 - (double)config;
}

/* The scheduler runs a halving sweep: phase-1 jobs take 5 samples and race; when the last
 * phase-1 result commits, phase 2 is stored and dispatched (racing off, the sweep's sample
 * rule, one job per batch size with its finalists, side by side in WIRE_SIDE_BY_SIDE_ROUNDS
 * rounds, as status says); a result for a batch size outside its
 * job is refused; the sweep is running until phase 2 is done, and then each (config, batch
 * size) has one row, the finalists' from phase 2. */
static void test_sched_phases(void **state) {
    fx_t *f = *state;
    fx_spec_t x;
    Moetune__Submitted sub;
    fx_spec(&x, "halving", (const uint32_t[]){1, 2}, 3, 1, 4, 0);
    x.spec.strategy = "halving";
    fx_start(f, 1000, 30000);
    fx_submit_spec(f, &x, &sub);
    assert_int_equal(sub.configs_valid, 12);
    sched_worker_t *a = fx_hello(f, "A", "NVIDIA H200", 0);
    const Moetune__Job *j = fx_take(f, "A", 0);
    assert_int_equal(j->n_configs, 12);
    sched_status_t st;
    assert_int_equal(sched_status(f->s, 0, 1, &st), MT_OK);
    assert_int_equal(st.reply.sweeps[0]->phase, 1);
    assert_int_equal(st.reply.sweeps[0]->finalists_planned, 0);
    assert_int_equal(st.reply.sweeps[0]->finalists_done, 0);
    assert_int_equal(st.reply.sweeps[0]->finalists_expected, 10); /* (4 best + a neighbour's winner) x 2 */
    assert_int_equal(st.reply.sweeps[0]->finalist_rounds, WIRE_SIDE_BY_SIDE_ROUNDS);
    sched_status_release(&st);
    assert_int_equal(j->measure->min_samples, HALVING_PHASE1_SAMPLES);
    assert_int_equal(j->measure->max_samples, HALVING_PHASE1_SAMPLES);
    assert_true(j->measure->race_margin > 0);
    uint64_t seq = 1, lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < j->n_configs; i++) {
        uint64_t id = j->configs[i]->config_id;
        double med[2] = {phase1_us(id, 1), phase1_us(id, 2)};
        lo = id < lo ? id : lo;
        hi = id > hi ? id : hi;
        assert_int_equal(send_result(f, a, j, seq++, id, x.bs, med, 2, 1), MT_OK);
    }
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
    /* finalists: the best 4 at each batch size plus the other's winner; 14 rows pruned */
    assert_int_equal(
        fx_query_int(f, "SELECT COUNT(*) FROM results WHERE status = 'pruned' AND detail LIKE 'halving:%'"), 14);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE phase = 2"), 2);
    /* every result is in (a phase-2 row replaces its phase-1 row), yet phase 2 is all to do */
    assert_int_equal(sched_status(f->s, 0, 2, &st), MT_OK);
    assert_string_equal(st.reply.sweeps[0]->state, "running");
    assert_int_equal(st.reply.sweeps[0]->results_pruned, 14);
    assert_int_equal(st.reply.sweeps[0]->results_done, st.reply.sweeps[0]->results_planned);
    assert_int_equal(st.reply.sweeps[0]->phase, 2);
    assert_int_equal(st.reply.sweeps[0]->finalists_planned, 10);
    assert_int_equal(st.reply.sweeps[0]->finalists_done, 0);
    assert_int_equal(st.reply.sweeps[0]->finalists_expected, 10);
    sched_status_release(&st);
    fx_clear(f);
    sched_on_ready(f->s, a, 2, 3); /* a credit a job: a refused job waits for the next Ready */
    size_t jobs = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (f->msg[i]->body_case != MOETUNE__ENVELOPE__BODY_JOB) continue;
        const Moetune__Job *p2 = f->msg[i]->job;
        jobs++;
        assert_true(p2->measure->race_margin < 0);
        assert_int_equal(p2->measure->min_samples, 10);
        assert_int_equal(p2->measure->max_samples, 100);
        assert_int_equal(p2->n_best_us, p2->n_batch_sizes);
        /* one batch size's five finalists, side by side */
        assert_int_equal(p2->n_batch_sizes, 1);
        assert_int_equal(p2->n_configs, 5);
        assert_int_equal(p2->rounds, WIRE_SIDE_BY_SIDE_ROUNDS);
    }
    assert_int_equal(jobs, 2);
    /* a result for a batch size its job does not measure is refused, the job back to pending */
    const Moetune__Job *p2 = NULL;
    for (size_t i = 0; i < f->n && !p2; i++)
        if (f->msg[i]->body_case == MOETUNE__ENVELOPE__BODY_JOB && f->msg[i]->job->n_batch_sizes == 1 &&
            f->msg[i]->job->batch_sizes[0] == 1)
            p2 = f->msg[i]->job;
    assert_non_null(p2);
    double med1 = 5.0;
    uint32_t wrong = 2;
    assert_int_equal(send_result(f, a, p2, seq++, p2->configs[0]->config_id, &wrong, &med1, 1, 4), MT_INVAL);
    uint32_t attempts = 0;
    assert_string_equal(sched_job_state(f->s, p2->job_id, &attempts), "pending");
    assert_int_equal(attempts, 1);
    /* measure every phase-2 job (the two still leased, then the refused one again): finalist
     * rows replace their phase-1 rows */
    uint64_t refused = p2->job_id, sent = 0;
    for (int round = 0; round < 2; round++) {
        if (round) {
            fx_clear(f);
            sched_on_ready(f->s, a, 1, 5 + round);
        }
        for (size_t i = 0; i < f->n; i++) {
            if (f->msg[i]->body_case != MOETUNE__ENVELOPE__BODY_JOB) continue;
            const Moetune__Job *q = f->msg[i]->job;
            if (round == 0 && q->job_id == refused) continue;
            for (size_t k = 0; k < q->n_configs; k++) {
                double med[2] = {1.0, 2.0};
                assert_int_equal(send_result(f, a, q, seq++, q->configs[k]->config_id, q->batch_sizes, med,
                                             q->n_batch_sizes, 5 + round),
                                 MT_OK);
                sent += q->n_batch_sizes;
            }
        }
        assert_int_equal(sched_flush(f->s, 5 + round), MT_OK);
        assert_int_equal(sched_status(f->s, 0, 5 + round, &st), MT_OK);
        assert_int_equal(st.reply.sweeps[0]->finalists_done, sent);
        assert_int_equal(st.reply.sweeps[0]->finalists_planned, 10);
        if (round == 0) {
            assert_true(sent > 0 && sent < 10);
            assert_string_equal(st.reply.sweeps[0]->state, "running");
        }
        sched_status_release(&st);
    }
    assert_int_equal(sent, 10);
    assert_int_equal(sched_status(f->s, 0, 10, &st), MT_OK);
    assert_string_equal(st.reply.sweeps[0]->state, "done");
    assert_int_equal(st.reply.sweeps[0]->results_done, 24);
    assert_int_equal(st.reply.sweeps[0]->results_pruned, 14);
    sched_status_release(&st);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 24);
    assert_int_equal(
        fx_query_int(f, "SELECT COUNT(*) FROM results WHERE phase = 2 AND status = 'ok' AND median_us < 3"), 10);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE phase = 1 AND status = 'ok'"), 0);
    char sql[160];
    mt_fmt(sql, sizeof sql, "SELECT COUNT(*) FROM results WHERE phase = 2 AND config_id IN (%llu, %llu)",
           (unsigned long long)lo, (unsigned long long)hi);
    assert_int_equal(fx_query_int(f, sql), 4); /* each side's winner, at both batch sizes */
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM sweeps WHERE state = 'done'"), 1);
    /* a restart reads the same progress back from the store */
    fx_stop(f);
    fx_start(f, 1000, 30000);
    assert_int_equal(sched_status(f->s, 0, 20, &st), MT_OK);
    assert_string_equal(st.reply.sweeps[0]->state, "done");
    assert_int_equal(st.reply.sweeps[0]->phase, 2);
    assert_int_equal(st.reply.sweeps[0]->finalists_planned, 10);
    assert_int_equal(st.reply.sweeps[0]->finalists_done, 10);
    sched_status_release(&st);
}

/* A racing sweep's decide step (--decide-margin 0.02): phase 1 is the sweep's own measurement (racing on, the RSD
 * rule); when its results commit, the near-ties of each batch size (here the best four of
 * five within 2 % at batch size 1, none at 2) go to one phase-2 job, racing off, nothing
 * pruned; their side-by-side rows replace the first ones and decide the pick. */
static void test_sched_decide(void **state) {
    fx_t *f = *state;
    fx_spec_t x;
    Moetune__Submitted sub;
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    static const uint32_t bs[] = {1, 2};
    fx_spec(&x, "decide", bs, 3, 1, 4, 0);
    m.decide_margin = 0.02; /* racing stays on: its default */
    x.spec.measure = &m;
    fx_start(f, 1000, 30000);
    fx_submit_spec(f, &x, &sub);
    sched_worker_t *a = fx_hello(f, "A", "NVIDIA H200", 0);
    const Moetune__Job *j = fx_take(f, "A", 0);
    assert_int_equal(j->n_configs, 12);
    assert_int_equal(j->measure->min_samples, 10); /* the sweep's own rule, not halving's 5 */
    assert_int_equal(j->measure->max_samples, 100);
    assert_true(j->measure->race_margin > 0);
    uint64_t lo = UINT64_MAX, hi = 0, seq = 1;
    for (size_t i = 0; i < j->n_configs; i++) {
        uint64_t id = j->configs[i]->config_id;
        lo = id < lo ? id : lo;
        hi = id > hi ? id : hi;
    }
    assert_int_equal(hi - lo, 11);
    /* before its near-ties are known, progress foresees HALVING_DECIDE_EXPECT per batch size,
     * each measured in WIRE_SIDE_BY_SIDE_ROUNDS rounds */
    sched_status_t st;
    assert_int_equal(sched_status(f->s, 0, 1, &st), MT_OK);
    assert_int_equal(st.reply.sweeps[0]->phase, 1);
    assert_int_equal(st.reply.sweeps[0]->finalists_expected, 2 * HALVING_DECIDE_EXPECT);
    assert_int_equal(st.reply.sweeps[0]->finalist_rounds, WIRE_SIDE_BY_SIDE_ROUNDS);
    sched_status_release(&st);
    for (size_t i = 0; i < j->n_configs; i++) {
        uint64_t r = j->configs[i]->config_id - lo; /* rank 0 fastest at both */
        double med[2] = {100.0 + 0.5 * (double)r, 100.0 + 6.0 * (double)r};
        assert_int_equal(send_result(f, a, j, seq++, j->configs[i]->config_id, bs, med, 2, 1), MT_OK);
    }
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE phase = 2"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE phase = 2 AND batch_sizes = '1'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE status = 'ok'"), 24);
    assert_int_equal(sched_status(f->s, 0, 2, &st), MT_OK);
    assert_string_equal(st.reply.sweeps[0]->state, "running");
    assert_int_equal(st.reply.sweeps[0]->phase, 2);
    assert_int_equal(st.reply.sweeps[0]->finalists_planned, HALVING_DECIDE_MAX);
    assert_int_equal(st.reply.sweeps[0]->finalists_expected, HALVING_DECIDE_MAX);
    assert_int_equal(st.reply.sweeps[0]->results_pruned, 0);
    sched_status_release(&st);
    const Moetune__Job *p2 = fx_take(f, "A", 3);
    assert_int_equal(p2->n_configs, HALVING_DECIDE_MAX);
    assert_int_equal(p2->n_batch_sizes, 1);
    assert_int_equal(p2->batch_sizes[0], 1);
    assert_true(p2->measure->race_margin < 0);
    assert_int_equal(p2->measure->min_samples, 10);
    /* side by side, the third of phase 1 is the fastest */
    for (size_t k = 0; k < p2->n_configs; k++) {
        uint64_t r = p2->configs[k]->config_id - lo;
        assert_true(r < HALVING_DECIDE_MAX);
        double med = r == 2 ? 99.0 : 100.0 + (double)r;
        assert_int_equal(send_result(f, a, p2, seq++, p2->configs[k]->config_id, p2->batch_sizes, &med, 1, 4), MT_OK);
    }
    assert_int_equal(sched_flush(f->s, 5), MT_OK);
    assert_int_equal(sched_status(f->s, 0, 5, &st), MT_OK);
    assert_string_equal(st.reply.sweeps[0]->state, "done");
    assert_int_equal(st.reply.sweeps[0]->finalists_done, HALVING_DECIDE_MAX);
    sched_status_release(&st);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results"), 24);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE phase = 2 AND batch_size = 1"),
                     HALVING_DECIDE_MAX);
    assert_int_equal(
        fx_query_int(f,
                     "SELECT config_id FROM results WHERE batch_size = 1 AND status = 'ok' ORDER BY median_us LIMIT 1"),
        (int64_t)(lo + 2));
}

/* Whether shape n's phase 2 is planned exactly when none of its phase-1 jobs is open. */
static void phase2_iff_closed(fx_t *f, uint32_t n, bool want) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM jobs WHERE phase = 1 AND state IN ('pending', 'leased') AND shape_id ="
             " (SELECT id FROM shapes WHERE n = %u)",
             n);
    int64_t open = fx_query_int(f, sql);
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM jobs WHERE phase = 2 AND shape_id = (SELECT id FROM shapes WHERE n = %u)", n);
    int64_t p2 = fx_query_int(f, sql);
    assert_int_equal(open == 0, want);
    assert_int_equal(p2 > 0, want);
}

/* w's Results for every config of j at batch sizes bs {1, 2}, all near-ties (100 us + 0.1 per
 * config at 1, 200 + 0.1 at 2), from seq on; the next seq. */
static uint64_t measure_all(fx_t *f, sched_worker_t *w, const Moetune__Job *j, uint64_t seq, const uint32_t *bs,
                            uint64_t now) {
    for (size_t i = 0; i < j->n_configs; i++) {
        double med[2] = {100.0 + 0.1 * (double)i, 200.0 + 0.1 * (double)i};
        assert_int_equal(send_result(f, w, j, seq++, j->configs[i]->config_id, bs, med, 2, now), MT_OK);
    }
    return seq;
}

/* Per shape, its phase 2 is planned when its own last phase-1 job ends, whatever the other
 * shape's jobs do: two shapes of two jobs each, ended one at a time, the last one's lease
 * lapsing (pending again) and the job measured by another worker. */
static void test_phase2_per_shape(void **state) {
    fx_t *f = *state;
    fx_spec_t x;
    Moetune__Submitted sub;
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    static const uint32_t bs[] = {1, 2};
    fx_spec(&x, "per-shape", bs, 3, 1, 4, 6);
    Moetune__Shape other = x.sh, *shapes[2] = {&x.sh, &other};
    other.n = 512;
    x.spec.n_shapes = 2, x.spec.shapes = shapes;
    m.decide_margin = 0.02;
    x.spec.measure = &m;
    fx_start(f, 1000, 30000);
    fx_submit_spec(f, &x, &sub);
    assert_int_equal(sub.jobs, 4);
    /* a worker holds WIRE_MAX_HELD (2) jobs at most: A takes two, C the other two */
    sched_worker_t *hw[2] = {fx_hello(f, "A", "NVIDIA H200", 0), fx_hello(f, "C", "NVIDIA H200", 0)};
    const Moetune__Job *held[4] = {NULL};
    size_t first[2] = {4, 4}; /* per shape (256, 512): its first job among held */
    for (size_t i = 0; i < 4; i++) {
        held[i] = fx_take(f, i < 2 ? "A" : "C", 1 + i);
        size_t k = held[i]->shape->n == 512;
        if (first[k] == 4) first[k] = i;
    }
    assert_true(first[0] < 4 && first[1] < 4);
    uint64_t seq = 1;
    /* each shape's first job, then the 256 shape's second: only that shape's phase 2 */
    size_t order[4] = {first[0], first[1], 4, 4};
    for (size_t i = 0, k = 2; i < 4; i++)
        if (i != first[0] && i != first[1]) order[k++] = i;
    if (held[order[2]]->shape->n != 256) {
        size_t t = order[2];
        order[2] = order[3], order[3] = t;
    }
    for (size_t step = 0; step < 3; step++) {
        seq = measure_all(f, hw[order[step] >= 2], held[order[step]], seq, bs, 10 + step);
        assert_int_equal(sched_flush(f->s, 10 + step), MT_OK);
        phase2_iff_closed(f, 256, step == 2);
        phase2_iff_closed(f, 512, false);
    }
    /* the 512 shape's last job lapses: pending again, still open; B measures it */
    uint64_t last = held[order[3]]->job_id;
    sched_tick(f->s, 100000);
    assert_string_equal(sched_job_state(f->s, last, NULL), "pending");
    assert_int_equal(sched_flush(f->s, 100000), MT_OK);
    phase2_iff_closed(f, 512, false);
    sched_worker_t *b = NULL;
    const Moetune__Job *j = NULL;
    for (int tries = 0; tries < 4 && (!j || j->job_id != last); tries++) {
        char name[8]; /* a new worker each: one may hold 2 jobs, and phase-2 jobs go first */
        snprintf(name, sizeof name, "B%d", tries);
        b = fx_hello(f, name, "NVIDIA H200", 100001 + tries);
        j = fx_take(f, name, 100002 + tries);
    }
    assert_int_equal(j->job_id, last);
    seq = measure_all(f, b, j, seq, bs, 100010);
    assert_int_equal(sched_flush(f->s, 100010), MT_OK);
    phase2_iff_closed(f, 512, true);
    phase2_iff_closed(f, 256, true);
}

/* The per-shape counts on their own: jobs indexed before their shape is added are counted in
 * when it is; a shape added twice (a load after a submit) keeps one slot, planned if either
 * says so; a job's state changes move its shape's open count and the sweep's pending phase-2
 * count, and nothing else's. */
static void test_open_counts(void **state) {
    (void)state;
    sweep_t sw = {0};
    job_t a = {.sw = &sw, .shape_id = 7, .state = WIRE_JOB_PENDING, .phase = 1};
    job_t b = {.sw = &sw, .shape_id = 7, .state = WIRE_JOB_LEASED, .phase = 1};
    job_t c = {.sw = &sw, .shape_id = 9, .state = WIRE_JOB_PENDING, .phase = 2};
    job_t *jobs[3] = {&a, &b, &c};
    sw.jobs = jobs;
    sw.n_jobs = 2; /* a and b indexed before shape 7 is added */
    assert_int_equal(sched_halving_add_shape(&sw, 7, false), MT_OK);
    assert_int_equal(sw.hv_open[0], 2);
    assert_int_equal(sched_halving_add_shape(&sw, 9, false), MT_OK);
    assert_int_equal(sw.hv_open[1], 0);
    assert_int_equal(sched_halving_add_shape(&sw, 7, true), MT_OK);
    assert_int_equal(sw.n_hv, 2);
    assert_int_equal(sw.hv_state[0], HV_PLANNED);
    assert_int_equal(sw.hv_state[1], HV_WAIT);
    sw.n_jobs = 3; /* c indexed: counted in as from a closed state */
    sched_halving_count(&c, WIRE_JOB_DONE);
    assert_int_equal(sw.hv_open[1], 1);
    assert_int_equal(sw.pending2, 1);
    c.state = WIRE_JOB_LEASED;
    sched_halving_count(&c, WIRE_JOB_PENDING);
    assert_int_equal(sw.hv_open[1], 1);
    assert_int_equal(sw.pending2, 0);
    c.state = WIRE_JOB_PENDING; /* its lease lapsed */
    sched_halving_count(&c, WIRE_JOB_LEASED);
    assert_int_equal(sw.pending2, 1);
    c.state = WIRE_JOB_DONE;
    sched_halving_count(&c, WIRE_JOB_PENDING);
    assert_int_equal(sw.hv_open[1], 0);
    assert_int_equal(sw.pending2, 0);
    a.state = WIRE_JOB_LEASED;
    sched_halving_count(&a, WIRE_JOB_PENDING);
    assert_int_equal(sw.hv_open[0], 2);
    a.state = WIRE_JOB_CANCELLED;
    sched_halving_count(&a, WIRE_JOB_LEASED);
    b.state = WIRE_JOB_FAILED;
    sched_halving_count(&b, WIRE_JOB_LEASED);
    assert_int_equal(sw.hv_open[0], 0);
    assert_int_equal(sw.pending2, 0); /* phase-1 jobs never count there */
    free(sw.hv_shapes);
    free(sw.hv_state);
    free(sw.hv_open);
}

/* A shape's phase 2 rides alone: the commit that plans its decide jobs carries no results, so
 * a backlog of other results (here another sweep's) does not hold up the jobs the shape's
 * answer waits on; those results go in the next commit. */
static void test_decide_plan_rides_alone(void **state) {
    fx_t *f = *state;
    fx_spec_t x, y;
    Moetune__Submitted sub, sub2;
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    static const uint32_t bs[] = {1, 2};
    fx_spec(&x, "decide", bs, 3, 1, 4, 0);
    m.decide_margin = 0.02;
    x.spec.measure = &m;
    fx_spec(&y, "other", bs, 1, 1, 4, 0);
    fx_start(f, 1000, 30000);
    fx_submit_spec(f, &x, &sub);
    fx_submit_spec(f, &y, &sub2);
    sched_worker_t *a = fx_hello(f, "A", "NVIDIA H200", 0);
    const Moetune__Job *j = fx_take(f, "A", 0);
    assert_int_equal(j->sweep_id, sub.sweep_id);
    sched_worker_t *b = fx_hello(f, "B", "NVIDIA H200", 0);
    const Moetune__Job *k = fx_take(f, "B", 0);
    assert_int_equal(k->sweep_id, sub2.sweep_id);
    uint64_t seq = 1;
    for (size_t i = 0; i < j->n_configs; i++) {
        double med[2] = {100.0 + 0.1 * (double)i, 100.0 + 0.1 * (double)i};
        assert_int_equal(send_result(f, a, j, seq++, j->configs[i]->config_id, bs, med, 2, 1), MT_OK);
    }
    assert_int_equal(fx_commit_batch(f, 1), j->n_configs); /* A's job done: the decide step is due */
    for (size_t i = 0; i < k->n_configs; i++) {
        double med[2] = {50.0, 60.0};
        assert_int_equal(send_result(f, b, k, i + 1, k->configs[i]->config_id, bs, med, 2, 2), MT_OK);
    }
    assert_int_equal(sched_pending(f->s), k->n_configs);
    assert_int_equal(fx_commit_batch(f, 2), 0); /* the plan alone */
    assert_true(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE phase = 2") >= 1);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM results WHERE sweep_id = %llu", (unsigned long long)sub2.sweep_id);
    assert_int_equal(fx_query_int(f, sql), 0);
    assert_int_equal(fx_commit_batch(f, 3), k->n_configs); /* then the backlog */
    assert_int_equal(fx_query_int(f, sql), 2 * (int64_t)k->n_configs);
    assert_int_equal(sched_pending(f->s), 0);
}

/* A decide sweep's first pass, its state in *d: fx_spec's 12 configs at batch sizes {1, 2},
 * chunk configs a job, the decide step at 2 %, and when dear_k is not 0 a second shape like
 * the first with K = dear_k; submitted, then worker A takes the first job and commits every
 * config of it, at batch size b the median lin[2b] + lin[2b + 1] x rank (rank: the config's id
 * less the job's lowest). */
typedef struct {
    fx_spec_t x;
    Moetune__Measure m;
    Moetune__Shape dear, *shapes[2];
    Moetune__Submitted sub;
    sched_worker_t *a;
    const Moetune__Job *job;
    uint64_t seq; /* the next result's */
} decide_pass_t;

static void decide_first_pass(fx_t *f, decide_pass_t *d, const char *name, uint32_t chunk, uint32_t dear_k,
                              const double lin[4]) {
    fx_spec(&d->x, name, (const uint32_t[]){1, 2}, 3, 1, 4, chunk);
    moetune__measure__init(&d->m);
    d->m.decide_margin = 0.02;
    d->x.spec.measure = &d->m;
    if (dear_k) {
        d->dear = d->x.sh;
        d->dear.k = dear_k;
        d->shapes[0] = &d->x.sh, d->shapes[1] = &d->dear;
        d->x.spec.n_shapes = 2;
        d->x.spec.shapes = d->shapes;
    }
    d->seq = 1;
    fx_start(f, 1000, 30000);
    fx_submit_spec(f, &d->x, &d->sub);
    d->a = fx_hello(f, "A", "NVIDIA H200", 0);
    d->job = fx_take(f, "A", 0);
    uint64_t lo = UINT64_MAX;
    for (size_t i = 0; i < d->job->n_configs; i++)
        lo = d->job->configs[i]->config_id < lo ? d->job->configs[i]->config_id : lo;
    for (size_t i = 0; i < d->job->n_configs; i++) {
        double r = (double)(d->job->configs[i]->config_id - lo);
        double med[2] = {lin[0] + lin[1] * r, lin[2] + lin[3] * r};
        assert_int_equal(send_result(f, d->a, d->job, d->seq++, d->job->configs[i]->config_id, d->x.bs, med, 2, 1),
                         MT_OK);
    }
    assert_int_equal(sched_flush(f->s, 2), MT_OK);
}

/* A sweep of two shapes stores the costlier shape's jobs first (planner.c plan_shape_chunks),
 * and a phase-2 job goes before every pending first-pass job: the costly shape's near-ties are
 * re-measured while the cheap shape's first pass is still to run. */
static void test_sched_phase2_first(void **state) {
    fx_t *f = *state;
    decide_pass_t d; /* K = 1024: four times the cheap shape's work per config */
    decide_first_pass(f, &d, "two shapes", 12, 1024, (const double[4]){100.0, 0.5, 100.0, 6.0});
    assert_int_equal(d.sub.jobs, 2);
    assert_int_equal(d.job->shape->k, 1024); /* the costlier shape's job first, though listed second */
    assert_int_equal(d.job->n_configs, 12);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE phase = 1 AND state = 'pending'"), 1);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE phase = 2 AND state = 'pending'"), 1);
    const Moetune__Job *p2 = fx_take(f, "A", 3);
    assert_int_equal(p2->shape->k, 1024);
    assert_int_equal(p2->n_batch_sizes, 1); /* the decide step's job, not the cheap shape's first pass */
    assert_int_equal(p2->n_configs, HALVING_DECIDE_MAX);
    assert_true(p2->measure->race_margin < 0);
}

/* A restart between two decide jobs that share their configs (the same four near-ties at both
 * batch sizes): the second job still measures all four, though each has a phase-2 row at the
 * other batch size, and the sweep ends with both batch sizes re-measured. On an H200, such a
 * restart once ended a sweep with 7 of 70 finalist rows never re-measured. */
static void test_sched_decide_restart(void **state) {
    fx_t *f = *state;
    decide_pass_t d;
    decide_first_pass(f, &d, "decide restart", 0, 0, (const double[4]){100.0, 0.5, 200.0, 1.0});
    sched_worker_t *a = d.a;
    uint64_t seq = d.seq;
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM jobs WHERE phase = 2"), 2);
    const Moetune__Job *first = fx_take(f, "A", 3);
    assert_int_equal(first->n_configs, HALVING_DECIDE_MAX);
    assert_int_equal(first->batch_sizes[0], 2); /* the largest batch size first */
    for (size_t k = 0; k < first->n_configs; k++) {
        double med = 199.0;
        assert_int_equal(send_result(f, a, first, seq++, first->configs[k]->config_id, first->batch_sizes, &med, 1, 4),
                         MT_OK);
    }
    assert_int_equal(sched_flush(f->s, 5), MT_OK);
    fx_stop(f);
    fx_start(f, 1000, 30000);
    a = fx_hello(f, "A", "NVIDIA H200", 10);
    const Moetune__Job *second = fx_take(f, "A", 11);
    assert_non_null(second);
    assert_int_equal(second->batch_sizes[0], 1);
    assert_int_equal(second->n_configs, HALVING_DECIDE_MAX); /* all four, not none */
    for (size_t k = 0; k < second->n_configs; k++) {
        double med = 99.0;
        assert_int_equal(
            send_result(f, a, second, seq++, second->configs[k]->config_id, second->batch_sizes, &med, 1, 12), MT_OK);
    }
    assert_int_equal(sched_flush(f->s, 13), MT_OK);
    sched_status_t st;
    assert_int_equal(sched_status(f->s, 0, 13, &st), MT_OK);
    assert_string_equal(st.reply.sweeps[0]->state, "done");
    assert_int_equal(st.reply.sweeps[0]->finalists_done, 2 * HALVING_DECIDE_MAX);
    sched_status_release(&st);
    assert_int_equal(fx_query_int(f, "SELECT COUNT(*) FROM results WHERE phase = 2"), 2 * HALVING_DECIDE_MAX);
}

int main(void) {
    mt_log_init("test_halving", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose),
        cmocka_unit_test(test_choose_share),
        cmocka_unit_test(test_choose_decide),
        cmocka_unit_test(test_choose_devices),
        cmocka_unit_test(test_choose_modes),
        cmocka_unit_test(test_finalists_estimate),
        cmocka_unit_test(test_measure),
        cmocka_unit_test(test_bs_lists),
        cmocka_unit_test_prestate_setup_teardown(test_plan_shape, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_plan_decide, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_plan_lone_best, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_plan_devices, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_plan_modes, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_setup_teardown(test_sched_phases, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_sched_decide, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_phase2_per_shape, fx_setup, fx_teardown),
        cmocka_unit_test(test_open_counts),
        cmocka_unit_test_setup_teardown(test_decide_plan_rides_alone, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_sched_phase2_first, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_sched_decide_restart, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
