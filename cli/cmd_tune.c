/* cmd_tune.c - one-machine mode: run a coordinator and local workers, tune, export.
 *
 * The processes are run by the supervisor (supervise.h): workers are stopped before the
 * coordinator, and the run folder with their logs is removed after a clean run and kept
 * (and named) after a failure. The sweep is followed by the loop that submit --wait and
 * status --wait use (cli_follow), with tune's checks of its children and workers.
 *
 * Resume: every result is committed as it arrives. When the same command is run again
 * on the same database, the still-running sweep with the same spec is followed
 * instead of submitting a new one, so only the missing measurements are made.
 */
#include <jansson.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "cmd.h"
#include "engine_check.h"
#include "engines.h"
#include "mt.h"
#include "progress.h"
#include "query.h"
#include "serving.h"
#include "states.h"
#include "supervise.h"

#define TUNE_SUBMIT_TIMEOUT_MS 60000 /* planning a large sweep on a loaded machine */
#define TUNE_HELLO_MS 30000          /* the workers' start (a triton helper imports torch) */
#define TUNE_STOP_GRACE_MS 3000      /* an interrupt after the last commit: wait this long for "done" */
#define TUNE_FILTER_WARN_MS 10000    /* no worker may measure the sweep for this long: say so */
#define TUNE_POLL_MS 500
#define TUNE_SIM_DEVICE "NVIDIA H200" /* the sim workers' device (worker/backend_sim.c, no --sim-device) */

static int check_writable_file(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            mt_fmt(err, errlen, "--db %s is not a regular file", path);
            return MT_INVAL;
        }
        if (access(path, R_OK | W_OK) != 0) {
            mt_fmt(err, errlen, "--db %s: %s", path, strerror(errno));
            return MT_INVAL;
        }
        return MT_OK;
    }
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    if (access(dir, W_OK | X_OK) != 0) {
        mt_fmt(err, errlen, "--db %s: cannot create it in %s: %s", path, dir, strerror(errno));
        return MT_INVAL;
    }
    return MT_OK;
}

static int check_out_dir(const char *out, char *err, size_t errlen) {
    char why[300];
    if (mt_mkdirs(out, why, sizeof why) != MT_OK) {
        mt_fmt(err, errlen, "--out %s: %s", out, why);
        return MT_INVAL;
    }
    if (access(out, W_OK | X_OK) != 0) {
        mt_fmt(err, errlen, "--out %s: %s", out, strerror(errno));
        return MT_INVAL;
    }
    return MT_OK;
}

/* The sweeps of the database that name the same target (spec.h): the candidates for a
 * resume (running) or a reuse (done), newest last. */
#define MAX_CANDIDATES 32
typedef struct {
    uint64_t id;
    bool running;
    uint64_t planned;
    Moetune__SweepSpec *spec; /* unpacked, owned */
} cand_t;

typedef struct {
    const Moetune__SweepSpec *want;
    cand_t c[MAX_CANDIDATES];
    size_t n;
} cands_t;

static void cands_clear(cands_t *cs) {
    for (size_t i = 0; i < cs->n; i++) moetune__sweep_spec__free_unpacked(cs->c[i].spec, NULL);
    cs->n = 0;
}

static mt_status_t collect_cand(void *vctx, const dbq_sweep_t *s) {
    cands_t *cs = vctx;
    bool running = wire_sweep_is(s->state, WIRE_SWEEP_RUNNING);
    if (!running && !wire_sweep_is(s->state, WIRE_SWEEP_DONE)) return 0;
    Moetune__SweepSpec *have = moetune__sweep_spec__unpack(NULL, s->spec_len, s->spec);
    if (!have) return 0;
    if (!cli_spec_same_target(cs->want, have)) {
        moetune__sweep_spec__free_unpacked(have, NULL);
        return 0;
    }
    if (cs->n == MAX_CANDIDATES) { /* keep the newest */
        moetune__sweep_spec__free_unpacked(cs->c[0].spec, NULL);
        memmove(&cs->c[0], &cs->c[1], (MAX_CANDIDATES - 1) * sizeof cs->c[0]);
        cs->n--;
    }
    cs->c[cs->n++] = (cand_t){s->id, running, s->results_planned, have};
    return 0;
}

/* Fills cs with the running and done sweeps of db that have spec's target. */
static void find_candidates(const char *db, const Moetune__SweepSpec *spec, cands_t *cs) {
    char err[300];
    dbq_t *q = NULL;
    cs->want = spec;
    cs->n = 0;
    if (access(db, F_OK) != 0 || dbq_open(db, &q, err, sizeof err) != MT_OK) return;
    dbq_sweeps(q, NULL, collect_cand, cs, err, sizeof err);
    dbq_close(&q);
}

/* What measures here: one (GPU, backend, compiler, kernel, versions) of a local worker. */
#define MAX_KINDS 8
typedef struct {
    char gpu[128], backend[16], compiler[48], kernel_hash[80], versions[256];
    uint64_t rows; /* rows of the sweep being checked measured by this kind */
} kind_t;

typedef struct {
    kind_t k[MAX_KINDS];
    size_t n;
} kinds_t;

static void kinds_from(const Moetune__StatusReply *sr, kinds_t *ks) {
    ks->n = 0;
    for (size_t i = 0; i < sr->n_workers; i++) {
        const Moetune__WorkerInfo *w = sr->workers[i];
        if (!w->state || strcmp(w->state, "dead") == 0 || !w->gpu) continue;
        kind_t k;
        memset(&k, 0, sizeof k);
        snprintf(k.gpu, sizeof k.gpu, "%s", w->gpu->name ? w->gpu->name : "");
        snprintf(k.backend, sizeof k.backend, "%s", w->backend ? w->backend : "");
        snprintf(k.compiler, sizeof k.compiler, "%s", w->compiler ? w->compiler : "");
        snprintf(k.kernel_hash, sizeof k.kernel_hash, "%s", w->kernel_hash ? w->kernel_hash : "");
        snprintf(k.versions, sizeof k.versions, "%s", w->versions ? w->versions : "");
        bool seen = false;
        for (size_t j = 0; j < ks->n; j++)
            seen = seen ||
                   (strcmp(ks->k[j].gpu, k.gpu) == 0 && strcmp(ks->k[j].backend, k.backend) == 0 &&
                    strcmp(ks->k[j].compiler, k.compiler) == 0 && strcmp(ks->k[j].kernel_hash, k.kernel_hash) == 0 &&
                    strcmp(ks->k[j].versions, k.versions) == 0);
        if (!seen && ks->n < MAX_KINDS) ks->k[ks->n++] = k;
    }
}

static mt_status_t count_kind_rows(void *vctx, const dbq_result_t *r) {
    kinds_t *ks = vctx;
    for (size_t j = 0; j < ks->n; j++) {
        kind_t *k = &ks->k[j];
        if (strcmp(k->gpu, r->device_name) == 0 && strcmp(k->backend, r->backend) == 0 &&
            strcmp(k->compiler, r->compiler) == 0 && strcmp(k->kernel_hash, r->kernel_hash) == 0 &&
            strcmp(k->versions, r->versions) == 0)
            k->rows++;
    }
    return 0;
}

/* True when done sweep c holds its whole plan measured by every local kind: the same
 * device and kernel already answered it. */
static bool covered_here(const char *db, const cand_t *c, kinds_t *ks) {
    char err[300];
    dbq_t *q = NULL;
    if (ks->n == 0 || c->planned == 0 || dbq_open(db, &q, err, sizeof err) != MT_OK) return false;
    dbq_filter_t f;
    memset(&f, 0, sizeof f);
    f.sweep_id = c->id;
    for (size_t j = 0; j < ks->n; j++) ks->k[j].rows = 0;
    int rc = dbq_results(q, &f, count_kind_rows, ks, err, sizeof err);
    dbq_close(&q);
    if (rc != MT_OK) return false;
    for (size_t j = 0; j < ks->n; j++)
        if (ks->k[j].rows != c->planned) return false;
    return true;
}

/* Among the running (or the done and here completely measured) candidates, newest
 * first: sets *same_id to one whose expanded plan and settings equal spec's, if any;
 * returns it, else the newest that differs (its differences in diff), else NULL. */
static const cand_t *pick_candidate(const cands_t *cs, const Moetune__SweepSpec *spec, bool running, const char *db,
                                    kinds_t *ks, uint64_t *same_id, char *diff, size_t len) {
    const cand_t *differs = NULL;
    char why[1000];
    *same_id = 0;
    for (size_t i = cs->n; i-- > 0;) {
        const cand_t *c = &cs->c[i];
        if (c->running != running || (!running && !covered_here(db, c, ks))) continue;
        bool same = false;
        int rc = cli_spec_compare(c->spec, spec, &same, why, sizeof why);
        if (rc == MT_OK && same) {
            *same_id = c->id;
            return c;
        }
        if (!differs) {
            differs = c;
            snprintf(diff, len, "%s", why);
        }
    }
    return differs;
}

/* Lists the GPUs of the live workers in sr ("2 x NVIDIA H200 (sim)"), or "none". */
static void describe_fleet(const Moetune__StatusReply *sr, char *buf, size_t len) {
    kinds_t ks;
    kinds_from(sr, &ks);
    size_t used = 0;
    buf[0] = '\0';
    for (size_t j = 0; j < ks.n && used + 1 < len; j++) {
        uint32_t n = 0;
        for (size_t i = 0; i < sr->n_workers; i++) {
            const Moetune__WorkerInfo *w = sr->workers[i];
            n += w->state && strcmp(w->state, "dead") != 0 && w->gpu && w->gpu->name &&
                 strcmp(w->gpu->name, ks.k[j].gpu) == 0 && w->backend && strcmp(w->backend, ks.k[j].backend) == 0;
        }
        int k = snprintf(buf + used, len - used, "%s%u x %s (%s)", j ? ", " : "", n, ks.k[j].gpu, ks.k[j].backend);
        if (k < 0) break;
        used += (size_t)k;
    }
    if (!buf[0]) snprintf(buf, len, "none");
}

/* True when a live worker of sr may measure spec (its backend and device filter, as the
 * scheduler matches them). */
static bool any_worker_matches(const Moetune__StatusReply *sr, const Moetune__SweepSpec *spec) {
    for (size_t i = 0; i < sr->n_workers; i++) {
        const Moetune__WorkerInfo *w = sr->workers[i];
        if (!w->state || strcmp(w->state, "dead") == 0) continue;
        if (spec->backend && *spec->backend && (!w->backend || strcmp(w->backend, spec->backend) != 0)) continue;
        const char *gpu = w->gpu && w->gpu->name ? w->gpu->name : "";
        if (!spec->device_filter || !*spec->device_filter || strstr(gpu, spec->device_filter)) return true;
    }
    return false;
}

/* Exit code for a fatal child failure in why: a worker that refused its arguments (exit
 * 2) is the user's input, anything else a failure. */
static int worker_exit_code(const cli_cmd_t *cmd, const sup_t *r, const char *why) {
    return sup_worker_refused_args(r) ? cli_usage(cmd, why) : cli_fail(cmd, why);
}

/* What tune checks between the status calls of its follow loop. */
typedef struct {
    const cli_cmd_t *cmd;
    sup_t *run;
    const Moetune__SweepSpec *spec;
    const char *backend;
    uint64_t sweep, matched_ms;
    bool warned, keep_dir;
} tune_watch_t;

/* cli_follow's check: the children before each status call, then whether a connected
 * worker may measure the sweep (a warning after TUNE_FILTER_WARN_MS without one). */
static int tune_check(void *ctx, const Moetune__StatusReply *sr, cli_progress_t *prog) {
    tune_watch_t *tw = ctx;
    char err[700];
    if (!sr) {
        if (sup_check(tw->run, err, sizeof err) == MT_OK) return MT_EXIT_OK;
        tw->keep_dir = true;
        return worker_exit_code(tw->cmd, tw->run, err);
    }
    if (any_worker_matches(sr, tw->spec)) {
        tw->matched_ms = mt_now_ms();
    } else if (!tw->warned && mt_now_ms() - tw->matched_ms > TUNE_FILTER_WARN_MS) {
        char fleet[400];
        describe_fleet(sr, fleet, sizeof fleet);
        cli_progress_finish(prog, NULL, 0);
        fprintf(stderr,
                "moetune tune: warning: for %u s no connected worker may measure sweep %llu "
                "(device filter '%s', backend %s); connected: %s\n",
                TUNE_FILTER_WARN_MS / 1000, (unsigned long long)tw->sweep,
                tw->spec->device_filter ? tw->spec->device_filter : "", tw->backend, fleet);
        tw->warned = true;
    }
    return MT_EXIT_OK;
}

/* One export per engine of "sglang,vllm" (a sweep measured for both), else one. */
static int export_engines(const cli_cmd_t *cmd, const char *db, const char *out, uint64_t sweep, const char *engine,
                          bool json, bool force) {
    if (!engine || !strchr(engine, ',')) return cli_run_export(cmd, db, out, sweep, engine, json, force);
    int code = MT_EXIT_OK;
    for (size_t i = 0; i < KRN_ENGINE_COUNT && code == MT_EXIT_OK; i++)
        if (krn_engines_has(engine, krn_engine_get(i)->name))
            code = cli_run_export(cmd, db, out, sweep, krn_engine_get(i)->name, json, force);
    return code;
}

/* One folder and, for an engine, the line that points it there ("" when none). compiler ""
 * (no worker said hello) names the folder above the compiler's. */
static void where_one(const char *out, const char *abs, const char *engine, const char *compiler, char *dir,
                      size_t dlen, char *point, size_t plen) {
    point[0] = '\0';
    const krn_engine_t *e = krn_engine_find(engine);
    if (e && e->id == KRN_ENGINE_VLLM) {
        snprintf(dir, dlen, "%s", out);
        mt_fmt(point, plen, "%s=%s", e->config_env, abs);
    } else if (e) {
        mt_fmt(dir, dlen, "%s/configs%s%s", out, compiler[0] ? "/" : "", compiler);
        mt_fmt(point, plen, "%s=%s", e->config_env, abs);
    } else {
        mt_fmt(dir, dlen, "%s%s%s", out, compiler[0] ? "/" : "", compiler);
    }
}

/* Where the files went, and the line that points the engine at them; with --json a JSON
 * line, so that stdout stays JSON. compiler is the workers' ("triton_3_6_0"). */
static void print_where(const char *out, bool sim, bool json, const char *engines, const char *compiler) {
    char abs[PATH_MAX], dir[KRN_ENGINE_COUNT][PATH_MAX + 64], point[KRN_ENGINE_COUNT][PATH_MAX + 32];
    if (!realpath(out, abs)) snprintf(abs, sizeof abs, "%s", out);
    const char *list[KRN_ENGINE_COUNT] = {NULL};
    size_t n = 1;
    if (!sim && engines && strchr(engines, ',')) {
        n = 0;
        for (size_t i = 0; i < KRN_ENGINE_COUNT; i++)
            if (krn_engines_has(engines, krn_engine_get(i)->name)) list[n++] = krn_engine_get(i)->name;
    } else if (!sim) {
        list[0] = engines;
    }
    for (size_t i = 0; i < n; i++) {
        if (sim)
            mt_fmt(dir[i], sizeof dir[i], "%s/sim", out);
        else
            where_one(out, abs, list[i], compiler, dir[i], sizeof dir[i], point[i], sizeof point[i]);
        if (sim) point[i][0] = '\0';
    }
    if (json) {
        json_t *dirs = json_array(), *points = json_array();
        for (size_t i = 0; i < n; i++) {
            json_array_append_new(dirs, json_string(dir[i]));
            if (point[i][0]) json_array_append_new(points, json_string(point[i]));
        }
        cli_print_json(stdout, json_pack("{s:s, s:o, s:o}", "out", out, "dirs", dirs, "point_engine", points));
        fflush(stdout);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (sim)
            printf("config files are in %s (simulated numbers, not for engines)\n", dir[i]);
        else if (!list[i])
            printf("config files are in %s: for moetune's CUDA kernel; no engine reads them\n", dir[i]);
        else
            printf("config files are in %s\nrun %s with %s\n", dir[i], krn_engine_find(list[i])->display, point[i]);
    }
    fflush(stdout);
}

/* Appends "flag value" to the worker arguments args[*n]; nothing when value is NULL. */
static void add_arg(char **args, int *n, const char *flag, const char *value) {
    if (!value) return;
    args[(*n)++] = (char *)flag;
    args[(*n)++] = (char *)value;
}

/* The serving interpreter's say (serving.h, srv_decide): without --backend, the backend,
 * kernel, engine and interpreter; with --kernel sglang|vllm and no --python, the
 * interpreter. Fills the options it decides (pointing into dec) and says so on stderr.
 * On a refusal, *code is the exit code. */
static int decide_backend(const cli_cmd_t *cmd, cli_opts_t *o, srv_decision_t *dec, int *code) {
    bool implied = !o->backend && (o->kernel || o->python || o->engine || o->helper_mem_mb);
    bool engine_kernel = krn_engine_find(o->kernel) != NULL;
    bool triton = implied || (o->backend && strcmp(o->backend, "triton") == 0);
    char helper[PATH_MAX], err[3200];
    if (o->backend && !triton) return MT_OK;
    if (triton && (o->python || !engine_kernel)) {
        if (!o->backend) o->backend = "triton";
        return MT_OK;
    }
    /* no GPU: nothing to decide, cuda says so as before */
    if (!triton && !o->gpus && sup_count_gpus() == 0) return MT_OK;
    if (mt_helper_path(helper, sizeof helper, err, sizeof err) != MT_OK) {
        *code = cli_fail(cmd, err);
        return MT_NOTFOUND;
    }
    srv_decide_opts_t so = {
        .helper = helper, .python = o->python, .kernel = o->kernel, .engine = o->engine, .triton_given = triton};
    if (srv_decide(&so, dec, err, sizeof err) != MT_OK) {
        *code = cli_fail(cmd, err);
        return MT_NOTFOUND;
    }
    fprintf(stderr, "moetune tune: %s\n", dec->why);
    o->backend = dec->backend;
    if (strcmp(dec->backend, "triton") != 0) return MT_OK;
    if (!o->python) o->python = dec->python;
    if (!o->kernel) o->kernel = dec->kernel;
    if (!o->engine) o->engine = dec->engine;
    return MT_OK;
}

/* One tune run: what the phases below share. A phase returns TUNE_GO to go on, TUNE_OUT
 * when the run ends with t->code, or TUNE_INTERRUPTED on a stop request. */
typedef struct {
    const cli_cmd_t *cmd;
    cli_opts_t *o;
    int code;
    char err[700];
    sup_t *r;
    cli_client_t *c;
    wire_env_t *reply;
    bool keep_dir;
    char compiler[48]; /* the workers' (the export's folder) */
    uint64_t sweep, resume, replace, reuse;
    cands_t cands;
    char diff[1000];
    const Moetune__SweepSpec *spec, *follow_spec;
    const char *db, *out, *log_level, *backend, *engine;
    bool sim, triton;
    char mem_mb[16];
} tune_t;

enum { TUNE_GO, TUNE_OUT, TUNE_INTERRUPTED };

/* Ends the run with code (one of cli_usage's or cli_fail's). */
static int tune_end(tune_t *t, int code) {
    t->code = code;
    return TUNE_OUT;
}

/* The GPUs to run a worker on: --workers sim slots, --gpus, or every GPU found. */
static int tune_pick_gpus(tune_t *t, uint32_t *gpus, uint32_t *n_workers) {
    const cli_cmd_t *cmd = t->cmd;
    cli_opts_t *o = t->o;
    if (t->sim) {
        *n_workers = o->workers ? o->workers : 4;
        if (*n_workers > SUP_MAX_WORKERS) return tune_end(t, cli_usage(cmd, "--workers: at most 64"));
        for (uint32_t i = 0; i < *n_workers; i++) gpus[i] = i;
    } else if (o->gpus) {
        uint32_t *ids = NULL;
        size_t n = 0;
        char why[200];
        if (mt_parse_u32_list(o->gpus, 0, 1023, &ids, &n, why, sizeof why) != MT_OK || n > SUP_MAX_WORKERS) {
            mt_fmt(t->err, sizeof t->err, "--gpus %s: %s", o->gpus, n > SUP_MAX_WORKERS ? "too many GPUs" : why);
            free(ids);
            return tune_end(t, cli_usage(cmd, t->err));
        }
        memcpy(gpus, ids, n * sizeof *ids);
        *n_workers = (uint32_t)n;
        free(ids);
    } else {
        *n_workers = sup_count_gpus();
        if (*n_workers == 0) return tune_end(t, cli_fail(cmd, "no GPU found; use --backend sim"));
        if (*n_workers > SUP_MAX_WORKERS) *n_workers = SUP_MAX_WORKERS;
        for (uint32_t i = 0; i < *n_workers; i++) gpus[i] = i;
    }
    return TUNE_GO;
}

/* The engine the guard of a sim sweep stands for: the spec's first, else the default engine. */
static const char *sim_engine(const Moetune__SweepSpec *spec) {
    return spec->n_engines && spec->engines[0] ? spec->engines[0] : krn_engine_get(0)->name;
}

/* The ship guard's incumbent from engine's answer own in python (the config folder, Triton
 * version and device its probe reports; a sim sweep's device is the simulated one). */
static int tune_engine_incumbent(tune_t *t, const eng_own_t *own, exp_engine_t engine, const char *python) {
    char who[PATH_MAX + 160], why[PATH_MAX + 800];
    mt_fmt(who, sizeof who, "%s %s in %s", exp_engine_name(engine), own->version[0] ? own->version : "?", python);
    if (own->engine_error[0])
        snprintf(why, sizeof why, "%s", own->engine_error);
    else if (own->why[0] && !own->config_dir[0])
        snprintf(why, sizeof why, "%s", own->why);
    else
        mt_fmt(why, sizeof why, "the probe in %s named no config folder of %s", python, exp_engine_name(engine));
    const char *device = t->sim ? TUNE_SIM_DEVICE : own->device[0] ? own->device : NULL;
    cli_guard_engine_t e = {engine, own->config_dir, own->triton, device, who, why};
    return cli_spec_engine_incumbent(t->o->spec, &e, stderr);
}

/* The engine in the interpreter, asked before any GPU time: for triton, the files the sweep is
 * for must be names the engine reads; without --baseline, the file it would load otherwise is
 * the ship guard's incumbent (a sim sweep asks only with --python). */
static int tune_ask_engine(tune_t *t) {
    static const exp_engine_t k_eng[2] = {EXP_ENGINE_SGLANG, EXP_ENGINE_VLLM}; /* eng_check_spec's order */
    cli_opts_t *o = t->o;
    bool want = cli_spec_engine_incumbent_wanted(o->spec) && (t->triton || (t->sim && o->python));
    if (!t->triton && !want) return TUNE_GO;
    const char *python = o->python ? o->python : "python3";
    const char *engines = t->engine ? t->engine : sim_engine(t->spec);
    eng_own_t own[2];
    int rc = eng_check_spec(python, engines, t->spec, t->triton, own, t->err, sizeof t->err);
    for (size_t k = 0; k < 2; k++) {
        if (rc == MT_OK && want && krn_engines_has(engines, exp_engine_name(k_eng[k])))
            rc = tune_engine_incumbent(t, &own[k], k_eng[k], python);
        eng_own_clear(&own[k]);
    }
    if (rc == MT_NOMEM) mt_fmt(t->err, sizeof t->err, "out of memory");
    return rc == MT_OK ? TUNE_GO : tune_end(t, cli_fail(t->cmd, t->err));
}

/* ---- validate everything before starting anything */
static int tune_validate(tune_t *t) {
    const cli_cmd_t *cmd = t->cmd;
    cli_opts_t *o = t->o;
    char *err = t->err;
    const size_t errlen = sizeof t->err;
    const char *backend = t->backend;
    bool sim = t->sim = strcmp(backend, "sim") == 0;
    bool triton = t->triton = strcmp(backend, "triton") == 0;
    if (!sim && !triton && strcmp(backend, "cuda") != 0)
        return tune_end(t, cli_usage(cmd, "--backend: not one of sim, cuda, triton"));
    if (!triton && (o->kernel || o->helper_mem_mb || o->engine))
        return tune_end(t, cli_usage(cmd, "--kernel, --helper-mem-mb and --engine apply only with --backend triton"));
    if (!triton && !sim && o->python)
        return tune_end(t, cli_usage(cmd, "--python applies only with --backend triton or sim"));
    /* Triton results go out in an engine's layout: the kernel's own engine unless told;
     * "sglang,vllm" measures what either engine can run once and exports both layouts. */
    const char *engine = o->engine;
    if (triton && !engine) engine = krn_engine_find(o->kernel) ? o->kernel : krn_engine_get(0)->name;
    t->engine = engine;
    if (engine && !krn_engines_valid(engine))
        return tune_end(t, cli_usage(cmd, "--engine: not one of sglang, vllm, sglang,vllm"));
    /* The sweep is for this backend's kernel and these engines: its workers alone measure it,
     * by its static rules. */
    if (cli_spec_set(o->spec, "worker-backend", backend, err, errlen) != MT_OK ||
        (engine && cli_spec_set(o->spec, "engines", engine, err, errlen) != MT_OK) ||
        cli_spec_finish(o->spec, true, err, errlen) != MT_OK)
        return tune_end(t, cli_usage(cmd, err));
    t->spec = cli_spec_get(o->spec);
    if (o->kernel && !krn_engine_find(o->kernel) && strcmp(o->kernel, "moetune"))
        return tune_end(t, cli_usage(cmd, "--kernel: not one of sglang, vllm, moetune"));
    if (o->python && !*o->python) return tune_end(t, cli_usage(cmd, "--python: empty"));
    /* the export asks the engine in the interpreter that measured (engine_check.h) */
    if (o->python) setenv("MOETUNE_PYTHON", o->python, 1);
    snprintf(t->mem_mb, sizeof t->mem_mb, "%u", o->helper_mem_mb);
    if (!sim && (o->workers || o->sim_time_scale || o->sim_faults))
        return tune_end(t,
                        cli_usage(cmd, "--workers, --sim-time-scale and --sim-faults apply only with --backend sim"));
    if (sim && o->gpus) return tune_end(t, cli_usage(cmd, "--gpus applies only with --backend cuda or triton"));
    if (o->sim_time_scale) {
        double x;
        if (mt_parse_double(o->sim_time_scale, &x) != MT_OK || x < 0)
            return tune_end(t, cli_usage(cmd, "--sim-time-scale: not a number >= 0"));
    }
    mt_log_level_t lvl;
    if (mt_log_parse_level(t->log_level, &lvl) != MT_OK)
        return tune_end(t, cli_usage(cmd, "--log-level: not one of error, warn, info, debug"));
    if (tune_ask_engine(t) != TUNE_GO) return TUNE_OUT;
    if (check_writable_file(t->db, err, errlen) != MT_OK) return tune_end(t, cli_usage(cmd, err));
    if (check_out_dir(t->out, err, errlen) != MT_OK) return tune_end(t, cli_usage(cmd, err));
    uint32_t n_workers = 0, gpus[SUP_MAX_WORKERS];
    if (tune_pick_gpus(t, gpus, &n_workers) != TUNE_GO) return TUNE_OUT;
    if (sup_new(&t->r, err, errlen) != MT_OK) return tune_end(t, cli_fail(cmd, err));
    memcpy(t->r->gpus, gpus, n_workers * sizeof *gpus);
    t->r->n_workers = n_workers;
    if (o->fresh && o->keep_settings)
        return tune_end(t, cli_usage(cmd, "--fresh and --keep-settings exclude each other"));
    return TUNE_GO;
}

/* Resume only the same work: the newest interrupted sweep of this target, when its
 * expanded plan and settings are equal, or when the user keeps its settings. */
static int tune_pick_resume(tune_t *t) {
    const cand_t *running = pick_candidate(&t->cands, t->spec, true, NULL, NULL, &t->resume, t->diff, sizeof t->diff);
    if (t->resume) {
        t->follow_spec = t->spec;
    } else if (running && t->o->keep_settings) {
        t->resume = running->id;
        t->follow_spec = running->spec;
    } else if (running && t->o->fresh) {
        t->replace = running->id;
    } else if (running) {
        mt_fmt(t->err, sizeof t->err,
               "sweep %llu in %s (interrupted, same shapes) was planned with other settings: %s. "
               "Run again with --fresh to measure with the new settings (sweep %llu is cancelled, its "
               "results stay), or with --keep-settings to resume it as it was",
               (unsigned long long)running->id, t->db, t->diff, (unsigned long long)running->id);
        return tune_end(t, cli_usage(t->cmd, t->err));
    }
    return TUNE_GO;
}

/* ---- start the coordinator; cancel the interrupted sweep that --fresh replaces */
static int tune_start_coordinator(tune_t *t) {
    const cli_cmd_t *cmd = t->cmd;
    mt_install_stop_handlers();
    if (sup_open_dir(t->r, t->err, sizeof t->err) != MT_OK ||
        sup_start_coordinator(t->r, t->db, t->log_level, t->err, sizeof t->err) != MT_OK)
        return tune_end(t, cli_fail(cmd, t->err));
    if (cli_client_new(t->r->control_ep, 500, &t->c, t->err, sizeof t->err) != MT_OK)
        return tune_end(t, cli_fail(cmd, t->err));
    for (uint64_t deadline = mt_now_ms() + 15000;;) {
        if (mt_stop_requested) return TUNE_INTERRUPTED;
        int status;
        if (sup_coordinator_exited(t->r, &status)) {
            sup_describe_exit(&t->r->coord, t->err, sizeof t->err);
            t->keep_dir = true;
            /* 2 = it refused its arguments: the database path the user gave. */
            return tune_end(t, WIFEXITED(status) && WEXITSTATUS(status) == 2 ? cli_usage(cmd, t->err)
                                                                             : cli_fail(cmd, t->err));
        }
        wire_free(&t->reply);
        if (cli_client_status(t->c, 0, &t->reply, t->err, sizeof t->err) == MT_OK) break;
        if (mt_now_ms() > deadline) {
            t->keep_dir = true;
            return tune_end(t, cli_fail(cmd, "the coordinator did not answer within 15 s"));
        }
    }
    /* It answers: from now on a slow reply is waited for, not taken for a missing coordinator. */
    cli_client_set_timeout(t->c, CLI_CLIENT_DEFAULT_TIMEOUT_MS);

    /* The interrupted sweep that --fresh replaces: cancelled before a worker can take its jobs. */
    if (t->replace) {
        wire_free(&t->reply);
        if (cli_client_cancel(t->c, t->replace, &t->reply, t->err, sizeof t->err) != MT_OK)
            return tune_end(t, cli_fail(cmd, t->err));
        fprintf(stderr, "sweep %llu (interrupted, other settings) cancelled; its results stay in %s\n",
                (unsigned long long)t->replace, t->db);
    }
    return TUNE_GO;
}

/* ---- start the workers */
static int tune_start_workers(tune_t *t) {
    cli_opts_t *o = t->o;
    char *args[24];
    int a = 0;
    add_arg(args, &a, "--backend", t->backend);
    add_arg(args, &a, "--log-level", t->log_level);
    add_arg(args, &a, "--sim-time-scale", o->sim_time_scale);
    add_arg(args, &a, "--sim-faults", o->sim_faults);
    add_arg(args, &a, "--kernel", o->kernel);
    add_arg(args, &a, "--python", t->triton ? o->python : NULL); /* sim: only the engine was asked */
    if (o->helper_mem_mb) add_arg(args, &a, "--helper-mem-mb", t->mem_mb);
    args[a] = NULL;
    for (uint32_t i = 0; i < t->r->n_workers; i++) {
        if (sup_start_worker(t->r, i, args, t->err, sizeof t->err) != MT_OK)
            return tune_end(t, cli_fail(t->cmd, t->err));
    }
    return TUNE_GO;
}

/* ---- wait for the workers' Hellos: what measures here decides a reuse, which exports the
 * sweep that measured it and ends the run */
static int tune_wait_workers(tune_t *t) {
    const cli_cmd_t *cmd = t->cmd;
    cli_opts_t *o = t->o;
    if (!t->follow_spec) t->follow_spec = t->spec;
    for (uint64_t deadline = mt_now_ms() + TUNE_HELLO_MS;;) {
        if (mt_stop_requested) return TUNE_INTERRUPTED;
        if (sup_check(t->r, t->err, sizeof t->err) != MT_OK) {
            t->keep_dir = true;
            return tune_end(t, worker_exit_code(cmd, t->r, t->err));
        }
        uint32_t started = sup_workers_running(t->r);
        wire_free(&t->reply);
        if (cli_client_status(t->c, 0, &t->reply, t->err, sizeof t->err) == MT_OK &&
            cli_live_workers(t->reply->status_reply) >= started)
            break;
        if (mt_now_ms() > deadline) break;
        usleep(100 * 1000);
    }
    if (!t->reply || !t->reply->status_reply || cli_live_workers(t->reply->status_reply) == 0) return TUNE_GO;
    const Moetune__StatusReply *sr = t->reply->status_reply;
    char fleet[400];
    describe_fleet(sr, fleet, sizeof fleet);
    /* Every worker of this run has said hello: none will ever match. */
    if (!any_worker_matches(sr, t->follow_spec)) {
        mt_fmt(t->err, sizeof t->err, "no worker here may measure the sweep: --device-filter '%s' matches none of %s",
               t->follow_spec->device_filter ? t->follow_spec->device_filter : "", fleet);
        return tune_end(t, cli_usage(cmd, t->err));
    }
    kinds_t kinds;
    kinds_from(sr, &kinds);
    if (kinds.n) snprintf(t->compiler, sizeof t->compiler, "%s", kinds.k[0].compiler);
    const cand_t *done = NULL;
    if (!t->resume && !t->replace && !o->fresh)
        done = pick_candidate(&t->cands, t->spec, false, t->db, &kinds, &t->reuse, t->diff, sizeof t->diff);
    if (!t->reuse && done && o->keep_settings) {
        t->reuse = done->id;
    } else if (!t->reuse && done) {
        mt_fmt(t->err, sizeof t->err,
               "sweep %llu in %s measured these shapes on %s with other settings: %s. Run again with "
               "--fresh to measure with the new settings, or with --keep-settings to export sweep %llu "
               "as it is",
               (unsigned long long)done->id, t->db, fleet, t->diff, (unsigned long long)done->id);
        return tune_end(t, cli_usage(cmd, t->err));
    }
    if (!t->reuse) return TUNE_GO;
    fprintf(stderr,
            "sweep %llu already measured this on %s with the same kernel%s: nothing to measure, its files "
            "are exported again (--fresh measures again)\n",
            (unsigned long long)t->reuse, fleet, o->keep_settings ? "" : " and settings");
    sup_stop_workers(t->r);
    t->sweep = t->reuse;
    t->code = export_engines(cmd, t->db, t->out, t->reuse, t->engine, o->json, false);
    if (t->code == MT_EXIT_OK) print_where(t->out, t->sim, o->json, t->engine, t->compiler);
    return TUNE_OUT;
}

/* ---- submit, or follow the interrupted sweep of the same spec */
static int tune_submit(tune_t *t) {
    if (t->resume) {
        t->sweep = t->resume;
        fprintf(stderr, "resuming sweep %llu (interrupted earlier) in %s%s\n", (unsigned long long)t->sweep, t->db,
                t->follow_spec != t->spec ? " with its own settings (--keep-settings)" : ", same plan and settings");
        return TUNE_GO;
    }
    wire_free(&t->reply);
    int ecode = 0;
    cli_client_set_timeout(t->c, TUNE_SUBMIT_TIMEOUT_MS);
    int rc = cli_client_submit(t->c, t->spec, &t->reply, &ecode, t->err, sizeof t->err);
    cli_client_set_timeout(t->c, CLI_CLIENT_DEFAULT_TIMEOUT_MS);
    if (rc != MT_OK) return tune_end(t, ecode == WIRE_E_SPEC ? cli_usage(t->cmd, t->err) : cli_fail(t->cmd, t->err));
    const Moetune__Submitted *sub = t->reply->submitted;
    t->sweep = sub->sweep_id;
    char sampled[96] = "";
    if (sub->configs_unsampled)
        mt_fmt(sampled, sizeof sampled, " (a sample: %u more valid configs left out by --sample)",
               sub->configs_unsampled);
    uint32_t nw = t->r->n_workers;
    fprintf(stderr,
            "sweep %llu: %u jobs, %u configs valid%s, %u rejected by the static rules (%s), %llu results to "
            "measure on %u %s worker%s\n",
            (unsigned long long)t->sweep, sub->jobs, sub->configs_valid, sampled, sub->configs_rejected,
            sub->rules && *sub->rules ? sub->rules : "?", (unsigned long long)sub->results_planned, nw, t->backend,
            nw == 1 ? "" : "s");
    cli_say_queued_behind(t->cmd->name, sub->queued_behind, sub->n_queued_behind);
    return TUNE_GO;
}

/* ---- follow it, then export and stop */
static int tune_follow_export(tune_t *t) {
    const cli_cmd_t *cmd = t->cmd;
    char state[16] = "";
    tune_watch_t tw = {cmd, t->r, t->follow_spec, t->backend, t->sweep, mt_now_ms(), false, false};
    cli_follow_t f = {.poll_ms = TUNE_POLL_MS,
                      .retry = true,
                      .stop_grace_ms = TUNE_STOP_GRACE_MS,
                      .quiet_end = true,
                      .check = tune_check,
                      .ctx = &tw};
    cli_follow_end_t end;
    t->code = cli_follow(cmd, t->c, t->sweep, t->o->json, &f, &end);
    t->keep_dir = tw.keep_dir;
    if (end.interrupted) return TUNE_INTERRUPTED;
    if (t->code != MT_EXIT_OK) return TUNE_OUT;
    snprintf(state, sizeof state, "%s", end.state);

    sup_stop_workers(t->r);
    /* --fresh measured anew on purpose: its picks replace the file's, slower or not */
    t->code = export_engines(cmd, t->db, t->out, t->sweep, t->engine, t->o->json, t->o->fresh);
    if (t->code == MT_EXIT_OK) print_where(t->out, t->sim, t->o->json, t->engine, t->compiler);
    if (!wire_sweep_is(state, WIRE_SWEEP_DONE)) {
        mt_fmt(t->err, sizeof t->err, "sweep %llu ended %s", (unsigned long long)t->sweep, state);
        t->code = cli_fail(cmd, t->err);
    }
    return TUNE_OUT;
}

int cmd_tune(const cli_cmd_t *cmd, cli_opts_t *o) {
    tune_t t;
    memset(&t, 0, sizeof t);
    t.cmd = cmd;
    t.o = o;
    t.code = MT_EXIT_FAIL;
    t.db = o->db ? o->db : "moetune.db";
    t.out = o->out ? o->out : "configs";
    t.log_level = o->log_level ? o->log_level : "info";
    srv_decision_t dec;
    if (decide_backend(cmd, o, &dec, &t.code) != MT_OK) return t.code;
    t.backend = o->backend ? o->backend : "cuda";

    int step = tune_validate(&t);
    if (step == TUNE_GO) {
        find_candidates(t.db, t.spec, &t.cands);
        step = tune_pick_resume(&t);
    }
    if (step == TUNE_GO) step = tune_start_coordinator(&t);
    if (step == TUNE_GO) step = tune_start_workers(&t);
    if (step == TUNE_GO) step = tune_wait_workers(&t);
    if (step == TUNE_GO) step = tune_submit(&t);
    if (step == TUNE_GO) step = tune_follow_export(&t);
    if (step == TUNE_INTERRUPTED) {
        sup_stop_all(t.r);
        fprintf(stderr, "moetune tune: interrupted; every committed result stays in %s%s", t.db,
                t.sweep ? "; run the same command again to resume the sweep\n" : "\n");
        t.code = 130;
    }
    cands_clear(&t.cands);
    wire_free(&t.reply);
    cli_client_destroy(&t.c);
    if (t.r) {
        sup_stop_all(t.r);
        t.keep_dir = t.keep_dir || o->keep_temp;
        if (t.r->dir[0] && t.keep_dir)
            fprintf(stderr, "moetune tune: logs of the coordinator and workers are in %s\n", t.r->dir);
    }
    sup_destroy(&t.r, t.keep_dir);
    return t.code;
}
