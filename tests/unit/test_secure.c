/* test_secure.c - CURVE key files (round trip, mode, bad files) and the
 * authenticator: an allowed client talks to a CURVE server; an unlisted client, a
 * plain client and a client with a wrong server key get nothing and are counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "mt.h"
#include "secure.h"

static char g_dir[256];

static int setup(void **state) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mt_secure_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_keygen_round_trip(void **state) {
    char err[512], path[400];
    sec_cert_t made, back, pub;
    assert_int_equal(sec_keygen(g_dir, "node1", &made, err, sizeof err), MT_OK);
    assert_true(made.has_secret);

    snprintf(path, sizeof path, "%s/node1.key", g_dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(sec_load_secret(path, &back, err, sizeof err), MT_OK);
    assert_true(back.has_secret);
    assert_memory_equal(back.pub, made.pub, SEC_KEY_BYTES);
    assert_memory_equal(back.sec, made.sec, SEC_KEY_BYTES);

    snprintf(path, sizeof path, "%s/node1.pub", g_dir);
    assert_int_equal(sec_load_public(path, &pub, err, sizeof err), MT_OK);
    assert_false(pub.has_secret);
    assert_memory_equal(pub.pub, made.pub, SEC_KEY_BYTES);
    /* the public file carries no secret */
    assert_int_equal(sec_load_secret(path, &back, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "no secret-key"));

    /* never overwrites */
    assert_int_equal(sec_keygen(g_dir, "node1", NULL, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "exists"));
    assert_int_equal(sec_keygen(g_dir, "../evil", NULL, err, sizeof err), MT_INVAL);

    /* a second pair differs */
    sec_cert_t other;
    assert_int_equal(sec_keygen(g_dir, "node2", &other, err, sizeof err), MT_OK);
    assert_memory_not_equal(other.pub, made.pub, SEC_KEY_BYTES);
}

static void test_bad_files(void **state) {
    char err[512], path[400];
    sec_cert_t c;
    snprintf(path, sizeof path, "%s/missing.key", g_dir);
    assert_int_equal(sec_load_secret(path, &c, err, sizeof err), MT_IO);
    assert_non_null(strstr(err, "missing.key"));
    assert_non_null(strstr(err, "No such file"));

    snprintf(path, sizeof path, "%s/garbage.key", g_dir);
    write_file(path, "hello world\nthis is not a key\n");
    assert_int_equal(sec_load_secret(path, &c, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "no public-key"));

    snprintf(path, sizeof path, "%s/short.pub", g_dir);
    write_file(path, "curve\n    public-key = \"abc\"\n");
    assert_int_equal(sec_load_public(path, &c, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "not 40 Z85"));

    /* two valid keys that do not belong together */
    char pa[41], sa[41], pb[41], sb[41], text[400];
    assert_int_equal(zmq_curve_keypair(pa, sa), 0);
    assert_int_equal(zmq_curve_keypair(pb, sb), 0);
    snprintf(path, sizeof path, "%s/mixed.key", g_dir);
    snprintf(text, sizeof text, "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n", pa, sb);
    write_file(path, text);
    assert_int_equal(sec_load_secret(path, &c, err, sizeof err), MT_INVAL);
    assert_non_null(strstr(err, "does not belong"));
    snprintf(text, sizeof text, "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n", pb, sb);
    write_file(path, text);
    assert_int_equal(sec_load_secret(path, &c, err, sizeof err), MT_OK);

    /* an allow-list without keys, or with a corrupt key, is refused */
    char empty[400];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    assert_int_equal(mkdir(empty, 0700), 0);
    sec_auth_t *a = NULL;
    void *ctx = zmq_ctx_new();
    assert_int_equal(sec_auth_new(ctx, empty, &a, err, sizeof err), MT_INVAL);
    assert_null(a);
    assert_non_null(strstr(err, "no *.pub"));
    assert_int_equal(sec_auth_new(ctx, g_dir, &a, err, sizeof err), MT_INVAL); /* short.pub */
    assert_non_null(strstr(err, "short.pub"));
    zmq_ctx_term(ctx);
}

/* Sends "ping" from a DEALER set up by the caller; returns whether the server got it
 * (and answered "pong", which the client must receive). */
static bool exchange(void *server, void *client, int wait_ms) {
    assert_int_equal(zmq_send(client, "ping", 4, ZMQ_DONTWAIT), 4);
    zmq_pollitem_t it = {server, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, wait_ms) <= 0) return false;
    char id[256], body[16];
    int idn = zmq_recv(server, id, sizeof id, 0);
    assert_true(idn > 0);
    int n = zmq_recv(server, body, sizeof body, 0);
    assert_int_equal(n, 4);
    assert_memory_equal(body, "ping", 4);
    assert_int_equal(zmq_send(server, id, (size_t)idn, ZMQ_SNDMORE), idn);
    assert_int_equal(zmq_send(server, "pong", 4, 0), 4);
    zmq_pollitem_t ci = {client, 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&ci, 1, 2000), 1);
    assert_int_equal(zmq_recv(client, body, sizeof body, 0), 4);
    assert_memory_equal(body, "pong", 4);
    return true;
}

static void *client_socket(void *ctx, const char *ep, const sec_cert_t *self, const sec_cert_t *server) {
    char err[256];
    int linger = 0;
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(s);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (self) assert_int_equal(sec_client_apply(s, self, server, err, sizeof err), MT_OK);
    assert_int_equal(zmq_connect(s, ep), 0);
    return s;
}

static void test_server_and_clients(void **state) {
    char err[512], allow[300], keys[300];
    snprintf(allow, sizeof allow, "%s/allow", g_dir);
    snprintf(keys, sizeof keys, "%s/keys", g_dir);
    sec_cert_t srv, good, stranger, srv_pub;
    assert_int_equal(sec_keygen(keys, "coordinator", &srv, err, sizeof err), MT_OK);
    assert_int_equal(sec_keygen(allow, "good", &good, err, sizeof err), MT_OK);
    assert_int_equal(sec_keygen(keys, "stranger", &stranger, err, sizeof err), MT_OK);
    /* the allow-list directory holds public keys; the secret goes elsewhere */
    char from[400], to[400];
    snprintf(from, sizeof from, "%s/good.key", allow);
    snprintf(to, sizeof to, "%s/good.key", keys);
    assert_int_equal(rename(from, to), 0);
    memcpy(&srv_pub, &srv, sizeof srv);
    srv_pub.has_secret = false;

    void *ctx = zmq_ctx_new();
    void *cctx = zmq_ctx_new();
    sec_auth_t *a = NULL;
    assert_int_equal(sec_auth_new(ctx, allow, &a, err, sizeof err), MT_OK);
    assert_int_equal(sec_auth_keys(a), 1);
    void *server = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(server, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(sec_server_apply(a, server, &srv, "test", 0, err, sizeof err), MT_OK);
    assert_int_equal(sec_server_apply(a, server, &srv_pub, "test", 0, err, sizeof err), MT_INVAL);
    assert_int_equal(zmq_bind(server, "tcp://127.0.0.1:*"), 0);
    char ep[128];
    size_t eplen = sizeof ep;
    assert_int_equal(zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, ep, &eplen), 0);

    void *c1 = client_socket(cctx, ep, &good, &srv_pub);
    assert_true(exchange(server, c1, 3000));
    assert_int_equal(sec_auth_refused(a), 0);

    void *c2 = client_socket(cctx, ep, &stranger, &srv_pub);
    assert_false(exchange(server, c2, 1000));
    assert_true(sec_auth_refused(a) >= 1);
    uint64_t after_stranger = sec_auth_refused(a);

    void *c3 = client_socket(cctx, ep, NULL, NULL);
    assert_false(exchange(server, c3, 1000));
    assert_true(sec_auth_refused(a) > after_stranger);
    uint64_t after_plain = sec_auth_refused(a);

    sec_cert_t wrong_server = stranger;
    wrong_server.has_secret = false;
    void *c4 = client_socket(cctx, ep, &good, &wrong_server);
    assert_false(exchange(server, c4, 1000));
    assert_true(sec_auth_refused(a) > after_plain);

    /* a key added to the directory is allowed on the next connection */
    char pub_from[400], pub_to[400];
    snprintf(pub_from, sizeof pub_from, "%s/stranger.pub", keys);
    snprintf(pub_to, sizeof pub_to, "%s/stranger.pub", allow);
    assert_int_equal(rename(pub_from, pub_to), 0);
    void *c5 = client_socket(cctx, ep, &stranger, &srv_pub);
    assert_true(exchange(server, c5, 3000));
    assert_int_equal(sec_auth_keys(a), 2);

    /* the allowed client still works */
    assert_true(exchange(server, c1, 3000));

    zmq_close(c1);
    zmq_close(c2);
    zmq_close(c3);
    zmq_close(c4);
    zmq_close(c5);
    zmq_close(server);
    sec_auth_destroy(&a);
    assert_null(a);
    sec_auth_destroy(&a);
    zmq_ctx_term(ctx);
    zmq_ctx_term(cctx);
}

int main(void) {
    mt_log_init("test", MT_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keygen_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_and_clients, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
