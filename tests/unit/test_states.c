/* test_states.c - the one table per fact: result statuses, job and sweep states (proto/states.h)
 * against the schema's CHECK constraints (db/schema.sql, the embedded copy, and what a fresh and a
 * migrated store actually create), and the config fields (kernels/space.h): their text form, their
 * bounds where a spec, a plan and the wire take them, the credit cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "convert.h"
#include "mt.h"
#include "planner.h"
#include "spec.h"
#include "states.h"
#include "store.h"
#include "tmpdb.h"
#include "wire.h"

#define MAX_NAMES 16

typedef struct {
    const char *names[MAX_NAMES];
    size_t n;
} names_t;

/* The names name_of gives for from..to-1, in order (the tables' rows). */
static names_t table_names(const char *(*name_of)(int), int from, int to) {
    names_t t = {.n = 0};
    for (int i = from; i < to; i++) {
        assert_non_null(name_of(i));
        t.names[t.n++] = name_of(i);
    }
    return t;
}

static names_t status_names(void) { return table_names(wire_status_name, 1, WIRE_N_STATUS); }
static names_t job_names(void) { return table_names(wire_job_state_name, 0, WIRE_JOB_NSTATES); }
static names_t sweep_names(void) { return table_names(wire_sweep_state_name, 0, WIRE_SWEEP_NSTATES); }

/* The quoted names of "CHECK (<column> IN (...))" in the CREATE TABLE <table> statement of sql
 * (into buf, NUL-separated). Fails the test when the table or the CHECK is missing. */
static names_t check_names(const char *sql, const char *table, const char *column, char *buf, size_t len) {
    char head[64], check[64];
    names_t out = {.n = 0};
    mt_fmt(head, sizeof head, "CREATE TABLE %s (", table);
    mt_fmt(check, sizeof check, "CHECK (%s IN (", column);
    const char *t = strstr(sql, head);
    if (!t) { /* sqlite_master's sql of a renamed table quotes its name */
        mt_fmt(head, sizeof head, "CREATE TABLE \"%s\" (", table);
        t = strstr(sql, head);
    }
    assert_non_null(t);
    const char *end = strstr(t, ");");
    const char *c = strstr(t, check);
    assert_non_null(c);
    assert_true(!end || c < end);
    c += strlen(check);
    const char *close = strchr(c, ')');
    assert_non_null(close);
    size_t used = 0;
    for (const char *p = c; p < close;) {
        const char *q1 = memchr(p, '\'', (size_t)(close - p));
        if (!q1) break;
        const char *q2 = memchr(q1 + 1, '\'', (size_t)(close - q1 - 1));
        assert_non_null(q2);
        size_t n = (size_t)(q2 - q1 - 1);
        assert_true(used + n + 1 <= len && out.n < MAX_NAMES);
        memcpy(buf + used, q1 + 1, n);
        buf[used + n] = '\0';
        out.names[out.n++] = buf + used;
        used += n + 1;
        p = q2 + 1;
    }
    return out;
}

/* got lists exactly want's names: each once, nothing else. */
static void assert_same_names(const names_t *got, const names_t *want, const char *what) {
    if (got->n != want->n) fail_msg("%s: %zu names in the CHECK, %zu in the table", what, got->n, want->n);
    for (size_t i = 0; i < want->n; i++) {
        size_t hits = 0;
        for (size_t j = 0; j < got->n; j++) hits += strcmp(got->names[j], want->names[i]) == 0;
        if (hits != 1) fail_msg("%s: '%s' appears %zu times in the CHECK", what, want->names[i], hits);
    }
}

static void assert_schema_checks(const char *sql, const char *what) {
    char buf[512], w[128];
    names_t want = status_names(), got = check_names(sql, "results", "status", buf, sizeof buf);
    assert_same_names(&got, &want, mt_fmt(w, sizeof w, "%s results.status", what));
    want = job_names();
    got = check_names(sql, "jobs", "state", buf, sizeof buf);
    assert_same_names(&got, &want, mt_fmt(w, sizeof w, "%s jobs.state", what));
    want = sweep_names();
    got = check_names(sql, "sweeps", "state", buf, sizeof buf);
    assert_same_names(&got, &want, mt_fmt(w, sizeof w, "%s sweeps.state", what));
}

static void test_schema_file_checks(void **state) {
    char path[512];
    char *sql = tmpdb_read_file(mt_fmt(path, sizeof path, "%s/db/schema.sql", MT_SOURCE_DIR));
    assert_non_null(sql);
    assert_schema_checks(sql, "db/schema.sql");
    free(sql);
    assert_schema_checks(store_schema_sql(), "store_schema_sql()");
}

/* The CREATE statements the database holds, one after the other. */
static char *created_sql(const char *db_path) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    size_t len = 0, cap = 1 << 16;
    char *out = calloc(1, cap);
    assert_non_null(out);
    assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_master WHERE type = 'table'", -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        size_t n = strlen(t);
        assert_true(len + n + 3 < cap);
        memcpy(out + len, t, n);
        memcpy(out + len + n, ";\n", 3);
        len += n + 2;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

static void test_created_schema_checks(void **state) {
    tmpdb_t fresh, old;
    char err[256], path[512];
    store_t *s = NULL;
    assert_int_equal(tmpdb_make(&fresh, "states"), 0);
    assert_int_equal(store_open(fresh.path, &s, err, sizeof err), MT_OK);
    store_close(&s);
    char *sql = created_sql(fresh.path);
    assert_schema_checks(sql, "fresh store");
    free(sql);
    tmpdb_remove(&fresh);

    /* a version-1 database migrated to today's schema */
    assert_int_equal(tmpdb_make(&old, "states_v1"), 0);
    char *v1 = tmpdb_read_file(mt_fmt(path, sizeof path, "%s/tests/unit/support/schema_v1.sql", MT_SOURCE_DIR));
    assert_non_null(v1);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(old.path, &db), SQLITE_OK);
    tmpdb_exec(db, v1);
    tmpdb_exec(db, "PRAGMA user_version = 1");
    sqlite3_close(db);
    free(v1);
    assert_int_equal(store_open(old.path, &s, err, sizeof err), MT_OK);
    store_close(&s);
    sql = created_sql(old.path);
    assert_schema_checks(sql, "migrated store");
    free(sql);
    tmpdb_remove(&old);
}

static void test_status_table(void **state) {
    int v = -1;
    assert_string_equal(wire_status_name(MOETUNE__STATUS__STATUS_OK), "ok");
    assert_string_equal(wire_status_name(MOETUNE__STATUS__STATUS_CRASHED), "crashed");
    assert_string_equal(wire_status_name(MOETUNE__STATUS__STATUS_PRUNED), "pruned");
    assert_null(wire_status_name(MOETUNE__STATUS__STATUS_UNKNOWN));
    assert_null(wire_status_name(WIRE_N_STATUS));
    /* every value 1..WIRE_N_STATUS-1 has a name that parses back to it */
    for (int st = 1; st < WIRE_N_STATUS; st++) {
        assert_non_null(wire_status_name(st));
        assert_int_equal(wire_status_parse(wire_status_name(st), &v), MT_OK);
        assert_int_equal(v, st);
    }
    assert_int_equal(wire_status_parse("unknown", &v), MT_INVAL);
    assert_int_equal(wire_status_parse(NULL, &v), MT_INVAL);
    assert_false(wire_status_failed(MOETUNE__STATUS__STATUS_OK));
    assert_false(wire_status_failed(MOETUNE__STATUS__STATUS_PRUNED));
    assert_true(wire_status_failed(MOETUNE__STATUS__STATUS_TIMEOUT));
    assert_true(wire_status_failed(MOETUNE__STATUS__STATUS_CRASHED));

    wire_job_state_t js;
    assert_int_equal(wire_job_state_parse("leased", &js), MT_OK);
    assert_int_equal(js, WIRE_JOB_LEASED);
    assert_string_equal(wire_job_state_name(WIRE_JOB_CANCELLED), "cancelled");
    assert_null(wire_job_state_name(WIRE_JOB_NSTATES));
    assert_int_equal(wire_job_state_parse("running", &js), MT_INVAL);
    wire_sweep_state_t ss;
    assert_int_equal(wire_sweep_state_parse("running", &ss), MT_OK);
    assert_int_equal(ss, WIRE_SWEEP_RUNNING);
    assert_false(wire_sweep_finished("running"));
    assert_true(wire_sweep_finished("done"));
    assert_true(wire_sweep_finished("cancelled"));
    assert_true(wire_sweep_finished("failed"));
    assert_false(wire_sweep_finished("pending"));
    assert_false(wire_sweep_finished(NULL));
    assert_true(wire_sweep_is("done", WIRE_SWEEP_DONE));
    assert_true(wire_sweep_is("running", WIRE_SWEEP_RUNNING));
    assert_false(wire_sweep_is("done", WIRE_SWEEP_RUNNING));
    assert_false(wire_sweep_is("Done", WIRE_SWEEP_DONE));
    assert_false(wire_sweep_is(NULL, WIRE_SWEEP_RUNNING));
}

/* The shape's text form: what --shape takes, read back to the same shape. */
static void test_shape_text(void **state) {
    static const char *const forms[] = {"E=128,N=768,K=2048,topk=8",
                                        "E=256,N=256,K=7168,topk=8,dtype=fp8_w8a8,block_shape=128x128",
                                        "E=8,N=7168,K=4096,topk=2,dtype=fp8_w8a8"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        krn_shape_t s, back;
        char err[200], buf[160];
        memset(&s, 0, sizeof s);
        memset(&back, 0, sizeof back);
        assert_int_equal(krn_shape_parse(forms[i], &s, err, sizeof err), MT_OK);
        krn_shape_format(&s, buf, sizeof buf);
        assert_string_equal(buf, forms[i]);
        assert_int_equal(krn_shape_parse(buf, &back, err, sizeof err), MT_OK);
        assert_memory_equal(&back, &s, sizeof s);
    }
}

static void test_config_text(void **state) {
    char buf[KRN_CONFIG_TEXT_LEN];
    krn_config_t c = {.block_m = 64, .block_n = 128, .block_k = 64, .group_m = 1, .num_warps = 4, .num_stages = 3};
    krn_config_t back;
    assert_string_equal(krn_config_format(&c, buf, sizeof buf), "64x128x64x1x4x3");
    assert_int_equal(krn_config_parse(buf, &back), MT_OK);
    assert_memory_equal(&back, &c, sizeof c);
    /* the largest config of the table and its text fit KRN_CONFIG_TEXT_LEN */
    krn_config_t big;
    for (int i = 0; i < KRN_N_FIELDS; i++) KRN_CONFIG_AT(&big, i) = krn_config_fields[i].max;
    assert_string_equal(krn_config_format(&big, buf, sizeof buf), "1024x1024x1024x1024x32x16");
    assert_int_equal(krn_config_bad_field(&big), -1);
    krn_config_t off = big;
    off.num_stages = 17;
    assert_int_equal(krn_config_bad_field(&off), KRN_F_num_stages);
    off.block_n = 0;
    assert_int_equal(krn_config_bad_field(&off), KRN_F_block_n); /* the first one */
    assert_int_equal(krn_config_parse(buf, &back), MT_OK);
    assert_memory_equal(&back, &big, sizeof big);
    /* malformed or out of a field's bounds: refused, and the config left as it was */
    static const char *const bad[] = {"",
                                      "64x128x64x1x4",
                                      "64x128x64x1x4x3x2",
                                      "64x128x64x1x4x3 ",
                                      " 64x128x64x1x4x3",
                                      "64x128x64x1x4x",
                                      "x128x64x1x4x3",
                                      "64x128x64x0x4x3",
                                      "64x-128x64x1x4x3",
                                      "64x+128x64x1x4x3",
                                      "64x128x64x1x64x3",
                                      "64x128x64x1x4x17",
                                      "2048x128x64x1x4x3",
                                      "64X128x64x1x4x3",
                                      "99999999999x1x1x1x1x1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        back = c;
        if (krn_config_parse(bad[i], &back) != MT_INVAL) fail_msg("'%s' parsed", bad[i]);
        assert_memory_equal(&back, &c, sizeof c);
    }
    assert_int_equal(krn_config_parse(NULL, &back), MT_INVAL);
    /* the field table is the struct's order, the engines' file keys, and the option names */
    assert_int_equal(KRN_N_FIELDS * sizeof(uint32_t), sizeof(krn_config_t));
    assert_string_equal(krn_config_fields[KRN_F_group_m].file, "GROUP_SIZE_M");
    assert_string_equal(krn_config_fields[KRN_F_num_stages].option, "num-stages");
    assert_int_equal(krn_config_fields[KRN_F_block_k].off, offsetof(krn_config_t, block_k));
}

/* A Job carrying cfg, packed and unpacked: MT_OK when the wire takes it. */
static int wire_takes_config(const krn_config_t *cfg) {
    wire_env_t env;
    Moetune__Job job = MOETUNE__JOB__INIT;
    Moetune__Shape shape = MOETUNE__SHAPE__INIT;
    Moetune__JobConfig jc = MOETUNE__JOB_CONFIG__INIT, *pjc = &jc;
    Moetune__Config c;
    Moetune__Measure m = MOETUNE__MEASURE__INIT;
    uint32_t bs = 1;
    wire_config_to_msg(cfg, &c);
    shape.e = 8, shape.n = 256, shape.k = 256, shape.topk = 2;
    jc.config_id = 1;
    jc.config = &c;
    job.job_id = 1, job.shape = &shape, job.n_configs = 1, job.configs = &pjc, job.n_batch_sizes = 1;
    job.batch_sizes = &bs, job.measure = &m;
    wire_env_wrap(&env, &job.base);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(wire_pack(&env, &buf, &len), MT_OK);
    wire_env_t *out = NULL;
    char err[200];
    int rc = wire_unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &out, NULL, err, sizeof err);
    free(buf);
    wire_free(&out);
    return rc;
}

/* A spec whose space holds one list of a single value (the others the default). */
static int plan_with(int field, uint32_t value, char *err, size_t errlen) {
    krn_space_t def;
    krn_space_default(&def);
    Moetune__Space sp = MOETUNE__SPACE__INIT;
    uint32_t one = value;
    size_t *counts[KRN_N_FIELDS] = {&sp.n_block_m, &sp.n_block_n,   &sp.n_block_k,
                                    &sp.n_group_m, &sp.n_num_warps, &sp.n_num_stages};
    uint32_t **lists[KRN_N_FIELDS] = {&sp.block_m, &sp.block_n,   &sp.block_k,
                                      &sp.group_m, &sp.num_warps, &sp.num_stages};
    for (int i = 0; i < KRN_N_FIELDS; i++) {
        *counts[i] = i == field ? 1 : def.n[i];
        *lists[i] = i == field ? &one : def.values[i];
    }
    Moetune__SweepSpec spec = MOETUNE__SWEEP_SPEC__INIT;
    Moetune__Shape shape = MOETUNE__SHAPE__INIT, *ps = &shape;
    uint32_t bs = 1;
    shape.e = 8, shape.n = 1024, shape.k = 1024, shape.topk = 2;
    spec.n_shapes = 1, spec.shapes = &ps, spec.n_batch_sizes = 1, spec.batch_sizes = &bs, spec.space = &sp;
    spec.backend = "triton"; /* its static rules take the most (up to 32 warps) */
    uint32_t valid, rejected, jobs;
    return plan_count(&spec, &valid, &rejected, &jobs, err, errlen);
}

/* One set of bounds for a config's fields: what a spec takes, a plan takes and the wire takes. */
static void test_config_bounds(void **state) {
    char err[300], opt_val[16];
    for (int i = 0; i < KRN_N_FIELDS; i++) {
        const krn_config_field_t *f = &krn_config_fields[i];
        krn_config_t c = {.block_m = 64, .block_n = 64, .block_k = 64, .group_m = 1, .num_warps = 4, .num_stages = 3};
        KRN_CONFIG_AT(&c, i) = f->max;
        assert_int_equal(wire_takes_config(&c), MT_OK);
        KRN_CONFIG_AT(&c, i) = f->max + 1;
        if (wire_takes_config(&c) != MT_INVAL) fail_msg("the wire takes %s = %u", f->name, f->max + 1);
        KRN_CONFIG_AT(&c, i) = 0;
        assert_int_equal(wire_takes_config(&c), MT_INVAL);

        /* the spec refuses past max with the option's name, before anything is planned */
        cli_spec_t *s = cli_spec_new();
        assert_int_equal(cli_spec_set(s, f->option, mt_fmt(opt_val, sizeof opt_val, "%u", f->max), err, sizeof err),
                         MT_OK);
        if (cli_spec_set(s, f->option, mt_fmt(opt_val, sizeof opt_val, "%u", f->max + 1), err, sizeof err) != MT_INVAL)
            fail_msg("--%s %u taken", f->option, f->max + 1);
        cli_spec_destroy(&s);

        /* the planner refuses the same value with the field's bound */
        char want[120];
        assert_int_equal(plan_with(i, f->max + 1, err, sizeof err), MT_INVAL);
        mt_fmt(want, sizeof want, "space: %s value %u is out of range 1..%u", f->name, f->max + 1, f->max);
        if (!strstr(err, want)) fail_msg("plan of %s = %u: '%s', not '%s'", f->name, f->max + 1, err, want);
    }
}

/* The credit cap: a Ready may carry WIRE_MAX_CREDITS, not one more. */
static void test_credit_cap(void **state) {
    for (uint32_t credits = WIRE_MAX_CREDITS; credits <= WIRE_MAX_CREDITS + 1; credits++) {
        wire_env_t env, *out = NULL;
        Moetune__Ready r = MOETUNE__READY__INIT;
        r.credits = credits;
        wire_env_wrap(&env, &r.base);
        uint8_t *buf = NULL;
        size_t len = 0;
        char err[200];
        assert_int_equal(wire_pack(&env, &buf, &len), MT_OK);
        int rc = wire_unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &out, NULL, err, sizeof err);
        free(buf);
        wire_free(&out);
        assert_int_equal(rc, credits <= WIRE_MAX_CREDITS ? MT_OK : MT_INVAL);
    }
}

/* Measurement defaults: one table, filled for every field left 0 and nothing else. */
static void test_measure_defaults(void **state) {
    Moetune__Measure out, given = MOETUNE__MEASURE__INIT;
    wire_measure_fill(NULL, &out);
    assert_int_equal(out.warmup, 2);
    assert_int_equal(out.min_samples, 10);
    assert_int_equal(out.max_samples, 100);
    assert_true(out.rsd_target == 0.01);
    assert_int_equal(out.budget_ms, 1000);
    assert_int_equal(out.timeout_ms, 60000);
    assert_int_equal(out.seed, 1);
    assert_true(out.race_margin == 0);
    given.min_samples = 3, given.race_margin = -1, given.seed = 9;
    wire_measure_fill(&given, &out);
    assert_int_equal(out.min_samples, 3);
    assert_int_equal(out.seed, 9);
    assert_true(out.race_margin == -1);
    assert_int_equal(out.max_samples, 100);
    /* the planner's are the same */
    Moetune__Measure planned;
    plan_measure(NULL, &planned);
    wire_measure_fill(NULL, &out);
    assert_int_equal(planned.warmup, out.warmup);
    assert_int_equal(planned.min_samples, out.min_samples);
    assert_int_equal(planned.max_samples, out.max_samples);
    assert_int_equal(planned.budget_ms, out.budget_ms);
    assert_int_equal(planned.timeout_ms, out.timeout_ms);
}

int main(void) {
    mt_log_init("test_states", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_table),
        cmocka_unit_test(test_schema_file_checks),
        cmocka_unit_test(test_created_schema_checks),
        cmocka_unit_test(test_config_text),
        cmocka_unit_test(test_shape_text),
        cmocka_unit_test(test_config_bounds),
        cmocka_unit_test(test_credit_cap),
        cmocka_unit_test(test_measure_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
