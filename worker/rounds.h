/* rounds.h - a side-by-side job's rounds (proto Job.rounds): its configs are measured in
 * turn several times and each config's Result holds its fastest round.
 *
 * Why: on one GPU, one config's separate measurements land in one of two or more modes a
 * few percent apart (docs/performance.md); a mode lasts a whole measurement (its samples agree within 1 %) and changes between them. A single
 * measurement per config therefore ranks near-ties by which mode each one caught; the
 * fastest of several rounds, taken in turn, ranks them by what each config does at its best
 * and repeats from run to run. The other statistics pool every round's samples. Each round
 * has budget_ms / rounds (the worker's parent): the rounds share one measurement's budget. */
#ifndef MT_WORKER_ROUNDS_H
#define MT_WORKER_ROUNDS_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

/* Folds one round's n measurements (one per batch size) of a config into kept (the same
 * n). first: this is the config's first round (kept is overwritten). A measurement that
 * is not OK in any round makes the kept one that status (a config that failed once is
 * not reported as fine); between two OK rounds the one with the lower median gives the
 * median, up/down and detail, while samples, timed_us, mean, stddev and min pool both. */
void wrk_rounds_merge(wrk_meas_t *kept, const wrk_meas_t *round, size_t n, bool first);

/* Appends each round's median to an OK measurement's detail, in the order measured:
 * "; rounds 2449.2 2471 2468.3" (5 significant digits; cut short where the detail is full).
 * The kept median is the fastest of them; the list lets a reader see how far apart the rounds
 * read (a config's level drawn again each round, or a single fast round), which the pooled
 * statistics do not show. Not OK measurements are left alone. */
void wrk_rounds_note(wrk_meas_t *m, const double *round_us, size_t n_rounds);

/* Whether a config needs no further rounds: none of its n kept measurements is OK
 * (failed, invalid or pruned at every batch size). */
bool wrk_rounds_settled(const wrk_meas_t *kept, size_t n);

#endif
