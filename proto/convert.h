/*
 * convert.h - the one place where wire messages and the C structs of kernels/space.h are
 * turned into each other: Shape <-> krn_shape_t, Config <-> krn_config_t.
 *
 * Ownership: a Shape filled by wire_shape_to_msg() points at the dtype string of the
 * krn_shape_t it came from; keep that struct alive while the message is in use.
 */
#ifndef WIRE_CONVERT_H
#define WIRE_CONVERT_H

#include <stddef.h>

#include "moetune.pb-c.h"
#include "mt.h"
#include "space.h"

/* Fills out from m (an empty dtype means bf16) and checks it with krn_shape_check().
 * MT_INVAL with a one-line reason in err for a missing or invalid shape. */
mt_status_t wire_shape_from_msg(const Moetune__Shape *m, krn_shape_t *out, char *err, size_t errlen);

/* Initialises m and fills it from sh; m->dtype points into sh. */
void wire_shape_to_msg(const krn_shape_t *sh, Moetune__Shape *m);

/* Copies the six config fields. */
void wire_config_from_msg(const Moetune__Config *m, krn_config_t *out);

/* Initialises m and fills it from c. */
void wire_config_to_msg(const krn_config_t *c, Moetune__Config *m);

/* The measurement settings a Job carries when its spec leaves them 0: X(Measure field,
 * default). The planner fills a sweep's from these and a worker fills a Job's the same way,
 * so no backend has defaults of its own. Warm-up 2: the first replay of a timing graph carries
 * its upload, and an L2 flush precedes every timed replay anyway; racing's 2 judged replays are
 * a survivor's warm-up. Medians with 2 equal those with 5 (docs/performance.md). */
#define WIRE_MEASURE_DEFAULTS(X)                                                                                       \
    X(warmup, 2)                                                                                                       \
    X(min_samples, 10)                                                                                                 \
    X(max_samples, 100)                                                                                                \
    X(rsd_target, 0.01)                                                                                                \
    X(budget_ms, 1000)                                                                                                 \
    X(timeout_ms, 60000)                                                                                               \
    X(seed, 1)

/* The statistics of a measurement's samples: X(field), by the name Moetune__Measurement, the
 * worker's wrk_meas_t and the store's store_result_t all give it, so that one is copied into
 * another field by field. */
#define WIRE_MEASUREMENT_STATS(X) X(median_us) X(min_us) X(mean_us) X(stddev_us) X(samples) X(up_us) X(down_us)

/* Copies m (NULL: an empty Measure) into out with every field of WIRE_MEASURE_DEFAULTS that
 * is 0 set to its default; the other fields (race_margin, ...) are copied as they are. */
void wire_measure_fill(const Moetune__Measure *m, Moetune__Measure *out);

#endif
