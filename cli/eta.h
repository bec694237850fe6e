/*
 * eta.h - the time a sweep has left, from the work left rather than the last seconds'
 * rate.
 *
 * Fed the status snapshots of one sweep as a display sees them (any spacing), it cuts
 * the results committed since the first snapshot into chunks of about 0.5 % of the plan
 * and, per chunk, notes the seconds per result and the share pruned by racing. A pruned
 * result (stopped after its first samples) costs less than a fully measured one, and
 * the share pruned rises as the best configs get known, so the results left are costed
 * as: seconds per result as a line in the pruned share (fitted over the chunks), at the
 * share the trend of the chunks predicts for the rest of the sweep. Every job measures a
 * config at each of the sweep's batch sizes, so the results left hold the batch sizes in
 * the same mix as the results measured: a chunk's cost is already the cost by batch size.
 * A halving sweep is fed its results plus its phase-2 finalist rows (progress.h,
 * cli_progress_work) and no pruned count: its phase-2 rows are dearer and measure only
 * the finalists' batch sizes, and the recent chunks, weighted most, carry that cost.
 *
 * The answer counts down between snapshots and moves toward a new estimate with a time
 * constant of 30 s, at most 3 % of itself per second and 15 % per snapshot, so that it
 * does not swing from one progress line to the next. Before the first chunks it falls
 * back to the sweep's life so far (created_s) and then to the coordinator's rate.
 */
#ifndef CLI_ETA_H
#define CLI_ETA_H

#include <stdint.h>

#include "mt.h"

typedef struct cli_eta cli_eta_t;

/* One snapshot: the display's clock (any monotonic seconds), the wall clock (for
 * created_s), and the sweep's status fields. */
typedef struct {
    double t_s, wall_s;
    uint64_t planned, done, pruned;
    uint64_t created_s; /* wall seconds; 0 = unknown */
    double rate;        /* the coordinator's recent results per second; 0 = unknown */
} cli_eta_sample_t;

/* New estimator. MT_OK with *out (free with cli_eta_destroy); MT_NOMEM. */
mt_status_t cli_eta_new(cli_eta_t **out);

/* Takes one snapshot (t_s not before the previous one's) and sets *eta_s to the seconds
 * left, or -1 when nothing can be said yet; 0 once every planned result is done. MT_OK;
 * MT_INVAL for a clock going back (the snapshot is ignored, *eta_s is the last answer);
 * MT_NOMEM. */
mt_status_t cli_eta_observe(cli_eta_t *e, const cli_eta_sample_t *s, double *eta_s);

/* The answer for a single snapshot, as cli_eta_observe gives it for a first one. */
double cli_eta_once(const cli_eta_sample_t *s);

void cli_eta_destroy(cli_eta_t **e);

#endif
