/* wire.c - Envelope framing and validation over ZeroMQ. See wire.h. */
#include "wire.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "convert.h"
#include "mt.h"
#include "space.h"
#include "states.h"

#define MAX_STRING 4096 /* longest string field accepted */
#define MAX_LIST 65536  /* longest repeated field accepted */

void wire_env_init(wire_env_t *env) {
    moetune__envelope__init(env);
    env->protocol_version = WIRE_PROTOCOL_VERSION;
}

void wire_env_wrap(wire_env_t *env, ProtobufCMessage *body) {
    const ProtobufCMessageDescriptor *d = &moetune__envelope__descriptor;
    wire_env_init(env);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->descriptor != body->descriptor) continue;
        /* The oneof's members are all pointers to messages, whose base is their first member:
         * the member takes body's address as it is. */
        env->body_case = (wire_body_t)f->id;
        memcpy((char *)env + f->offset, &body, sizeof body);
        return;
    }
    assert(!"wire_env_wrap: not an Envelope body");
}

mt_status_t wire_pack(wire_env_t *env, uint8_t **buf, size_t *len) {
    env->protocol_version = WIRE_PROTOCOL_VERSION;
    size_t n = moetune__envelope__get_packed_size(env);
    uint8_t *p = malloc(n ? n : 1);
    if (!p) return MT_NOMEM;
    moetune__envelope__pack(env, p);
    *buf = p;
    *len = n;
    return MT_OK;
}

/* Table of which roles may send which body (a bit per wire_role_t). */
#define W (1u << WIRE_FROM_WORKER)
#define C (1u << WIRE_FROM_COORDINATOR)
#define L (1u << WIRE_FROM_CLIENT)
static const struct {
    wire_body_t body;
    const char *name;
    unsigned from;
} g_bodies[] = {
    {MOETUNE__ENVELOPE__BODY_HELLO, "hello", W},
    {MOETUNE__ENVELOPE__BODY_READY, "ready", W},
    {MOETUNE__ENVELOPE__BODY_RESULT, "result", W},
    {MOETUNE__ENVELOPE__BODY_HEARTBEAT, "heartbeat", W | C},
    {MOETUNE__ENVELOPE__BODY_BYE, "bye", W},
    {MOETUNE__ENVELOPE__BODY_WELCOME, "welcome", C},
    {MOETUNE__ENVELOPE__BODY_JOB, "job", C},
    {MOETUNE__ENVELOPE__BODY_ACK, "ack", C},
    {MOETUNE__ENVELOPE__BODY_SHUTDOWN, "shutdown", C},
    {MOETUNE__ENVELOPE__BODY_ERROR, "error", C},
    {MOETUNE__ENVELOPE__BODY_SUBMIT, "submit", L},
    {MOETUNE__ENVELOPE__BODY_SUBMITTED, "submitted", C},
    {MOETUNE__ENVELOPE__BODY_STATUS_REQUEST, "status_request", L},
    {MOETUNE__ENVELOPE__BODY_STATUS_REPLY, "status_reply", C},
    {MOETUNE__ENVELOPE__BODY_CANCEL, "cancel", L},
    {MOETUNE__ENVELOPE__BODY_CANCELLED, "cancelled", C},
};
#undef W
#undef C
#undef L
#define N_BODIES (sizeof g_bodies / sizeof g_bodies[0])

bool wire_allowed(wire_role_t role, wire_body_t body) {
    for (size_t i = 0; i < N_BODIES; i++)
        if (g_bodies[i].body == body) return (g_bodies[i].from & (1u << role)) != 0;
    return false;
}

const char *wire_body_name(wire_body_t body) {
    for (size_t i = 0; i < N_BODIES; i++)
        if (g_bodies[i].body == body) return g_bodies[i].name;
    return "none";
}

void wire_free(wire_env_t **env) {
    if (!env || !*env) return;
    moetune__envelope__free_unpacked(*env, NULL);
    *env = NULL;
}

static bool str_ok(const char *s) { return !s || strlen(s) <= MAX_STRING; }

/* A latency on the wire: finite, 0 (not measured) up to WIRE_MAX_LATENCY_US. */
static bool latency_ok(double us) { return us >= 0 && us < WIRE_MAX_LATENCY_US; }

/* One Measurement's fields and their relations; NULL when it holds together. An ok or pruned
 * row is a set of samples: at least one and at most WIRE_MAX_SAMPLES, the fastest no slower
 * than the median or the mean, the median in the plausible range, and a standard deviation no
 * set of that many non-negative samples with that mean can exceed (mean x sqrt(samples)). */
static const char *measurement_invalid(const Moetune__Measurement *m) {
    if (m->batch_size == 0) return "result: batch_size 0";
    if (!wire_status_name(m->status)) return "result: unknown status";
    /* every latency, whatever the status, is a finite number of microseconds (NaN fails
     * every comparison); 0 = not measured */
    if (!latency_ok(m->median_us) || !latency_ok(m->min_us) || !latency_ok(m->mean_us) || !latency_ok(m->stddev_us))
        return "result: negative or non-finite latency";
    if (!latency_ok(m->up_us) || !latency_ok(m->down_us) || !latency_ok(m->timed_us))
        return "result: negative or non-finite up_us/down_us/timed_us";
    if (m->detail && strlen(m->detail) > WIRE_MAX_DETAIL) return "result: detail too long";
    if (m->samples > WIRE_MAX_SAMPLES) return "result: more samples than any measurement takes";
    if (m->status != MOETUNE__STATUS__STATUS_OK && m->status != MOETUNE__STATUS__STATUS_PRUNED) return NULL;
    if (!(m->median_us > 0 && m->min_us > 0 && m->mean_us > 0))
        return "result: ok or pruned measurement with a zero latency";
    if (m->samples == 0) return "result: ok or pruned measurement without samples";
    if (m->median_us < WIRE_MIN_MEDIAN_US || m->median_us > WIRE_MAX_MEDIAN_US)
        return "result: median outside the plausible range (0.5 us .. 1000 s)";
    /* min is one of the samples; the mean is computed, so it gets a rounding's slack */
    if (m->min_us > m->median_us || m->min_us > m->mean_us * (1 + 1e-9)) return "result: min above the median or mean";
    if (m->stddev_us > m->mean_us * sqrt((double)m->samples) * (1 + 1e-9))
        return "result: standard deviation larger than its samples allow";
    return NULL;
}

/* A string that is data: printable, no control characters, none of the bytes in bad. */
static bool text_ok(const char *s, size_t max, const char *bad) {
    if (!s) return true;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++, n++)
        if (*p < 0x20 || *p == 0x7f || (bad && strchr(bad, *p))) return false;
    return n <= max;
}

const char *wire_hello_invalid(const Moetune__Hello *h) {
    if (!h->worker_id || !*h->worker_id || strlen(h->worker_id) > WIRE_MAX_ID)
        return "hello: the worker id must be 1..255 bytes";
    if (!text_ok(h->worker_id, WIRE_MAX_ID, ",="))
        return "hello: the worker id has a control character, ',' or '=' (ids are data: letters, digits, '-', '.')";
    if (!text_ok(h->host, MAX_STRING, NULL) || !text_ok(h->backend, 64, ",=/\\") ||
        !text_ok(h->kernel_hash, 128, NULL) || !text_ok(h->versions, 1024, NULL))
        return "hello: host, backend, kernel hash or versions too long or with a control character";
    if (!text_ok(h->compiler, 128, ",=/\\") || (h->compiler && strstr(h->compiler, "..")))
        return "hello: the compiler (an export directory name) is too long or has a control character, '/', "
               "'\\', ',', '=' or '..'";
    if (!h->gpu || !h->gpu->name || !*h->gpu->name) return "hello: no GPU name";
    if (strlen(h->gpu->name) > WIRE_MAX_GPU_NAME)
        return "hello: the GPU name is longer than 96 bytes (it is never shortened: two models would share a file)";
    if (!text_ok(h->gpu->name, WIRE_MAX_GPU_NAME, ",="))
        return "hello: the GPU name has a control character, ',' or '=' (the separators of config file names)";
    if (!text_ok(h->gpu->uuid, MAX_STRING, NULL) || !text_ok(h->gpu->driver_version, MAX_STRING, NULL) ||
        !text_ok(h->gpu->cuda_version, MAX_STRING, NULL))
        return "hello: a GPU string is too long or has a control character";
    return NULL;
}

size_t wire_result_max_bytes(size_t n) {
    static char detail[WIRE_MAX_DETAIL + 1];
    if (!detail[0]) memset(detail, 'x', WIRE_MAX_DETAIL);
    Moetune__Measurement m = MOETUNE__MEASUREMENT__INIT;
    m.batch_size = UINT32_MAX;
    m.status = MOETUNE__STATUS__STATUS_PRUNED;
    m.median_us = m.min_us = m.mean_us = m.stddev_us = m.up_us = m.down_us = m.timed_us = 1.5;
    m.samples = UINT32_MAX;
    m.detail = detail;
    /* a field's tag, the length prefix of a nested message (at most 5 bytes) and the message */
    size_t per = 1 + 5 + moetune__measurement__get_packed_size(&m);
    Moetune__Result r = MOETUNE__RESULT__INIT;
    r.job_id = r.lease_token = r.seq = r.config_id = UINT64_MAX;
    r.registers = r.spills = UINT32_MAX;
    wire_env_t env;
    wire_env_wrap(&env, &r.base);
    return moetune__envelope__get_packed_size(&env) + 8 + n * per;
}

static bool shape_ok(const Moetune__Shape *s) {
    return s && s->e > 0 && s->n > 0 && s->k > 0 && s->topk > 0 && s->topk <= s->e && s->topk <= KRN_MAX_TOPK &&
           s->e <= KRN_MAX_E && s->n <= KRN_MAX_NK && s->k <= KRN_MAX_NK && str_ok(s->dtype);
}

/* Every field in 1..its max (krn_config_bad_field). */
static bool config_ok(const Moetune__Config *c) {
    krn_config_t k;
    if (!c) return false;
    wire_config_from_msg(c, &k);
    return krn_config_bad_field(&k) < 0;
}

/* Field-level checks per body; returns NULL when valid, else the reason. */
static const char *validate(const wire_env_t *env) {
    switch (env->body_case) {
        case MOETUNE__ENVELOPE__BODY_HELLO:
            return wire_hello_invalid(env->hello);
        case MOETUNE__ENVELOPE__BODY_READY:
            return env->ready->credits > WIRE_MAX_CREDITS ? "ready: too many credits" : NULL;
        case MOETUNE__ENVELOPE__BODY_RESULT: {
            const Moetune__Result *r = env->result;
            if (r->job_id == 0 || r->config_id == 0) return "result: job_id and config_id must be set";
            if (r->n_measurements == 0 || r->n_measurements > MAX_LIST) return "result: bad measurement count";
            for (size_t i = 0; i < r->n_measurements; i++) {
                const char *why = measurement_invalid(r->measurements[i]);
                if (why) return why;
            }
            return NULL;
        }
        case MOETUNE__ENVELOPE__BODY_ACK: {
            const Moetune__Ack *a = env->ack;
            if (a->n_seqs > MAX_LIST || a->n_best > WIRE_MAX_CREDITS) return "ack: too many seqs or bests";
            for (size_t i = 0; i < a->n_best; i++) {
                const Moetune__JobBest *b = a->best[i];
                if (b->job_id == 0 || b->n_best_us == 0 || b->n_best_us > MAX_LIST) return "ack: bad job best";
                for (size_t k = 0; k < b->n_best_us; k++)
                    if (!(b->best_us[k] >= 0 && b->best_us[k] < 1e12)) return "ack: negative or non-finite best_us";
            }
            if (a->n_moved > WIRE_MAX_CREDITS) return "ack: too many moved lists";
            for (size_t i = 0; i < a->n_moved; i++) {
                const Moetune__JobMoved *m = a->moved[i];
                if (m->job_id == 0 || m->n_config_ids == 0 || m->n_config_ids > MAX_LIST) return "ack: bad moved list";
            }
            return NULL;
        }
        case MOETUNE__ENVELOPE__BODY_HEARTBEAT:
            return env->heartbeat->n_job_ids > MAX_LIST ? "heartbeat: too many jobs" : NULL;
        case MOETUNE__ENVELOPE__BODY_JOB: {
            const Moetune__Job *j = env->job;
            if (j->job_id == 0 || !shape_ok(j->shape)) return "job: bad id or shape";
            if (j->n_configs == 0 || j->n_batch_sizes == 0) return "job: no configs or batch sizes";
            for (size_t i = 0; i < j->n_configs; i++)
                if (!j->configs[i]->config_id || !config_ok(j->configs[i]->config)) return "job: bad config";
            for (size_t i = 0; i < j->n_batch_sizes; i++)
                if (j->batch_sizes[i] == 0) return "job: batch size 0";
            if (!j->measure) return "job: no measurement settings";
            if (!(j->measure->race_margin > -1e9 && j->measure->race_margin < 1e9)) return "job: bad race margin";
            if (j->rounds > WIRE_MAX_ROUNDS) return "job: too many rounds";
            if (j->n_best_us && j->n_best_us != j->n_batch_sizes) return "job: best_us not one per batch size";
            for (size_t i = 0; i < j->n_best_us; i++)
                if (!(j->best_us[i] >= 0 && j->best_us[i] < 1e12)) return "job: negative or non-finite best_us";
            return NULL;
        }
        case MOETUNE__ENVELOPE__BODY_SUBMIT: {
            const Moetune__SweepSpec *s = env->submit->spec;
            if (!s) return "submit: no spec";
            if (!str_ok(s->name) || !str_ok(s->strategy) || !str_ok(s->device_filter)) return "submit: string too long";
            if (s->n_shapes > 4096 || s->n_batch_sizes > 4096) return "submit: too many shapes or batch sizes";
            return NULL; /* the planner checks the spec's meaning and answers with reasons */
        }
        case MOETUNE__ENVELOPE__BODY_ERROR:
            return str_ok(env->error->message) ? NULL : "error: message too long";
        default:
            return NULL;
    }
}

/* wire_unpack; with rej, an invalid Result's job, token and seq go into it. */
static int unpack(const uint8_t *buf, size_t len, size_t max_bytes, wire_env_t **out, int *code, char *err,
                  size_t errlen, wire_reject_t *rej) {
    int c = 0;
    wire_env_t *env = NULL;
    *out = NULL;
    if (len > max_bytes) {
        c = WIRE_E_TOO_LARGE;
        mt_fmt(err, errlen, "message of %zu bytes is over the %zu-byte limit", len, max_bytes);
        goto fail;
    }
    env = moetune__envelope__unpack(NULL, len, buf);
    if (!env) {
        c = WIRE_E_DECODE;
        mt_fmt(err, errlen, "%zu bytes do not decode as an Envelope", len);
        goto fail;
    }
    if (env->protocol_version != WIRE_PROTOCOL_VERSION) {
        c = WIRE_E_VERSION;
        mt_fmt(err, errlen, "protocol version %u, expected %u", env->protocol_version, WIRE_PROTOCOL_VERSION);
        goto fail;
    }
    if (env->body_case == MOETUNE__ENVELOPE__BODY__NOT_SET) {
        c = WIRE_E_BODY;
        mt_fmt(err, errlen, "envelope has no body");
        goto fail;
    }
    const char *why = validate(env);
    if (why) {
        c = WIRE_E_INVALID;
        mt_fmt(err, errlen, "%s", why);
        if (rej) rej->body = env->body_case;
        if (rej && env->body_case == MOETUNE__ENVELOPE__BODY_RESULT) {
            rej->job_id = env->result->job_id;
            rej->lease_token = env->result->lease_token;
            rej->seq = env->result->seq;
        }
        goto fail;
    }
    *out = env;
    return MT_OK;
fail:
    wire_free(&env);
    if (code) *code = c;
    return MT_INVAL;
}

mt_status_t wire_unpack(const uint8_t *buf, size_t len, size_t max_bytes, wire_env_t **out, int *code, char *err,
                        size_t errlen) {
    return unpack(buf, len, max_bytes, out, code, err, errlen, NULL);
}

mt_status_t wire_send(void *sock, const void *id, size_t id_len, wire_env_t *env, int flags, char *err, size_t errlen) {
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = wire_pack(env, &buf, &len);
    if (rc) return rc;
    if (id && zmq_send(sock, id, id_len, flags | ZMQ_SNDMORE) < 0) goto zerr;
    if (zmq_send(sock, buf, len, flags) < 0) goto zerr;
    free(buf);
    return MT_OK;
zerr:
    rc = (zmq_errno() == EAGAIN) ? MT_AGAIN : MT_ERR;
    if (err) mt_fmt(err, errlen, "send: %s", zmq_strerror(zmq_errno()));
    free(buf);
    return rc;
}

/* Reads and discards the remaining frames of a multi-part message. */
static void drain(void *sock) {
    int more = 1;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

static bool has_more(void *sock) {
    int more = 0;
    size_t sz = sizeof more;
    return zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more;
}

mt_status_t wire_recv(void *sock, bool router, uint8_t *id, size_t *id_len, size_t max_bytes, int flags,
                      wire_env_t **out, wire_reject_t *rej) {
    zmq_msg_t m;
    int rc;
    *out = NULL;
    if (id_len) *id_len = 0;
    memset(rej, 0, sizeof *rej);
    if (router) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, flags) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&m);
            return e == EAGAIN ? MT_AGAIN : MT_ERR;
        }
        size_t n = zmq_msg_size(&m);
        if (n > WIRE_MAX_ID) n = WIRE_MAX_ID;
        memcpy(id, zmq_msg_data(&m), n);
        *id_len = n;
        zmq_msg_close(&m);
        if (!has_more(sock)) {
            rej->code = WIRE_E_DECODE;
            mt_fmt(rej->reason, sizeof rej->reason, "empty message");
            return MT_INVAL;
        }
        flags = 0; /* the rest of a message is already here */
    }
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, flags) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&m);
        return e == EAGAIN ? MT_AGAIN : MT_ERR;
    }
    if (has_more(sock)) {
        drain(sock);
        zmq_msg_close(&m);
        rej->code = WIRE_E_DECODE;
        mt_fmt(rej->reason, sizeof rej->reason, "message has more than one payload frame");
        return MT_INVAL;
    }
    rc = unpack(zmq_msg_data(&m), zmq_msg_size(&m), max_bytes, out, &rej->code, rej->reason, sizeof rej->reason, rej);
    zmq_msg_close(&m);
    return rc;
}

void wire_send_error(void *sock, const void *id, size_t id_len, int code, const char *message) {
    wire_env_t env;
    Moetune__Error e = MOETUNE__ERROR__INIT;
    e.code = code;
    e.message = (char *)message;
    wire_env_wrap(&env, &e.base);
    wire_send(sock, id, id_len, &env, ZMQ_DONTWAIT, NULL, 0);
}
