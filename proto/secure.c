/* secure.c - CURVE keys, client and server socket options, the ZAP handler. See secure.h. */
#include "secure.h"

#include <czmq.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "mt.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define MAX_WATCH 4
#define MAX_KEY_FILE 65536
#define POLL_MS 100
#define N_REASONS 6 /* g_protocol_errors plus "no detail" */
#define N_LOG_SLOTS (MAX_WATCH * N_REASONS + 1)
#define LOG_EVERY_MS 5000 /* a peer that retries is logged at most this often per socket */

/* ---- key files */

void sec_z85(const uint8_t key[SEC_KEY_BYTES], char out[SEC_Z85_LEN + 1]) {
    if (!zmq_z85_encode(out, key, SEC_KEY_BYTES)) out[0] = '\0';
}

static int need_curve(char *err, size_t errlen) {
    if (zmq_has("curve")) return MT_OK;
    mt_fmt(err, errlen, "this libzmq was built without CURVE support");
    return MT_ERR;
}

/* Finds `name = "value"` (quotes optional) in the ZPL text; decodes the Z85 key.
 * MT_NOTFOUND when absent, MT_INVAL when malformed. */
static int find_key(const char *text, const char *name, uint8_t out[SEC_KEY_BYTES]) {
    size_t nlen = strlen(name);
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, name, nlen) == 0 && (p[nlen] == ' ' || p[nlen] == '\t' || p[nlen] == '=')) {
            p += nlen;
            while (*p == ' ' || *p == '\t') p++;
            if (*p != '=') return MT_INVAL;
            p++;
            while (*p == ' ' || *p == '\t') p++;
            bool quoted = *p == '"';
            if (quoted) p++;
            char z85[SEC_Z85_LEN + 1];
            size_t n = 0;
            while (p[n] && p[n] != '\n' && p[n] != '\r' && p[n] != '"' && !(!quoted && (p[n] == ' ' || p[n] == '#')))
                n++;
            if (n != SEC_Z85_LEN || (quoted && p[n] != '"')) return MT_INVAL;
            memcpy(z85, p, n);
            z85[n] = '\0';
            return zmq_z85_decode(out, z85) ? MT_OK : MT_INVAL;
        }
        line = eol ? eol + 1 : NULL;
    }
    return MT_NOTFOUND;
}

/* The key file at path as text, read without blocking (a FIFO in the allow-list folder
 * must not stall the authenticator thread) and from a regular file only. */
static int read_text(const char *path, char **out, char *err, size_t errlen) {
    size_t n = 0;
    int rc = mt_read_regular(path, MAX_KEY_FILE, out, &n, err, errlen);
    if (rc == MT_NOTFOUND) rc = MT_IO;
    if (rc) return rc;
    if (strlen(*out) != n) {
        mt_fmt(err, errlen, "%s: not a key file (binary content)", path);
        free(*out);
        *out = NULL;
        return MT_INVAL;
    }
    return MT_OK;
}

/* Decodes key `name` of text, the content of key file path, into out; MT_INVAL with
 * "path: no NAME (hint)" or "path: NAME is not 40 Z85 characters" in err. */
static int read_key(const char *text, const char *path, const char *name, const char *hint, uint8_t out[SEC_KEY_BYTES],
                    char *err, size_t errlen) {
    int rc = find_key(text, name, out);
    if (rc == MT_NOTFOUND)
        mt_fmt(err, errlen, "%s: no %s (%s)", path, name, hint);
    else if (rc)
        mt_fmt(err, errlen, "%s: %s is not 40 Z85 characters", path, name);
    return rc ? MT_INVAL : MT_OK;
}

static int load(const char *path, bool want_secret, sec_cert_t *out, char *err, size_t errlen) {
    char *text = NULL;
    memset(out, 0, sizeof *out);
    int rc = need_curve(err, errlen);
    if (rc) return rc;
    rc = read_text(path, &text, err, errlen);
    if (rc) return rc;
    rc = read_key(text, path, "public-key", "not a moetune/czmq key file", out->pub, err, errlen);
    if (rc || !want_secret) goto out;
    rc = read_key(text, path, "secret-key", "a .pub file where the .key file is needed?", out->sec, err, errlen);
    if (rc) goto out;
    char sec_z[SEC_Z85_LEN + 1], pub_z[SEC_Z85_LEN + 1], want_z[SEC_Z85_LEN + 1];
    sec_z85(out->sec, sec_z);
    sec_z85(out->pub, want_z);
    if (zmq_curve_public(pub_z, sec_z) != 0 || strcmp(pub_z, want_z) != 0) {
        mt_fmt(err, errlen, "%s: the public key does not belong to the secret key", path);
        rc = MT_INVAL;
        goto out;
    }
    out->has_secret = true;
out:
    if (rc) memset(out, 0, sizeof *out);
    free(text);
    return rc;
}

mt_status_t sec_load_secret(const char *path, sec_cert_t *out, char *err, size_t errlen) {
    return load(path, true, out, err, errlen);
}

mt_status_t sec_load_public(const char *path, sec_cert_t *out, char *err, size_t errlen) {
    return load(path, false, out, err, errlen);
}

static bool good_name(const char *name) {
    if (!name || !*name || strlen(name) > 128 || name[0] == '.') return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.'))
            return false;
    return true;
}

mt_status_t sec_keygen(const char *dir, const char *name, sec_cert_t *out, char *err, size_t errlen) {
    int rc = MT_OK, fd = -1;
    char pub_path[4200], key_path[4200];
    zcert_t *cert = NULL;
    bool made_key = false, made_pub = false;
    rc = need_curve(err, errlen);
    if (rc) return rc;
    if (!dir || !*dir || strlen(dir) > 4000) {
        mt_fmt(err, errlen, "bad key directory");
        return MT_INVAL;
    }
    if (!good_name(name)) {
        mt_fmt(err, errlen, "bad key name '%s' (letters, digits, '-', '_', '.'; not starting with '.')",
               name ? name : "");
        return MT_INVAL;
    }
    if (mt_mkdirs(dir, err, errlen) != MT_OK) return MT_IO;
    snprintf(key_path, sizeof key_path, "%s/%s.key", dir, name);
    snprintf(pub_path, sizeof pub_path, "%s/%s.pub", dir, name);
    if (access(pub_path, F_OK) == 0) {
        mt_fmt(err, errlen, "%s exists; not overwriting", pub_path);
        return MT_INVAL;
    }
    /* Created 0600 before any secret is written; O_EXCL refuses an existing file. */
    fd = open(key_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        mt_fmt(err, errlen, "%s: %s", key_path, errno == EEXIST ? "exists; not overwriting" : strerror(errno));
        return errno == EEXIST ? MT_INVAL : MT_IO;
    }
    made_key = true;
    close(fd);
    uint8_t pub[SEC_KEY_BYTES], sec[SEC_KEY_BYTES];
    char pub_z[SEC_Z85_LEN + 1], sec_z[SEC_Z85_LEN + 1];
    if (zmq_curve_keypair(pub_z, sec_z) != 0 || !zmq_z85_decode(pub, pub_z) || !zmq_z85_decode(sec, sec_z)) {
        mt_fmt(err, errlen, "key generation: %s", zmq_strerror(zmq_errno()));
        rc = MT_ERR;
        goto out;
    }
    cert = zcert_new_from(pub, sec);
    if (!cert) {
        mt_fmt(err, errlen, "out of memory");
        rc = MT_NOMEM;
        goto out;
    }
    zcert_set_meta(cert, "name", "%s", name);
    if (zcert_save_secret(cert, key_path) != 0 || chmod(key_path, 0600) != 0) {
        mt_fmt(err, errlen, "cannot write %s: %s", key_path, strerror(errno));
        rc = MT_IO;
        goto out;
    }
    made_pub = true;
    if (zcert_save_public(cert, pub_path) != 0) {
        mt_fmt(err, errlen, "cannot write %s: %s", pub_path, strerror(errno));
        rc = MT_IO;
        goto out;
    }
    if (out) {
        memcpy(out->pub, pub, sizeof pub);
        memcpy(out->sec, sec, sizeof sec);
        out->has_secret = true;
    }
out:
    if (rc) {
        if (made_key) unlink(key_path);
        if (made_pub) unlink(pub_path);
    }
    zcert_destroy(&cert);
    memset(sec, 0, sizeof sec);
    memset(sec_z, 0, sizeof sec_z);
    return rc;
}

/* ---- sockets */

mt_status_t sec_client_apply(void *sock, const sec_cert_t *self, const sec_cert_t *server, char *err, size_t errlen) {
    if (!self || !self->has_secret || !server) {
        mt_fmt(err, errlen, "CURVE client needs its key pair and the server's public key");
        return MT_INVAL;
    }
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server->pub, SEC_KEY_BYTES) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, self->pub, SEC_KEY_BYTES) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, self->sec, SEC_KEY_BYTES)) {
        mt_fmt(err, errlen, "CURVE client options: %s", zmq_strerror(zmq_errno()));
        return MT_ERR;
    }
    return MT_OK;
}

/* ---- the authenticator */

struct sec_auth {
    void *ctx;
    char dir[4096];
    struct timespec dir_mtime;
    uint8_t (*keys)[SEC_KEY_BYTES]; /* only the handler thread touches it once started */
    size_t n_keys;
    atomic_size_t n_keys_pub;
    void *zap;
    void *mon[MAX_WATCH];
    char mon_ep[MAX_WATCH][64];
    char label[MAX_WATCH][32];
    uint32_t conns[MAX_WATCH], max_conns[MAX_WATCH]; /* the auth thread's */
    atomic_uint_fast64_t cap_refused[MAX_WATCH];
    int n_watch;
    /* per (socket, reason) slot, so one kind of refusal never hides another; the last slot is ZAP's */
    uint64_t last_log_ms[N_LOG_SLOTS];
    uint64_t quiet[N_LOG_SLOTS]; /* refusals not logged since */
    char quiet_note[96];
    atomic_uint_fast64_t refused;
    atomic_int stop;
    pthread_t thread;
    bool running;
};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

/* Reads every *.pub of dir into a fresh array. */
static int load_dir(const char *dir, uint8_t (**out)[SEC_KEY_BYTES], size_t *n_out, struct timespec *mtime, char *err,
                    size_t errlen) {
    int rc = MT_OK;
    uint8_t(*keys)[SEC_KEY_BYTES] = NULL;
    size_t n = 0, cap = 0;
    struct stat st;
    DIR *d = opendir(dir);
    if (!d || stat(dir, &st) != 0) {
        mt_fmt(err, errlen, "allow-list %s: %s", dir, strerror(errno));
        rc = MT_INVAL;
        goto out;
    }
    *mtime = st.st_mtim;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!ends_with(e->d_name, ".pub")) continue;
        char path[4400];
        sec_cert_t cert;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        rc = sec_load_public(path, &cert, err, errlen);
        if (rc) goto out;
        if (mt_grow((void **)&keys, &cap, n + 1, sizeof *keys, 16) != MT_OK) {
            rc = MT_NOMEM;
            mt_fmt(err, errlen, "out of memory");
            goto out;
        }
        memcpy(keys[n++], cert.pub, SEC_KEY_BYTES);
    }
    if (n == 0) {
        mt_fmt(err, errlen, "allow-list %s has no *.pub key files", dir);
        rc = MT_INVAL;
        goto out;
    }
    *out = keys;
    *n_out = n;
    keys = NULL;
out:
    if (d) closedir(d);
    free(keys);
    return rc;
}

static void reload_if_changed(sec_auth_t *a) {
    struct stat st;
    if (stat(a->dir, &st) != 0) return;
    if (st.st_mtim.tv_sec == a->dir_mtime.tv_sec && st.st_mtim.tv_nsec == a->dir_mtime.tv_nsec) return;
    uint8_t(*keys)[SEC_KEY_BYTES] = NULL;
    size_t n = 0;
    struct timespec mt;
    char err[512];
    if (load_dir(a->dir, &keys, &n, &mt, err, sizeof err) != MT_OK) {
        log_at(MT_LOG_WARN, "allow-list not reloaded (keeping %zu keys): %s", a->n_keys, err);
        a->dir_mtime = st.st_mtim;
        return;
    }
    free(a->keys);
    a->keys = keys;
    a->n_keys = n;
    a->dir_mtime = mt;
    atomic_store(&a->n_keys_pub, n);
    log_at(MT_LOG_INFO, "allow-list %s reloaded: %zu keys", a->dir, n);
}

static bool allowed(const sec_auth_t *a, const uint8_t *key) {
    for (size_t i = 0; i < a->n_keys; i++)
        if (memcmp(a->keys[i], key, SEC_KEY_BYTES) == 0) return true;
    return false;
}

/* A peer refused again and again (libzmq reconnects every 100 ms) is logged once per
 * LOG_EVERY_MS with the count left out; quiet_note says how many. */
static bool may_log(sec_auth_t *a, int slot) {
    uint64_t now = mt_now_ms();
    a->quiet_note[0] = '\0';
    if (a->last_log_ms[slot] && now < a->last_log_ms[slot] + LOG_EVERY_MS) {
        a->quiet[slot]++;
        return false;
    }
    if (a->quiet[slot])
        snprintf(a->quiet_note, sizeof a->quiet_note, " (and %llu more refused since the last line)",
                 (unsigned long long)a->quiet[slot]);
    a->quiet[slot] = 0;
    a->last_log_ms[slot] = now;
    return true;
}

/* Receives the frames of one message; returns the count (at most max). */
static int recv_frames(void *sock, zmq_msg_t *frames, int max) {
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (n < max)
            frames[n++] = m;
        else
            zmq_msg_close(&m);
    }
    return n;
}

static void zap_reply(void *sock, zmq_msg_t *req_id, const char *code, const char *text, const char *user) {
    zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(sock, zmq_msg_data(req_id), zmq_msg_size(req_id), ZMQ_SNDMORE);
    zmq_send(sock, code, strlen(code), ZMQ_SNDMORE);
    zmq_send(sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(sock, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(sock, "", 0, 0);
}

/* One ZAP request (RFC 27): version, request id, domain, address, routing id,
 * mechanism, credentials. */
static void zap_handle(sec_auth_t *a) {
    zmq_msg_t f[8];
    int n = recv_frames(a->zap, f, 8);
    if (n < 0) return;
    char addr[64] = "?", key_z[SEC_Z85_LEN + 1] = "";
    if (n >= 4) {
        size_t len = zmq_msg_size(&f[3]);
        if (len >= sizeof addr) len = sizeof addr - 1;
        memcpy(addr, zmq_msg_data(&f[3]), len);
        addr[len] = '\0';
    }
    bool curve = n >= 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
                 zmq_msg_size(&f[6]) == SEC_KEY_BYTES;
    if (n >= 2) {
        reload_if_changed(a);
        if (curve) sec_z85(zmq_msg_data(&f[6]), key_z);
        if (curve && allowed(a, zmq_msg_data(&f[6]))) {
            log_at(MT_LOG_DEBUG, "accepted connection from %s: key %s", addr, key_z);
            zap_reply(a->zap, &f[1], "200", "OK", key_z);
        } else {
            atomic_fetch_add(&a->refused, 1);
            if (may_log(a, N_LOG_SLOTS - 1))
                log_at(MT_LOG_WARN, "refused connection from %s: key %s not allowed%s", addr, curve ? key_z : "(none)",
                       a->quiet_note);
            zap_reply(a->zap, &f[1], "400", "key not allowed", "");
        }
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

static const struct {
    int code;
    const char *why;
} g_protocol_errors[] = {
    {ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH, "the peer does not use CURVE"},
    {ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC, "the peer has a wrong server key or a bad key pair"},
    {ZMQ_PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND, "unexpected handshake command"},
    {ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_HELLO, "malformed CURVE HELLO"},
    {ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_INITIATE, "malformed CURVE INITIATE"},
};
_Static_assert(sizeof g_protocol_errors / sizeof g_protocol_errors[0] == N_REASONS - 1,
               "one log slot per protocol error, plus one for no detail");

/* One monitor event: a connection opened or closed (counted against the cap), or a
 * handshake that failed before ZAP could look at it. */
static void monitor_handle(sec_auth_t *a, int i) {
    zmq_msg_t f[2];
    int n = recv_frames(a->mon[i], f, 2);
    if (n < 0) return;
    if (n >= 1 && zmq_msg_size(&f[0]) >= 6) {
        const uint8_t *d = zmq_msg_data(&f[0]);
        uint16_t event;
        uint32_t value;
        memcpy(&event, d, 2);
        memcpy(&value, d + 2, 4);
        if (event == ZMQ_EVENT_DISCONNECTED && a->conns[i]) a->conns[i]--;
        /* over the cap: shut the accepted descriptor down at once; libzmq then drops it */
        if (event == ZMQ_EVENT_ACCEPTED && ++a->conns[i] > a->max_conns[i] && a->max_conns[i]) {
            shutdown((int)value, SHUT_RDWR);
            if (atomic_fetch_add(&a->cap_refused[i], 1) % 100 == 0)
                log_at(MT_LOG_WARN,
                       "%s socket: %u connections, over its limit of %u: refusing new ones "
                       "(%llu refused so far)",
                       a->label[i], a->conns[i] - 1, a->max_conns[i],
                       (unsigned long long)atomic_load(&a->cap_refused[i]));
        }
        /* A client refused by ZAP hangs up (ECONNRESET): counted by the ZAP handler. A
         * client with a wrong server key shows as a failure without detail. */
        bool counted = event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                       (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && value != ECONNRESET);
        if (counted) {
            const char *why = "handshake failed (a wrong server key?)";
            int reason = N_REASONS - 1;
            for (size_t k = 0; k < sizeof g_protocol_errors / sizeof g_protocol_errors[0]; k++)
                if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && g_protocol_errors[k].code == (int)value) {
                    why = g_protocol_errors[k].why;
                    reason = (int)k;
                }
            atomic_fetch_add(&a->refused, 1);
            if (may_log(a, i * N_REASONS + reason))
                log_at(MT_LOG_WARN, "refused connection on the %s socket: %s (0x%x)%s", a->label[i], why, value,
                       a->quiet_note);
        }
    }
    for (int k = 0; k < n; k++) zmq_msg_close(&f[k]);
}

static void *auth_thread(void *arg) {
    sec_auth_t *a = arg;
    while (!atomic_load(&a->stop)) {
        zmq_pollitem_t items[1 + MAX_WATCH];
        int n = 0;
        items[n++] = (zmq_pollitem_t){a->zap, 0, ZMQ_POLLIN, 0};
        for (int i = 0; i < MAX_WATCH; i++) items[n++] = (zmq_pollitem_t){a->mon[i], 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(items, n, POLL_MS);
        if (rc < 0) {
            if (zmq_errno() == EINTR) continue;
            if (zmq_errno() == ETERM) break;
            log_at(MT_LOG_ERROR, "authenticator poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) zap_handle(a);
        for (int i = 0; i < MAX_WATCH; i++)
            if (items[1 + i].revents & ZMQ_POLLIN) monitor_handle(a, i);
    }
    return NULL;
}

mt_status_t sec_auth_new(void *ctx, const char *allow_dir, sec_auth_t **out, char *err, size_t errlen) {
    int rc = MT_OK;
    *out = NULL;
    rc = need_curve(err, errlen);
    if (rc) return rc;
    if (!allow_dir || !*allow_dir || strlen(allow_dir) >= sizeof((sec_auth_t *)0)->dir) {
        mt_fmt(err, errlen, "bad allow-list directory");
        return MT_INVAL;
    }
    sec_auth_t *a = calloc(1, sizeof *a);
    if (!a) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    a->ctx = ctx;
    snprintf(a->dir, sizeof a->dir, "%s", allow_dir);
    atomic_init(&a->refused, 0);
    atomic_init(&a->stop, 0);
    rc = load_dir(a->dir, &a->keys, &a->n_keys, &a->dir_mtime, err, errlen);
    if (rc) goto out;
    atomic_init(&a->n_keys_pub, a->n_keys);
    int linger = 0;
    a->zap = zmq_socket(ctx, ZMQ_REP);
    if (!a->zap || zmq_setsockopt(a->zap, ZMQ_LINGER, &linger, sizeof linger) || zmq_bind(a->zap, ZAP_ENDPOINT)) {
        mt_fmt(err, errlen, "ZAP handler: %s", zmq_strerror(zmq_errno()));
        rc = MT_ERR;
        goto out;
    }
    /* The monitor PAIRs connect now (inproc allows connect before bind), so the
     * thread's poll set never changes while it runs. */
    for (int i = 0; i < MAX_WATCH; i++) {
        snprintf(a->mon_ep[i], sizeof a->mon_ep[i], "inproc://moetune-sec-%p-%d", (void *)a, i);
        a->mon[i] = zmq_socket(ctx, ZMQ_PAIR);
        if (!a->mon[i] || zmq_setsockopt(a->mon[i], ZMQ_LINGER, &linger, sizeof linger) ||
            zmq_connect(a->mon[i], a->mon_ep[i])) {
            mt_fmt(err, errlen, "socket monitor: %s", zmq_strerror(zmq_errno()));
            rc = MT_ERR;
            goto out;
        }
    }
    if (pthread_create(&a->thread, NULL, auth_thread, a) != 0) {
        mt_fmt(err, errlen, "cannot start the authenticator thread");
        rc = MT_ERR;
        goto out;
    }
    a->running = true;
    log_at(MT_LOG_INFO, "CURVE on: %zu allowed keys in %s", a->n_keys, a->dir);
out:
    if (rc) sec_auth_destroy(&a);
    *out = a;
    return rc;
}

mt_status_t sec_server_apply(sec_auth_t *a, void *sock, const sec_cert_t *self, const char *label, uint32_t max_conns,
                             char *err, size_t errlen) {
    int on = 1;
    if (!self || !self->has_secret) {
        mt_fmt(err, errlen, "CURVE server needs its key pair");
        return MT_INVAL;
    }
    if (a->n_watch == MAX_WATCH) {
        mt_fmt(err, errlen, "at most %d CURVE server sockets", MAX_WATCH);
        return MT_INVAL;
    }
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &on, sizeof on) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, self->sec, SEC_KEY_BYTES) ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, SEC_ZAP_DOMAIN, strlen(SEC_ZAP_DOMAIN))) {
        mt_fmt(err, errlen, "CURVE server options: %s", zmq_strerror(zmq_errno()));
        return MT_ERR;
    }
    int i = a->n_watch;
    snprintf(a->label[i], sizeof a->label[i], "%s", label ? label : "?");
    a->max_conns[i] = max_conns;
    if (zmq_socket_monitor(sock, a->mon_ep[i],
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
        mt_fmt(err, errlen, "socket monitor: %s", zmq_strerror(zmq_errno()));
        return MT_ERR;
    }
    a->n_watch++;
    return MT_OK;
}

uint64_t sec_auth_refused(const sec_auth_t *a) { return a ? atomic_load(&a->refused) : 0; }

uint64_t sec_auth_cap_refused(const sec_auth_t *a, int i) {
    return a && i >= 0 && i < MAX_WATCH ? atomic_load(&a->cap_refused[i]) : 0;
}

size_t sec_auth_keys(const sec_auth_t *a) { return a ? atomic_load(&a->n_keys_pub) : 0; }

void sec_auth_destroy(sec_auth_t **pa) {
    if (!pa || !*pa) return;
    sec_auth_t *a = *pa;
    if (a->running) {
        atomic_store(&a->stop, 1);
        pthread_join(a->thread, NULL);
    }
    for (int i = 0; i < MAX_WATCH; i++)
        if (a->mon[i]) zmq_close(a->mon[i]);
    if (a->zap) zmq_close(a->zap);
    free(a->keys);
    free(a);
    *pa = NULL;
}
