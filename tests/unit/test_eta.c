/* test_eta.c - the ETA from the work left (cli/eta.h) against a recorded-like progress:
 * a simulated single-GPU sweep as measured on an H200 (slow large batch sizes, results
 * committed batch size by batch size, racing that prunes more as the sweep goes on), seen
 * through the coordinator's 5 s rate window and a display that polls every second and
 * prints a line every 5 s. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "eta.h"
#include "mt.h"

static const uint32_t k_bs[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096};
#define NB (sizeof k_bs / sizeof k_bs[0])
#define FULL_SAMPLES 40
#define PRUNED_SAMPLES 2      /* racing stops a config after its first samples */
#define CONFIG_OVERHEAD_S 0.3 /* compile, reference check */

typedef struct {
    double t; /* commit time */
    bool pruned;
} commit_t;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static double unit(uint64_t a, uint64_t b) { return (double)(mix(a * 1000003u + b) >> 11) / 9007199254740992.0; }

/* Commits of n_cfg configs x NB batch sizes, in time order, the first after startup_s
 * seconds with none (workers and helpers starting). prune_end: the share of results at
 * batch sizes >= 16 pruned by the end (rising linearly from 0). */
static commit_t *simulate(size_t n_cfg, double prune_end, double speed_var, double startup_s, double *end_t) {
    commit_t *c = calloc(n_cfg * NB, sizeof *c);
    double t = startup_s;
    size_t k = 0;
    for (size_t i = 0; i < n_cfg; i++) {
        t += CONFIG_OVERHEAD_S;
        double slow = 1.0 + speed_var * unit(i, 99); /* configs differ in speed */
        for (size_t b = 0; b < NB; b++) {
            double per_sample = 10 * (20e-6 + k_bs[b] * 0.5e-6) * slow; /* a graph of 10 layers */
            bool pruned = k_bs[b] >= 16 && unit(i, b) < prune_end * (double)i / (double)n_cfg;
            t += per_sample * (pruned ? PRUNED_SAMPLES : FULL_SAMPLES);
            c[k++] = (commit_t){t, pruned};
        }
    }
    *end_t = t;
    return c;
}

typedef struct {
    double worst_swing;     /* |eta_k - (eta_{k-1} - dt)| / eta_{k-1}, lines from 5 % done while eta_{k-1} >= 10 s */
    double worst_plain;     /* |eta_k - eta_{k-1}| / eta_{k-1}, lines from 5 % done while eta >= 60 s */
    double worst_err_half;  /* |eta - true| / true, lines from 50 % to 95 % done */
    double worst_err_fifth; /* the same from 20 % done */
    double err_at[3];       /* at 50 %, 75 %, 90 % done */
    size_t lines;
} verdict_t;

/* Plays the commits through 1 s status snapshots; eta_new NULL: the old (total-done)/rate. */
static void play(const commit_t *c, size_t n, double end_t, bool use_new, verdict_t *v) {
    cli_eta_t *e = NULL;
    assert_int_equal(cli_eta_new(&e), MT_OK);
    memset(v, 0, sizeof *v);
    double slot_t[6] = {0}, slot_done[6] = {0};
    size_t slots = 0, k = 0;
    double prev = -1, prev_t = 0;
    int next_mark = 0;
    const double marks[3] = {0.50, 0.75, 0.90};
    for (double t = 1.0; k < n; t += 1.0) {
        uint64_t pruned = 0;
        while (k < n && c[k].t <= t) k++;
        for (size_t i = 0; i < k; i++) pruned += c[i].pruned;
        /* the coordinator's rate: one sample a second, a 6-slot (about 5 s) window */
        slot_t[slots % 6] = t;
        slot_done[slots % 6] = (double)k;
        slots++;
        size_t oldest = slots > 6 ? slots % 6 : 0;
        double rate = t > slot_t[oldest] ? ((double)k - slot_done[oldest]) / (t - slot_t[oldest]) : 0.0;
        cli_eta_sample_t s = {t, 1e9 + t, n, k, pruned, (uint64_t)1e9, rate};
        double eta = -1;
        assert_int_equal(cli_eta_observe(e, &s, &eta), MT_OK);
        if (!use_new) eta = rate > 0 ? (double)(n - k) / rate : -1;
        if (((int)t) % 5 != 0 || k >= n) continue; /* a progress line every 5 s */
        double x = (double)k / (double)n, truth = end_t - t;
        /* from 5 % done, while 10 s or more were left (below, as in the estimator, a few
         * seconds are no swing) */
        if (x >= 0.05 && prev >= 10.0 && eta > 0) {
            double dt = t - prev_t;
            double swing = fabs(eta - (prev - dt)) / prev;
            if (swing > v->worst_swing) v->worst_swing = swing;
            if (prev >= 60 && fabs(eta - prev) / prev > v->worst_plain) v->worst_plain = fabs(eta - prev) / prev;
            v->lines++;
        }
        if (x >= 0.5 && x <= 0.95 && truth > 0 && fabs(eta - truth) / truth > v->worst_err_half)
            v->worst_err_half = fabs(eta - truth) / truth;
        if (x >= 0.2 && x <= 0.95 && truth > 0 && fabs(eta - truth) / truth > v->worst_err_fifth)
            v->worst_err_fifth = fabs(eta - truth) / truth;
        while (next_mark < 3 && x >= marks[next_mark]) v->err_at[next_mark++] = fabs(eta - truth) / truth;
        prev = eta;
        prev_t = t;
    }
    cli_eta_destroy(&e);
}

static void report(const char *what, const verdict_t *v) {
    printf("# %s: %zu lines, worst swing %.1f %% (plain %.1f %%), worst error 50-95 %% done %.1f %%, "
           "error at 50/75/90 %%: %.1f/%.1f/%.1f %%\n",
           what, v->lines, 100 * v->worst_swing, 100 * v->worst_plain, 100 * v->worst_err_half, 100 * v->err_at[0],
           100 * v->err_at[1], 100 * v->err_at[2]);
}

/* Simulates a sweep of n_cfg configs (simulate's knobs) and plays its progress to the ETA:
 * into now with the estimate from the work left, reported as what; into old, when not NULL,
 * with the old formula, reported as old_what. */
static void sweep(size_t n_cfg, double prune_end, double speed_var, double startup_s, const char *what, verdict_t *now,
                  const char *old_what, verdict_t *old) {
    double end_t;
    commit_t *c = simulate(n_cfg, prune_end, speed_var, startup_s, &end_t);
    play(c, n_cfg * NB, end_t, true, now);
    if (old) play(c, n_cfg * NB, end_t, false, old);
    report(what, now);
    if (old) report(old_what, old);
    free(c);
}

/* The GPU pattern: slow large batch sizes, pruning rising to 70 % of the large ones. */
static void test_gpu_pattern(void **state) {
    (void)state;
    verdict_t now, old;
    sweep(300, 0.7, 2.0, 0.0, "from the work left", &now, "old (total-done)/rate", &old);
    assert_true(now.lines > 100);
    assert_true(now.worst_swing <= 0.20);
    assert_true(now.worst_plain <= 0.20);
    assert_true(now.worst_err_half <= 0.25);
    for (int i = 0; i < 3; i++) assert_true(now.err_at[i] <= 0.15);
    /* the old formula swings past the bound on the same progress */
    assert_true(old.worst_swing > 0.20);
}

/* No racing and configs alike: the estimate is the plain cost and ends close. */
static void test_steady(void **state) {
    (void)state;
    verdict_t now;
    sweep(150, 0.0, 0.0, 0.0, "steady", &now, NULL, NULL);
    assert_true(now.worst_swing <= 0.20);
    for (int i = 0; i < 3; i++) assert_true(now.err_at[i] <= 0.05);
}

/* A short sweep behind a 20 s start-up (the triton helper imports torch and compiles its
 * first configs: no result for 20 s, as on the H200): the start-up is not taken for the
 * cost of the results. Before, the first chunk began at the first snapshot, the estimate
 * started about 2.5x high, and the damping held it there (4 min left at 92 % of a 70 s
 * sweep). */
static void test_startup(void **state) {
    (void)state;
    verdict_t now;
    sweep(60, 0.5, 1.0, 20.0, "after a 20 s start-up", &now, NULL, NULL);
    assert_true(now.worst_err_fifth <= 0.25);
    for (int i = 0; i < 3; i++) assert_true(now.err_at[i] <= 0.25);
}

/* Commits as a recorded progress shows them (tests/unit/support/progress-h200-*.txt: a
 * "wall S" line, then moetune tune's progress lines, one every 5 s): line i at wall * i / (lines
 * - 1), the results and finalist rows done since the line before spread evenly over the 5 s.
 * No pruned count: racing's decide step and halving run in phases, whose status the display
 * feeds without one (cli_progress_sample). planned: the results and finalists of the last line. */
static commit_t *recorded(const char *name, size_t *n, double *end_t) {
    char path[512];
    mt_fmt(path, sizeof path, "%s/tests/unit/support/%s", MT_SOURCE_DIR, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    double wall = 0;
    uint64_t done[128], planned = 0;
    size_t lines = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (sscanf(line, "wall %lf", &wall) == 1) continue;
        const char *r = strstr(line, " results (");
        assert_non_null(r);
        while (r > line && r[-1] != ' ') r--;
        unsigned long long d = 0, p = 0, fd = 0, fp = 0;
        assert_int_equal(sscanf(r, "%llu/%llu", &d, &p), 2);
        const char *fin = strstr(line, " finalists");
        if (fin) {
            while (fin > line && fin[-1] != ' ') fin--;
            assert_int_equal(sscanf(fin, "%llu/%llu", &fd, &fp), 2);
        }
        assert_true(lines < sizeof done / sizeof done[0]);
        done[lines++] = d + fd;
        planned = p + fp;
    }
    fclose(f);
    assert_true(wall > 0 && lines > 10 && planned > 0);
    commit_t *c = calloc(planned, sizeof *c);
    size_t k = 0;
    for (size_t i = 1; i < lines; i++) {
        double t0 = wall * (double)(i - 1) / (double)(lines - 1), t1 = wall * (double)i / (double)(lines - 1);
        uint64_t step = done[i] - done[i - 1];
        for (uint64_t j = 0; j < step && k < planned; j++) c[k++] = (commit_t){t0 + (t1 - t0) * (j + 1) / step, false};
    }
    while (k < planned) c[k++] = (commit_t){wall, false};
    *n = planned;
    *end_t = wall;
    return c;
}

/* The recorded progress of the two whole-space sweeps on an H200: the answer does not swing by
 * more than 20 % from one line to the next once 5 % is done (issue 9's bound). How far it is
 * from the truth is printed, not bounded: on these sweeps a result's cost falls 3x over the
 * first half (the race gets a strong best) and rises again at the end (the least promising
 * configs, which the order puts last, are verified more often at small batch sizes). */
static void test_recorded_h200(void **state) {
    (void)state;
    const char *names[] = {"progress-h200-racing.txt", "progress-h200-halving.txt"};
    for (size_t i = 0; i < 2; i++) {
        size_t n = 0;
        double end_t = 0;
        commit_t *c = recorded(names[i], &n, &end_t);
        verdict_t v;
        play(c, n, end_t, true, &v);
        report(names[i], &v);
        printf("#   error from 20 %% done %.1f %%\n", 100 * v.worst_err_fifth);
        assert_true(v.lines > 30);
        assert_true(v.worst_swing <= 0.20);
        free(c);
    }
}

static void test_edges(void **state) {
    (void)state;
    cli_eta_t *e = NULL;
    double eta = 0;
    assert_int_equal(cli_eta_new(&e), MT_OK);
    cli_eta_sample_t s = {10, 0, 100, 0, 0, 0, 0};
    assert_int_equal(cli_eta_observe(e, &s, &eta), MT_OK);
    assert_true(eta < 0); /* nothing known yet */
    s.t_s = 20;
    s.done = 50;
    s.rate = 5;
    assert_int_equal(cli_eta_observe(e, &s, &eta), MT_OK);
    assert_true(eta > 0);
    s.t_s = 15; /* a clock that goes back: ignored */
    double kept = eta;
    assert_int_equal(cli_eta_observe(e, &s, &eta), MT_INVAL);
    assert_true(eta == kept);
    s.t_s = 30;
    s.done = 100;
    assert_int_equal(cli_eta_observe(e, &s, &eta), MT_OK);
    assert_true(eta == 0.0);
    cli_eta_destroy(&e);
    assert_null(e);
    /* one snapshot: the sweep's life so far, else the coordinator's rate */
    cli_eta_sample_t one = {0, 1000, 100, 25, 0, 900, 1.0};
    assert_true(fabs(cli_eta_once(&one) - 300.0) < 1e-9);
    one.created_s = 0;
    assert_true(fabs(cli_eta_once(&one) - 75.0) < 1e-9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_pattern),
        cmocka_unit_test(test_steady),
        cmocka_unit_test(test_startup),
        cmocka_unit_test(test_recorded_h200),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
