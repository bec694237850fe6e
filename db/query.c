/* query.c - the CLI's read-only statements (see query.h). */
#include "query.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt.h"

struct dbq {
    sqlite3 *db;
    /* which walk of each k_sql_* array the file's schema takes: 0 (v1), 1 (v2: results has
     * versions, up_us, down_us; a v1 file reads them as '' and 0), 2 (v3: shapes has routing and
     * there is a routings table; older files read '') or 3 (v4 and later: results has phase;
     * older files read 1) */
    int walk;
    bool guard; /* schema 6 and later: the ship guard's table (coordinator/guard.h) */
};

/* Columns every result walk reads, in the order row_from() expects. */
#define RESULT_COLS                                                                                                    \
    "r.id AS rid, r.sweep_id, r.shape_id, r.config_id, s.e, s.n, s.k, s.topk, s.dtype,"                                \
    " s.block_n AS sbn, s.block_k AS sbk, c.block_m, c.block_n, c.block_k, c.group_m,"                                 \
    " c.num_warps, c.num_stages, r.batch_size, r.status, r.median_us, r.min_us, r.mean_us,"                            \
    " r.stddev_us, r.samples, r.detail, r.worker_id, COALESCE(d.name, 'unknown') AS dev,"                              \
    " COALESCE(d.uuid, ''), COALESCE(d.driver_version, ''), COALESCE(d.cuda_version, ''),"                             \
    " r.backend, r.compiler, COALESCE(r.kernel_hash, ''), r.created,"                                                  \
    " CASE WHEN r.backend = 'sim' THEN 'sim' ELSE r.compiler END AS dir"
/* The columns schema 2 added, and what a read-only walk of a v1 file reads instead. */
#define RESULT_COLS_V2 ", COALESCE(r.versions, ''), COALESCE(r.up_us, 0), COALESCE(r.down_us, 0)"
#define RESULT_COLS_V1 ", '', 0.0, 0.0"
/* Schema 3: the shape's routing and where that routing file came from. */
#define RESULT_COLS_V3 RESULT_COLS_V2 ", s.routing, COALESCE(rt.source, '')"
#define RESULT_COLS_PRE3(v) v ", '', ''"
#define RESULT_FROM_BASE                                                                                               \
    " FROM results r JOIN shapes s ON s.id = r.shape_id"                                                               \
    " JOIN configs c ON c.id = r.config_id"                                                                            \
    " LEFT JOIN devices d ON d.id = r.device_id"
#define RESULT_FROM_V3 RESULT_FROM_BASE " LEFT JOIN routings rt ON rt.sha256 = s.routing"
#define RESULT_WHERE                                                                                                   \
    " WHERE (?1 = 0 OR r.sweep_id = ?1) AND (?2 = 0 OR s.e = ?2) AND (?3 = 0 OR s.n = ?3)"                             \
    " AND (?4 = 0 OR s.k = ?4) AND (?5 = 0 OR s.topk = ?5) AND (?6 = '' OR s.dtype = ?6)"                              \
    " AND (?7 = 0 OR r.batch_size = ?7) AND (?8 = '' OR r.status = ?8)"

#define SQL_RESULTS(tail, RESULT_FROM, ph)                                                                             \
    "SELECT " RESULT_COLS tail RESULT_FROM RESULT_WHERE                                                                \
    " ORDER BY r.sweep_id, r.shape_id, r.batch_size, r.median_us, r.config_id LIMIT ?9"

#define EXPORT_DIR_DEV "CASE WHEN r.backend = 'sim' THEN 'sim' ELSE r.compiler END, COALESCE(d.name, 'unknown')"

/* The rows of cols from from_where (keep: more conditions on them) ranked by median, then
 * config id, within each part (rk 1 = the pick). A sweep's phase-2 rows (halving's
 * finalists, the decide step's near-ties), measured side by side in one job on one GPU,
 * decide where they exist: per (sweep, export dir, device name, shape, batch size) only the
 * rows of the latest phase measured there are ranked. A first-pass row the decide step did
 * not re-measure (it was not a finalist) may come from another GPU of the same name and read
 * a few percent faster than the re-measures (docs/performance.md). ph: the row's phase ("1"
 * for a file before schema 4). */
#define FINAL_RANKED(part, cols, from_where, ph, keep)                                                                 \
    "SELECT *, ROW_NUMBER() OVER (PARTITION BY " part " ORDER BY median_us, config_id) AS rk FROM (SELECT " cols       \
    ", " ph " AS ph, max(" ph ") OVER (PARTITION BY r.sweep_id, " EXPORT_DIR_DEV ", r.shape_id, r.batch_size)"         \
    " AS topph" from_where ") WHERE ph = topph" keep

#define SQL_BEST(tail, RESULT_FROM, ph)                                                                                \
    "SELECT * FROM (" FINAL_RANKED("shape_id, batch_size", RESULT_COLS tail,                                           \
                                   RESULT_FROM RESULT_WHERE " AND r.status = 'ok' AND r.median_us IS NOT NULL", ph,    \
                                   "") ") WHERE rk = 1 ORDER BY shape_id, batch_size LIMIT ?9"

/* What an export reads: ok rows of the selected sweeps (?1: a JSON array of ids, NULL =
 * all), with ?3 only the lowest median per (dir, device, shape, batch size). The
 * latest variant keeps only the rows of the newest sweep per (dir, device, shape). An
 * ok row without a median sorts first, so the exporter sees it and refuses it. */
#define EXPORT_WHERE " WHERE r.status = 'ok' AND (?1 IS NULL OR r.sweep_id IN (SELECT value FROM json_each(?1)))"
#define EXPORT_ORDER " ORDER BY dir, dev, e, n, dtype, sbn, sbk, k, topk, shape_id, batch_size, median_us, config_id"
#define SQL_EXPORT(tail, RESULT_FROM, ph)                                                                              \
    "SELECT * FROM (" FINAL_RANKED("dir, dev, shape_id, batch_size", RESULT_COLS tail, RESULT_FROM EXPORT_WHERE, ph,   \
                                   "") ") WHERE ?3 = 0 OR rk = 1" EXPORT_ORDER
#define SQL_EXPORT_LATEST(tail, RESULT_FROM, ph)                                                                       \
    "SELECT * FROM (" FINAL_RANKED(                                                                                    \
        "dir, dev, shape_id, batch_size",                                                                              \
        RESULT_COLS tail ", max(r.sweep_id) OVER (PARTITION BY " EXPORT_DIR_DEV ", r.shape_id) AS lsid",               \
        RESULT_FROM EXPORT_WHERE, ph, " AND sweep_id = lsid") ") WHERE ?3 = 0 OR rk = 1" EXPORT_ORDER

#define HISTORY_WHERE                                                                                                  \
    " WHERE (?1 = 0 OR r.sweep_id = ?1) AND (?2 = 0 OR s.e = ?2) AND (?3 = 0 OR s.n = ?3)"                             \
    " AND (?4 = 0 OR s.k = ?4) AND (?5 = 0 OR s.topk = ?5) AND (?6 = '' OR s.dtype = ?6)"                              \
    " AND (?7 = 0 OR r.batch_size = ?7) AND (?8 = '' OR COALESCE(d.name, 'unknown') = ?8)"                             \
    " AND (?9 = '' OR r.backend = ?9) AND r.status = 'ok' AND r.median_us IS NOT NULL"
#define HISTORY_ORDER " ORDER BY sweep_id, e, n, k, topk, dtype, sbn, sbk, dev, batch_size"
#define SQL_HISTORY(tail, RESULT_FROM, ph)                                                                             \
    "SELECT * FROM (" FINAL_RANKED("sweep_id, shape_id, dev, batch_size", RESULT_COLS tail, RESULT_FROM HISTORY_WHERE, \
                                   ph, "") ") WHERE rk = 1" HISTORY_ORDER

/* Each walk for a v1 file [0], a v2 file [1], a v3 file [2] and a file of schema 4 or later
 * (results.phase) [3]. */
#define SQL_BY_VERSION(sql)                                                                                            \
    {                                                                                                                  \
        sql(RESULT_COLS_PRE3(RESULT_COLS_V1), RESULT_FROM_BASE, "1"),                                                  \
            sql(RESULT_COLS_PRE3(RESULT_COLS_V2), RESULT_FROM_BASE, "1"), sql(RESULT_COLS_V3, RESULT_FROM_V3, "1"),    \
            sql(RESULT_COLS_V3, RESULT_FROM_V3, "r.phase")                                                             \
    }
static const char *const k_sql_results[4] = SQL_BY_VERSION(SQL_RESULTS);
static const char *const k_sql_best[4] = SQL_BY_VERSION(SQL_BEST);
static const char *const k_sql_export[4] = SQL_BY_VERSION(SQL_EXPORT);
static const char *const k_sql_export_latest[4] = SQL_BY_VERSION(SQL_EXPORT_LATEST);

/* Per (sweep, dir, device, shape) that has results, per batch size the sweep measured:
 * configs measured there (rows of any status), configs planned for the shape (its jobs'
 * configs and any config with a result), and the sweep's state. [1]: a file of schema 6 or
 * later leaves out the ship guard's configs outside the searched space (the guard table's
 * searched = 0), measured at their own batch sizes only, and its batch sizes between the keys. */
#define SQL_COVERAGE(notg, notgap)                                                                                     \
    "WITH sel AS (SELECT id, state FROM sweeps WHERE ?1 IS NULL OR id IN (SELECT value FROM json_each(?1))),"          \
    " plan AS (SELECT sweep_id, shape_id, count(*) AS n FROM ("                                                        \
    "   SELECT j.sweep_id, j.shape_id, jc.config_id FROM jobs j JOIN job_configs jc ON jc.job_id = j.id"               \
    "   WHERE j.sweep_id IN (SELECT id FROM sel)"                                                                      \
    "   UNION SELECT sweep_id, shape_id, config_id FROM results WHERE sweep_id IN (SELECT id FROM sel))"               \
    "  x WHERE 1" notg("x") " GROUP BY sweep_id, shape_id),"                                                           \
    " sizes AS (SELECT DISTINCT sweep_id, batch_size FROM results x WHERE sweep_id IN (SELECT id FROM sel)"            \
    notgap(x) "),"                                                                                                     \
    " meas AS (SELECT r.sweep_id, CASE WHEN r.backend = 'sim' THEN 'sim' ELSE r.compiler END AS dir,"                  \
    "   COALESCE(d.name, 'unknown') AS dev, r.shape_id, r.batch_size, count(DISTINCT r.config_id) AS n"                \
    "   FROM results r LEFT JOIN devices d ON d.id = r.device_id WHERE r.sweep_id IN (SELECT id FROM sel)"             \
    notg("r") "   GROUP BY r.sweep_id, dir, dev, r.shape_id, r.batch_size),"                                           \
    " files AS (SELECT DISTINCT sweep_id, dir, dev, shape_id FROM meas)"                                               \
    " SELECT f.sweep_id, f.dir, f.dev, f.shape_id, z.batch_size, COALESCE(m.n, 0), p.n, s.state"                       \
    " FROM files f JOIN sizes z ON z.sweep_id = f.sweep_id"                                                            \
    " JOIN plan p ON p.sweep_id = f.sweep_id AND p.shape_id = f.shape_id JOIN sel s ON s.id = f.sweep_id"              \
    " LEFT JOIN meas m ON m.sweep_id = f.sweep_id AND m.dir = f.dir AND m.dev = f.dev"                                 \
    "  AND m.shape_id = f.shape_id AND m.batch_size = z.batch_size"                                                    \
    " ORDER BY f.sweep_id, f.dir, f.dev, f.shape_id, z.batch_size"
#define COVERAGE_ALL(t) ""
#define COVERAGE_ALL_SIZES(t) ""
/* a batch size between the keys (the guard's "nearest" rows) is no planned batch size */
#define COVERAGE_NOT_GAP(t)                                                                                            \
    " AND NOT EXISTS (SELECT 1 FROM guard g WHERE g.sweep_id = " #t ".sweep_id AND g.batch_size = " #t ".batch_size"   \
    " AND g.role = 'nearest')"
#define COVERAGE_NOT_GUARD(t)                                                                                          \
    " AND NOT EXISTS (SELECT 1 FROM guard g WHERE g.sweep_id = " t ".sweep_id AND g.shape_id = " t ".shape_id"         \
    " AND g.config_id = " t ".config_id AND g.searched = 0)"
static const char *const k_sql_coverage[2] = {SQL_COVERAGE(COVERAGE_ALL, COVERAGE_ALL_SIZES),
                                              SQL_COVERAGE(COVERAGE_NOT_GUARD, COVERAGE_NOT_GAP)};
static const char *const k_sql_history[4] = SQL_BY_VERSION(SQL_HISTORY);

static const char k_sql_sweeps[] =
    "SELECT id, name, state, results_planned, created, COALESCE(finished, 0), spec FROM sweeps"
    " WHERE (?1 IS NULL OR state = ?1) ORDER BY id";

/* "file:" URI of path with immutable=1: reads the main file without the -shm file a WAL
 * database otherwise needs (and cannot create where the user may not write). */
static char *immutable_uri(const char *path) {
    size_t n = strlen(path);
    char *uri = mt_malloc(n * 3 + 32);
    if (!uri) return NULL;
    size_t o = (size_t)sprintf(uri, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '?' || *p == '#' || *p == '%' || *p < 0x20 || *p >= 0x7f)
            o += (size_t)sprintf(uri + o, "%%%02X", *p);
        else
            uri[o++] = (char)*p;
    }
    sprintf(uri + o, "?immutable=1");
    return uri;
}

/* Opens and checks one connection; sqlite's result code in *code. */
static int open_conn(const char *name, int flags, dbq_t *q, int *code, char *why, size_t whylen) {
    sqlite3_stmt *st = NULL;
    *code = sqlite3_open_v2(name, &q->db, flags, NULL);
    if (*code != SQLITE_OK) {
        mt_fmt(why, whylen, "%s", q->db ? sqlite3_errmsg(q->db) : "cannot open");
        return MT_IO;
    }
    sqlite3_busy_timeout(q->db, 5000);
    /* A file that is not a moetune store fails here rather than on the first walk. */
    *code = sqlite3_prepare_v2(q->db, "SELECT 1 FROM results, sweeps, shapes, configs LIMIT 0", -1, &st, NULL);
    if (*code != SQLITE_OK) {
        mt_fmt(why, whylen, "not a moetune database (%s)", sqlite3_errmsg(q->db));
        return MT_INVAL;
    }
    sqlite3_finalize(st);
    st = NULL;
    /* each schema's columns, probed in order: a file has those of every schema up to its own */
    static const char *const probes[] = {"SELECT versions, up_us, down_us FROM results LIMIT 0",
                                         "SELECT s.routing, rt.source FROM shapes s, routings rt LIMIT 0",
                                         "SELECT phase FROM results LIMIT 0"};
    q->walk = 0;
    for (size_t i = 0; i < sizeof probes / sizeof *probes && q->walk == (int)i; i++) {
        if (sqlite3_prepare_v2(q->db, probes[i], -1, &st, NULL) == SQLITE_OK) q->walk++;
        sqlite3_finalize(st);
        st = NULL;
    }
    q->guard = sqlite3_prepare_v2(q->db, "SELECT searched FROM guard LIMIT 0", -1, &st, NULL) == SQLITE_OK;
    sqlite3_finalize(st);
    return MT_OK;
}

mt_status_t dbq_open(const char *path, dbq_t **out, char *err, size_t errlen) {
    int rc = MT_OK, code = SQLITE_OK;
    char why[300], wal[4200];
    char *uri = NULL;
    dbq_t *q = NULL;
    *out = NULL;
    /* a FIFO would block SQLite's open */
    rc = mt_check_regular(path, false, err, errlen);
    if (rc != MT_OK) return rc == MT_NOTFOUND ? MT_IO : rc;
    q = mt_calloc(1, sizeof *q);
    if (!q) return MT_NOMEM;
    rc = open_conn(path, SQLITE_OPEN_READONLY, q, &code, why, sizeof why);
    /* A WAL file in a folder (or a file) the user cannot write: without a -wal file the
     * main file is the whole database, so it is read as immutable. */
    snprintf(wal, sizeof wal, "%s-wal", path);
    if (rc != MT_OK && ((code & 0xff) == SQLITE_READONLY || (code & 0xff) == SQLITE_CANTOPEN) &&
        access(path, R_OK) == 0 && access(wal, F_OK) != 0) {
        sqlite3_close(q->db);
        q->db = NULL;
        uri = immutable_uri(path);
        if (!uri) {
            rc = MT_NOMEM;
            goto out;
        }
        rc = open_conn(uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, q, &code, why, sizeof why);
    }
    if (rc != MT_OK) {
        mt_fmt(err, errlen, "%s: %s", path, why);
        goto out;
    }
    *out = q;
    q = NULL;
out:
    free(uri);
    dbq_close(&q);
    return rc;
}

void dbq_close(dbq_t **q) {
    if (!q || !*q) return;
    sqlite3_close((*q)->db);
    free(*q);
    *q = NULL;
}

static void col_text(sqlite3_stmt *st, int i, char *dst, size_t len) {
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(dst, len, "%s", t ? (const char *)t : "");
}

static uint32_t col_u32(sqlite3_stmt *st, int i) {
    sqlite3_int64 v = sqlite3_column_int64(st, i);
    return (v < 0 || v > UINT32_MAX) ? 0 : (uint32_t)v;
}

static void row_from(sqlite3_stmt *st, dbq_result_t *r) {
    memset(r, 0, sizeof *r);
    int i = 0;
    r->result_id = (uint64_t)sqlite3_column_int64(st, i++);
    r->sweep_id = (uint64_t)sqlite3_column_int64(st, i++);
    r->shape_id = (uint64_t)sqlite3_column_int64(st, i++);
    r->config_id = (uint64_t)sqlite3_column_int64(st, i++);
    r->shape.e = col_u32(st, i++);
    r->shape.n = col_u32(st, i++);
    r->shape.k = col_u32(st, i++);
    r->shape.topk = col_u32(st, i++);
    col_text(st, i++, r->shape.dtype, sizeof r->shape.dtype);
    r->shape.block_n = col_u32(st, i++);
    r->shape.block_k = col_u32(st, i++);
    for (int f = 0; f < KRN_N_FIELDS; f++) KRN_CONFIG_AT(&r->config, f) = col_u32(st, i++);
    r->batch_size = col_u32(st, i++);
    col_text(st, i++, r->status, sizeof r->status);
    r->median_us = sqlite3_column_double(st, i++);
    r->min_us = sqlite3_column_double(st, i++);
    r->mean_us = sqlite3_column_double(st, i++);
    r->stddev_us = sqlite3_column_double(st, i++);
    r->samples = col_u32(st, i++);
    col_text(st, i++, r->detail, sizeof r->detail);
    col_text(st, i++, r->worker_id, sizeof r->worker_id);
    r->device_name_cut = sqlite3_column_bytes(st, i) >= (int)sizeof r->device_name;
    col_text(st, i++, r->device_name, sizeof r->device_name);
    col_text(st, i++, r->device_uuid, sizeof r->device_uuid);
    col_text(st, i++, r->driver_version, sizeof r->driver_version);
    col_text(st, i++, r->cuda_version, sizeof r->cuda_version);
    col_text(st, i++, r->backend, sizeof r->backend);
    col_text(st, i++, r->compiler, sizeof r->compiler);
    col_text(st, i++, r->kernel_hash, sizeof r->kernel_hash);
    r->created = sqlite3_column_int64(st, i++);
    col_text(st, i++, r->export_dir, sizeof r->export_dir);
    r->versions = (const char *)sqlite3_column_text(st, i++);
    if (!r->versions) r->versions = "";
    r->up_us = sqlite3_column_double(st, i++);
    r->down_us = sqlite3_column_double(st, i++);
    col_text(st, i++, r->shape.routing, sizeof r->shape.routing);
    col_text(st, i++, r->routing_source, sizeof r->routing_source);
}

/* Steps st once: true with a row ready; false at the end, or on a failure with *rc set
 * and the reason in err. Every walk below is `while (rc == MT_OK && next_row(...))`. */
static bool next_row(dbq_t *q, sqlite3_stmt *st, int *rc, char *err, size_t errlen) {
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) return true;
    if (s != SQLITE_DONE) {
        mt_fmt(err, errlen, "query failed: %s", sqlite3_errmsg(q->db));
        *rc = s == SQLITE_BUSY ? MT_BUSY : MT_ERR;
    }
    return false;
}

/* Steps st to the end, handing each row to fn. */
static int walk(dbq_t *q, sqlite3_stmt *st, dbq_result_fn fn, void *ctx, char *err, size_t errlen) {
    int rc = MT_OK;
    dbq_result_t row;
    while (rc == MT_OK && next_row(q, st, &rc, err, errlen)) {
        row_from(st, &row);
        rc = fn(ctx, &row);
    }
    return rc;
}

static int prepare(dbq_t *q, const char *sql, sqlite3_stmt **st, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(q->db, sql, -1, st, NULL) != SQLITE_OK) {
        mt_fmt(err, errlen, "query failed: %s", sqlite3_errmsg(q->db));
        return MT_ERR;
    }
    return MT_OK;
}

/* Binds ?1..?7 of a results or history statement: the sweep, the shape's fields and the
 * batch size of f (a dbq_filter_t or a dbq_hist_filter_t; 0 and "" match any). */
#define BIND_TARGET(st, f)                                                                                             \
    do {                                                                                                               \
        sqlite3_bind_int64(st, 1, (sqlite3_int64)(f)->sweep_id);                                                       \
        sqlite3_bind_int64(st, 2, (f)->e);                                                                             \
        sqlite3_bind_int64(st, 3, (f)->n);                                                                             \
        sqlite3_bind_int64(st, 4, (f)->k);                                                                             \
        sqlite3_bind_int64(st, 5, (f)->topk);                                                                          \
        sqlite3_bind_text(st, 6, (f)->dtype, -1, SQLITE_TRANSIENT);                                                    \
        sqlite3_bind_int64(st, 7, (f)->batch_size);                                                                    \
    } while (0)

mt_status_t dbq_results(dbq_t *q, const dbq_filter_t *f, dbq_result_fn fn, void *ctx, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    dbq_filter_t none;
    if (!f) {
        memset(&none, 0, sizeof none);
        f = &none;
    }
    int rc = prepare(q, f->best ? k_sql_best[q->walk] : k_sql_results[q->walk], &st, err, errlen);
    if (rc != MT_OK) return rc;
    BIND_TARGET(st, f);
    sqlite3_bind_text(st, 8, f->status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 9, f->limit ? (sqlite3_int64)f->limit : -1);
    rc = walk(q, st, fn, ctx, err, errlen);
    sqlite3_finalize(st);
    return rc;
}

/* Binds the sweep selection as ?1: a JSON array of ids, or NULL for all sweeps. */
static int bind_sweeps(sqlite3_stmt *st, const dbq_select_t *sel) {
    if (!sel || sel->n_ids == 0) return sqlite3_bind_null(st, 1) == SQLITE_OK ? MT_OK : MT_ERR;
    size_t cap = sel->n_ids * 21 + 3, used = 0;
    char *text = mt_malloc(cap);
    if (!text) return MT_NOMEM;
    text[used++] = '[';
    for (size_t i = 0; i < sel->n_ids; i++)
        used += (size_t)snprintf(text + used, cap - used, "%s%llu", i ? "," : "", (unsigned long long)sel->ids[i]);
    text[used++] = ']';
    text[used] = '\0';
    return sqlite3_bind_text(st, 1, text, -1, free) == SQLITE_OK ? MT_OK : MT_NOMEM;
}

mt_status_t dbq_export_rows(dbq_t *q, const dbq_select_t *sel, bool best, dbq_result_fn fn, void *ctx, char *err,
                            size_t errlen) {
    sqlite3_stmt *st = NULL;
    bool latest = sel && sel->latest;
    int rc = prepare(q, latest ? k_sql_export_latest[q->walk] : k_sql_export[q->walk], &st, err, errlen);
    if (rc != MT_OK) return rc;
    rc = bind_sweeps(st, sel);
    sqlite3_bind_int(st, 3, best);
    if (rc == MT_OK) rc = walk(q, st, fn, ctx, err, errlen);
    sqlite3_finalize(st);
    return rc;
}

mt_status_t dbq_coverage(dbq_t *q, const dbq_select_t *sel, dbq_coverage_fn fn, void *ctx, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = prepare(q, k_sql_coverage[q->guard], &st, err, errlen);
    if (rc != MT_OK) return rc;
    rc = bind_sweeps(st, sel);
    while (rc == MT_OK && next_row(q, st, &rc, err, errlen)) {
        dbq_coverage_t c;
        memset(&c, 0, sizeof c);
        c.sweep_id = (uint64_t)sqlite3_column_int64(st, 0);
        col_text(st, 1, c.export_dir, sizeof c.export_dir);
        col_text(st, 2, c.device_name, sizeof c.device_name);
        c.shape_id = (uint64_t)sqlite3_column_int64(st, 3);
        c.batch_size = col_u32(st, 4);
        c.measured = (uint64_t)sqlite3_column_int64(st, 5);
        c.planned = (uint64_t)sqlite3_column_int64(st, 6);
        col_text(st, 7, c.state, sizeof c.state);
        rc = fn(ctx, &c);
    }
    sqlite3_finalize(st);
    return rc;
}

mt_status_t dbq_sweeps(dbq_t *q, const char *state, dbq_sweep_fn fn, void *ctx, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = prepare(q, k_sql_sweeps, &st, err, errlen);
    if (rc != MT_OK) return rc;
    if (state)
        sqlite3_bind_text(st, 1, state, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 1);
    while (rc == MT_OK && next_row(q, st, &rc, err, errlen)) {
        dbq_sweep_t w;
        memset(&w, 0, sizeof w);
        w.id = (uint64_t)sqlite3_column_int64(st, 0);
        col_text(st, 1, w.name, sizeof w.name);
        col_text(st, 2, w.state, sizeof w.state);
        w.results_planned = (uint64_t)sqlite3_column_int64(st, 3);
        w.created = sqlite3_column_int64(st, 4);
        w.finished = sqlite3_column_int64(st, 5);
        w.spec = sqlite3_column_blob(st, 6);
        w.spec_len = (size_t)sqlite3_column_bytes(st, 6);
        rc = fn(ctx, &w);
    }
    sqlite3_finalize(st);
    return rc;
}

mt_status_t dbq_history(dbq_t *q, const dbq_hist_filter_t *f, dbq_result_fn fn, void *ctx, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = prepare(q, k_sql_history[q->walk], &st, err, errlen);
    if (rc != MT_OK) return rc;
    BIND_TARGET(st, f);
    sqlite3_bind_text(st, 8, f->device, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 9, f->backend, -1, SQLITE_TRANSIENT);
    rc = walk(q, st, fn, ctx, err, errlen);
    sqlite3_finalize(st);
    return rc;
}

/* dbq_known_picks: per (shape, batch size) of the device's and backend's ok results with the
 * dtype and block shape asked, the row of lowest median (SQLite takes the bare columns from it). */
static const char k_sql_known[] =
    "SELECT s.e, s.n, s.k, s.topk, c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages,"
    " MIN(r.median_us), COUNT(DISTINCT r.sweep_id)"
    " FROM results r JOIN shapes s ON s.id = r.shape_id JOIN configs c ON c.id = r.config_id"
    " JOIN devices d ON d.id = r.device_id"
    " WHERE r.status = 'ok' AND r.median_us > 0 AND d.name = ?1 AND r.backend = ?2 AND s.dtype = ?3"
    " AND s.block_n = ?4 AND s.block_k = ?5"
    " GROUP BY s.e, s.n, s.k, s.topk, r.batch_size ORDER BY s.e, s.n, s.k, s.topk, r.batch_size";

/* The larger of x and y over the smaller, less 1 (0 when equal). */
static double ratio_off(uint32_t x, uint32_t y) { return x > y ? (double)x / y - 1.0 : (double)y / x - 1.0; }

/* How far shape b is from a: the sum over E, N, K and topk of how far each ratio is from 1. */
static double shape_distance(const krn_shape_t *a, const krn_shape_t *b) {
    return ratio_off(a->e, b->e) + ratio_off(a->n, b->n) + ratio_off(a->k, b->k) + ratio_off(a->topk, b->topk);
}

/* Counts a win for cfg in out[0, *n) (appended when new and there is room). */
static void add_win(dbq_pick_t *out, size_t *n, size_t cap, const krn_config_t *cfg) {
    for (size_t i = 0; i < *n; i++) {
        if (memcmp(&out[i].cfg, cfg, sizeof *cfg) == 0) {
            out[i].wins++;
            return;
        }
    }
    if (*n < cap) out[(*n)++] = (dbq_pick_t){*cfg, 1};
}

static int by_wins(const void *a, const void *b) {
    const dbq_pick_t *x = a, *y = b;
    return x->wins != y->wins ? (x->wins > y->wins ? -1 : 1) : memcmp(&x->cfg, &y->cfg, sizeof x->cfg);
}

mt_status_t dbq_known_picks(dbq_t *q, const char *device, const char *backend, const krn_shape_t *shape,
                            dbq_pick_t *out, size_t max, size_t *n, krn_shape_t *from, uint32_t *n_sweeps, char *err,
                            size_t errlen) {
    enum { CAP = 256 };
    sqlite3_stmt *st = NULL;
    dbq_pick_t *all = NULL;
    size_t n_all = 0;
    uint32_t n_sw = 0; /* the most sweeps that measured one of its batch sizes */
    bool found = false;
    double best = 0.0;
    *n = 0;
    *n_sweeps = 0;
    *from = *shape;
    int rc = prepare(q, k_sql_known, &st, err, errlen);
    if (rc != MT_OK) return rc;
    all = mt_calloc(CAP, sizeof *all);
    if (!all) {
        sqlite3_finalize(st);
        return MT_NOMEM;
    }
    sqlite3_bind_text(st, 1, device, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, backend, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, shape->dtype, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, shape->block_n);
    sqlite3_bind_int64(st, 5, shape->block_k);
    while (next_row(q, st, &rc, err, errlen)) {
        krn_shape_t s = *shape;
        krn_config_t c;
        s.e = col_u32(st, 0), s.n = col_u32(st, 1), s.k = col_u32(st, 2), s.topk = col_u32(st, 3);
        for (int i = 0; i < KRN_N_FIELDS; i++) KRN_CONFIG_AT(&c, i) = col_u32(st, 4 + i);
        if (!s.e || !s.n || !s.k || !s.topk || krn_config_bad_field(&c) >= 0) continue; /* rows are data */
        double d = shape_distance(shape, &s);
        if (!found || d < best) {
            found = true, best = d, *from = s, n_all = 0, n_sw = 0;
        } else if (d > best || memcmp(&s, from, sizeof s) != 0) {
            continue; /* farther, or as near as the shape kept (the first of a tie) */
        }
        add_win(all, &n_all, CAP, &c);
        uint32_t sw = col_u32(st, 11);
        if (sw > n_sw) n_sw = sw;
    }
    sqlite3_finalize(st);
    if (rc == MT_OK) {
        qsort(all, n_all, sizeof *all, by_wins);
        *n = n_all < max ? n_all : max;
        memcpy(out, all, *n * sizeof *out);
        *n_sweeps = n_sw;
    }
    free(all);
    return rc;
}

/* ---- the ship guard (coordinator/guard.h): its rows and their measurements */

/* Each guard row with its config and shape, and its ok result when it has one (NULL
 * result columns read as 0 and ""); the guard's own columns follow the result walk's. */
static const char k_sql_guard[] =
    "SELECT " RESULT_COLS RESULT_COLS_V3 ", g.sweep_id, g.shape_id, g.config_id, g.batch_size, g.role, g.engine,"
    " g.searched, g.source, r.id IS NOT NULL"
    " FROM guard g JOIN shapes s ON s.id = g.shape_id JOIN configs c ON c.id = g.config_id"
    " LEFT JOIN results r ON r.sweep_id = g.sweep_id AND r.shape_id = g.shape_id AND r.config_id = g.config_id"
    "  AND r.batch_size = g.batch_size AND r.status = 'ok' AND r.median_us > 0"
    " LEFT JOIN devices d ON d.id = r.device_id LEFT JOIN routings rt ON rt.sha256 = s.routing"
    " WHERE ?1 IS NULL OR g.sweep_id IN (SELECT value FROM json_each(?1))"
    " ORDER BY g.sweep_id, g.shape_id, g.batch_size, g.role, g.engine";
#define GUARD_COL0 40 /* the columns row_from reads */

mt_status_t dbq_guard_rows(dbq_t *q, const dbq_select_t *sel, dbq_guard_fn fn, void *ctx, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    if (!q->guard) return MT_OK; /* a file before schema 6: nothing was guarded */
    int rc = prepare(q, k_sql_guard, &st, err, errlen);
    if (rc != MT_OK) return rc;
    rc = bind_sweeps(st, sel);
    if (rc == MT_OK && sqlite3_column_count(st) != GUARD_COL0 + 9) rc = MT_ERR;
    while (rc == MT_OK && next_row(q, st, &rc, err, errlen)) {
        dbq_guard_t g;
        memset(&g, 0, sizeof g);
        row_from(st, &g.row);
        int i = GUARD_COL0;
        g.row.sweep_id = (uint64_t)sqlite3_column_int64(st, i++);
        g.row.shape_id = (uint64_t)sqlite3_column_int64(st, i++);
        g.row.config_id = (uint64_t)sqlite3_column_int64(st, i++);
        g.row.batch_size = col_u32(st, i++);
        col_text(st, i++, g.role, sizeof g.role);
        col_text(st, i++, g.engine, sizeof g.engine);
        g.searched = sqlite3_column_int(st, i++) != 0;
        col_text(st, i++, g.source, sizeof g.source);
        g.measured = sqlite3_column_int(st, i++) != 0;
        rc = fn(ctx, &g);
    }
    sqlite3_finalize(st);
    return rc;
}
