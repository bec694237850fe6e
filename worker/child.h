/*
 * child.h - the worker's measuring child process, seen from the parent.
 *
 * A wrk_child_t is the parent's handle on one forked child: the child opens the
 * backend (so CUDA lives only there), reports the device, then measures one config
 * per request. Parent and child talk over a socketpair with frames of
 * {uint32 type, uint32 length, payload}; both sides are the same binary (fork
 * without exec), so payloads are plain structs whose lengths are checked.
 *
 * The parent drives the child without blocking: wrk_child_fd() goes into its poll
 * set and wrk_child_poll() turns what arrived (or a passed deadline) into events.
 * A config whose run kills the child completes with every measurement CRASHED
 * ("child died: signal N"); one that runs past its timeout gets the child
 * SIGKILLed and completes with TIMEOUT. The handle is then DEAD until
 * wrk_child_restart() forks a new child.
 *
 * wrk_child_wait_ready() and wrk_child_measure() are blocking conveniences built on
 * the same calls, for tests and for simple callers.
 */
#ifndef WRK_CHILD_H
#define WRK_CHILD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "mt.h"

typedef struct wrk_child wrk_child_t;

typedef enum {
    WRK_CHILD_STARTING, /* forked, the backend is opening */
    WRK_CHILD_IDLE,     /* device reported, waiting for a request */
    WRK_CHILD_BUSY,     /* measuring one config */
    WRK_CHILD_DEAD,     /* exited or killed; wrk_child_restart() */
} wrk_child_state_t;

typedef enum {
    WRK_CHILD_EV_NONE = 0,
    WRK_CHILD_EV_READY,       /* the backend opened: wrk_child_device() */
    WRK_CHILD_EV_OPEN_FAILED, /* the backend did not open: wrk_child_error(); state DEAD */
    WRK_CHILD_EV_DONE,        /* the config finished (any status): wrk_child_results() */
    WRK_CHILD_EV_DIED,        /* the child died while idle; state DEAD */
} wrk_child_event_t;

/* Default per-config timeout when a job's timeout_ms is 0. */
#define WRK_CHILD_DEFAULT_TIMEOUT_MS 60000u
/* Most batch sizes in one request. */
#define WRK_CHILD_MAX_BS 4096u

/* Forks a child that opens be with opts (copied, strings included). Returns at once
 * with state STARTING; READY or OPEN_FAILED arrives through wrk_child_poll().
 * Caller owns *out (wrk_child_destroy). MT_ERR with errno text in err when the
 * socketpair or fork fails, MT_NOMEM. */
mt_status_t wrk_child_new(const wrk_backend_ops_t *be, const wrk_backend_opts_t *opts, wrk_child_t **out, char *err,
                          size_t errlen);

/* Stops the child (closes its pipe, waits up to 2 s, then SIGKILL) and frees the
 * handle. NULL-safe; nulls *c. */
void wrk_child_destroy(wrk_child_t **c);

/* Forks a fresh child after DEAD (or kills a live one first). State STARTING. */
mt_status_t wrk_child_restart(wrk_child_t *c, char *err, size_t errlen);

/* The parent's end of the pipe, for poll(); -1 when DEAD. */
int wrk_child_fd(const wrk_child_t *c);
wrk_child_state_t wrk_child_state(const wrk_child_t *c);
pid_t wrk_child_pid(const wrk_child_t *c);
/* Children forked so far by this handle (1 + restarts). */
unsigned wrk_child_spawns(const wrk_child_t *c);
/* The device the current child reported (valid after READY). */
const wrk_device_t *wrk_child_device(const wrk_child_t *c);
/* The last open failure or death, one line. */
const char *wrk_child_error(const wrk_child_t *c);
/* Monotonic ms at which the running config times out; 0 when not BUSY. */
uint64_t wrk_child_deadline_ms(const wrk_child_t *c);

/* Announces a job's configs (backend prepare); needs IDLE. Best effort: MT_INVAL when not
 * IDLE or n is not in 1..65536, MT_ERR when the pipe write fails. */
mt_status_t wrk_child_prepare(wrk_child_t *c, const krn_shape_t *shape, const krn_config_t *cfgs, size_t n);

/* Sends one config to measure at n_bs batch sizes (1..WRK_CHILD_MAX_BS); needs
 * IDLE; state becomes BUSY with a deadline of m->timeout_ms (default 60 s).
 * MT_INVAL on a bad argument or state, MT_ERR when the pipe write fails. */
mt_status_t wrk_child_start(wrk_child_t *c, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                            size_t n_bs, const wrk_measure_t *m);

/* Reads what the child sent, waiting at most wait_ms (0 = not at all) and enforces
 * the deadline. Sets *ev to at most one event per call. Returns MT_OK (also with
 * EV_NONE), or MT_ERR on an internal failure (out of memory). */
mt_status_t wrk_child_poll(wrk_child_t *c, int wait_ms, wrk_child_event_t *ev);

/* After EV_DONE: the n measurements of the finished config (one per batch size, in
 * request order) and the kernel's registers/spills. Valid until the next start. */
void wrk_child_results(const wrk_child_t *c, const wrk_meas_t **meas, size_t *n, uint32_t *regs, uint32_t *spills);

/* Blocks until the child is READY (MT_OK), its open failed or it died (MT_ERR, the
 * reason in err), or timeout_ms passed (MT_AGAIN). */
mt_status_t wrk_child_wait_ready(wrk_child_t *c, int timeout_ms, char *err, size_t errlen);

/* Blocking measure: start, wait for the config to finish, copy its measurements
 * into out[0..n_bs). When the config killed the child or timed out, out says so
 * (CRASHED / TIMEOUT), and a new child is started and awaited before returning.
 * MT_OK unless the request could not be made or the new child failed to open
 * (MT_ERR, reason in err). */
mt_status_t wrk_child_measure(wrk_child_t *c, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                              size_t n_bs, const wrk_measure_t *m, wrk_meas_t *out, uint32_t *regs, uint32_t *spills,
                              char *err, size_t errlen);

#endif
