/* serving.c - running SGLang/vLLM servers in a /proc-like tree, and the interpreter pick. */
#include "serving.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engines.h"

#define SRV_MAX_ARGS 64
#define SRV_CMDLINE_MAX 32768
#define SRV_PROBE_TIMEOUT_MS 180000 /* importing torch and an engine can take a minute on a cold cache */

/* How an engine's server is launched: python -m MODULE [VERB], or a script named SCRIPT
 * (run by python through its #! line) followed by VERB. */
static const struct {
    const char *engine, *module, *script, *verb;
} k_servers[] = {
    {"sglang", "sglang.launch_server", NULL, NULL},
    {"sglang", NULL, "sglang", "serve"},
    {"vllm", "vllm.entrypoints.openai.api_server", NULL, NULL},
    {"vllm", "vllm.entrypoints.api_server", NULL, NULL},
    {"vllm", "vllm.entrypoints.cli.main", NULL, "serve"},
    {"vllm", NULL, "vllm", "serve"},
};

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static bool is_python_name(const char *path) { return strncmp(base_name(path), "python", 6) == 0; }

/* Reads up to len - 1 bytes of path into buf; returns the count, -1 when unreadable. */
static ssize_t read_small(const char *path, char *buf, size_t len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n + 1 < len) {
        ssize_t got = read(fd, buf + n, len - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* Splits NUL-separated text into argv (pointers into text); returns the count. */
static size_t split_nul(char *text, size_t len, char **argv, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < len && n < max;) {
        argv[n++] = text + i;
        i += strlen(text + i) + 1;
    }
    return n;
}

/* The engine argv launches, or NULL. Interpreter options before -m or the script are
 * skipped (-X and -W take a value); -c runs code, not a server. */
static const char *match_server(char **argv, size_t argc) {
    size_t i = 1;
    const char *module = NULL, *script = NULL;
    while (i < argc) {
        const char *a = argv[i];
        if (strcmp(a, "-m") == 0) {
            module = i + 1 < argc ? argv[i + 1] : NULL;
            i += 2;
            break;
        }
        if (strcmp(a, "-c") == 0) return NULL;
        if (a[0] != '-') {
            script = a;
            i += 1;
            break;
        }
        i += (strcmp(a, "-X") == 0 || strcmp(a, "-W") == 0) ? 2 : 1;
    }
    const char *next = i < argc ? argv[i] : "";
    for (size_t k = 0; k < sizeof k_servers / sizeof k_servers[0]; k++) {
        bool what = k_servers[k].module ? module && strcmp(module, k_servers[k].module) == 0
                                        : script && strcmp(base_name(script), k_servers[k].script) == 0;
        if (what && (!k_servers[k].verb || strcmp(next, k_servers[k].verb) == 0)) return k_servers[k].engine;
    }
    return NULL;
}

static bool is_exec_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The value of NAME in a process's environ file, "" when absent or unreadable. */
static void environ_get(const char *pid_dir, const char *name, char *buf, size_t len) {
    char path[PATH_MAX + 16];
    char env[SRV_CMDLINE_MAX];
    buf[0] = '\0';
    mt_fmt(path, sizeof path, "%s/environ", pid_dir);
    ssize_t n = read_small(path, env, sizeof env);
    size_t nl = strlen(name);
    for (ssize_t i = 0; i < n;) {
        const char *e = env + i;
        if (strncmp(e, name, nl) == 0 && e[nl] == '=') {
            snprintf(buf, len, "%s", e + nl + 1);
            return;
        }
        i += (ssize_t)strlen(e) + 1;
    }
}

/* Fills s->python from argv0 as described in serving.h; false when only the exe is left. */
static bool resolve_python(const char *pid_dir, const char *argv0, srv_server_t *s) {
    char path[PATH_MAX + 16], dir[PATH_MAX];
    if (argv0[0] == '/') {
        snprintf(s->python, sizeof s->python, "%s", argv0);
        s->python_from = "argv[0]";
        return true;
    }
    if (strchr(argv0, '/')) {
        mt_fmt(path, sizeof path, "%s/cwd", pid_dir);
        ssize_t n = readlink(path, dir, sizeof dir - 1);
        if (n <= 0) return false;
        dir[n] = '\0';
        mt_fmt(s->python, sizeof s->python, "%s/%s", dir, argv0[0] == '.' && argv0[1] == '/' ? argv0 + 2 : argv0);
        s->python_from = "cwd";
        return true;
    }
    char env_path[4096];
    environ_get(pid_dir, "PATH", env_path, sizeof env_path);
    for (char *save = NULL, *d = strtok_r(env_path, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        if (d[0] != '/') continue;
        mt_fmt(path, sizeof path, "%s/%s", d, argv0);
        if (is_exec_file(path)) {
            mt_fmt(s->python, sizeof s->python, "%s", path);
            s->python_from = "PATH";
            return true;
        }
    }
    return false;
}

/* Joins argv into buf with spaces, "..." at the end when it does not fit. */
static void join_args(char **argv, size_t argc, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < argc; i++) {
        int k = snprintf(buf + used, len - used, "%s%s", i ? " " : "", argv[i]);
        if (k < 0 || (size_t)k >= len - used) {
            snprintf(buf + (len > 4 ? len - 4 : 0), len > 4 ? 4 : len, "...");
            return;
        }
        used += (size_t)k;
    }
}

/* Reads one process; true with *s filled when it is a server of engine (NULL: any). */
static bool read_server(const char *proc_root, int pid, const char *engine, srv_server_t *s) {
    char pid_dir[PATH_MAX], path[PATH_MAX + 16];
    char cmdline[SRV_CMDLINE_MAX];
    char *argv[SRV_MAX_ARGS];
    mt_fmt(pid_dir, sizeof pid_dir, "%s/%d", proc_root, pid);
    mt_fmt(path, sizeof path, "%s/cmdline", pid_dir);
    ssize_t n = read_small(path, cmdline, sizeof cmdline);
    if (n <= 0) return false; /* gone, or a kernel thread */
    size_t argc = split_nul(cmdline, (size_t)n, argv, SRV_MAX_ARGS);
    const char *eng = match_server(argv, argc);
    if (!eng || (engine && strcmp(engine, eng) != 0)) return false;
    memset(s, 0, sizeof *s);
    mt_fmt(path, sizeof path, "%s/exe", pid_dir);
    ssize_t k = readlink(path, s->exe, sizeof s->exe - 1);
    s->exe[k > 0 ? k : 0] = '\0';
    /* A launcher that is not Python (a shell's exec of "sglang serve" is Python by then). */
    if (s->exe[0] ? !is_python_name(s->exe) : !is_python_name(argv[0])) return false;
    s->pid = pid;
    snprintf(s->engine, sizeof s->engine, "%s", eng);
    join_args(argv, argc, s->command, sizeof s->command);
    if (!resolve_python(pid_dir, argv[0], s)) {
        /* another user's process: only its command line is readable */
        snprintf(s->python, sizeof s->python, "%s", s->exe);
        s->python_from = s->exe[0] ? "exe" : "unknown";
    }
    return true;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

mt_status_t srv_scan(const char *proc_root, const char *engine, srv_server_t *found, size_t max, size_t *n, char *err,
                     size_t errlen) {
    *n = 0;
    DIR *d = opendir(proc_root);
    if (!d) {
        mt_fmt(err, errlen, "cannot list %s: %s", proc_root, strerror(errno));
        return MT_IO;
    }
    int *pids = NULL;
    size_t n_pids = 0, cap = 0;
    mt_status_t rc = MT_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *q = de->d_name;
        if (!*q) continue;
        while (isdigit((unsigned char)*q)) q++;
        if (*q) continue;
        if (n_pids == cap) {
            cap = cap ? cap * 2 : 256;
            int *grown = mt_realloc(pids, cap * sizeof *pids);
            if (!grown) {
                mt_fmt(err, errlen, "out of memory");
                rc = MT_ERR;
                goto out;
            }
            pids = grown;
        }
        pids[n_pids++] = atoi(de->d_name);
    }
    if (n_pids) qsort(pids, n_pids, sizeof *pids, cmp_int);
    for (size_t i = 0; i < n_pids && *n < max; i++)
        if (read_server(proc_root, pids[i], engine, &found[*n])) (*n)++;
out:
    free(pids);
    closedir(d);
    return rc;
}

static void get_str(json_t *obj, const char *key, char *dst, size_t len) {
    const char *v = json_string_value(json_object_get(obj, key));
    snprintf(dst, len, "%s", v ? v : "");
}

mt_status_t srv_probe_parse(const char *out, srv_probe_t *p) { return srv_probe_parse_env(out, NULL, p); }

mt_status_t srv_probe_parse_env(const char *out, const char *env_var, srv_probe_t *p) {
    memset(p, 0, sizeof *p);
    for (const char *line = out; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        json_t *root = json_loadb(line, len, 0, NULL);
        json_t *pr = json_object_get(root, "probe");
        if (json_is_object(pr)) {
            json_t *eng = json_object_get(pr, "engine");
            get_str(pr, "python", p->python, sizeof p->python);
            get_str(pr, "python_version", p->python_version, sizeof p->python_version);
            get_str(pr, "torch", p->torch, sizeof p->torch);
            get_str(pr, "triton", p->triton, sizeof p->triton);
            get_str(pr, "device", p->device, sizeof p->device);
            get_str(pr, "error", p->error, sizeof p->error);
            get_str(eng, "name", p->engine, sizeof p->engine);
            get_str(eng, "version", p->engine_version, sizeof p->engine_version);
            get_str(eng, "config_dir", p->config_dir, sizeof p->config_dir);
            get_str(eng, "error", p->engine_error, sizeof p->engine_error);
            if (env_var) get_str(json_object_get(eng, "env"), env_var, p->env_dir, sizeof p->env_dir);
            json_decref(root);
            return MT_OK;
        }
        json_decref(root);
        line = nl ? nl + 1 : NULL;
    }
    return MT_INVAL;
}

mt_status_t srv_probe_run(const char *python, const char *helper, const char *engine, int timeout_ms, char *out,
                          size_t outlen, char *tail, size_t taillen, int *status, char *err, size_t errlen) {
    char *argv[] = {(char *)python, (char *)helper, "--probe", "--engine", (char *)engine, NULL};
    return mt_run_capture(argv, timeout_ms > 0 ? timeout_ms : SRV_PROBE_TIMEOUT_MS, out, outlen, tail, taillen, status,
                          err, errlen);
}

mt_status_t srv_pick_new(size_t outlen, srv_pick_t **out) {
    *out = NULL;
    srv_pick_t *p = mt_calloc(1, sizeof *p);
    char *buf = mt_calloc(1, outlen ? outlen : 1);
    if (!p || !buf) {
        free(p);
        free(buf);
        return MT_ERR;
    }
    p->out = buf;
    p->outlen = outlen ? outlen : 1;
    *out = p;
    return MT_OK;
}

void srv_pick_destroy(srv_pick_t **p) {
    if (!p || !*p) return;
    free((*p)->out);
    free(*p);
    *p = NULL;
}

/* How good a probe is for engine: 3 the engine imports, 2 torch and Triton do, 1 it
 * answered, 0 it did not. note says so in words. */
static int probe_rank(const srv_pick_t *p, const char *engine, char *note, size_t len) {
    const srv_probe_t *q = &p->probe;
    if (!p->probed || !q->python[0]) {
        mt_fmt(note, len, "did not answer%s%s", p->tail[0] ? ": " : "", p->tail);
        return 0;
    }
    if (!q->torch[0] || !q->triton[0]) {
        mt_fmt(note, len, "no %s", !q->torch[0] ? "torch" : "Triton");
        return 1;
    }
    if (!q->engine_version[0]) {
        mt_fmt(note, len, "torch %s, Triton %s, no %s", q->torch, q->triton, engine);
        return 2;
    }
    mt_fmt(note, len, "torch %s, Triton %s, %s %s", q->torch, q->triton, engine, q->engine_version);
    return 3;
}

/* Probes python into pick (out, tail, status, probe). */
static void probe_into(const srv_pick_opts_t *o, const char *python, srv_pick_t *pick) {
    char why[300];
    int status = -1;
    pick->probed = false;
    memset(&pick->probe, 0, sizeof pick->probe);
    if (srv_probe_run(python, o->helper, o->engine, o->timeout_ms, pick->out, pick->outlen, pick->tail,
                      sizeof pick->tail, &status, why, sizeof why) != MT_OK) {
        snprintf(pick->tail, sizeof pick->tail, "%s", why);
        pick->out[0] = '\0';
    } else {
        pick->probed = true;
    }
    pick->status = status;
    snprintf(pick->python, sizeof pick->python, "%s", python);
    if (pick->probed) srv_probe_parse(pick->out, &pick->probe);
}

mt_status_t srv_pick(const srv_pick_opts_t *o, srv_pick_t *pick, char *err, size_t errlen) {
    if (!o->engine || !o->helper) {
        mt_fmt(err, errlen, "srv_pick: no engine or helper");
        return MT_INVAL;
    }
    srv_server_t servers[SRV_MAX_SERVERS];
    size_t n = 0;
    char why[300];
    pick->from_server = pick->servers_differ = false;
    pick->n_tried = pick->n_servers = 0;
    const char *root = o->proc_root ? o->proc_root : getenv("MOETUNE_PROC_ROOT");
    if (!o->no_scan &&
        srv_scan(root && *root ? root : "/proc", o->engine, servers, SRV_MAX_SERVERS, &n, why, sizeof why) == MT_OK &&
        n > 0) {
        size_t first = n;
        for (size_t i = n; i-- > 0;)
            if (servers[i].python[0]) first = i;
        pick->server = servers[first < n ? first : 0];
        pick->n_servers = n;
        if (first < n) {
            pick->from_server = true;
            for (size_t i = 0; i < n; i++)
                pick->servers_differ |= servers[i].python[0] && strcmp(servers[i].python, pick->server.python) != 0;
            probe_into(o, pick->server.python, pick);
            return MT_OK;
        }
    }
    /* No server: the candidates, each probed once; the best is probed again only if it is
     * not the last one probed (its output is what the caller reads). */
    char venv[PATH_MAX], conda[PATH_MAX];
    const char *defaults[4];
    size_t nd = 0;
    const char *v = getenv("VIRTUAL_ENV"), *c = getenv("CONDA_PREFIX");
    if (v && *v) {
        mt_fmt(venv, sizeof venv, "%s/bin/python3", v);
        defaults[nd++] = venv;
    }
    if (c && *c) {
        mt_fmt(conda, sizeof conda, "%s/bin/python3", c);
        defaults[nd++] = conda;
    }
    defaults[nd++] = "python3";
    defaults[nd] = NULL;
    const char *const *cands = o->candidates ? o->candidates : defaults;
    int best = -1, best_rank = -1;
    for (size_t i = 0; cands[i] && pick->n_tried < SRV_MAX_TRIED; i++) {
        bool seen = false;
        for (size_t j = 0; j < i; j++) seen |= strcmp(cands[i], cands[j]) == 0;
        if (seen) continue;
        size_t t = pick->n_tried++;
        probe_into(o, cands[i], pick);
        char note[160];
        int rank = probe_rank(pick, o->engine, note, sizeof note);
        snprintf(pick->tried[t].python, sizeof pick->tried[t].python, "%s", cands[i]);
        /* "python3" names no file: say which one answered */
        if (pick->probe.python[0] && strcmp(pick->probe.python, cands[i]) != 0)
            mt_fmt(pick->tried[t].note, sizeof pick->tried[t].note, "%s: %s", pick->probe.python, note);
        else
            snprintf(pick->tried[t].note, sizeof pick->tried[t].note, "%s", note);
        if (rank > best_rank) {
            best_rank = rank;
            best = (int)i;
        }
        if (rank == 3) break;
    }
    if (best >= 0 && strcmp(pick->python, cands[best]) != 0) probe_into(o, cands[best], pick);
    return MT_OK;
}

static const char *engine_label(const char *engine) {
    const krn_engine_t *e = krn_engine_find(engine);
    return (e ? e : krn_engine_get(0))->display;
}

void srv_pick_describe(const srv_pick_t *p, const char *engine, char *buf, size_t len) {
    if (p->from_server) {
        char more[160] = "";
        if (p->n_servers > 1)
            mt_fmt(more, sizeof more, " (%zu such processes, %s)", p->n_servers,
                   p->servers_differ ? "not all with this interpreter: give --python to choose" : "one interpreter");
        mt_fmt(buf, len, "%s server pid %d (%s): its interpreter %s%s", engine_label(engine), p->server.pid,
               p->server.command, p->python, more);
        return;
    }
    size_t used = 0;
    int k;
    if (p->n_servers)
        k = snprintf(buf, len,
                     "%s server pid %d (%s) runs an interpreter moetune cannot read (run as its user or root, or "
                     "give --python); interpreters tried:",
                     engine_label(engine), p->server.pid, p->server.command);
    else
        k = snprintf(buf, len, "no running %s server found; interpreters tried:", engine_label(engine));
    used = k > 0 ? (size_t)k : 0;
    for (size_t i = 0; i < p->n_tried && used < len; i++) {
        k = snprintf(buf + used, len - used, "%s %s (%s)", i ? "," : "", p->tried[i].python, p->tried[i].note);
        if (k < 0) break;
        used += (size_t)k;
    }
}

static bool is_engine(const char *name) { return krn_engine_find(name) != NULL; }

/* The engine a running server (any engine) runs, or NULL. */
static const char *running_engine(const char *proc_root) {
    srv_server_t s[1];
    size_t n = 0;
    char why[300];
    const char *root = proc_root ? proc_root : getenv("MOETUNE_PROC_ROOT");
    if (srv_scan(root && *root ? root : "/proc", NULL, s, 1, &n, why, sizeof why) != MT_OK || n == 0) return NULL;
    const krn_engine_t *e = krn_engine_find(s[0].engine);
    return (e ? e : krn_engine_get(0))->name;
}

mt_status_t srv_decide(const srv_decide_opts_t *o, srv_decision_t *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    srv_pick_t *pick = NULL;
    mt_status_t rc = MT_OK;
    char how[2048];
    const char *eng = is_engine(o->kernel) ? o->kernel : is_engine(o->engine) ? o->engine : NULL;
    bool guessed = !eng && !(o->engine && strchr(o->engine, ','));
    if (!eng && !o->python) eng = running_engine(o->proc_root);
    if (!eng) eng = o->engine && strncmp(o->engine, "vllm", 4) == 0 ? "vllm" : "sglang";
    if (srv_pick_new(1 << 16, &pick) != MT_OK) {
        mt_fmt(err, errlen, "out of memory");
        return MT_ERR;
    }
    const char *only[2] = {o->python, NULL};
    srv_pick_opts_t po = {.proc_root = o->proc_root,
                          .engine = eng,
                          .helper = o->helper,
                          .candidates = o->python ? only : o->candidates,
                          .timeout_ms = o->timeout_ms,
                          .no_scan = o->python != NULL};
    rc = srv_pick(&po, pick, err, errlen);
    if (rc != MT_OK) goto out;
    if (o->python)
        mt_fmt(how, sizeof how, "--python %s", o->python);
    else
        srv_pick_describe(pick, eng, how, sizeof how);
    if (guessed && !pick->from_server && pick->probe.torch[0] && !pick->probe.engine_version[0]) {
        /* no engine named or running: the other engine may be the one installed */
        char keep[PATH_MAX];
        snprintf(keep, sizeof keep, "%s", pick->python);
        only[0] = keep;
        po.candidates = only;
        po.no_scan = true;
        po.engine = strcmp(eng, "sglang") == 0 ? "vllm" : "sglang";
        if (srv_pick(&po, pick, err, errlen) == MT_OK && pick->probe.engine_version[0]) {
            eng = po.engine;
            size_t used = strlen(how);
            mt_fmt(how + used, sizeof how - used, "; %s %s is installed there", eng, pick->probe.engine_version);
        } else {
            po.engine = eng;
            srv_pick(&po, pick, err, errlen);
        }
    }
    const srv_probe_t *q = &pick->probe;
    bool has_engine = q->engine_version[0] && q->torch[0] && q->triton[0];
    if (!o->triton_given && (!q->torch[0] || !q->triton[0])) {
        snprintf(d->backend, sizeof d->backend, "cuda");
        mt_fmt(d->why, sizeof d->why,
               "backend cuda: %s in %s (%s); the files are for moetune's CUDA kernel, which no engine reads "
               "(give --backend triton --python PATH for an engine's files)",
               !q->python[0]  ? "no answer from the probe"
               : !q->torch[0] ? "no torch"
                              : "no Triton",
               pick->python, how);
        goto out;
    }
    if (o->triton_given && is_engine(o->kernel) && !has_engine) {
        mt_fmt(err, errlen,
               "--kernel %s: %s is not importable in %s (%s); give --python with the interpreter that "
               "serves",
               o->kernel,
               !q->engine_version[0] ? o->kernel
               : !q->torch[0]        ? "torch"
                                     : "Triton",
               pick->python, how);
        rc = MT_NOTFOUND;
        goto out;
    }
    snprintf(d->backend, sizeof d->backend, "triton");
    snprintf(d->python, sizeof d->python, "%s", pick->python);
    snprintf(d->kernel, sizeof d->kernel, "%s", o->kernel ? o->kernel : has_engine ? eng : "moetune");
    snprintf(d->engine, sizeof d->engine, "%s", o->engine ? o->engine : eng);
    if (strcmp(d->kernel, "moetune") == 0 && !o->kernel)
        mt_fmt(d->why, sizeof d->why,
               "backend triton, moetune's own Triton kernel (%s is not installed in %s), "
               "files for %s: %s",
               eng, pick->python, engine_label(d->engine), how);
    else
        mt_fmt(d->why, sizeof d->why, "backend triton, kernel %s, files for %s%s: %s", d->kernel,
               engine_label(d->engine), strchr(d->engine, ',') ? " and vLLM" : "", how);
out:
    srv_pick_destroy(&pick);
    return rc;
}
