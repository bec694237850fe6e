/* coord.c - sockets, the poll loop and the message handlers. See coord.h. */
#include "coord.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "lock.h"
#include "metrics.h"
#include "mt.h"
#include "states.h"
#include "store.h"
#include "wire.h"
#include "writer.h"

#define DRAIN_MAX 256  /* messages per socket per loop turn, so neither socket starves the other or the timers */
#define TICK_MS 10     /* timer resolution */
#define METRICS_MS 200 /* how often the metrics snapshot is refreshed */
#define SUBMITS_MAX 64 /* submits waiting for the writer thread at most; more are refused */

/* A control client's submit: its routing id, for the reply once the plan is stored. */
typedef struct {
    uint8_t rid[WIRE_MAX_ID];
    size_t rid_len;
    sched_plan_t *plan; /* NULL = no submit here */
} submit_t;

struct coord {
    coord_opts_t o;
    void *ctx;
    bool own_ctx;
    void *workers, *control;
    char ep[2][256];
    db_lock_t *lock;               /* one writer per database: held from before the first open to the end */
    store_t *db;                   /* the loop's connection: loading, planning, hellos, reads */
    writer_t *writer;              /* the writer thread's connection: every result batch and every plan */
    submit_t submits[SUBMITS_MAX]; /* waiting for the writer, oldest first */
    size_t n_submits;
    submit_t planning; /* the submit whose plan the writer thread has */
    sched_t *sched;
    sec_auth_t *auth; /* CURVE authenticator; NULL = plain TCP */
    void *mon[2];     /* connection events of each socket (PAIR, inproc) */
    uint32_t conns[2], max_conns[2];
    size_t max_msg[2]; /* each socket's message limit: the worker socket's fits the buffer bound */
    uint64_t refused[2];
    metrics_t *metrics; /* Prometheus endpoint; NULL = off */
    atomic_int stop;
};

static mt_status_t send_worker(void *ctx, const uint8_t *rid, size_t rid_len, wire_env_t *env) {
    coord_t *c = ctx;
    char err[128];
    int rc = wire_send(c->workers, rid, rid_len, env, ZMQ_DONTWAIT, err, sizeof err);
    if (rc) log_at(MT_LOG_WARN, "%s to %.*s not sent: %s", wire_body_name(env->body_case), (int)rid_len, rid, err);
    return rc;
}

/* A resolved endpoint that only this host can reach. */
static bool ep_is_local(const char *ep) {
    static const char *const local[] = {"ipc://", "inproc://", "tcp://127.", "tcp://[::1]:", "tcp://localhost:"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (strncmp(ep, local[i], strlen(local[i])) == 0) return true;
    return false;
}

static int open_socket(coord_t *c, int which, const char *ep, char *err, size_t errlen) {
    void *sock = zmq_socket(c->ctx, ZMQ_ROUTER);
    if (!sock) {
        mt_fmt(err, errlen, "socket: %s", zmq_strerror(zmq_errno()));
        return MT_ERR;
    }
    int linger = 0, hwm = 100000;
    /* over this libzmq drops the peer; a little over the limit still gets an Error. It bounds
     * what one connection can make the coordinator buffer. */
    int64_t maxmsg = (int64_t)c->max_msg[which] + COORD_CONN_SLACK;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (which == 0)
        c->workers = sock;
    else
        c->control = sock;
    /* a worker that reconnects while its old connection still looks open takes its id over;
     * another process with the same id is then refused at its Hello (sched_on_hello) */
    int handover = 1;
    if (which == 0) zmq_setsockopt(sock, ZMQ_ROUTER_HANDOVER, &handover, sizeof handover);
    if (c->auth &&
        sec_server_apply(c->auth, sock, c->o.curve, which ? "control" : "workers", c->max_conns[which], err, errlen))
        return MT_ERR;
    if (zmq_bind(sock, ep) != 0) {
        mt_fmt(err, errlen, "bind %s: %s", ep, zmq_strerror(zmq_errno()));
        return MT_ERR;
    }
    /* a peer that connects and never completes the handshake is dropped after 5 s */
    int hs = 5000;
    zmq_setsockopt(sock, ZMQ_HANDSHAKE_IVL, &hs, sizeof hs);
    /* connection counting needs the socket's one monitor: with CURVE the authenticator's
     * watch holds it and enforces the cap (proto/secure.c), without it this one does */
    char mep[64];
    mt_fmt(mep, sizeof mep, "inproc://coord-mon-%p-%d", (void *)c, which);
    if (!c->auth && (zmq_socket_monitor(sock, mep, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0 ||
                     !(c->mon[which] = zmq_socket(c->ctx, ZMQ_PAIR)) || zmq_connect(c->mon[which], mep) != 0)) {
        mt_fmt(err, errlen, "monitor: %s", zmq_strerror(zmq_errno()));
        return MT_ERR;
    }
    if (c->mon[which]) zmq_setsockopt(c->mon[which], ZMQ_LINGER, &linger, sizeof linger);
    size_t len = sizeof c->ep[which];
    if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, c->ep[which], &len) != 0)
        mt_fmt(c->ep[which], sizeof c->ep[which], "%s", ep);
    return MT_OK;
}

/* Each socket's message limit within the buffer bound (coord.h): the control socket's is
 * max_msg_bytes; the worker socket's is what is left per connection, at most max_msg_bytes.
 * MT_INVAL with the reason when the bound leaves a worker connection too little. */
static int size_buffers(coord_t *c, char *err, size_t errlen) {
    uint64_t budget = (uint64_t)(c->o.max_buffer_mb ? c->o.max_buffer_mb : COORD_DEFAULT_BUFFER_MB) << 20;
    uint64_t ctl = (uint64_t)COORD_CONTROL_CONNS * (c->o.max_msg_bytes + COORD_CONN_SLACK);
    uint64_t need = wire_result_max_bytes(1) + COORD_CONN_SLACK;
    uint64_t per = budget > ctl ? (budget - ctl) / c->max_conns[0] : 0;
    c->max_msg[1] = c->o.max_msg_bytes;
    if (per < need + 4096) {
        mt_fmt(err, errlen,
               "--max-buffer-mb %llu: the control socket may buffer %llu MiB (64 connections x "
               "(--max-msg-bytes + 16 KiB)) and %u worker connections need %llu KiB each: raise it, or "
               "lower --max-msg-bytes or --max-connections",
               (unsigned long long)(budget >> 20), (unsigned long long)(ctl >> 20), c->max_conns[0],
               (unsigned long long)((need + 4096 + 1023) / 1024));
        return MT_INVAL;
    }
    c->max_msg[0] = per - COORD_CONN_SLACK < c->o.max_msg_bytes ? (size_t)(per - COORD_CONN_SLACK) : c->o.max_msg_bytes;
    return MT_OK;
}

/* The most batch sizes one Result can carry under the worker socket's message limit. */
static size_t result_max_bs(const coord_t *c) {
    size_t lo = 0, hi = 1u << 20;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (wire_result_max_bytes(mid) <= c->max_msg[0])
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

size_t coord_worker_max_msg(const coord_t *c) { return c->max_msg[0]; }

mt_status_t coord_new(const coord_opts_t *opts, coord_t **out, char *err, size_t errlen) {
    int rc = MT_OK;
    *out = NULL;
    if (!opts || !opts->db_path || !*opts->db_path) {
        mt_fmt(err, errlen, "no database path");
        return MT_INVAL;
    }
    coord_t *c = mt_calloc(1, sizeof *c);
    if (!c) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    c->o = *opts;
    if (!c->o.bind) c->o.bind = COORD_DEFAULT_BIND;
    if (!c->o.control) c->o.control = "tcp://127.0.0.1:5556";
    if (!c->o.heartbeat_ms) c->o.heartbeat_ms = WIRE_HEARTBEAT_DEFAULT_MS;
    if (!c->o.lease_ms)
        c->o.lease_ms = WIRE_LEASE_DEFAULT_MS > 2 * c->o.heartbeat_ms ? WIRE_LEASE_DEFAULT_MS : 2 * c->o.heartbeat_ms;
    if (!c->o.max_msg_bytes) c->o.max_msg_bytes = WIRE_DEFAULT_MAX_BYTES;
    atomic_init(&c->stop, 0);
    /* leases are renewed by the progress a worker reports once a heartbeat: a shorter lease
     * would lapse between two of them */
    if (c->o.lease_ms < 2 * c->o.heartbeat_ms) {
        mt_fmt(err, errlen,
               "--lease-ms %u is shorter than two heartbeat periods (2 x %u ms): a lease would lapse between "
               "the heartbeats that renew it",
               c->o.lease_ms, c->o.heartbeat_ms);
        free(c);
        return MT_INVAL;
    }
    rc = db_lock_acquire(c->o.db_path, &c->lock, err, errlen);
    if (rc) {
        if (rc != MT_BUSY) rc = MT_IO;
        goto out;
    }
    rc = store_open(c->o.db_path, &c->db, err, errlen);
    if (rc) {
        if (rc != MT_INVAL) rc = MT_IO;
        goto out;
    }
    sched_opts_t so = {
        .heartbeat_ms = c->o.heartbeat_ms, .lease_ms = c->o.lease_ms, .send = send_worker, .send_ctx = c};
    c->sched = sched_new(c->db, &so, mt_now_ms(), err, errlen);
    if (!c->sched) {
        rc = MT_IO;
        goto out;
    }
    rc = writer_new(c->o.db_path, &c->writer, err, errlen);
    if (rc) goto out;
    c->ctx = c->o.zmq_ctx;
    if (!c->ctx) {
        c->ctx = zmq_ctx_new();
        c->own_ctx = true;
    }
    if (!c->ctx) {
        mt_fmt(err, errlen, "zmq context: %s", zmq_strerror(zmq_errno()));
        rc = MT_ERR;
        goto out;
    }
    if (!c->o.curve != !c->o.curve_allow) {
        mt_fmt(err, errlen, "CURVE needs both the key pair and the allow-list directory");
        rc = MT_INVAL;
        goto out;
    }
    /* descriptors: take the hard limit, and leave room for the control socket, the
     * database and libzmq's own by capping each socket's connections */
    struct rlimit rl;
    uint32_t fds = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        fds = rl.rlim_cur > 1u << 20 ? 1u << 20 : (uint32_t)rl.rlim_cur;
    }
    c->max_conns[1] = COORD_CONTROL_CONNS;
    c->max_conns[0] = c->o.max_conns ? c->o.max_conns : COORD_DEFAULT_CONNS;
    if (fds < COORD_FD_RESERVE + COORD_CONTROL_CONNS + 8) {
        mt_fmt(err, errlen, "only %u file descriptors (ulimit -n): at least %u are needed", fds,
               COORD_FD_RESERVE + COORD_CONTROL_CONNS + 8);
        rc = MT_INVAL;
        goto out;
    }
    if (c->max_conns[0] > fds - COORD_FD_RESERVE - COORD_CONTROL_CONNS)
        c->max_conns[0] = fds - COORD_FD_RESERVE - COORD_CONTROL_CONNS;
    rc = size_buffers(c, err, errlen);
    if (rc) goto out;
    if (c->o.curve) rc = sec_auth_new(c->ctx, c->o.curve_allow, &c->auth, err, errlen);
    if (!rc) rc = open_socket(c, 0, c->o.bind, err, errlen);
    if (!rc) rc = open_socket(c, 1, c->o.control, err, errlen);
    if (!rc && c->o.metrics) rc = metrics_new(c->o.metrics, &c->metrics, err, errlen);
out:
    if (rc) {
        coord_destroy(&c);
        return rc;
    }
    log_at(MT_LOG_INFO, "coordinator on %s (workers) and %s (control), database %s", c->ep[0], c->ep[1], c->o.db_path);
    uint64_t total = (uint64_t)c->max_conns[0] * (c->max_msg[0] + COORD_CONN_SLACK) +
                     (uint64_t)COORD_CONTROL_CONNS * (c->max_msg[1] + COORD_CONN_SLACK);
    log_at(MT_LOG_INFO,
           "buffers: at most %u worker connections x %zu KiB (messages up to %zu bytes: a Result of up to %zu batch "
           "sizes) and %u control connections x %zu KiB, %llu MiB in all (--max-buffer-mb %u)",
           c->max_conns[0], (c->max_msg[0] + COORD_CONN_SLACK) / 1024, c->max_msg[0], result_max_bs(c),
           COORD_CONTROL_CONNS, (c->max_msg[1] + COORD_CONN_SLACK) / 1024, (unsigned long long)(total >> 20),
           c->o.max_buffer_mb ? c->o.max_buffer_mb : COORD_DEFAULT_BUFFER_MB);
    for (int which = 0; which < 2 && !c->auth; which++) {
        if (ep_is_local(c->ep[which])) continue;
        log_at(MT_LOG_WARN,
               "WARNING: the %s socket %s is reachable from other hosts in plain TCP without CURVE: "
               "anyone who can connect can %s; bind a loopback address or use --curve-secret/--curve-allow",
               which ? "control" : "worker", c->ep[which],
               which ? "submit and cancel sweeps" : "take jobs and store results");
    }
    if (c->metrics)
        log_at(MT_LOG_INFO, "metrics on http://%s/metrics (port %u)", c->o.metrics, metrics_port(c->metrics));
    *out = c;
    return MT_OK;
}

void coord_destroy(coord_t **pc) {
    if (!pc || !*pc) return;
    coord_t *c = *pc;
    metrics_destroy(&c->metrics);
    if (c->workers) zmq_close(c->workers);
    if (c->control) zmq_close(c->control);
    for (int i = 0; i < 2; i++)
        if (c->mon[i]) zmq_close(c->mon[i]);
    sec_auth_destroy(&c->auth);
    if (c->own_ctx && c->ctx) zmq_ctx_term(c->ctx);
    writer_destroy(&c->writer);
    sched_plan_free(&c->planning.plan); /* the writer thread is done with it */
    for (size_t i = 0; i < c->n_submits; i++) sched_plan_free(&c->submits[i].plan);
    sched_destroy(&c->sched);
    store_close(&c->db);
    db_lock_release(&c->lock);
    free(c);
    *pc = NULL;
}

void coord_stop(coord_t *c) { atomic_store(&c->stop, 1); }
const char *coord_endpoint(const coord_t *c, int which) { return which == 0 ? c->ep[0] : c->ep[1]; }

/* ---- worker messages, by body */

typedef void (*worker_fn)(coord_t *c, sched_worker_t *w, wire_env_t **env, uint64_t now);

static void on_ready(coord_t *c, sched_worker_t *w, wire_env_t **env, uint64_t now) {
    sched_on_ready(c->sched, w, (*env)->ready->credits, now);
}
static void on_result(coord_t *c, sched_worker_t *w, wire_env_t **env, uint64_t now) {
    sched_on_result(c->sched, w, env, now);
}
static void on_heartbeat(coord_t *c, sched_worker_t *w, wire_env_t **env, uint64_t now) {
    const Moetune__Heartbeat *hb = (*env)->heartbeat;
    sched_on_heartbeat(c->sched, w, hb->job_ids, hb->n_job_ids, now);
    sched_on_progress(c->sched, w, hb->measuring_job, hb->measuring_config, now);
}
static void on_bye(coord_t *c, sched_worker_t *w, wire_env_t **env, uint64_t now) { sched_on_bye(c->sched, w, now); }

static const struct {
    wire_body_t body;
    worker_fn fn;
} g_worker_handlers[] = {
    {MOETUNE__ENVELOPE__BODY_READY, on_ready},
    {MOETUNE__ENVELOPE__BODY_RESULT, on_result},
    {MOETUNE__ENVELOPE__BODY_HEARTBEAT, on_heartbeat},
    {MOETUNE__ENVELOPE__BODY_BYE, on_bye},
};

/* A peer's routing id for a log line: bytes that are not printable become '?', so one line
 * stays one line; at most 64 shown. */
static const char *rid_text(const uint8_t *id, size_t len, char *buf, size_t cap) {
    size_t n = 0;
    for (; n < len && n < 64 && n + 1 < cap; n++) buf[n] = id[n] >= 0x20 && id[n] < 0x7f ? (char)id[n] : '?';
    buf[n] = '\0';
    return buf;
}

static void bad_message(coord_t *c, void *sock, const uint8_t *id, size_t id_len, int code, const char *why) {
    char rid[80];
    sched_count_bad(c->sched);
    log_at(MT_LOG_WARN, "bad message from %s: %s", rid_text(id, id_len, rid, sizeof rid), why);
    if (id_len) wire_send_error(sock, id, id_len, code, why);
}

static void worker_message(coord_t *c, const uint8_t *id, size_t id_len, wire_env_t **env, uint64_t now) {
    wire_body_t body = (*env)->body_case;
    if (!wire_allowed(WIRE_FROM_WORKER, body)) {
        char why[96];
        bad_message(c, c->workers, id, id_len, WIRE_E_BODY,
                    mt_fmt(why, sizeof why, "a worker may not send %s", wire_body_name(body)));
        return;
    }
    if (body == MOETUNE__ENVELOPE__BODY_HELLO) {
        int rc = sched_on_hello(c->sched, id, id_len, env, now);
        char rid[80];
        if (rc && rc != MT_INVAL)
            log_at(MT_LOG_ERROR, "hello from %s not handled (%d)", rid_text(id, id_len, rid, sizeof rid), rc);
        return;
    }
    sched_worker_t *w = sched_worker(c->sched, id, id_len);
    if (!w) {
        char rid[80];
        log_at(MT_LOG_DEBUG, "%s from unknown worker %s: asking for hello", wire_body_name(body),
               rid_text(id, id_len, rid, sizeof rid));
        wire_send_error(c->workers, id, id_len, WIRE_E_HELLO, "say hello first");
        return;
    }
    sched_on_heard(c->sched, w, now);
    for (size_t i = 0; i < sizeof g_worker_handlers / sizeof g_worker_handlers[0]; i++) {
        if (g_worker_handlers[i].body == body) {
            g_worker_handlers[i].fn(c, w, env, now);
            return;
        }
    }
}

/* ---- control messages, by body */

typedef void (*control_fn)(coord_t *c, const uint8_t *id, size_t id_len, const wire_env_t *env, uint64_t now);

static void reply(coord_t *c, const uint8_t *id, size_t id_len, wire_env_t *env) {
    char err[128];
    if (wire_send(c->control, id, id_len, env, ZMQ_DONTWAIT, err, sizeof err))
        log_at(MT_LOG_WARN, "control reply not sent: %s", err);
}

/* A submit is planned and stored on the writer thread, so the loop goes on serving workers
 * and clients; the client gets Submitted (or the error) when the writer hands it back. */
static void on_submit(coord_t *c, const uint8_t *id, size_t id_len, const wire_env_t *env, uint64_t now) {
    char err[512];
    (void)now;
    if (c->n_submits == SUBMITS_MAX) {
        mt_fmt(err, sizeof err, "%u submits are waiting to be planned: try again later", SUBMITS_MAX);
        log_at(MT_LOG_WARN, "submit refused: %s", err);
        wire_send_error(c->control, id, id_len, WIRE_E_INTERNAL, err);
        return;
    }
    size_t nb = env->submit->spec ? env->submit->spec->n_batch_sizes : 0;
    if (wire_result_max_bytes(nb) > c->max_msg[0]) {
        mt_fmt(err, sizeof err,
               "a Result of this sweep (%zu batch sizes) can take %zu bytes, over the %zu bytes the worker socket "
               "accepts (%zu batch sizes at most): raise --max-msg-bytes or --max-buffer-mb, or split the batch sizes",
               nb, wire_result_max_bytes(nb), c->max_msg[0], result_max_bs(c));
        log_at(MT_LOG_WARN, "submit refused: %s", err);
        wire_send_error(c->control, id, id_len, WIRE_E_SPEC, err);
        return;
    }
    submit_t *sub = &c->submits[c->n_submits];
    if (sched_plan_new(env->submit->spec, &sub->plan, err, sizeof err)) {
        log_at(MT_LOG_WARN, "submit refused: %s", err);
        wire_send_error(c->control, id, id_len, WIRE_E_INTERNAL, err);
        return;
    }
    sched_plan_device(c->sched, sub->plan, c->o.db_path);
    memcpy(sub->rid, id, id_len);
    sub->rid_len = id_len;
    c->n_submits++;
}

/* The writer handed back the plan of c->planning (rc its outcome): the sweep joins the
 * scheduler and its client gets Submitted, or the error. */
static void submit_finish(coord_t *c, int wrc, const char *why) {
    char err[256];
    Moetune__Submitted sub;
    submit_t *s = &c->planning;
    int rc = sched_plan_done(c->sched, &s->plan, wrc, why, &sub, mt_now_ms(), err, sizeof err);
    if (rc) {
        log_at(MT_LOG_WARN, "submit refused: %s", err);
        wire_send_error(c->control, s->rid, s->rid_len, rc == MT_INVAL ? WIRE_E_SPEC : WIRE_E_INTERNAL, err);
        return;
    }
    wire_env_t out;
    wire_env_wrap(&out, &sub.base);
    reply(c, s->rid, s->rid_len, &out);
}

static void on_status(coord_t *c, const uint8_t *id, size_t id_len, const wire_env_t *env, uint64_t now) {
    sched_status_t st;
    int rc = sched_status(c->sched, env->status_request->sweep_id, now, &st);
    if (rc) {
        char why[96];
        wire_send_error(c->control, id, id_len, rc == MT_NOTFOUND ? WIRE_E_NOTFOUND : WIRE_E_INTERNAL,
                        rc == MT_NOTFOUND ? mt_fmt(why, sizeof why, "no sweep %llu",
                                                   (unsigned long long)env->status_request->sweep_id)
                                          : "out of memory");
        return;
    }
    wire_env_t out;
    wire_env_wrap(&out, &st.reply.base);
    if (st.reply.counters) st.reply.counters->auth_refused = sec_auth_refused(c->auth);
    reply(c, id, id_len, &out);
    sched_status_release(&st);
}

static void on_cancel(coord_t *c, const uint8_t *id, size_t id_len, const wire_env_t *env, uint64_t now) {
    uint32_t n = 0;
    uint64_t sweep_id = env->cancel->sweep_id;
    if (sched_cancel(c->sched, sweep_id, &n, now)) {
        char why[96];
        wire_send_error(c->control, id, id_len, WIRE_E_NOTFOUND,
                        mt_fmt(why, sizeof why, "no sweep %llu", (unsigned long long)sweep_id));
        return;
    }
    Moetune__Cancelled can = MOETUNE__CANCELLED__INIT;
    can.sweep_id = sweep_id;
    can.jobs_cancelled = n;
    wire_env_t out;
    wire_env_wrap(&out, &can.base);
    reply(c, id, id_len, &out);
}

static const struct {
    wire_body_t body;
    control_fn fn;
} g_control_handlers[] = {
    {MOETUNE__ENVELOPE__BODY_SUBMIT, on_submit},
    {MOETUNE__ENVELOPE__BODY_STATUS_REQUEST, on_status},
    {MOETUNE__ENVELOPE__BODY_CANCEL, on_cancel},
};

static void control_message(coord_t *c, const uint8_t *id, size_t id_len, wire_env_t *env, uint64_t now) {
    wire_body_t body = env->body_case;
    if (wire_allowed(WIRE_FROM_CLIENT, body)) {
        for (size_t i = 0; i < sizeof g_control_handlers / sizeof g_control_handlers[0]; i++) {
            if (g_control_handlers[i].body == body) {
                g_control_handlers[i].fn(c, id, id_len, env, now);
                return;
            }
        }
    }
    char why[96];
    bad_message(c, c->control, id, id_len, WIRE_E_BODY,
                mt_fmt(why, sizeof why, "a client may not send %s", wire_body_name(body)));
}

/* Reads up to DRAIN_MAX messages from one socket. MT_ERR on a socket failure. */
static int drain(coord_t *c, void *sock, bool is_worker) {
    uint8_t id[WIRE_MAX_ID];
    for (int n = 0; n < DRAIN_MAX; n++) {
        size_t id_len = 0;
        wire_env_t *env = NULL;
        wire_reject_t rej;
        int rc = wire_recv(sock, true, id, &id_len, c->max_msg[is_worker ? 0 : 1], ZMQ_DONTWAIT, &env, &rej);
        if (rc == MT_AGAIN) return MT_OK;
        if (rc == MT_INVAL) {
            /* a Hello that is not data (a name with a separator, too long) is refused for good */
            bool hello = is_worker && rej.body == MOETUNE__ENVELOPE__BODY_HELLO;
            bad_message(c, sock, id, id_len, hello ? WIRE_E_REFUSED : rej.code, rej.reason);
            sched_worker_t *w = is_worker ? sched_worker(c->sched, id, id_len) : NULL;
            if (w) sched_on_bad(c->sched, w, &rej, mt_now_ms());
            continue;
        }
        if (rc) {
            if (zmq_errno() == EINTR) return MT_OK;
            log_at(MT_LOG_ERROR, "receive: %s", zmq_strerror(zmq_errno()));
            return MT_ERR;
        }
        uint64_t now = mt_now_ms();
        if (is_worker)
            worker_message(c, id, id_len, &env, now);
        else
            control_message(c, id, id_len, env, now);
        wire_free(&env);
    }
    return MT_OK;
}

/* Connection events of one socket: counts open connections and shuts down the ones
 * over its cap at once (libzmq then drops them), logging the first refusal and every
 * hundredth. */
static void monitor_drain(coord_t *c, int which) {
    for (int n = 0; n < DRAIN_MAX; n++) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, c->mon[which], ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        int32_t fd = -1;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&fd, (uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        zmq_msg_close(&ev);
        zmq_msg_init(&addr);
        zmq_msg_recv(&addr, c->mon[which], ZMQ_DONTWAIT); /* the endpoint frame */
        zmq_msg_close(&addr);
        if (event == ZMQ_EVENT_DISCONNECTED) {
            if (c->conns[which]) c->conns[which]--;
        } else if (event == ZMQ_EVENT_ACCEPTED) {
            c->conns[which]++;
            if (c->conns[which] > c->max_conns[which] && fd >= 0) {
                shutdown(fd, SHUT_RDWR);
                if (c->refused[which]++ % 100 == 0)
                    log_at(MT_LOG_WARN,
                           "%s socket: %u connections, over its limit of %u: refusing new ones "
                           "(%llu refused so far)",
                           which ? "control" : "worker", c->conns[which] - 1, c->max_conns[which],
                           (unsigned long long)c->refused[which]);
            }
        }
    }
}

/* Takes back what the writer finished, if anything: a plan (its client is answered) or a
 * batch (acks go out or the results are kept). */
static void writer_collect(coord_t *c, int timeout_ms) {
    void *arg = NULL;
    int wrc = MT_OK;
    char why[256];
    if (writer_poll(c->writer, timeout_ms, &arg, &wrc, why, sizeof why) != MT_OK) return;
    if (c->planning.plan && arg == c->planning.plan) {
        log_at(MT_LOG_DEBUG, "plan %s in %llu us", wrc ? "failed" : "stored",
               (unsigned long long)writer_last_us(c->writer));
        submit_finish(c, wrc, why);
        return;
    }
    size_t n = sched_batch_results(arg);
    sched_batch_done(c->sched, arg, wrc, why, mt_now_ms());
    if (c->metrics) metrics_observe_commit(c->metrics, writer_last_us(c->writer));
    log_at(MT_LOG_DEBUG, "batch of %zu results %s in %llu us", n, wrc ? "failed" : "committed",
           (unsigned long long)writer_last_us(c->writer));
}

/* Copies the loop's numbers into the metrics endpoint. */
static void metrics_refresh(coord_t *c, uint64_t now) {
    sched_status_t st;
    metrics_snapshot_t m;
    memset(&m, 0, sizeof m);
    if (sched_status(c->sched, 0, now, &st) != MT_OK) return;
    for (size_t i = 0; i < st.reply.n_sweeps; i++) {
        const Moetune__SweepStatus *s = st.reply.sweeps[i];
        m.jobs[WIRE_JOB_PENDING] += s->jobs_pending;
        m.jobs[WIRE_JOB_LEASED] += s->jobs_leased;
        m.jobs[WIRE_JOB_DONE] += s->jobs_done;
        m.jobs[WIRE_JOB_FAILED] += s->jobs_failed;
        m.jobs[WIRE_JOB_CANCELLED] += s->jobs_total - s->jobs_pending - s->jobs_leased - s->jobs_done - s->jobs_failed;
        wire_sweep_state_t sst;
        bool running = wire_sweep_state_parse(s->state, &sst) == MT_OK && sst == WIRE_SWEEP_RUNNING;
        m.sweeps_running += running;
        if (running && s->gpu_busy > 0) {
            /* several running sweeps share the GPUs: their fractions add up */
            m.gpu_busy += s->gpu_busy;
            m.gpu_busy_known = 1;
        }
    }
    for (size_t i = 0; i < st.reply.n_workers; i++) {
        const char *ws = st.reply.workers[i]->state;
        if (strcmp(ws, "dead") == 0)
            m.workers_dead++;
        else if (strcmp(ws, "away") == 0)
            m.workers_away++;
        else
            m.workers_alive++;
        m.workers_busy += strcmp(ws, "busy") == 0;
    }
    sched_status_release(&st);
    m.c = *sched_counters(c->sched);
    m.results_unacked = sched_pending(c->sched);
    m.storage_error = sched_storage_error(c->sched)[0] != '\0';
    m.auth_refused = sec_auth_refused(c->auth);
    m.cap_refused[0] = c->auth ? sec_auth_cap_refused(c->auth, 0) : c->refused[0];
    m.cap_refused[1] = c->auth ? sec_auth_cap_refused(c->auth, 1) : c->refused[1];
    metrics_publish(c->metrics, &m);
}

/* Hands the next submit's plan, or else the next batch, to the writer when it is free. */
static void writer_feed(coord_t *c) {
    if (writer_busy(c->writer)) return;
    if (c->n_submits) {
        c->planning = c->submits[0];
        memmove(c->submits, c->submits + 1, --c->n_submits * sizeof *c->submits);
        if (writer_submit_prep(c->writer, sched_plan_build, sched_plan_write, c->planning.plan) != MT_OK)
            submit_finish(c, MT_BUSY, "writer busy");
        return;
    }
    sched_batch_t *b = NULL;
    if (sched_batch_take(c->sched, &b) != MT_OK) return;
    if (writer_submit(c->writer, sched_batch_write, b) != MT_OK)
        sched_batch_done(c->sched, b, MT_BUSY, "writer busy", mt_now_ms());
}

mt_status_t coord_run(coord_t *c) {
    int rc = MT_OK;
    uint64_t next_tick = 0;
    uint64_t retry_at = 0; /* after a failed commit, wait a little before the next try */
    uint64_t next_metrics = 0;
    while (!mt_stop_requested && !atomic_load(&c->stop)) {
        zmq_pollitem_t items[5] = {{c->workers, 0, ZMQ_POLLIN, 0},
                                   {c->control, 0, ZMQ_POLLIN, 0},
                                   {NULL, writer_fd(c->writer), ZMQ_POLLIN, 0},
                                   {c->mon[0], 0, ZMQ_POLLIN, 0},
                                   {c->mon[1], 0, ZMQ_POLLIN, 0}};
        uint64_t now = mt_now_ms();
        long timeout = next_tick > now ? (long)(next_tick - now) : 0;
        if (timeout > TICK_MS) timeout = TICK_MS;
        int n = zmq_poll(items, c->mon[0] ? 5 : 3, timeout);
        if (n < 0) {
            if (zmq_errno() == EINTR) continue;
            log_at(MT_LOG_ERROR, "poll: %s", zmq_strerror(zmq_errno()));
            rc = MT_ERR;
            break;
        }
        if (items[3].revents & ZMQ_POLLIN) monitor_drain(c, 0);
        if (items[4].revents & ZMQ_POLLIN) monitor_drain(c, 1);
        if (items[0].revents & ZMQ_POLLIN) rc = drain(c, c->workers, true);
        if (!rc && (items[1].revents & ZMQ_POLLIN)) rc = drain(c, c->control, false);
        if (rc) break;
        if (items[2].revents & ZMQ_POLLIN) {
            uint64_t failures = sched_counters(c->sched)->commit_failures;
            writer_collect(c, 0);
            if (sched_counters(c->sched)->commit_failures != failures) retry_at = mt_now_ms() + 100;
        }
        now = mt_now_ms();
        if (now >= retry_at) writer_feed(c); /* never waits for SQLite */
        if (now >= next_tick) {
            sched_tick(c->sched, now);
            next_tick = now + TICK_MS;
        }
        if (c->metrics && now >= next_metrics) {
            metrics_refresh(c, now);
            next_metrics = now + METRICS_MS;
        }
    }
    /* commit what is pending; workers resend whatever is not acknowledged */
    writer_collect(c, 10000);
    for (size_t i = 0; i < c->n_submits; i++) {
        wire_send_error(c->control, c->submits[i].rid, c->submits[i].rid_len, WIRE_E_INTERNAL,
                        "the coordinator is stopping: sweep not planned, nothing stored");
        sched_plan_free(&c->submits[i].plan);
    }
    c->n_submits = 0;
    for (int i = 0; i < 50; i++) {
        if (sched_flush(c->sched, mt_now_ms()) == MT_OK) break;
        zmq_poll(NULL, 0, 100);
    }
    if (c->metrics) metrics_refresh(c, mt_now_ms());
    log_at(MT_LOG_INFO, "coordinator stopping: %llu results committed, %zu left uncommitted",
           (unsigned long long)sched_counters(c->sched)->results_committed, sched_pending(c->sched));
    return rc;
}
