/*
 * halving.h - successive halving (SweepSpec.strategy "halving").
 *
 * Phase 1 measures every valid config of a shape at HALVING_PHASE1_SAMPLES samples.
 * When every phase-1 job of a (sweep, shape) is over, one transaction (the
 * coordinator's next commit batch on its writer thread: halving_advance) ranks the phase-1 medians per batch size, keeps the best share
 * of each batch size plus the phase-1 winners of its neighbouring batch sizes, marks
 * every other phase-1 ok row 'pruned' (detail "halving: rank R of N at phase 1") and
 * stores the phase-2 jobs: one shape, one batch size, its finalists (at most chunk a job, or
 * all of them where phase 1 ran on several devices).
 * Phase 2 measures them side by side (WIRE_SIDE_BY_SIDE_ROUNDS rounds: one measurement of a
 * config can catch a mode several percent off, docs/performance.md) to the sweep's RSD rule
 * with racing off, and each phase-2 row replaces its phase-1 row (store_result_put). The transition is
 * idempotent: a shape that has phase-2 jobs is never planned again, so a restart
 * anywhere plans what is missing and continues what is planned.
 */
#ifndef COORD_HALVING_H
#define COORD_HALVING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moetune.pb-c.h"
#include "mt.h"
#include "store.h"

/* Phase 1's samples per (config, batch size): a median of 5 stays put with two outliers and
 * ranks well inside the gap between the kept share and the rest; phase 2 buys the precision. */
#define HALVING_PHASE1_SAMPLES 5
/* A halving sweep's race margin when none is given (Measure.race_margin 0): phase 1 only ranks
 * and only the best few go on, so a config 10 % off the best after 2 replays stops; wider than two
 * measurements of one config differ (docs/performance.md). The check layer keeps WRK_CHECK_FLOOR. */
#define HALVING_RACE_DEFAULT_MARGIN 0.1
/* The share of each batch size's configs that goes on to phase 2, at least KEEP_MIN. */
#define HALVING_KEEP_DIV 16
#define HALVING_KEEP_MIN 4

/* A racing sweep's decide step reuses phase 2: when a shape's jobs are over, the configs
 * within Measure.decide_margin of each batch size's best (at most HALVING_DECIDE_MAX, and
 * only where there are two or more) are re-measured side by side (one phase-2 job per batch
 * size, the largest's first), racing off, to the RSD rule; their rows replace the first ones.
 * Nothing is pruned. Default margin 2 %: what separate measurements of one config differ by, so
 * every pick noise could have swapped is re-measured (docs/performance.md). */
#define HALVING_DECIDE_MAX 4
#define HALVING_DECIDE_DEFAULT_MARGIN 0.02
/* Several GPUs: each device whose fastest row at a batch size is within HALVING_DEVICE_MARGIN
 * of the best, for at most HALVING_DEVICE_MAX devices besides the best's (the nearest first),
 * adds its own finalists: in the decide step its near-ties within the margin of its own fastest
 * (at most HALVING_DEVICE_NEAR); in halving its rows within the kept share's spread of its own
 * fastest (at most half the share), each batch size's finalists then in one job. Why: cards of
 * one model read the same kernels a few percent apart, more than the decide margin, so a config
 * only the slower card measured would miss the re-measure (docs/performance.md). */
#define HALVING_DEVICE_MARGIN 0.05
#define HALVING_DEVICE_MAX 2
#define HALVING_DEVICE_NEAR 2
/* Two modes: the decide step also re-measures, at each batch size, at most HALVING_DECIDE_MODES
 * rows whose fastest sample beat the best's fastest sample by more than half the margin while
 * their median stays within HALVING_MODE_REACH of the best's, the fastest sample first. Why: a
 * config whose samples fall in two modes can rank past the margin by a median taken in its slow
 * mode (docs/performance.md). Against the best's fastest sample, not its median, which noise
 * alone undercuts at most batch sizes. */
#define HALVING_DECIDE_MODES 2
#define HALVING_MODE_REACH 0.05
/* Where the margin and the modes leave fewer than HALVING_DECIDE_MIN finalists, the next rows
 * by median within HALVING_MODE_REACH of the best fill up to it: a lone best may be one
 * measurement caught in a fast mode, so it is confirmed side by side (docs/performance.md). */
#define HALVING_DECIDE_MIN 3
/* The near-ties a batch size is expected to have, for progress before they are known (about
 * what measured decide steps re-measure, docs/performance.md). */
#define HALVING_DECIDE_EXPECT 3

/* A strategy name the planner and the CLI accept. */
bool halving_strategy_known(const char *strategy);
/* True when strategy names successive halving. */
bool halving_is(const char *strategy);
/* The decide margin of a sweep of strategy and filled measure (planner.h plan_measure):
 * positive when it has a decide step (racing on, not halving), else 0. */
double halving_decide_margin(const char *strategy, const Moetune__Measure *filled);

/* The measurement settings of a job of phase (1 or 2) of a halving sweep (decide false)
 * or a racing sweep's decide step (decide true) whose settings are sweep (defaults
 * filled, planner.h plan_measure): halving's phase 1 takes exactly HALVING_PHASE1_SAMPLES
 * samples and races as the sweep does, a decide sweep's phase 1 is the sweep's own; phase
 * 2 is the sweep's RSD rule with racing off, so a finalist is never cut short. */
void halving_measure(const Moetune__Measure *sweep, uint32_t phase, bool decide, Moetune__Measure *out);

/* One phase-1 ok row, as halving_choose ranks it. */
typedef struct {
    uint64_t config_id;
    uint64_t device_id; /* the GPU that measured it (devices.id; 0: not known, one device) */
    uint32_t bi;        /* index of its batch size in the sweep's sorted list */
    double median_us;
    double min_us; /* its fastest sample (0: not known) */
    uint32_t rank; /* out: 1 = fastest at its batch size */
    bool finalist; /* out */
    bool guard;    /* a ship-guard config (guard.h): measured beside the finalists */
} halving_row_t;

/* Pure: ranks rows per batch size (median, then config id) and marks the finalists:
 * the best max(HALVING_KEEP_MIN, ceil(n / HALVING_KEEP_DIV)) of each batch size's n
 * rows; on several devices, of each other device whose fastest row is within
 * HALVING_DEVICE_MARGIN of the best (at most HALVING_DEVICE_MAX), its rows within the kept
 * share's spread of its own fastest, at most half the share; plus, at each batch size, the rank-1
 * configs of the neighbouring batch sizes (bi - 1, bi + 1) where they have a row. Reorders
 * rows. nb bounds every bi: MT_INVAL for a row whose bi is not below it (rows untouched);
 * MT_NOMEM. */
mt_status_t halving_choose(halving_row_t *rows, size_t n, size_t nb);
/* Pure: ranks rows as halving_choose and marks the decide step's finalists: at each batch
 * size the configs whose median is within margin (> 0) of the best (median <= best x (1 +
 * margin)), at most HALVING_DECIDE_MAX; on several devices, of each other device whose fastest
 * row is within HALVING_DEVICE_MARGIN of the best (at most HALVING_DEVICE_MAX, the nearest) its
 * rows within margin of its own fastest, at most HALVING_DEVICE_NEAR; the rows of two modes
 * (min_us < the best's min_us (its median where 0) x (1 - margin / 2), median <= best x (1 +
 * HALVING_MODE_REACH)), at most HALVING_DECIDE_MODES, the lowest min_us first; where that makes
 * fewer than HALVING_DECIDE_MIN, the next rows by rank within HALVING_MODE_REACH of the best up
 * to it; none where only the best is. Reorders rows. MT_INVAL as halving_choose. */
mt_status_t halving_choose_decide(halving_row_t *rows, size_t n, size_t nb, double margin);

/* About how many finalist rows halving_choose keeps of a shape whose configs each have a
 * row at nb batch sizes: the kept share at each batch size plus one neighbour's winner
 * (there may be two, or none new), at most every config. For a progress estimate. */
uint64_t halving_finalists_estimate(uint64_t configs, size_t nb);

/* Formats batch sizes as "1,16,256" into buf; MT_INVAL when it does not fit. */
mt_status_t halving_bs_format(const uint32_t *bs, size_t n, char *buf, size_t len);
/* Parses "1,16,256" into a new array (*out, caller frees) of *n values, each of which
 * must be one of allowed[0..n_allowed); MT_INVAL for anything else (a stored row is data). */
mt_status_t halving_bs_parse(const char *text, const uint32_t *allowed, size_t n_allowed, uint32_t **out, size_t *n);

/* What one shape's transition did. */
typedef struct {
    bool already;       /* phase 2 was planned before: nothing changed */
    uint32_t finalists; /* (config, batch size) pairs that go on */
    uint32_t pruned;    /* phase-1 ok rows turned 'pruned' */
    uint32_t jobs;      /* phase-2 jobs stored */
    uint32_t guard_new; /* result rows the ship guard added outside the searched space (guard.h) */
} halving_step_t;

/* halving_plan_shape inside the caller's open transaction (the coordinator's commit
 * batch, on its writer thread): the same reads and writes, no begin or commit; on
 * failure the caller rolls back. */
mt_status_t halving_advance(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                            uint32_t chunk, double decide, int64_t now_s, halving_step_t *out);

/* The phase transition of (sweep, shape), in one transaction of its own on db: reads
 * the phase-1 ok rows, chooses the finalists, prunes the others' rows and stores the
 * phase-2 jobs (one batch size and at most chunk configs each; all of a batch size's where
 * phase 1 ran on several devices). bs: the sweep's batch sizes, sorted. decide:
 * 0 for halving, else the decide step's margin (halving_choose_decide; nothing pruned). A
 * shape whose phase 2 is planned already changes nothing (out->already). On failure
 * nothing is stored: MT_BUSY/MT_IO with store_errmsg(db), MT_NOMEM. */
mt_status_t halving_plan_shape(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                               uint32_t chunk, double decide, int64_t now_s, halving_step_t *out);

#endif
