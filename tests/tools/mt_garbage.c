/* mt_garbage.c - sends hostile input to a coordinator socket, for the integration tests:
 * random single-frame messages, multi-frame junk, empty frames, an oversized message,
 * messages with a wrong protocol version, and bodies the peer may not send.
 *
 *   mt_garbage ENDPOINT COUNT [SEED]     prints "sent N" and exits 0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "mt.h"
#include "wire.h"

static uint64_t g_x = 88172645463325252ULL;
static uint64_t next(void) {
    g_x ^= g_x << 13;
    g_x ^= g_x >> 7;
    g_x ^= g_x << 17;
    return g_x;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: mt_garbage ENDPOINT COUNT [SEED]\n");
        return MT_EXIT_USAGE;
    }
    uint32_t count = 0;
    if (mt_parse_u32(argv[2], 1, 10000000, &count) != MT_OK) {
        fprintf(stderr, "mt_garbage: bad COUNT\n");
        return MT_EXIT_USAGE;
    }
    if (argc > 3) g_x ^= strtoull(argv[3], NULL, 10) * 2654435761ULL;
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 2000, hwm = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (zmq_connect(s, argv[1]) != 0) {
        fprintf(stderr, "mt_garbage: connect %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
        return MT_EXIT_FAIL;
    }
    uint32_t sent = 0;
    uint8_t buf[1024];
    for (uint32_t i = 0; i < count; i++) {
        size_t len = next() % sizeof buf;
        for (size_t j = 0; j < len; j++) buf[j] = (uint8_t)next();
        switch (i % 6) {
            case 0: /* random bytes */
                zmq_send(s, buf, len, 0);
                break;
            case 1: /* multi-frame junk */
                zmq_send(s, buf, len / 2, ZMQ_SNDMORE);
                zmq_send(s, buf + len / 2, len - len / 2, 0);
                break;
            case 2: /* empty frame */
                zmq_send(s, "", 0, 0);
                break;
            case 3: { /* wrong version, valid otherwise */
                wire_env_t env;
                Moetune__Ready r = MOETUNE__READY__INIT;
                wire_env_wrap(&env, &r.base);
                env.protocol_version = 7;
                size_t n = moetune__envelope__get_packed_size(&env);
                uint8_t *p = malloc(n);
                moetune__envelope__pack(&env, p);
                zmq_send(s, p, n, 0);
                free(p);
                break;
            }
            case 4: { /* a body a worker or client may not send (a Job), and a Result with no Hello */
                wire_env_t env;
                Moetune__Ack ack = MOETUNE__ACK__INIT;
                wire_env_wrap(&env, &ack.base);
                wire_send(s, NULL, 0, &env, 0, NULL, 0);
                break;
            }
            default: { /* oversized (5 MiB) once, last: a peer may be dropped for it */
                if (i != count - 1) {
                    zmq_send(s, buf, len, 0);
                    break;
                }
                size_t n = 5u << 20;
                uint8_t *p = calloc(1, n);
                zmq_send(s, p, n, 0);
                free(p);
                break;
            }
        }
        sent++;
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    printf("sent %u\n", sent);
    return 0;
}
