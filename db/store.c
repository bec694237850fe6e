/* store.c - open, migrate, and every statement the coordinator runs. See store.h. */
#include "store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt.h"
#include "schema_sql.h"
#include "states.h"

/* The schema (version 4) is db/schema.sql, embedded at build time as store_schema_text. */
const char *store_schema_sql(void) { return store_schema_text; }

/* Every statement, prepared once at open. */
enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_REQUEUE_LEASED,
    ST_DEVICE_UPSERT,
    ST_DEVICE_ID,
    ST_WORKER_UPSERT,
    ST_SWEEP_INSERT,
    ST_SWEEP_PLANNED,
    ST_SWEEP_STATE,
    ST_SHAPE_INSERT,
    ST_SHAPE_ID,
    ST_CONFIG_INSERT,
    ST_CONFIG_ID,
    ST_REJECTED_INSERT,
    ST_JOB_INSERT,
    ST_JOB_CONFIG_INSERT,
    ST_JOB_CONFIG_DELETE,
    ST_JOB_UPDATE,
    ST_RESULT_INSERT,
    ST_CRASH_BUMP,
    ST_CRASH_COUNT,
    ST_ROUTING_INSERT,
    ST_SWEEPS,
    ST_JOBS_OPEN,
    ST_JOB_CONFIGS,
    ST_SHAPE_GET,
    ST_CONFIG_GET,
    ST_RESULT_COUNT,
    ST_SWEEP_RESULT_COUNTS,
    ST_JOB_STATE_COUNTS,
    ST_SWEEP_BESTS,
    ST_SWEEP_DEVICE,
    ST_SWEEP_DEVICES,
    ST_RESULT_REPLACE,
    ST_PHASE_ROWS,
    ST_RESULT_PRUNE,
    ST_SWEEP_PHASES,
    ST_SWEEP_FINALISTS,
    ST_COUNT
};

static const char *const g_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_REQUEUE_LEASED] = "UPDATE jobs SET state = 'pending' WHERE state = 'leased'"
                          " AND sweep_id NOT IN (SELECT id FROM sweeps WHERE state = 'running')",
    [ST_DEVICE_UPSERT] = "INSERT INTO devices (name, uuid, cc_major, cc_minor, sm_count, memory_bytes, driver_version,"
                         " cuda_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (uuid) DO UPDATE SET"
                         " name = excluded.name, cc_major = excluded.cc_major, cc_minor = excluded.cc_minor,"
                         " sm_count = excluded.sm_count, memory_bytes = excluded.memory_bytes,"
                         " driver_version = excluded.driver_version, cuda_version = excluded.cuda_version",
    [ST_DEVICE_ID] = "SELECT id FROM devices WHERE uuid = ?1",
    [ST_WORKER_UPSERT] =
        "INSERT INTO workers (worker_id, host, pid, backend, device_id, compiler, kernel_hash, first_seen,"
        " last_seen, versions) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9) ON CONFLICT (worker_id) DO UPDATE SET"
        " host = excluded.host, pid = excluded.pid, backend = excluded.backend,"
        " device_id = excluded.device_id, compiler = excluded.compiler,"
        " kernel_hash = excluded.kernel_hash, last_seen = excluded.last_seen, versions = excluded.versions",
    [ST_SWEEP_INSERT] = "INSERT INTO sweeps (name, spec, state, created) VALUES (?1, ?2, 'running', ?3)",
    [ST_SWEEP_PLANNED] = "UPDATE sweeps SET results_planned = ?2 WHERE id = ?1",
    [ST_SWEEP_STATE] = "UPDATE sweeps SET state = ?2, finished = ?3 WHERE id = ?1",
    [ST_SHAPE_INSERT] =
        "INSERT INTO shapes (e, n, k, topk, dtype, block_n, block_k, routing) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
        " ON CONFLICT DO NOTHING",
    [ST_SHAPE_ID] = "SELECT id FROM shapes WHERE e = ?1 AND n = ?2 AND k = ?3 AND topk = ?4 AND dtype = ?5"
                    " AND block_n = ?6 AND block_k = ?7 AND routing = ?8",
    [ST_ROUTING_INSERT] = "INSERT INTO routings (sha256, source, tokens, topk, created) VALUES (?1, ?2, ?3, ?4, ?5)"
                          " ON CONFLICT (sha256) DO NOTHING",
    [ST_CONFIG_INSERT] = "INSERT INTO configs (block_m, block_n, block_k, group_m, num_warps, num_stages)"
                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
    [ST_CONFIG_ID] = "SELECT id FROM configs WHERE block_m = ?1 AND block_n = ?2 AND block_k = ?3 AND group_m = ?4"
                     " AND num_warps = ?5 AND num_stages = ?6",
    [ST_REJECTED_INSERT] = "INSERT INTO rejected (sweep_id, shape_id, config_id, reason) VALUES (?1, ?2, ?3, ?4)"
                           " ON CONFLICT DO NOTHING",
    [ST_JOB_INSERT] = "INSERT INTO jobs (sweep_id, shape_id, state, avoid_worker, created, phase, batch_sizes)"
                      " VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?6)",
    [ST_JOB_CONFIG_INSERT] = "INSERT INTO job_configs (job_id, config_id) VALUES (?1, ?2)",
    [ST_JOB_CONFIG_DELETE] = "DELETE FROM job_configs WHERE job_id = ?1 AND config_id = ?2",
    [ST_JOB_UPDATE] = "UPDATE jobs SET state = ?2, attempts = ?3, worker_id = ?4, lease_token = ?5, lease_expires = ?6,"
                      " finished = ?7 WHERE id = ?1",
    [ST_RESULT_INSERT] =
        "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, mean_us,"
        " stddev_us, samples, detail, registers, spills, job_id, worker_id, device_id, backend, compiler,"
        " kernel_hash, created, versions, up_us, down_us, timed_us, phase) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
        " ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)"
        " ON CONFLICT (sweep_id, shape_id, config_id, batch_size) DO NOTHING",
    /* halving: a later phase's measurement replaces the row of an earlier one, never the reverse */
    [ST_RESULT_REPLACE] =
        "UPDATE results SET status = ?5, median_us = ?6, min_us = ?7, mean_us = ?8, stddev_us = ?9, samples = ?10,"
        " detail = ?11, registers = ?12, spills = ?13, job_id = ?14, worker_id = ?15, device_id = ?16, backend = ?17,"
        " compiler = ?18, kernel_hash = ?19, created = ?20, versions = ?21, up_us = ?22, down_us = ?23,"
        " timed_us = ?24, phase = ?25 WHERE sweep_id = ?1 AND shape_id = ?2 AND config_id = ?3 AND batch_size = ?4"
        " AND phase < ?25",
    [ST_PHASE_ROWS] =
        "SELECT config_id, batch_size, median_us, COALESCE(device_id, 0), COALESCE(min_us, 0) FROM results"
        " WHERE sweep_id = ?1 AND shape_id = ?2 AND phase = ?3 AND status = 'ok' ORDER BY config_id, batch_size",
    [ST_RESULT_PRUNE] = "UPDATE results SET status = 'pruned', detail = ?6 WHERE sweep_id = ?1 AND shape_id = ?2"
                        " AND config_id = ?3 AND batch_size = ?4 AND phase = ?5 AND status = 'ok'",
    [ST_SWEEP_PHASES] = "SELECT shape_id, MAX(phase) FROM jobs WHERE sweep_id = ?1 GROUP BY shape_id ORDER BY shape_id",
    /* a phase-2 job's rows: its configs times its batch sizes ('1,16,256'; NULL = the sweep's ?2) */
    [ST_SWEEP_FINALISTS] = "SELECT COALESCE(SUM((SELECT COUNT(*) FROM job_configs c WHERE c.job_id = j.id) *"
                           " CASE WHEN j.batch_sizes IS NULL OR j.batch_sizes = '' THEN ?2"
                           " ELSE LENGTH(j.batch_sizes) - LENGTH(REPLACE(j.batch_sizes, ',', '')) + 1 END), 0)"
                           " FROM jobs j WHERE j.sweep_id = ?1 AND j.phase >= 2",
    [ST_CRASH_BUMP] =
        "INSERT INTO crashes (sweep_id, shape_id, config_id, count, last_worker) VALUES (?1, ?2, ?3, 1, ?4)"
        " ON CONFLICT (sweep_id, shape_id, config_id) DO UPDATE SET count = count + 1, last_worker = "
        "excluded.last_worker",
    [ST_CRASH_COUNT] = "SELECT count FROM crashes WHERE sweep_id = ?1 AND shape_id = ?2 AND config_id = ?3",
    /* the GPU model a sweep is bound to: of its first result, else of its first job's holder */
    /* the measuring identity (coordinator/sched_int.h, sched_identity_of): GPU model, backend,
     * compiler, kernel hash and versions joined by char(31) */
    [ST_SWEEP_DEVICE] = "SELECT name FROM (SELECT 0 AS o, r.id AS i, d.name || char(31) || r.backend || char(31) || "
                        "r.compiler || char(31) || ifnull(r.kernel_hash, '') || char(31) || ifnull(r.versions, '') "
                        "AS name FROM results r JOIN devices d ON d.id = r.device_id WHERE r.sweep_id = ?1 "
                        "UNION ALL SELECT 1, j.id, d.name || char(31) || ifnull(w.backend, '') || char(31) || "
                        "ifnull(w.compiler, '') || char(31) || ifnull(w.kernel_hash, '') || char(31) || "
                        "ifnull(w.versions, '') FROM jobs j JOIN workers w ON w.worker_id = j.worker_id "
                        "JOIN devices d ON d.id = w.device_id WHERE j.sweep_id = ?1) ORDER BY o, i LIMIT 1",
    [ST_SWEEPS] = "SELECT id, name, state, spec, results_planned, created FROM sweeps ORDER BY id",
    [ST_JOBS_OPEN] = "SELECT id, sweep_id, shape_id, state, attempts, worker_id, lease_token, avoid_worker, phase, "
                     "batch_sizes FROM jobs"
                     " WHERE sweep_id = ?1 AND state IN ('pending', 'leased') ORDER BY id",
    [ST_JOB_CONFIGS] = "SELECT config_id FROM job_configs WHERE job_id = ?1 ORDER BY config_id",
    [ST_SHAPE_GET] = "SELECT e, n, k, topk, dtype, block_n, block_k, routing FROM shapes WHERE id = ?1",
    [ST_CONFIG_GET] = "SELECT block_m, block_n, block_k, group_m, num_warps, num_stages FROM configs WHERE id = ?1",
    [ST_RESULT_COUNT] =
        "SELECT COUNT(*) FROM results WHERE sweep_id = ?1 AND shape_id = ?2 AND config_id = ?3 AND phase >= ?4"
        " AND (?5 = 0 OR batch_size = ?5)",
    [ST_SWEEP_RESULT_COUNTS] =
        "SELECT COUNT(*), COALESCE(SUM(status NOT IN ('ok', 'pruned')), 0), COALESCE(SUM(status = 'pruned'), 0),"
        " COALESCE(SUM(timed_us), 0), COALESCE(SUM(phase >= 2), 0) FROM results WHERE sweep_id = ?1",
    [ST_JOB_STATE_COUNTS] = "SELECT state, COUNT(*) FROM jobs WHERE sweep_id = ?1 GROUP BY state",
    [ST_SWEEP_DEVICES] = "SELECT DISTINCT device_id FROM results WHERE sweep_id = ?1 AND device_id IS NOT NULL",
    [ST_SWEEP_BESTS] = "SELECT shape_id, batch_size, MIN(median_us) FROM results WHERE sweep_id = ?1"
                       " AND status = 'ok' GROUP BY shape_id, batch_size",
};

struct store {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    char err[512];
};

const char *store_errmsg(const store_t *s) { return s ? s->err : "no store"; }

/* Maps an SQLite code to ours and records the connection's message. */
static int fail(store_t *s, int src, const char *what) {
    mt_fmt(s->err, sizeof s->err, "%s: %s", what, sqlite3_errmsg(s->db));
    if (src == SQLITE_BUSY || src == SQLITE_LOCKED) return MT_BUSY;
    return MT_IO;
}

/* Steps a statement that returns no row, then resets it. */
static int exec_st(store_t *s, int id) {
    sqlite3_stmt *st = s->st[id];
    int src = sqlite3_step(st);
    int rc = MT_OK;
    if (src != SQLITE_DONE && src != SQLITE_ROW) rc = fail(s, src, g_sql[id]);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

/* Steps an INSERT and sets *id to the new row's id. */
static int exec_insert(store_t *s, int id, uint64_t *row_id) {
    int rc = exec_st(s, id);
    if (!rc) *row_id = (uint64_t)sqlite3_last_insert_rowid(s->db);
    return rc;
}

/* Steps a statement expected to return one row whose first column is an integer.
 * MT_NOTFOUND when there is no row. The statement is reset. */
static int exec_u64(store_t *s, int id, uint64_t *out) {
    sqlite3_stmt *st = s->st[id];
    int src = sqlite3_step(st);
    int rc = MT_OK;
    if (src == SQLITE_ROW)
        *out = (uint64_t)sqlite3_column_int64(st, 0);
    else if (src == SQLITE_DONE)
        rc = MT_NOTFOUND;
    else
        rc = fail(s, src, g_sql[id]);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_i64_or_null(sqlite3_stmt *st, int i, int64_t v) {
    if (v)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static int pragma(store_t *s, const char *sql) {
    char *msg = NULL;
    int src = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (src != SQLITE_OK) {
        mt_fmt(s->err, sizeof s->err, "%s: %s", sql, msg ? msg : sqlite3_errstr(src));
        sqlite3_free(msg);
        return src == SQLITE_BUSY ? MT_BUSY : MT_IO;
    }
    return MT_OK;
}

mt_status_t store_user_version(store_t *s, int *version) {
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL);
    int rc = MT_OK;
    if (src != SQLITE_OK) {
        rc = fail(s, src, "PRAGMA user_version");
        goto out;
    }
    src = sqlite3_step(st);
    if (src != SQLITE_ROW) {
        rc = fail(s, src, "PRAGMA user_version");
        goto out;
    }
    *version = sqlite3_column_int(st, 0);
out:
    sqlite3_finalize(st);
    return rc;
}

/* What takes a database of version i-1 to version i; ALTER TABLE only adds
 * columns, so a migrated database has the layout a fresh one gets. */
static const char *const g_upgrade[STORE_SCHEMA_VERSION + 1] = {
    [2] = "ALTER TABLE workers ADD COLUMN versions TEXT;\n"
          "ALTER TABLE results ADD COLUMN versions TEXT;\n"
          "ALTER TABLE results ADD COLUMN up_us REAL;\n"
          "ALTER TABLE results ADD COLUMN down_us REAL;\n",
    /* The routing joins a shape's identity, which a UNIQUE constraint holds: the table is
     * rebuilt (SQLite's documented way, foreign keys off; migrate() does that), keeping ids. */
    [3] = "CREATE TABLE shapes_v3 (\n"
          "  id INTEGER PRIMARY KEY,\n"
          "  e INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, topk INTEGER NOT NULL,\n"
          "  dtype TEXT NOT NULL, block_n INTEGER NOT NULL DEFAULT 0, block_k INTEGER NOT NULL DEFAULT 0,\n"
          "  routing TEXT NOT NULL DEFAULT '', -- sha256 of the captured routing the inputs draw from; '' = uniform\n"
          "  UNIQUE (e, n, k, topk, dtype, block_n, block_k, routing)\n"
          ");\n"
          "INSERT INTO shapes_v3 (id, e, n, k, topk, dtype, block_n, block_k)"
          " SELECT id, e, n, k, topk, dtype, block_n, block_k FROM shapes;\n"
          "DROP TABLE shapes;\n"
          "ALTER TABLE shapes_v3 RENAME TO shapes;\n"
          "CREATE TABLE routings (             -- captured routing files sweeps were planned on\n"
          "  sha256 TEXT PRIMARY KEY,\n"
          "  source TEXT NOT NULL,             -- the path the sweep was given\n"
          "  tokens INTEGER NOT NULL, topk INTEGER NOT NULL,\n"
          "  created INTEGER NOT NULL\n"
          ");\n"
          /* 'pruned' joins the status CHECK: SQLite changes a CHECK only by rebuilding the table */
          "CREATE TABLE results_v3 (\n"
          "  id INTEGER PRIMARY KEY,\n"
          "  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),\n"
          "  shape_id INTEGER NOT NULL REFERENCES shapes(id),\n"
          "  config_id INTEGER NOT NULL REFERENCES configs(id),\n"
          "  batch_size INTEGER NOT NULL,\n"
          "  status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'compile_error', 'launch_error',\n"
          "                                          'wrong_result', 'timeout', 'crashed', 'pruned')),\n"
          "  median_us REAL, min_us REAL, mean_us REAL, stddev_us REAL, samples INTEGER,\n"
          "  detail TEXT, registers INTEGER, spills INTEGER, job_id INTEGER, worker_id TEXT,\n"
          "  device_id INTEGER REFERENCES devices(id), backend TEXT NOT NULL, compiler TEXT NOT NULL,\n"
          "  kernel_hash TEXT, created INTEGER NOT NULL, versions TEXT, up_us REAL, down_us REAL, timed_us REAL,\n"
          "  UNIQUE (sweep_id, shape_id, config_id, batch_size)\n"
          ");\n"
          "INSERT INTO results_v3 (id, sweep_id, shape_id, config_id, batch_size, status, median_us, min_us,\n"
          "  mean_us, stddev_us, samples, detail, registers, spills, job_id, worker_id, device_id, backend,\n"
          "  compiler, kernel_hash, created, versions, up_us, down_us)\n"
          "SELECT id, sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, mean_us,\n"
          "  stddev_us, samples, detail, registers, spills, job_id, worker_id, device_id, backend, compiler,\n"
          "  kernel_hash, created, versions, up_us, down_us FROM results;\n"
          "DROP TABLE results;\n"
          "ALTER TABLE results_v3 RENAME TO results;\n"
          "CREATE INDEX results_best ON results (shape_id, batch_size, status, median_us);\n",
    /* halving: a job's phase and batch-size subset, a result's phase */
    [4] = "ALTER TABLE jobs ADD COLUMN phase INTEGER NOT NULL DEFAULT 1;\n"
          "ALTER TABLE jobs ADD COLUMN batch_sizes TEXT;\n"
          "ALTER TABLE results ADD COLUMN phase INTEGER NOT NULL DEFAULT 1;\n",
    /* The index on (shape, batch size, status, median) cost about half of a result row's
     * insert and no read needs it (docs/performance.md). */
    [5] = "DROP INDEX IF EXISTS results_best;\n",
    /* the ship guard's rows (schema.sql) */
    [6] = "CREATE TABLE guard (\n"
          "  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),\n"
          "  shape_id INTEGER NOT NULL REFERENCES shapes(id),\n"
          "  batch_size INTEGER NOT NULL,\n"
          "  role TEXT NOT NULL CHECK (role IN ('default', 'incumbent', 'nearest', 'other')),\n"
          "  engine TEXT NOT NULL,\n"
          "  config_id INTEGER NOT NULL REFERENCES configs(id),\n"
          "  searched INTEGER NOT NULL,\n"
          "  source TEXT NOT NULL,\n"
          "  PRIMARY KEY (sweep_id, shape_id, batch_size, role, engine)\n"
          ");\n",
};

/* Applies the schema to a fresh database, or the upgrades from its version to a
 * database of an older one, in one transaction. */
static int migrate(store_t *s) {
    int version = 0;
    int rc = store_user_version(s, &version);
    if (rc) return rc;
    if (version == STORE_SCHEMA_VERSION) return MT_OK;
    if (version > STORE_SCHEMA_VERSION) {
        mt_fmt(s->err, sizeof s->err, "database schema version %d is newer than this program's %d", version,
               STORE_SCHEMA_VERSION);
        return MT_INVAL;
    }
    char sql[64];
    /* Rebuilding a table other tables reference needs foreign keys off (outside the
     * transaction: the pragma is a no-op inside one); on again whatever happens. */
    if (version > 0 && version < 3) {
        rc = pragma(s, "PRAGMA foreign_keys = OFF");
        if (rc) return rc;
    }
    rc = pragma(s, "BEGIN IMMEDIATE");
    if (rc) {
        pragma(s, "PRAGMA foreign_keys = ON");
        return rc;
    }
    if (version == 0) {
        rc = pragma(s, store_schema_text);
    } else {
        for (int v = version + 1; v <= STORE_SCHEMA_VERSION && !rc; v++) rc = pragma(s, g_upgrade[v]);
    }
    if (!rc) rc = pragma(s, mt_fmt(sql, sizeof sql, "PRAGMA user_version = %d", STORE_SCHEMA_VERSION));
    if (!rc) rc = pragma(s, "COMMIT");
    if (rc) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    int fk = pragma(s, "PRAGMA foreign_keys = ON");
    return rc ? rc : fk;
}

/* MT_OK for an empty database or moetune's; MT_INVAL for a file of another program,
 * found before anything is written to it (no table, no journal mode change). */
static int check_ours(store_t *s) {
    static const char sql[] = "SELECT count(*), count(CASE WHEN type = 'table' AND name IN ('sweeps', 'results',"
                              " 'shapes', 'configs') THEN 1 END), (SELECT user_version FROM pragma_user_version),"
                              " (SELECT application_id FROM pragma_application_id) FROM sqlite_master";
    sqlite3_stmt *st = NULL;
    int rc = MT_OK;
    int src = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (src == SQLITE_OK) src = sqlite3_step(st);
    if (src != SQLITE_ROW) {
        rc = fail(s, src, "reading the schema");
        if (src == SQLITE_NOTADB) rc = MT_INVAL;
        goto out;
    }
    int64_t n_all = sqlite3_column_int64(st, 0), n_ours = sqlite3_column_int64(st, 1);
    int64_t version = sqlite3_column_int64(st, 2), app = sqlite3_column_int64(st, 3);
    if (version > STORE_SCHEMA_VERSION) { /* said before the journal mode changes anything */
        mt_fmt(s->err, sizeof s->err, "database schema version %lld is newer than this program's %d",
               (long long)version, STORE_SCHEMA_VERSION);
        rc = MT_INVAL;
        goto out;
    }
    /* no table, but a version or application id another program set: not empty either */
    if ((n_all > 0 && n_ours < 4) || (n_all == 0 && (version != 0 || app != 0))) {
        mt_fmt(s->err, sizeof s->err,
               "not a moetune database (another program's: %lld tables and indexes, user_version %lld, "
               "application_id %lld); left as it was: give --db a new file",
               (long long)n_all, (long long)version, (long long)app);
        rc = MT_INVAL;
    }
out:
    sqlite3_finalize(st);
    return rc;
}

mt_status_t store_open(const char *path, store_t **out, char *err, size_t errlen) {
    int rc = MT_OK;
    *out = NULL;
    /* a FIFO would block SQLite's open; a directory or device is no database */
    rc = mt_check_regular(path, true, err, errlen);
    if (rc) return rc == MT_INVAL ? MT_INVAL : MT_IO;
    store_t *s = mt_calloc(1, sizeof *s);
    if (!s) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    int src = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        mt_fmt(s->err, sizeof s->err, "cannot open %s: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(src));
        rc = MT_IO;
        goto out;
    }
    sqlite3_busy_timeout(s->db, 5000);
    rc = check_ours(s);
    if (!rc) rc = pragma(s, "PRAGMA journal_mode = WAL");
    if (!rc) rc = pragma(s, "PRAGMA synchronous = NORMAL");
    if (!rc) rc = pragma(s, "PRAGMA foreign_keys = ON");
    if (!rc) rc = migrate(s);
    if (rc) goto out;
    for (int i = 0; i < ST_COUNT; i++) {
        src = sqlite3_prepare_v3(s->db, g_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL);
        if (src != SQLITE_OK) {
            rc = fail(s, src, g_sql[i]);
            goto out;
        }
    }
out:
    if (rc) {
        mt_fmt(err, errlen, "%s: %s", path, s->err);
        store_close(&s);
        return rc;
    }
    *out = s;
    return MT_OK;
}

void store_close(store_t **ps) {
    if (!ps || !*ps) return;
    store_t *s = *ps;
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
    if (s->db) sqlite3_close(s->db);
    free(s);
    *ps = NULL;
}

mt_status_t store_begin(store_t *s) { return exec_st(s, ST_BEGIN); }
mt_status_t store_commit(store_t *s) { return exec_st(s, ST_COMMIT); }

void store_rollback(store_t *s) {
    if (!sqlite3_get_autocommit(s->db)) exec_st(s, ST_ROLLBACK);
}

void store_set_busy_ms(store_t *s, int ms) { sqlite3_busy_timeout(s->db, ms); }

mt_status_t store_requeue_leased(store_t *s, uint32_t *n) {
    int rc = exec_st(s, ST_REQUEUE_LEASED);
    if (!rc && n) *n = (uint32_t)sqlite3_changes(s->db);
    return rc;
}

mt_status_t store_device_upsert(store_t *s, const Moetune__Gpu *gpu, uint64_t *id) {
    char uuid[300];
    const char *name = gpu && gpu->name && *gpu->name ? gpu->name : "unknown";
    if (gpu && gpu->uuid && *gpu->uuid)
        mt_fmt(uuid, sizeof uuid, "%s", gpu->uuid);
    else
        mt_fmt(uuid, sizeof uuid, "name:%.280s", name);
    sqlite3_stmt *st = s->st[ST_DEVICE_UPSERT];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, uuid, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, gpu ? gpu->cc_major : 0);
    sqlite3_bind_int64(st, 4, gpu ? gpu->cc_minor : 0);
    sqlite3_bind_int64(st, 5, gpu ? gpu->sm_count : 0);
    sqlite3_bind_int64(st, 6, gpu ? (int64_t)gpu->memory_bytes : 0);
    bind_text(st, 7, gpu ? gpu->driver_version : NULL);
    bind_text(st, 8, gpu ? gpu->cuda_version : NULL);
    int rc = exec_st(s, ST_DEVICE_UPSERT);
    if (rc) return rc;
    sqlite3_bind_text(s->st[ST_DEVICE_ID], 1, uuid, -1, SQLITE_STATIC);
    return exec_u64(s, ST_DEVICE_ID, id);
}

static int worker_upsert(store_t *s, const Moetune__Hello *h, uint64_t device_id, int64_t now_s) {
    sqlite3_stmt *st = s->st[ST_WORKER_UPSERT];
    bind_text(st, 1, h->worker_id);
    bind_text(st, 2, h->host);
    sqlite3_bind_int64(st, 3, h->pid);
    bind_text(st, 4, h->backend);
    bind_i64_or_null(st, 5, (int64_t)device_id);
    bind_text(st, 6, h->compiler);
    bind_text(st, 7, h->kernel_hash);
    sqlite3_bind_int64(st, 8, now_s);
    bind_text(st, 9, h->versions && *h->versions ? h->versions : NULL);
    return exec_st(s, ST_WORKER_UPSERT);
}

mt_status_t store_hello(store_t *s, const Moetune__Hello *h, int64_t now_s, uint64_t *device_id) {
    int rc = store_device_upsert(s, h->gpu, device_id);
    return rc ? rc : worker_upsert(s, h, *device_id, now_s);
}

mt_status_t store_sweep_insert(store_t *s, const char *name, const void *spec, size_t spec_len, int64_t created,
                               uint64_t *id) {
    sqlite3_stmt *st = s->st[ST_SWEEP_INSERT];
    sqlite3_bind_text(st, 1, name ? name : "", -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, spec_len ? spec : "", (int)spec_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, created);
    return exec_insert(s, ST_SWEEP_INSERT, id);
}

mt_status_t store_sweep_set_planned(store_t *s, uint64_t sweep_id, uint64_t results_planned) {
    sqlite3_bind_int64(s->st[ST_SWEEP_PLANNED], 1, (int64_t)sweep_id);
    sqlite3_bind_int64(s->st[ST_SWEEP_PLANNED], 2, (int64_t)results_planned);
    return exec_st(s, ST_SWEEP_PLANNED);
}

mt_status_t store_sweep_set_state(store_t *s, uint64_t sweep_id, const char *state, int64_t finished) {
    sqlite3_stmt *st = s->st[ST_SWEEP_STATE];
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_text(st, 2, state, -1, SQLITE_STATIC);
    bind_i64_or_null(st, 3, finished);
    return exec_st(s, ST_SWEEP_STATE);
}

static void bind_shape(sqlite3_stmt *st, const krn_shape_t *sh) {
    sqlite3_bind_int64(st, 1, sh->e);
    sqlite3_bind_int64(st, 2, sh->n);
    sqlite3_bind_int64(st, 3, sh->k);
    sqlite3_bind_int64(st, 4, sh->topk);
    sqlite3_bind_text(st, 5, sh->dtype[0] ? sh->dtype : "bf16", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, sh->block_n);
    sqlite3_bind_int64(st, 7, sh->block_k);
    sqlite3_bind_text(st, 8, sh->routing, -1, SQLITE_STATIC);
}

mt_status_t store_shape_upsert(store_t *s, const krn_shape_t *shape, uint64_t *id) {
    bind_shape(s->st[ST_SHAPE_INSERT], shape);
    int rc = exec_st(s, ST_SHAPE_INSERT);
    if (rc) return rc;
    bind_shape(s->st[ST_SHAPE_ID], shape);
    return exec_u64(s, ST_SHAPE_ID, id);
}

mt_status_t store_routing_insert(store_t *s, const char *sha256, const char *source, uint32_t tokens, uint32_t topk,
                                 int64_t now) {
    sqlite3_stmt *st = s->st[ST_ROUTING_INSERT];
    sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, source, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, tokens);
    sqlite3_bind_int64(st, 4, topk);
    sqlite3_bind_int64(st, 5, now);
    return exec_st(s, ST_ROUTING_INSERT);
}

static void bind_config(sqlite3_stmt *st, const krn_config_t *c) {
    for (int i = 0; i < KRN_N_FIELDS; i++) sqlite3_bind_int64(st, i + 1, KRN_CONFIG_GET(c, i));
}

mt_status_t store_config_upsert(store_t *s, const krn_config_t *cfg, uint64_t *id) {
    bind_config(s->st[ST_CONFIG_INSERT], cfg);
    int rc = exec_st(s, ST_CONFIG_INSERT);
    if (rc) return rc;
    if (sqlite3_changes(s->db) == 1) {
        *id = (uint64_t)sqlite3_last_insert_rowid(s->db);
        return MT_OK;
    }
    bind_config(s->st[ST_CONFIG_ID], cfg);
    return exec_u64(s, ST_CONFIG_ID, id);
}

mt_status_t store_rejected_insert(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                                  const char *reason) {
    sqlite3_stmt *st = s->st[ST_REJECTED_INSERT];
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)shape_id);
    sqlite3_bind_int64(st, 3, (int64_t)config_id);
    sqlite3_bind_text(st, 4, reason ? reason : "", -1, SQLITE_STATIC);
    return exec_st(s, ST_REJECTED_INSERT);
}

mt_status_t store_job_insert(store_t *s, uint64_t sweep_id, uint64_t shape_id, const char *avoid_worker,
                             int64_t created, uint64_t *id) {
    return store_job_insert_phase(s, sweep_id, shape_id, 1, NULL, avoid_worker, created, id);
}

mt_status_t store_job_insert_phase(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint32_t phase,
                                   const char *batch_sizes, const char *avoid_worker, int64_t created, uint64_t *id) {
    sqlite3_stmt *st = s->st[ST_JOB_INSERT];
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)shape_id);
    bind_text(st, 3, avoid_worker);
    sqlite3_bind_int64(st, 4, created);
    sqlite3_bind_int64(st, 5, phase ? phase : 1);
    bind_text(st, 6, batch_sizes && *batch_sizes ? batch_sizes : NULL);
    return exec_insert(s, ST_JOB_INSERT, id);
}

mt_status_t store_job_config_insert(store_t *s, uint64_t job_id, uint64_t config_id) {
    sqlite3_bind_int64(s->st[ST_JOB_CONFIG_INSERT], 1, (int64_t)job_id);
    sqlite3_bind_int64(s->st[ST_JOB_CONFIG_INSERT], 2, (int64_t)config_id);
    return exec_st(s, ST_JOB_CONFIG_INSERT);
}

mt_status_t store_job_config_delete(store_t *s, uint64_t job_id, uint64_t config_id) {
    sqlite3_bind_int64(s->st[ST_JOB_CONFIG_DELETE], 1, (int64_t)job_id);
    sqlite3_bind_int64(s->st[ST_JOB_CONFIG_DELETE], 2, (int64_t)config_id);
    return exec_st(s, ST_JOB_CONFIG_DELETE);
}

mt_status_t store_job_update(store_t *s, const store_job_update_t *u) {
    sqlite3_stmt *st = s->st[ST_JOB_UPDATE];
    sqlite3_bind_int64(st, 1, (int64_t)u->id);
    sqlite3_bind_text(st, 2, u->state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, u->attempts);
    bind_text(st, 4, u->worker_id);
    bind_i64_or_null(st, 5, (int64_t)u->lease_token);
    bind_i64_or_null(st, 6, u->lease_expires_ms);
    bind_i64_or_null(st, 7, u->finished);
    return exec_st(s, ST_JOB_UPDATE);
}

static void bind_result(sqlite3_stmt *st, const store_result_t *r, const char *status) {
    sqlite3_bind_int64(st, 1, (int64_t)r->sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)r->shape_id);
    sqlite3_bind_int64(st, 3, (int64_t)r->config_id);
    sqlite3_bind_int64(st, 4, r->batch_size);
    sqlite3_bind_text(st, 5, status, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 6, r->median_us);
    sqlite3_bind_double(st, 7, r->min_us);
    sqlite3_bind_double(st, 8, r->mean_us);
    sqlite3_bind_double(st, 9, r->stddev_us);
    sqlite3_bind_int64(st, 10, r->samples);
    bind_text(st, 11, r->detail && *r->detail ? r->detail : NULL);
    sqlite3_bind_int64(st, 12, r->registers);
    sqlite3_bind_int64(st, 13, r->spills);
    bind_i64_or_null(st, 14, (int64_t)r->job_id);
    bind_text(st, 15, r->worker_id);
    bind_i64_or_null(st, 16, (int64_t)r->device_id);
    sqlite3_bind_text(st, 17, r->backend ? r->backend : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 18, r->compiler ? r->compiler : "", -1, SQLITE_STATIC);
    bind_text(st, 19, r->kernel_hash);
    sqlite3_bind_int64(st, 20, r->created);
    bind_text(st, 21, r->versions && *r->versions ? r->versions : NULL);
    sqlite3_bind_double(st, 22, r->up_us);
    sqlite3_bind_double(st, 23, r->down_us);
    sqlite3_bind_double(st, 24, r->timed_us);
    sqlite3_bind_int64(st, 25, r->phase ? r->phase : 1);
}

mt_status_t store_result_put(store_t *s, const store_result_t *r, int *outcome) {
    const char *status = wire_status_name(r->status);
    *outcome = STORE_ROW_KEPT;
    if (!status) {
        mt_fmt(s->err, sizeof s->err, "result status %d is unknown", r->status);
        return MT_INVAL;
    }
    bind_result(s->st[ST_RESULT_INSERT], r, status);
    int rc = exec_st(s, ST_RESULT_INSERT);
    if (rc) return rc;
    if (sqlite3_changes(s->db) == 1) {
        *outcome = STORE_ROW_NEW;
        return MT_OK;
    }
    if (r->phase <= 1) return MT_OK; /* a first phase never replaces anything */
    bind_result(s->st[ST_RESULT_REPLACE], r, status);
    rc = exec_st(s, ST_RESULT_REPLACE);
    if (!rc && sqlite3_changes(s->db) == 1) *outcome = STORE_ROW_REPLACED;
    return rc;
}

mt_status_t store_result_prune(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                               uint32_t batch_size, uint32_t phase, const char *detail, bool *changed) {
    sqlite3_stmt *st = s->st[ST_RESULT_PRUNE];
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)shape_id);
    sqlite3_bind_int64(st, 3, (int64_t)config_id);
    sqlite3_bind_int64(st, 4, batch_size);
    sqlite3_bind_int64(st, 5, phase);
    bind_text(st, 6, detail);
    int rc = exec_st(s, ST_RESULT_PRUNE);
    if (!rc) *changed = sqlite3_changes(s->db) == 1;
    return rc;
}

static void bind_ssc(sqlite3_stmt *st, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id) {
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)shape_id);
    sqlite3_bind_int64(st, 3, (int64_t)config_id);
}

mt_status_t store_crash_count(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id, uint32_t *count) {
    uint64_t v = 0;
    bind_ssc(s->st[ST_CRASH_COUNT], sweep_id, shape_id, config_id);
    int rc = exec_u64(s, ST_CRASH_COUNT, &v);
    if (rc == MT_NOTFOUND) {
        v = 0;
        rc = MT_OK;
    }
    if (!rc) *count = (uint32_t)v;
    return rc;
}

mt_status_t store_crash_bump(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                             const char *worker_id, uint32_t *count) {
    bind_ssc(s->st[ST_CRASH_BUMP], sweep_id, shape_id, config_id);
    bind_text(s->st[ST_CRASH_BUMP], 4, worker_id);
    int rc = exec_st(s, ST_CRASH_BUMP);
    if (rc) return rc;
    return store_crash_count(s, sweep_id, shape_id, config_id, count);
}

static const char *col_text(sqlite3_stmt *st, int i) { return (const char *)sqlite3_column_text(st, i); }

typedef int (*row_fn)(sqlite3_stmt *st, void *cb, void *ctx);

/* Steps st (prepared from sql, already bound) to its end and calls row() per row; the first
 * error, SQLite's with sql in s->err, or row()'s. */
static int step_rows(store_t *s, sqlite3_stmt *st, const char *sql, row_fn row, void *cb, void *ctx) {
    for (;;) {
        int src = sqlite3_step(st);
        if (src == SQLITE_DONE) return MT_OK;
        if (src != SQLITE_ROW) return fail(s, src, sql);
        int rc = row(st, cb, ctx);
        if (rc) return rc;
    }
}

/* Runs a row-returning statement (already bound) and calls row() per row. */
static int each(store_t *s, int id, row_fn row, void *cb, void *ctx) {
    sqlite3_stmt *st = s->st[id];
    int rc = step_rows(s, st, g_sql[id], row, cb, ctx);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

static int sweep_row(sqlite3_stmt *st, void *cb, void *ctx) {
    store_sweep_row_t r = {
        .id = (uint64_t)sqlite3_column_int64(st, 0),
        .name = col_text(st, 1),
        .state = col_text(st, 2),
        .spec = sqlite3_column_blob(st, 3),
        .spec_len = (size_t)sqlite3_column_bytes(st, 3),
        .results_planned = (uint64_t)sqlite3_column_int64(st, 4),
        .created = sqlite3_column_int64(st, 5),
    };
    if (!r.name) r.name = "";
    if (!r.state) r.state = "";
    return ((store_sweep_cb)cb)(ctx, &r);
}

mt_status_t store_sweeps_each(store_t *s, store_sweep_cb cb, void *ctx) {
    return each(s, ST_SWEEPS, sweep_row, (void *)cb, ctx);
}

static int job_row(sqlite3_stmt *st, void *cb, void *ctx) {
    store_job_row_t r = {
        .id = (uint64_t)sqlite3_column_int64(st, 0),
        .sweep_id = (uint64_t)sqlite3_column_int64(st, 1),
        .shape_id = (uint64_t)sqlite3_column_int64(st, 2),
        .state = col_text(st, 3),
        .attempts = (uint32_t)sqlite3_column_int64(st, 4),
        .worker_id = col_text(st, 5),
        .lease_token = (uint64_t)sqlite3_column_int64(st, 6),
        .avoid_worker = col_text(st, 7),
        .phase = (uint32_t)sqlite3_column_int64(st, 8),
        .batch_sizes = col_text(st, 9),
    };
    if (!r.phase) r.phase = 1;
    if (!r.state) r.state = "";
    return ((store_job_cb)cb)(ctx, &r);
}

mt_status_t store_jobs_open_each(store_t *s, uint64_t sweep_id, store_job_cb cb, void *ctx) {
    sqlite3_bind_int64(s->st[ST_JOBS_OPEN], 1, (int64_t)sweep_id);
    return each(s, ST_JOBS_OPEN, job_row, (void *)cb, ctx);
}

static int id_row(sqlite3_stmt *st, void *cb, void *ctx) {
    return ((store_id_cb)cb)(ctx, (uint64_t)sqlite3_column_int64(st, 0));
}

mt_status_t store_job_configs_each(store_t *s, uint64_t job_id, store_id_cb cb, void *ctx) {
    sqlite3_bind_int64(s->st[ST_JOB_CONFIGS], 1, (int64_t)job_id);
    return each(s, ST_JOB_CONFIGS, id_row, (void *)cb, ctx);
}

static int shape_row(sqlite3_stmt *st, void *cb, void *ctx) {
    krn_shape_t *sh = ctx;
    memset(sh, 0, sizeof *sh);
    sh->e = (uint32_t)sqlite3_column_int64(st, 0);
    sh->n = (uint32_t)sqlite3_column_int64(st, 1);
    sh->k = (uint32_t)sqlite3_column_int64(st, 2);
    sh->topk = (uint32_t)sqlite3_column_int64(st, 3);
    const char *dt = col_text(st, 4);
    snprintf(sh->dtype, sizeof sh->dtype, "%s", dt ? dt : "bf16");
    sh->block_n = (uint32_t)sqlite3_column_int64(st, 5);
    sh->block_k = (uint32_t)sqlite3_column_int64(st, 6);
    const char *rt = col_text(st, 7);
    snprintf(sh->routing, sizeof sh->routing, "%s", rt ? rt : "");
    *(int *)cb = 1;
    return MT_OK;
}

/* Runs statement id, which selects one row by ?1 = row_id, into out through row (which sets
 * the int at cb): MT_NOTFOUND when there is no such row. */
static int get_by_id(store_t *s, int id, uint64_t row_id, int (*row)(sqlite3_stmt *st, void *cb, void *ctx),
                     void *out) {
    int found = 0;
    sqlite3_bind_int64(s->st[id], 1, (int64_t)row_id);
    int rc = each(s, id, row, &found, out);
    return rc ? rc : found ? MT_OK : MT_NOTFOUND;
}

mt_status_t store_shape_get(store_t *s, uint64_t id, krn_shape_t *shape) {
    return get_by_id(s, ST_SHAPE_GET, id, shape_row, shape);
}

static int config_row(sqlite3_stmt *st, void *cb, void *ctx) {
    for (int i = 0; i < KRN_N_FIELDS; i++) KRN_CONFIG_AT(ctx, i) = (uint32_t)sqlite3_column_int64(st, i);
    *(int *)cb = 1;
    return MT_OK;
}

mt_status_t store_config_get(store_t *s, uint64_t id, krn_config_t *cfg) {
    return get_by_id(s, ST_CONFIG_GET, id, config_row, cfg);
}

mt_status_t store_result_count(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id, uint32_t *n) {
    return store_result_count_from(s, sweep_id, shape_id, config_id, 1, 0, n);
}

mt_status_t store_result_count_from(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                                    uint32_t phase, uint32_t batch_size, uint32_t *n) {
    uint64_t v = 0;
    bind_ssc(s->st[ST_RESULT_COUNT], sweep_id, shape_id, config_id);
    sqlite3_bind_int64(s->st[ST_RESULT_COUNT], 4, phase);
    sqlite3_bind_int64(s->st[ST_RESULT_COUNT], 5, batch_size);
    int rc = exec_u64(s, ST_RESULT_COUNT, &v);
    if (!rc) *n = (uint32_t)v;
    return rc;
}

static int counts_row(sqlite3_stmt *st, void *cb, void *ctx) {
    (void)cb;
    store_sweep_counts_t *c = ctx;
    c->done = (uint64_t)sqlite3_column_int64(st, 0);
    c->failed = (uint64_t)sqlite3_column_int64(st, 1);
    c->pruned = (uint64_t)sqlite3_column_int64(st, 2);
    c->timed_us = sqlite3_column_double(st, 3);
    c->phase2 = (uint64_t)sqlite3_column_int64(st, 4);
    return MT_OK;
}

mt_status_t store_sweep_result_counts(store_t *s, uint64_t sweep_id, store_sweep_counts_t *out) {
    memset(out, 0, sizeof *out);
    sqlite3_bind_int64(s->st[ST_SWEEP_RESULT_COUNTS], 1, (int64_t)sweep_id);
    return each(s, ST_SWEEP_RESULT_COUNTS, counts_row, NULL, out);
}

mt_status_t store_sweep_finalists(store_t *s, uint64_t sweep_id, uint32_t nb, uint64_t *n) {
    *n = 0;
    sqlite3_bind_int64(s->st[ST_SWEEP_FINALISTS], 1, (int64_t)sweep_id);
    sqlite3_bind_int64(s->st[ST_SWEEP_FINALISTS], 2, nb);
    return exec_u64(s, ST_SWEEP_FINALISTS, n);
}

static int best_row(sqlite3_stmt *st, void *cb, void *ctx) {
    return ((store_best_fn)cb)(ctx, (uint64_t)sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1),
                               sqlite3_column_double(st, 2));
}

mt_status_t store_sweep_devices_each(store_t *s, uint64_t sweep_id, store_id_cb cb, void *ctx) {
    sqlite3_bind_int64(s->st[ST_SWEEP_DEVICES], 1, (int64_t)sweep_id);
    return each(s, ST_SWEEP_DEVICES, id_row, (void *)cb, ctx);
}

mt_status_t store_sweep_bests_each(store_t *s, uint64_t sweep_id, store_best_fn fn, void *ctx) {
    sqlite3_bind_int64(s->st[ST_SWEEP_BESTS], 1, (int64_t)sweep_id);
    return each(s, ST_SWEEP_BESTS, best_row, (void *)fn, ctx);
}

static int state_row(sqlite3_stmt *st, void *cb, void *ctx) {
    uint32_t *counts = ctx;
    wire_job_state_t state;
    if (wire_job_state_parse(col_text(st, 0), &state) == MT_OK) counts[state] = (uint32_t)sqlite3_column_int64(st, 1);
    return MT_OK;
}

mt_status_t store_job_state_counts(store_t *s, uint64_t sweep_id, uint32_t counts[WIRE_JOB_NSTATES]) {
    memset(counts, 0, WIRE_JOB_NSTATES * sizeof counts[0]);
    sqlite3_bind_int64(s->st[ST_JOB_STATE_COUNTS], 1, (int64_t)sweep_id);
    return each(s, ST_JOB_STATE_COUNTS, state_row, NULL, counts);
}

mt_status_t store_sweep_device(store_t *s, uint64_t sweep_id, char *name, size_t len) {
    sqlite3_stmt *st = s->st[ST_SWEEP_DEVICE];
    int rc = MT_NOTFOUND;
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW && col_text(st, 0)) {
        snprintf(name, len, "%s", col_text(st, 0));
        rc = MT_OK;
    } else if (src != SQLITE_ROW && src != SQLITE_DONE) {
        rc = fail(s, src, g_sql[ST_SWEEP_DEVICE]);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

static int phase_row(sqlite3_stmt *st, void *cb, void *ctx) {
    return ((store_phase_row_fn)cb)(ctx, (uint64_t)sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1),
                                    sqlite3_column_double(st, 2), (uint64_t)sqlite3_column_int64(st, 3),
                                    sqlite3_column_double(st, 4));
}

mt_status_t store_phase_rows_each(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint32_t phase,
                                  store_phase_row_fn fn, void *ctx) {
    sqlite3_stmt *st = s->st[ST_PHASE_ROWS];
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)shape_id);
    sqlite3_bind_int64(st, 3, phase);
    return each(s, ST_PHASE_ROWS, phase_row, (void *)fn, ctx);
}

static int shape_phase_row(sqlite3_stmt *st, void *cb, void *ctx) {
    return ((store_shape_phase_fn)cb)(ctx, (uint64_t)sqlite3_column_int64(st, 0),
                                      (uint32_t)sqlite3_column_int64(st, 1));
}

mt_status_t store_sweep_phases_each(store_t *s, uint64_t sweep_id, store_shape_phase_fn fn, void *ctx) {
    sqlite3_bind_int64(s->st[ST_SWEEP_PHASES], 1, (int64_t)sweep_id);
    return each(s, ST_SWEEP_PHASES, shape_phase_row, (void *)fn, ctx);
}

/* ---- the ship guard (coordinator/guard.h): statements prepared per call, a few per shape */

/* Prepares sql on s's connection; MT_IO/MT_BUSY with the reason in s->err. */
/* Steps st (prepared from sql) once for its one integer column into *v and finalizes it;
 * no row is an error with SQLite's reason. */
static int step_one_int(store_t *s, sqlite3_stmt *st, const char *sql, int64_t *v) {
    int rc = MT_OK, src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        *v = sqlite3_column_int64(st, 0);
    else
        rc = fail(s, src, sql);
    sqlite3_finalize(st);
    return rc;
}

static int guard_prepare(store_t *s, const char *sql, sqlite3_stmt **st) {
    int src = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    return src == SQLITE_OK ? MT_OK : fail(s, src, sql);
}

mt_status_t store_guard_put(store_t *s, const store_guard_row_t *g) {
    static const char sql[] = "INSERT OR REPLACE INTO guard (sweep_id, shape_id, batch_size, role, engine, config_id,"
                              " searched, source) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
    sqlite3_stmt *st = NULL;
    int rc = guard_prepare(s, sql, &st);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, (int64_t)g->sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)g->shape_id);
    sqlite3_bind_int64(st, 3, g->batch_size);
    bind_text(st, 4, g->role);
    bind_text(st, 5, g->engine);
    sqlite3_bind_int64(st, 6, (int64_t)g->config_id);
    sqlite3_bind_int(st, 7, g->searched ? 1 : 0);
    bind_text(st, 8, g->source ? g->source : "");
    int src = sqlite3_step(st);
    if (src != SQLITE_DONE) rc = fail(s, src, sql);
    sqlite3_finalize(st);
    return rc;
}

mt_status_t store_sweep_spec_get(store_t *s, uint64_t sweep_id, void **spec, size_t *len) {
    static const char sql[] = "SELECT spec FROM sweeps WHERE id = ?1";
    sqlite3_stmt *st = NULL;
    *spec = NULL;
    *len = 0;
    int rc = guard_prepare(s, sql, &st);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        int n = sqlite3_column_bytes(st, 0);
        const void *blob = sqlite3_column_blob(st, 0);
        *spec = mt_malloc(n > 0 ? (size_t)n : 1);
        if (!*spec) {
            rc = MT_NOMEM;
        } else {
            if (n > 0) memcpy(*spec, blob, (size_t)n);
            *len = (size_t)n;
        }
    } else {
        rc = src == SQLITE_DONE ? MT_NOTFOUND : fail(s, src, sql);
    }
    sqlite3_finalize(st);
    return rc;
}

mt_status_t store_sweep_add_planned(store_t *s, uint64_t sweep_id, uint64_t add) {
    static const char sql[] = "UPDATE sweeps SET results_planned = results_planned + ?2 WHERE id = ?1";
    sqlite3_stmt *st = NULL;
    int rc = guard_prepare(s, sql, &st);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)add);
    int src = sqlite3_step(st);
    if (src != SQLITE_DONE) rc = fail(s, src, sql);
    sqlite3_finalize(st);
    return rc;
}

/* Steps sql (an EXISTS of ?1 sweep, ?2 shape, ?3 config) into *yes. */
static int config_exists(store_t *s, const char *sql, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                         bool *yes) {
    sqlite3_stmt *st = NULL;
    *yes = false;
    int rc = guard_prepare(s, sql, &st);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)shape_id);
    sqlite3_bind_int64(st, 3, (int64_t)config_id);
    int64_t v = 0;
    rc = step_one_int(s, st, sql, &v);
    *yes = v != 0;
    return rc;
}

mt_status_t store_config_searched(store_t *s, uint64_t sweep_id, uint64_t shape_id, uint64_t config_id,
                                  bool *searched) {
    static const char sql[] = "SELECT EXISTS (SELECT 1 FROM jobs j JOIN job_configs jc ON jc.job_id = j.id"
                              " WHERE j.sweep_id = ?1 AND j.shape_id = ?2 AND j.phase = 1 AND jc.config_id = ?3)"
                              " OR EXISTS (SELECT 1 FROM results WHERE sweep_id = ?1 AND shape_id = ?2"
                              " AND config_id = ?3 AND phase = 1)";
    return config_exists(s, sql, sweep_id, shape_id, config_id, searched);
}

/* Runs sql (?1 sweep, ?2 shape) and calls row per result row; MT_IO/MT_BUSY with the reason. */
static int guard_walk(store_t *s, const char *sql, uint64_t sweep_id, uint64_t shape_id, row_fn row, void *cb,
                      void *ctx) {
    sqlite3_stmt *st = NULL;
    int rc = guard_prepare(s, sql, &st);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, (int64_t)sweep_id);
    sqlite3_bind_int64(st, 2, (int64_t)shape_id);
    rc = step_rows(s, st, sql, row, cb, ctx);
    sqlite3_finalize(st);
    return rc;
}

static int side_row(sqlite3_stmt *st, void *cb, void *ctx) {
    return ((store_side_row_fn)cb)(ctx, (uint64_t)sqlite3_column_int64(st, 0), (uint32_t)sqlite3_column_int64(st, 1),
                                   sqlite3_column_double(st, 2), sqlite3_column_double(st, 3));
}

mt_status_t store_side_rows_each(store_t *s, uint64_t sweep_id, uint64_t shape_id, store_side_row_fn fn, void *ctx) {
    static const char sql[] = "SELECT config_id, batch_size, median_us, COALESCE(stddev_us, 0) FROM results"
                              " WHERE sweep_id = ?1 AND shape_id = ?2 AND phase = 2 AND status = 'ok'"
                              " AND median_us > 0";
    return guard_walk(s, sql, sweep_id, shape_id, side_row, (void *)fn, ctx);
}

static int guard_row(sqlite3_stmt *st, void *cb, void *ctx) {
    const unsigned char *role = sqlite3_column_text(st, 2);
    return ((store_guard_row_fn)cb)(ctx, (uint32_t)sqlite3_column_int64(st, 0), (uint64_t)sqlite3_column_int64(st, 1),
                                    role ? (const char *)role : "", sqlite3_column_int(st, 3) != 0);
}

mt_status_t store_guard_rows_each(store_t *s, uint64_t sweep_id, uint64_t shape_id, store_guard_row_fn fn, void *ctx) {
    static const char sql[] = "SELECT batch_size, config_id, role, searched FROM guard WHERE sweep_id = ?1"
                              " AND shape_id = ?2";
    return guard_walk(s, sql, sweep_id, shape_id, guard_row, (void *)fn, ctx);
}
