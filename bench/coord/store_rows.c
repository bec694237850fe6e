/* store_rows.c - what one result row costs the coordinator's writer: the store as the
 * coordinator opens it (db/store.c: the schema, WAL, synchronous=NORMAL, foreign keys) and its
 * insert (store_result_put), one transaction per 256 Results x 18 batch sizes (the writer's
 * batch, SCHED_BATCH_MAX), 8 shapes x 1152 configs x 18 batch sizes, a config's 18 rows
 * together and the configs in a shuffled order (Results arrive interleaved across shapes), two
 * in three ok and the rest pruned. Variants, alternately in one process, each on a new file:
 *   schema       the store's schema as it is
 *   +best_index  plus schema 4's index results_best (shape, batch size, status, median)
 * Built and run by bench/coord/store_rows.sh. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mt.h"
#include "store.h"

enum { SHAPES = 8, CONFIGS = 1152, SIZES = 18, BATCH = 256 * SIZES };

static const uint32_t g_bs[SIZES] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096};

static int sql(sqlite3 *db, const char *q) {
    char *msg = NULL;
    if (sqlite3_exec(db, q, NULL, NULL, &msg) == SQLITE_OK) return 0;
    fprintf(stderr, "store_rows: %s: %s\n", q, msg ? msg : "?");
    sqlite3_free(msg);
    return 1;
}

/* A fresh store at path with the rows the results refer to (and the index for +best_index). */
static int prepare(const char *path, int best_index) {
    char err[256];
    store_t *s = NULL;
    if (store_open(path, &s, err, sizeof err)) {
        fprintf(stderr, "store_rows: %s\n", err);
        return 1;
    }
    store_close(&s);
    sqlite3 *db = NULL;
    int rc = sqlite3_open(path, &db) != SQLITE_OK;
    rc = rc || sql(db, "BEGIN");
    rc = rc || sql(db, "INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 's', x'00', 'running', 0)");
    rc = rc || sql(db, "INSERT INTO devices (id, name, uuid) VALUES (1, 'sim', 'u')");
    rc = rc || sql(db, "WITH RECURSIVE c(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM c WHERE v < 8)"
                       " INSERT INTO shapes (id, e, n, k, topk, dtype) SELECT v, 8, 64 * v, 4096, 2, 'bf16' FROM c");
    rc = rc || sql(db, "WITH RECURSIVE c(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM c WHERE v < 1152)"
                       " INSERT INTO configs SELECT v, v, 1, 1, 1, 1, 1 FROM c");
    if (best_index) rc = rc || sql(db, "CREATE INDEX results_best ON results (shape_id, batch_size, status, median_us)");
    rc = rc || sql(db, "COMMIT");
    sqlite3_close(db);
    return rc;
}

/* Inserts every row through store_result_put; its seconds, or < 0 on failure. */
static double insert(const char *path, const uint32_t *order, const double *med) {
    char err[256];
    store_t *s = NULL;
    if (store_open(path, &s, err, sizeof err)) {
        fprintf(stderr, "store_rows: %s\n", err);
        return -1;
    }
    char worker[32];
    store_result_t r = {.sweep_id = 1, .device_id = 1, .worker_id = worker, .backend = "sim", .compiler = "sim",
                        .kernel_hash = "abababababababababababababababababababababababababababababababab",
                        .min_us = 1.0, .mean_us = 1.0, .stddev_us = 0.5, .samples = 10, .timed_us = 12.5,
                        .created = 1764979200, .phase = 1};
    size_t n = (size_t)SHAPES * CONFIGS * SIZES, done = 0;
    uint64_t t0 = mt_now_us();
    int rc = MT_OK;
    while (!rc && done < n) {
        rc = store_begin(s);
        for (size_t k = 0; !rc && k < BATCH && done < n; k++, done++) {
            uint32_t g = order[done / SIZES]; /* a config of a shape: its 18 rows together */
            r.shape_id = 1 + g / CONFIGS;
            r.config_id = 1 + g % CONFIGS;
            r.job_id = 1 + g / 16;
            r.batch_size = g_bs[done % SIZES];
            r.median_us = med[done];
            r.status = done % 3 == 2 ? MOETUNE__STATUS__STATUS_PRUNED : MOETUNE__STATUS__STATUS_OK;
            snprintf(worker, sizeof worker, "worker-%u", (unsigned)(g % 256));
            int outcome = 0;
            rc = store_result_put(s, &r, &outcome);
            if (!rc && outcome != STORE_ROW_NEW) rc = MT_ERR;
        }
        if (!rc) rc = store_commit(s);
    }
    double took = (double)(mt_now_us() - t0) / 1e6;
    if (rc) fprintf(stderr, "store_rows: insert failed (%d): %s\n", rc, store_errmsg(s));
    store_close(&s);
    return rc ? -1 : took;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: store_rows DIR [ROUNDS]\n");
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    size_t groups = (size_t)SHAPES * CONFIGS, n = groups * SIZES;
    uint32_t *order = malloc(groups * sizeof *order);
    double *med = malloc(n * sizeof *med);
    if (!order || !med) return 1;
    uint64_t x = 1; /* a fixed shuffle and medians: the same rows for every variant */
    for (size_t i = 0; i < groups; i++) order[i] = (uint32_t)i;
    for (size_t i = groups - 1; i > 0; i--) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t j = (size_t)((x >> 33) % (i + 1));
        uint32_t t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        med[i] = (double)(x >> 11) / (double)(1ull << 53) * 100.0;
    }
    static const char *const names[2] = {"+best_index", "schema"};
    for (int round = 1; round <= rounds; round++) {
        for (int v = 0; v < 2; v++) {
            static const char *const files[] = {"", "-wal", "-shm", ".lock"};
            char path[4096], side[4200];
            snprintf(path, sizeof path, "%s/%s.db", argv[1], names[v]);
            for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
                snprintf(side, sizeof side, "%s%s", path, files[f]);
                unlink(side);
            }
            if (prepare(path, v == 0)) return 1;
            double took = insert(path, order, med);
            if (took < 0) return 1;
            struct stat st;
            long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1; /* closed: the WAL is in */
            printf("round %d %-12s rows %zu  %.2f s  %.2f us/row  file %.1f MB\n", round, names[v], n, took,
                   took / (double)n * 1e6, (double)size / 1e6);
            fflush(stdout);
        }
    }
    free(order);
    free(med);
    return 0;
}
