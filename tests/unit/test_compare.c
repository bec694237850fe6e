/* test_compare.c - which sweep "prev" and --compare-to last pick: the previous done sweep of
 * the same spec on the same device, also when the older sweep's spec was stored before a
 * field existed (an upgraded database). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "compare.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "query.h"
#include "tmpdb.h"

/* Stores sweep id with the packed spec of one shape at M = 1, 16 under backend (NULL: the
 * field unset, as a spec stored before it existed) and chunk (with max_attempts 3 when
 * set, as older versions stored them), done, with ok results on device 1. */
static void add_sweep(sqlite3 *db, int id, const char *backend, uint32_t chunk) {
    Moetune__SweepSpec sp = MOETUNE__SWEEP_SPEC__INIT;
    Moetune__Shape sh = MOETUNE__SHAPE__INIT, *shapes[1] = {&sh};
    uint32_t bs[2] = {1, 16};
    sh.e = 8;
    sh.n = 768;
    sh.k = 2048;
    sh.topk = 2;
    sh.dtype = (char *)"bf16";
    sp.name = (char *)"nightly";
    sp.n_shapes = 1;
    sp.shapes = shapes;
    sp.n_batch_sizes = 2;
    sp.batch_sizes = bs;
    sp.strategy = (char *)"exhaustive";
    if (backend) sp.backend = (char *)backend;
    sp.chunk = chunk;
    sp.max_attempts = chunk ? 3 : 0;
    size_t n = moetune__sweep_spec__get_packed_size(&sp);
    uint8_t *buf = malloc(n + 1);
    assert_non_null(buf);
    moetune__sweep_spec__pack(&sp, buf);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO sweeps (id, name, spec, state, created) VALUES (?1, 'n', ?2,"
                                        " 'done', ?1)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int(st, 1, id);
    sqlite3_bind_blob(st, 2, buf, (int)n, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    free(buf);
    char sql[600];
    snprintf(sql, sizeof sql,
             "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, stddev_us,"
             " samples, device_id, backend, compiler, kernel_hash, created)"
             " SELECT %d, 1, 1, bs, 'ok', 10.0, 9.0, 0.1, 20, 1, 'sim', 'sim', 'kh', %d"
             " FROM (SELECT 1 AS bs UNION SELECT 16)",
             id, id);
    tmpdb_exec(db, sql);
}

static void test_prev_across_upgrade(void **state) {
    tmpdb_t *t = *state;
    sqlite3 *db = NULL;
    char *schema = tmpdb_read_file(MT_SOURCE_DIR "/db/schema.sql");
    assert_non_null(schema);
    assert_int_equal(sqlite3_open(t->path, &db), SQLITE_OK);
    tmpdb_exec(db, schema);
    free(schema);
    tmpdb_exec(db, "INSERT INTO devices (id, name, uuid) VALUES (1, 'NVIDIA H200', 'SIM-1');"
                   "INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (1, 8, 768, 2048, 2, 'bf16');"
                   "INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3);");
    add_sweep(db, 1, NULL, 16); /* stored before SweepSpec.backend existed, with the old defaults */
    add_sweep(db, 2, "sim", 0);
    sqlite3_close(db);

    dbq_t *q = NULL;
    char err[400] = "";
    uint64_t prev = 0, last = 0;
    assert_int_equal(dbq_open(t->path, &q, err, sizeof err), MT_OK);
    assert_int_equal(cmp_resolve(q, "last", &last, err, sizeof err), MT_OK);
    assert_int_equal(last, 2);
    if (cmp_resolve(q, "prev", &prev, err, sizeof err) != MT_OK) fail_msg("prev: %s", err);
    assert_int_equal(prev, 1);
    assert_int_equal(cmp_previous(q, 2, &prev, err, sizeof err), MT_OK);
    assert_int_equal(prev, 1);
    dbq_close(&q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_prev_across_upgrade, tmpdb_setup, tmpdb_teardown,
                                                 &(tmpdb_t){.tag = "test_compare"}),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
