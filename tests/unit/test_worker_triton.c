/* test_worker_triton.c - the triton backend's C side, driven through the worker's
 * child (wrk_child_*) against tests/tools/fake_helper.py, a helper without torch
 * that misbehaves on request: answers that round-trip, a helper that dies part way
 * through a config, hangs, floods stdout, writes garbage or a wrong id, grows past
 * the memory limit, says fatal at start; and an interpreter that does not exist. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "child.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "wcase.h"

#define PYTHON "/usr/bin/python3"

static const uint32_t g_bs[3] = {1, 16, 256};
static char g_dir[256];
static char g_pids[300], g_hang[300];

static int setup(void **state) {
    (void)state;
    char helper[512];
    mt_fmt(g_dir, sizeof g_dir, "/tmp/mt-triton.XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    mt_fmt(g_pids, sizeof g_pids, "%s/pids", g_dir);
    mt_fmt(g_hang, sizeof g_hang, "%s/hang", g_dir);
    mt_fmt(helper, sizeof helper, "%s/tests/tools/fake_helper.py", MT_SOURCE_DIR);
    setenv("MOETUNE_HELPER", helper, 1);
    setenv("FAKE_HELPER_PIDS", g_pids, 1);
    setenv("FAKE_HELPER_HANG", g_hang, 1);
    unsetenv("FAKE_HELPER_BM");
    unlink(g_pids);
    unlink(g_hang);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_pids);
    unlink(g_hang);
    rmdir(g_dir);
    return 0;
}

/* The pids the fake helpers wrote, in start order; how many. */
static size_t read_pids(const char *path, pid_t *pids, size_t max) {
    FILE *f = fopen(path, "r");
    size_t n = 0;
    int p;
    if (!f) return 0;
    while (n < max && fscanf(f, "%d", &p) == 1) pids[n++] = (pid_t)p;
    fclose(f);
    return n;
}

/* True once pid is gone (not even a zombie of ours), waiting up to ms. */
static int gone_within(pid_t pid, int ms) {
    for (int i = 0; i < ms / 10; i++) {
        if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
        usleep(10000);
    }
    return 0;
}

static wrk_child_t *start(const char *mode, const char *python, uint32_t mem_mb) {
    wrk_backend_opts_t o;
    wrk_child_t *c = NULL;
    char err[256] = "";
    setenv("FAKE_HELPER_MODE", mode, 1);
    memset(&o, 0, sizeof o);
    o.python = python;
    o.kernel = "sglang";
    o.gpu_index = 3;
    o.helper_mem_mb = mem_mb;
    assert_int_equal(wrk_child_new(wrk_backend_find("triton"), &o, &c, err, sizeof err), MT_OK);
    return c;
}

static wrk_child_t *start_ready(const char *mode, uint32_t mem_mb) {
    char err[256] = "";
    wrk_child_t *c = start(mode, PYTHON, mem_mb);
    int rc = wrk_child_wait_ready(c, 30000, err, sizeof err);
    if (rc) fprintf(stderr, "open: %s\n", err);
    assert_int_equal(rc, MT_OK);
    return c;
}

/* The case every test measures: config 64x128x64x16x4x3, a 100 ms budget. */
static void setup_case(wcase_t *k) {
    wcase_init(k, (krn_config_t){64, 128, 64, 16, 4, 3});
    k->m.budget_ms = 100;
}

/* k measured at the first n of g_bs on c; wrk_child_measure's code. */
static int measure(wrk_child_t *c, wcase_t *k, size_t n) { return wcase_measure(c, k, g_bs, n); }

static void assert_ok_values(const wrk_meas_t *o, uint32_t bm, uint32_t bs) {
    double median = bm + bs / 2.0;
    assert_int_equal(o->status, MOETUNE__STATUS__STATUS_OK);
    assert_true(o->median_us == median);
    assert_true(o->min_us == median - 0.5);
    assert_true(o->mean_us == median + 0.25);
    assert_true(o->stddev_us == 0.125);
    assert_true(o->up_us == median / 2);
    assert_true(o->down_us == median / 4);
    assert_int_equal(o->samples, 20);
}

static void test_ok_round_trip(void **unused) {
    (void)unused;
    wcase_t k;
    setup_case(&k);
    k.regs = k.spills = 9;
    wrk_child_t *c = start_ready("ok", 0);
    const wrk_device_t *d = wrk_child_device(c);
    assert_string_equal(d->name, "Fake H200");
    assert_string_equal(d->uuid, "GPU-fake-3"); /* --gpu 3 reached the helper */
    assert_int_equal(d->cc_major, 9);
    assert_int_equal(d->sm_count, 132);
    assert_true(d->memory_bytes == 150754820096ull);
    assert_string_equal(d->driver_version, "580.159.04");
    assert_int_equal(d->smem_per_block, 232448);
    assert_string_equal(d->compiler, "triton_3_6_0");
    assert_string_equal(d->kernel_hash, "0123456789abcdef");
    assert_string_equal(d->versions, "kernel=sglang triton=3.6.0 torch=2.11.0 python=3.12.3");
    assert_int_equal(wrk_child_prepare(c, &k.s, &k.cfg, 1), MT_OK);
    for (int round = 0; round < 2; round++) {
        k.cfg.block_m = round ? 16 : 64;
        assert_int_equal(measure(c, &k, 3), MT_OK);
        for (int i = 0; i < 3; i++) assert_ok_values(&k.out[i], k.cfg.block_m, g_bs[i]);
        assert_int_equal(k.regs, 0);
    }
    assert_int_equal(wrk_child_spawns(c), 1);
    pid_t pids[8] = {0};
    assert_int_equal(read_pids(g_pids, pids, 8), 1);
    wrk_child_destroy(&c);
    assert_true(gone_within(pids[0], 3000)); /* quit: the helper exits with the child */
}

/* Lines in path (0 when there is no such file). */
static size_t count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    size_t n = 0;
    int ch;
    if (!f) return 0;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

/* A config whose shared memory cannot fit the helper's device (its hello: sm_90, 232448 B per
 * block) is invalid at once with the static rule's reason, never sent to the helper to compile;
 * the next config is measured as usual. */
static void test_static_rule_before_compile(void **unused) {
    (void)unused;
    char reqs[300];
    wcase_t k;
    mt_fmt(reqs, sizeof reqs, "%s/reqs", g_dir);
    unlink(reqs);
    setenv("FAKE_HELPER_REQS", reqs, 1);
    wcase_init(&k, (krn_config_t){256, 256, 256, 1, 4, 5});
    wrk_child_t *c = start_ready("ok", 0);
    krn_config_t both[2] = {k.cfg, {64, 128, 64, 16, 4, 3}};
    assert_int_equal(wrk_child_prepare(c, &k.s, both, 2), MT_OK);
    assert_int_equal(measure(c, &k, 3), MT_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(k.out[i].status, MOETUNE__STATUS__STATUS_INVALID);
        assert_string_equal(k.out[i].detail,
                            "Triton needs at least 1310720 B of shared memory > 232448 B per block on sm_90");
    }
    assert_int_equal(count_lines(reqs), 0);
    k.cfg = both[1];
    assert_int_equal(measure(c, &k, 3), MT_OK);
    for (int i = 0; i < 3; i++) assert_ok_values(&k.out[i], 64, g_bs[i]);
    assert_int_equal(count_lines(reqs), 1);
    wrk_child_destroy(&c);
    unsetenv("FAKE_HELPER_REQS");
    unlink(reqs);
}

/* Racing through the child and the helper: the best and the margins reach the helper, and a
 * pruned answer comes back with its measured statistics (the coordinator stores them), a settled
 * one as ok with its samples and detail. */
static void test_race_round_trip(void **unused) {
    (void)unused;
    wcase_t k;
    setup_case(&k);
    double best[3];
    for (int i = 0; i < 3; i++) best[i] = k.cfg.block_m + g_bs[i] / 2.0;
    best[1] /= 2; /* the config is 2x the best at the second batch size */
    k.m.best_us = best;
    k.m.race_margin = 0.2;
    wrk_child_t *c = start_ready("ok", 0);
    assert_int_equal(measure(c, &k, 3), MT_OK);
    assert_ok_values(&k.out[0], k.cfg.block_m, g_bs[0]);
    assert_ok_values(&k.out[2], k.cfg.block_m, g_bs[2]);
    assert_int_equal(k.out[1].status, MOETUNE__STATUS__STATUS_PRUNED);
    assert_true(k.out[1].median_us == k.cfg.block_m + g_bs[1] / 2.0);
    assert_int_equal(k.out[1].samples, 2);
    assert_string_equal(k.out[1].detail, "pruned: fake");
    /* settling: the margin reaches the helper too; 1.1x the best stays in the race, settled */
    best[1] = k.cfg.block_m + g_bs[1] / 2.0;
    best[2] /= 1.1;
    k.m.settle_margin = WRK_SETTLE_MARGIN;
    assert_int_equal(measure(c, &k, 3), MT_OK);
    assert_ok_values(&k.out[0], k.cfg.block_m, g_bs[0]);
    assert_ok_values(&k.out[1], k.cfg.block_m, g_bs[1]);
    assert_int_equal(k.out[2].status, MOETUNE__STATUS__STATUS_OK);
    assert_int_equal(k.out[2].samples, 5);
    assert_string_equal(k.out[2].detail, "rel_err=1.00e-03; settled: fake");
    k.m.race_margin = 0; /* off: nothing pruned, nothing settled */
    assert_int_equal(measure(c, &k, 3), MT_OK);
    for (int i = 0; i < 3; i++) assert_ok_values(&k.out[i], k.cfg.block_m, g_bs[i]);
    wrk_child_destroy(&c);
}

/* The closing log line: GPU busy from done's gpu_s, the start-up times, and the last done's
 * stats object (the helper's counts: what the benchmark's log shows of where time went). */
static void test_close_logs_stats(void **unused) {
    (void)unused;
    wcase_t k;
    char path[300], text[8192];
    setup_case(&k);
    mt_fmt(path, sizeof path, "%s/stderr", g_dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2); /* the child inherits it, and logs there */
    close(fd);
    mt_log_level_t level = mt_log_level;
    mt_log_level = MT_LOG_INFO;
    wrk_child_t *c = start_ready("ok", 0);
    for (int i = 0; i < 2; i++) assert_int_equal(measure(c, &k, 3), MT_OK);
    wrk_child_destroy(&c);
    mt_log_level = level;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    unlink(path);
    text[n] = '\0';
    assert_non_null(strstr(text, "triton helper: 2 configs;"));
    assert_non_null(strstr(text, "timed kernels 0.1 s of"));
    assert_non_null(strstr(text, "; hello after "));
    assert_non_null(strstr(text, ", first config done after "));
    assert_non_null(strstr(text, "triton helper stats: {\"split_margin\":0.1,\"verified\":2}"));
}

/* Runs two configs on a fake helper with FAKE_HELPER_PHASES=phases and the busy line every
 * every_ms ("" = the default, 30 s), then closes it; the child's log (stderr) in text. When
 * before is not NULL, the log as it stood before the close goes there. */
static void busy_run(const char *phases, const char *every_ms, char *before, char *text, size_t len) {
    wcase_t k;
    char path[300];
    setup_case(&k);
    mt_fmt(path, sizeof path, "%s/stderr", g_dir);
    setenv("FAKE_HELPER_PHASES", phases, 1);
    setenv("FAKE_HELPER_DONE_MS", "20", 1); /* the busy line's tick at a done is then due */
    if (every_ms[0])
        setenv("MOETUNE_TRITON_BUSY_LOG_MS", every_ms, 1);
    else
        unsetenv("MOETUNE_TRITON_BUSY_LOG_MS");
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    mt_log_level_t level = mt_log_level;
    mt_log_level = MT_LOG_INFO;
    wrk_child_t *c = start_ready("ok", 0);
    for (int i = 0; i < 2; i++) assert_int_equal(measure(c, &k, 3), MT_OK);
    for (int pass = 0; pass < 2; pass++) {
        char *dst = pass ? text : before;
        if (pass) wrk_child_destroy(&c);
        if (!dst) continue;
        fflush(stderr);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        size_t n = fread(dst, 1, len - 1, f);
        fclose(f);
        dst[n] = '\0';
    }
    mt_log_level = level;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unlink(path);
    unsetenv("FAKE_HELPER_PHASES");
    unsetenv("FAKE_HELPER_DONE_MS");
    unsetenv("MOETUNE_TRITON_BUSY_LOG_MS");
}

/* The busy breakdown: the helper's phases of every done summed and logged as shares of the
 * wall, at close always, and every interval while it runs (so a run killed before the close
 * still has it); the default interval logs none in a short run. */
static void test_busy_breakdown(void **unused) {
    (void)unused;
    char before[16384], text[16384];
    busy_run("ok", "", before, text, sizeof text);
    assert_null(strstr(before, "triton busy"));
    const char *close = strstr(text, "triton busy at close: wall 200 s, 2 configs: timed 60 %, samples 10 %, "
                                     "warm-up 0 %, capture 0 %, launch 0 %, compile wait 20 %, inputs 0 %, "
                                     "check layer 0 %, check 0 %, split 0 %, cleanup 0 %, idle 6 %, other 4 %, "
                                     "start 0 %, unreported 0 %");
    if (!close) fprintf(stderr, "log:\n%s\n", text);
    assert_non_null(close);
    /* every done past the interval: after each of the two configs */
    busy_run("ok", "1", before, text, sizeof text);
    const char *p = strstr(before, "triton busy: wall ");
    assert_non_null(p);
    assert_non_null(strstr(p + 1, "triton busy: wall 200 s, 2 configs: timed 60 %"));
    assert_null(strstr(before, "triton busy at close"));
}

/* A done whose phases are malformed is data: its phases are left out (one warning), the
 * measurements stand; a helper that sends none (an older one) gives a breakdown of what the C
 * side sees alone. */
static void test_busy_bad_phases(void **unused) {
    (void)unused;
    char text[16384];
    busy_run("bad", "", NULL, text, sizeof text);
    const char *w = strstr(text, "triton helper: phases of a done left out: timed is not a number >= 0");
    assert_non_null(w);
    assert_null(strstr(w + strlen("triton helper: phases"), "phases of a done left out"));
    assert_non_null(strstr(text, "triton busy at close: wall "));
    assert_non_null(strstr(text, " 2 configs: timed 0 %, samples 0 %"));
    busy_run("none", "", NULL, text, sizeof text);
    assert_null(strstr(text, "left out"));
    assert_non_null(strstr(text, " 2 configs: timed 0 %, samples 0 %"));
}

static void test_dies_mid_config(void **unused) {
    (void)unused;
    wcase_t k;
    setup_case(&k);
    setenv("FAKE_HELPER_BM", "64", 1);
    wrk_child_t *c = start_ready("die", 0);
    pid_t child1 = wrk_child_pid(c);
    assert_int_equal(measure(c, &k, 3), MT_OK);
    assert_ok_values(&k.out[0], 64, 1);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(k.out[i].status, MOETUNE__STATUS__STATUS_CRASHED);
        assert_string_equal(k.out[i].detail, "helper died: exit status 3: fake: dying on purpose");
    }
    /* a new child, and with it a new helper, measures the next config */
    assert_int_equal(wrk_child_spawns(c), 2);
    assert_int_not_equal(wrk_child_pid(c), child1);
    pid_t pids[8] = {0};
    assert_int_equal(read_pids(g_pids, pids, 8), 2);
    assert_int_not_equal(pids[0], pids[1]);
    assert_true(gone_within(pids[0], 3000));
    k.cfg.block_m = 16;
    assert_int_equal(measure(c, &k, 3), MT_OK);
    for (int i = 0; i < 3; i++) assert_ok_values(&k.out[i], 16, g_bs[i]);
    wrk_child_destroy(&c);
    unsetenv("FAKE_HELPER_BM");
}

static void test_hang_times_out(void **unused) {
    (void)unused;
    wcase_t k;
    setup_case(&k);
    k.m.timeout_ms = 1500;
    wrk_child_t *c = start_ready("hang", 0);
    uint64_t t0 = mt_now_ms();
    assert_int_equal(measure(c, &k, 3), MT_OK);
    uint64_t took = mt_now_ms() - t0;
    assert_true(took >= 1500);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(k.out[i].status, MOETUNE__STATUS__STATUS_TIMEOUT);
        assert_string_equal(k.out[i].detail, "timed out after 1500 ms");
    }
    /* the hung helper went with its child: no orphan */
    pid_t hung[1] = {0};
    assert_int_equal(read_pids(g_hang, hung, 1), 1);
    assert_true(gone_within(hung[0], 3000));
    assert_int_equal(wrk_child_spawns(c), 2);
    wrk_child_destroy(&c);
}

/* A helper that breaks the protocol: batch sizes before the break keep their
 * measurements (keep of them), the rest are crashed with the reason; the helper is killed and
 * a new one started. */
static void check_broken(const char *mode, uint32_t mem_mb, size_t keep, const char *detail_prefix) {
    wcase_t k;
    setup_case(&k);
    unlink(g_pids); /* the helpers of this call only */
    k.m.timeout_ms = 20000;
    wrk_child_t *c = start_ready(mode, mem_mb);
    assert_int_equal(measure(c, &k, 3), MT_OK);
    for (size_t i = 0; i < keep; i++) assert_ok_values(&k.out[i], 64, g_bs[i]);
    for (size_t i = keep; i < 3; i++) {
        assert_int_equal(k.out[i].status, MOETUNE__STATUS__STATUS_CRASHED);
        if (strncmp(k.out[i].detail, detail_prefix, strlen(detail_prefix)) != 0)
            fail_msg("%s: detail '%s', expected '%s...'", mode, k.out[i].detail, detail_prefix);
    }
    assert_int_equal(wrk_child_spawns(c), 2);
    pid_t pids[8] = {0};
    assert_int_equal(read_pids(g_pids, pids, 8), 2);
    assert_true(gone_within(pids[0], 3000)); /* killed, group and all */
    wrk_child_destroy(&c);
}

/* The fake helper's three ways to break the protocol: a reply line over 64 KiB, a line that
 * is no JSON object, a reply to another request. */
static void test_protocol_errors(void **unused) {
    (void)unused;
    check_broken("flood", 0, 0, "helper protocol error: a reply line longer than 64 KiB");
    check_broken("garbage", 0, 1, "helper protocol error: a reply that is not a JSON object: this is not json");
    check_broken("wrongid", 0, 1, "helper protocol error: a reply for another request (id 101, expected 1)");
}

static void test_memory_limit(void **unused) {
    (void)unused;
    check_broken("grow", 128, 0, "helper used ");
    /* the message names the limit */
    wcase_t k;
    setup_case(&k);
    unlink(g_pids);
    wrk_child_t *c = start_ready("grow", 128);
    assert_int_equal(measure(c, &k, 1), MT_OK);
    assert_int_equal(k.out[0].status, MOETUNE__STATUS__STATUS_CRASHED);
    assert_non_null(strstr(k.out[0].detail, " MiB, over the limit of 128 MiB"));
    unsigned used = 0;
    assert_int_equal(sscanf(k.out[0].detail, "helper used %u MiB", &used), 1);
    assert_true(used > 128);
    wrk_child_destroy(&c);
}

static void test_fatal_at_start(void **unused) {
    (void)unused;
    char err[256] = "";
    wrk_child_t *c = start("fatal", PYTHON, 0);
    assert_int_equal(wrk_child_wait_ready(c, 30000, err, sizeof err), MT_ERR);
    assert_string_equal(err, PYTHON " (" PYTHON "): torch is not importable: No module named 'torch'");
    assert_int_equal(wrk_child_state(c), WRK_CHILD_DEAD);
    wrk_child_destroy(&c);
    /* a name found on PATH is shown with where it was found */
    char *path = strdup(getenv("PATH") ? getenv("PATH") : "");
    assert_non_null(path);
    setenv("PATH", "/nonexistent:/usr/bin:/bin", 1);
    c = start("fatal", "python3", 0);
    assert_int_equal(wrk_child_wait_ready(c, 30000, err, sizeof err), MT_ERR);
    setenv("PATH", path, 1);
    free(path);
    assert_string_equal(err, "python3 (/usr/bin/python3): torch is not importable: No module named 'torch'");
    wrk_child_destroy(&c);
}

static void test_no_python(void **unused) {
    (void)unused;
    char err[256] = "";
    wrk_child_t *c = start("ok", "/nonexistent/python3", 0);
    assert_int_equal(wrk_child_wait_ready(c, 30000, err, sizeof err), MT_ERR);
    assert_string_equal(err, "cannot run python '/nonexistent/python3': No such file or directory");
    wrk_child_destroy(&c);
    c = start("ok", "no-such-python-here", 0);
    assert_int_equal(wrk_child_wait_ready(c, 30000, err, sizeof err), MT_ERR);
    assert_string_equal(err, "cannot run python 'no-such-python-here': No such file or directory");
    wrk_child_destroy(&c);
    assert_int_equal(read_pids(g_pids, (pid_t[1]){0}, 1), 0);
}

int main(void) {
    mt_log_init("test", MT_LOG_ERROR);
    if (access(PYTHON, X_OK) != 0) {
        fprintf(stderr, "%s not found: skipped\n", PYTHON);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ok_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_race_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_static_rule_before_compile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_logs_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_breakdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy_bad_phases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dies_mid_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hang_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_protocol_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fatal_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_python, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
