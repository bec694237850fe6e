/* test_routing.c - captured routing .npy files: valid ones, hostile ones (wrong dtype, truncated,
 * huge header, ids out of range) and a fuzz of mutated files; the rows each batch size draws. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mt.h"
#include "routing.h"

/* A .npy image as NumPy writes it: magic, version, header padded so data starts at 64n. */
static size_t npy(uint8_t *buf, size_t cap, int version, const char *header, const void *data, size_t dlen) {
    size_t pre = version == 1 ? 10 : 12, hl = strlen(header);
    size_t pad = 64 - (pre + hl + 1) % 64;
    size_t hlen = hl + pad + 1;
    assert_true(pre + hlen + dlen <= cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)version;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + pre, header, hl);
    memset(buf + pre + hl, ' ', pad);
    buf[pre + hlen - 1] = '\n';
    memcpy(buf + pre + hlen, data, dlen);
    return pre + hlen + dlen;
}

static const int32_t k_ids32[8] = {0, 1, 2, 3, 7, 6, 5, 4};

static void test_valid(void **state) {
    uint8_t buf[512];
    krn_routing_t r;
    char err[256] = "";
    size_t n =
        npy(buf, sizeof buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2), }", k_ids32, sizeof k_ids32);
    assert_int_equal(krn_routing_parse(buf, n, &r, err, sizeof err), MT_OK);
    assert_int_equal(r.tokens, 4);
    assert_int_equal(r.topk, 2);
    assert_int_equal(r.max_id, 7);
    for (int i = 0; i < 8; i++) assert_int_equal(r.ids[i], k_ids32[i]);
    assert_int_equal(strlen(r.sha256), 64);
    assert_true(krn_routing_hash_ok(r.sha256));
    assert_int_equal(krn_routing_check(&r, 8, 2, err, sizeof err), MT_OK);
    assert_int_equal(krn_routing_check(&r, 7, 2, err, sizeof err), MT_INVAL);
    assert_string_equal(err, "expert id 7 is out of range 0..6 (E=7)");
    assert_int_equal(krn_routing_check(&r, 8, 4, err, sizeof err), MT_INVAL);
    assert_string_equal(err, "2 experts per token, the shape has topk=4");
    char first[65];
    snprintf(first, sizeof first, "%s", r.sha256);
    krn_routing_clear(&r);
    assert_null(r.ids);
    /* int64, version 2, the same ids: another file, another hash. */
    int64_t ids64[8];
    for (int i = 0; i < 8; i++) ids64[i] = k_ids32[i];
    n = npy(buf, sizeof buf, 2, "{'descr': '<i8', 'fortran_order': False, 'shape': (4, 2), }", ids64, sizeof ids64);
    assert_int_equal(krn_routing_parse(buf, n, &r, err, sizeof err), MT_OK);
    assert_int_equal(r.ids[4], 7);
    assert_string_not_equal(r.sha256, first);
    krn_routing_clear(&r);
    assert_true(krn_routing_hash_ok(""));
    assert_false(krn_routing_hash_ok("abc"));
    assert_false(krn_routing_hash_ok("G000000000000000000000000000000000000000000000000000000000000000"));
}

static void bad(const uint8_t *buf, size_t n, const char *why) {
    krn_routing_t r;
    char err[256] = "";
    int rc = krn_routing_parse(buf, n, &r, err, sizeof err);
    if (rc != MT_INVAL || !strstr(err, why)) fail_msg("rc %d, err '%s', expected '%s'", rc, err, why);
    assert_null(r.ids);
}

static void test_hostile(void **state) {
    uint8_t buf[512];
    size_t n;
    bad((const uint8_t *)"PK\x03\x04 a zip", 12, "no \\x93NUMPY magic");
    bad((const uint8_t *)"\x93NUMPY", 6, "no \\x93NUMPY magic");
    /* Headers that are no routing table, each followed by data_len bytes of ids. */
    static const struct {
        const char *header;
        size_t data_len;
        const char *why;
    } headers[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", 32, "expert ids must be int32 or int64"},
        {"{'descr': '>i4', 'fortran_order': False, 'shape': (4, 2), }", 32, "expert ids must be int32 or int64"},
        {"{'descr': '<i4', 'fortran_order': True, 'shape': (4, 2), }", 32, "fortran_order"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (8,), }", 32, "shape is not [tokens, topk]"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2, 2), }", 32, "shape is not [tokens, topk]"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (0, 2), }", 0, "shape is not [tokens, topk]"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999, 2), }", 32, "shape is not [tokens, topk]"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (4000000000, 4000), }", 32, "needs"},
    };
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        n = npy(buf, sizeof buf, 1, headers[i].header, k_ids32, headers[i].data_len);
        bad(buf, n, headers[i].why);
    }
    /* Truncated data, extra data. */
    n = npy(buf, sizeof buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2), }", k_ids32, 32);
    bad(buf, n - 12, "data is 20 bytes, [4, 2] int32 needs 32");
    n = npy(buf, sizeof buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }", k_ids32, 32);
    bad(buf, n, "data is 32 bytes, [3, 2] int32 needs 24");
    /* Cut inside the header; a header length past the file; a huge header length (v2, 2 GiB). */
    n = npy(buf, sizeof buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2), }", k_ids32, 32);
    bad(buf, 40, "truncated or too large");
    uint8_t huge[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0x7f, '{', '}', ' ', '\n'};
    bad(huge, sizeof huge, "truncated or too large");
    huge[6] = 9;
    bad(huge, sizeof huge, "version 9");
    /* A NUL inside the header. */
    n = npy(buf, sizeof buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2), }", k_ids32, 32);
    buf[20] = 0;
    bad(buf, n, "not a dict");
    /* Negative and out-of-range ids. */
    int32_t neg[8] = {0, 1, 2, -3, 4, 5, 6, 7};
    n = npy(buf, sizeof buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2), }", neg, 32);
    bad(buf, n, "expert id -3 at row 1 is out of range 0..65535");
    int64_t big[2] = {1, 70000};
    n = npy(buf, sizeof buf, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }", big, 16);
    bad(buf, n, "expert id 70000 at row 0 is out of range 0..65535");
}

/* Every truncation and thousands of random byte mutations of a valid file: each parses or is
 * refused with a reason; none reads past the buffer (the ASan build checks that). */
static void test_fuzz(void **state) {
    uint8_t good[512], *m = malloc(512);
    size_t n = npy(good, sizeof good, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2), }", k_ids32, 32);
    uint64_t seed = 0x1234;
    size_t ok = 0, refused = 0;
    for (size_t len = 0; len <= n; len++) {
        krn_routing_t r;
        char err[256] = "";
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, good, len);
        int rc = krn_routing_parse(copy, len, &r, err, sizeof err);
        assert_true(rc == MT_OK || (rc == MT_INVAL && err[0]));
        rc == MT_OK ? ok++ : refused++;
        krn_routing_clear(&r);
        free(copy);
    }
    assert_int_equal(ok, 1); /* only the whole file */
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(m, good, n);
        int flips = 1 + (int)(seed % 4);
        for (int f = 0; f < flips; f++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            m[(seed >> 33) % n] = (uint8_t)(seed >> 17);
        }
        krn_routing_t r;
        char err[256] = "";
        int rc = krn_routing_parse(m, n, &r, err, sizeof err);
        assert_true(rc == MT_OK || (rc == MT_INVAL && err[0]));
        if (rc == MT_OK) {
            assert_true(r.tokens > 0 && r.topk > 0 && (size_t)r.tokens * r.topk <= 32);
            for (size_t i = 0; i < (size_t)r.tokens * r.topk; i++) assert_true(r.ids[i] <= r.max_id);
        }
        krn_routing_clear(&r);
    }
    free(m);
    assert_true(refused > 0);
}

static void test_load(void **state) {
    krn_routing_t r;
    char err[512] = "";
    assert_int_equal(krn_routing_load("/nonexistent/r.npy", &r, err, sizeof err), MT_IO);
    assert_non_null(strstr(err, "/nonexistent/r.npy: No such file"));
    char path[] = "/tmp/test_routing_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    uint8_t buf[512];
    size_t n = npy(buf, sizeof buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 2), }", k_ids32, 32);
    assert_int_equal(write(fd, buf, n - 4), (ssize_t)(n - 4));
    close(fd);
    assert_int_equal(krn_routing_load(path, &r, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, ": data is 28 bytes"));
    assert_int_equal(strncmp(err, path, strlen(path)), 0);
    unlink(path);
}

/* The rows batch sizes draw: fixed per (seed, m), in range, the same as the helper's draw_rows()
 * (tests/unit/test_helper.py asserts the same four numbers). */
static void test_rows(void **state) {
    uint32_t rows[600], again[600];
    krn_routing_rows(1000, 4, 1, rows);
    assert_int_equal(rows[0], 761);
    assert_int_equal(rows[1], 48);
    assert_int_equal(rows[2], 45);
    assert_int_equal(rows[3], 533);
    krn_routing_rows(1000, 4, 2, again);
    assert_memory_not_equal(rows, again, 4 * sizeof rows[0]);
    krn_routing_rows(3, 500, 7, rows);
    krn_routing_rows(3, 500, 7, again);
    assert_memory_equal(rows, again, 500 * sizeof rows[0]);
    int seen[3] = {0, 0, 0};
    for (int i = 0; i < 500; i++) {
        assert_true(rows[i] < 3);
        seen[rows[i]]++;
    }
    assert_true(seen[0] > 100 && seen[1] > 100 && seen[2] > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid), cmocka_unit_test(test_hostile), cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_load),  cmocka_unit_test(test_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
