/* mt_loadgen.c - many worker connections from one process, for the load test: N DEALER
 * sockets on one poll loop, each a minimal well-behaved worker (Hello, Ready, a Result per
 * config with made-up measurements as soon as a Job arrives, Heartbeats). It stops when every
 * connection has been idle for IDLE_MS after the first job, or after LIMIT_S seconds, and prints
 * one JSON line: connections, welcomed, served (got at least one job), jobs, results, acked.
 *
 *   mt_loadgen ENDPOINT N [LIMIT_S] [IDLE_MS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "mt.h"
#include "wire.h"

typedef struct {
    void *sock;
    char id[64];
    int welcomed;
    uint32_t heartbeat_ms;
    uint64_t next_hb, seq, jobs, results, acked;
} conn_t;

static void send_env(conn_t *c, wire_env_t *env) {
    char err[128];
    if (wire_send(c->sock, NULL, 0, env, ZMQ_DONTWAIT, err, sizeof err) != MT_OK)
        fprintf(stderr, "mt_loadgen %s: %s\n", c->id, err);
}

static void send_hello(conn_t *c) {
    wire_env_t env;
    Moetune__Gpu gpu = MOETUNE__GPU__INIT;
    Moetune__Hello h = MOETUNE__HELLO__INIT;
    gpu.name = "NVIDIA H200";
    gpu.uuid = c->id;
    h.worker_id = c->id;
    h.host = "loadgen";
    h.pid = 1;
    h.backend = "sim";
    h.gpu = &gpu;
    h.compiler = "sim";
    h.kernel_hash = "loadgen";
    wire_env_wrap(&env, &h.base);
    send_env(c, &env);
}

static void send_ready(conn_t *c) {
    wire_env_t env;
    Moetune__Ready r = MOETUNE__READY__INIT;
    r.credits = 1;
    wire_env_wrap(&env, &r.base);
    send_env(c, &env);
}

static void answer_job(conn_t *c, const Moetune__Job *j) {
    size_t nb = j->n_batch_sizes;
    Moetune__Measurement *ms = calloc(nb, sizeof *ms);
    Moetune__Measurement **pm = calloc(nb, sizeof *pm);
    if (!ms || !pm) abort();
    for (size_t i = 0; i < j->n_configs; i++) {
        for (size_t b = 0; b < nb; b++) {
            moetune__measurement__init(&ms[b]);
            ms[b].batch_size = j->batch_sizes[b];
            ms[b].status = MOETUNE__STATUS__STATUS_OK;
            double us = 10.0 + (double)((j->configs[i]->config_id * 7919 + b * 104729) % 1000) / 10.0;
            ms[b].median_us = us;
            ms[b].min_us = us * 0.99;
            ms[b].mean_us = us * 1.01;
            ms[b].stddev_us = us * 0.005;
            ms[b].samples = 10;
            pm[b] = &ms[b];
        }
        Moetune__Result r = MOETUNE__RESULT__INIT;
        r.job_id = j->job_id;
        r.lease_token = j->lease_token;
        r.seq = ++c->seq;
        r.config_id = j->configs[i]->config_id;
        r.n_measurements = nb;
        r.measurements = pm;
        wire_env_t env;
        wire_env_wrap(&env, &r.base);
        send_env(c, &env);
        c->results++;
    }
    free(pm);
    free(ms);
    c->jobs++;
    send_ready(c);
}

int main(int argc, char **argv) {
    uint32_t n = 0, limit_s = 300, idle_ms = 3000;
    if (argc < 3 || mt_parse_u32(argv[2], 1, 100000, &n) != MT_OK ||
        (argc > 3 && mt_parse_u32(argv[3], 1, 86400, &limit_s) != MT_OK) ||
        (argc > 4 && mt_parse_u32(argv[4], 1, 600000, &idle_ms) != MT_OK)) {
        fprintf(stderr, "usage: mt_loadgen ENDPOINT N [LIMIT_S] [IDLE_MS]\n");
        return MT_EXIT_USAGE;
    }
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, (int)n + 64);
    zmq_ctx_set(ctx, ZMQ_IO_THREADS, 2);
    conn_t *cs = calloc(n, sizeof *cs);
    zmq_pollitem_t *items = calloc(n, sizeof *items);
    if (!cs || !items) return MT_EXIT_FAIL;
    for (uint32_t i = 0; i < n; i++) {
        cs[i].sock = zmq_socket(ctx, ZMQ_DEALER);
        if (!cs[i].sock) {
            fprintf(stderr, "mt_loadgen: socket %u: %s\n", i, zmq_strerror(zmq_errno()));
            return MT_EXIT_FAIL;
        }
        snprintf(cs[i].id, sizeof cs[i].id, "load-%u-%u", (unsigned)getpid(), i);
        int linger = 0, hwm = 0;
        zmq_setsockopt(cs[i].sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(cs[i].sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(cs[i].sock, ZMQ_ROUTING_ID, cs[i].id, strlen(cs[i].id));
        if (zmq_connect(cs[i].sock, argv[1]) != 0) {
            fprintf(stderr, "mt_loadgen: connect: %s\n", zmq_strerror(zmq_errno()));
            return MT_EXIT_FAIL;
        }
        items[i] = (zmq_pollitem_t){cs[i].sock, 0, ZMQ_POLLIN, 0};
        send_hello(&cs[i]);
    }
    uint64_t start = mt_now_ms(), last_job = 0;
    while (mt_now_ms() - start < (uint64_t)limit_s * 1000) {
        if (last_job && mt_now_ms() - last_job > idle_ms) break;
        if (zmq_poll(items, (int)n, 50) < 0) break;
        uint64_t now = mt_now_ms();
        for (uint32_t i = 0; i < n; i++) {
            conn_t *c = &cs[i];
            if (c->welcomed && c->heartbeat_ms && now >= c->next_hb) {
                wire_env_t env;
                Moetune__Heartbeat hb = MOETUNE__HEARTBEAT__INIT;
                hb.sent_ms = now;
                wire_env_wrap(&env, &hb.base);
                send_env(c, &env);
                c->next_hb = now + c->heartbeat_ms;
            }
            if (!(items[i].revents & ZMQ_POLLIN)) continue;
            for (;;) {
                wire_env_t *env = NULL;
                wire_reject_t rej;
                int rc = wire_recv(c->sock, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, ZMQ_DONTWAIT, &env, &rej);
                if (rc == MT_AGAIN || rc == MT_ERR) break;
                if (rc != MT_OK) continue;
                switch (env->body_case) {
                    case MOETUNE__ENVELOPE__BODY_WELCOME:
                        c->welcomed = 1;
                        c->heartbeat_ms = env->welcome->heartbeat_ms;
                        c->next_hb = now + c->heartbeat_ms;
                        send_ready(c);
                        break;
                    case MOETUNE__ENVELOPE__BODY_JOB:
                        answer_job(c, env->job);
                        last_job = mt_now_ms();
                        break;
                    case MOETUNE__ENVELOPE__BODY_ACK:
                        c->acked += env->ack->n_seqs;
                        break;
                    case MOETUNE__ENVELOPE__BODY_ERROR:
                        if (env->error->code == WIRE_E_HELLO) send_hello(c);
                        break;
                    default:
                        break;
                }
                wire_free(&env);
            }
        }
    }
    uint64_t welcomed = 0, served = 0, jobs = 0, results = 0, acked = 0;
    for (uint32_t i = 0; i < n; i++) {
        welcomed += cs[i].welcomed != 0;
        served += cs[i].jobs > 0;
        jobs += cs[i].jobs;
        results += cs[i].results;
        acked += cs[i].acked;
        zmq_close(cs[i].sock);
    }
    printf("{\"connections\":%u,\"welcomed\":%llu,\"served\":%llu,\"jobs\":%llu,\"results\":%llu,\"acked\":%llu,"
           "\"seconds\":%.2f}\n",
           n, (unsigned long long)welcomed, (unsigned long long)served, (unsigned long long)jobs,
           (unsigned long long)results, (unsigned long long)acked, (double)(mt_now_ms() - start) / 1000.0);
    free(items);
    free(cs);
    zmq_ctx_term(ctx);
    return 0;
}
