/* mt_forge.c - a hostile worker for the integration tests: connects as a DEALER with
 * its own worker id, says Hello, never asks for work, and sends the Results given on
 * the command line (every batch size measured at 1.0 us, status ok), then waits for
 * their Acks. The coordinator must reject them all.
 *
 *   mt_forge ENDPOINT WORKER_ID BATCH_SIZES JOB:TOKEN:CONFIG...
 *
 * prints "acked N of M" and exits 0 when every Result was acknowledged, 1 otherwise.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "mt.h"
#include "wire.h"

#define MAX_RESULTS 64

/* Waits up to timeout_ms for one message of body want; NULL on timeout. */
static wire_env_t *wait_for(void *s, wire_body_t want, int timeout_ms) {
    uint64_t end = mt_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = mt_now_ms();
        if (now >= end) return NULL;
        zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, (long)(end - now)) <= 0) continue;
        wire_env_t *env = NULL;
        wire_reject_t rej;
        if (wire_recv(s, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, 0, &env, &rej) != MT_OK) continue;
        if (env->body_case == want) return env;
        wire_free(&env);
    }
}

int main(int argc, char **argv) {
    if (argc < 5 || argc - 4 > MAX_RESULTS) {
        fprintf(stderr, "usage: mt_forge ENDPOINT WORKER_ID BATCH_SIZES JOB:TOKEN:CONFIG...\n");
        return MT_EXIT_USAGE;
    }
    char err[256];
    uint32_t *bs = NULL;
    size_t nb = 0;
    if (mt_parse_u32_list(argv[3], 1, 1u << 20, &bs, &nb, err, sizeof err) != MT_OK || nb == 0) {
        fprintf(stderr, "mt_forge: bad BATCH_SIZES: %s\n", err);
        return MT_EXIT_USAGE;
    }
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 1000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, argv[2], strlen(argv[2]));
    if (zmq_connect(s, argv[1]) != 0) {
        fprintf(stderr, "mt_forge: connect %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
        return MT_EXIT_FAIL;
    }
    Moetune__Gpu gpu = MOETUNE__GPU__INIT;
    Moetune__Hello hello = MOETUNE__HELLO__INIT;
    gpu.name = "forge";
    gpu.uuid = argv[2];
    hello.worker_id = argv[2];
    hello.host = "forge";
    hello.pid = (uint32_t)getpid();
    hello.backend = "sim";
    hello.compiler = "sim";
    hello.gpu = &gpu;
    wire_env_t env;
    wire_env_wrap(&env, &hello.base);
    if (wire_send(s, NULL, 0, &env, 0, err, sizeof err) != MT_OK) {
        fprintf(stderr, "mt_forge: hello: %s\n", err);
        return MT_EXIT_FAIL;
    }
    wire_env_t *in = wait_for(s, MOETUNE__ENVELOPE__BODY_WELCOME, 5000);
    if (!in) {
        fprintf(stderr, "mt_forge: no welcome\n");
        return MT_EXIT_FAIL;
    }
    wire_free(&in);
    Moetune__Measurement *m = calloc(nb, sizeof *m);
    Moetune__Measurement **pm = calloc(nb, sizeof *pm);
    if (!m || !pm) return MT_EXIT_FAIL;
    for (size_t i = 0; i < nb; i++) {
        moetune__measurement__init(&m[i]);
        m[i].batch_size = bs[i];
        m[i].status = MOETUNE__STATUS__STATUS_OK;
        m[i].median_us = m[i].min_us = m[i].mean_us = 1.0;
        m[i].samples = 1;
        pm[i] = &m[i];
    }
    int n = argc - 4;
    bool acked[MAX_RESULTS] = {false};
    for (int i = 0; i < n; i++) {
        uint64_t job = 0, token = 0, config = 0;
        if (sscanf(argv[4 + i], "%" SCNu64 ":%" SCNu64 ":%" SCNu64, &job, &token, &config) != 3) {
            fprintf(stderr, "mt_forge: bad result spec '%s'\n", argv[4 + i]);
            return MT_EXIT_USAGE;
        }
        Moetune__Result r = MOETUNE__RESULT__INIT;
        r.job_id = job;
        r.lease_token = token;
        r.seq = (uint64_t)i + 1;
        r.config_id = config;
        r.n_measurements = nb;
        r.measurements = pm;
        wire_env_wrap(&env, &r.base);
        if (wire_send(s, NULL, 0, &env, 0, err, sizeof err) != MT_OK) {
            fprintf(stderr, "mt_forge: result: %s\n", err);
            return MT_EXIT_FAIL;
        }
    }
    int got = 0;
    while (got < n && (in = wait_for(s, MOETUNE__ENVELOPE__BODY_ACK, 5000)) != NULL) {
        for (size_t k = 0; k < in->ack->n_seqs; k++) {
            uint64_t q = in->ack->seqs[k];
            if (q >= 1 && q <= (uint64_t)n && !acked[q - 1]) {
                acked[q - 1] = true;
                got++;
            }
        }
        wire_free(&in);
    }
    printf("acked %d of %d\n", got, n);
    free(m);
    free(pm);
    free(bs);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return got == n ? MT_EXIT_OK : MT_EXIT_FAIL;
}
