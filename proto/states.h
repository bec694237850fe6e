/*
 * states.h - the names of the three state sets that the store, the wire, the scheduler and
 * the CLI share: a result's status, a job's state and a sweep's state. Each is one table
 * here; db/schema.sql's CHECK constraints list the same names (tests/unit/test_states.c
 * checks them against these tables).
 */
#ifndef WIRE_STATES_H
#define WIRE_STATES_H

#include <stdbool.h>

#include "moetune.pb-c.h"
#include "mt.h"

/* Result statuses: X(Moetune__Status value, results.status text, counts as a failure).
 * Pruned rows are racing's (measured, slower than the best): not failures. */
#define WIRE_STATUSES(X)                                                                                               \
    X(MOETUNE__STATUS__STATUS_OK, "ok", false)                                                                         \
    X(MOETUNE__STATUS__STATUS_INVALID, "invalid", true)                                                                \
    X(MOETUNE__STATUS__STATUS_COMPILE_ERROR, "compile_error", true)                                                    \
    X(MOETUNE__STATUS__STATUS_LAUNCH_ERROR, "launch_error", true)                                                      \
    X(MOETUNE__STATUS__STATUS_WRONG_RESULT, "wrong_result", true)                                                      \
    X(MOETUNE__STATUS__STATUS_TIMEOUT, "timeout", true)                                                                \
    X(MOETUNE__STATUS__STATUS_CRASHED, "crashed", true)                                                                \
    X(MOETUNE__STATUS__STATUS_PRUNED, "pruned", false)

/* Moetune__Status values 0 (unknown) .. the last of WIRE_STATUSES: an array indexed by a
 * status has this many entries. */
#define WIRE_N_STATUS (MOETUNE__STATUS__STATUS_PRUNED + 1)

/* The results.status text of a status; NULL for unknown (0) or out of range. */
const char *wire_status_name(int status);
/* The status named name; MT_INVAL when none is. */
mt_status_t wire_status_parse(const char *name, int *status);
/* Whether a status counts as a failed measurement (every known one but ok and pruned). */
bool wire_status_failed(int status);

/* Job states: X(suffix, jobs.state text). */
#define WIRE_JOB_STATES(X)                                                                                             \
    X(PENDING, "pending")                                                                                              \
    X(LEASED, "leased")                                                                                                \
    X(DONE, "done")                                                                                                    \
    X(FAILED, "failed")                                                                                                \
    X(CANCELLED, "cancelled")

typedef enum {
#define WIRE_X_JOB(id, name) WIRE_JOB_##id,
    WIRE_JOB_STATES(WIRE_X_JOB)
#undef WIRE_X_JOB
        WIRE_JOB_NSTATES
} wire_job_state_t;

/* Sweep states: X(suffix, sweeps.state text, finished). A finished sweep takes no more work. */
#define WIRE_SWEEP_STATES(X)                                                                                           \
    X(RUNNING, "running", false)                                                                                       \
    X(DONE, "done", true)                                                                                              \
    X(CANCELLED, "cancelled", true)                                                                                    \
    X(FAILED, "failed", true)

typedef enum {
#define WIRE_X_SWEEP(id, name, fin) WIRE_SWEEP_##id,
    WIRE_SWEEP_STATES(WIRE_X_SWEEP)
#undef WIRE_X_SWEEP
        WIRE_SWEEP_NSTATES
} wire_sweep_state_t;

/* The text of a state; NULL when out of range. */
const char *wire_job_state_name(int state);
const char *wire_sweep_state_name(int state);
/* The state named name; MT_INVAL when none is (name may be NULL). */
mt_status_t wire_job_state_parse(const char *name, wire_job_state_t *state);
mt_status_t wire_sweep_state_parse(const char *name, wire_sweep_state_t *state);
/* Whether name is a finished sweep state (done, cancelled, failed). */
bool wire_sweep_finished(const char *name);
/* Whether name is the text of state (name may be NULL). */
bool wire_sweep_is(const char *name, wire_sweep_state_t state);

#endif
