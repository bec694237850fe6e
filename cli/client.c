/* client.c - control-socket client (see client.h). */
#include "client.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "mt.h"

struct cli_client {
    void *ctx;
    void *sock;
    char endpoint[256];
    int timeout_ms;
    bool curve;
    sec_cert_t self, server;
};

static int open_socket(cli_client_t *c, char *err, size_t errlen) {
    int linger = 0;
    c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!c->sock) {
        mt_fmt(err, errlen, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        return MT_ERR;
    }
    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (c->curve && sec_client_apply(c->sock, &c->self, &c->server, err, errlen) != MT_OK) {
        zmq_close(c->sock);
        c->sock = NULL;
        return MT_ERR;
    }
    if (zmq_connect(c->sock, c->endpoint) != 0) {
        mt_fmt(err, errlen, "cannot connect to %s: %s", c->endpoint, zmq_strerror(zmq_errno()));
        zmq_close(c->sock);
        c->sock = NULL;
        return MT_ERR;
    }
    return MT_OK;
}

static void no_answer(const cli_client_t *c, char *err, size_t errlen) {
    if (c->curve)
        mt_fmt(err, errlen,
               "no coordinator answering at %s (CURVE is on: authentication may have failed; "
               "check --curve-secret, --curve-server and the coordinator's allow-list)",
               c->endpoint);
    else
        mt_fmt(err, errlen, "no coordinator answering at %s", c->endpoint);
}

mt_status_t cli_client_new(const char *endpoint, int timeout_ms, cli_client_t **out, char *err, size_t errlen) {
    return cli_client_new_curve(endpoint, timeout_ms, NULL, NULL, out, err, errlen);
}

mt_status_t cli_client_new_curve(const char *endpoint, int timeout_ms, const sec_cert_t *self, const sec_cert_t *server,
                                 cli_client_t **out, char *err, size_t errlen) {
    int rc = MT_OK;
    cli_client_t *c = mt_calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return MT_NOMEM;
    if (self || server) {
        if (!self || !self->has_secret || !server) {
            mt_fmt(err, errlen, "CURVE needs the client's key pair and the coordinator's public key");
            rc = MT_INVAL;
            goto out;
        }
        c->self = *self;
        c->server = *server;
        c->curve = true;
    }
    if (!endpoint || !*endpoint || strlen(endpoint) >= sizeof c->endpoint) {
        mt_fmt(err, errlen, "bad control endpoint '%s'", endpoint ? endpoint : "");
        rc = MT_INVAL;
        goto out;
    }
    snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : CLI_CLIENT_DEFAULT_TIMEOUT_MS;
    c->ctx = zmq_ctx_new();
    if (!c->ctx) {
        mt_fmt(err, errlen, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        rc = MT_ERR;
        goto out;
    }
    rc = open_socket(c, err, errlen);
    if (rc != MT_OK) goto out;
    *out = c;
    c = NULL;
out:
    cli_client_destroy(&c);
    return rc;
}

void cli_client_set_timeout(cli_client_t *c, int timeout_ms) {
    if (c && timeout_ms > 0) c->timeout_ms = timeout_ms;
}

mt_status_t cli_client_call(cli_client_t *c, ProtobufCMessage *body, wire_body_t expect, wire_env_t **reply,
                            int *error_code, char *err, size_t errlen) {
    *reply = NULL;
    if (error_code) *error_code = 0;
    if (!c->sock && open_socket(c, err, errlen) != MT_OK) return MT_ERR;
    wire_env_t req;
    wire_env_wrap(&req, body);
    char why[256];
    int rc = wire_send(c->sock, NULL, 0, &req, ZMQ_DONTWAIT, why, sizeof why);
    if (rc == MT_AGAIN) {
        no_answer(c, err, errlen);
        return MT_AGAIN;
    }
    if (rc != MT_OK) {
        mt_fmt(err, errlen, "send to %s: %s", c->endpoint, why);
        return MT_ERR;
    }
    uint64_t deadline = mt_now_ms() + (uint64_t)c->timeout_ms;
    for (;;) {
        uint64_t now = mt_now_ms();
        if (now >= deadline) break;
        zmq_pollitem_t item = {c->sock, 0, ZMQ_POLLIN, 0};
        int n = zmq_poll(&item, 1, (long)(deadline - now));
        if (n < 0) {
            if (zmq_errno() == EINTR) {
                if (mt_stop_requested) {
                    mt_fmt(err, errlen, "interrupted");
                    return MT_ERR;
                }
                continue;
            }
            mt_fmt(err, errlen, "poll: %s", zmq_strerror(zmq_errno()));
            return MT_ERR;
        }
        if (n == 0) continue;
        wire_env_t *env = NULL;
        wire_reject_t rej;
        rc = wire_recv(c->sock, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, ZMQ_DONTWAIT, &env, &rej);
        if (rc == MT_AGAIN) continue;
        if (rc == MT_INVAL) {
            mt_fmt(err, errlen, "bad reply from %s: %s", c->endpoint, rej.reason);
            return MT_ERR;
        }
        if (rc != MT_OK) {
            mt_fmt(err, errlen, "receive from %s: %s", c->endpoint, zmq_strerror(zmq_errno()));
            return MT_ERR;
        }
        if (env->body_case == MOETUNE__ENVELOPE__BODY_ERROR) {
            const Moetune__Error *e = env->error;
            if (error_code) *error_code = e ? e->code : 0;
            mt_fmt(err, errlen, "coordinator: %s", e && e->message && *e->message ? e->message : "error");
            wire_free(&env);
            return MT_ERR;
        }
        if (env->body_case != expect) {
            mt_fmt(err, errlen, "unexpected reply '%s' from %s", wire_body_name(env->body_case), c->endpoint);
            wire_free(&env);
            return MT_ERR;
        }
        *reply = env;
        return MT_OK;
    }
    zmq_close(c->sock);
    c->sock = NULL;
    no_answer(c, err, errlen);
    return MT_AGAIN;
}

void cli_client_destroy(cli_client_t **cp) {
    if (!cp || !*cp) return;
    cli_client_t *c = *cp;
    if (c->sock) zmq_close(c->sock);
    if (c->ctx) zmq_ctx_term(c->ctx);
    free(c);
    *cp = NULL;
}

mt_status_t cli_client_status(cli_client_t *c, uint64_t sweep, wire_env_t **reply, char *err, size_t errlen) {
    Moetune__StatusRequest sr = MOETUNE__STATUS_REQUEST__INIT;
    sr.sweep_id = sweep;
    return cli_client_call(c, &sr.base, MOETUNE__ENVELOPE__BODY_STATUS_REPLY, reply, NULL, err, errlen);
}

mt_status_t cli_client_submit(cli_client_t *c, const Moetune__SweepSpec *spec, wire_env_t **reply, int *error_code,
                              char *err, size_t errlen) {
    Moetune__Submit sub = MOETUNE__SUBMIT__INIT;
    sub.spec = (Moetune__SweepSpec *)spec;
    return cli_client_call(c, &sub.base, MOETUNE__ENVELOPE__BODY_SUBMITTED, reply, error_code, err, errlen);
}

mt_status_t cli_client_cancel(cli_client_t *c, uint64_t sweep, wire_env_t **reply, char *err, size_t errlen) {
    Moetune__Cancel cn = MOETUNE__CANCEL__INIT;
    cn.sweep_id = sweep;
    return cli_client_call(c, &cn.base, MOETUNE__ENVELOPE__BODY_CANCELLED, reply, NULL, err, errlen);
}
