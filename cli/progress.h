/*
 * progress.h - the live progress line of a sweep: done/total, results/s, ETA (from the
 * work left, eta.h) and failures; redrawn with '\r' on a terminal, one line every few seconds otherwise,
 * or one JSON object per update for machines.
 */
#ifndef CLI_PROGRESS_H
#define CLI_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "eta.h"
#include "moetune.pb-c.h"
#include "mt.h"

typedef struct cli_progress cli_progress_t;

/* New progress display writing to out (text) or, with json, JSON lines to out.
 * tty selects '\r' redraws. MT_OK with *p (free with cli_progress_destroy); MT_NOMEM. */
mt_status_t cli_progress_new(FILE *out, bool json, bool tty, cli_progress_t **p);

/* Formats one text progress line for st with workers_alive live workers and eta_s
 * seconds left (< 0 unknown; eta.h) into buf. */
void cli_progress_format(const Moetune__SweepStatus *st, uint32_t workers_alive, double eta_s, char *buf, size_t len);

/* A sweep's work as progress counts it: its results plus, for a halving sweep, phase 2's
 * finalist rows (finalists_expected while shapes are still in phase 1: a phase-2 row
 * replaces its phase-1 row, so the results alone reach their plan when phase 1 ends). */
void cli_progress_work(const Moetune__SweepStatus *st, uint64_t *planned, uint64_t *done);
/* True when that work is all done (the ETA is 0). */
bool cli_progress_complete(const Moetune__SweepStatus *st);
/* The work done in percent; below 100 for a running halving sweep. */
double cli_progress_percent(const Moetune__SweepStatus *st);
/* The counts as the line shows them: "120/480 results", for halving "phase 1: 300/480
 * results[, phase 2: 4/30 finalists]" or "phase 2: 12/30 finalists, 480/480 results". */
void cli_progress_counts(const Moetune__SweepStatus *st, char *buf, size_t len);
/* Adds to a sweep's JSON object "percent" and, for a halving sweep, "phase",
 * "finalists_planned", "finalists_done" and "finalists_expected". */
void cli_progress_json_phase(json_t *o, const Moetune__SweepStatus *st);

/* st's ETA as the line and `status` show it: "1h02m", "4m05s", "12s"; "0s" once every result
 * is in or the sweep is done, "--" when unknown or the sweep ended otherwise (cancelled,
 * failed). eta_s: the estimate. */
void cli_progress_eta_text(const Moetune__SweepStatus *st, double eta_s, char *buf, size_t len);

/* The ETA as JSON shows it ("eta_s"), by the same rule: whole seconds, null where the text is
 * "--". Caller owns the value. */
json_t *cli_progress_eta_json(const Moetune__SweepStatus *st, double eta_s);

/* The estimator's snapshot (eta.h) of st at display clock t_s and wall clock wall_s. Its
 * work counts each finalist row finalist_rounds times (a decide step measures it in 5
 * rounds), so the time left after phase 1 is not that of a few single rows. */
void cli_progress_sample(const Moetune__SweepStatus *st, double t_s, double wall_s, cli_eta_sample_t *s);

/* Shows st when due (always on a TTY; every 5 s otherwise, and on a state change). */
void cli_progress_update(cli_progress_t *p, const Moetune__SweepStatus *st, uint32_t workers_alive);

/* Ends the line (prints the last state once more) before other output. */
void cli_progress_finish(cli_progress_t *p, const Moetune__SweepStatus *st, uint32_t workers_alive);

/* Notes the coordinator's storage state from its counters (NULL = unknown): while a
 * commit fails, every line ends with "storage: <error> (N results waiting for a
 * commit)" as `status` prints it, and a change of that text is shown at once. */
void cli_progress_storage(cli_progress_t *p, const Moetune__Counters *c);

void cli_progress_destroy(cli_progress_t **p);

#endif
