/*
 * parent.h - the worker daemon's parent process: the ZeroMQ session with the
 * coordinator (proto/PROTOCOL.md, worker side) and the child that measures.
 *
 * The parent never initialises CUDA: it forks the child (child.h) first, sends
 * Hello once the child reported its device, and then feeds the configs of the jobs
 * it is given to the child one at a time, turning each finished config into a
 * Result that it keeps until the coordinator acknowledges it.
 */
#ifndef WRK_PARENT_H
#define WRK_PARENT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "mt.h"
#include "secure.h"

typedef struct {
    const char *endpoint;           /* coordinator's worker socket, "tcp://host:5555" */
    const char *backend;            /* "sim", "cuda" */
    wrk_backend_opts_t bopts;       /* passed to the backend in the child */
    const char *worker_id;          /* NULL: "<hostname>-<pid>-gpu<N>" */
    uint32_t credits;               /* jobs held at once (Ready credits); 0 = 1 */
    uint32_t heartbeat_ms;          /* until the coordinator's Welcome says otherwise; 0 = WIRE_HEARTBEAT_DEFAULT_MS */
    const sec_cert_t *curve;        /* CURVE: this worker's key pair (copied); NULL = plain TCP */
    const sec_cert_t *curve_server; /* CURVE: the coordinator's public key; set with curve */
} wrk_parent_opts_t;

typedef struct wrk_parent wrk_parent_t;

/* Creates a parent (copies opts; nothing is started yet). MT_INVAL with a reason in
 * err when the backend is unknown or an option is out of range. Caller owns *out. */
mt_status_t wrk_parent_new(const wrk_parent_opts_t *opts, wrk_parent_t **out, char *err, size_t errlen);

/* Runs the daemon until SIGINT/SIGTERM (mt_stop_requested) or Shutdown. Returns the
 * process exit code: 0 after a clean stop, 1 when the backend does not open (the
 * one-line reason is printed to stderr as "moetune-worker: <backend> backend:
 * <reason>") or ZeroMQ fails. */
int wrk_parent_run(wrk_parent_t *p);

/* The worker id this parent says Hello with. */
const char *wrk_parent_id(const wrk_parent_t *p);

/* One JSON line of counters: {"jobs":N,"results":N,"dispatch_rtt_us":{"p50":X,
 * "p99":Y,"n":N},...}. The dispatch round trip is from sending Ready to receiving
 * the Job it asked for. */
void wrk_parent_stats_json(const wrk_parent_t *p, char *buf, size_t len);

/* Frees the parent; NULL-safe; nulls *p. */
void wrk_parent_destroy(wrk_parent_t **p);

#endif
