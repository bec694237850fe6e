/* test_store.c - migration, re-open, idempotent result inserts, leased jobs
 * returned to pending on restart, and the embedded schema matching db/schema.sql. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "mt.h"
#include "query.h"
#include "scheduler.h"
#include "store.h"
#include "tmpdb.h"

static tmpdb_t g_db = {.tag = "store"}; /* each test's own (tmpdb_setup) */

static int64_t query_int(const char *sql) { return tmpdb_query_int(g_db.path, sql); }

static void test_migrate_fresh(void **state) {
    char err[256];
    store_t *s = NULL;
    int version = -1;
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(store_user_version(s, &version), MT_OK);
    assert_int_equal(version, STORE_SCHEMA_VERSION);
    store_close(&s);
    assert_null(s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('devices',"
                               "'workers','sweeps','shapes','configs','rejected','jobs','job_configs','crashes',"
                               "'results','exports')"),
                     11);
    assert_int_equal(query_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
    store_close(&s); /* NULL-safe */
}

static void test_reopen_keeps_data(void **state) {
    char err[256];
    store_t *s = NULL;
    uint64_t sweep = 0;
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(store_sweep_insert(s, "keep", "x", 1, 100, &sweep), MT_OK);
    store_close(&s);
    /* a second open must not apply the schema again (CREATE TABLE would fail) */
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sweeps WHERE name = 'keep'"), 1);
    assert_int_equal(query_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
}

/* Counts the rows a read-only walk sees, checking the schema-2 fields. */
static mt_status_t count_v2(void *ctx, const dbq_result_t *r) {
    int *n = ctx;
    if (r->median_us == 5.0 && r->versions[0] == '\0' && r->up_us == 0 && r->down_us == 0) (*n)++;
    return 0;
}

/* The rows every old schema's test starts from: a done sweep, a shape and a config. */
#define OLD_ROWS                                                                                                       \
    "INSERT INTO sweeps (name, spec, state, created) VALUES ('old', x'00', 'done', 1);"                                \
    "INSERT INTO shapes (e, n, k, topk, dtype) VALUES (8, 256, 256, 2, 'bf16');"                                       \
    "INSERT INTO configs (block_m, block_n, block_k, group_m, num_warps, num_stages) VALUES (16, 64, 64, 1, 4, 2);"

/* Lays the test database out by tests/unit/support/NAME (an earlier schema) and fills it
 * with OLD_ROWS and then rows. */
static void old_db(const char *name, const char *rows) {
    static char sql[65536];
    char path[512];
    sqlite3 *db = NULL;
    FILE *f = fopen(mt_fmt(path, sizeof path, "%s/tests/unit/support/%s", MT_SOURCE_DIR, name), "rb");
    assert_non_null(f);
    size_t n = fread(sql, 1, sizeof sql - 1, f);
    fclose(f);
    sql[n] = '\0';
    assert_int_equal(sqlite3_open(g_db.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, OLD_ROWS, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, rows, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* An ok sim row of sweep 1, shape 1, config 1 at batch size 1, created at 2. */
static store_result_t ok_row(double median_us, uint32_t samples, uint32_t phase) {
    return (store_result_t){.sweep_id = 1,
                            .shape_id = 1,
                            .config_id = 1,
                            .batch_size = 1,
                            .status = MOETUNE__STATUS__STATUS_OK,
                            .median_us = median_us,
                            .samples = samples,
                            .backend = "sim",
                            .compiler = "sim",
                            .created = 2,
                            .phase = phase};
}

/* A v1 database (the schema as it was) gets the v2 columns by ALTER TABLE and keeps its rows. */
static void test_migrate_v1(void **state) {
    char err[256];
    store_t *s = NULL;
    old_db("schema_v1.sql", "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us,"
                            " backend, compiler, created) VALUES (1, 1, 1, 1, 'ok', 5.0, 'sim', 'sim', 1);"
                            "INSERT INTO workers (worker_id, compiler) VALUES ('w0', 'sim');"
                            "PRAGMA user_version = 1;");
    assert_int_equal(query_int("SELECT COUNT(*) FROM pragma_table_info('results') WHERE name IN ('versions',"
                               " 'up_us', 'down_us')"),
                     0);
    /* the CLI reads a v1 file as it is: versions '' and up/down 0 */
    dbq_t *q = NULL;
    int seen = 0;
    assert_int_equal(dbq_open(g_db.path, &q, err, sizeof err), MT_OK);
    assert_int_equal(dbq_results(q, NULL, count_v2, &seen, err, sizeof err), MT_OK);
    dbq_close(&q);
    assert_int_equal(seen, 1);

    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    store_close(&s);
    assert_int_equal(query_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
    seen = 0;
    assert_int_equal(dbq_open(g_db.path, &q, err, sizeof err), MT_OK);
    assert_int_equal(dbq_results(q, NULL, count_v2, &seen, err, sizeof err), MT_OK);
    dbq_close(&q);
    assert_int_equal(seen, 1); /* NULLs of the migrated row read as '' and 0 */
    assert_int_equal(query_int("SELECT COUNT(*) FROM pragma_table_info('results') WHERE (name = 'versions' AND"
                               " type = 'TEXT') OR (name IN ('up_us', 'down_us') AND type = 'REAL')"),
                     3);
    assert_int_equal(query_int("SELECT COUNT(*) FROM pragma_table_info('workers') WHERE name = 'versions'"
                               " AND type = 'TEXT'"),
                     1);
    /* the same columns as a fresh v2 database, in the same order */
    assert_int_equal(query_int("SELECT COUNT(*) FROM pragma_table_info('results')"),
                     26); /* v3's timed_us, v4's phase */
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('results') WHERE name = 'down_us'"), 23);
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('results') WHERE name = 'timed_us'"), 24);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE median_us = 5.0 AND versions IS NULL"
                               " AND up_us IS NULL"),
                     1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM workers WHERE worker_id = 'w0'"), 1);
    /* v3: the rebuilt table takes 'pruned', still refuses an unknown status, keeps its index */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(g_db.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us,"
                                  " backend, compiler, created) VALUES (1, 1, 1, 2, 'pruned', 9.0, 'sim', 'sim', 1)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(db,
                                      "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status,"
                                      " backend, compiler, created) VALUES (1, 1, 1, 3, 'bogus', 'sim', 'sim', 1)",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    sqlite3_close(db);
    /* v3's rebuild made the index results_best; v5 drops it */
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'results_best'"), 0);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE name = 'results_v3'"), 0);
    /* v3: the shapes table rebuilt with the routing in its identity, ids and references kept */
    assert_int_equal(query_int("SELECT COUNT(*) FROM shapes WHERE id = 1 AND e = 8 AND routing = ''"), 1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results r JOIN shapes s ON s.id = r.shape_id"), 2); /* + pruned */
    assert_int_equal(query_int("SELECT COUNT(*) FROM pragma_foreign_key_check"), 0);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE name IN ('shapes_v3')"), 0);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE name = 'routings'"), 1);
    {
        krn_shape_t sh = {.e = 8, .n = 256, .k = 256, .topk = 2, .dtype = "bf16"};
        uint64_t id_uniform = 0, id_captured = 0, again = 0;
        assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
        assert_int_equal(store_shape_upsert(s, &sh, &id_uniform), MT_OK);
        assert_int_equal(id_uniform, 1);
        memset(sh.routing, 'a', 64);
        assert_int_equal(store_shape_upsert(s, &sh, &id_captured), MT_OK);
        assert_int_equal(store_shape_upsert(s, &sh, &again), MT_OK);
        assert_true(id_captured != id_uniform);
        assert_int_equal(again, id_captured);
        krn_shape_t back;
        assert_int_equal(store_shape_get(s, id_captured, &back), MT_OK);
        assert_string_equal(back.routing, sh.routing);
        assert_int_equal(store_shape_get(s, id_uniform, &back), MT_OK);
        assert_string_equal(back.routing, "");
        store_close(&s);
    }
    /* foreign keys are on again after the rebuild */
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(store_job_insert(s, 99, 1, NULL, 1, &(uint64_t){0}), MT_IO);
    store_close(&s);

    /* a second open finds version 2 and changes nothing */
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    store_close(&s);
    assert_int_equal(query_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
}

/* A fresh database's results table, for the column count above. */
static void test_fresh_columns(void **state) {
    char err[256];
    store_t *s = NULL;
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM pragma_table_info('results')"), 26);
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('results') WHERE name = 'down_us'"), 23);
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('results') WHERE name = 'phase'"), 25);
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('jobs') WHERE name = 'batch_sizes'"), 12);
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('workers') WHERE name = 'versions'"), 10);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'results'"
                               " AND sql IS NOT NULL"),
                     0); /* only the UNIQUE constraint's own index */
}

/* A v4 database loses the results_best index and nothing else: its rows, the UNIQUE
 * constraint (a resend is kept out) and the reads by shape and batch size stay. v4 is v3 with
 * halving's three columns (the layout test_migrate_v3 checks against a fresh v4 file). */
static void test_migrate_v4(void **state) {
    char err[256];
    store_t *s = NULL;
    old_db("schema_v3.sql",
           "ALTER TABLE jobs ADD COLUMN phase INTEGER NOT NULL DEFAULT 1;"
           "ALTER TABLE jobs ADD COLUMN batch_sizes TEXT;"
           "ALTER TABLE results ADD COLUMN phase INTEGER NOT NULL DEFAULT 1;"
           "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us,"
           " backend, compiler, created, phase) VALUES (1, 1, 1, 1, 'ok', 5.0, 'sim', 'sim', 1, 1);"
           "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us,"
           " backend, compiler, created, phase) VALUES (1, 1, 1, 2, 'pruned', 9.0, 'sim', 'sim', 1, 1);"
           "PRAGMA user_version = 4;");
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'results_best'"), 1);
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(query_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'results_best'"), 0);
    /* schema 6: the ship guard's table */
    assert_int_equal(query_int("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'guard'"), 1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results"), 2);
    store_result_t r = ok_row(3.0, 10, 1);
    int outcome = -1;
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    assert_int_equal(outcome, STORE_ROW_KEPT);
    r.batch_size = 16;
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    assert_int_equal(outcome, STORE_ROW_NEW);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results"), 3);
    assert_int_equal(query_int("SELECT MIN(median_us) FROM results WHERE shape_id = 1 AND status = 'ok'"
                               " AND batch_size = 1"),
                     5);
}

/* A v3 database (the schema before halving) gets the jobs' phase and batch sizes and the
 * results' phase by ALTER TABLE, keeps every row (read as phase 1), and takes phase rows after. */
static void test_migrate_v3(void **state) {
    char err[256];
    store_t *s = NULL;
    old_db("schema_v3.sql",
           "INSERT INTO jobs (sweep_id, shape_id, state, created) VALUES (1, 1, 'done', 1);"
           "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us,"
           " backend, compiler, created, timed_us) VALUES (1, 1, 1, 1, 'ok', 5.0, 'sim', 'sim', 1, 50);"
           "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us,"
           " backend, compiler, created) VALUES (1, 1, 1, 2, 'pruned', 9.0, 'sim', 'sim', 1);"
           "PRAGMA user_version = 3;");
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(query_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE phase = 1"), 2);
    assert_int_equal(
        query_int("SELECT COUNT(*) FROM results WHERE status = 'ok' AND median_us = 5.0 AND timed_us = 50"), 1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE phase = 1 AND batch_sizes IS NULL AND state = 'done'"),
                     1);
    /* the layout a fresh v4 database has */
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('results') WHERE name = 'phase'"), 25);
    assert_int_equal(query_int("SELECT cid FROM pragma_table_info('jobs') WHERE name = 'batch_sizes'"), 12);
    /* a phase-2 row replaces the phase-1 one; a phase-1 resend then changes nothing */
    store_result_t r = ok_row(4.0, 40, 2);
    int outcome = -1;
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    assert_int_equal(outcome, STORE_ROW_REPLACED);
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    assert_int_equal(outcome, STORE_ROW_KEPT); /* the same phase again: exactly once */
    r.phase = 1;
    r.median_us = 7.0;
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    assert_int_equal(outcome, STORE_ROW_KEPT);
    uint32_t rows = 0;
    assert_int_equal(store_result_count_from(s, 1, 1, 1, 2, 0, &rows), MT_OK);
    assert_int_equal(rows, 1);
    assert_int_equal(store_result_count_from(s, 1, 1, 1, 1, 0, &rows), MT_OK);
    assert_int_equal(rows, 2);
    /* at one batch size: the phase-2 row is at 1, the phase-1 row at 2 */
    assert_int_equal(store_result_count_from(s, 1, 1, 1, 2, 1, &rows), MT_OK);
    assert_int_equal(rows, 1);
    assert_int_equal(store_result_count_from(s, 1, 1, 1, 2, 2, &rows), MT_OK);
    assert_int_equal(rows, 0);
    assert_int_equal(store_result_count_from(s, 1, 1, 1, 1, 2, &rows), MT_OK);
    assert_int_equal(rows, 1);
    uint64_t job = 0;
    assert_int_equal(store_job_insert_phase(s, 1, 1, 2, "1,16", NULL, 3, &job), MT_OK);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results"), 2);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE batch_size = 1 AND phase = 2 AND median_us = 4.0"
                               " AND samples = 40"),
                     1);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE phase = 2 AND batch_sizes = '1,16'"), 1);
}

static void test_newer_schema_refused(void **state) {
    char err[256] = "";
    sqlite3 *db = NULL;
    store_t *s = NULL;
    assert_int_equal(sqlite3_open(g_db.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 7", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_INVAL);
    assert_null(s);
    assert_non_null(strstr(err, "newer"));
}

static void test_bad_path(void **state) {
    char err[256] = "";
    store_t *s = NULL;
    assert_int_not_equal(store_open("/nonexistent-dir/x/y.db", &s, err, sizeof err), MT_OK);
    assert_null(s);
    assert_true(strlen(err) > 0);
}

/* The ids seed_job stored. */
typedef struct {
    uint64_t sweep, shape, cfg, job;
} seeded_t;

/* Opens the store on g_db and stores one sweep, shape and config (each upserted twice: the
 * same id) and a job of that config; the store, for the caller to close. */
static store_t *seed_job(seeded_t *x) {
    char err[256];
    store_t *s = NULL;
    krn_shape_t sh = {.e = 8, .n = 256, .k = 256, .topk = 2, .dtype = "bf16"};
    krn_config_t c = {16, 64, 64, 1, 4, 2};
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(store_sweep_insert(s, "s", "", 0, 1, &x->sweep), MT_OK);
    assert_int_equal(store_shape_upsert(s, &sh, &x->shape), MT_OK);
    uint64_t shape2 = 0, cfg2 = 0;
    assert_int_equal(store_shape_upsert(s, &sh, &shape2), MT_OK);
    assert_int_equal(shape2, x->shape);
    assert_int_equal(store_config_upsert(s, &c, &x->cfg), MT_OK);
    assert_int_equal(store_config_upsert(s, &c, &cfg2), MT_OK);
    assert_int_equal(cfg2, x->cfg);
    assert_int_equal(store_job_insert(s, x->sweep, x->shape, NULL, 1, &x->job), MT_OK);
    assert_int_equal(store_job_config_insert(s, x->job, x->cfg), MT_OK);
    return s;
}

/* A result row of x's job at batch size bs with status st, from the sim backend; the
 * measurements are the caller's to fill in. */
static store_result_t seeded_row(const seeded_t *x, uint32_t bs, int st) {
    store_result_t r = {.sweep_id = x->sweep,
                        .shape_id = x->shape,
                        .config_id = x->cfg,
                        .job_id = x->job,
                        .batch_size = bs,
                        .status = st,
                        .backend = "sim",
                        .compiler = "sim"};
    return r;
}

static void test_idempotent_result(void **state) {
    seeded_t x;
    store_t *s = seed_job(&x);
    int outcome = STORE_ROW_KEPT;
    store_result_t r = seeded_row(&x, 16, MOETUNE__STATUS__STATUS_OK);
    r.median_us = 12.5, r.min_us = 12.0, r.mean_us = 12.6, r.stddev_us = 0.1, r.samples = 20;
    r.worker_id = "w1", r.created = 5, r.versions = "kernel=moetune triton=3.6.0", r.up_us = 8.25, r.down_us = 4.5;
    assert_int_equal(store_begin(s), MT_OK);
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    assert_int_equal(outcome, STORE_ROW_NEW);
    r.median_us = 99.0; /* a resend must not overwrite */
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    assert_int_equal(outcome, STORE_ROW_KEPT);
    assert_int_equal(store_commit(s), MT_OK);
    r.status = 99;
    assert_int_equal(store_result_put(s, &r, &outcome), MT_INVAL);
    uint32_t n = 0;
    assert_int_equal(store_result_count(s, x.sweep, x.shape, x.cfg, &n), MT_OK);
    assert_int_equal(n, 1);
    store_sweep_counts_t rows;
    assert_int_equal(store_sweep_result_counts(s, x.sweep, &rows), MT_OK);
    assert_int_equal(rows.done, 1);
    assert_int_equal(rows.failed, 0);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results"), 1);
    assert_int_equal(query_int("SELECT CAST(median_us * 10 AS INTEGER) FROM results"), 125);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results WHERE versions = 'kernel=moetune triton=3.6.0'"
                               " AND up_us = 8.25 AND down_us = 4.5"),
                     1);
}

static void test_rollback_discards(void **state) {
    seeded_t x;
    store_t *s = seed_job(&x);
    int outcome = STORE_ROW_KEPT;
    store_result_t r = seeded_row(&x, 1, MOETUNE__STATUS__STATUS_TIMEOUT);
    assert_int_equal(store_begin(s), MT_OK);
    assert_int_equal(store_result_put(s, &r, &outcome), MT_OK);
    store_rollback(s);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM results"), 0);
}

static mt_status_t noop_send(void *ctx, const uint8_t *rid, size_t len, wire_env_t *env) { return MT_OK; }

static void test_leased_back_to_pending(void **state) {
    char err[256];
    seeded_t x;
    store_t *s = seed_job(&x);
    store_job_update_t u = {
        .id = x.job, .state = "leased", .attempts = 1, .worker_id = "w1", .lease_token = 77, .lease_expires_ms = 123};
    assert_int_equal(store_job_update(s, &u), MT_OK);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE state = 'leased'"), 1);

    /* the lease of a running sweep survives (the scheduler keeps it for its holder) */
    uint32_t n = 9;
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(store_requeue_leased(s, &n), MT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND worker_id = 'w1'"), 1);
    /* a finished sweep's leased job goes back to pending */
    assert_int_equal(store_sweep_set_state(s, x.sweep, "done", 2), MT_OK);
    assert_int_equal(store_requeue_leased(s, &n), MT_OK);
    assert_int_equal(n, 1);
    store_close(&s);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE state = 'pending' AND attempts = 1"), 1);

    /* and the scheduler does it on start */
    assert_int_equal(store_open(g_db.path, &s, err, sizeof err), MT_OK);
    assert_int_equal(store_sweep_set_state(s, x.sweep, "cancelled", 2), MT_OK);
    assert_int_equal(store_job_update(s, &u), MT_OK);
    sched_opts_t o = {.send = noop_send};
    sched_t *sc = sched_new(s, &o, 0, err, sizeof err);
    assert_non_null(sc);
    assert_int_equal(query_int("SELECT COUNT(*) FROM jobs WHERE state = 'leased'"), 0);
    sched_destroy(&sc);
    assert_null(sc);
    store_close(&s);
}

static void test_schema_file_matches(void **state) {
    char path[512];
    FILE *f = fopen(mt_fmt(path, sizeof path, "%s/db/schema.sql", MT_SOURCE_DIR), "rb");
    assert_non_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, store_schema_sql());
}

int main(void) {
    mt_log_init("test_store", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_migrate_fresh, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_reopen_keeps_data, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_migrate_v1, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_fresh_columns, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_migrate_v3, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_migrate_v4, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_newer_schema_refused, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test(test_bad_path),
        cmocka_unit_test_prestate_setup_teardown(test_idempotent_result, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_rollback_discards, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test_prestate_setup_teardown(test_leased_back_to_pending, tmpdb_setup, tmpdb_teardown, &g_db),
        cmocka_unit_test(test_schema_file_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
