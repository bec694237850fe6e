/* exports.c - the exports rows (see exports.h). */
#include "exports.h"

#include <sqlite3.h>
#include <stdbool.h>

#include "mt.h"

static const char k_sql_insert[] =
    "INSERT INTO exports (created, out_dir, path, sweep_ids, entries, changed_entries, content_hash)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

mt_status_t dbx_exports_add(const char *db_path, const char *out_dir, const dbx_export_t *rows, size_t n, char *err,
                            size_t errlen) {
    int rc = MT_OK;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    bool in_tx = false;
    if (n == 0) return MT_OK;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        mt_fmt(err, errlen, "%s: %s", db_path, db ? sqlite3_errmsg(db) : "cannot open");
        rc = MT_IO;
        goto out;
    }
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto fail;
    in_tx = true;
    if (sqlite3_prepare_v2(db, k_sql_insert, -1, &st, NULL) != SQLITE_OK) goto fail;
    for (size_t i = 0; i < n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, mt_wall_s());
        sqlite3_bind_text(st, 2, out_dir, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, rows[i].path, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, rows[i].sweep_ids, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, rows[i].entries);
        sqlite3_bind_int64(st, 6, rows[i].changed);
        sqlite3_bind_text(st, 7, rows[i].content_hash, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) goto fail;
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto fail;
    in_tx = false;
    goto out;
fail:
    mt_fmt(err, errlen, "%s: %s", db_path, sqlite3_errmsg(db));
    rc = sqlite3_errcode(db) == SQLITE_BUSY ? MT_BUSY : MT_ERR;
out:
    sqlite3_finalize(st);
    if (in_tx) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return rc;
}

mt_status_t dbx_exports_writable(const char *db_path, char *err, size_t errlen) {
    int rc = MT_OK;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        mt_fmt(err, errlen, "%s: %s", db_path, db ? sqlite3_errmsg(db) : "cannot open");
        rc = MT_IO;
        goto out;
    }
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_db_readonly(db, "main") == 1) {
        mt_fmt(err, errlen, "%s is read-only: an export records its files in the database; nothing written", db_path);
        rc = MT_INVAL;
        goto out;
    }
    int src = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        int code = sqlite3_errcode(db) & 0xff;
        mt_fmt(err, errlen, "%s: %s: an export records its files in the database; nothing written", db_path,
               sqlite3_errmsg(db));
        rc = code == SQLITE_BUSY ? MT_BUSY : code == SQLITE_READONLY ? MT_INVAL : MT_IO;
        goto out;
    }
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
out:
    sqlite3_close(db);
    return rc;
}
