/* tmpdb.h - a database file in a fresh temporary directory, for unit tests. */
#ifndef TMPDB_H
#define TMPDB_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *tag; /* tmpdb_setup's tag (NULL: "test") */
    char dir[64];
    char path[128]; /* dir/t.db */
} tmpdb_t;

/* Makes /tmp/mt_<tag>_XXXXXX and sets path inside it; 0 or -1 (a cmocka setup result). */
int tmpdb_make(tmpdb_t *t, const char *tag);
/* Removes the database, its WAL and shared-memory files, and the directory. */
void tmpdb_remove(tmpdb_t *t);
/* cmocka setup and teardown for a test whose initial state is a tmpdb_t
 * (cmocka_unit_test_prestate_setup_teardown): tmpdb_make with its tag, and tmpdb_remove. */
int tmpdb_setup(void **state);
int tmpdb_teardown(void **state);
/* The first column of the first row of sql, read on a read-only connection; -1 when no row. */
int64_t tmpdb_query_int(const char *path, const char *sql);

/* A test's own directory: dir is /tmp/<tag>_XXXXXX, db a database path in it (m.db) and out a
 * second path in it (neither is made). */
typedef struct {
    char dir[64];
    char db[128];
    char out[128];
} tmpdir_t;

/* A zeroed fixture of size bytes that begins with a tmpdir_t, made for tag with out named
 * out_name; a failure fails the test. Released by tmpdir_teardown. */
void *tmpdir_new(size_t size, const char *tag, const char *out_name);
/* cmocka teardown for a tmpdir_new fixture in *state: removes its directory and frees it. */
int tmpdir_teardown(void **state);

struct sqlite3;
/* Runs sql on db; a failure fails the test with the statement and SQLite's message. */
void tmpdb_exec(struct sqlite3 *db, const char *sql);
/* The whole file (up to 1 MiB) as a string to free(); NULL when it cannot be read. */
char *tmpdb_read_file(const char *path);

/* Opens path and lays out the current schema (db/schema.sql) in it; the caller closes it. */
struct sqlite3 *tmpdb_schema(const char *path);
/* Removes dir and everything in it; a failure fails the test. */
void tmpdb_rmdir(const char *dir);

#endif
