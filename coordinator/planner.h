/*
 * planner.h - turns a sweep spec into stored jobs.
 *
 * plan_build() validates a Moetune__SweepSpec and expands it (defaults filled,
 * every config of the space checked by the static rules per shape) without
 * touching the database, so tests and the CLI can count a plan. plan_write()
 * stores a built plan inside the caller's transaction and keeps the ids it got, so
 * the scheduler builds the sweep in memory without reading it back.
 */
#ifndef COORD_PLANNER_H
#define COORD_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moetune.pb-c.h"
#include "mt.h"
#include "space.h"
#include "store.h"

#define PLAN_DEFAULT_CHUNK 16 /* configs per job of a sweep's cheapest shape */
#define PLAN_MIN_CHUNK 2      /* ... and at least this many of a costlier one's (a split halves a job) */
#define PLAN_DEFAULT_MAX_ATTEMPTS 3
#define PLAN_MAX_BATCH 1048576u
#define PLAN_REASON_LEN 128
/* Configs (accepted plus rejected, summed over shapes) one sweep may plan: bounds the
 * planning time on the coordinator's loop, its memory and the rows written at submit.
 * 52 shapes of the default 1920-config space fit. */
#define PLAN_MAX_CONFIGS 100000u

typedef struct {
    krn_config_t cfg;
    char reason[PLAN_REASON_LEN];
} plan_rejection_t;

/* The device a sweep is planned for (the GPU model its first lease will bind it to): the limits
 * of its static rules, and whether its worker follows Triton's rules though the sweep's backend
 * is sim (a sim worker standing in for a Triton kernel). */
/* The warm start's source of known picks for shape: at most max configs into out, the most
 * promising first, and what they came from in source (one phrase). Returns how many. */
typedef size_t (*plan_warm_fn)(void *ctx, const krn_shape_t *shape, krn_config_t *out, size_t max, char *source,
                               size_t srclen);

typedef struct {
    krn_limits_t limits;
    bool sim_triton;
    char name[128];    /* the GPU model, for the plan's rules line */
    plan_warm_fn warm; /* NULL: no warm start */
    void *warm_ctx;
} plan_device_t;

#define PLAN_RULES_LEN 224
#define PLAN_WARM_LEN 2048
#define PLAN_MAX_WARM 32 /* known picks a shape's first job takes at most */

typedef struct {
    krn_shape_t shape;
    krn_config_t *valid; /* configs the static rules accept, in space order */
    size_t n_valid;
    plan_rejection_t *rejected; /* the others, with the rule's reason */
    size_t n_rejected;
    /* filled by plan_write: */
    uint64_t shape_id;
    uint64_t *config_ids; /* per valid config */
    uint64_t *job_ids;    /* per job: its valid configs are plan_job_range's */
    size_t n_jobs;
    uint32_t chunk; /* configs per job of this shape (plan_build) */
    size_t n_warm;  /* its first n_warm valid configs are the warm start's known picks: its first job */
    double cost_us; /* the cost model's mean per config (order.h), for chunk and order */
} plan_shape_t;

/* An expanded spec. Owned by the caller; release with plan_destroy(). */
typedef struct {
    plan_shape_t *shapes;
    size_t n_shapes;
    uint32_t *batch_sizes;
    size_t n_batch_sizes;
    krn_space_t space;
    uint32_t chunk; /* the spec's configs per job; 0: by shape (plan_shape_t.chunk) */
    uint32_t max_attempts;
    size_t *order;            /* shape indexes in the order their jobs are stored: costliest first */
    Moetune__Measure measure; /* defaults filled */
    uint32_t jobs, configs_valid, configs_rejected; /* summed over shapes */
    uint32_t sample;                                /* Space.sample: valid configs kept per shape; 0 = all */
    uint32_t configs_unsampled;                     /* valid configs the sample left out, summed */
    uint64_t results_planned;                       /* valid configs x batch sizes */
    char rules[PLAN_RULES_LEN];                     /* the static rules it was planned with, a line */
    char warm[PLAN_WARM_LEN];                       /* what the warm start came from; "" = none */
    uint32_t configs_warm;                          /* known picks first in their shape's order, summed */
    uint64_t sweep_id;                              /* filled by plan_write */
    int64_t created;                                /* filled by plan_write: the sweep row's created (s) */
} plan_t;

/* Fills out with spec's measurement settings, defaults for zero fields (convert.h's
 * WIRE_MEASURE_DEFAULTS: warmup 2, min_samples 10, max_samples 100, rsd_target 0.01,
 * budget_ms 1000, timeout_ms 60000, seed 1; race_margin RACE_DEFAULT_MARGIN
 * (HALVING_RACE_DEFAULT_MARGIN for a halving sweep), or racing off
 * for a listed space (Space.configs: a side-by-side re-measure); decide_margin
 * HALVING_DECIDE_DEFAULT_MARGIN, off (-1) for a listed space; a negative margin stays off;
 * fresh_rounds 1 (each side-by-side round in a new child) for a sweep whose worker backend is
 * cuda and whose strategy is not halving, else -1 (one child); a given one stays).
 * spec->measure may be NULL. */
void plan_measure(const Moetune__SweepSpec *spec, Moetune__Measure *out);
/* Configs per job: spec->chunk, else all of a listed space's configs (Space.configs: one job
 * per shape, measured side by side), else 0: by shape, so that jobs take about equally long
 * (plan_shape_chunks). */
uint32_t plan_chunk(const Moetune__SweepSpec *spec);

/* Validates and expands spec. On success *out is a new plan. On an invalid spec
 * returns MT_INVAL with a one-line reason in err (e.g. "unknown strategy 'x'"); a
 * spec of more than PLAN_MAX_CONFIGS configs (shapes x space) is refused with its
 * count before anything is expanded. */
mt_status_t plan_build(const Moetune__SweepSpec *spec, plan_t **out, char *err, size_t errlen);

/* plan_build for the device dev (NULL: none known). With dev->warm, each shape's known picks that
 * the rules keep (at most PLAN_MAX_WARM) go first in its order as its first job (plan_job_range),
 * and plan_write stores every shape's first job before any other: racing meets their times first.
 * After dev->warm's picks come the engine's: the entries of spec's incumbents for the shape (the
 * files the engine would load, found by tune in its package) and of its warm_files (the engine's
 * file for another GPU or the nearest shape), then the default config of each of
 * the spec's engines (guard_engines) at every batch size. Only the order changes: the same
 * configs are planned. p->warm says where they came from. A listed space (Space.configs) has no warm start. A triton sweep (or a sim one whose device
 * stands in for Triton) then also rejects the configs whose shared memory cannot fit dev
 * (krn_check_triton_on); without a device it keeps them and its worker judges them on its own
 * device before compiling. p->rules says which rules were used. */
mt_status_t plan_build_on(const Moetune__SweepSpec *spec, const plan_device_t *dev, plan_t **out, char *err,
                          size_t errlen);

/* How many jobs shape ps of a built plan has. */
size_t plan_shape_jobs(const plan_shape_t *ps);
/* Job jn of ps: its valid configs [*first, *first + *n). A warm start's first job holds the
 * shape's n_warm known picks, whatever its chunk; every other job chunk configs (the last fewer). */
void plan_job_range(const plan_shape_t *ps, size_t jn, size_t *first, size_t *n);

/* Releases a plan; NULL-safe, nulls *p. */
void plan_destroy(plan_t **p);

/* Pure count of what spec would plan: configs accepted and rejected (summed over
 * shapes) and jobs. MT_INVAL with a reason in err for an invalid spec. */
mt_status_t plan_count(const Moetune__SweepSpec *spec, uint32_t *valid, uint32_t *rejected, uint32_t *jobs, char *err,
                       size_t errlen);

/* Writes plan p of spec (built by plan_build from this spec) inside the caller's open
 * transaction: the sweep row (packed spec, created now), routing, shapes, configs,
 * rejections, jobs and results_planned; the ids it got go into p (sweep_id, created,
 * each shape's shape_id, config_ids and job_ids). MT_IO/MT_BUSY/MT_NOMEM with a reason
 * in err on failure: the caller rolls back. */
mt_status_t plan_write(store_t *db, const Moetune__SweepSpec *spec, plan_t *p, int64_t now, char *err, size_t errlen);

#endif
