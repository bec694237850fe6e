/* main.c - moetune-coordinator: parses options, runs the coordinator loop. */
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "mt.h"
#include "secure.h"
#include "wire.h"

static const char g_usage[] =
    "usage: moetune-coordinator --db FILE [--bind EP] [--control EP] [--heartbeat-ms MS]\n"
    "                           [--lease-ms MS] [--max-msg-bytes N] [--max-connections N]\n"
    "                           [--max-buffer-mb N]\n"
    "                           [--log-level L] [--curve-secret FILE --curve-allow DIR]\n"
    "                           [--metrics HOST:PORT] [--help]\n"
    "\n"
    "  --db FILE            SQLite database (created and migrated when missing)\n"
    "  --bind EP            worker endpoint (default tcp://127.0.0.1:5555, this host only; other\n"
    "                       hosts' workers need e.g. tcp://*:5555, best with CURVE: a plain bind\n"
    "                       that other hosts can reach is warned about at start)\n"
    "  --control EP         control endpoint for the CLI (default tcp://127.0.0.1:5556)\n"
    "  --heartbeat-ms MS    heartbeat period, 10..600000 (default 1000); a worker silent 3 periods is dead\n"
    "  --lease-ms MS        job lease, at least two heartbeat periods (default 30000); renewed only by\n"
    "                       progress: a result, or the worker's heartbeat naming the config it measures\n"
    "                       (for at most the sweep's config timeout per config)\n"
    "  --max-msg-bytes N    largest message accepted (default 4194304); the worker socket's may be lower\n"
    "                       to fit --max-buffer-mb; a sweep whose Result cannot fit is refused at submit\n"
    "  --max-connections N  worker-socket connections at most (default 1024, lowered to fit ulimit -n);\n"
    "                       more are closed at once and logged; the control socket keeps 64 of its own\n"
    "  --max-buffer-mb N    what all connections together may make the coordinator buffer, MiB\n"
    "                       (default 1024); the bound is logged at start\n"
    "  --log-level L        error, warn, info (default) or debug\n"
    "  --curve-secret FILE  CURVE: this coordinator's key pair (moetune keygen); needs --curve-allow\n"
    "  --curve-allow DIR    CURVE: directory of the public keys (*.pub) of allowed workers and clients;\n"
    "                       without both flags the sockets are plain TCP\n"
    "  --metrics HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics (HOST an IPv4\n"
    "                       address, localhost or *); off by default\n";

typedef struct {
    coord_opts_t o;
    mt_log_level_t level;
    uint32_t hb, lease, max_msg, max_conns, max_buffer_mb;
    const char *curve_secret;
    sec_cert_t curve;
} args_t;

/* How an option's value is stored: its type and where in args_t (nginx-style). */
typedef enum { ARG_STR, ARG_U32, ARG_LEVEL } arg_type_t;

typedef struct {
    const char *name;
    arg_type_t type;
    size_t off;
    uint32_t min, max; /* ARG_U32 */
} arg_opt_t;

static const arg_opt_t g_opts[] = {
    {"--db", ARG_STR, offsetof(args_t, o.db_path), 0, 0},
    {"--bind", ARG_STR, offsetof(args_t, o.bind), 0, 0},
    {"--control", ARG_STR, offsetof(args_t, o.control), 0, 0},
    {"--heartbeat-ms", ARG_U32, offsetof(args_t, hb), WIRE_HEARTBEAT_MIN_MS, WIRE_HEARTBEAT_MAX_MS},
    {"--lease-ms", ARG_U32, offsetof(args_t, lease), WIRE_LEASE_MIN_MS, WIRE_LEASE_MAX_MS},
    {"--max-msg-bytes", ARG_U32, offsetof(args_t, max_msg), 1024, 1u << 30},
    {"--max-connections", ARG_U32, offsetof(args_t, max_conns), 1, 1u << 20},
    {"--max-buffer-mb", ARG_U32, offsetof(args_t, max_buffer_mb), 16, 1u << 20},
    {"--log-level", ARG_LEVEL, offsetof(args_t, level), 0, 0},
    {"--curve-secret", ARG_STR, offsetof(args_t, curve_secret), 0, 0},
    {"--curve-allow", ARG_STR, offsetof(args_t, o.curve_allow), 0, 0},
    {"--metrics", ARG_STR, offsetof(args_t, o.metrics), 0, 0},
};

/* Stores option opt's value v into a; MT_INVAL with the reason in err. */
static int set_opt(args_t *a, const arg_opt_t *opt, const char *v, char *err, size_t errlen) {
    void *dst = (char *)a + opt->off;
    switch (opt->type) {
        case ARG_STR:
            *(const char **)dst = v;
            return MT_OK;
        case ARG_U32:
            if (mt_parse_u32(v, opt->min, opt->max, dst) == MT_OK) return MT_OK;
            mt_fmt(err, errlen, "%s: '%s' is not a whole number in %u..%u", opt->name, v, opt->min, opt->max);
            return MT_INVAL;
        case ARG_LEVEL:
            if (mt_log_parse_level(v, dst) == MT_OK) return MT_OK;
            mt_fmt(err, errlen, "%s: '%s' is not one of error, warn, info, debug", opt->name, v);
            return MT_INVAL;
    }
    return MT_INVAL;
}

static int parse(int argc, char **argv, args_t *a, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        size_t nlen = strlen(arg);
        const char *eq = strchr(arg, '=');
        if (eq && strncmp(arg, "--", 2) == 0) {
            nlen = (size_t)(eq - arg);
            val = eq + 1;
        }
        size_t k = 0, n = sizeof g_opts / sizeof g_opts[0];
        while (k < n && !(strlen(g_opts[k].name) == nlen && strncmp(g_opts[k].name, arg, nlen) == 0)) k++;
        if (k == n) {
            mt_fmt(err, errlen, "unknown option '%s' (try --help)", arg);
            return MT_INVAL;
        }
        if (!val) {
            if (i + 1 >= argc) {
                mt_fmt(err, errlen, "%s needs a value", g_opts[k].name);
                return MT_INVAL;
            }
            val = argv[++i];
        }
        int rc = set_opt(a, &g_opts[k], val, err, errlen);
        if (rc) return rc;
    }
    if (!a->o.db_path || !*a->o.db_path) {
        mt_fmt(err, errlen, "--db FILE is required (try --help)");
        return MT_INVAL;
    }
    if (!a->curve_secret != !a->o.curve_allow) {
        mt_fmt(err, errlen, "--curve-secret and --curve-allow go together (try --help)");
        return MT_INVAL;
    }
    if (a->curve_secret) {
        int rc = sec_load_secret(a->curve_secret, &a->curve, err, errlen);
        if (rc) return rc;
        a->o.curve = &a->curve;
    }
    return MT_OK;
}

int main(int argc, char **argv) {
    char err[512] = "";
    args_t a;
    memset(&a, 0, sizeof a);
    a.level = MT_LOG_INFO;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(g_usage, stdout);
            return MT_EXIT_OK;
        }
    }
    if (parse(argc, argv, &a, err, sizeof err)) {
        fprintf(stderr, "moetune-coordinator: %s\n", err);
        return MT_EXIT_USAGE;
    }
    mt_log_init("coord", a.level);
    a.o.heartbeat_ms = a.hb;
    a.o.lease_ms = a.lease;
    a.o.max_msg_bytes = a.max_msg;
    a.o.max_conns = a.max_conns;
    a.o.max_buffer_mb = a.max_buffer_mb;
    /* large receive buffers (one per connection sending a big message) always come from
     * mmap and go back to the system when freed, instead of staying in the heap after
     * their connections leave (glibc raises its threshold dynamically otherwise) */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mt_install_stop_handlers();
    /* over a file-size limit a write fails with EFBIG (a failed commit, kept and
     * retried) instead of killing the process */
    signal(SIGXFSZ, SIG_IGN);
    coord_t *c = NULL;
    int rc = coord_new(&a.o, &c, err, sizeof err);
    if (rc) {
        fprintf(stderr, "moetune-coordinator: %s\n", err);
        return rc == MT_IO || rc == MT_INVAL ? MT_EXIT_USAGE : MT_EXIT_FAIL;
    }
    rc = coord_run(c);
    coord_destroy(&c);
    return rc ? MT_EXIT_FAIL : MT_EXIT_OK;
}
