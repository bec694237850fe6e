/* states.c - the result status, job state and sweep state tables. See states.h. */
#include "states.h"

#include <stddef.h>
#include <string.h>

#include "mt.h"

static const struct {
    int status;
    const char *name;
    bool failed;
} g_status[] = {
#define X(st, name, failed) {st, name, failed},
    WIRE_STATUSES(X)
#undef X
};
#define N_STATUS_ROWS (sizeof g_status / sizeof g_status[0])

static const char *const g_job[WIRE_JOB_NSTATES] = {
#define X(id, name) [WIRE_JOB_##id] = name,
    WIRE_JOB_STATES(X)
#undef X
};

static const char *const g_sweep[WIRE_SWEEP_NSTATES] = {
#define X(id, name, fin) [WIRE_SWEEP_##id] = name,
    WIRE_SWEEP_STATES(X)
#undef X
};

static const bool g_sweep_finished[WIRE_SWEEP_NSTATES] = {
#define X(id, name, fin) [WIRE_SWEEP_##id] = fin,
    WIRE_SWEEP_STATES(X)
#undef X
};

/* The index of name in names[0..n); -1 when absent or name is NULL. */
static int find(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

const char *wire_status_name(int status) {
    for (size_t i = 0; i < N_STATUS_ROWS; i++)
        if (g_status[i].status == status) return g_status[i].name;
    return NULL;
}

mt_status_t wire_status_parse(const char *name, int *status) {
    for (size_t i = 0; name && i < N_STATUS_ROWS; i++) {
        if (strcmp(g_status[i].name, name) == 0) {
            *status = g_status[i].status;
            return MT_OK;
        }
    }
    return MT_INVAL;
}

bool wire_status_failed(int status) {
    for (size_t i = 0; i < N_STATUS_ROWS; i++)
        if (g_status[i].status == status) return g_status[i].failed;
    return false;
}

const char *wire_job_state_name(int state) { return state >= 0 && state < WIRE_JOB_NSTATES ? g_job[state] : NULL; }

const char *wire_sweep_state_name(int state) {
    return state >= 0 && state < WIRE_SWEEP_NSTATES ? g_sweep[state] : NULL;
}

mt_status_t wire_job_state_parse(const char *name, wire_job_state_t *state) {
    int i = find(g_job, WIRE_JOB_NSTATES, name);
    if (i < 0) return MT_INVAL;
    *state = (wire_job_state_t)i;
    return MT_OK;
}

mt_status_t wire_sweep_state_parse(const char *name, wire_sweep_state_t *state) {
    int i = find(g_sweep, WIRE_SWEEP_NSTATES, name);
    if (i < 0) return MT_INVAL;
    *state = (wire_sweep_state_t)i;
    return MT_OK;
}

bool wire_sweep_is(const char *name, wire_sweep_state_t state) {
    int i = find(g_sweep, WIRE_SWEEP_NSTATES, name);
    return i >= 0 && i == (int)state;
}

bool wire_sweep_finished(const char *name) {
    int i = find(g_sweep, WIRE_SWEEP_NSTATES, name);
    return i >= 0 && g_sweep_finished[i];
}
