/*
 * metrics.h - the coordinator's Prometheus endpoint (text format 0.0.4) over HTTP,
 * served by libmicrohttpd on its own thread: GET /metrics.
 *
 * The event loop owns every number; it hands a snapshot over with metrics_publish()
 * (a copy under a mutex) and each commit's duration with metrics_observe_commit(), so
 * the HTTP thread never touches the scheduler.
 *
 * A scrape always answers: a client that has waited 5 s for its request (since it opened or
 * since its last one) is closed, and past 32 open clients the oldest
 * are closed for a new one, so slow or silent clients cannot hold every connection.
 * libmicrohttpd's error lines go to the project's log.
 */
#ifndef COORD_METRICS_H
#define COORD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "scheduler.h"
#include "states.h"

typedef struct metrics metrics_t;

/* What the loop publishes. */
typedef struct {
    uint64_t workers_alive, workers_busy, workers_away, workers_dead;
    uint64_t jobs[WIRE_JOB_NSTATES]; /* by wire_job_state_t */
    uint64_t sweeps_running;
    double gpu_busy; /* the running sweeps' timed kernel time over their wall time and GPUs */
    int gpu_busy_known;
    sched_counters_t c;
    uint64_t results_unacked;
    int storage_error;       /* the last commit failed */
    uint64_t auth_refused;   /* connections refused by CURVE */
    uint64_t cap_refused[2]; /* connections closed over the worker / control socket's cap */
} metrics_snapshot_t;

/* Starts serving on "HOST:PORT" (HOST an IPv4 address, or * for all interfaces; PORT 0
 * picks a free one, see metrics_port). MT_OK with *out set, MT_INVAL for a bad address,
 * MT_ERR when it cannot listen; the reason in err. */
mt_status_t metrics_new(const char *hostport, metrics_t **out, char *err, size_t errlen);

/* The port it listens on. */
uint16_t metrics_port(const metrics_t *m);

/* Replaces the served snapshot (copied). Thread-safe; cheap. */
void metrics_publish(metrics_t *m, const metrics_snapshot_t *snap);

/* Counts one committed (or failed) batch in the commit latency histogram. */
void metrics_observe_commit(metrics_t *m, uint64_t us);

/* The page as served now; caller frees. NULL when out of memory. For tests. */
char *metrics_render(metrics_t *m);

/* Stops the server; NULL-safe, nulls *m. */
void metrics_destroy(metrics_t **m);

#endif
