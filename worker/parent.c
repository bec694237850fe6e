/* parent.c - the worker's ZeroMQ session and job loop. See parent.h and
 * proto/PROTOCOL.md (worker side). */
#include "parent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "child.h"
#include "convert.h"
#include "mt.h"
#include "rounds.h"
#include "wire.h"

#define SILENT_PERIODS 3 /* heartbeat periods of silence before reconnecting */
#define LINGER_MS 500    /* how long a closing socket may still deliver Bye */

/* One held job: the Envelope that carried it, and how far the child got. */
typedef struct pjob {
    wire_env_t *env; /* owns the Job */
    const Moetune__Job *job;
    krn_shape_t shape;
    int shape_ok;
    char why[160]; /* why every config is invalid, when !shape_ok */
    size_t next;   /* next config to measure */
    int prepared;
    int released;           /* its credit went back before it ended (release_early) */
    int superseded;         /* the coordinator leased the job to us again: the new lease is measured,
                             * this one ends at once (its config in the child is not sent) */
    uint8_t *moved;         /* per config, 1 = a split gave it to another worker (Ack.moved): skipped */
    double *best;           /* racing: per batch size, the job's best_us lowered by our own ok results and
                             * by the coordinator's later bests (Ack.best) */
    uint32_t rounds, round; /* Job.rounds (1 when 0), and the round being measured (0-based) */
    wrk_meas_t *kept;       /* rounds > 1: per config, its n_batch_sizes measurements so far */
    uint32_t *regs;         /* rounds > 1: per config, its first round's registers and spills */
    double *round_us;       /* rounds > 1: per config and batch size, each round's median (rows of rounds) */
    struct pjob *link;
} pjob_t;

/* A Result kept until an Ack lists its seq. */
typedef struct {
    uint64_t seq;
    uint8_t *buf; /* packed Envelope */
    size_t len;
} unacked_t;

typedef enum { SESSION_HELLO, SESSION_WELCOMED } session_t;

struct wrk_parent {
    wrk_parent_opts_t opts;
    const wrk_backend_ops_t *be;
    char id[WIRE_MAX_ID + 1];
    char host[128];
    char endpoint[512];
    void *ctx, *sock;
    session_t session;
    uint32_t heartbeat_ms;
    uint64_t last_heard_ms, next_beat_ms;
    wrk_child_t *child;
    pjob_t *head, *tail; /* held jobs; head is the one running */
    size_t n_jobs;
    unacked_t *unacked;
    size_t n_unacked, cap_unacked;
    uint64_t seq;
    uint64_t *ready_sent; /* FIFO of Ready send times, one per credit */
    size_t n_ready, cap_ready;
    uint64_t *rtt; /* dispatch round trips, us */
    size_t n_rtt, cap_rtt;
    uint64_t jobs_done, results, bad_messages, reconnects, child_restarts;
    uint64_t round_children; /* children started for a side-by-side round (Measure.fresh_rounds) */
    int stop;
    int refusals;                   /* Hellos the coordinator refused (WIRE_E_REFUSED) in a row */
    int refused;                    /* refused twice: exit, no Bye */
    sec_cert_t curve, curve_server; /* copies; used when opts.curve is set */
};

/* ---- small helpers */

static int push_u64(uint64_t **arr, size_t *n, size_t *cap, uint64_t v) {
    if (mt_grow((void **)arr, cap, *n + 1, sizeof **arr, 64) != MT_OK) return MT_NOMEM;
    (*arr)[(*n)++] = v;
    return MT_OK;
}

static void send_env(wrk_parent_t *p, wire_env_t *env) {
    char err[128];
    if (!p->sock) return;
    int rc = wire_send(p->sock, NULL, 0, env, ZMQ_DONTWAIT, err, sizeof err);
    if (rc)
        log_at(MT_LOG_WARN, "cannot send %s: %s", wire_body_name(env->body_case), rc == MT_AGAIN ? "queue full" : err);
}

static void send_ready(wrk_parent_t *p, uint32_t credits) {
    if (credits == 0 || p->session != SESSION_WELCOMED) return;
    wire_env_t env;
    Moetune__Ready r = MOETUNE__READY__INIT;
    r.credits = credits;
    wire_env_wrap(&env, &r.base);
    send_env(p, &env);
    uint64_t now = mt_now_us();
    for (uint32_t i = 0; i < credits; i++) push_u64(&p->ready_sent, &p->n_ready, &p->cap_ready, now);
}

/* Our Hello from the child's device; h and g point into p and the device. */
static void hello_fill(wrk_parent_t *p, Moetune__Hello *h, Moetune__Gpu *g) {
    const wrk_device_t *d = wrk_child_device(p->child);
    moetune__hello__init(h);
    moetune__gpu__init(g);
#define AS_TEXT (char *)
#define AS_U32
#define AS_U64
#define X(f, kind) g->f = AS_##kind d->f;
    WRK_DEVICE_GPU_FIELDS(X)
#undef X
#undef AS_TEXT
#undef AS_U32
#undef AS_U64
    h->worker_id = p->id;
    h->host = p->host;
    h->pid = (uint32_t)getpid();
    h->backend = (char *)p->be->name;
    h->gpu = g;
    h->compiler = (char *)d->compiler;
    h->kernel_hash = (char *)d->kernel_hash;
    h->versions = (char *)d->versions;
}

static void send_hello(wrk_parent_t *p) {
    const wrk_device_t *d = wrk_child_device(p->child);
    wire_env_t env;
    Moetune__Hello h;
    Moetune__Gpu g;
    hello_fill(p, &h, &g);
    wire_env_wrap(&env, &h.base);
    send_env(p, &env);
    p->session = SESSION_HELLO;
    p->n_ready = 0; /* a Hello resets the coordinator's credits for us */
    log_at(MT_LOG_INFO, "hello sent to %s (%s, %s)", p->endpoint, d->name, d->uuid);
}

static void send_heartbeat(wrk_parent_t *p) {
    wire_env_t env;
    Moetune__Heartbeat hb = MOETUNE__HEARTBEAT__INIT;
    uint64_t ids[64];
    uint64_t *list = ids;
    size_t n = 0;
    if (p->n_jobs > 64 && !(list = mt_malloc(p->n_jobs * sizeof *list))) list = ids;
    for (pjob_t *j = p->head; j && (list != ids || n < 64); j = j->link) list[n++] = j->job->job_id;
    hb.sent_ms = mt_now_ms();
    /* progress: the config the child measures (or starts next); only this renews our leases */
    const pjob_t *h = p->head;
    if (h && !h->superseded && h->shape_ok && h->next < h->job->n_configs) {
        hb.measuring_job = h->job->job_id;
        hb.measuring_config = h->job->configs[h->next]->config_id;
    }
    hb.n_job_ids = n;
    hb.job_ids = list;
    wire_env_wrap(&env, &hb.base);
    send_env(p, &env);
    if (list != ids) free(list);
}

static void send_bye(wrk_parent_t *p, const char *reason) {
    wire_env_t env;
    Moetune__Bye b = MOETUNE__BYE__INIT;
    b.reason = (char *)reason;
    wire_env_wrap(&env, &b.base);
    send_env(p, &env);
}

static void close_socket(wrk_parent_t *p) {
    if (!p->sock) return;
    int linger = LINGER_MS;
    zmq_setsockopt(p->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(p->sock);
    p->sock = NULL;
}

/* Opens a fresh DEALER to the coordinator and says Hello. */
static int connect_and_hello(wrk_parent_t *p) {
    int linger = LINGER_MS, hwm = 100000;
    close_socket(p);
    p->sock = zmq_socket(p->ctx, ZMQ_DEALER);
    if (!p->sock) goto zerr;
    if (zmq_setsockopt(p->sock, ZMQ_ROUTING_ID, p->id, strlen(p->id)) ||
        zmq_setsockopt(p->sock, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_setsockopt(p->sock, ZMQ_SNDHWM, &hwm, sizeof hwm))
        goto zerr;
    char err[256];
    if (p->opts.curve && sec_client_apply(p->sock, &p->curve, &p->curve_server, err, sizeof err)) {
        log_at(MT_LOG_ERROR, "%s", err);
        return MT_ERR;
    }
    if (zmq_connect(p->sock, p->endpoint)) goto zerr;
    p->last_heard_ms = mt_now_ms();
    send_hello(p);
    return MT_OK;
zerr:
    log_at(MT_LOG_ERROR, "cannot connect to %s: %s", p->endpoint, zmq_strerror(zmq_errno()));
    return MT_ERR;
}

/* ---- jobs */

static void job_free(pjob_t *j) {
    if (!j) return;
    wire_free(&j->env);
    free(j->best);
    free(j->kept);
    free(j->regs);
    free(j->round_us);
    free(j->moved);
    free(j);
}

static void shape_from_proto(pjob_t *j) {
    if (wire_shape_from_msg(j->job->shape, &j->shape, j->why, sizeof j->why) != MT_OK) return;
    if (j->job->n_batch_sizes > WRK_CHILD_MAX_BS) {
        mt_fmt(j->why, sizeof j->why, "%zu batch sizes (at most %u)", j->job->n_batch_sizes, WRK_CHILD_MAX_BS);
        return;
    }
    j->shape_ok = 1;
}

/* The Job's settings with the defaults a sweep's planner fills (WIRE_MEASURE_DEFAULTS) for
 * any left 0, so a backend never falls back on numbers of its own. */
static void measure_from_proto(const Moetune__Job *job, wrk_measure_t *out) {
    Moetune__Measure filled;
    const Moetune__Measure *m = &filled;
    wire_measure_fill(job->measure, &filled);
    memset(out, 0, sizeof *out);
    snprintf(out->routing_path, sizeof out->routing_path, "%s", job->routing_path ? job->routing_path : "");
#define X(f, def) out->f = m->f;
    WIRE_MEASURE_DEFAULTS(X)
#undef X
    out->race_margin = m->race_margin;
}

/* Turns one config's measurements into a Result, keeps it until acked, sends it. */
static int emit_result(wrk_parent_t *p, pjob_t *j, size_t ci, const wrk_meas_t *meas, size_t n, uint32_t regs,
                       uint32_t spills) {
    int rc = MT_OK;
    wire_env_t env;
    Moetune__Result r = MOETUNE__RESULT__INIT;
    Moetune__Measurement *ms = mt_calloc(n, sizeof *ms);
    Moetune__Measurement **pm = mt_calloc(n, sizeof *pm);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!ms || !pm) {
        rc = MT_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        moetune__measurement__init(&ms[i]);
        ms[i].batch_size = j->job->batch_sizes[i];
        ms[i].status = (Moetune__Status)meas[i].status;
        if (meas[i].status == MOETUNE__STATUS__STATUS_OK || meas[i].status == MOETUNE__STATUS__STATUS_PRUNED) {
#define X(f) ms[i].f = meas[i].f;
            WIRE_MEASUREMENT_STATS(X)
#undef X
        }
        ms[i].timed_us = meas[i].timed_us;
        ms[i].detail = (char *)meas[i].detail;
        pm[i] = &ms[i];
    }
    r.job_id = j->job->job_id;
    r.lease_token = j->job->lease_token;
    r.seq = ++p->seq;
    r.config_id = j->job->configs[ci]->config_id;
    r.n_measurements = n;
    r.measurements = pm;
    r.registers = regs;
    r.spills = spills;
    wire_env_wrap(&env, &r.base);
    rc = wire_pack(&env, &buf, &len);
    if (rc) goto out;
    if (mt_grow((void **)&p->unacked, &p->cap_unacked, p->n_unacked + 1, sizeof *p->unacked, 64) != MT_OK) {
        rc = MT_NOMEM;
        goto out;
    }
    p->unacked[p->n_unacked++] = (unacked_t){r.seq, buf, len};
    if (p->session == SESSION_WELCOMED && p->sock && zmq_send(p->sock, buf, len, ZMQ_DONTWAIT) < 0)
        log_at(MT_LOG_WARN, "result %llu not sent now (%s); it is resent after the next Welcome",
               (unsigned long long)r.seq, zmq_strerror(zmq_errno()));
    buf = NULL;
    p->results++;
    log_at(MT_LOG_DEBUG, "job %llu config %llu: result seq %llu (status %d at bs %u)", (unsigned long long)r.job_id,
           (unsigned long long)r.config_id, (unsigned long long)r.seq, meas[0].status, ms[0].batch_size);
out:
    free(buf);
    free(pm);
    free(ms);
    return rc;
}

/* A side-by-side job's config finished a round: folded into what it kept; its Result goes
 * out after its last round, or as soon as nothing of it is left OK. */
static int keep_round(wrk_parent_t *p, pjob_t *j, const wrk_meas_t *meas, size_t n, uint32_t regs, uint32_t spills) {
    size_t ci = j->next, nb = j->job->n_batch_sizes;
    if (n != nb) return emit_result(p, j, ci, meas, n, regs, spills);
    wrk_meas_t *k = &j->kept[ci * nb];
    double *us = &j->round_us[ci * nb * j->rounds]; /* batch size b's rounds at us[b * rounds] */
    wrk_rounds_merge(k, meas, nb, j->round == 0);
    for (size_t b = 0; b < nb; b++) us[b * j->rounds + j->round] = meas[b].median_us;
    if (j->round == 0) {
        j->regs[2 * ci] = regs;
        j->regs[2 * ci + 1] = spills;
    }
    if (j->round + 1 < j->rounds && !wrk_rounds_settled(k, nb)) return MT_OK;
    /* its last fold: the Result carries each round's median in its detail (k is not read again) */
    for (size_t b = 0; b < nb; b++) wrk_rounds_note(&k[b], &us[b * j->rounds], j->round + 1);
    return emit_result(p, j, ci, k, nb, j->regs[2 * ci], j->regs[2 * ci + 1]);
}

/* Every config of a job whose shape cannot run gets INVALID without the child. */
static int emit_invalid(wrk_parent_t *p, pjob_t *j) {
    size_t n = j->job->n_batch_sizes;
    wrk_meas_t *meas = mt_calloc(n, sizeof *meas);
    if (!meas) return MT_NOMEM;
    for (size_t i = 0; i < n; i++) {
        meas[i].status = MOETUNE__STATUS__STATUS_INVALID;
        snprintf(meas[i].detail, sizeof meas[i].detail, "%s", j->why);
    }
    int rc = MT_OK;
    for (; j->next < j->job->n_configs && !rc; j->next++) rc = emit_result(p, j, j->next, meas, n, 0, 0);
    free(meas);
    return rc;
}

/* Unlinks j (prev its predecessor, NULL for the head) and frees it; its credit goes back
 * unless it went already. */
static void drop_job(wrk_parent_t *p, pjob_t *prev, pjob_t *j) {
    if (prev)
        prev->link = j->link;
    else
        p->head = j->link;
    if (p->tail == j) p->tail = prev;
    p->n_jobs--;
    int released = j->released;
    job_free(j);
    if (!released) send_ready(p, 1);
}

static void finish_head(wrk_parent_t *p) {
    pjob_t *j = p->head;
    if (j->superseded) {
        log_at(MT_LOG_INFO, "job %llu: the earlier lease ends; its new lease is measured",
               (unsigned long long)j->job->job_id);
    } else {
        p->jobs_done++;
        log_at(MT_LOG_INFO, "job %llu done (%zu configs)", (unsigned long long)j->job->job_id, j->job->n_configs);
    }
    drop_job(p, NULL, j);
}

/* A worker holding its only job, with nothing else on the way, asks for the next one when the
 * job's last 3 configs remain (configs a split took not counted): the job comes while the
 * first of them is measured, and the backend compiles its configs ahead (prepare_job, at the
 * next config's start) while the last ones are, instead of the next job's first compile and
 * the round trip for it waiting at the job's end (2 left measured about the same; RESULTS,
 * "Search at scale"). A worker that holds more jobs (--credits 2) has its next job already. */
static void release_early(wrk_parent_t *p, pjob_t *j) {
    if (j->released || p->n_jobs != 1 || p->n_ready != 0 || j->round + 1 < j->rounds) return;
    size_t left = 0;
    for (size_t i = j->next; i < j->job->n_configs && left <= 3; i++) left += !(j->moved && j->moved[i]);
    if (left > 3) return;
    j->released = 1;
    send_ready(p, 1);
}

/* Replaces the child (a dead one, or a live one between rounds) with a new one that compiles
 * every held job's configs again. */
static int new_child(wrk_parent_t *p) {
    char err[256];
    if (wrk_child_restart(p->child, err, sizeof err)) {
        fprintf(stderr, "moetune-worker: cannot start a child: %s\n", err);
        return MT_ERR;
    }
    for (pjob_t *j = p->head; j; j = j->link) j->prepared = 0;
    return MT_OK;
}

static void prepare_job(wrk_parent_t *p, pjob_t *j) {
    if (j->prepared || !j->shape_ok || j->next >= j->job->n_configs) return;
    size_t n = j->job->n_configs - j->next;
    krn_config_t *cfgs = mt_malloc(n * sizeof *cfgs);
    if (cfgs) {
        for (size_t i = 0; i < n; i++) wire_config_from_msg(j->job->configs[j->next + i]->config, &cfgs[i]);
        wrk_child_prepare(p->child, &j->shape, cfgs, n);
        free(cfgs);
    }
    j->prepared = 1;
}

/* Starts the next config when the child is idle; finishes jobs that have no more. */
static int pump(wrk_parent_t *p) {
    int rc = MT_OK;
    while (p->head && wrk_child_state(p->child) == WRK_CHILD_IDLE) {
        pjob_t *j = p->head;
        if (j->superseded) {
            finish_head(p);
            continue;
        }
        if (!j->shape_ok) {
            rc = emit_invalid(p, j);
            if (rc) return rc;
        }
        /* a config a split gave to another worker is not measured here */
        while (j->moved && j->next < j->job->n_configs && j->moved[j->next]) j->next++;
        /* a config with nothing left OK had its Result sent in an earlier round */
        while (j->round > 0 && j->next < j->job->n_configs &&
               wrk_rounds_settled(&j->kept[j->next * j->job->n_batch_sizes], j->job->n_batch_sizes))
            j->next++;
        if (j->next >= j->job->n_configs && j->shape_ok && j->round + 1 < j->rounds) {
            j->round++;
            j->next = 0;
            if (j->job->measure && j->job->measure->fresh_rounds > 0) {
                /* the next round in a new child; pump goes on once it has opened */
                p->round_children++;
                if (new_child(p)) return MT_ERR;
                log_at(MT_LOG_INFO, "job %llu: round %u of %u in a new child (pid %ld)",
                       (unsigned long long)j->job->job_id, j->round + 1, j->rounds, (long)wrk_child_pid(p->child));
                return MT_OK;
            }
            log_at(MT_LOG_DEBUG, "job %llu: round %u of %u", (unsigned long long)j->job->job_id, j->round + 1,
                   j->rounds);
            continue;
        }
        if (j->next >= j->job->n_configs) {
            finish_head(p);
            continue;
        }
        /* announce this job's configs and those of the jobs queued behind it, so a backend
         * that compiles ahead has the next job compiled when this one ends */
        for (pjob_t *q = j; q; q = q->link) prepare_job(p, q);
        release_early(p, j);
        krn_config_t cfg;
        wrk_measure_t m;
        wire_config_from_msg(j->job->configs[j->next]->config, &cfg);
        measure_from_proto(j->job, &m);
        m.best_us = j->best;
        m.settle_margin = j->rounds > 1 ? 0.0 : WRK_SETTLE_MARGIN; /* rounds measure every finalist alike */
        /* rounds share one measurement's time budget, so a side-by-side job costs about what its
         * configs' single measurements would where the budget is what stops them */
        if (j->rounds > 1) m.budget_ms = m.budget_ms / j->rounds ? m.budget_ms / j->rounds : 1;
        rc = wrk_child_start(p->child, &j->shape, &cfg, j->job->batch_sizes, j->job->n_batch_sizes, &m);
        if (rc) {
            log_at(MT_LOG_ERROR, "cannot hand config to the child: %s", wrk_child_error(p->child));
            return rc;
        }
        return MT_OK;
    }
    return rc;
}

/* ---- messages from the coordinator (a table by body) */

static void on_welcome(wrk_parent_t *p, const wire_env_t *env) {
    uint32_t hb = env->welcome->heartbeat_ms;
    if (hb >= WIRE_HEARTBEAT_MIN_MS && hb <= WIRE_HEARTBEAT_MAX_MS) p->heartbeat_ms = hb;
    p->session = SESSION_WELCOMED;
    p->refusals = 0;
    p->next_beat_ms = mt_now_ms() + p->heartbeat_ms;
    log_at(MT_LOG_INFO, "welcomed (heartbeat %u ms); resending %zu unacknowledged results", p->heartbeat_ms,
           p->n_unacked);
    for (size_t i = 0; i < p->n_unacked; i++)
        if (zmq_send(p->sock, p->unacked[i].buf, p->unacked[i].len, ZMQ_DONTWAIT) < 0) break;
    size_t held = 0;
    for (pjob_t *j = p->head; j; j = j->link) held += !j->released;
    send_ready(p, p->opts.credits > held ? p->opts.credits - (uint32_t)held : 0);
}

static void on_job(wrk_parent_t *p, wire_env_t **penv) {
    const Moetune__Job *job = (*penv)->job;
    /* A job we hold, leased to us again: its earlier lease went back (a Result rejected, the
     * lease expired) and this one replaces it, or nothing would measure it and its credit would
     * never return. The same lease twice is a duplicate. */
    for (pjob_t *j = p->head, *prev = NULL; j; prev = j, j = j->link) {
        if (j->job->job_id != job->job_id || j->superseded) continue;
        if (j->job->lease_token == job->lease_token) {
            p->bad_messages++;
            log_at(MT_LOG_WARN, "job %llu is already held; ignoring the duplicate", (unsigned long long)job->job_id);
            return;
        }
        log_at(MT_LOG_INFO, "job %llu leased to us again (its earlier lease went back): measured anew",
               (unsigned long long)job->job_id);
        if (j == p->head) {
            j->superseded = 1; /* ends when the child is done with its config */
        } else {
            drop_job(p, prev, j);
        }
        break;
    }
    pjob_t *j = mt_calloc(1, sizeof *j);
    if (!j) return;
    j->env = *penv;
    *penv = NULL;
    j->job = j->env->job;
    shape_from_proto(j);
    j->best = mt_calloc(job->n_batch_sizes ? job->n_batch_sizes : 1, sizeof *j->best);
    if (!j->best) {
        job_free(j);
        log_at(MT_LOG_ERROR, "out of memory taking job %llu; its lease expires", (unsigned long long)job->job_id);
        return;
    }
    if (job->n_best_us == job->n_batch_sizes) memcpy(j->best, job->best_us, job->n_batch_sizes * sizeof *j->best);
    j->rounds = job->rounds > 1 ? job->rounds : 1;
    if (j->rounds > 1) {
        j->kept = mt_calloc(job->n_configs * job->n_batch_sizes, sizeof *j->kept);
        j->regs = mt_calloc(2 * job->n_configs, sizeof *j->regs);
        j->round_us = mt_calloc(job->n_configs * job->n_batch_sizes * j->rounds, sizeof *j->round_us);
        if (!j->kept || !j->regs || !j->round_us) {
            job_free(j);
            log_at(MT_LOG_ERROR, "out of memory taking job %llu; its lease expires", (unsigned long long)job->job_id);
            return;
        }
    }
    if (p->n_ready > 0) {
        push_u64(&p->rtt, &p->n_rtt, &p->cap_rtt, mt_now_us() - p->ready_sent[0]);
        memmove(p->ready_sent, p->ready_sent + 1, (p->n_ready - 1) * sizeof *p->ready_sent);
        p->n_ready--;
    }
    if (p->tail)
        p->tail->link = j;
    else
        p->head = j;
    p->tail = j;
    p->n_jobs++;
    log_at(MT_LOG_INFO, "job %llu: %zu configs x %zu batch sizes, %u round%s", (unsigned long long)job->job_id,
           job->n_configs, job->n_batch_sizes, j->rounds, j->rounds > 1 ? "s, side by side" : "");
}

/* A racing best (0 = none) lowered to us when us is a faster median. */
static void lower_best(double *best, double us) {
    if (us > 0 && (*best == 0 || us < *best)) *best = us;
}

/* A split took configs out of a held job: pump skips those not started; the one being
 * measured, if it is one, is finished and sent (the coordinator counts it while the new job
 * still needs it). */
static void on_moved(wrk_parent_t *p, const Moetune__JobMoved *m) {
    for (pjob_t *j = p->head; j; j = j->link) {
        if (j->job->job_id != m->job_id) continue;
        if (!j->moved && !(j->moved = mt_calloc(j->job->n_configs ? j->job->n_configs : 1, 1))) return;
        for (size_t k = 0; k < m->n_config_ids; k++)
            for (size_t i = 0; i < j->job->n_configs; i++)
                if (j->job->configs[i]->config_id == m->config_ids[k]) j->moved[i] = 1;
        log_at(MT_LOG_INFO, "job %llu: %zu configs moved to another worker by a split", (unsigned long long)m->job_id,
               m->n_config_ids);
        return;
    }
}

static void on_ack(wrk_parent_t *p, const wire_env_t *env) {
    const Moetune__Ack *a = env->ack;
    for (size_t k = 0; k < a->n_seqs; k++) {
        for (size_t i = 0; i < p->n_unacked; i++) {
            if (p->unacked[i].seq != a->seqs[k]) continue;
            free(p->unacked[i].buf);
            p->unacked[i] = p->unacked[--p->n_unacked];
            break;
        }
    }
    /* what other workers committed since a job's lease: its next configs race against it */
    for (size_t k = 0; k < a->n_best; k++) {
        const Moetune__JobBest *b = a->best[k];
        for (pjob_t *j = p->head; j; j = j->link) {
            if (j->job->job_id != b->job_id || !j->best || b->n_best_us != j->job->n_batch_sizes) continue;
            for (size_t i = 0; i < b->n_best_us; i++) lower_best(&j->best[i], b->best_us[i]);
        }
    }
    for (size_t k = 0; k < a->n_moved; k++) on_moved(p, a->moved[k]);
}

static void on_error(wrk_parent_t *p, const wire_env_t *env) {
    const Moetune__Error *e = env->error;
    if (e->code == WIRE_E_REFUSED && p->session != SESSION_WELCOMED) {
        /* Once more after the coordinator's dead period, socket closed meanwhile (a worker
         * restarted with its id is refused while its predecessor, killed, still counts as
         * alive); then for good: retrying would only take the id from the worker that has it. */
        const char *why = e->message ? e->message : "";
        if (++p->refusals < 2) {
            log_at(MT_LOG_WARN, "the coordinator refused this worker: %s; trying once more in %u ms", why,
                   (SILENT_PERIODS + 1) * p->heartbeat_ms);
            close_socket(p);
            p->last_heard_ms = mt_now_ms() + p->heartbeat_ms; /* the reconnect is due then */
            return;
        }
        log_at(MT_LOG_ERROR, "the coordinator refused this worker: %s", why);
        fprintf(stderr, "moetune-worker: the coordinator refused this worker: %s\n", why);
        p->refused = 1;
        p->stop = 1;
        return;
    }
    log_at(MT_LOG_WARN, "coordinator error %d: %s", e->code, e->message ? e->message : "");
    /* The connection works (this Error came over it): a coordinator that lost us
     * only needs a Hello; reconnecting would race the old routing id. */
    if (e->code == WIRE_E_HELLO) send_hello(p);
}

static void on_shutdown(wrk_parent_t *p, const wire_env_t *env) {
    log_at(MT_LOG_INFO, "shutdown requested: %s", env->shutdown->reason ? env->shutdown->reason : "");
    p->stop = 1;
}

static void on_heartbeat(wrk_parent_t *p, const wire_env_t *env) { (void)p, (void)env; }

typedef struct {
    wire_body_t body;
    void (*fn)(wrk_parent_t *, const wire_env_t *);
} handler_t;

static const handler_t g_handlers[] = {
    {MOETUNE__ENVELOPE__BODY_WELCOME, on_welcome},     {MOETUNE__ENVELOPE__BODY_ACK, on_ack},
    {MOETUNE__ENVELOPE__BODY_HEARTBEAT, on_heartbeat}, {MOETUNE__ENVELOPE__BODY_ERROR, on_error},
    {MOETUNE__ENVELOPE__BODY_SHUTDOWN, on_shutdown},
};

static void handle(wrk_parent_t *p, wire_env_t **penv) {
    wire_body_t body = (*penv)->body_case;
    if (!wire_allowed(WIRE_FROM_COORDINATOR, body) || body == MOETUNE__ENVELOPE__BODY_SUBMITTED ||
        body == MOETUNE__ENVELOPE__BODY_STATUS_REPLY || body == MOETUNE__ENVELOPE__BODY_CANCELLED) {
        p->bad_messages++;
        log_at(MT_LOG_WARN, "ignoring a %s message: not one a coordinator sends to a worker", wire_body_name(body));
        return;
    }
    p->last_heard_ms = mt_now_ms();
    if (body == MOETUNE__ENVELOPE__BODY_JOB) {
        on_job(p, penv);
        return;
    }
    for (size_t i = 0; i < sizeof g_handlers / sizeof g_handlers[0]; i++) {
        if (g_handlers[i].body == body) {
            g_handlers[i].fn(p, *penv);
            return;
        }
    }
}

static void drain_socket(wrk_parent_t *p) {
    while (p->sock && !p->stop) {
        wire_env_t *env = NULL;
        wire_reject_t rej;
        int rc = wire_recv(p->sock, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, ZMQ_DONTWAIT, &env, &rej);
        if (rc == MT_AGAIN) return;
        if (rc == MT_INVAL) {
            p->bad_messages++;
            log_at(MT_LOG_WARN, "malformed message from the coordinator (code %d): %s", rej.code, rej.reason);
            continue;
        }
        if (rc) {
            log_at(MT_LOG_WARN, "receive failed: %s", zmq_strerror(zmq_errno()));
            return;
        }
        handle(p, &env);
        wire_free(&env);
    }
}

/* ---- child events */

static int on_child(wrk_parent_t *p, wrk_child_event_t ev) {
    if (ev == WRK_CHILD_EV_DONE) {
        pjob_t *j = p->head;
        const wrk_meas_t *meas;
        size_t n;
        uint32_t regs, spills;
        wrk_child_results(p->child, &meas, &n, &regs, &spills);
        if (j && !j->superseded && j->next < j->job->n_configs) {
            if (meas[0].status == MOETUNE__STATUS__STATUS_CRASHED || meas[0].status == MOETUNE__STATUS__STATUS_TIMEOUT)
                log_at(MT_LOG_WARN, "job %llu config %llu: %s", (unsigned long long)j->job->job_id,
                       (unsigned long long)j->job->configs[j->next]->config_id, meas[0].detail);
            int rc = j->rounds > 1 ? keep_round(p, j, meas, n, regs, spills)
                                   : emit_result(p, j, j->next, meas, n, regs, spills);
            if (rc) return rc;
            /* the next configs of this job race against what this one measured, too */
            for (size_t i = 0; i < n && i < j->job->n_batch_sizes; i++)
                if (meas[i].status == MOETUNE__STATUS__STATUS_OK) lower_best(&j->best[i], meas[i].median_us);
            j->next++;
        }
    }
    if (wrk_child_state(p->child) == WRK_CHILD_DEAD && ev != WRK_CHILD_EV_OPEN_FAILED) {
        p->child_restarts++;
        log_at(MT_LOG_INFO, "starting a new child (%s)", wrk_child_error(p->child));
        if (new_child(p)) return MT_ERR;
    }
    if (ev == WRK_CHILD_EV_OPEN_FAILED) {
        fprintf(stderr, "moetune-worker: %s backend: %s\n", p->be->name, wrk_child_error(p->child));
        return MT_ERR;
    }
    return MT_OK;
}

/* ---- the loop */

static int wait_first_child(wrk_parent_t *p) {
    while (!mt_stop_requested) {
        wrk_child_event_t ev;
        if (wrk_child_poll(p->child, 200, &ev)) return MT_ERR;
        if (ev == WRK_CHILD_EV_READY) return MT_OK;
        if (ev == WRK_CHILD_EV_OPEN_FAILED) {
            fprintf(stderr, "moetune-worker: %s backend: %s\n", p->be->name, wrk_child_error(p->child));
            return MT_ERR;
        }
    }
    return MT_AGAIN;
}

int wrk_parent_run(wrk_parent_t *p) {
    int code = MT_EXIT_OK;
    char err[256];
    if (wrk_child_new(p->be, &p->opts.bopts, &p->child, err, sizeof err)) {
        fprintf(stderr, "moetune-worker: %s backend: %s\n", p->be->name, err);
        return MT_EXIT_FAIL;
    }
    int rc = wait_first_child(p);
    if (rc == MT_AGAIN) goto out;
    if (rc) {
        code = MT_EXIT_FAIL;
        goto out;
    }
    const wrk_device_t *d = wrk_child_device(p->child);
    log_at(MT_LOG_INFO, "%s backend: %s (%s), compiler %s", p->be->name, d->name, d->uuid, d->compiler);
    /* a Hello the coordinator would refuse is refused here, in one line, before connecting */
    Moetune__Hello h;
    Moetune__Gpu g;
    hello_fill(p, &h, &g);
    const char *bad = wire_hello_invalid(&h);
    if (bad) {
        fprintf(stderr, "moetune-worker: this worker cannot join: %s\n", bad);
        code = MT_EXIT_FAIL;
        goto out;
    }
    p->ctx = zmq_ctx_new();
    if (!p->ctx || connect_and_hello(p)) {
        code = MT_EXIT_FAIL;
        goto out;
    }
    while (!p->stop && !mt_stop_requested) {
        uint64_t now = mt_now_ms();
        uint64_t due = p->last_heard_ms + (uint64_t)SILENT_PERIODS * p->heartbeat_ms;
        if (p->session == SESSION_WELCOMED && p->next_beat_ms < due) due = p->next_beat_ms;
        uint64_t dl = wrk_child_deadline_ms(p->child);
        if (dl && dl < due) due = dl;
        long timeout = due > now ? (long)(due - now) : 0;
        zmq_pollitem_t items[2] = {{p->sock, 0, ZMQ_POLLIN, 0}, {NULL, wrk_child_fd(p->child), ZMQ_POLLIN, 0}};
        zmq_pollitem_t *first = p->sock ? items : items + 1; /* no socket while a refused Hello waits */
        int n_items = (p->sock ? 1 : 0) + (wrk_child_fd(p->child) >= 0 ? 1 : 0);
        if (zmq_poll(first, n_items, timeout) < 0 && zmq_errno() != EINTR) {
            log_at(MT_LOG_ERROR, "poll: %s", zmq_strerror(zmq_errno()));
            code = MT_EXIT_FAIL;
            break;
        }
        if (p->sock && (items[0].revents & ZMQ_POLLIN)) drain_socket(p);
        for (;;) {
            wrk_child_event_t ev;
            if (wrk_child_poll(p->child, 0, &ev)) {
                code = MT_EXIT_FAIL;
                goto out;
            }
            if (ev == WRK_CHILD_EV_NONE) break;
            if (on_child(p, ev)) {
                code = MT_EXIT_FAIL;
                goto out;
            }
        }
        if (pump(p)) {
            code = MT_EXIT_FAIL;
            break;
        }
        now = mt_now_ms();
        if (now >= p->last_heard_ms + (uint64_t)SILENT_PERIODS * p->heartbeat_ms) {
            p->reconnects++;
            if (p->opts.curve && p->session != SESSION_WELCOMED)
                log_at(MT_LOG_WARN,
                       "no Welcome from %s in %u ms (CURVE: the coordinator may refuse our key, or "
                       "the server key is wrong); reconnecting",
                       p->endpoint, SILENT_PERIODS * p->heartbeat_ms);
            else if (p->sock)
                log_at(MT_LOG_WARN, "coordinator silent for %u ms; reconnecting", SILENT_PERIODS * p->heartbeat_ms);
            if (connect_and_hello(p)) {
                code = MT_EXIT_FAIL;
                break;
            }
        }
        if (p->session == SESSION_WELCOMED && now >= p->next_beat_ms) {
            send_heartbeat(p);
            p->next_beat_ms = now + p->heartbeat_ms;
        }
    }
    if (p->refused) code = MT_EXIT_FAIL;
    if (p->sock && !p->refused) send_bye(p, p->stop ? "shutdown" : "stopping");
    log_at(MT_LOG_INFO, "stopping: %llu jobs, %llu results, %zu unacknowledged", (unsigned long long)p->jobs_done,
           (unsigned long long)p->results, p->n_unacked);
out:
    wrk_child_destroy(&p->child);
    close_socket(p);
    if (p->ctx) {
        zmq_ctx_term(p->ctx);
        p->ctx = NULL;
    }
    return code;
}

/* ---- lifecycle and stats */

mt_status_t wrk_parent_new(const wrk_parent_opts_t *opts, wrk_parent_t **out, char *err, size_t errlen) {
    int rc = MT_OK;
    wrk_parent_t *p = mt_calloc(1, sizeof *p);
    *out = NULL;
    if (!p) return MT_NOMEM;
    p->opts = *opts;
    p->be = wrk_backend_find(opts->backend);
    if (!p->be) {
        mt_fmt(err, errlen, "unknown backend '%s' (built: %s)", opts->backend ? opts->backend : "",
               wrk_backend_names());
        rc = MT_INVAL;
        goto out;
    }
    if (!opts->endpoint || !*opts->endpoint || strlen(opts->endpoint) >= sizeof p->endpoint) {
        mt_fmt(err, errlen, "missing or too long coordinator endpoint");
        rc = MT_INVAL;
        goto out;
    }
    snprintf(p->endpoint, sizeof p->endpoint, "%s", opts->endpoint);
    if (p->opts.credits == 0) p->opts.credits = 1;
    if (p->opts.credits > WIRE_MAX_HELD) {
        mt_fmt(err, errlen, "credits %u: a worker holds %u jobs at most (one measured, one compiling ahead)",
               p->opts.credits, WIRE_MAX_HELD);
        rc = MT_INVAL;
        goto out;
    }
    p->heartbeat_ms = opts->heartbeat_ms ? opts->heartbeat_ms : WIRE_HEARTBEAT_DEFAULT_MS;
    if (gethostname(p->host, sizeof p->host) != 0) snprintf(p->host, sizeof p->host, "localhost");
    p->host[sizeof p->host - 1] = '\0';
    if (opts->worker_id) {
        Moetune__Hello h = MOETUNE__HELLO__INIT;
        Moetune__Gpu g = MOETUNE__GPU__INIT;
        g.name = "gpu";
        h.gpu = &g;
        h.worker_id = (char *)opts->worker_id;
        const char *bad = wire_hello_invalid(&h);
        if (bad) {
            mt_fmt(err, errlen, "--id: %s", bad + strlen("hello: "));
            rc = MT_INVAL;
            goto out;
        }
        snprintf(p->id, sizeof p->id, "%s", opts->worker_id);
    } else {
        snprintf(p->id, sizeof p->id, "%.200s-%d-gpu%d", p->host, (int)getpid(), opts->bopts.gpu_index);
    }
    p->opts.worker_id = p->id;
    p->opts.endpoint = p->endpoint;
    if (!opts->curve != !opts->curve_server || (opts->curve && !opts->curve->has_secret)) {
        mt_fmt(err, errlen, "CURVE needs the worker's key pair and the coordinator's public key");
        rc = MT_INVAL;
        goto out;
    }
    if (opts->curve) {
        p->curve = *opts->curve;
        p->curve_server = *opts->curve_server;
        p->opts.curve = &p->curve;
        p->opts.curve_server = &p->curve_server;
    }
    *out = p;
    p = NULL;
out:
    free(p);
    return rc;
}

const char *wrk_parent_id(const wrk_parent_t *p) { return p->id; }

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t pct(const uint64_t *sorted, size_t n, double q) {
    if (n == 0) return 0;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

void wrk_parent_stats_json(const wrk_parent_t *p, char *buf, size_t len) {
    uint64_t *s = NULL;
    size_t n = p->n_rtt;
    if (n && (s = mt_malloc(n * sizeof *s))) {
        memcpy(s, p->rtt, n * sizeof *s);
        qsort(s, n, sizeof *s, cmp_u64);
    } else {
        n = 0;
    }
    mt_fmt(buf, len,
           "{\"jobs\":%llu,\"results\":%llu,\"dispatch_rtt_us\":{\"p50\":%llu,\"p99\":%llu,\"n\":%zu},"
           "\"bad_messages\":%llu,\"reconnects\":%llu,\"child_restarts\":%llu,\"round_children\":%llu,"
           "\"unacked\":%zu}",
           (unsigned long long)p->jobs_done, (unsigned long long)p->results, (unsigned long long)pct(s, n, 0.50),
           (unsigned long long)pct(s, n, 0.99), n, (unsigned long long)p->bad_messages,
           (unsigned long long)p->reconnects, (unsigned long long)p->child_restarts,
           (unsigned long long)p->round_children, p->n_unacked);
    free(s);
}

void wrk_parent_destroy(wrk_parent_t **pp) {
    if (!pp || !*pp) return;
    wrk_parent_t *p = *pp;
    wrk_child_destroy(&p->child);
    close_socket(p);
    if (p->ctx) zmq_ctx_term(p->ctx);
    while (p->head) {
        pjob_t *j = p->head;
        p->head = j->link;
        job_free(j);
    }
    for (size_t i = 0; i < p->n_unacked; i++) free(p->unacked[i].buf);
    free(p->unacked);
    free(p->ready_sent);
    free(p->rtt);
    free(p);
    *pp = NULL;
}
