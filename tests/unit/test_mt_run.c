/* test_mt_run.c - mt_run_capture, the one way the CLI runs the helper's probe: stdout whole or
 * cut at the buffer, the last line of stderr, the exit status, a program that cannot run, and
 * a child that never answers killed at the deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mt.h"

static void test_stdout_tail_status(void **state) {
    (void)state;
    char out[64], tail[64], err[128];
    int status = 0;
    char *argv[] = {"sh", "-c", "echo one; echo two; echo first >&2; echo last >&2; exit 3", NULL};
    assert_int_equal(mt_run_capture(argv, 10000, out, sizeof out, tail, sizeof tail, &status, err, sizeof err), MT_OK);
    assert_string_equal(out, "one\ntwo\n");
    assert_string_equal(tail, "last");
    assert_int_equal(status, 3);
}

static void test_cut_at_buffer(void **state) {
    (void)state;
    char out[8], err[128];
    int status = -1;
    char *argv[] = {"sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x", NULL};
    assert_int_equal(mt_run_capture(argv, 10000, out, sizeof out, NULL, 0, &status, err, sizeof err), MT_OK);
    assert_string_equal(out, "xxxxxxx"); /* 7 bytes and the NUL; the rest read and dropped */
    assert_int_equal(status, 0);
}

static void test_cannot_run(void **state) {
    (void)state;
    char out[16], tail[128], err[128];
    int status = 0;
    char *argv[] = {"/nonexistent/moetune-python", "--probe", NULL};
    assert_int_equal(mt_run_capture(argv, 10000, out, sizeof out, tail, sizeof tail, &status, err, sizeof err), MT_OK);
    assert_int_equal(status, 127);
    assert_non_null(strstr(tail, "cannot run /nonexistent/moetune-python"));
}

static void test_timeout_kills(void **state) {
    (void)state;
    char out[16], err[128];
    int status = 0;
    char *argv[] = {"sh", "-c", "sleep 30", NULL};
    uint64_t t0 = mt_now_ms();
    assert_int_equal(mt_run_capture(argv, 300, out, sizeof out, NULL, 0, &status, err, sizeof err), MT_AGAIN);
    assert_true(mt_now_ms() - t0 < 5000);
    assert_string_equal(err, "sh did not answer within 0 s");
    assert_int_equal(status, 128 + 9); /* SIGKILL to its process group */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stdout_tail_status),
        cmocka_unit_test(test_cut_at_buffer),
        cmocka_unit_test(test_cannot_run),
        cmocka_unit_test(test_timeout_kills),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
