/* test_mt_files.c - the file-input helpers every user-named file goes through: a FIFO, a
 * directory or a missing file is answered at once, a file over the limit is refused, one
 * of exactly the limit is read whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mt.h"
#include "tmpdb.h"

static void test_read_regular(void **state) {
    tmpdb_t *t = *state;
    char path[200], fifo[200], err[300], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/f.txt", t->dir);
    snprintf(fifo, sizeof fifo, "%s/p.fifo", t->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("0123456789", f);
    fclose(f);
    assert_int_equal(mkfifo(fifo, 0600), 0);

    assert_int_equal(mt_read_regular(path, 10, &buf, &len, err, sizeof err), MT_OK);
    assert_int_equal(len, 10);
    assert_string_equal(buf, "0123456789");
    free(buf);
    assert_int_equal(mt_read_regular(path, 9, &buf, &len, err, sizeof err), MT_INVAL);
    assert_null(buf);
    assert_non_null(strstr(err, "larger than 9 bytes"));

    /* a FIFO with no writer: answered at once, not read */
    assert_int_equal(mt_read_regular(fifo, 10, &buf, &len, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "not a regular file (a FIFO)"));
    int fd = -1;
    assert_int_equal(mt_open_regular(t->dir, &fd, err, sizeof err), MT_INVAL);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(err, "a directory"));
    assert_int_equal(mt_open_regular("/nonexistent/x", &fd, err, sizeof err), MT_NOTFOUND);
    FILE *s = NULL;
    assert_int_equal(mt_fopen_regular(fifo, &s, err, sizeof err), MT_INVAL);
    assert_null(s);
    assert_int_equal(mt_fopen_regular(path, &s, err, sizeof err), MT_OK);
    fclose(s);

    assert_int_equal(mt_check_regular(fifo, true, err, sizeof err), MT_INVAL);
    assert_int_equal(mt_check_regular("/nonexistent/x", true, err, sizeof err), MT_OK);
    assert_int_equal(mt_check_regular("/nonexistent/x", false, err, sizeof err), MT_NOTFOUND);
    assert_int_equal(mt_check_regular(path, false, err, sizeof err), MT_OK);
    unlink(path);
    unlink(fifo);
}

static void test_u32_problem(void **state) {
    (void)state;
    char why[64];
    assert_string_equal(mt_u32_problem("2147483648", 1, 1048576, why, sizeof why), "out of range (1..1048576)");
    assert_string_equal(mt_u32_problem("0", 1, 1048576, why, sizeof why), "out of range (1..1048576)");
    assert_string_equal(mt_u32_problem("4k", 1, 1048576, why, sizeof why), "not a positive integer");
    assert_string_equal(mt_u32_problem("-1", 0, 9, why, sizeof why), "not a whole number");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_read_regular, tmpdb_setup, tmpdb_teardown,
                                                 &(tmpdb_t){.tag = "test_mt_files"}),
        cmocka_unit_test(test_u32_problem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
