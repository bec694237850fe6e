/*
 * wire.h - framing, size checks, encoding, decoding and validation of the
 * moetune Envelope (proto/moetune.proto) over ZeroMQ sockets.
 *
 * Ownership: an Envelope returned by wire_unpack()/wire_recv() belongs to the
 * caller and is released with wire_free(). Buffers from wire_pack() are malloc'ed
 * and freed by the caller with free(). Envelopes passed to wire_send() are only read.
 */
#ifndef WIRE_H
#define WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moetune.pb-c.h"
#include "mt.h"

#define WIRE_PROTOCOL_VERSION 1u
#define WIRE_DEFAULT_MAX_BYTES (4u * 1024u * 1024u)
#define WIRE_MAX_ID 255          /* longest routing id (worker id) accepted: ZeroMQ's limit */
#define WIRE_MAX_LATENCY_US 1e12 /* a latency at or over this (or not finite) is invalid */
#define WIRE_MAX_GPU_NAME 96     /* longest GPU name a Hello may carry (it becomes part of a file name) */
#define WIRE_MAX_DETAIL 512      /* longest Measurement.detail */
/* The range an ok or pruned median may take: no fused MoE layer runs in under half a
 * microsecond, and none that a sweep keeps takes 1000 s. */
#define WIRE_MIN_MEDIAN_US 0.5
#define WIRE_MAX_MEDIAN_US 1e9
/* Most samples one measurement may pool: the spec's max_samples (at most 1,000,000) times
 * the rounds of a side-by-side job. */
#define WIRE_MAX_SAMPLES (1000000u * 16u)

/* Most credits a worker may hold: the most a Ready may carry, a worker may be started with
 * and the coordinator counts for one worker. */
#define WIRE_MAX_CREDITS 1024u
/* Most jobs the coordinator leases to one worker at once: a worker measures one config at a
 * time and compiles the next job's ahead, so a third job would only wait (and hoard work). */
#define WIRE_MAX_HELD 2u

/* Job.rounds: a side-by-side job measures its configs in turn this many times, so that a
 * GPU state that lasts a few hundred ms (a clock or power limit, a slow phase of one config)
 * lands on every config alike instead of on whichever config it happens to overlap. */
#define WIRE_MAX_ROUNDS 16u
#define WIRE_SIDE_BY_SIDE_ROUNDS 5u

/* Heartbeat and lease periods a coordinator may set and a worker accepts in a Welcome. */
#define WIRE_HEARTBEAT_MIN_MS 10u
#define WIRE_HEARTBEAT_MAX_MS 600000u
#define WIRE_LEASE_MIN_MS 10u
#define WIRE_LEASE_MAX_MS 86400000u
/* The periods when none is given (coordinator options, a worker before its Welcome). */
#define WIRE_HEARTBEAT_DEFAULT_MS 1000u
#define WIRE_LEASE_DEFAULT_MS 30000u

typedef Moetune__Envelope wire_env_t;
typedef Moetune__Envelope__BodyCase wire_body_t;

/* Who sent a message; decides which bodies are allowed (wire_allowed). */
typedef enum { WIRE_FROM_WORKER, WIRE_FROM_COORDINATOR, WIRE_FROM_CLIENT } wire_role_t;

/* Error codes carried in Error.code. */
enum {
    WIRE_E_DECODE = 1,    /* bytes did not decode as an Envelope */
    WIRE_E_TOO_LARGE = 2, /* message over the size limit */
    WIRE_E_VERSION = 3,   /* unknown protocol_version */
    WIRE_E_BODY = 4,      /* a body this peer may not send, or none */
    WIRE_E_INVALID = 5,   /* decoded but a field is out of range */
    WIRE_E_LEASE = 6,     /* result for an unknown job or with a wrong lease token */
    WIRE_E_SPEC = 7,      /* a sweep spec the coordinator cannot plan */
    WIRE_E_INTERNAL = 8,  /* coordinator-side failure (storage) */
    WIRE_E_NOTFOUND = 9,  /* unknown sweep */
    WIRE_E_HELLO = 10,    /* message from an unknown worker: say Hello first */
    WIRE_E_REFUSED = 11,  /* a Hello refused for good (its id is in use, a name is not data): do not retry */
};

/* Packs env into a new buffer (caller frees *buf). protocol_version is set to
 * WIRE_PROTOCOL_VERSION. Returns MT_OK or MT_NOMEM. */
mt_status_t wire_pack(wire_env_t *env, uint8_t **buf, size_t *len);

/* Decodes len bytes and validates them (size limit, version, a body set, the
 * fields' ranges). On success *out is a new Envelope owned by the caller.
 * On failure returns MT_INVAL, writes a one-line reason into err and, if code is
 * not NULL, the WIRE_E_* code into *code. */
mt_status_t wire_unpack(const uint8_t *buf, size_t len, size_t max_bytes, wire_env_t **out, int *code, char *err,
                        size_t errlen);

/* True when a peer in role may send a message with this body. */
bool wire_allowed(wire_role_t role, wire_body_t body);

/* Human name of a body case ("hello", "result", ...). */
const char *wire_body_name(wire_body_t body);

/* Releases an Envelope from wire_unpack/wire_recv and nulls *env. NULL-safe. */
void wire_free(wire_env_t **env);

/* Sends env on sock as one message: with id (ROUTER socket) the routing frame
 * first. flags are ZeroMQ send flags (ZMQ_DONTWAIT). Returns MT_OK, MT_AGAIN when
 * the socket would block, MT_ERR with zmq_strerror text in err. */
mt_status_t wire_send(void *sock, const void *id, size_t id_len, wire_env_t *env, int flags, char *err, size_t errlen);

/* Why a Hello cannot be accepted, or NULL: every string printable (no control characters),
 * the worker id 1..WIRE_MAX_ID bytes and the GPU name 1..WIRE_MAX_GPU_NAME bytes, neither with
 * a ',' or '=' (the separators of the engines' config file names), the compiler (an export
 * directory name) without '/', '\\', ',' or '=', and no longer than their uses allow (backend
 * 64, compiler 128, kernel hash 128, versions 1024 bytes). Names are never shortened: a Hello that
 * does not fit is refused. The worker checks its own Hello with it before sending. */
const char *wire_hello_invalid(const Moetune__Hello *h);

/* The most bytes a packed Result Envelope with n measurements can take (every field at its
 * largest, a detail of WIRE_MAX_DETAIL bytes): what the coordinator's message limit must
 * allow for a sweep of n batch sizes. */
size_t wire_result_max_bytes(size_t n);

/* Result of wire_recv on a message that arrived but did not validate. */
typedef struct {
    int code;         /* WIRE_E_* */
    wire_body_t body; /* the body it carried, when it decoded; MOETUNE__ENVELOPE__BODY__NOT_SET otherwise */
    char reason[256];
    /* A Result that decoded but did not validate: the lease it claims and its seq
     * (all 0 for anything else), so the job it was for is not left waiting. */
    uint64_t job_id, lease_token, seq;
} wire_reject_t;

/* Receives one message from sock. With router true the first frame is the
 * routing id, copied into id (WIRE_MAX_ID bytes) with its length in *id_len.
 * Returns MT_OK with *out set; MT_AGAIN when nothing is waiting (flags has
 * ZMQ_DONTWAIT); MT_INVAL when a message arrived but is malformed (framing,
 * size, decode, version): *out is NULL, rej says why, and id is still filled
 * when known so the caller can answer with an Error; MT_ERR on a socket error. */
mt_status_t wire_recv(void *sock, bool router, uint8_t *id, size_t *id_len, size_t max_bytes, int flags,
                      wire_env_t **out, wire_reject_t *rej);

/* Sends an Error{code, message} to id on a ROUTER socket (or plain when id is NULL).
 * Best effort: never blocks, failures are ignored. */
void wire_send_error(void *sock, const void *id, size_t id_len, int code, const char *message);

/* Convenience initialisers for nested messages. */
void wire_env_init(wire_env_t *env);

/* Makes env a fresh envelope (wire_env_init) that carries body, one of the Envelope's oneof
 * messages; the body's type picks the case: wire_env_wrap(&env, &result.base). env only points
 * at body, which stays the caller's. A message that is no Envelope body is a programmer error. */
void wire_env_wrap(wire_env_t *env, ProtobufCMessage *body);

#endif
