/* test_progress.c - the progress line and its JSON (cli/progress.h) for a halving sweep:
 * a phase-2 row replaces its phase-1 row, so the results reach their plan when phase 1
 * ends; the line must then say phase 2 and its finalists, never 100 % nor an ETA of 0
 * before the sweep is done. An exhaustive sweep's line is as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "moetune.pb-c.h"
#include "mt.h"
#include "progress.h"

/* A halving sweep of 480 phase-1 results, 30 finalists expected. */
static Moetune__SweepStatus halving(const char *state, uint32_t phase, uint64_t done, uint64_t fin_planned,
                                    uint64_t fin_done) {
    Moetune__SweepStatus st = MOETUNE__SWEEP_STATUS__INIT;
    st.sweep_id = 7;
    st.state = (char *)state;
    st.results_planned = 480;
    st.results_done = done;
    st.jobs_total = 10;
    st.phase = phase;
    st.finalists_planned = fin_planned;
    st.finalists_done = fin_done;
    st.finalists_expected = phase == 1 ? 30 : fin_planned;
    return st;
}

/* The line of st with 2 workers and eta_s seconds left. */
static const char *line_of(const Moetune__SweepStatus *st, double eta_s) {
    static char line[400];
    cli_progress_format(st, 2, eta_s, line, sizeof line);
    return line;
}

static double json_num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    assert_non_null(v);
    return json_number_value(v);
}

static void test_phase1(void **state) {
    (void)state;
    Moetune__SweepStatus st = halving("running", 1, 240, 0, 0);
    assert_non_null(strstr(line_of(&st, 60.0), "sweep 7 running: phase 1: 240/480 results ("));
    assert_null(strstr(line_of(&st, 60.0), "finalists"));
    assert_true(cli_progress_percent(&st) > 47.0 && cli_progress_percent(&st) < 47.1); /* 240 / 510 */
    /* the last phase-1 result is in, the transition not committed: not 100 %, not done */
    st = halving("running", 1, 480, 0, 0);
    assert_non_null(strstr(line_of(&st, 5.0), "phase 1: 480/480 results (94.1%), 0/s, ETA 5s"));
    assert_false(cli_progress_complete(&st));
}

static void test_phase2(void **state) {
    (void)state;
    Moetune__SweepStatus st = halving("running", 2, 480, 30, 12);
    assert_non_null(
        strstr(line_of(&st, 30.0), "sweep 7 running: phase 2: 12/30 finalists, 480/480 results (96.5%), 0/s, ETA 30s"));
    uint64_t planned, done;
    cli_progress_work(&st, &planned, &done);
    assert_int_equal(planned, 510);
    assert_int_equal(done, 492);
    json_t *o = json_object();
    cli_progress_json_phase(o, &st);
    assert_int_equal((int)json_num(o, "phase"), 2);
    assert_int_equal((int)json_num(o, "finalists_planned"), 30);
    assert_int_equal((int)json_num(o, "finalists_done"), 12);
    assert_true(json_num(o, "percent") > 96.4 && json_num(o, "percent") < 96.6);
    json_t *eta = cli_progress_eta_json(&st, 30.0);
    assert_int_equal(json_integer_value(eta), 30);
    json_decref(eta);
    json_decref(o);
    /* every finalist in, the sweep not yet marked done: still under 100 % */
    st = halving("running", 2, 480, 30, 30);
    assert_true(cli_progress_percent(&st) < 100.0);
    st = halving("done", 2, 480, 30, 30);
    assert_non_null(
        strstr(line_of(&st, -1.0), "sweep 7 done: phase 2: 30/30 finalists, 480/480 results (100.0%), 0/s, ETA 0s"));
    /* done with a count short (a finalist that failed to store, an old database): nothing is
     * left, ETA 0; a cancelled or failed sweep has none to show */
    st = halving("done", 2, 480, 30, 27);
    assert_non_null(strstr(line_of(&st, 4.0), ", ETA 0s,"));
    json_t *zero = cli_progress_eta_json(&st, 4.0);
    assert_int_equal(json_integer_value(zero), 0);
    json_decref(zero);
    char eta_text[32];
    cli_progress_eta_text(&st, 4.0, eta_text, sizeof eta_text); /* as `status` shows it */
    assert_string_equal(eta_text, "0s");
    st = halving("cancelled", 2, 480, 30, 27);
    assert_non_null(strstr(line_of(&st, 4.0), ", ETA --,"));
    cli_progress_eta_text(&st, 4.0, eta_text, sizeof eta_text);
    assert_string_equal(eta_text, "--");
    json_t *none = cli_progress_eta_json(&st, 4.0);
    assert_true(json_is_null(none));
    json_decref(none);
    st = halving("running", 2, 480, 30, 27);
    cli_progress_eta_text(&st, 4.0, eta_text, sizeof eta_text);
    assert_string_equal(eta_text, "4s");
}

/* Phase 1 of one shape is over while another's runs: both counts show. */
static void test_mixed(void **state) {
    (void)state;
    Moetune__SweepStatus st = halving("running", 1, 400, 15, 3);
    char buf[200];
    cli_progress_counts(&st, buf, sizeof buf);
    assert_string_equal(buf, "phase 1: 400/480 results, phase 2: 3/15 finalists");
}

static void test_exhaustive(void **state) {
    (void)state;
    Moetune__SweepStatus st = MOETUNE__SWEEP_STATUS__INIT;
    st.sweep_id = 3;
    st.state = "running";
    st.results_planned = 200;
    st.results_done = 50;
    assert_non_null(strstr(line_of(&st, -1.0), "sweep 3 running: 50/200 results (25.0%), 0/s, ETA --"));
    json_t *o = json_object();
    cli_progress_json_phase(o, &st);
    assert_null(json_object_get(o, "phase"));
    assert_true(json_num(o, "percent") == 25.0);
    json_decref(o);
    st.results_done = 200;
    assert_true(cli_progress_complete(&st));
}

/* A racing sweep's decide step: its finalist rows are measured in 5 rounds each, so the ETA's
 * snapshot counts each 5 times (a halving finalist once), while the line counts rows. */
static void test_decide_rounds(void **state) {
    (void)state;
    Moetune__SweepStatus st = halving("running", 2, 480, 10, 2);
    cli_eta_sample_t s;
    cli_progress_sample(&st, 1.0, 100.0, &s);
    assert_int_equal(s.planned, 490);
    assert_int_equal(s.done, 482);
    st.finalist_rounds = 5;
    cli_progress_sample(&st, 1.0, 100.0, &s);
    assert_int_equal(s.planned, 480 + 5 * 10);
    assert_int_equal(s.done, 480 + 5 * 2);
    assert_non_null(strstr(line_of(&st, 20.0), "phase 2: 2/10 finalists, 480/480 results (98.4%)"));
    /* phase 1 over, the step not yet planned: the foreseen finalists keep it from 0 */
    st = halving("running", 1, 480, 0, 0);
    st.finalists_expected = 12;
    st.finalist_rounds = 5;
    st.created_s = 52; /* 48 s of life for 480 results: 0.1 s each */
    cli_progress_sample(&st, 1.0, 100.0, &s);
    assert_int_equal(s.planned, 480 + 5 * 12);
    assert_int_equal(s.done, 480);
    assert_false(cli_progress_complete(&st));
    assert_true(cli_eta_once(&s) > 5.99 && cli_eta_once(&s) < 6.01); /* 60 rows left at 0.1 s */
}

int main(void) {
    mt_log_init("test_progress", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_phase1),     cmocka_unit_test(test_phase2),        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_exhaustive), cmocka_unit_test(test_decide_rounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
