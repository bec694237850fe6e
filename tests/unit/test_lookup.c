/* test_lookup.c - config-file validation and the nearest-key rule of the lookup library. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lookup.h"

#define ENTRY(m)                                                                                                       \
    "{\"BLOCK_SIZE_M\": " #m ", \"BLOCK_SIZE_N\": 64, \"BLOCK_SIZE_K\": 128, "                                         \
    "\"GROUP_SIZE_M\": 1, \"num_warps\": 4, \"num_stages\": 3}"
/* Keys deliberately out of order: the loader sorts them. */
static const char k_file[] = "{\"64\": " ENTRY(64) ", \"1\": " ENTRY(16) ", \"2\": " ENTRY(32) ", \"16\": " ENTRY(
    128) ", \"4\": " ENTRY(256) "}";

static moetune_lookup_t *load_ok(void) {
    moetune_lookup_t *t = NULL;
    char err[256] = "";
    assert_int_equal(moetune_lookup_parse(k_file, strlen(k_file), &t, err, sizeof err), MOETUNE_LOOKUP_OK);
    assert_non_null(t);
    return t;
}

static uint32_t pick(const moetune_lookup_t *t, uint32_t m, int *block_m) {
    moetune_lookup_config_t c;
    uint32_t key = 0;
    assert_int_equal(moetune_lookup_get(t, m, &c, &key), MOETUNE_LOOKUP_OK);
    *block_m = c.block_m;
    return key;
}

static void test_exact(void **state) {
    moetune_lookup_t *t = load_ok();
    int bm;
    assert_int_equal(moetune_lookup_count(t), 5);
    assert_int_equal(moetune_lookup_key(t, 0), 1);
    assert_int_equal(moetune_lookup_key(t, 4), 64);
    assert_int_equal(pick(t, 1, &bm), 1);
    assert_int_equal(bm, 16);
    assert_int_equal(pick(t, 16, &bm), 16);
    assert_int_equal(bm, 128);
    moetune_lookup_config_t c;
    moetune_lookup_get(t, 2, &c, NULL);
    assert_int_equal(c.block_n, 64);
    assert_int_equal(c.block_k, 128);
    assert_int_equal(c.group_m, 1);
    assert_int_equal(c.num_warps, 4);
    assert_int_equal(c.num_stages, 3);
    moetune_lookup_free(&t);
    assert_null(t);
}

static void test_nearest(void **state) {
    moetune_lookup_t *t = load_ok();
    int bm;
    assert_int_equal(pick(t, 5000, &bm), 64); /* above every key */
    assert_int_equal(pick(t, 65, &bm), 64);
    assert_int_equal(pick(t, 5, &bm), 4);   /* between 4 and 16, nearer 4 */
    assert_int_equal(pick(t, 12, &bm), 16); /* nearer 16 */
    assert_int_equal(pick(t, 3, &bm), 2);   /* tie between 2 and 4: smaller key */
    assert_int_equal(pick(t, 10, &bm), 4);  /* tie between 4 and 16 */
    assert_int_equal(pick(t, 40, &bm), 16); /* tie between 16 and 64 */
    assert_int_equal(pick(t, 41, &bm), 64);
    moetune_lookup_free(&t);
}

static void expect_broken(const char *text, const char *reason_part) {
    moetune_lookup_t *t = NULL;
    char err[256] = "";
    assert_int_equal(moetune_lookup_parse(text, strlen(text), &t, err, sizeof err), MOETUNE_LOOKUP_EINVAL);
    assert_null(t);
    if (!strstr(err, reason_part)) fail_msg("reason '%s' lacks '%s'", err, reason_part);
}

/* A vLLM file: "triton_version" first, as vLLM's tuner writes it; not an entry. */
static void test_triton_version_key(void **state) {
    static const char text[] = "{\"triton_version\": \"3.6.0\", \"1\": " ENTRY(16) ", \"8\": " ENTRY(32) "}";
    moetune_lookup_t *t = NULL;
    char err[256] = "";
    int bm;
    assert_int_equal(moetune_lookup_parse(text, strlen(text), &t, err, sizeof err), MOETUNE_LOOKUP_OK);
    assert_int_equal(moetune_lookup_count(t), 2);
    assert_int_equal(pick(t, 7, &bm), 8);
    assert_int_equal(bm, 32);
    moetune_lookup_free(&t);
    static const char only[] = "{\"triton_version\": \"3.6.0\"}";
    assert_int_equal(moetune_lookup_parse(only, strlen(only), &t, err, sizeof err), MOETUNE_LOOKUP_EINVAL);
    assert_non_null(strstr(err, "no entries"));
    static const char bad[] = "{\"triton_version\": 3, \"1\": " ENTRY(16) "}";
    assert_int_equal(moetune_lookup_parse(bad, strlen(bad), &t, err, sizeof err), MOETUNE_LOOKUP_EINVAL);
    assert_null(t);
}

static void test_broken(void **state) {
    expect_broken("not json at all", "not valid JSON");
    expect_broken("[1, 2]", "not a JSON object");
    expect_broken("{}", "no entries");
    expect_broken("{\"abc\": " ENTRY(16) "}", "\"abc\" is not a positive integer");
    expect_broken("{\"0\": " ENTRY(16) "}", "\"0\" is not a positive integer");
    expect_broken("{\"-4\": " ENTRY(16) "}", "is not a positive integer");
    expect_broken("{\"1\": 5}", "not an object");
    expect_broken("{\"1\": {\"BLOCK_SIZE_M\": 16, \"BLOCK_SIZE_N\": 64, \"BLOCK_SIZE_K\": 128, "
                  "\"GROUP_SIZE_M\": 1, \"num_warps\": 4}}",
                  "lacks num_stages");
    expect_broken("{\"1\": {\"BLOCK_SIZE_M\": \"16\", \"BLOCK_SIZE_N\": 64, \"BLOCK_SIZE_K\": 128, "
                  "\"GROUP_SIZE_M\": 1, \"num_warps\": 4, \"num_stages\": 2}}",
                  "BLOCK_SIZE_M is not a valid integer");
    /* Two entries for one batch size, however the key is spelt: refused as a duplicate
     * (keys are canonical decimals, so "01" cannot be a second spelling of "1"). */
    expect_broken("{\"1\": " ENTRY(16) ", \"1\": " ENTRY(32) "}", "duplicate object key");
    expect_broken("{\"1\": " ENTRY(16) ", \"\\u0031\": " ENTRY(32) "}", "duplicate object key");
    expect_broken("{\"8\": " ENTRY(16) ", \"08\": " ENTRY(32) "}", "\"08\" is not a positive integer");
    /* A missing file is an I/O error with the path in the reason, not a crash. */
    moetune_lookup_t *t = NULL;
    char err[256] = "";
    assert_int_equal(moetune_lookup_load("/nonexistent/x.json", &t, err, sizeof err), MOETUNE_LOOKUP_EIO);
    assert_non_null(strstr(err, "/nonexistent/x.json"));
    moetune_lookup_free(&t); /* NULL-safe */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact),
        cmocka_unit_test(test_nearest),
        cmocka_unit_test(test_triton_version_key),
        cmocka_unit_test(test_broken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
