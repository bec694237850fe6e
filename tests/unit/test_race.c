/* test_race.c - the racing table (coordinator/race.c): each key's best, whatever order the
 * lookups come in (a hashed index over the entries), and what a finished sweep leaves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "race.h"

enum { SHAPES = 33, SIZES = 18 };

static double best_of(uint64_t sweep, uint64_t shape, uint32_t bs) {
    return 1000.0 * (double)sweep + 10.0 * (double)shape + (double)bs / 32.0;
}

/* Two sweeps' shapes x batch sizes, noted a shape at a time (as a Result's measurements come),
 * a slower median after each best (kept out); then looked up forwards, backwards and by a
 * stride: every key's best, 0 for unknown keys. */
static void test_every_order(void **state) {
    (void)state;
    static const uint32_t bs[SIZES] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096};
    race_t *r = race_new();
    assert_non_null(r);
    for (uint64_t sw = 1; sw <= 2; sw++)
        for (uint64_t sh = 1; sh <= SHAPES; sh++)
            for (size_t b = 0; b < SIZES; b++) {
                assert_int_equal(race_note(r, sw, sh, bs[b], best_of(sw, sh, bs[b]) + 5.0), MT_OK);
                assert_int_equal(race_note(r, sw, sh, bs[b], best_of(sw, sh, bs[b])), MT_OK);
                assert_int_equal(race_note(r, sw, sh, bs[b], best_of(sw, sh, bs[b]) + 1.0), MT_OK);
            }
    assert_int_equal(race_size(r), 2 * SHAPES * SIZES);
    size_t n = 2 * SHAPES * SIZES;
    for (int pass = 0; pass < 3; pass++) {
        for (size_t k = 0; k < n; k++) {
            size_t i = pass == 0 ? k : pass == 1 ? n - 1 - k : (k * 97) % n; /* 97 and n coprime */
            uint64_t sw = 1 + i / (SHAPES * SIZES), sh = 1 + (i / SIZES) % SHAPES;
            uint32_t b = bs[i % SIZES];
            assert_float_equal(race_best(r, sw, sh, b), best_of(sw, sh, b), 1e-9);
        }
        assert_float_equal(race_best(r, 3, 1, 1), 0.0, 0.0);
        assert_float_equal(race_best(r, 1, SHAPES + 1, 1), 0.0, 0.0);
        assert_float_equal(race_best(r, 1, 1, 3), 0.0, 0.0);
    }
    assert_float_equal(race_shape_top(r, 2, 7), best_of(2, 7, 4096), 1e-9);
    /* the first sweep ends: its keys go, the second's stay (the index rebuilt over the moved entries) */
    race_forget(r, 1);
    assert_int_equal(race_size(r), SHAPES * SIZES);
    assert_float_equal(race_best(r, 1, 5, 64), 0.0, 0.0);
    for (uint64_t sh = SHAPES; sh >= 1; sh--)
        assert_float_equal(race_best(r, 2, sh, 1), best_of(2, sh, 1), 1e-9);
    race_forget(r, 2);
    assert_int_equal(race_size(r), 0);
    assert_float_equal(race_best(r, 2, 1, 1), 0.0, 0.0);
    /* an emptied table takes keys again */
    assert_int_equal(race_note(r, 3, 1, 64, 7.0), MT_OK);
    assert_int_equal(race_note(r, 3, 1, 64, 8.0), MT_OK);
    assert_float_equal(race_best(r, 3, 1, 64), 7.0, 0.0);
    assert_int_equal(race_size(r), 1);
    race_forget(r, 3);
    /* no median (a failed row) is never a best */
    assert_int_equal(race_note(r, 4, 1, 1, 0.0), MT_OK);
    assert_int_equal(race_size(r), 0);
    race_free(&r);
    assert_null(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
