/* tmpdb.h - a database file in a fresh temporary directory, for unit tests. */
#ifndef TMPDB_H
#define TMPDB_H

#include <stdint.h>

typedef struct {
    char dir[64];
    char path[128]; /* dir/t.db */
} tmpdb_t;

/* Makes /tmp/mt_<tag>_XXXXXX and sets path inside it; 0 or -1 (a cmocka setup result). */
int tmpdb_make(tmpdb_t *t, const char *tag);
/* Removes the database, its WAL and shared-memory files, and the directory. */
void tmpdb_remove(tmpdb_t *t);
/* The first column of the first row of sql, read on a read-only connection; -1 when no row. */
int64_t tmpdb_query_int(const char *path, const char *sql);

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
