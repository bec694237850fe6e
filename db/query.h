/*
 * query.h - read-only queries over the moetune store for the CLI and the exporter.
 *
 * The connection is opened with SQLITE_OPEN_READONLY, so these functions can run
 * beside a live coordinator (WAL) and never change the file. Every statement is
 * prepared once per call with bound parameters.
 */
#ifndef DBQ_QUERY_H
#define DBQ_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "space.h"

typedef struct dbq dbq_t;

/* Opens path read-only. The file must exist and hold the moetune tables. Returns
 * MT_OK with *out set (free with dbq_close), MT_NOMEM, or MT_IO/MT_INVAL with sqlite's
 * text in err. */
mt_status_t dbq_open(const char *path, dbq_t **out, char *err, size_t errlen);

/* Closes the connection and nulls *q. NULL-safe. */
void dbq_close(dbq_t **q);

/* Row filter; zero / empty fields match anything. */
typedef struct {
    uint64_t sweep_id;
    uint32_t e, n, k, topk;
    char dtype[16];
    uint32_t batch_size;
    char status[16];
    bool best;      /* only the lowest-median ok row per (shape, batch size);
                          ties go to the lower config id */
    uint32_t limit; /* 0 = no limit */
} dbq_filter_t;

/* One result row with its shape, config and device. Strings are always terminated
 * (truncated when the stored text is longer). versions points into the statement's
 * row: valid only during the callback (copy it to keep it), never NULL ("" when the
 * row has none). up_us/down_us are 0 when not measured. */
typedef struct {
    uint64_t result_id, sweep_id, shape_id, config_id;
    krn_shape_t shape;
    krn_config_t config;
    uint32_t batch_size;
    char status[16];
    double median_us, min_us, mean_us, stddev_us;
    uint32_t samples;
    char detail[200];
    char worker_id[128];
    char device_name[128], device_uuid[96], driver_version[32], cuda_version[32];
    char backend[16], compiler[48], kernel_hash[80];
    int64_t created;
    char export_dir[48];  /* "sim" for backend sim, else the compiler */
    const char *versions; /* triton: "kernel=.. triton=.. torch=.. python=..[ engine=..]" */
    double up_us, down_us;
    char routing_source[256]; /* the routing file shape.routing came from; "" for uniform routing */
    bool device_name_cut;     /* the stored device name is longer than device_name holds */
} dbq_result_t;

/* Called once per row; returns an MT_* status, and one other than MT_OK stops the walk and is returned. */
typedef mt_status_t (*dbq_result_fn)(void *ctx, const dbq_result_t *row);

/* Walks the results that match filter, ordered by sweep, shape, batch size, median
 * (the best rows by shape and batch size). Returns MT_OK, the error fn stopped the walk
 * with, or MT_ERR (MT_BUSY when the database is locked) with sqlite's text in err. */
mt_status_t dbq_results(dbq_t *q, const dbq_filter_t *filter, dbq_result_fn fn, void *ctx, char *err, size_t errlen);

/* Which sweeps an export reads: ids[0, n_ids) (n_ids = 0: every sweep); with latest,
 * per (export dir, device name, shape) only the newest of them that has ok rows. */
typedef struct {
    const uint64_t *ids;
    size_t n_ids;
    bool latest;
} dbq_select_t;

/* Walks the ok results an export reads (sel NULL = every sweep), ordered by export
 * dir, device name, shape, batch size, median. With best, only the lowest median per
 * (export dir, device name, shape, batch size), ties to the lower config id; rows of
 * other statuses, `crashed` included, are never walked. An ok row whose median is NULL
 * is walked with median_us 0 (first), for the caller to refuse. */
mt_status_t dbq_export_rows(dbq_t *q, const dbq_select_t *sel, bool best, dbq_result_fn fn, void *ctx, char *err,
                            size_t errlen);

/* How much of its plan a sweep measured on one device: one row per (sweep, export dir,
 * device name, shape) that has results and per batch size the sweep has results for. */
typedef struct {
    uint64_t sweep_id, shape_id;
    char export_dir[48], device_name[128], state[16];
    uint32_t batch_size;
    uint64_t measured; /* configs with a result row of any status from this device */
    uint64_t planned;  /* configs of the shape's jobs, plus any config with a result */
} dbq_coverage_t;

/* Returns as dbq_result_fn. */
typedef mt_status_t (*dbq_coverage_fn)(void *ctx, const dbq_coverage_t *row);

/* Walks the coverage of the selected sweeps (sel NULL or n_ids 0 = every sweep; latest
 * is ignored), ordered by sweep, export dir, device name, shape, batch size. */
mt_status_t dbq_coverage(dbq_t *q, const dbq_select_t *sel, dbq_coverage_fn fn, void *ctx, char *err, size_t errlen);

/* A sweep row; spec points at the packed SweepSpec, valid only during the callback. */
typedef struct {
    uint64_t id;
    char name[128];
    char state[16];
    uint64_t results_planned;
    int64_t created, finished;
    const void *spec;
    size_t spec_len;
} dbq_sweep_t;

/* Returns as dbq_result_fn. */
typedef mt_status_t (*dbq_sweep_fn)(void *ctx, const dbq_sweep_t *sweep);

/* Walks the sweeps in id order (state NULL = all, else only that state). */
mt_status_t dbq_sweeps(dbq_t *q, const char *state, dbq_sweep_fn fn, void *ctx, char *err, size_t errlen);

/* What dbq_history walks; zero / empty fields match anything. */
typedef struct {
    uint64_t sweep_id;
    uint32_t e, n, k, topk;
    char dtype[16];
    uint32_t batch_size;
    char device[128]; /* the device name exactly as stored */
    char backend[16];
} dbq_hist_filter_t;

/* Walks, per (sweep, shape, device name, batch size), the ok result with the lowest
 * median (ties: lower config id) among those that match filter. Ordered by sweep id
 * (the order sweeps were stored in), shape, device, batch size. Returns as
 * dbq_results. */
mt_status_t dbq_history(dbq_t *q, const dbq_hist_filter_t *filter, dbq_result_fn fn, void *ctx, char *err,
                        size_t errlen);

/* A sweep's warm start: the configs that won earlier sweeps on a GPU model, for a shape. */
typedef struct {
    krn_config_t cfg;
    uint32_t wins; /* batch sizes it was the best at */
} dbq_pick_t;

/* The configs of lowest median (status ok) per batch size among the results of backend on GPU
 * model device (any sweep, kernel, Triton or torch version) for shape, or when it has none for
 * the nearest shape of the same dtype and block shape (the least sum over E, N, K and topk of
 * how far the ratio of the two is from 1); most batch sizes won first, at most max into out.
 * *n is how many, *from the shape they came from (shape itself when measured), *n_sweeps how
 * many sweeps measured it. MT_OK with *n 0 when none is known; MT_ERR/MT_BUSY with sqlite's text
 * in err. */
mt_status_t dbq_known_picks(dbq_t *q, const char *device, const char *backend, const krn_shape_t *shape,
                            dbq_pick_t *out, size_t max, size_t *n, krn_shape_t *from, uint32_t *n_sweeps, char *err,
                            size_t errlen);

/* One ship-guard row (coordinator/guard.h): a config the engine runs at a batch size without
 * the sweep's file, and its measurement. row holds the shape and config always; its result
 * fields only when measured (an ok row; else 0 and ""); its sweep, shape, config and batch
 * size are the guard row's. */
typedef struct {
    dbq_result_t row;
    char role[16];    /* "default" or "incumbent" */
    char engine[32];  /* "sglang", "vllm"; between two keys "sglang-default" etc. */
    char source[256]; /* the rule, or the incumbent file and its key */
    bool searched;    /* in the sweep's searched space */
    bool measured;    /* it has an ok row */
} dbq_guard_t;

/* Returns as dbq_result_fn; g is valid during the call (row.versions too). */
typedef mt_status_t (*dbq_guard_fn)(void *ctx, const dbq_guard_t *g);

/* Walks the guard rows of the selected sweeps (sel NULL or n_ids 0 = every sweep), ordered by
 * sweep, shape, batch size, role, engine; none in a file before schema 6. Returns as
 * dbq_results. */
mt_status_t dbq_guard_rows(dbq_t *q, const dbq_select_t *sel, dbq_guard_fn fn, void *ctx, char *err, size_t errlen);

#endif
