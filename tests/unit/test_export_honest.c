/* test_export_honest.c - what export refuses and what it says: damaged rows, two shapes
 * in one file name, unfinished sweeps, slower replacements, sweep selection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "export.h"
#include "mt.h"
#include "tmpdb.h"

typedef struct {
    tmpdir_t t; /* first: tmpdir_teardown frees the fixture through it */
    char err[1500];
    char changes[4096];
} fixture_t;

static void exec_sql(fixture_t *fx, const char *sql) {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(fx->t.db, &db), SQLITE_OK);
    tmpdb_exec(db, sql);
    sqlite3_close(db);
}

/* Sweep 1: shape 1 (E=128, N=768, K=2048), sweep 2: shape 2 (E=128, N=768, K=4096,
 * the same file name). Configs 1 and 2 at M = 1, 16; config 1 wins. One sim device. */
static int setup(void **state) {
    fixture_t *fx = tmpdir_new(sizeof *fx, "test_export_honest", "out");
    char *schema = tmpdb_read_file(MT_SOURCE_DIR "/db/schema.sql");
    assert_non_null(schema);
    exec_sql(fx, schema);
    free(schema);
    exec_sql(fx, "INSERT INTO devices (id, name, uuid) VALUES (1, 'NVIDIA H200', 'SIM-1');"
                 "INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 'a', x'', 'done', 1),"
                 " (2, 'b', x'', 'done', 2);"
                 "INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (1, 128, 768, 2048, 8, 'bf16'),"
                 " (2, 128, 768, 4096, 8, 'bf16');"
                 "INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3), (2, 64, 128, 128, 16, 8, 4);"
                 "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us,"
                 " stddev_us, samples, device_id, backend, compiler, kernel_hash, created)"
                 " SELECT s, s, c, bs, 'ok', 10.0 * c + bs, 1.0, 0.1, 20, 1, 'sim', 'sim', 'kh', 1"
                 " FROM (SELECT 1 AS s UNION SELECT 2), (SELECT 1 AS c UNION SELECT 2),"
                 " (SELECT 1 AS bs UNION SELECT 16);");
    *state = fx;
    return 0;
}

/* Runs an export; the change lines land in fx->changes. */
static int run(fixture_t *fx, exp_opts_t o, exp_report_t *rep) {
    char cpath[128];
    snprintf(cpath, sizeof cpath, "%s/changes.txt", fx->t.dir);
    FILE *ch = fopen(cpath, "w");
    o.db_path = fx->t.db;
    o.out_dir = fx->t.out;
    o.changes = ch;
    fx->err[0] = '\0';
    int rc = exp_run(&o, rep, fx->err, sizeof fx->err);
    fclose(ch);
    char *text = tmpdb_read_file(cpath);
    snprintf(fx->changes, sizeof fx->changes, "%s", text ? text : "");
    free(text);
    return rc;
}

static bool out_exists(fixture_t *fx) { return access(fx->t.out, F_OK) == 0; }

#define FILE1 "sim/E=128,N=768,device_name=NVIDIA_H200.json"

static void test_damaged_rows(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    static const struct {
        const char *sql, *want;
    } cases[] = {
        {"UPDATE results SET batch_size = -1 WHERE sweep_id = 1 AND batch_size = 16",
         "has a batch size outside 1..4294967295"},
        {"UPDATE results SET median_us = -9e999 WHERE sweep_id = 1 AND config_id = 2 AND batch_size = 1",
         "has median_us -inf"},
        {"UPDATE results SET median_us = -3.5 WHERE sweep_id = 1 AND config_id = 2 AND batch_size = 1",
         "has median_us -3.5"},
        {"UPDATE results SET median_us = NULL WHERE sweep_id = 1 AND config_id = 2 AND batch_size = 1",
         "has median_us 0"},
        {"UPDATE results SET min_us = -1 WHERE sweep_id = 1 AND config_id = 1 AND batch_size = 1", "has min_us -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        exec_sql(fx, "DROP TABLE IF EXISTS keep; CREATE TABLE keep AS SELECT * FROM results");
        exec_sql(fx, cases[i].sql);
        exp_opts_t o = {.sweep_id = 1};
        assert_int_equal(run(fx, o, &rep), MT_INVAL);
        assert_int_equal(rep.n_files, 0);
        exp_report_clear(&rep);
        if (!strstr(fx->err, cases[i].want)) fail_msg("case %zu: '%s' lacks '%s'", i, fx->err, cases[i].want);
        assert_non_null(strstr(fx->err, "export refused"));
        assert_false(out_exists(fx));
        exec_sql(fx, "DELETE FROM results; INSERT INTO results SELECT * FROM keep");
    }
    /* A damaged triton row is refused by the engine layouts too, not skipped. */
    exec_sql(fx, "UPDATE results SET backend = 'triton', compiler = 'triton_3_6_0' WHERE sweep_id = 1;"
                 "UPDATE results SET median_us = -1 WHERE sweep_id = 1 AND config_id = 2 AND batch_size = 1");
    exp_opts_t o = {.sweep_id = 1, .engine = EXP_ENGINE_VLLM};
    assert_int_equal(run(fx, o, &rep), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "has median_us -1"));
    assert_false(out_exists(fx));
}

static void test_two_shapes(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    /* One export of both sweeps: refused, both shapes named, nothing written. */
    exp_opts_t both = {0};
    assert_int_equal(run(fx, both, &rep), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "E=128,N=768,K=2048,topk=8,bf16"));
    assert_non_null(strstr(fx->err, "E=128,N=768,K=4096,topk=8,bf16"));
    assert_false(out_exists(fx));
    /* One after the other into one folder: the second is refused by the manifest's shape,
     * and the first file keeps its entries (nothing "kept_from_previous_file"). */
    exp_opts_t one = {.sweep_id = 1}, two = {.sweep_id = 2};
    assert_int_equal(run(fx, one, &rep), MT_OK);
    exp_report_clear(&rep);
    char path[256];
    snprintf(path, sizeof path, "%s/" FILE1, fx->t.out);
    char *before = tmpdb_read_file(path);
    assert_int_equal(run(fx, two, &rep), MT_INVAL);
    assert_int_equal(rep.n_files, 0);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "holds shape E=128,N=768,K=2048,topk=8,bf16"));
    assert_non_null(strstr(fx->err, "for shape E=128,N=768,K=4096,topk=8,bf16"));
    char *after = tmpdb_read_file(path);
    assert_string_equal(before, after);
    free(before);
    free(after);
    snprintf(path, sizeof path, "%s/sim/manifest.json", fx->t.out);
    char *man = tmpdb_read_file(path);
    assert_null(strstr(man, "kept_from_previous_file"));
    assert_non_null(strstr(man, "\"K\": 2048"));
    assert_null(strstr(man, "\"K\": 4096"));
    free(man);
}

static void test_unfinished(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    exec_sql(fx, "UPDATE sweeps SET state = 'running' WHERE id = 1");
    exp_opts_t o = {.sweep_id = 1};
    assert_int_equal(run(fx, o, &rep), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "sweep 1 is running, not done"));
    assert_non_null(strstr(fx->err, "--partial"));
    assert_false(out_exists(fx));
    /* Jobs plan a third config nobody measured: 2 of 3 at each batch size. */
    exec_sql(fx, "INSERT INTO configs VALUES (3, 32, 64, 64, 1, 4, 2);"
                 "INSERT INTO jobs (id, sweep_id, shape_id, state, created) VALUES (1, 1, 1, 'pending', 1);"
                 "INSERT INTO job_configs VALUES (1, 1), (1, 2), (1, 3)");
    o.partial = true;
    assert_int_equal(run(fx, o, &rep), MT_OK);
    assert_int_equal(rep.n_files, 1);
    assert_true(rep.files[0].partial);
    assert_non_null(strstr(rep.files[0].coverage, "2/3 planned configs measured at each of 2 batch sizes"));
    assert_non_null(strstr(rep.files[0].coverage, "sweep 1 is running"));
    exp_report_clear(&rep);
    char path[256];
    snprintf(path, sizeof path, "%s/sim/manifest.json", fx->t.out);
    json_t *man = json_load_file(path, 0, NULL);
    json_t *cov = json_object_get(json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json"), "coverage");
    assert_true(json_is_false(json_object_get(cov, "complete")));
    json_t *sw = json_object_get(json_object_get(cov, "sweeps"), "1");
    assert_string_equal(json_string_value(json_object_get(sw, "state")), "running");
    json_t *m16 = json_object_get(json_object_get(sw, "batch_sizes"), "16");
    assert_int_equal(json_integer_value(json_object_get(m16, "measured")), 2);
    assert_int_equal(json_integer_value(json_object_get(m16, "planned")), 3);
    json_decref(man);
    /* Finished, and the third config tried on this device (a compile error counts as
     * measured): no longer partial. */
    exec_sql(fx, "UPDATE sweeps SET state = 'done' WHERE id = 1;"
                 "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, device_id, backend, compiler,"
                 " created) VALUES (1, 1, 3, 1, 'compile_error', 1, 'sim', 'sim', 1),"
                 " (1, 1, 3, 16, 'compile_error', 1, 'sim', 'sim', 1)");
    o.partial = false;
    if (run(fx, o, &rep) != MT_OK) fail_msg("export: %s", fx->err);
    assert_false(rep.files[0].partial);
    exp_report_clear(&rep);
}

static void test_slower(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    exp_opts_t o = {.sweep_id = 1};
    assert_int_equal(run(fx, o, &rep), MT_OK);
    exp_report_clear(&rep);
    char path[256];
    snprintf(path, sizeof path, "%s/" FILE1, fx->t.out);
    char *before = tmpdb_read_file(path);
    /* Config 1 (the entry, 26 us at M=16) re-measured at 100 us: config 2 (36 us) would
     * replace it, slower than the recorded 26 us. */
    exec_sql(fx, "UPDATE results SET median_us = 100 WHERE sweep_id = 1 AND config_id = 1 AND batch_size = 16");
    assert_int_equal(run(fx, o, &rep), MT_INVAL);
    assert_int_equal(rep.n_files, 0);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "1 entry would be replaced by configs measured slower"));
    assert_non_null(
        strstr(fx->err, "batch size 16: M16 N64 K128 G1 w4 s3 -> M64 N128 K128 G16 w8 s4 (26.00 -> 36.00 us"));
    assert_non_null(strstr(fx->err, "--force"));
    assert_string_equal(fx->changes, "");
    char *after = tmpdb_read_file(path);
    assert_string_equal(before, after);
    free(after);
    /* With force: replaced, and the change is shown old -> new with both latencies. */
    o.force = true;
    assert_int_equal(run(fx, o, &rep), MT_OK);
    assert_int_equal(rep.files[0].state, EXP_CHANGED);
    assert_int_equal(rep.files[0].changed, 1);
    exp_report_clear(&rep);
    assert_string_equal(fx->changes, FILE1 ": batch size 16: M16 N64 K128 G1 w4 s3 -> M64 N128 K128 G16 w8 s4 "
                                           "(26.00 -> 36.00 us, sweep 1), slower: replaced with --force\n");
    /* Faster replacements need no force. */
    exec_sql(fx, "UPDATE results SET median_us = 5 WHERE sweep_id = 1 AND config_id = 1 AND batch_size = 16");
    o.force = false;
    assert_int_equal(run(fx, o, &rep), MT_OK);
    exp_report_clear(&rep);
    assert_string_equal(fx->changes, FILE1 ": batch size 16: M64 N128 K128 G16 w8 s4 -> M16 N64 K128 G1 w4 s3 "
                                           "(36.00 -> 5.00 us, sweep 1)\n");
    free(before);
}

static void test_selection(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    /* Sweep 3 measures shape 1 again, config 2 faster at M=1. */
    exec_sql(fx, "DELETE FROM results WHERE sweep_id = 2;"
                 "INSERT INTO sweeps (id, name, spec, state, created) VALUES (3, 'c', x'', 'done', 3);"
                 "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us,"
                 " stddev_us, samples, device_id, backend, compiler, kernel_hash, created)"
                 " SELECT 3, 1, c, bs, 'ok', CASE WHEN c = 2 AND bs = 1 THEN 2.0 ELSE 50.0 END, 1.0, 0.1, 20, 1,"
                 " 'sim', 'sim', 'kh', 3 FROM (SELECT 1 AS c UNION SELECT 2), (SELECT 1 AS bs UNION SELECT 16)");
    exp_opts_t o = {.one_sweep = true};
    assert_int_equal(run(fx, o, &rep), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "results of 2 sweeps (1, 3)"));
    assert_false(out_exists(fx));
    /* --latest: sweep 3 alone for the file (M=16 from it at 50 us, not sweep 1's 26). */
    exp_opts_t latest = {.latest = true};
    assert_int_equal(run(fx, latest, &rep), MT_OK);
    exp_report_clear(&rep);
    char path[256];
    snprintf(path, sizeof path, "%s/sim/manifest.json", fx->t.out);
    json_t *man = json_load_file(path, 0, NULL);
    json_t *rec = json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json");
    assert_int_equal(json_array_size(json_object_get(rec, "sweep_ids")), 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(rec, "sweep_ids"), 0)), 3);
    json_decref(man);
    /* --sweeps 1,3: per batch size the best of both (M=1 from 3, M=16 from 1: faster than
     * the file's 50 us, no force needed). */
    uint64_t ids[] = {1, 3};
    exp_opts_t merge = {.sweep_ids = ids, .n_sweep_ids = 2};
    assert_int_equal(run(fx, merge, &rep), MT_OK);
    exp_report_clear(&rep);
    man = json_load_file(path, 0, NULL);
    rec = json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json");
    json_t *e = json_object_get(rec, "entries");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "1"), "sweep_id")), 3);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "16"), "sweep_id")), 1);
    json_decref(man);
    /* A merge that would mix kernel sources in one file is refused. */
    exec_sql(fx, "UPDATE results SET kernel_hash = 'other' WHERE sweep_id = 3");
    assert_int_equal(run(fx, merge, &rep), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "would mix results of two kernel sources"));
}

/* Entries kept from an existing file keep their provenance: exporting sweep 2 (M = 1, 2)
 * over sweep 1's file (M = 1, 16, 64) names both sweeps in the record, per entry and in
 * the coverage; a kept entry whose sweep no record names makes the file partial. */
static void test_merge_provenance(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    char mpath[600];
    json_error_t jerr;
    exec_sql(fx, "DELETE FROM results WHERE sweep_id = 2;"
                 "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us,"
                 " stddev_us, samples, device_id, backend, compiler, kernel_hash, created)"
                 " SELECT s, 1, c, bs, 'ok', 10.0 * c + bs, 1.0, 0.1, 20, 1, 'sim', 'sim', 'kh', 1"
                 " FROM (SELECT 1 AS c UNION SELECT 2),"
                 " (SELECT 1 AS s, 64 AS bs UNION SELECT 2, 1 UNION SELECT 2, 2);");
    exp_opts_t o1 = {.sweep_id = 1}, o2 = {.sweep_id = 2};
    assert_int_equal(run(fx, o1, &rep), MT_OK);
    exp_report_clear(&rep);
    assert_int_equal(run(fx, o2, &rep), MT_OK);
    assert_int_equal(rep.n_files, 1);
    assert_int_equal(rep.files[0].entries, 4);
    assert_false(rep.files[0].partial);
    exp_report_clear(&rep);
    snprintf(mpath, sizeof mpath, "%s/sim/manifest.json", fx->t.out);
    json_t *m = json_load_file(mpath, 0, &jerr);
    json_t *rec = json_object_get(m, "E=128,N=768,device_name=NVIDIA_H200.json");
    json_t *ids = json_object_get(rec, "sweep_ids");
    assert_int_equal(json_array_size(ids), 2);
    assert_int_equal(json_integer_value(json_array_get(ids, 0)) + json_integer_value(json_array_get(ids, 1)), 3);
    static const struct {
        const char *bs;
        int sweep;
    } want[] = {{"1", 2}, {"2", 2}, {"16", 1}, {"64", 1}};
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_object_get(json_object_get(rec, "entries"), want[i].bs);
        assert_int_equal(json_integer_value(json_object_get(e, "sweep_id")), want[i].sweep);
    }
    json_t *cov = json_object_get(rec, "coverage");
    assert_non_null(json_object_get(json_object_get(json_object_get(cov, "sweeps"), "1"), "batch_sizes"));
    assert_non_null(json_object_get(json_object_get(cov, "sweeps"), "2"));
    assert_true(json_is_true(json_object_get(cov, "complete")));
    json_decref(m);

    /* Without the previous record, the kept entries' sweep is unknown: partial, said so. */
    assert_int_equal(unlink(mpath), 0);
    assert_int_equal(run(fx, o2, &rep), MT_OK);
    assert_int_equal(rep.n_files, 1);
    assert_true(rep.files[0].partial);
    assert_non_null(strstr(rep.files[0].coverage, "kept from the previous file"));
    exp_report_clear(&rep);
    m = json_load_file(mpath, 0, &jerr);
    rec = json_object_get(m, "E=128,N=768,device_name=NVIDIA_H200.json");
    assert_true(json_is_false(json_object_get(json_object_get(rec, "coverage"), "complete")));
    assert_true(json_is_null(json_object_get(json_object_get(json_object_get(rec, "entries"), "16"), "sweep_id")));
    json_decref(m);
}

/* Two shapes that differ only in their captured routing: the refusal names the routings,
 * not two identical-looking shapes. */
static void test_routing_clash(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    exec_sql(fx, "UPDATE shapes SET k = 2048, routing = 'abcdef0123456789' WHERE id = 2");
    exp_opts_t both = {0};
    both.sweep_ids = (const uint64_t[]){1, 2};
    both.n_sweep_ids = 2;
    assert_int_equal(run(fx, both, &rep), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(fx->err, "two shapes"));
    assert_non_null(strstr(fx->err, "routing=abcdef012345"));
    assert_false(out_exists(fx));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_merge_provenance, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_routing_clash, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_damaged_rows, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_two_shapes, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_unfinished, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_slower, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_selection, setup, tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
