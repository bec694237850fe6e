/* tmpdb.c - temporary databases for unit tests. See tmpdb.h. */
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
#include "tmpdb.h"

int tmpdb_make(tmpdb_t *t, const char *tag) {
    snprintf(t->dir, sizeof t->dir, "/tmp/mt_%s_XXXXXX", tag);
    if (!mkdtemp(t->dir)) return -1;
    snprintf(t->path, sizeof t->path, "%s/t.db", t->dir);
    return 0;
}

void tmpdb_remove(tmpdb_t *t) {
    char p[160];
    const char *sfx[] = {"", "-wal", "-shm", ".lock"};
    for (int i = 0; i < 4; i++) unlink(mt_fmt(p, sizeof p, "%s%s", t->path, sfx[i]));
    rmdir(t->dir);
}

int tmpdb_setup(void **state) {
    tmpdb_t *t = *state;
    return tmpdb_make(t, t->tag ? t->tag : "test");
}

int tmpdb_teardown(void **state) {
    tmpdb_remove(*state);
    return 0;
}

int64_t tmpdb_query_int(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

void tmpdb_exec(sqlite3 *db, const char *sql) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s: %s", sql, msg);
}

char *tmpdb_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

struct sqlite3 *tmpdb_schema(const char *path) {
    char *schema = tmpdb_read_file(MT_SOURCE_DIR "/db/schema.sql");
    assert_non_null(schema);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    tmpdb_exec(db, schema);
    free(schema);
    return db;
}

void tmpdb_rmdir(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

void *tmpdir_new(size_t size, const char *tag, const char *out_name) {
    assert_true(size >= sizeof(tmpdir_t));
    tmpdir_t *t = calloc(1, size);
    assert_non_null(t);
    snprintf(t->dir, sizeof t->dir, "/tmp/%s_XXXXXX", tag);
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->db, sizeof t->db, "%s/m.db", t->dir);
    snprintf(t->out, sizeof t->out, "%s/%s", t->dir, out_name);
    return t;
}

int tmpdir_teardown(void **state) {
    tmpdir_t *t = *state;
    tmpdb_rmdir(t->dir);
    free(t);
    return 0;
}
