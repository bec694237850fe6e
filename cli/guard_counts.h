/* guard_counts.h - what the ship guard did to a sweep's files, counted by export's own walk and
 * rule (diff, history, the nightly submit). Above both export (exp_pairs) and the guard
 * (shipguard_count_picks), so neither calls the other back. */
#ifndef CLI_GUARD_COUNTS_H
#define CLI_GUARD_COUNTS_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "query.h"
#include "shipguard.h"

/* Counts what export's rule (shipguard_ship, per batch size) does to sweep's best rows that
 * match only (NULL: all; zero and "" fields match anything), by one engine's guard rows:
 * SGLang's, else vLLM's. MT_OK (c->guarded false when the sweep has none), or the query's
 * error with its text in err. */
mt_status_t guard_counts_get(dbq_t *q, uint64_t sweep, const dbq_hist_filter_t *only, shipguard_counts_t *c,
                             char *err, size_t errlen);

#endif
