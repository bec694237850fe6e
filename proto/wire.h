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
#define WIRE_MAX_ID 256          /* longest routing id (worker id) accepted */
#define WIRE_MAX_LATENCY_US 1e12 /* a latency at or over this (or not finite) is invalid */

/* Most credits a worker may hold: the most a Ready may carry, a worker may be started with
 * and the coordinator counts for one worker. */
#define WIRE_MAX_CREDITS 1024u

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

/* Result of wire_recv on a message that arrived but did not validate. */
typedef struct {
    int code; /* WIRE_E_* */
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
