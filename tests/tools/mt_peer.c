/* mt_peer.c - a scriptable worker for the integration tests: one DEALER that speaks the wire
 * protocol the way a test needs, well-behaved or not.
 *
 *   mt_peer ENDPOINT ID [key=value...]
 *
 *   gpu=NAME        its GPU name (default "NVIDIA H200")
 *   backend=B       compiler=C  hash=H  versions=V  host=H  pid=N   (defaults sim, sim, peer, "", peer, getpid())
 *   credits=N       Ready credits sent once after the Welcome (default 0: never asks for work)
 *   mode=M          what it does with a Job:
 *                   hold    keeps it and sends heartbeats only (the default)
 *                   claim   keeps it; its heartbeats claim it measures the job's first config, forever
 *                   bad     answers the job's first config with an impossible measurement (bad=KIND),
 *                           then keeps it
 *                   answer  answers every config at once (ok, about 10 us) and asks for the next job
 *   bad=KIND        samples0 (ok with 0 samples), minmed (min above the median), stddev (1e11),
 *                   tiny (median 1e-9 us), manysamples (4,000,000,000 samples)
 *   hello2=GPU      after its first job, says Hello again from the same process with this GPU name
 *   seconds=S       runs this long (default 10)
 *
 * Prints one line per event ("welcome", "job ID CONFIGS", "refused: WHY", "error CODE: WHY") and
 * a last line "jobs N results N acked N". Exits 3 when its Hello was refused, 0 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "mt.h"
#include "wire.h"

typedef struct {
    const char *ep, *id, *gpu, *backend, *compiler, *hash, *versions, *host, *mode, *bad, *hello2;
    uint32_t pid, credits, seconds;
} peer_opts_t;

typedef struct {
    peer_opts_t o;
    void *sock;
    uint32_t heartbeat_ms;
    uint64_t seq, jobs, results, acked;
    uint64_t held_job, held_cfg; /* the first job kept (hold, claim, bad) and its first config */
    int welcomed, refused, said_hello2;
} peer_t;

static void send_env(peer_t *p, wire_env_t *env) {
    char err[128];
    if (wire_send(p->sock, NULL, 0, env, ZMQ_DONTWAIT, err, sizeof err) != MT_OK) fprintf(stderr, "mt_peer: %s\n", err);
}

static void send_hello(peer_t *p, const char *gpu_name) {
    wire_env_t env;
    Moetune__Gpu gpu = MOETUNE__GPU__INIT;
    Moetune__Hello h = MOETUNE__HELLO__INIT;
    gpu.name = (char *)gpu_name;
    gpu.uuid = (char *)p->o.id;
    h.worker_id = (char *)p->o.id;
    h.host = (char *)p->o.host;
    h.pid = p->o.pid;
    h.backend = (char *)p->o.backend;
    h.gpu = &gpu;
    h.compiler = (char *)p->o.compiler;
    h.kernel_hash = (char *)p->o.hash;
    h.versions = (char *)p->o.versions;
    wire_env_wrap(&env, &h.base);
    send_env(p, &env);
}

static void send_ready(peer_t *p, uint32_t credits) {
    wire_env_t env;
    Moetune__Ready r = MOETUNE__READY__INIT;
    r.credits = credits;
    wire_env_wrap(&env, &r.base);
    send_env(p, &env);
}

static void send_heartbeat(peer_t *p) {
    wire_env_t env;
    Moetune__Heartbeat hb = MOETUNE__HEARTBEAT__INIT;
    hb.sent_ms = mt_now_ms();
    if (p->held_job) {
        hb.n_job_ids = 1;
        hb.job_ids = &p->held_job;
    }
    if (strcmp(p->o.mode, "claim") == 0) {
        hb.measuring_job = p->held_job;
        hb.measuring_config = p->held_cfg;
    }
    wire_env_wrap(&env, &hb.base);
    send_env(p, &env);
}

/* A measurement of batch size bs: ok and plausible, or the impossible kind asked for. */
static void fill(Moetune__Measurement *m, uint32_t bs, const char *bad) {
    moetune__measurement__init(m);
    m->batch_size = bs;
    m->status = MOETUNE__STATUS__STATUS_OK;
    m->median_us = 10.0;
    m->min_us = 9.9;
    m->mean_us = 10.1;
    m->stddev_us = 0.05;
    m->samples = 10;
    if (!bad) return;
    if (strcmp(bad, "samples0") == 0) m->samples = 0;
    if (strcmp(bad, "minmed") == 0) m->min_us = 20.0;
    if (strcmp(bad, "stddev") == 0) m->stddev_us = 1e11;
    if (strcmp(bad, "tiny") == 0) m->median_us = m->min_us = m->mean_us = 1e-9;
    if (strcmp(bad, "manysamples") == 0) m->samples = 4000000000u;
}

static void send_result(peer_t *p, const Moetune__Job *j, size_t ci, const char *bad) {
    size_t nb = j->n_batch_sizes;
    Moetune__Measurement *ms = calloc(nb, sizeof *ms);
    Moetune__Measurement **pm = calloc(nb, sizeof *pm);
    if (!ms || !pm) abort();
    for (size_t b = 0; b < nb; b++) {
        fill(&ms[b], j->batch_sizes[b], bad);
        pm[b] = &ms[b];
    }
    Moetune__Result r = MOETUNE__RESULT__INIT;
    r.job_id = j->job_id;
    r.lease_token = j->lease_token;
    r.seq = ++p->seq;
    r.config_id = j->configs[ci]->config_id;
    r.n_measurements = nb;
    r.measurements = pm;
    wire_env_t env;
    wire_env_wrap(&env, &r.base);
    send_env(p, &env);
    p->results++;
    free(pm);
    free(ms);
}

static void on_job(peer_t *p, const Moetune__Job *j) {
    p->jobs++;
    printf("job %llu %zu\n", (unsigned long long)j->job_id, j->n_configs);
    if (strcmp(p->o.mode, "answer") == 0) {
        for (size_t i = 0; i < j->n_configs; i++) send_result(p, j, i, NULL);
        send_ready(p, 1);
        return;
    }
    if (!p->held_job) {
        p->held_job = j->job_id;
        p->held_cfg = j->configs[0]->config_id;
    }
    if (strcmp(p->o.mode, "bad") == 0) send_result(p, j, 0, p->o.bad ? p->o.bad : "samples0");
    if (p->o.hello2 && !p->said_hello2) {
        p->said_hello2 = 1;
        p->welcomed = 0;
        send_hello(p, p->o.hello2);
    }
}

static void on_message(peer_t *p, const wire_env_t *env) {
    switch (env->body_case) {
        case MOETUNE__ENVELOPE__BODY_WELCOME:
            printf("welcome\n");
            if (env->welcome->heartbeat_ms) p->heartbeat_ms = env->welcome->heartbeat_ms;
            if (!p->welcomed && !p->said_hello2 && p->o.credits) send_ready(p, p->o.credits);
            p->welcomed = 1;
            break;
        case MOETUNE__ENVELOPE__BODY_JOB:
            on_job(p, env->job);
            break;
        case MOETUNE__ENVELOPE__BODY_ACK:
            p->acked += env->ack->n_seqs;
            break;
        case MOETUNE__ENVELOPE__BODY_ERROR:
            if (env->error->code == WIRE_E_REFUSED) {
                printf("refused: %s\n", env->error->message ? env->error->message : "");
                p->refused = 1;
            } else {
                printf("error %d: %s\n", env->error->code, env->error->message ? env->error->message : "");
            }
            break;
        default:
            break;
    }
    fflush(stdout);
}

/* Reads key=value into o; MT_INVAL for an unknown key or a bad number. */
static int set_opt(peer_opts_t *o, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq) return MT_INVAL;
    size_t n = (size_t)(eq - kv);
    const char *v = eq + 1;
    static const struct {
        const char *key;
        size_t off;
    } strs[] = {
        {"gpu", offsetof(peer_opts_t, gpu)},           {"backend", offsetof(peer_opts_t, backend)},
        {"compiler", offsetof(peer_opts_t, compiler)}, {"hash", offsetof(peer_opts_t, hash)},
        {"versions", offsetof(peer_opts_t, versions)}, {"host", offsetof(peer_opts_t, host)},
        {"mode", offsetof(peer_opts_t, mode)},         {"bad", offsetof(peer_opts_t, bad)},
        {"hello2", offsetof(peer_opts_t, hello2)},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        if (strlen(strs[i].key) != n || strncmp(kv, strs[i].key, n) != 0) continue;
        *(const char **)((char *)o + strs[i].off) = v;
        return MT_OK;
    }
    if (n == 3 && strncmp(kv, "pid", 3) == 0) return mt_parse_u32(v, 0, UINT32_MAX, &o->pid);
    if (n == 7 && strncmp(kv, "credits", 7) == 0) return mt_parse_u32(v, 0, WIRE_MAX_CREDITS, &o->credits);
    if (n == 7 && strncmp(kv, "seconds", 7) == 0) return mt_parse_u32(v, 1, 3600, &o->seconds);
    return MT_INVAL;
}

int main(int argc, char **argv) {
    peer_t p;
    memset(&p, 0, sizeof p);
    p.o = (peer_opts_t){.gpu = "NVIDIA H200",
                        .backend = "sim",
                        .compiler = "sim",
                        .hash = "peer",
                        .versions = "",
                        .host = "peer",
                        .mode = "hold",
                        .pid = (uint32_t)getpid(),
                        .seconds = 10};
    if (argc < 3) {
        fprintf(stderr, "usage: mt_peer ENDPOINT ID [key=value...]\n");
        return MT_EXIT_USAGE;
    }
    p.o.ep = argv[1];
    p.o.id = argv[2];
    for (int i = 3; i < argc; i++) {
        if (set_opt(&p.o, argv[i]) != MT_OK) {
            fprintf(stderr, "mt_peer: bad option '%s'\n", argv[i]);
            return MT_EXIT_USAGE;
        }
    }
    p.heartbeat_ms = WIRE_HEARTBEAT_DEFAULT_MS;
    void *ctx = zmq_ctx_new();
    p.sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 500;
    zmq_setsockopt(p.sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(p.sock, ZMQ_ROUTING_ID, p.o.id, strlen(p.o.id));
    if (zmq_connect(p.sock, p.o.ep) != 0) {
        fprintf(stderr, "mt_peer: connect %s: %s\n", p.o.ep, zmq_strerror(zmq_errno()));
        return MT_EXIT_FAIL;
    }
    send_hello(&p, p.o.gpu);
    uint64_t end = mt_now_ms() + 1000ull * p.o.seconds, next_hb = 0;
    while (!p.refused) {
        uint64_t now = mt_now_ms();
        if (now >= end) break;
        if (p.welcomed && now >= next_hb) {
            send_heartbeat(&p);
            next_hb = now + p.heartbeat_ms;
        }
        zmq_pollitem_t it = {p.sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20) <= 0) continue;
        wire_env_t *env = NULL;
        wire_reject_t rej;
        while (wire_recv(p.sock, false, NULL, NULL, WIRE_DEFAULT_MAX_BYTES, ZMQ_DONTWAIT, &env, &rej) == MT_OK) {
            on_message(&p, env);
            wire_free(&env);
        }
    }
    printf("jobs %llu results %llu acked %llu\n", (unsigned long long)p.jobs, (unsigned long long)p.results,
           (unsigned long long)p.acked);
    zmq_close(p.sock);
    zmq_ctx_term(ctx);
    return p.refused ? 3 : MT_EXIT_OK;
}
