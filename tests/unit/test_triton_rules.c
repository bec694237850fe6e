/* test_triton_rules.c - Triton's static rules per device against the rows Triton 3.6 recorded
 * (tests/fixtures/triton_oor*.csv): every config that ran is accepted, no shared-memory floor is
 * above Triton's own Required figure, and the rule rejects what it safely can; then the configs
 * each known device's rule removes from the default space. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mt.h"
#include "space.h"

#define FIELDS 14

/* Splits line at commas into f (at most n fields); returns how many. */
static size_t split(char *line, char **f, size_t n) {
    size_t k = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; k < n; k++) {
        f[k] = p;
        char *c = strchr(p, ',');
        if (!c) return k + 1;
        *c = '\0';
        p = c + 1;
    }
    return k;
}

/* The shape a fixture row was measured on: only its dtype and its hidden size's divisibility
 * matter to the rule (Qwen3's K=2048, DeepSeek-V3's K=7168). */
static void row_shape(const char *dtype, const char *block, krn_shape_t *s) {
    char text[128], err[128];
    mt_fmt(text, sizeof text, "E=128,N=768,K=2048,topk=8,dtype=%s%s%s", dtype, *block ? ",block_shape=" : "", block);
    assert_int_equal(krn_shape_parse(text, s, err, sizeof err), MT_OK);
}

static void row_limits(const char *cc, const char *smem, krn_limits_t *l) {
    krn_limits_default(l);
    assert_int_equal(sscanf(cc, "%u.%u", &l->cc_major, &l->cc_minor), 2);
    l->smem_per_block = (uint32_t)strtoul(smem, NULL, 10);
}

static FILE *fixture(const char *name) {
    char path[512];
    mt_fmt(path, sizeof path, "%s/tests/fixtures/%s", MT_SOURCE_DIR, name);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    return f;
}

/* Every recorded row: an ok config passes its device's rule; an OutOfResources one has a floor
 * no higher than Triton's Required, and is rejected when the floor is over the limit. */
static void test_recorded_rows(void **state) {
    (void)state;
    FILE *f = fixture("triton_oor.csv");
    char line[512], *fl[FIELDS] = {0}, why[160];
    size_t ok = 0, oor = 0, rejected = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || strncmp(line, "device,", 7) == 0) continue;
        assert_int_equal(split(line, fl, FIELDS), 8);
        krn_shape_t shape;
        krn_limits_t lim;
        krn_config_t cfg;
        row_shape(fl[3], fl[4], &shape);
        row_limits(fl[1], fl[2], &lim);
        assert_int_equal(krn_config_parse(fl[5], &cfg), MT_OK);
        int rc = krn_check_triton_on(&shape, &cfg, &lim, why, sizeof why);
        if (strcmp(fl[6], "ok") == 0) {
            if (rc != MT_OK) fail_msg("%s on %s ran, but the rule rejects it: %s", fl[5], fl[0], why);
            ok++;
            continue;
        }
        uint32_t required = 0;
        assert_int_equal(sscanf(fl[6], "Required %u", &required), 1);
        uint32_t floor = krn_triton_smem_floor(&shape, &cfg, &lim);
        if (floor > required) fail_msg("%s: floor %u B is above Triton's Required %u B", fl[5], floor, required);
        oor++;
        if (rc != MT_OK) rejected++;
    }
    fclose(f);
    printf("recorded rows: %zu ok, all accepted; %zu OutOfResources, %zu rejected\n", ok, oor, rejected);
    assert_true(ok >= 20);
    assert_int_equal(oor, 1);
    assert_int_equal(rejected, oor); /* 256x256x256x1x4x5 needs exactly the floor: 1310720 B */
}

/* Parses a space-separated list into the space's field i. */
static void parse_list(char *text, krn_space_t *s, int i) {
    s->n[i] = 0;
    for (char *t = strtok(text, " "); t; t = strtok(NULL, " ")) s->values[i][s->n[i]++] = (uint32_t)atoi(t);
}

/* Whole recorded spaces: the rule rejects no more configs than Triton refused (else it rejected
 * one that ran), and here exactly as many. */
static void test_recorded_spaces(void **state) {
    (void)state;
    FILE *f = fixture("triton_oor_spaces.csv");
    char line[1024], *fl[FIELDS] = {0}, why[160];
    size_t spaces = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        assert_int_equal(split(line, fl, FIELDS), 13);
        krn_shape_t shape;
        krn_limits_t lim;
        krn_space_t space;
        memset(&space, 0, sizeof space);
        row_shape(fl[3], "", &shape);
        row_limits(fl[1], fl[2], &lim);
        for (int i = 0; i < KRN_N_FIELDS; i++) parse_list(fl[4 + i], &space, i);
        size_t n = krn_space_size(&space), rejected = 0;
        assert_int_equal(n, strtoul(fl[10], NULL, 10));
        for (size_t i = 0; i < n; i++) {
            krn_config_t c;
            krn_space_at(&space, i, &c);
            if (krn_check_triton_on(&shape, &c, &lim, why, sizeof why) != MT_OK) rejected++;
        }
        size_t refused = strtoul(fl[11], NULL, 10);
        printf("space of %zu configs on %s: Triton refused %zu, the rule rejects %zu\n", n, fl[0], refused, rejected);
        assert_true(rejected <= refused);
        assert_int_equal(rejected, refused);
        spaces++;
    }
    fclose(f);
    assert_int_equal(spaces, 1);
}

/* What each known device's rule removes from the default space (bf16, K=2048). On sm_90 it is
 * 528 configs of BLOCK_SIZE_M >= 64 (num_stages buffers) and 88 below (num_stages - 1), the split
 * of the 524 OutOfResources rows of a partial H100 sweep (436 of the first kind seen, all 88 of the
 * second); sm_120's 99 KiB keeps far fewer. A shape of K not a multiple of 16 loses none. */
static void test_default_space_per_device(void **state) {
    (void)state;
    static const struct {
        const char *key;
        size_t rejected, small_m;
    } want[] = {{"sm_90", 616, 88}, {"sm_120", 944, 264}};
    krn_space_t space;
    krn_shape_t shape, odd;
    char why[160];
    krn_space_default(&space);
    row_shape("bf16", "", &shape);
    odd = shape;
    odd.k = 2060; /* a multiple of 4, not of 16 */
    for (size_t d = 0; d < sizeof want / sizeof want[0]; d++) {
        const krn_device_t *dev = krn_device_find(want[d].key);
        assert_non_null(dev);
        size_t rejected = 0, small_m = 0, odd_rejected = 0;
        for (size_t i = 0; i < krn_space_size(&space); i++) {
            krn_config_t c;
            krn_space_at(&space, i, &c);
            if (krn_check_triton_on(&shape, &c, &dev->limits, why, sizeof why) != MT_OK) {
                rejected++;
                if (c.block_m < 64) small_m++;
                assert_non_null(strstr(why, "shared memory"));
            }
            if (krn_check_triton_on(&odd, &c, &dev->limits, why, sizeof why) != MT_OK) odd_rejected++;
        }
        printf("%s: %zu of %zu default configs rejected\n", dev->name, rejected, krn_space_size(&space));
        assert_int_equal(rejected, want[d].rejected);
        assert_int_equal(small_m, want[d].small_m);
        assert_int_equal(odd_rejected, 0);
    }
    assert_null(krn_device_find("sm_0"));
}

/* The reason names the floor, the limit and the device; without limits only the tile rules. */
static void test_reason_and_no_device(void **state) {
    (void)state;
    krn_shape_t shape;
    krn_config_t c;
    char why[160] = "";
    row_shape("bf16", "", &shape);
    assert_int_equal(krn_config_parse("128x256x128x1x8x4", &c), MT_OK);
    const krn_device_t *h100 = krn_device_find("sm_90");
    assert_int_equal(krn_check_triton_on(&shape, &c, &h100->limits, why, sizeof why), MT_INVAL);
    assert_string_equal(why, "Triton needs at least 393216 B of shared memory > 232448 B per block on sm_90");
    assert_int_equal(krn_check_triton_on(&shape, &c, NULL, why, sizeof why), MT_OK);
    /* fp8 halves the bytes; below BLOCK_SIZE_M 64 one buffer fewer */
    row_shape("fp8_w8a8", "128x128", &shape);
    assert_int_equal(krn_triton_smem_floor(&shape, &c, &h100->limits), 3u * (128 * 128 + 128 * 256));
    assert_int_equal(krn_config_parse("32x256x128x1x8x4", &c), MT_OK);
    row_shape("bf16", "", &shape);
    assert_int_equal(krn_triton_smem_floor(&shape, &c, &h100->limits), 3u * (32 * 128 + 128 * 256) * 2);
    assert_int_equal(krn_config_parse("64x64x64x1x4x1", &c), MT_OK);
    assert_int_equal(krn_triton_smem_floor(&shape, &c, &h100->limits), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_rows),
        cmocka_unit_test(test_recorded_spaces),
        cmocka_unit_test(test_default_space_per_device),
        cmocka_unit_test(test_reason_and_no_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
