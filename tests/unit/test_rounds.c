/* test_rounds.c - a side-by-side job's rounds (worker/rounds.c): the fastest round gives the
 * median, the samples pool, a failure in any round is the config's status, and a config
 * with nothing left OK needs no more rounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "moetune.pb-c.h"
#include "rounds.h"

#define OK MOETUNE__STATUS__STATUS_OK

static wrk_meas_t ok(double median, double mean, double sd, uint32_t n, double min, const char *detail) {
    wrk_meas_t m;
    memset(&m, 0, sizeof m);
    m.status = OK;
    m.median_us = median;
    m.mean_us = mean;
    m.stddev_us = sd;
    m.samples = n;
    m.min_us = min;
    m.timed_us = mean * n;
    m.up_us = median / 2;
    m.down_us = median / 3;
    strcpy(m.detail, detail);
    return m;
}

/* Two OK rounds: the lower median with its up/down/detail; samples, timed, mean, sd and min
 * pooled over both rounds' samples. Rounds {5,6,7} then {1,2,3}: mean 4, sd sqrt(28 / 5). */
static void test_two_ok_rounds(void **state) {
    (void)state;
    wrk_meas_t kept[2], r1[2] = {ok(6, 6, 1, 3, 5, "slow"), ok(10, 10, 0, 1, 10, "a")},
                        r2[2] = {ok(2, 2, 1, 3, 1, "fast"), ok(12, 12, 0, 1, 12, "b")};
    wrk_rounds_merge(kept, r1, 2, true);
    assert_memory_equal(&kept[0], &r1[0], sizeof kept[0]);
    wrk_rounds_merge(kept, r2, 2, false);
    assert_int_equal(kept[0].status, OK);
    assert_true(kept[0].median_us == 2);
    assert_true(kept[0].up_us == 1 && fabs(kept[0].down_us - 2.0 / 3) < 1e-12);
    assert_string_equal(kept[0].detail, "fast");
    assert_int_equal(kept[0].samples, 6);
    assert_true(fabs(kept[0].mean_us - 4) < 1e-12);
    assert_true(fabs(kept[0].stddev_us - sqrt(28.0 / 5)) < 1e-12);
    assert_true(kept[0].min_us == 1);
    assert_true(fabs(kept[0].timed_us - 24) < 1e-12);
    /* the second batch size's first round stays the faster */
    assert_true(kept[1].median_us == 10);
    assert_string_equal(kept[1].detail, "a");
    assert_int_equal(kept[1].samples, 2);
    assert_true(fabs(kept[1].mean_us - 11) < 1e-12);
    assert_true(fabs(kept[1].stddev_us - sqrt(2.0)) < 1e-12);
    assert_false(wrk_rounds_settled(kept, 2));
}

/* A round that fails makes the config failed at that batch size, and a later OK round does
 * not undo it; the GPU time of every round is counted. */
static void test_failure_dominates(void **state) {
    (void)state;
    wrk_meas_t kept[2], r1[2] = {ok(5, 5, 0, 2, 5, ""), ok(5, 5, 0, 2, 5, "")}, r2[2], r3[2];
    memset(r2, 0, sizeof r2);
    r2[0] = ok(4, 4, 0, 2, 4, "");
    r2[1].status = MOETUNE__STATUS__STATUS_WRONG_RESULT;
    r2[1].timed_us = 7;
    strcpy(r2[1].detail, "relative error 0.5");
    r3[0] = ok(3, 3, 0, 2, 3, "");
    r3[1] = ok(1, 1, 0, 2, 1, "");
    wrk_rounds_merge(kept, r1, 2, true);
    wrk_rounds_merge(kept, r2, 2, false);
    wrk_rounds_merge(kept, r3, 2, false);
    assert_int_equal(kept[0].status, OK);
    assert_true(kept[0].median_us == 3);
    assert_int_equal(kept[1].status, MOETUNE__STATUS__STATUS_WRONG_RESULT);
    assert_string_equal(kept[1].detail, "relative error 0.5");
    assert_true(fabs(kept[1].timed_us - (10 + 7 + 2)) < 1e-12);
    assert_false(wrk_rounds_settled(kept, 2));
}

/* Settled once no batch size is OK: a crash at every batch size, or invalid. */
static void test_settled(void **state) {
    (void)state;
    wrk_meas_t kept[3], r[3];
    for (int i = 0; i < 3; i++) r[i] = ok(1, 1, 0, 1, 1, "");
    wrk_rounds_merge(kept, r, 3, true);
    assert_false(wrk_rounds_settled(kept, 3));
    wrk_meas_t crash[3];
    memset(crash, 0, sizeof crash);
    for (int i = 0; i < 3; i++) crash[i].status = MOETUNE__STATUS__STATUS_CRASHED;
    crash[2].status = OK;
    crash[2] = ok(1, 1, 0, 1, 1, "");
    wrk_rounds_merge(kept, crash, 3, false);
    assert_false(wrk_rounds_settled(kept, 3)); /* batch size 3 is still OK */
    crash[2].status = MOETUNE__STATUS__STATUS_TIMEOUT;
    wrk_rounds_merge(kept, crash, 3, false);
    assert_true(wrk_rounds_settled(kept, 3));
    assert_true(wrk_rounds_settled(kept, 0));
}

/* Each round's median appended to an OK row's detail in the order measured, after what it
 * held ("; rounds ..."), alone when it held nothing, 5 significant digits; cut short, still
 * terminated, where the detail is full; a row not OK is left as it was. */
static void test_note(void **state) {
    (void)state;
    double us[3] = {2449.21, 2471.04, 130.456};
    wrk_meas_t m = ok(2449.2, 2460, 10, 30, 2434, "rel_err=2.94e-03");
    wrk_rounds_note(&m, us, 3);
    assert_string_equal(m.detail, "rel_err=2.94e-03; rounds 2449.2 2471 130.46");
    m = ok(1, 1, 0, 1, 1, "");
    wrk_rounds_note(&m, us, 2);
    assert_string_equal(m.detail, "rounds 2449.2 2471");
    char full[sizeof m.detail];
    memset(full, 'x', sizeof full - 5);
    full[sizeof full - 5] = 0;
    m = ok(1, 1, 0, 1, 1, full);
    wrk_rounds_note(&m, us, 3);
    assert_int_equal(strlen(m.detail), sizeof m.detail - 1);
    assert_memory_equal(m.detail, full, strlen(full));
    assert_memory_equal(m.detail + strlen(full), "; r", 4 - 1);
    wrk_meas_t bad;
    memset(&bad, 0, sizeof bad);
    bad.status = MOETUNE__STATUS__STATUS_WRONG_RESULT;
    strcpy(bad.detail, "relative error 0.5");
    wrk_rounds_note(&bad, us, 3);
    assert_string_equal(bad.detail, "relative error 0.5");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ok_rounds),
        cmocka_unit_test(test_failure_dominates),
        cmocka_unit_test(test_settled),
        cmocka_unit_test(test_note),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
