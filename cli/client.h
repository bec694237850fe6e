/*
 * client.h - the CLI's control-socket client: one DEALER socket, request → reply with
 * a timeout (proto/PROTOCOL.md, "Control session").
 */
#ifndef CLI_CLIENT_H
#define CLI_CLIENT_H

#include <stddef.h>

#include "mt.h"
#include "secure.h"
#include "wire.h"

typedef struct cli_client cli_client_t;

#define CLI_CLIENT_DEFAULT_TIMEOUT_MS 5000

/* Connects to the coordinator's control endpoint (connecting never blocks; whether a
 * coordinator answers shows on the first call). Returns MT_OK with *out set (free
 * with cli_client_destroy), MT_ERR with zmq's text in err. */
mt_status_t cli_client_new(const char *endpoint, int timeout_ms, cli_client_t **out, char *err, size_t errlen);

/* Sends body (a request message, wrapped in an Envelope here) and waits up to the timeout
 * for the reply whose body is expect. Returns
 * MT_OK with *reply owned by the caller (wire_free); MT_AGAIN "no coordinator
 * answering at EP" on timeout (the socket is then replaced, so a late reply cannot be
 * taken for the next one); MT_ERR with the coordinator's Error text (code in
 * *error_code when not NULL) or a protocol problem in err. */
mt_status_t cli_client_call(cli_client_t *c, ProtobufCMessage *body, wire_body_t expect, wire_env_t **reply,
                            int *error_code, char *err, size_t errlen);

/* Asks for the status of one sweep (0 = all); *reply is a StatusReply envelope the caller
 * frees with wire_free(). Errors as cli_client_call. */
mt_status_t cli_client_status(cli_client_t *c, uint64_t sweep, wire_env_t **reply, char *err, size_t errlen);

/* Submits spec (not copied; it must outlive the call); *reply is a Submitted envelope the
 * caller frees with wire_free(). Errors as cli_client_call (WIRE_E_SPEC in *error_code:
 * the coordinator refused the spec). */
mt_status_t cli_client_submit(cli_client_t *c, const Moetune__SweepSpec *spec, wire_env_t **reply, int *error_code,
                              char *err, size_t errlen);

/* Cancels sweep; *reply is a Cancelled envelope the caller frees with wire_free(). Errors
 * as cli_client_call. */
mt_status_t cli_client_cancel(cli_client_t *c, uint64_t sweep, wire_env_t **reply, char *err, size_t errlen);

/* As cli_client_new, as a CURVE client with key pair self of the coordinator whose
 * public key is server (both copied). A timeout then says that authentication may
 * have failed. MT_INVAL when a key is missing. */
mt_status_t cli_client_new_curve(const char *endpoint, int timeout_ms, const sec_cert_t *self, const sec_cert_t *server,
                                 cli_client_t **out, char *err, size_t errlen);

/* Sets the reply timeout of the calls that follow (ms > 0). */
void cli_client_set_timeout(cli_client_t *c, int timeout_ms);

/* Closes the socket and context, nulls *c. NULL-safe. */
void cli_client_destroy(cli_client_t **c);

#endif
