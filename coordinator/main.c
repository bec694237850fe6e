/* main.c - moetune-coordinator: parses options, runs the coordinator loop. */
#include <malloc.h>
#include <signal.h>
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
    "                           [--log-level L] [--curve-secret FILE --curve-allow DIR]\n"
    "                           [--metrics HOST:PORT] [--help]\n"
    "\n"
    "  --db FILE            SQLite database (created and migrated when missing)\n"
    "  --bind EP            worker endpoint (default tcp://127.0.0.1:5555, this host only; other\n"
    "                       hosts' workers need e.g. tcp://*:5555, best with CURVE: a plain bind\n"
    "                       that other hosts can reach is warned about at start)\n"
    "  --control EP         control endpoint for the CLI (default tcp://127.0.0.1:5556)\n"
    "  --heartbeat-ms MS    heartbeat period, 10..600000 (default 1000); a worker silent 3 periods is dead\n"
    "  --lease-ms MS        job lease, extended by any message from its worker (default 30000)\n"
    "  --max-msg-bytes N    largest message accepted (default 4194304)\n"
    "  --max-connections N  worker-socket connections at most (default 1024, lowered to fit ulimit -n);\n"
    "                       more are closed at once and logged; the control socket keeps 64 of its own\n"
    "  --log-level L        error, warn, info (default) or debug\n"
    "  --curve-secret FILE  CURVE: this coordinator's key pair (moetune keygen); needs --curve-allow\n"
    "  --curve-allow DIR    CURVE: directory of the public keys (*.pub) of allowed workers and clients;\n"
    "                       without both flags the sockets are plain TCP\n"
    "  --metrics HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics (HOST an IPv4\n"
    "                       address, localhost or *); off by default\n";

typedef struct {
    coord_opts_t o;
    mt_log_level_t level;
    uint32_t hb, lease, max_msg, max_conns;
    const char *curve_secret;
    sec_cert_t curve;
} args_t;

typedef int (*opt_fn)(args_t *a, const char *v, char *err, size_t errlen);

static int opt_db(args_t *a, const char *v, char *err, size_t errlen) {
    a->o.db_path = v;
    return MT_OK;
}
static int opt_bind(args_t *a, const char *v, char *err, size_t errlen) {
    a->o.bind = v;
    return MT_OK;
}
static int opt_control(args_t *a, const char *v, char *err, size_t errlen) {
    a->o.control = v;
    return MT_OK;
}
static int opt_curve_secret(args_t *a, const char *v, char *err, size_t errlen) {
    a->curve_secret = v;
    return MT_OK;
}
static int opt_metrics(args_t *a, const char *v, char *err, size_t errlen) {
    a->o.metrics = v;
    return MT_OK;
}
static int opt_curve_allow(args_t *a, const char *v, char *err, size_t errlen) {
    a->o.curve_allow = v;
    return MT_OK;
}
static int opt_u32(const char *name, const char *v, uint32_t min, uint32_t max, uint32_t *out, char *err,
                   size_t errlen) {
    if (mt_parse_u32(v, min, max, out) == MT_OK) return MT_OK;
    mt_fmt(err, errlen, "%s: '%s' is not a whole number in %u..%u", name, v, min, max);
    return MT_INVAL;
}
static int opt_hb(args_t *a, const char *v, char *err, size_t errlen) {
    return opt_u32("--heartbeat-ms", v, WIRE_HEARTBEAT_MIN_MS, WIRE_HEARTBEAT_MAX_MS, &a->hb, err, errlen);
}
static int opt_lease(args_t *a, const char *v, char *err, size_t errlen) {
    return opt_u32("--lease-ms", v, WIRE_LEASE_MIN_MS, WIRE_LEASE_MAX_MS, &a->lease, err, errlen);
}
static int opt_max(args_t *a, const char *v, char *err, size_t errlen) {
    return opt_u32("--max-msg-bytes", v, 1024, 1u << 30, &a->max_msg, err, errlen);
}
static int opt_conns(args_t *a, const char *v, char *err, size_t errlen) {
    return opt_u32("--max-connections", v, 1, 1u << 20, &a->max_conns, err, errlen);
}
static int opt_level(args_t *a, const char *v, char *err, size_t errlen) {
    if (mt_log_parse_level(v, &a->level) == MT_OK) return MT_OK;
    mt_fmt(err, errlen, "--log-level: '%s' is not one of error, warn, info, debug", v);
    return MT_INVAL;
}

static const struct {
    const char *name;
    opt_fn fn;
} g_opts[] = {
    {"--db", opt_db},
    {"--bind", opt_bind},
    {"--control", opt_control},
    {"--heartbeat-ms", opt_hb},
    {"--lease-ms", opt_lease},
    {"--max-msg-bytes", opt_max},
    {"--max-connections", opt_conns},
    {"--log-level", opt_level},
    {"--curve-secret", opt_curve_secret},
    {"--curve-allow", opt_curve_allow},
    {"--metrics", opt_metrics},
};

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
        int rc = g_opts[k].fn(a, val, err, errlen);
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
