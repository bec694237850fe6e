/*
 * race.h - racing: the best committed median per (sweep, shape, batch size).
 *
 * The scheduler notes every committed ok measurement here (and reloads them from the
 * database after a restart) and sends, with each job, the best known at each of the
 * job's batch sizes. A worker stops sampling a config whose first samples are slower
 * than that by more than the sweep's race margin and reports it PRUNED. Only committed
 * results are noted, so nothing is pruned against a best that a crash could lose. A
 * sweep is measured by one GPU model (the scheduler binds it at its first lease), so
 * an H100's best never races an H200's configs.
 */
#ifndef COORD_RACE_H
#define COORD_RACE_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"

typedef struct race race_t;

/* The default race margin (Measure.race_margin 0): 20 %, far beyond the 1-2 % that one
 * config's samples differ by (docs/performance.md), so the winner is never pruned. */
#define RACE_DEFAULT_MARGIN 0.2

race_t *race_new(void);
void race_free(race_t **r);

/* Keeps median_us when it is the lowest seen for the key; MT_NOMEM when it cannot. */
mt_status_t race_note(race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs, double median_us);

/* The best median for the key, 0 when none is known. */
double race_best(const race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs);

/* The largest of the shape's bests over its batch sizes, 0 when none is known: what one
 * config's slowest batch size takes at best, so what a side-by-side job of the shape's
 * finalists at that batch size will take, in proportion. */
double race_shape_top(const race_t *r, uint64_t sweep_id, uint64_t shape_id);

/* Forgets a sweep's entries (it finished or was cancelled). */
void race_forget(race_t *r, uint64_t sweep_id);

/* Entries held, for tests. */
size_t race_size(const race_t *r);

#endif
