/* main.c - moetune-worker: one process per GPU, measuring jobs from a coordinator. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engines.h"
#include "mt.h"
#include "parent.h"
#include "secure.h"
#include "wire.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moetune-worker --connect EP --backend sim|cuda|triton [options]\n"
            "  --connect EP          coordinator worker endpoint (tcp://host:5555)\n"
            "  --backend NAME        measuring backend (built: %s)\n"
            "  --gpu N               GPU index (default 0)\n"
            "  --id ID               worker id (default <hostname>-<pid>-gpu<N>)\n"
            "  --credits N           jobs to hold at once, 1 or 2 (default 2 for cuda and triton, whose next job\n"
            "                        compiles while one is measured; 1 for sim, which asks for its\n"
            "                        next job when its last 3 configs remain)\n"
            "  --heartbeat-ms MS     heartbeat period until the coordinator sets one (default 1000)\n"
            "  --sim-time-scale X    sim: 0 answers at once, 1 sleeps the simulated time (default 0)\n"
            "  --sim-faults SPEC     sim: crash=BMxBNxBKxGMxWxS,crash_rate=P,hang=...,wrong=...,slow_start_ms=N,\n"
            "                        slowdown=X (every latency X times longer: a slower card)\n"
            "  --sim-device NAME     sim: simulated GPU (h200, h100, rtx-pro-6000; default h200)\n"
            "  --cache-dir DIR       compiled-kernel cache directory (cuda, triton)\n"
            "  --kernel NAME         triton: " KRN_ENGINE_NAMES " or moetune (default moetune); sim: stand in for\n"
            "                        that Triton kernel (Triton's static rules on the simulated device)\n"
            "  --python PATH         triton: interpreter for the helper (default python3)\n"
            "  --helper-mem-mb N     triton: helper resident memory limit in MiB (default 65536)\n"
            "  --log-level L         error, warn, info (default), debug\n"
            "  --curve-secret FILE   CURVE: this worker's key pair (moetune keygen); needs --curve-server\n"
            "  --curve-server FILE   CURVE: the coordinator's public key (.pub)\n"
            "  --stats               print a JSON line of counters to stdout on exit\n"
            "  --help                this text\n",
            wrk_backend_names());
}

enum {
    OPT_CONNECT = 1,
    OPT_BACKEND,
    OPT_GPU,
    OPT_ID,
    OPT_CREDITS,
    OPT_HEARTBEAT,
    OPT_SCALE,
    OPT_FAULTS,
    OPT_SIMDEV,
    OPT_CACHE,
    OPT_LOG,
    OPT_STATS,
    OPT_HELP,
    OPT_CURVE_SECRET,
    OPT_CURVE_SERVER,
    OPT_KERNEL,
    OPT_PYTHON,
    OPT_HELPER_MEM
};

static const struct option g_options[] = {
    {"connect", required_argument, NULL, OPT_CONNECT},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"gpu", required_argument, NULL, OPT_GPU},
    {"id", required_argument, NULL, OPT_ID},
    {"credits", required_argument, NULL, OPT_CREDITS},
    {"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT},
    {"sim-time-scale", required_argument, NULL, OPT_SCALE},
    {"sim-faults", required_argument, NULL, OPT_FAULTS},
    {"sim-device", required_argument, NULL, OPT_SIMDEV},
    {"cache-dir", required_argument, NULL, OPT_CACHE},
    {"log-level", required_argument, NULL, OPT_LOG},
    {"stats", no_argument, NULL, OPT_STATS},
    {"help", no_argument, NULL, OPT_HELP},
    {"curve-secret", required_argument, NULL, OPT_CURVE_SECRET},
    {"curve-server", required_argument, NULL, OPT_CURVE_SERVER},
    {"kernel", required_argument, NULL, OPT_KERNEL},
    {"python", required_argument, NULL, OPT_PYTHON},
    {"helper-mem-mb", required_argument, NULL, OPT_HELPER_MEM},
    {NULL, 0, NULL, 0},
};

/* A usage error is one whole line (a supervisor such as `moetune tune` shows the last
 * line of the log), exit 2. */
static int bad(const char *what, const char *val) {
    fprintf(stderr, "moetune-worker: bad %s '%s' (moetune-worker --help lists the options)\n", what, val);
    return MT_EXIT_USAGE;
}

/* The command line, parsed. */
typedef struct {
    wrk_parent_opts_t o;
    mt_log_level_t level;
    int stats;
    const char *curve_secret, *curve_server;
} args_t;

/* Parses the options into a (zeroed by the caller); -1 to run, else the exit code. */
static int parse_args(int argc, char **argv, args_t *a) {
    int c;
    uint32_t u;
    while ((c = getopt_long(argc, argv, "", g_options, NULL)) != -1) {
        switch (c) {
            case OPT_CONNECT:
                a->o.endpoint = optarg;
                break;
            case OPT_BACKEND:
                a->o.backend = optarg;
                break;
            case OPT_GPU:
                if (mt_parse_u32(optarg, 0, 1023, &u)) return bad("--gpu", optarg);
                a->o.bopts.gpu_index = (int)u;
                break;
            case OPT_ID:
                a->o.worker_id = optarg;
                break;
            case OPT_CREDITS:
                if (mt_parse_u32(optarg, 1, WIRE_MAX_HELD, &a->o.credits)) return bad("--credits", optarg);
                break;
            case OPT_HEARTBEAT:
                if (mt_parse_u32(optarg, WIRE_HEARTBEAT_MIN_MS, WIRE_HEARTBEAT_MAX_MS, &a->o.heartbeat_ms))
                    return bad("--heartbeat-ms", optarg);
                break;
            case OPT_SCALE:
                if (mt_parse_double(optarg, &a->o.bopts.sim_time_scale) || !(a->o.bopts.sim_time_scale >= 0) ||
                    a->o.bopts.sim_time_scale > 1000)
                    return bad("--sim-time-scale", optarg);
                break;
            case OPT_FAULTS:
                a->o.bopts.sim_faults = optarg;
                break;
            case OPT_SIMDEV:
                a->o.bopts.sim_device = optarg;
                break;
            case OPT_CACHE:
                a->o.bopts.cache_dir = optarg;
                break;
            case OPT_KERNEL:
                if (!krn_engine_find(optarg) && strcmp(optarg, "moetune"))
                    return bad("--kernel", optarg);
                a->o.bopts.kernel = optarg;
                break;
            case OPT_PYTHON:
                if (!*optarg) return bad("--python", optarg);
                a->o.bopts.python = optarg;
                break;
            case OPT_HELPER_MEM:
                if (mt_parse_u32(optarg, 1, 16u * 1024u * 1024u, &a->o.bopts.helper_mem_mb))
                    return bad("--helper-mem-mb", optarg);
                break;
            case OPT_LOG:
                if (mt_log_parse_level(optarg, &a->level)) return bad("--log-level", optarg);
                break;
            case OPT_STATS:
                a->stats = 1;
                break;
            case OPT_CURVE_SECRET:
                a->curve_secret = optarg;
                break;
            case OPT_CURVE_SERVER:
                a->curve_server = optarg;
                break;
            case OPT_HELP:
                usage(stdout);
                return MT_EXIT_OK;
            default:
                /* getopt has named the option on its own line */
                fprintf(stderr, "moetune-worker: bad option %s (moetune-worker --help lists the options)\n",
                        argv[optind - 1]);
                return MT_EXIT_USAGE;
        }
    }
    if (optind < argc) return bad("argument", argv[optind]);
    if (!a->o.endpoint || !a->o.backend) {
        fprintf(stderr,
                "moetune-worker: --connect and --backend are required (moetune-worker --help lists the options)\n");
        return MT_EXIT_USAGE;
    }
    return -1;
}

int main(int argc, char **argv) {
    args_t a;
    wrk_parent_t *p = NULL;
    int code;
    char err[512];
    sec_cert_t curve, server;
    memset(&a, 0, sizeof a);
    a.level = MT_LOG_INFO;
    code = parse_args(argc, argv, &a);
    if (code >= 0) return code;
    wrk_parent_opts_t o = a.o;
    const char *curve_secret = a.curve_secret, *curve_server = a.curve_server;
    /* A GPU worker holds the next job too, so that its configs compile ahead while this one is
     * measured; holding one, it waits for compiles at the start of every job (docs/performance.md). */
    if (o.credits == 0) o.credits = strcmp(o.backend, "sim") == 0 ? 1 : 2;
    if (!curve_secret != !curve_server) {
        fprintf(stderr, "moetune-worker: --curve-secret and --curve-server go together\n");
        return MT_EXIT_USAGE;
    }
    if (curve_secret) {
        if (sec_load_secret(curve_secret, &curve, err, sizeof err) ||
            sec_load_public(curve_server, &server, err, sizeof err)) {
            fprintf(stderr, "moetune-worker: %s\n", err);
            return MT_EXIT_USAGE;
        }
        o.curve = &curve;
        o.curve_server = &server;
    }
    if (wrk_parent_new(&o, &p, err, sizeof err)) {
        fprintf(stderr, "moetune-worker: %s\n", err);
        return MT_EXIT_USAGE;
    }
    char tag[300];
    snprintf(tag, sizeof tag, "worker %s", wrk_parent_id(p));
    mt_log_init(tag, a.level);
    mt_install_stop_handlers();
    code = wrk_parent_run(p);
    if (a.stats) {
        char line[1024];
        wrk_parent_stats_json(p, line, sizeof line);
        printf("%s\n", line);
        fflush(stdout);
    }
    wrk_parent_destroy(&p);
    return code;
}
