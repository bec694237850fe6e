/*
 * coord.h - the coordinator daemon as an embeddable object: two ROUTER sockets
 * (workers, control clients), a plain zmq_poll loop, the scheduler and the store.
 *
 * coord_run() owns every socket and the scheduler on one thread; result
 * batches are committed by a writer thread (writer.h) on its own connection, so
 * the loop never waits for a commit (Acks still go out only after it). A submit
 * is planned and stored on that thread too (submits wait their turn, 64 at most),
 * and its client gets Submitted when the sweep is stored and in memory: the loop
 * keeps serving workers and other requests while a large plan runs. The
 * coordinator stays the database's only writer. Only coord_stop() may be
 * called from another thread.
 */
#ifndef COORD_COORD_H
#define COORD_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "scheduler.h"
#include "secure.h"

typedef struct coord coord_t;

/* Both sockets bind loopback unless told otherwise; a plain (no CURVE) bind that other
 * hosts can reach is logged as a warning at start. */
#define COORD_DEFAULT_BIND "tcp://127.0.0.1:5555"

/* Connections each socket keeps at most; more are closed at once and logged. With the
 * per-message limit they bound what peers can make the coordinator buffer (connections
 * x (max_msg_bytes + 16 KiB)). The worker cap is lowered to fit the descriptor limit
 * (raised to its hard limit at start) minus the control socket's and a reserve. */
#define COORD_DEFAULT_CONNS 1024u
#define COORD_CONTROL_CONNS 64u
#define COORD_FD_RESERVE 64u

/* What all connections together may make the coordinator buffer, by default: every
 * connection's receive buffer is capped (ZMQ_MAXMSGSIZE) so that the control socket's
 * connections x (max_msg_bytes + 16 KiB) plus the worker socket's connections x its own
 * per-connection cap stay within it. The worker socket's message limit is lowered to fit
 * (a worker sends small messages); a sweep whose Result cannot fit is refused at submit. */
#define COORD_DEFAULT_BUFFER_MB 1024u
#define COORD_CONN_SLACK 16384u /* over a socket's message limit by this much still gets an Error */

typedef struct {
    const char *db_path;     /* required */
    const char *bind;        /* worker endpoint; NULL = COORD_DEFAULT_BIND (loopback) */
    const char *control;     /* control endpoint; NULL = tcp://127.0.0.1:5556 */
    uint32_t heartbeat_ms;   /* 0 = WIRE_HEARTBEAT_DEFAULT_MS */
    uint32_t lease_ms;       /* 0 = WIRE_LEASE_DEFAULT_MS, or two heartbeats when longer; at least 2 heartbeats */
    size_t max_msg_bytes;    /* 0 = WIRE_DEFAULT_MAX_BYTES */
    void *zmq_ctx;           /* a ZeroMQ context to share (inproc tests); NULL = own */
    const sec_cert_t *curve; /* key pair: with curve_allow both sockets are CURVE servers; NULL = plain */
    const char *curve_allow; /* directory of the allowed public keys (*.pub) */
    uint32_t max_conns;      /* worker-socket connections at most; 0 = COORD_DEFAULT_CONNS */
    const char *metrics;     /* "HOST:PORT": serve Prometheus metrics there (metrics.h); NULL = off */
    uint32_t max_buffer_mb;  /* total receive buffers of all connections, MiB; 0 = COORD_DEFAULT_BUFFER_MB */
} coord_opts_t;

/* Takes the database's writer lock (db/lock.h), opens the store (creating and
 * migrating it), loads the state and binds both sockets. Returns MT_OK with *out
 * set, or MT_BUSY (another process holds the lock: err names it), MT_IO (database),
 * MT_INVAL (options: a lease shorter than two heartbeats, a buffer bound too small
 * for the connections) or MT_ERR (sockets) with a one-line reason in err. */
mt_status_t coord_new(const coord_opts_t *opts, coord_t **out, char *err, size_t errlen);

/* Runs the loop until mt_stop_requested or coord_stop(); then commits what is
 * pending. Returns MT_OK, or MT_ERR after a socket failure. */
mt_status_t coord_run(coord_t *c);

/* Asks coord_run to return; safe from any thread or a signal handler. */
void coord_stop(coord_t *c);

/* The endpoint a socket is bound to (resolved, so "tcp://127.0.0.1:*" gives the
 * port): which 0 = workers, 1 = control. */
const char *coord_endpoint(const coord_t *c, int which);

/* The largest message the worker socket accepts (max_msg_bytes, or less to fit the
 * buffer bound): a sweep whose Result (wire_result_max_bytes) exceeds it is refused. */
size_t coord_worker_max_msg(const coord_t *c);

/* Closes the sockets, the scheduler and the store; NULL-safe, nulls *c. */
void coord_destroy(coord_t **c);

#endif
