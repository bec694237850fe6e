/* test_export.c - config files and manifest exported from a hand-built store. */
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
#include "query.h"

typedef tmpdir_t fixture_t;

/* Median of config c for shape s at batch size m: config 1 wins small M, config 3
 * large M; config 2 always loses. */
static double median(int s, int c, int m) {
    double base = 10.0 + s;
    if (c == 1) return base + m * 0.5;
    if (c == 3) return base + 20.0 + m * 0.1;
    return base + 100.0 + m;
}

/* One row of sweep 1 on device 1 by the sim backend through st (setup's INSERT): shape s,
 * config c at batch size bs, with status and median. */
static void insert_sim(sqlite3_stmt *st, int s, int c, int bs, const char *status, double median_us) {
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, s);
    sqlite3_bind_int(st, 2, c);
    sqlite3_bind_int(st, 3, bs);
    sqlite3_bind_text(st, 4, status, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 5, median_us);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
}

static int setup(void **state) {
    fixture_t *fx = tmpdir_new(sizeof *fx, "test_export", "configs");
    sqlite3 *db = tmpdb_schema(fx->db);
    tmpdb_exec(db, "INSERT INTO devices (id, name, uuid, driver_version, cuda_version) VALUES "
                   "(1, 'NVIDIA H200', 'SIM-1', '580.1', '13.0'), (2, 'NVIDIA H200', 'GPU-2', '580.1', '13.0');"
                   "INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 's', x'', 'done', 1);"
                   "INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (1, 128, 768, 2048, 8, 'bf16');"
                   "INSERT INTO shapes (id, e, n, k, topk, dtype, block_n, block_k) VALUES "
                   "(2, 256, 256, 7168, 8, 'fp8_w8a8', 128, 128);"
                   "INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3), (2, 32, 64, 64, 16, 4, 2),"
                   " (3, 64, 128, 128, 16, 8, 4), (4, 128, 256, 64, 1, 8, 5), (5, 16, 32, 64, 1, 4, 2);");
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status,"
                                        " median_us, min_us, stddev_us, samples, device_id, backend, compiler,"
                                        " kernel_hash, created) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?5 - 1, 0.1, 20,"
                                        " 1, 'sim', 'sim', 'kh', 1)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    static const int sizes[] = {64, 1, 16, 4096}; /* inserted out of order */
    for (int s = 1; s <= 2; s++) {
        for (size_t i = 0; i < 4; i++) {
            for (int c = 1; c <= 3; c++) insert_sim(st, s, c, sizes[i], "ok", median(s, c, sizes[i]));
            /* Faster than everything but not ok: never exported. */
            insert_sim(st, s, 4, sizes[i], "crashed", 0.5);
            insert_sim(st, s, 5, sizes[i], "wrong_result", 0.5);
        }
    }
    sqlite3_finalize(st);
    /* A CUDA measurement of shape 1 at M=1 goes to its compiler's directory. (sweep, shape,
     * config, bs) is unique: this row needs another sweep. */
    tmpdb_exec(db, "INSERT INTO sweeps (id, name, spec, state, created) VALUES (2, 'c', x'', 'done', 2)");
    tmpdb_exec(db, "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us,"
                   " stddev_us, samples, device_id, backend, compiler, created) VALUES"
                   " (2, 1, 2, 1, 'ok', 42.0, 41.0, 0.2, 30, 2, 'cuda', 'cuda_13_0', 2)");
    sqlite3_close(db);
    *state = fx;
    return 0;
}

/* partial: also files of sweeps or devices that did not measure their whole plan (--partial). */
static int run_export(fixture_t *fx, uint64_t sweep, bool partial, exp_report_t *rep) {
    char err[600] = "";
    FILE *changes = fopen("/dev/null", "w");
    exp_opts_t o = {.db_path = fx->db, .out_dir = fx->out, .sweep_id = sweep, .changes = changes, .partial = partial};
    int rc = exp_run(&o, rep, err, sizeof err);
    fclose(changes);
    if (rc != MT_OK) fail_msg("export: %s", err);
    return rc;
}

static const exp_file_t *find_file(const exp_report_t *rep, const char *path) {
    for (size_t i = 0; i < rep->n_files; i++)
        if (strcmp(rep->files[i].path, path) == 0) return &rep->files[i];
    return NULL;
}

#define SIM1 "sim/E=128,N=768,device_name=NVIDIA_H200.json"
#define SIM2 "sim/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
#define CUDA1 "cuda_13_0/E=128,N=768,device_name=NVIDIA_H200.json"

static void check_entry(json_t *root, const char *key, int bm, int bn, int bk, int gm, int w, int s) {
    json_t *e = json_object_get(root, key);
    if (!e) fail_msg("no entry %s", key);
    assert_int_equal(json_integer_value(json_object_get(e, "BLOCK_SIZE_M")), bm);
    assert_int_equal(json_integer_value(json_object_get(e, "BLOCK_SIZE_N")), bn);
    assert_int_equal(json_integer_value(json_object_get(e, "BLOCK_SIZE_K")), bk);
    assert_int_equal(json_integer_value(json_object_get(e, "GROUP_SIZE_M")), gm);
    assert_int_equal(json_integer_value(json_object_get(e, "num_warps")), w);
    assert_int_equal(json_integer_value(json_object_get(e, "num_stages")), s);
    assert_int_equal(json_object_size(e), 6);
}

static void test_files(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    run_export(fx, 0, false, &rep);
    assert_int_equal(rep.n_files, 3);
    const exp_file_t *f = find_file(&rep, SIM1);
    assert_non_null(f);
    assert_int_equal(f->state, EXP_NEW);
    assert_int_equal(f->entries, 4);
    assert_int_equal(f->changed, 4);
    assert_true(f->simulated);
    assert_non_null(find_file(&rep, SIM2));
    f = find_file(&rep, CUDA1);
    assert_non_null(f);
    assert_int_equal(f->entries, 1);
    assert_false(f->simulated);
    exp_report_clear(&rep);

    char path[512];
    snprintf(path, sizeof path, "%s/%s", fx->out, SIM1);
    char *text = tmpdb_read_file(path);
    assert_non_null(text);
    /* Keys in numeric order (1, 16, 64, 4096, inserted 64, 1, 16, 4096), indent 4 like the engines. */
    char *k1 = strstr(text, "\"1\":"), *k16 = strstr(text, "\"16\":"), *k64 = strstr(text, "\"64\":"),
         *k4096 = strstr(text, "\"4096\":");
    assert_true(k1 && k16 && k64 && k4096);
    assert_true(k1 < k16 && k16 < k64 && k64 < k4096);
    assert_non_null(strstr(text, "\n    \"1\": {\n        \"BLOCK_SIZE_M\": 16"));
    free(text);
    json_t *root = json_load_file(path, 0, NULL);
    assert_non_null(root);
    assert_int_equal(json_object_size(root), 4);
    /* config 1 (16,64,128,1,4,3) wins while 0.5 M < 20 + 0.1 M, i.e. M < 50; config 3 after.
     * The crashed (config 4) and wrong_result (config 5) rows are faster but never chosen. */
    check_entry(root, "1", 16, 64, 128, 1, 4, 3);
    check_entry(root, "16", 16, 64, 128, 1, 4, 3);
    check_entry(root, "64", 64, 128, 128, 16, 8, 4);
    check_entry(root, "4096", 64, 128, 128, 16, 8, 4);
    json_decref(root);

    snprintf(path, sizeof path, "%s/sim/manifest.json", fx->out);
    json_t *man = json_load_file(path, 0, NULL);
    assert_non_null(man);
    json_t *rec = json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json");
    assert_non_null(rec);
    assert_true(json_is_true(json_object_get(rec, "simulated")));
    assert_string_equal(json_string_value(json_object_get(rec, "backend")), "sim");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(rec, "sweep_ids"), 0)), 1);
    json_t *e64 = json_object_get(json_object_get(rec, "entries"), "64");
    assert_true(json_real_value(json_object_get(e64, "median_us")) == median(1, 3, 64));
    assert_int_equal(json_integer_value(json_object_get(e64, "samples")), 20);
    json_decref(man);

    snprintf(path, sizeof path, "%s/cuda_13_0/manifest.json", fx->out);
    man = json_load_file(path, 0, NULL);
    rec = json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json");
    assert_true(json_is_false(json_object_get(rec, "simulated")));
    json_decref(man);
}

static int count_exports(fixture_t *fx, int *changed_sum) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(fx->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT count(*), COALESCE(sum(changed_entries), 0) FROM exports", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    *changed_sum = sqlite3_column_int(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static void test_reexport(void **state) {
    fixture_t *fx = *state;
    exp_report_t rep;
    int changed;
    char path[512];
    run_export(fx, 0, false, &rep);
    exp_report_clear(&rep);
    assert_int_equal(count_exports(fx, &changed), 3);
    assert_int_equal(changed, 4 + 4 + 1);
    snprintf(path, sizeof path, "%s/%s", fx->out, SIM1);
    char *before = tmpdb_read_file(path);

    /* Same data again: 0 changed entries, the files are left as they are. */
    run_export(fx, 0, false, &rep);
    assert_int_equal(rep.n_files, 3);
    for (size_t i = 0; i < rep.n_files; i++) {
        assert_int_equal(rep.files[i].state, EXP_UNCHANGED);
        assert_int_equal(rep.files[i].changed, 0);
    }
    exp_report_clear(&rep);
    assert_int_equal(count_exports(fx, &changed), 6);
    assert_int_equal(changed, 9);
    char *after = tmpdb_read_file(path);
    assert_string_equal(before, after);
    free(after);

    /* Config 2 becomes the fastest at M=16: one changed entry, shown old -> new. */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(fx->db, &db), SQLITE_OK);
    tmpdb_exec(db, "UPDATE results SET median_us = 1.0 WHERE sweep_id = 1 AND shape_id = 1 AND config_id = 2"
                   " AND batch_size = 16");
    sqlite3_close(db);
    char cpath[600];
    snprintf(cpath, sizeof cpath, "%s/changes.txt", fx->dir);
    FILE *changes = fopen(cpath, "w");
    char err[600] = "";
    exp_opts_t o = {.db_path = fx->db, .out_dir = fx->out, .changes = changes};
    assert_int_equal(exp_run(&o, &rep, err, sizeof err), MT_OK);
    fclose(changes);
    const exp_file_t *f = find_file(&rep, SIM1);
    assert_int_equal(f->state, EXP_CHANGED);
    assert_int_equal(f->changed, 1);
    assert_int_equal(f->entries, 4);
    assert_int_equal(find_file(&rep, SIM2)->state, EXP_UNCHANGED);
    exp_report_clear(&rep);
    char *shown = tmpdb_read_file(cpath);
    assert_non_null(strstr(shown, SIM1 ": batch size 16: M16 N64 K128 G1 w4 s3 -> M32 N64 K64 G16 w4 s2"));
    free(shown);
    json_t *root = json_load_file(path, 0, NULL);
    check_entry(root, "16", 32, 64, 64, 16, 4, 2);
    check_entry(root, "1", 16, 64, 128, 1, 4, 3);
    json_decref(root);
    assert_int_equal(count_exports(fx, &changed), 9);
    assert_int_equal(changed, 10);
    free(before);

    /* One sweep only. */
    run_export(fx, 2, false, &rep);
    assert_int_equal(rep.n_files, 1);
    assert_string_equal(rep.files[0].path, CUDA1);
    exp_report_clear(&rep);

    /* An existing file that is not a config file is never overwritten. */
    FILE *w = fopen(path, "w");
    fputs("garbage", w);
    fclose(w);
    assert_int_equal(exp_run(&o, &rep, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "not a config file"));
    exp_report_clear(&rep);
    char *kept = tmpdb_read_file(path);
    assert_string_equal(kept, "garbage");
    free(kept);
}

typedef struct {
    int n;
    int crashed;
    dbq_result_t last;
} acc_t;

static mt_status_t count_row(void *ctx, const dbq_result_t *r) {
    acc_t *a = ctx;
    a->n++;
    a->crashed += strcmp(r->status, "crashed") == 0;
    a->last = *r;
    return 0;
}

/* The picks dbq_results --best walks for shape E=e at batch size bs (0: every one). */
static acc_t best_rows(dbq_t *q, uint32_t e, uint32_t bs) {
    dbq_filter_t f = {.best = true, .e = e, .batch_size = bs};
    acc_t a = {0};
    char err[300];
    assert_int_equal(dbq_results(q, &f, count_row, &a, err, sizeof err), MT_OK);
    return a;
}

static void test_queries(void **state) {
    fixture_t *fx = *state;
    dbq_t *q = NULL;
    char err[300];
    assert_int_equal(dbq_open(fx->db, &q, err, sizeof err), MT_OK);
    dbq_filter_t f;
    acc_t a;
    memset(&f, 0, sizeof f);
    memset(&a, 0, sizeof a);
    assert_int_equal(dbq_results(q, &f, count_row, &a, err, sizeof err), MT_OK);
    assert_int_equal(a.n, 2 * 4 * 5 + 1);
    assert_int_equal(a.crashed, 8);
    /* Best of shape E=128 per batch size: 4 sizes; M=4096 is config 3. */
    a = best_rows(q, 128, 0);
    assert_int_equal(a.n, 4);
    assert_int_equal(a.crashed, 0);
    assert_int_equal(a.last.batch_size, 4096);
    assert_int_equal(a.last.config_id, 3);
    assert_string_equal(a.last.export_dir, "sim");
    /* Status filter and limit. */
    memset(&f, 0, sizeof f);
    memset(&a, 0, sizeof a);
    snprintf(f.status, sizeof f.status, "crashed");
    f.limit = 3;
    assert_int_equal(dbq_results(q, &f, count_row, &a, err, sizeof err), MT_OK);
    assert_int_equal(a.n, 3);
    assert_int_equal(a.crashed, 3);
    dbq_close(&q);
    /* Read-only: a write through a query connection is impossible, and a missing file
     * is not created. */
    assert_int_not_equal(dbq_open("/nonexistent/m.db", &q, err, sizeof err), MT_OK);
    assert_null(q);
}

/* Where a sweep re-measured finalists side by side (phase 2: the decide step, halving), only
 * those rows compete at that (device name, shape, batch size): a first-pass row another GPU
 * of the same name measured faster is not the pick, nor the runner-up. A device of another
 * name keeps its own first-pass best, and other batch sizes are unchanged. */
static void test_final_phase(void **state) {
    fixture_t *fx = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(fx->db, &db), SQLITE_OK);
    /* shape 1 at M=16: config 1 reads 19 us in the first pass on device 1; configs 2 and 3
     * re-measured side by side on device 2 (the same name) at 24 and 25 us. */
    tmpdb_exec(db, "UPDATE results SET phase = 2, device_id = 2, median_us = 24, min_us = 23 WHERE sweep_id = 1"
                   " AND shape_id = 1 AND batch_size = 16 AND config_id = 2;"
                   "UPDATE results SET phase = 2, device_id = 2, median_us = 25, min_us = 24 WHERE sweep_id = 1"
                   " AND shape_id = 1 AND batch_size = 16 AND config_id = 3;"
                   "INSERT INTO devices (id, name, uuid) VALUES (3, 'NVIDIA H100', 'GPU-3');"
                   "UPDATE results SET status = 'ok', device_id = 3, median_us = 30, min_us = 29 WHERE sweep_id = 1"
                   " AND shape_id = 1 AND batch_size = 16 AND config_id = 4;");
    sqlite3_close(db);

    exp_report_t rep;
    run_export(fx, 1, true, &rep); /* partial: the H100 measured one batch size only */
    assert_non_null(find_file(&rep, SIM1));
    exp_report_clear(&rep);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fx->out, SIM1);
    json_t *root = json_load_file(path, 0, NULL);
    assert_non_null(root);
    check_entry(root, "16", 32, 64, 64, 16, 4, 2); /* config 2, not config 1's 19 us */
    check_entry(root, "1", 16, 64, 128, 1, 4, 3);  /* no phase 2 there: config 1 as before */
    json_decref(root);
    snprintf(path, sizeof path, "%s/sim/E=128,N=768,device_name=NVIDIA_H100.json", fx->out);
    root = json_load_file(path, 0, NULL);
    assert_non_null(root);
    assert_int_equal(json_object_size(root), 1);
    check_entry(root, "16", 128, 256, 64, 1, 8, 5);
    json_decref(root);
    snprintf(path, sizeof path, "%s/sim/manifest.json", fx->out);
    json_t *man = json_load_file(path, 0, NULL);
    assert_non_null(man);
    json_t *e16 = json_object_get(
        json_object_get(json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json"), "entries"), "16");
    assert_true(json_real_value(json_object_get(e16, "median_us")) == 24.0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e16, "runner_up"), "config_id")), 3);
    json_decref(man);

    dbq_t *q = NULL;
    char err[300];
    assert_int_equal(dbq_open(fx->db, &q, err, sizeof err), MT_OK);
    acc_t a = best_rows(q, 128, 16);
    assert_int_equal(a.n, 1);
    assert_int_equal(a.last.config_id, 2);
    /* history: per device name, H100 (config 4) then H200 (config 2) */
    dbq_hist_filter_t h;
    memset(&h, 0, sizeof h);
    h.sweep_id = 1;
    h.e = 128;
    h.batch_size = 16;
    memset(&a, 0, sizeof a);
    assert_int_equal(dbq_history(q, &h, count_row, &a, err, sizeof err), MT_OK);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.last.config_id, 2);
    assert_string_equal(a.last.device_name, "NVIDIA H200");
    dbq_close(&q);
}

/* The near-tie margin: the gap over the pair's combined deviation; equal medians are a
 * tie, and a gap without any deviation is no tie at all. */
static void test_margin(void **state) {
    (void)state;
    assert_true(exp_margin_sd(100.0, 3.0, 105.0, 4.0) == 1.0);
    assert_true(exp_margin_sd(100.0, 0.3, 100.3, 0.4) < EXP_NEAR_TIE_SD);
    assert_true(exp_margin_sd(100.0, 0.3, 110.0, 0.4) > EXP_NEAR_TIE_SD);
    assert_true(exp_margin_sd(50.0, 0.0, 50.0, 0.0) == 0.0);
    assert_true(exp_margin_sd(50.0, 0.0, 51.0, 0.0) > 1e300);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_files, setup, tmpdir_teardown),
        cmocka_unit_test(test_margin),
        cmocka_unit_test_setup_teardown(test_reexport, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_queries, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_final_phase, setup, tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
