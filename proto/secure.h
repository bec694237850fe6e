/*
 * secure.h - CURVE security for the coordinator's sockets (off unless configured).
 *
 * Key files are czmq certificates (zcert's ZPL text): NAME.pub holds
 *     curve
 *         public-key = "<40 Z85 characters>"
 * and NAME.key (mode 0600) holds the same plus secret-key = "<40 Z85 characters>".
 *
 * The server side is an authenticator (sec_auth_t): a ZAP handler thread in the
 * sockets' ZeroMQ context that accepts a CURVE client only when its public key is
 * one of the *.pub files of an allow-list directory, and that watches the server
 * sockets for handshakes that fail before ZAP (a peer without CURVE, a wrong server
 * key). Every refusal is logged and counted.
 */
#ifndef PROTO_SECURE_H
#define PROTO_SECURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mt.h"

#define SEC_KEY_BYTES 32
#define SEC_Z85_LEN 40
#define SEC_ZAP_DOMAIN "moetune"

/* A key pair, or only a public key when !has_secret. */
typedef struct {
    uint8_t pub[SEC_KEY_BYTES];
    uint8_t sec[SEC_KEY_BYTES];
    bool has_secret;
} sec_cert_t;

typedef struct sec_auth sec_auth_t;

/* Generates a key pair with libzmq (libsodium) and writes DIR/NAME.key (mode
 * 0600) and DIR/NAME.pub, creating DIR. Refuses to overwrite either file. MT_OK
 * with the pair in *out (may be NULL), MT_INVAL (bad name, files exist) or MT_IO
 * with a one-line reason in err. */
mt_status_t sec_keygen(const char *dir, const char *name, sec_cert_t *out, char *err, size_t errlen);

/* Loads a key pair from a .key file; checks that both keys are there, decode,
 * and belong together. MT_OK, or MT_IO (cannot read) / MT_INVAL (corrupt) with
 * "FILE: reason" in err. */
mt_status_t sec_load_secret(const char *path, sec_cert_t *out, char *err, size_t errlen);

/* Loads the public key of a .pub (or .key) file; out->has_secret is false. Errors
 * as sec_load_secret. */
mt_status_t sec_load_public(const char *path, sec_cert_t *out, char *err, size_t errlen);

/* Writes the Z85 text of a key (41 bytes with the NUL) into out. */
void sec_z85(const uint8_t key[SEC_KEY_BYTES], char out[SEC_Z85_LEN + 1]);

/* Makes sock (not yet connected) a CURVE client of server with key pair self.
 * MT_OK, or MT_ERR with zmq's text in err. */
mt_status_t sec_client_apply(void *sock, const sec_cert_t *self, const sec_cert_t *server, char *err, size_t errlen);

/* Loads the allow-list (every *.pub in allow_dir; at least one) and starts the ZAP
 * handler in ctx. Call before any server socket binds; one per context. The list
 * is read again when the directory changes. MT_OK with *out (caller frees with
 * sec_auth_destroy before terminating ctx); MT_INVAL (bad or empty directory, a
 * corrupt key) or MT_ERR (ZeroMQ) with a reason in err. */
mt_status_t sec_auth_new(void *ctx, const char *allow_dir, sec_auth_t **out, char *err, size_t errlen);

/* Makes sock (not yet bound; created in the authenticator's context) a CURVE
 * server with key pair self in the ZAP domain, and watches it for failed
 * handshakes; label names it in logs ("workers"). The same watch (a socket has one
 * monitor) counts its open connections and shuts down those over max_conns (0 = no
 * cap). At most 4 sockets. MT_OK, or MT_ERR / MT_INVAL with a reason in err. */
mt_status_t sec_server_apply(sec_auth_t *a, void *sock, const sec_cert_t *self, const char *label, uint32_t max_conns,
                             char *err, size_t errlen);

/* Connections the watch of socket number i (in sec_server_apply order) shut down over
 * its cap so far; any thread. */
uint64_t sec_auth_cap_refused(const sec_auth_t *a, int i);

/* Connections refused so far (ZAP denials and failed handshakes); any thread. */
uint64_t sec_auth_refused(const sec_auth_t *a);

/* Public keys in the allow-list now; any thread. */
size_t sec_auth_keys(const sec_auth_t *a);

/* Stops the handler thread and closes its sockets; NULL-safe, nulls *a. The
 * watched server sockets should be closed first. */
void sec_auth_destroy(sec_auth_t **a);

#endif
