/* cmd_common.c - option definitions, argument parser and help for the subcommands. */
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "mt.h"

#define OFF(f) offsetof(cli_opts_t, f)
const cli_opt_t opt_control = {"control", OPT_STR, OFF(control), "EP",
                               "coordinator control endpoint (e.g. tcp://127.0.0.1:5556)"};
const cli_opt_t opt_timeout = {"timeout-ms", OPT_U32, OFF(timeout_ms), "MS", "reply timeout (default 5000)"};
const cli_opt_t opt_sweep = {"sweep", OPT_U64, OFF(sweep), "ID", "only this sweep"};
const cli_opt_t opt_wait = {"wait", OPT_FLAG, OFF(wait), NULL, "block until the sweep(s) finish, showing progress"};
const cli_opt_t opt_json = {"json", OPT_FLAG, OFF(json), NULL, "machine-readable JSON output"};
const cli_opt_t opt_db = {"db", OPT_STR, OFF(db), "FILE", "SQLite database"};
const cli_opt_t opt_out = {"out", OPT_STR, OFF(out), "DIR", "directory for the config files"};
const cli_opt_t opt_shape_filter = {"shape", OPT_STR, OFF(shape), "E=..,N=..[,K=..][,topk=..][,dtype=..]",
                                    "only this shape (fields given must match)"};
const cli_opt_t opt_batch_size = {"batch-size", OPT_U32, OFF(batch_size), "M", "only this batch size"};
const cli_opt_t opt_status = {"status", OPT_STR, OFF(status),
                              "ok|invalid|compile_error|launch_error|wrong_result|timeout|crashed|pruned",
                              "only results with this status"};
const cli_opt_t opt_compare_routing = {
    "compare-routing", OPT_FLAG, OFF(compare_routing), NULL,
    "per config and batch size measured on both: the median on uniform and on captured routing, and their ratio"};
const cli_opt_t opt_near_ties = {"near-ties", OPT_FLAG, OFF(near_ties), NULL,
                                 "per sweep (or --sweep N), the picks within noise of their runner-up: (runner-up - "
                                 "best) / sqrt(sd_best^2 + sd_runner-up^2) under 1, as the manifest flags them"};
const cli_opt_t opt_best = {"best", OPT_FLAG, OFF(best), NULL,
                            "only the pick per (shape, batch size): the lowest-median ok config, among the "
                            "side-by-side re-measures where a decide step or halving made them"};
const cli_opt_t opt_limit = {"limit", OPT_U32, OFF(limit), "N", "at most N rows"};
const cli_opt_t opt_backend = {"backend", OPT_STR, OFF(backend), "sim|cuda|triton",
                               "measurement backend (default: triton when the serving interpreter has torch and Triton, else cuda)"};
const cli_opt_t opt_workers = {"workers", OPT_U32, OFF(workers), "N", "sim workers to run (default 4)"};
const cli_opt_t opt_gpus = {"gpus", OPT_STR, OFF(gpus), "0,1,..",
                            "cuda, triton: GPUs to use, one worker each (default all)"};
const cli_opt_t opt_sim_time_scale = {"sim-time-scale", OPT_STR, OFF(sim_time_scale), "X",
                                      "sim: sleep X times the simulated time (0 = instant)"};
const cli_opt_t opt_sim_faults = {"sim-faults", OPT_STR, OFF(sim_faults), "SPEC",
                                  "sim: fault injection, passed to the workers"};
const cli_opt_t opt_kernel = {"kernel", OPT_STR, OFF(kernel), "sglang|vllm|moetune",
                              "triton: the kernel to tune (default moetune)"};
const cli_opt_t opt_python = {"python", OPT_STR, OFF(python), "PATH",
                              "the interpreter with torch, Triton and the engine (default: a running server's, else python3)"};
const cli_opt_t opt_helper_mem_mb = {"helper-mem-mb", OPT_U32, OFF(helper_mem_mb), "N",
                                     "triton: helper resident memory limit, MiB (default 65536)"};
const cli_opt_t opt_log_level = {"log-level", OPT_STR, OFF(log_level), "LEVEL",
                                 "log level of the coordinator and workers (default info)"};
const cli_opt_t opt_curve_secret = {"curve-secret", OPT_STR, OFF(curve_secret), "FILE",
                                    "CURVE: this client's key pair (.key, from moetune keygen)"};
const cli_opt_t opt_curve_server = {"curve-server", OPT_STR, OFF(curve_server), "FILE",
                                    "CURVE: the coordinator's public key (.pub)"};
const cli_opt_t opt_key_out = {"out", OPT_STR, OFF(out), "DIR", "directory for the key files (created)"};
const cli_opt_t opt_key_name = {"name", OPT_STR, OFF(key_name), "NAME",
                                "file name stem: NAME.key and NAME.pub (default the host name)"};
const cli_opt_t opt_engine = {
    "engine", OPT_STR, OFF(engine), "sglang|vllm",
    "lay out and name the files as this engine finds them (triton results only; tune: sglang,vllm exports both)"};
const cli_opt_t opt_engine_doctor = {"engine", OPT_STR, OFF(engine), "sglang|vllm", "the engine to check (required)"};
const cli_opt_t opt_model = {"model", OPT_STR, OFF(model), "NAME",
                             "model preset (see moetune --help); with --tp [--ep]"};
const cli_opt_t opt_tp = {"tp", OPT_U32, OFF(tp), "N", "tensor parallel size of --model (default 1)"};
const cli_opt_t opt_ep = {"ep", OPT_U32, OFF(ep), "N", "expert parallel size of --model (default 1)"};
const cli_opt_t opt_dtype = {"dtype", OPT_STR, OFF(dtype), "bf16|fp8_w8a8", "dtype of --model (default bf16)"};
const cli_opt_t opt_doctor_shape = {"shape", OPT_STR, OFF(doctor_shape),
                                    "E=..,N=..,K=..,topk=..[,dtype=..][,block_shape=NxK]",
                                    "the shape, instead of --model"};
const cli_opt_t opt_fresh = {"fresh", OPT_FLAG, OFF(fresh), NULL,
                             "measure anew: never resume or reuse an earlier sweep of these shapes"};
const cli_opt_t opt_keep_settings = {"keep-settings", OPT_FLAG, OFF(keep_settings), NULL,
                                     "resume (or reuse) the earlier sweep of these shapes with its own settings"};
const cli_opt_t opt_sweeps = {"sweeps", OPT_STR, OFF(sweeps), "A,B,..",
                              "merge these sweeps: per batch size the best of them"};
const cli_opt_t opt_latest = {"latest", OPT_FLAG, OFF(latest), NULL,
                              "per file, only the newest sweep that measured it"};
const cli_opt_t opt_partial = {"partial", OPT_FLAG, OFF(partial), NULL,
                               "also write files of unfinished or incompletely measured sweeps (marked partial)"};
const cli_opt_t opt_force = {"force", OPT_FLAG, OFF(force), NULL,
                             "replace entries by configs measured slower than the file's"};
const cli_opt_t opt_keep_temp = {"keep-temp", OPT_FLAG, OFF(keep_temp), NULL,
                                 "keep the run directory with the processes' logs"};
const cli_opt_t opt_device_filter = {"device", OPT_STR, OFF(device), "NAME",
                                     "only results of this device name (as stored, e.g. 'NVIDIA H200')"};
const cli_opt_t opt_backend_filter = {"backend", OPT_STR, OFF(backend), "sim|cuda|triton",
                                      "only results of this backend"};
const cli_opt_t opt_threshold = {"threshold", OPT_STR, OFF(threshold), "PCT",
                                 "a slowdown beyond noise counts as a regression above PCT % (default 3)"};
const cli_opt_t opt_compare_to = {"compare-to", OPT_STR, OFF(compare_to), "last|ID",
                                  "with --wait: diff the finished sweep against the previous done sweep of the same "
                                  "spec on the same device (last) or sweep ID; export only when nothing regressed"};
const cli_opt_t opt_nightly_db = {"db", OPT_STR, OFF(db), "FILE",
                                  "with --compare-to: the coordinator's database, read for the diff and the export"};
const cli_opt_t opt_nightly_out = {"out", OPT_STR, OFF(out), "DIR",
                                   "with --compare-to: export the sweep's config files here when nothing regressed"};
const cli_opt_t opt_force_export = {
    "force", OPT_FLAG, OFF(force_export), NULL,
    "with --compare-to: export even when a regression was found (the exit code is still 3)"};
const cli_opt_t opt_heatmap_m = {
    "heatmap-m", OPT_U32, OFF(heatmap_m), "M",
    "batch size of the BLOCK_SIZE_M x BLOCK_SIZE_N heat map (default the sweep's batch size nearest 256)"};
const cli_opt_t opt_report_out = {"o", OPT_STR, OFF(out), "FILE", "the HTML file to write"};

int cli_usage(const cli_cmd_t *cmd, const char *msg) {
    fprintf(stderr, "moetune%s%s: %s\n", cmd ? " " : "", cmd ? cmd->name : "", msg);
    return MT_EXIT_USAGE;
}

int cli_fail(const cli_cmd_t *cmd, const char *msg) {
    fprintf(stderr, "moetune%s%s: %s\n", cmd ? " " : "", cmd ? cmd->name : "", msg);
    return MT_EXIT_FAIL;
}

static const cli_opt_t *find(const cli_cmd_t *cmd, const char *flag) {
    for (size_t i = 0; cmd->opts && cmd->opts[i]; i++)
        if (strcmp(cmd->opts[i]->flag, flag) == 0) return cmd->opts[i];
    return NULL;
}

static void print_opt(FILE *out, const char *flag, const char *metavar, const char *help) {
    char left[128];
    snprintf(left, sizeof left, "%s%s%s%s", strlen(flag) == 1 ? "-" : "--", flag, metavar ? " " : "",
             metavar ? metavar : "");
    if (strlen(left) > 28)
        fprintf(out, "  %s\n  %-28s  %s\n", left, "", help);
    else
        fprintf(out, "  %-28s  %s\n", left, help);
}

void cli_print_help(const cli_cmd_t *cmd, FILE *out) {
    fprintf(out, "usage: moetune %s [options]%s%s\n\n%s\n", cmd->name, cmd->args ? " " : "", cmd->args ? cmd->args : "",
            cmd->summary);
    if (cmd->details) fprintf(out, "\n%s\n", cmd->details);
    fprintf(out, "\noptions:\n");
    for (size_t i = 0; cmd->opts && cmd->opts[i]; i++)
        print_opt(out, cmd->opts[i]->flag, cmd->opts[i]->metavar, cmd->opts[i]->help);
    if (cmd->spec) {
        fprintf(out, "\nsweep options:\n");
        for (size_t i = 0; cli_spec_opt_at(i); i++) {
            const cli_spec_opt_t *s = cli_spec_opt_at(i);
            print_opt(out, s->name, s->metavar, s->help);
        }
    }
    print_opt(out, "help", NULL, "show this help");
}

mt_status_t cli_parse(const cli_cmd_t *cmd, int argc, char **argv, cli_opts_t *o, bool *help, char *err,
                      size_t errlen) {
    *help = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *help = true;
            return MT_OK;
        }
        /* one-letter options are written with one dash: -o FILE */
        bool short_opt = a[0] == '-' && a[1] && a[1] != '-' && a[2] == '\0';
        if (!short_opt && (strncmp(a, "--", 2) != 0 || a[2] == '\0')) {
            if (o->n_pos == cmd->max_pos || o->n_pos == sizeof o->pos / sizeof o->pos[0]) {
                mt_fmt(err, errlen, "unexpected argument '%s'", a);
                return MT_INVAL;
            }
            o->pos[o->n_pos++] = a;
            continue;
        }
        char flag[64];
        const char *val = NULL;
        const char *name = a + (short_opt ? 1 : 2);
        const char *eq = short_opt ? NULL : strchr(name, '=');
        size_t flen = eq ? (size_t)(eq - name) : strlen(name);
        if (flen >= sizeof flag) {
            mt_fmt(err, errlen, "unknown option '%.40s...'", a);
            return MT_INVAL;
        }
        memcpy(flag, name, flen);
        flag[flen] = '\0';
        if (eq) val = eq + 1;
        const cli_opt_t *opt = find(cmd, flag);
        bool is_spec = !opt && cmd->spec && cli_spec_knows(flag);
        if (!opt && !is_spec) {
            mt_fmt(err, errlen, "unknown option '--%s'", flag);
            return MT_INVAL;
        }
        bool takes = is_spec || opt->type != OPT_FLAG;
        if (takes && !val) {
            if (i + 1 >= argc) {
                mt_fmt(err, errlen, "--%s needs a value", flag);
                return MT_INVAL;
            }
            val = argv[++i];
        } else if (!takes && val) {
            mt_fmt(err, errlen, "--%s takes no value", flag);
            return MT_INVAL;
        }
        if (is_spec) {
            int rc = cli_spec_set(o->spec, flag, val, err, errlen);
            if (rc != MT_OK) return rc == MT_NOMEM ? rc : MT_INVAL;
            o->spec_given = true;
            continue;
        }
        void *dst = (char *)o + opt->off;
        switch (opt->type) {
            case OPT_STR:
                if (!*val) {
                    mt_fmt(err, errlen, "--%s: empty value", flag);
                    return MT_INVAL;
                }
                *(const char **)dst = val;
                break;
            case OPT_U32:
                if (mt_parse_u32(val, 1, UINT32_MAX, dst) != MT_OK) {
                    mt_fmt(err, errlen, "--%s %s: not a positive integer", flag, val);
                    return MT_INVAL;
                }
                break;
            case OPT_U64: {
                uint64_t v;
                if (mt_parse_u64(val, &v) != MT_OK || v == 0) {
                    mt_fmt(err, errlen, "--%s %s: not a positive integer", flag, val);
                    return MT_INVAL;
                }
                *(uint64_t *)dst = v;
                break;
            }
            case OPT_FLAG:
                *(bool *)dst = true;
                break;
        }
    }
    if (o->n_pos < cmd->min_pos) {
        mt_fmt(err, errlen, "missing argument%s: %s", cmd->min_pos > 1 ? "s" : "", cmd->args ? cmd->args : "");
        return MT_INVAL;
    }
    return MT_OK;
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
    size_t len = p[0] < 0x80             ? 1
                 : (p[0] & 0xE0) == 0xC0 ? 2
                 : (p[0] & 0xF0) == 0xE0 ? 3
                 : (p[0] & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || len > n) return 0;
    uint32_t cp = len == 1 ? p[0] : len == 2 ? (p[0] & 0x1Fu) : len == 3 ? (p[0] & 0x0Fu) : (p[0] & 0x07u);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

json_t *cli_json_text(const char *text) {
    const unsigned char *t = (const unsigned char *)(text ? text : "");
    size_t n = strlen((const char *)t);
    json_t *v = json_stringn((const char *)t, n);
    if (v) return v;
    char *buf = mt_malloc(n * 4 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(t + i, n - i);
        if (k) {
            memcpy(buf + o, t + i, k);
            o += k;
            i += k;
        } else {
            o += (size_t)snprintf(buf + o, 5, "\\x%02X", t[i]);
            i++;
        }
    }
    buf[o] = '\0';
    v = json_stringn(buf, o);
    free(buf);
    return v;
}

bool cli_json_incomplete = false;

void cli_json_append(json_t *arr, json_t *v) {
    if (!v || json_array_append_new(arr, v) != 0) cli_json_incomplete = true;
}

void cli_print_json(FILE *out, json_t *v) {
    char *s = v ? json_dumps(v, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
    if (s) {
        fprintf(out, "%s\n", s);
    } else if (!cli_json_incomplete) {
        /* said once; main() turns the exit status into a failure */
        fprintf(stderr, "moetune: the JSON output could not be built (out of memory or a value that is not text)\n");
    }
    if (!s) cli_json_incomplete = true;
    free(s);
    json_decref(v);
}

void cli_say_queued_behind(const char *cmd_name, const uint64_t *ids, size_t n) {
    if (!n) return;
    fprintf(stderr, "moetune %s: queued behind running sweep%s", cmd_name, n == 1 ? "" : "s");
    for (size_t i = 0; i < n && i < 16; i++) fprintf(stderr, "%s%llu", i ? ", " : " ", (unsigned long long)ids[i]);
    fprintf(stderr, "%s, measured first (moetune status shows them; moetune cancel ID drops one)\n",
            n > 16 ? " ..." : "");
}
