/* test_worker_child.c - the worker's child process with the sim backend: normal
 * measurements, a crashing config, a hanging config, open failures; and a backend that
 * loses its device part way through a config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "child.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "sim.h"
#include "wcase.h"

static const uint32_t g_bs[3] = {1, 64, 1024};

static wrk_child_t *start_child(const char *faults) {
    wrk_backend_opts_t o;
    wrk_child_t *c = NULL;
    char err[256] = "";
    memset(&o, 0, sizeof o);
    o.sim_faults = faults;
    assert_int_equal(wrk_child_new(wrk_backend_find("sim"), &o, &c, err, sizeof err), MT_OK);
    assert_non_null(c);
    assert_int_equal(wrk_child_wait_ready(c, 10000, err, sizeof err), MT_OK);
    assert_int_equal(wrk_child_state(c), WRK_CHILD_IDLE);
    assert_string_equal(wrk_child_device(c)->compiler, "sim");
    return c;
}

/* k measured at g_bs on ch; wrk_child_measure's code. */
static int measure(wrk_child_t *ch, wcase_t *k) { return wcase_measure(ch, k, g_bs, 3); }

static void assert_ok(const wrk_meas_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].status, MOETUNE__STATUS__STATUS_OK);
        assert_true(out[i].median_us > 0);
        assert_true(out[i].samples >= 5);
    }
}

static void test_normal(void **unused) {
    (void)unused;
    wcase_t k;
    wrk_meas_t direct[3];
    uint32_t dregs, dspills;
    wcase_init(&k, (krn_config_t){64, 128, 128, 16, 4, 3});
    k.spills = 9; /* regs 0 and spills 9: the measure sets both */
    wrk_child_t *ch = start_child(NULL);
    pid_t pid = wrk_child_pid(ch);
    assert_true(pid > 0 && pid != getpid());
    assert_int_equal(wrk_child_prepare(ch, &k.s, &k.cfg, 1), MT_OK);
    assert_int_equal(measure(ch, &k), MT_OK);
    assert_ok(k.out, 3);
    assert_true(k.regs > 0);
    assert_int_equal(k.spills, 0);
    /* The child returns exactly what the backend computes in-process. */
    wrk_backend_opts_t o;
    wrk_device_t dev;
    void *st = NULL;
    memset(&o, 0, sizeof o);
    assert_int_equal(wrk_backend_sim.open(&o, &st, &dev, k.err, sizeof k.err), MT_OK);
    assert_int_equal(
        wrk_backend_sim.measure(st, &k.s, &k.cfg, g_bs, 3, &k.m, direct, &dregs, &dspills, k.err, sizeof k.err), MT_OK);
    wrk_backend_sim.close(&st);
    for (int i = 0; i < 3; i++) {
        assert_true(k.out[i].median_us == direct[i].median_us);
        assert_int_equal(k.out[i].samples, direct[i].samples);
    }
    /* An invalid config is data, not a failure. */
    krn_config_t good = k.cfg;
    k.cfg = (krn_config_t){256, 256, 256, 1, 4, 5};
    assert_int_equal(measure(ch, &k), MT_OK);
    assert_int_equal(k.out[0].status, MOETUNE__STATUS__STATUS_INVALID);
    assert_int_equal(wrk_child_pid(ch), pid);
    assert_int_equal(wrk_child_spawns(ch), 1);
    /* Bad requests are refused without touching the child. */
    assert_int_equal(wrk_child_start(ch, &k.s, &good, g_bs, 0, &k.m), MT_INVAL);
    wrk_child_destroy(&ch);
    assert_null(ch);
    assert_int_equal(kill(pid, 0), -1); /* reaped */
}

static void test_crash(void **unused) {
    (void)unused;
    wcase_t k;
    wcase_init(&k, (krn_config_t){64, 128, 64, 1, 4, 3}); /* it crashes; 4 stages is fine */
    wrk_child_t *ch = start_child("crash=64x128x64x1x4x3");
    pid_t first = wrk_child_pid(ch);
    assert_int_equal(measure(ch, &k), MT_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(k.out[i].status, MOETUNE__STATUS__STATUS_CRASHED);
        assert_string_equal(k.out[i].detail, "child died: signal 11");
    }
    assert_int_equal(wrk_child_spawns(ch), 2);
    assert_true(wrk_child_pid(ch) != first);
    assert_int_equal(wrk_child_state(ch), WRK_CHILD_IDLE);
    k.cfg.num_stages = 4;
    assert_int_equal(measure(ch, &k), MT_OK);
    assert_ok(k.out, 3);
    wrk_child_destroy(&ch);
}

static void test_hang(void **unused) {
    (void)unused;
    wcase_t k;
    wcase_init(&k, (krn_config_t){32, 64, 128, 16, 4, 4}); /* it hangs; 3 stages is fine */
    k.m.timeout_ms = 300;
    wrk_child_t *ch = start_child("hang=32x64x128x16x4x4");
    pid_t first = wrk_child_pid(ch);
    uint64_t t0 = mt_now_ms();
    assert_int_equal(measure(ch, &k), MT_OK);
    uint64_t dt = mt_now_ms() - t0;
    assert_true(dt >= 300 && dt < 5000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(k.out[i].status, MOETUNE__STATUS__STATUS_TIMEOUT);
        assert_non_null(strstr(k.out[i].detail, "300 ms"));
    }
    assert_int_equal(kill(first, 0), -1); /* the stuck child is gone */
    assert_int_equal(wrk_child_spawns(ch), 2);
    k.cfg.num_stages = 3;
    assert_int_equal(measure(ch, &k), MT_OK);
    assert_ok(k.out, 3);
    wrk_child_destroy(&ch);
}

/* A backend that loses its device on configs with 9 stages: the first batch size is
 * measured, the second times out and takes the context with it, the third is not reached. */
static mt_status_t lost_open(const wrk_backend_opts_t *opts, void **state, wrk_device_t *dev, char *err,
                             size_t errlen) {
    (void)opts, (void)err, (void)errlen;
    memset(dev, 0, sizeof *dev);
    snprintf(dev->name, sizeof dev->name, "lossy");
    snprintf(dev->compiler, sizeof dev->compiler, "lossy");
    *state = NULL;
    return MT_OK;
}
static mt_status_t lost_measure(void *state, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                                size_t n_bs, const wrk_measure_t *m, wrk_meas_t *out, uint32_t *regs, uint32_t *spills,
                                char *err, size_t errlen) {
    (void)state, (void)shape, (void)bs, (void)m, (void)regs, (void)spills;
    for (size_t i = 0; i < n_bs; i++) {
        out[i].status = MOETUNE__STATUS__STATUS_OK;
        out[i].median_us = out[i].min_us = out[i].mean_us = 10.0 + (double)i;
        out[i].samples = 5;
    }
    if (cfg->num_stages != 9) return MT_OK;
    out[1].status = MOETUNE__STATUS__STATUS_TIMEOUT;
    snprintf(out[1].detail, sizeof out[1].detail, "kernel still running after the timeout");
    memset(&out[2], 0, sizeof out[2]);
    snprintf(err, errlen, "the context is lost: kernel still running after the timeout");
    return MT_ERR;
}
static void lost_close(void **state) { *state = NULL; }
static const wrk_backend_ops_t g_lossy = {"lossy", lost_open, NULL, lost_measure, lost_close};

static void test_backend_lost(void **unused) {
    (void)unused;
    wcase_t k;
    wcase_init(&k, (krn_config_t){64, 128, 64, 1, 4, 9}); /* 9 stages lose the device; 3 are fine */
    wrk_backend_opts_t o;
    memset(&o, 0, sizeof o);
    wrk_child_t *ch = NULL;
    assert_int_equal(wrk_child_new(&g_lossy, &o, &ch, k.err, sizeof k.err), MT_OK);
    assert_int_equal(wrk_child_wait_ready(ch, 10000, k.err, sizeof k.err), MT_OK);
    pid_t first = wrk_child_pid(ch);
    assert_int_equal(measure(ch, &k), MT_OK);
    /* what was measured before the loss stands; the lost batch size keeps its own status */
    assert_int_equal(k.out[0].status, MOETUNE__STATUS__STATUS_OK);
    assert_true(k.out[0].median_us == 10.0);
    assert_int_equal(k.out[1].status, MOETUNE__STATUS__STATUS_TIMEOUT);
    assert_string_equal(k.out[1].detail, "kernel still running after the timeout");
    assert_int_equal(k.out[2].status, MOETUNE__STATUS__STATUS_LAUNCH_ERROR);
    assert_non_null(strstr(k.out[2].detail, "the context is lost"));
    assert_int_equal(wrk_child_spawns(ch), 2);
    assert_true(wrk_child_pid(ch) != first);
    k.cfg.num_stages = 3;
    assert_int_equal(measure(ch, &k), MT_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(k.out[i].status, MOETUNE__STATUS__STATUS_OK);
    wrk_child_destroy(&ch);
}

static void test_open_fails(void **unused) {
    (void)unused;
    wrk_backend_opts_t o;
    wrk_child_t *c = NULL;
    char err[256] = "";
    memset(&o, 0, sizeof o);
    o.sim_faults = "crash=12"; /* not a config */
    assert_int_equal(wrk_child_new(wrk_backend_find("sim"), &o, &c, err, sizeof err), MT_OK);
    assert_int_equal(wrk_child_wait_ready(c, 10000, err, sizeof err), MT_ERR);
    assert_non_null(strstr(err, "crash=12"));
    assert_int_equal(wrk_child_state(c), WRK_CHILD_DEAD);
    assert_int_equal(wrk_child_fd(c), -1);
    wrk_child_destroy(&c);
}

static void test_slow_start_async(void **unused) {
    (void)unused;
    wrk_backend_opts_t o;
    wrk_child_t *c = NULL;
    wrk_child_event_t ev;
    char err[256] = "";
    memset(&o, 0, sizeof o);
    o.sim_faults = "slow_start_ms=200";
    assert_int_equal(wrk_child_new(wrk_backend_find("sim"), &o, &c, err, sizeof err), MT_OK);
    /* Polling without waiting never blocks while the backend opens. */
    assert_int_equal(wrk_child_poll(c, 0, &ev), MT_OK);
    assert_int_equal(ev, WRK_CHILD_EV_NONE);
    assert_int_equal(wrk_child_state(c), WRK_CHILD_STARTING);
    assert_int_equal(wrk_child_wait_ready(c, 20, err, sizeof err), MT_AGAIN);
    assert_int_equal(wrk_child_wait_ready(c, 10000, err, sizeof err), MT_OK);
    /* Killed while idle: the handle reports the death, and a restart recovers. */
    kill(wrk_child_pid(c), SIGKILL);
    ev = WRK_CHILD_EV_NONE;
    for (int i = 0; i < 100 && ev == WRK_CHILD_EV_NONE; i++) assert_int_equal(wrk_child_poll(c, 50, &ev), MT_OK);
    assert_int_equal(ev, WRK_CHILD_EV_DIED);
    assert_string_equal(wrk_child_error(c), "child died: signal 9");
    assert_int_equal(wrk_child_restart(c, err, sizeof err), MT_OK);
    assert_int_equal(wrk_child_wait_ready(c, 10000, err, sizeof err), MT_OK);
    wrk_child_destroy(&c);
}

int main(void) {
    mt_log_init("test", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normal),
        cmocka_unit_test(test_crash),
        cmocka_unit_test(test_hang),
        cmocka_unit_test(test_open_fails),
        cmocka_unit_test(test_slow_start_async),
        cmocka_unit_test(test_backend_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
