/* cmd_doctor.c - moetune doctor: does an engine, in a given interpreter, find a tuned
 * config file for this GPU and shape (docs/engines.md), and if not, what makes one. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"
#include "engine_check.h"
#include "export.h"
#include "mt.h"
#include "presets.h"
#include "serving.h"
#include "shipguard.h"

enum { DOCTOR_EXIT_MISSING = 3 };

#define PROBE_TIMEOUT_MS 180000 /* importing torch and an engine can take a minute on a cold cache */
#define PROBE_MAX_OUT 65536     /* HELPER.md: a reply line is at most 64 KiB */

/* Per engine: the variable that overrides its folder, and how it lays files out. */
static const struct {
    exp_engine_t engine;
    const char *env;
    const char *label;
} k_engines[] = {
    {EXP_ENGINE_SGLANG, "SGLANG_MOE_CONFIG_DIR", "SGLang"},
    {EXP_ENGINE_VLLM, "VLLM_TUNED_CONFIG_FOLDER", "vLLM"},
};

/* What the probe reported (HELPER.md "Probe"); strings are "" when null. */
typedef srv_probe_t probe_t;

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Compares dotted versions numerically ("3.10.0" > "3.9.1"); -1, 0, 1. */
static int version_cmp(const char *a, const char *b) {
    while (*a || *b) {
        unsigned long x = strtoul(a, (char **)&a, 10), y = strtoul(b, (char **)&b, 10);
        if (x != y) return x < y ? -1 : 1;
        while (*a && (*a < '0' || *a > '9')) a++;
        while (*b && (*b < '0' || *b > '9')) b++;
    }
    return 0;
}

/* SGLang's fallback: the newest other configs/triton_* folder under base holding name.
 * Writes the folder's version ("3.4.0") into ver; false when none. */
static bool sglang_fallback(const char *base, const char *running, const char *name, char *ver, size_t len) {
    char dir[PATH_MAX];
    mt_fmt(dir, sizeof dir, "%s/configs", base);
    DIR *d = opendir(dir);
    bool found = false;
    if (!d) return false;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "triton_", 7) != 0) continue;
        char v[64], path[PATH_MAX + 512];
        snprintf(v, sizeof v, "%s", de->d_name + 7);
        for (char *q = v; *q; q++) {
            if (*q == '_') *q = '.';
        }
        if (strcmp(v, running) == 0) continue;
        mt_fmt(path, sizeof path, "%s/%s/%s", dir, de->d_name, name);
        if (!is_file(path)) continue;
        if (!found || version_cmp(v, ver) > 0) {
            snprintf(ver, len, "%s", v);
            found = true;
        }
    }
    closedir(d);
    return found;
}

/* The "triton_version" a vLLM file carries, "" when none or unreadable. */
static void file_triton_version(const char *path, char *buf, size_t len) {
    json_t *root = json_load_file(path, 0, NULL);
    const char *v = json_string_value(json_object_get(root, "triton_version"));
    snprintf(buf, len, "%s", v ? v : "");
    json_decref(root);
}

/* Prints one line naming the failure (text, or JSON with --json); returns exit 1. */
static int doctor_fail(const cli_cmd_t *cmd, bool json, const char *python, const char *msg) {
    if (json) {
        cli_print_json(stdout, json_pack("{s:s, s:s, s:s}", "status", "error", "python", python, "error", msg));
    }
    return cli_fail(cmd, msg);
}

/* What the engine's own lookup says, beside moetune's lines (engine_check.h). */
static void doctor_own_lines(const eng_own_t *own, const eng_answer_t *ea, const char *name, bool agrees) {
    if (!ea) {
        printf("engine's own:  not asked (%s); the lines above follow moetune's rules (docs/engines.md)\n",
               own->asked ? own->answers[0].error : own->why);
        return;
    }
    printf("engine's own:  %s (%s.get_config_file_name, %s)%s\n", ea->file, own->module, own->version,
           agrees ? ": the same name" : "");
    if (!agrees) printf("DIFFERENT:     moetune names it %s; export refuses until they agree\n", name);
    if (ea->traced) printf("engine reads:  %s\n", ea->loaded[0] ? ea->loaded : "no file: its built-in defaults");
}

/* How the interpreter was chosen without --python. */
typedef struct {
    char python[PATH_MAX], text[2048], command[512];
    int pid; /* the server's, 0 when none was found */
} serving_t;

/* Picks the interpreter for engine (serving.h: a running server's, else the best of the
 * candidates) and hands over its probe's output as srv_probe_run would. */
static int pick_python(const char *engine, const char *helper, serving_t *sv, char *out, size_t outlen, char *tail,
                       size_t taillen, int *status, char *err, size_t errlen) {
    srv_pick_t *pick = NULL;
    if (srv_pick_new(outlen, &pick) != MT_OK) {
        mt_fmt(err, errlen, "out of memory");
        return MT_ERR;
    }
    srv_pick_opts_t so = {.engine = engine, .helper = helper, .timeout_ms = PROBE_TIMEOUT_MS};
    int rc = srv_pick(&so, pick, err, errlen);
    if (rc == MT_OK) {
        snprintf(sv->python, sizeof sv->python, "%s", pick->python);
        srv_pick_describe(pick, engine, sv->text, sizeof sv->text);
        if (pick->from_server) {
            sv->pid = pick->server.pid;
            snprintf(sv->command, sizeof sv->command, "%s", pick->server.command);
        }
        snprintf(out, outlen, "%s", pick->out);
        snprintf(tail, taillen, "%s", pick->tail);
        *status = pick->status;
    }
    srv_pick_destroy(&pick);
    return rc;
}

/* What doctor learns, shared by its steps: the shape asked about, the probe's answer,
 * where the engine looks and what it finds, and what to run when the file is missing. */
typedef struct {
    exp_engine_t engine;
    krn_shape_t shape;
    const char *env_var, *label, *ename, *python, *py, *folder;
    serving_t sv;
    probe_t p;
    char name[400], expected[PATH_MAX + 512], down[PATH_MAX + 520];
    bool found, down_found, other_version;
    char file_tv[64], fb_path[PATH_MAX + 600], fb_what[300];
    eng_own_t own;
    const eng_answer_t *ea;
    bool own_agrees;
    char rule_fb[PATH_MAX + 600], defaults[300], tune[2048], point[PATH_MAX + 64];
    char buys[600]; /* what the found file buys, from moetune's manifest beside it; "" when none says */
} doctor_t;

/* The engine and the shape from the options; an exit code when they are refused, else -1. */
static int doctor_args(const cli_cmd_t *cmd, const cli_opts_t *o, doctor_t *d) {
    char err[1200], why[400];
    if (!o->engine) return cli_usage(cmd, "--engine sglang|vllm is required");
    if (exp_engine_parse(o->engine, &d->engine) != MT_OK) return cli_usage(cmd, "--engine: not one of sglang, vllm");
    if (!!o->model == !!o->doctor_shape)
        return cli_usage(cmd, "give --model NAME --tp N, or --shape E=..,N=..,K=..,topk=..");
    if (o->model) {
        int rc = cli_preset_shape(o->model, o->tp ? o->tp : 1, o->ep ? o->ep : 1, o->dtype, &d->shape, why, sizeof why);
        if (rc != MT_OK) return cli_usage(cmd, why);
    } else {
        if (o->tp || o->ep || o->dtype) return cli_usage(cmd, "--tp, --ep and --dtype apply only with --model");
        if (krn_shape_parse(o->doctor_shape, &d->shape, why, sizeof why) != MT_OK ||
            krn_shape_check(&d->shape, why, sizeof why) != MT_OK) {
            mt_fmt(err, sizeof err, "--shape %s: %s", o->doctor_shape, why);
            return cli_usage(cmd, err);
        }
    }
    return -1;
}

/* Runs the probe in the interpreter (--python, a running server's or the best candidate)
 * and checks that it can run the engine's kernel; an exit code on a failure, else -1. */
static int doctor_probe(const cli_cmd_t *cmd, const cli_opts_t *o, doctor_t *d) {
    char err[1200], helper[PATH_MAX], why[400];
    const char *python = d->python;
    if (mt_helper_path(helper, sizeof helper, why, sizeof why) != MT_OK) return doctor_fail(cmd, o->json, python, why);
    static char out[PROBE_MAX_OUT + 1];
    char tail[512];
    int status = 0;
    if (!o->python) {
        /* no --python: the interpreter of a running server, else the best candidate (serving.h) */
        if (pick_python(d->ename, helper, &d->sv, out, sizeof out, tail, sizeof tail, &status, why, sizeof why) !=
            MT_OK)
            return doctor_fail(cmd, o->json, python, why);
        python = d->python = d->sv.python;
        if (!o->json) printf("serving:       %s\n", d->sv.text);
    } else if (srv_probe_run(python, helper, d->ename, PROBE_TIMEOUT_MS, out, sizeof out, tail, sizeof tail, &status,
                             why, sizeof why) != MT_OK) {
        mt_fmt(err, sizeof err, "the probe in %s failed: %s", python, why);
        return doctor_fail(cmd, o->json, python, err);
    }
    probe_t *p = &d->p;
    if (srv_probe_parse_env(out, d->env_var, p) != MT_OK) {
        if (status == 127 && strncmp(tail, "cannot run", 10) == 0)
            mt_fmt(err, sizeof err, "%s", tail);
        else
            mt_fmt(err, sizeof err, "the probe in %s gave no answer (exit status %d)%s%s", python, status,
                   tail[0] ? ": " : "", tail);
        return doctor_fail(cmd, o->json, python, err);
    }
    const char *py = d->py = p->python[0] ? p->python : python;
    const char *missing = !p->torch[0] ? "torch" : !p->triton[0] ? "Triton" : !p->device[0] ? "a CUDA device" : NULL;
    if (missing) {
        mt_fmt(err, sizeof err, "%s %s in %s%s%s", missing,
               p->device[0] || !p->torch[0] || !p->triton[0] ? "is not importable" : "is not visible", py,
               p->error[0] ? ": " : "", p->error);
        return doctor_fail(cmd, o->json, py, err);
    }
    d->folder = p->env_dir[0] ? p->env_dir : p->config_dir;
    if (!d->folder[0]) {
        mt_fmt(err, sizeof err, "%s is not importable in %s%s%s, and %s is not set", d->label, py,
               p->engine_error[0] ? ": " : "", p->engine_error, d->env_var);
        return doctor_fail(cmd, o->json, py, err);
    }
    return -1;
}

/* Where the engine looks, and what it finds: the file by the engine's rules, else what it
 * falls back to. */
static void doctor_locate(doctor_t *d) {
    const probe_t *p = &d->p;
    const char *folder = d->folder;
    char tdir[64];
    exp_engine_file_name(d->engine, p->device, &d->shape, d->name, sizeof d->name);
    snprintf(tdir, sizeof tdir, "triton_%s", p->triton);
    for (char *q = tdir; *q; q++) {
        if (*q == '.') *q = '_';
    }
    if (d->engine == EXP_ENGINE_SGLANG) {
        mt_fmt(d->expected, sizeof d->expected, "%s/configs/%s/%s", folder, tdir, d->name);
        mt_fmt(d->down, sizeof d->down, "%.*s_down.json", (int)(strlen(d->expected) - 5), d->expected);
        d->found = is_file(d->expected);
        d->down_found = is_file(d->down);
        char ver[64];
        if (!d->found && sglang_fallback(folder, p->triton, d->name, ver, sizeof ver)) {
            char vdir[80];
            snprintf(vdir, sizeof vdir, "triton_%s", ver);
            for (char *q = vdir; *q; q++) {
                if (*q == '.') *q = '_';
            }
            mt_fmt(d->fb_path, sizeof d->fb_path, "%s/configs/%s/%s", folder, vdir, d->name);
            mt_fmt(d->fb_what, sizeof d->fb_what,
                   "the Triton %s configs (it logs \"Fallback to triton version %s\" and "
                   "\"Performance might be sub-optimal!\")",
                   ver, ver);
        }
        return;
    }
    mt_fmt(d->expected, sizeof d->expected, "%s/%s", folder, d->name);
    d->found = is_file(d->expected);
    if (d->found) {
        file_triton_version(d->expected, d->file_tv, sizeof d->file_tv);
        if (d->file_tv[0] && strcmp(d->file_tv, p->triton) != 0) {
            d->other_version = true;
            d->found = false;
            snprintf(d->fb_path, sizeof d->fb_path, "%s", d->expected);
            mt_fmt(d->fb_what, sizeof d->fb_what,
                   "this file anyway: it was tuned with Triton %s, and vLLM ignores "
                   "triton_version",
                   d->file_tv);
        }
    }
    char bundled[PATH_MAX + 512];
    if (!d->found && !d->other_version && p->env_dir[0] && p->config_dir[0]) {
        mt_fmt(bundled, sizeof bundled, "%s/%s", p->config_dir, d->name);
        if (is_file(bundled)) {
            snprintf(d->fb_path, sizeof d->fb_path, "%s", bundled);
            mt_fmt(d->fb_what, sizeof d->fb_what, "the file bundled with vLLM (its package's configs folder)");
        }
    }
}

/* The engine's own answer where its lookup imports: it decides (engine_check.h). */
static void doctor_ask_engine(doctor_t *d) {
    snprintf(d->rule_fb, sizeof d->rule_fb, "%s", d->fb_path[0] ? d->fb_path : "defaults");
    if (eng_ask(d->py, d->engine, NULL, &d->shape, 1, true, &d->own) != MT_OK) memset(&d->own, 0, sizeof d->own);
    const eng_own_t *own = &d->own;
    const eng_answer_t *ea = d->ea = own->asked && !own->answers[0].error[0] ? &own->answers[0] : NULL;
    d->own_agrees = !ea || strcmp(ea->file, d->name) == 0;
    if (ea && ea->traced) {
        d->found = ea->loaded[0] && strcmp(ea->loaded, ea->first) == 0 && !d->other_version;
        if (!d->found && !d->other_version) {
            snprintf(d->fb_path, sizeof d->fb_path, "%s", ea->loaded);
            mt_fmt(d->fb_what, sizeof d->fb_what, "the file its own lookup read (%s.get_moe_configs)", own->module);
        }
    }
}

/* What the engine runs without a file, the command that makes the file, and how to point
 * the engine at it. */
static void doctor_advice(const cli_opts_t *o, doctor_t *d) {
    const krn_shape_t *shape = &d->shape;
    if (strcmp(shape->dtype, "bf16") == 0)
        mt_fmt(d->defaults, sizeof d->defaults,
               "untuned defaults (\"Using default MoE kernel config. Performance might be "
               "sub-optimal!\"): BLOCK_SIZE_M/N/K 64/64/32, GROUP_SIZE_M 8, or 16/32/64, GROUP_SIZE_M 1 when "
               "M <= E (%u)%s",
               shape->e, d->engine == EXP_ENGINE_VLLM ? ", SPLIT_K 1" : "; no num_warps/num_stages");
    else
        mt_fmt(d->defaults, sizeof d->defaults,
               "untuned built-in defaults for %s (\"Using default MoE kernel config. "
               "Performance might be sub-optimal!\")",
               shape->dtype);
    char outdir[PATH_MAX + 32], cwd[PATH_MAX], what[600];
    if (d->p.env_dir[0])
        snprintf(outdir, sizeof outdir, "%s", d->p.env_dir);
    else
        mt_fmt(outdir, sizeof outdir, "%s/moetune-configs", getcwd(cwd, sizeof cwd) ? cwd : ".");
    if (o->model) {
        int n = snprintf(what, sizeof what, "--model %s --tp %u", o->model, o->tp ? o->tp : 1);
        if (o->ep && n > 0) n += snprintf(what + n, sizeof what - (size_t)n, " --ep %u", o->ep);
        if (o->dtype && n > 0) snprintf(what + n, sizeof what - (size_t)n, " --dtype %s", o->dtype);
    } else {
        char sa[200];
        krn_shape_format(shape, sa, sizeof sa);
        mt_fmt(what, sizeof what, "--shape %s", sa);
    }
    mt_fmt(d->tune, sizeof d->tune, "moetune tune --backend triton --kernel %s --python %s %s --out %s", d->ename,
           d->py, what, outdir);
    mt_fmt(d->point, sizeof d->point, "%s=%s", d->env_var, outdir);
}

/* doctor --json: one object. */
static void doctor_print_json(const cli_opts_t *o, const doctor_t *d) {
    const probe_t *p = &d->p;
    const eng_answer_t *ea = d->ea;
    json_t *j = json_object();
    json_object_set_new(j, "status", json_string(d->found ? "found" : "missing"));
    json_object_set_new(j, "engine", json_string(d->ename));
    json_object_set_new(j, "python", json_string(d->py));
    json_object_set_new(j, "python_version", json_string(p->python_version));
    if (!o->python)
        json_object_set_new(j, "serving",
                            json_pack("{s:o, s:o, s:s}", "pid", d->sv.pid ? json_integer(d->sv.pid) : json_null(),
                                      "command", d->sv.pid ? json_string(d->sv.command) : json_null(), "how",
                                      d->sv.text));
    json_object_set_new(j, "triton", json_string(p->triton));
    json_object_set_new(j, "torch", json_string(p->torch));
    json_object_set_new(j, "engine_version", p->engine_version[0] ? json_string(p->engine_version) : json_null());
    json_object_set_new(j, "device", json_string(p->device));
    json_object_set_new(j, "config_dir", json_string(d->folder));
    json_object_set_new(j, "config_dir_from", json_string(p->env_dir[0] ? d->env_var : "engine"));
    json_object_set_new(j, "file", json_string(d->expected));
    json_object_set_new(j, "found", json_boolean(d->found));
    if (d->buys[0]) json_object_set_new(j, "buys", json_string(d->buys));
    if (d->engine == EXP_ENGINE_SGLANG) {
        json_object_set_new(j, "down_file", json_string(d->down));
        json_object_set_new(j, "down_found", json_boolean(d->down_found));
    } else {
        json_object_set_new(j, "file_triton_version", d->file_tv[0] ? json_string(d->file_tv) : json_null());
    }
    json_t *eo = json_pack("{s:b}", "asked", d->own.asked);
    if (ea) {
        json_object_set_new(eo, "file", json_string(ea->file));
        json_object_set_new(eo, "down_file", ea->down_file[0] ? json_string(ea->down_file) : json_null());
        json_object_set_new(eo, "module", json_string(d->own.module));
        json_object_set_new(eo, "version", json_string(d->own.version));
        json_object_set_new(eo, "agrees", json_boolean(d->own_agrees));
        json_object_set_new(eo, "first", ea->traced ? json_string(ea->first) : json_null());
        json_object_set_new(eo, "reads", ea->loaded[0] ? json_string(ea->loaded) : json_null());
    } else {
        json_object_set_new(eo, "why", json_string(d->own.asked ? d->own.answers[0].error : d->own.why));
    }
    json_object_set_new(j, "engine_own", eo);
    json_object_set_new(j, "rule_fallback", json_string(d->rule_fb));
    if (!d->found) {
        json_object_set_new(j, "fallback", json_string(d->fb_path[0] ? d->fb_path : "defaults"));
        json_object_set_new(j, "fallback_means", json_string(d->fb_path[0] ? d->fb_what : d->defaults));
        json_object_set_new(j, "tune", json_string(d->tune));
        json_object_set_new(j, "point_engine", json_string(d->point));
    }
    cli_print_json(stdout, j);
}

/* What the found file buys over the engine's default and the file it replaced, as the
 * manifest.json moetune wrote beside it records (its "guard" summary); nothing when the
 * folder holds no moetune manifest or it has no record of this file. */
static void doctor_buys(doctor_t *d) {
    char dir[PATH_MAX + 512], err[300], *text = NULL;
    d->buys[0] = '\0';
    if (!d->found) return;
    snprintf(dir, sizeof dir, "%s", d->expected);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    mt_fmt(slash + 1, sizeof dir - (size_t)(slash + 1 - dir), "manifest.json");
    if (mt_read_regular(dir, 64u << 20, &text, NULL, err, sizeof err) != MT_OK) return;
    json_t *m = json_loads(text, 0, NULL);
    free(text);
    const json_t *rec = json_object_get(m, d->name);
    if (rec) {
        const json_t *guard = json_object_get(rec, "guard");
        if (guard)
            shipguard_line(guard, d->buys, sizeof d->buys);
        else
            mt_fmt(d->buys, sizeof d->buys, "not measured (its manifest has no guard figures: tuned without the ship guard)");
    }
    json_decref(m);
}

/* doctor's lines for a person. */
static void doctor_print_text(const doctor_t *d) {
    const probe_t *p = &d->p;
    printf("interpreter:   %s (Python %s)\n", d->py, p->python_version[0] ? p->python_version : "?");
    printf("imports:       triton %s, torch %s, %s %s\n", p->triton, p->torch, d->ename,
           p->engine_version[0] ? p->engine_version : "(not importable)");
    printf("device:        %s\n", p->device);
    printf("config folder: %s (%s)\n", d->folder, p->env_dir[0] ? d->env_var : "the engine's own configs");
    printf("expected file: %s\n", d->expected);
    printf("for Triton %s: %s\n", p->triton,
           d->found           ? "found"
           : d->other_version ? "missing (a file for another Triton version is there)"
                              : "missing");
    if (d->engine == EXP_ENGINE_SGLANG && d->found)
        printf("down file:     %s (%s)\n",
               d->down_found ? "found" : "none: the second GEMM reuses the main file's config", d->down);
    doctor_own_lines(&d->own, d->ea, d->name, d->own_agrees);
    if (d->buys[0]) printf("buys:          %s\n", d->buys);
    if (d->found) return;
    if (d->fb_path[0])
        printf("fallback:      %s uses %s: %s\n", d->label, d->fb_what, d->fb_path);
    else
        printf("fallback:      %s uses %s\n", d->label, d->defaults);
    printf("to tune:       %s\n", d->tune);
    printf("then run the engine with %s\n", d->point);
}

int cmd_doctor(const cli_cmd_t *cmd, cli_opts_t *o) {
    doctor_t d;
    memset(&d, 0, sizeof d);
    int code = doctor_args(cmd, o, &d);
    if (code >= 0) return code;
    d.env_var = k_engines[d.engine == EXP_ENGINE_SGLANG ? 0 : 1].env;
    d.label = k_engines[d.engine == EXP_ENGINE_SGLANG ? 0 : 1].label;
    d.ename = exp_engine_name(d.engine);
    d.python = o->python ? o->python : "python3";
    code = doctor_probe(cmd, o, &d);
    if (code >= 0) return code;
    doctor_locate(&d);
    doctor_ask_engine(&d);
    doctor_buys(&d);
    doctor_advice(o, &d);
    code = !d.own_agrees ? MT_EXIT_FAIL : d.found ? MT_EXIT_OK : DOCTOR_EXIT_MISSING;
    if (o->json)
        doctor_print_json(o, &d);
    else
        doctor_print_text(&d);
    eng_own_clear(&d.own);
    return code;
}
