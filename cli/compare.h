/*
 * compare.h - sweeps side by side, for history, diff, report and the nightly submit:
 * each sweep's best ok config per (shape, batch size) with its provenance (device,
 * driver, toolkit, Triton, kernel), `last`/`prev` resolution, and the noise-aware diff.
 * Internal to the CLI; reads the store through db/query.h only.
 */
#ifndef CLI_COMPARE_H
#define CLI_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "mt.h"
#include "query.h"
#include "shipguard.h"
#include "space.h"

/* Exit code of diff and submit --compare-to when a regression was found. */
#define CLI_EXIT_REGRESSION 3

/* One best entry of a sweep. */
typedef struct {
    krn_shape_t shape;
    uint32_t batch_size;
    krn_config_t config;
    double median_us, stddev_us;
    uint32_t samples;
} cmp_best_t;

/* A sweep with its best entries and where they were measured. The provenance fields
 * come from the best rows; n_devices counts distinct device names among them. */
typedef struct {
    uint64_t id;
    char name[128], state[16];
    int64_t created, finished;
    uint64_t results_planned;
    char device[128], driver[32], toolkit[32], backend[16], compiler[48], kernel[80], triton[32];
    uint32_t n_devices;
    char other_device[128]; /* a second device name, when n_devices > 1 */
    cmp_best_t *best;       /* ordered by shape, batch size */
    size_t n_best, cap_best;
    shipguard_counts_t guard; /* what export's ship guard does to the best rows loaded */
} cmp_sweep_t;

/* A list of sweeps in id order; free with cmp_sweeps_clear. */
typedef struct {
    cmp_sweep_t *v;
    size_t n, cap;
} cmp_sweeps_t;

/* Loads, for every sweep that has ok results matching filter, its best entries and
 * provenance, the sweep row (name, state, times), and what the ship guard does to the
 * matching rows (guard_counts_get). Returns MT_OK (possibly with no sweeps) or an error with
 * the reason in err. */
mt_status_t cmp_load(dbq_t *q, const dbq_hist_filter_t *filter, cmp_sweeps_t *out, char *err, size_t errlen);
void cmp_sweeps_clear(cmp_sweeps_t *s);

/* Resolves a sweep reference: a sweep id (it must exist), "last" (the newest sweep that
 * finished as done), or "prev" (the done sweep before "last" of the same spec, the name
 * aside, on the same device). MT_NOTFOUND / MT_INVAL with a one-line reason in err. */
mt_status_t cmp_resolve(dbq_t *q, const char *ref, uint64_t *id, char *err, size_t errlen);

/* The newest done sweep older than sweep with the same spec (names may differ) whose
 * results came from the same device name. MT_OK with *prev, MT_NOTFOUND when there is
 * none (err says why), or an error. */
mt_status_t cmp_previous(dbq_t *q, uint64_t sweep, uint64_t *prev, char *err, size_t errlen);

typedef enum {
    CMP_SAME,
    CMP_REGRESSION,
    CMP_IMPROVEMENT,
    CMP_SLOWER,
    CMP_FASTER,
    CMP_ADDED,
    CMP_REMOVED
} cmp_verdict_t;

/* One (shape, batch size) of a diff; a or b is NULL for entries only in one sweep. */
typedef struct {
    const cmp_best_t *a, *b;
    double change_pct; /* (b - a) / a * 100 */
    double noise_pct;  /* 2 * sqrt(rsd_a^2 + rsd_b^2) * 100, rsd = stddev / median */
    bool beyond_noise;
    cmp_verdict_t verdict;
} cmp_entry_t;

typedef struct {
    cmp_sweep_t a, b; /* owned */
    double threshold_pct;
    cmp_entry_t *e;
    size_t n;
    size_t regressions, improvements;
} cmp_diff_t;

/* Compares sweep a (old) with b (new). An entry is beyond noise when |change| >
 * noise_pct; a regression when it is beyond noise, slower and slower by more than
 * threshold_pct; an improvement when beyond noise, faster by more than threshold_pct.
 * device (NULL = the only one) picks one device of sweeps measured on several;
 * MT_INVAL names the devices when it is needed. Clear with cmp_diff_clear. */
mt_status_t cmp_diff(dbq_t *q, uint64_t a, uint64_t b, double threshold_pct, const char *device, cmp_diff_t *out,
                     char *err, size_t errlen);
void cmp_diff_clear(cmp_diff_t *d);

/* Prints the diff as a table, or as one JSON object with --json; either way with what the
 * ship guard does to each sweep (a "guard:" line; "guard" of "old" and "new"). */
void cmp_diff_print(const cmp_diff_t *d, bool json, FILE *out);

/* "regression", "improvement", "slower (within noise or threshold)"-style names. */
const char *cmp_verdict_name(cmp_verdict_t v);

/* "E=..,N=..,K=..,topk=..[,dtype=..][,block_shape=[n, k]]" */
void cmp_shape_text(const krn_shape_t *s, char *buf, size_t len);

#endif
