/* cmd_tune.c - one-machine mode: run a coordinator and local workers, tune, export.
 *
 * The coordinator and the workers run as child processes in their own process group
 * (so a terminal's Ctrl-C reaches only this process, which then stops them in order:
 * workers first, so their Byes arrive, then the coordinator). They talk over ipc://
 * sockets in a fresh directory under /tmp, which also holds their logs; the directory
 * is removed after a clean run and kept (and named) after a failure.
 *
 * Resume: every result is committed as it arrives. When the same command is run again
 * on the same database, the still-running sweep with the same spec is followed
 * instead of submitting a new one, so only the missing measurements are made.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "cmd.h"
#include "mt.h"
#include "progress.h"
#include "query.h"

#define MAX_WORKERS 64
#define TUNE_SUBMIT_TIMEOUT_MS 60000 /* planning a large sweep on a loaded machine */

typedef struct {
    pid_t pid;
    int status;       /* wait status once exited */
    bool exited;
    char log[PATH_MAX];
    char label[32];
} proc_t;

typedef struct {
    char dir[PATH_MAX];
    char coord_bin[PATH_MAX], worker_bin[PATH_MAX];
    char workers_ep[PATH_MAX + 16], control_ep[PATH_MAX + 16];
    proc_t coord;
    proc_t workers[MAX_WORKERS];
    uint32_t n_workers;
    uint32_t gpus[MAX_WORKERS];
} run_t;

/* Counts GPUs: `nvidia-smi -L`, else /dev/nvidiaN device nodes. */
static uint32_t count_gpus(void) {
    uint32_t n = 0;
    FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
    if (p) {
        char line[512];
        while (fgets(line, sizeof line, p))
            if (strncmp(line, "GPU ", 4) == 0) n++;
        pclose(p);
    }
    if (n) return n;
    DIR *d = opendir("/dev");
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !s[6]) continue;
        bool digits = true;
        for (const char *q = s + 6; *q; q++) digits = digits && *q >= '0' && *q <= '9';
        if (digits) n++;
    }
    closedir(d);
    return n;
}

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

/* Last non-empty line of a log, for a one-line reason. */
static void last_line(const char *path, char *buf, size_t len) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n) snprintf(buf, len, "%s", line);
    }
    fclose(f);
}

static int spawn(proc_t *p, char *const argv[], char *err, size_t errlen) {
    int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        mt_fmt(err, errlen, "%s: %s", p->log, strerror(errno));
        return MT_IO;
    }
    pid_t pid = fork();
    if (pid < 0) {
        mt_fmt(err, errlen, "fork: %s", strerror(errno));
        close(fd);
        return MT_ERR;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], argv);
        dprintf(fd, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd);
    p->pid = pid;
    p->exited = false;
    return MT_OK;
}

/* Collects the exit of p if it has ended. True when it has. */
static bool reap(proc_t *p) {
    if (p->pid <= 0 || p->exited) return p->exited;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
        p->exited = true;
        p->status = st;
    }
    return p->exited;
}

static void describe_exit(const proc_t *p, char *buf, size_t len) {
    char tail[600];
    last_line(p->log, tail, sizeof tail);
    if (WIFEXITED(p->status))
        mt_fmt(buf, len, "%s exited with code %d%s%s", p->label, WEXITSTATUS(p->status), tail[0] ? ": " : "", tail);
    else if (WIFSIGNALED(p->status))
        mt_fmt(buf, len, "%s killed by signal %d%s%s", p->label, WTERMSIG(p->status), tail[0] ? ": " : "", tail);
    else
        mt_fmt(buf, len, "%s ended", p->label);
}

/* SIGTERM, wait up to 5 s, then SIGKILL. */
static void stop_procs(proc_t *ps, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ps[i].pid > 0 && !reap(&ps[i])) kill(ps[i].pid, SIGTERM);
    uint64_t deadline = mt_now_ms() + 5000;
    for (;;) {
        bool all = true;
        for (size_t i = 0; i < n; i++) all = all && (ps[i].pid <= 0 || reap(&ps[i]));
        if (all) return;
        if (mt_now_ms() >= deadline) break;
        usleep(20 * 1000);
    }
    for (size_t i = 0; i < n; i++) {
        if (ps[i].pid > 0 && !reap(&ps[i])) {
            kill(ps[i].pid, SIGKILL);
            waitpid(ps[i].pid, &ps[i].status, 0);
            ps[i].exited = true;
        }
    }
}

static void stop_all(run_t *r) {
    stop_procs(r->workers, r->n_workers);
    stop_procs(&r->coord, 1);
}

static void remove_run_dir(run_t *r) {
    DIR *d = opendir(r->dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", r->dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(r->dir);
}

typedef struct {
    const Moetune__SweepSpec *want;
    uint64_t found;
} resume_ctx_t;

static int match_sweep(void *vctx, const dbq_sweep_t *s) {
    resume_ctx_t *ctx = vctx;
    Moetune__SweepSpec *have = moetune__sweep_spec__unpack(NULL, s->spec_len, s->spec);
    if (!have) return 0;
    if (cli_spec_same_work(ctx->want, have)) ctx->found = s->id;
    moetune__sweep_spec__free_unpacked(have, NULL);
    return 0;
}

/* An interrupted sweep of the same spec in db, or 0. */
static uint64_t find_resumable(const char *db, const Moetune__SweepSpec *spec) {
    char err[300];
    dbq_t *q = NULL;
    resume_ctx_t ctx = {spec, 0};
    if (access(db, F_OK) != 0 || dbq_open(db, &q, err, sizeof err) != MT_OK) return 0;
    dbq_sweeps(q, "running", match_sweep, &ctx, err, sizeof err);
    dbq_close(&q);
    return ctx.found;
}

/* First failure among the children, or false. */
static bool check_children(run_t *r, char *why, size_t len, bool *fatal) {
    *fatal = false;
    if (reap(&r->coord)) {
        describe_exit(&r->coord, why, len);
        *fatal = true;
        return true;
    }
    uint32_t alive = 0;
    for (uint32_t i = 0; i < r->n_workers; i++) {
        proc_t *w = &r->workers[i];
        bool was = w->exited;
        if (!reap(w)) {
            alive++;
            continue;
        }
        if (!was) {
            describe_exit(w, why, len);
            /* Exit code 1/2 = the worker could not start (backend, arguments): stop. */
            if (WIFEXITED(w->status) && (WEXITSTATUS(w->status) == 1 || WEXITSTATUS(w->status) == 2)) {
                *fatal = true;
                return true;
            }
            fprintf(stderr, "\nmoetune tune: warning: %s\n", why);
        }
    }
    if (alive == 0) {
        mt_fmt(why, len, "all workers died (last: %.400s)", r->n_workers ? why : "none started");
        *fatal = true;
        return true;
    }
    return false;
}

int cmd_tune(const cli_cmd_t *cmd, cli_opts_t *o) {
    int code = MT_EXIT_FAIL;
    char err[700];
    run_t *r = NULL;
    cli_client_t *c = NULL;
    cli_progress_t *prog = NULL;
    wire_env_t *reply = NULL;
    bool keep_dir = false;
    uint64_t sweep = 0;
    const char *db = o->db ? o->db : "moetune.db";
    const char *out = o->out ? o->out : "configs";
    const char *backend = o->backend ? o->backend : "cuda";
    const char *log_level = o->log_level ? o->log_level : "info";

    /* ---- validate everything before starting anything */
    bool sim = strcmp(backend, "sim") == 0;
    bool triton = strcmp(backend, "triton") == 0;
    if (!sim && !triton && strcmp(backend, "cuda") != 0) return cli_usage(cmd, "--backend: not one of sim, cuda, triton");
    if (!triton && (o->kernel || o->python || o->helper_mem_mb || o->engine))
        return cli_usage(cmd, "--kernel, --python, --helper-mem-mb and --engine apply only with --backend triton");
    /* Triton results go out in an engine's layout: the kernel's own engine unless told;
     * "sglang,vllm" measures what either engine can run once and exports both layouts. */
    const char *engine = o->engine;
    if (triton && !engine) engine = o->kernel && strcmp(o->kernel, "vllm") == 0 ? "vllm" : "sglang";
    if (engine && strcmp(engine, "sglang") != 0 && strcmp(engine, "vllm") != 0 &&
        strcmp(engine, "sglang,vllm") != 0 && strcmp(engine, "vllm,sglang") != 0)
        return cli_usage(cmd, "--engine: not one of sglang, vllm, sglang,vllm");
    /* The sweep is for this backend's kernel and these engines: its workers alone measure it,
     * by its static rules. */
    if (cli_spec_set(o->spec, "worker-backend", backend, err, sizeof err) != MT_OK ||
        (engine && cli_spec_set(o->spec, "engines", engine, err, sizeof err) != MT_OK) ||
        cli_spec_finish(o->spec, true, err, sizeof err) != MT_OK)
        return cli_usage(cmd, err);
    const Moetune__SweepSpec *spec = cli_spec_get(o->spec);
    if (o->kernel && strcmp(o->kernel, "sglang") && strcmp(o->kernel, "vllm") && strcmp(o->kernel, "moetune"))
        return cli_usage(cmd, "--kernel: not one of sglang, vllm, moetune");
    if (o->python && !*o->python) return cli_usage(cmd, "--python: empty");
    char mem_mb[16];
    snprintf(mem_mb, sizeof mem_mb, "%u", o->helper_mem_mb);
    if (!sim && (o->workers || o->sim_time_scale || o->sim_faults))
        return cli_usage(cmd, "--workers, --sim-time-scale and --sim-faults apply only with --backend sim");
    if (sim && o->gpus) return cli_usage(cmd, "--gpus applies only with --backend cuda or triton");
    if (o->sim_time_scale) {
        double x;
        if (mt_parse_double(o->sim_time_scale, &x) != MT_OK || x < 0)
            return cli_usage(cmd, "--sim-time-scale: not a number >= 0");
    }
    mt_log_level_t lvl;
    if (mt_log_parse_level(log_level, &lvl) != MT_OK) return cli_usage(cmd, "--log-level: not one of error, warn, info, debug");
    if (check_writable_file(db, err, sizeof err) != MT_OK) return cli_usage(cmd, err);
    if (check_out_dir(out, err, sizeof err) != MT_OK) return cli_usage(cmd, err);
    r = calloc(1, sizeof *r);
    if (!r) return cli_fail(cmd, "out of memory");
    if (sim) {
        r->n_workers = o->workers ? o->workers : 4;
        if (r->n_workers > MAX_WORKERS) {
            code = cli_usage(cmd, "--workers: at most 64");
            goto out;
        }
        for (uint32_t i = 0; i < r->n_workers; i++) r->gpus[i] = i;
    } else if (o->gpus) {
        uint32_t *ids = NULL;
        size_t n = 0;
        char why[200];
        if (mt_parse_u32_list(o->gpus, 0, 1023, &ids, &n, why, sizeof why) != MT_OK || n > MAX_WORKERS) {
            mt_fmt(err, sizeof err, "--gpus %s: %s", o->gpus, n > MAX_WORKERS ? "too many GPUs" : why);
            free(ids);
            code = cli_usage(cmd, err);
            goto out;
        }
        memcpy(r->gpus, ids, n * sizeof *ids);
        r->n_workers = (uint32_t)n;
        free(ids);
    } else {
        r->n_workers = count_gpus();
        if (r->n_workers == 0) {
            code = cli_fail(cmd, "no GPU found; use --backend sim");
            goto out;
        }
        if (r->n_workers > MAX_WORKERS) r->n_workers = MAX_WORKERS;
        for (uint32_t i = 0; i < r->n_workers; i++) r->gpus[i] = i;
    }
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        code = cli_fail(cmd, "cannot find my own executable (/proc/self/exe)");
        goto out;
    }
    self[sl] = '\0';
    const char *bindir = dirname(self);
    mt_fmt(r->coord_bin, sizeof r->coord_bin, "%s/moetune-coordinator", bindir);
    mt_fmt(r->worker_bin, sizeof r->worker_bin, "%s/moetune-worker", bindir);
    if (access(r->coord_bin, X_OK) != 0 || access(r->worker_bin, X_OK) != 0) {
        mt_fmt(err, sizeof err, "moetune-coordinator and moetune-worker must be next to moetune in %s", bindir);
        code = cli_fail(cmd, err);
        goto out;
    }
    uint64_t resume = find_resumable(db, spec);

    /* ---- start the coordinator */
    mt_install_stop_handlers();
    snprintf(r->dir, sizeof r->dir, "/tmp/moetune-tune-XXXXXX");
    if (!mkdtemp(r->dir)) {
        mt_fmt(err, sizeof err, "mkdtemp: %s", strerror(errno));
        code = cli_fail(cmd, err);
        r->dir[0] = '\0';
        goto out;
    }
    mt_fmt(r->workers_ep, sizeof r->workers_ep, "ipc://%s/workers", r->dir);
    mt_fmt(r->control_ep, sizeof r->control_ep, "ipc://%s/control", r->dir);
    mt_fmt(r->coord.log, sizeof r->coord.log, "%s/coordinator.log", r->dir);
    snprintf(r->coord.label, sizeof r->coord.label, "coordinator");
    {
        char *argv[] = {r->coord_bin, "--db", (char *)db, "--bind", r->workers_ep, "--control", r->control_ep,
                        "--log-level", (char *)log_level, NULL};
        if (spawn(&r->coord, argv, err, sizeof err) != MT_OK) {
            code = cli_fail(cmd, err);
            goto out;
        }
    }
    if (cli_client_new(r->control_ep, 500, &c, err, sizeof err) != MT_OK) {
        code = cli_fail(cmd, err);
        goto out;
    }
    for (uint64_t deadline = mt_now_ms() + 15000;;) {
        if (mt_stop_requested) goto interrupted;
        if (reap(&r->coord)) {
            describe_exit(&r->coord, err, sizeof err);
            /* 2 = it refused its arguments: the database path the user gave. */
            code = WIFEXITED(r->coord.status) && WEXITSTATUS(r->coord.status) == 2 ? cli_usage(cmd, err)
                                                                                    : cli_fail(cmd, err);
            keep_dir = true;
            goto out;
        }
        wire_free(&reply);
        if (cli_client_status(c, 0, &reply, err, sizeof err) == MT_OK) break;
        if (mt_now_ms() > deadline) {
            keep_dir = true;
            code = cli_fail(cmd, "the coordinator did not answer within 15 s");
            goto out;
        }
    }
    /* It answers: from now on a slow reply is waited for, not taken for a missing coordinator. */
    cli_client_set_timeout(c, CLI_CLIENT_DEFAULT_TIMEOUT_MS);

    /* ---- start the workers */
    for (uint32_t i = 0; i < r->n_workers; i++) {
        proc_t *w = &r->workers[i];
        char gpu[16];
        snprintf(gpu, sizeof gpu, "%u", r->gpus[i]);
        mt_fmt(w->log, sizeof w->log, "%s/worker-%u.log", r->dir, i);
        snprintf(w->label, sizeof w->label, "worker %u", i);
        char *argv[24];
        int a = 0;
        argv[a++] = r->worker_bin;
        argv[a++] = "--connect";
        argv[a++] = r->workers_ep;
        argv[a++] = "--backend";
        argv[a++] = (char *)backend;
        argv[a++] = "--gpu";
        argv[a++] = gpu;
        argv[a++] = "--log-level";
        argv[a++] = (char *)log_level;
        if (o->sim_time_scale) {
            argv[a++] = "--sim-time-scale";
            argv[a++] = (char *)o->sim_time_scale;
        }
        if (o->sim_faults) {
            argv[a++] = "--sim-faults";
            argv[a++] = (char *)o->sim_faults;
        }
        if (o->kernel) {
            argv[a++] = "--kernel";
            argv[a++] = (char *)o->kernel;
        }
        if (o->python) {
            argv[a++] = "--python";
            argv[a++] = (char *)o->python;
        }
        if (o->helper_mem_mb) {
            argv[a++] = "--helper-mem-mb";
            argv[a++] = mem_mb;
        }
        argv[a] = NULL;
        if (spawn(w, argv, err, sizeof err) != MT_OK) {
            code = cli_fail(cmd, err);
            goto out;
        }
    }

    /* ---- submit, or follow the interrupted sweep of the same spec */
    if (resume) {
        sweep = resume;
        fprintf(stderr, "resuming sweep %llu (same spec, interrupted earlier) in %s\n", (unsigned long long)sweep, db);
    } else {
        wire_env_t req;
        Moetune__Submit sub;
        wire_env_init(&req);
        moetune__submit__init(&sub);
        sub.spec = (Moetune__SweepSpec *)spec;
        req.body_case = MOETUNE__ENVELOPE__BODY_SUBMIT;
        req.submit = &sub;
        wire_free(&reply);
        int ecode = 0;
        cli_client_set_timeout(c, TUNE_SUBMIT_TIMEOUT_MS);
        int rc = cli_client_call(c, &req, MOETUNE__ENVELOPE__BODY_SUBMITTED, &reply, &ecode, err, sizeof err);
        cli_client_set_timeout(c, CLI_CLIENT_DEFAULT_TIMEOUT_MS);
        if (rc != MT_OK) {
            code = ecode == WIRE_E_SPEC ? cli_usage(cmd, err) : cli_fail(cmd, err);
            goto out;
        }
        sweep = reply->submitted->sweep_id;
        fprintf(stderr, "sweep %llu: %u jobs, %u configs valid, %u rejected by the static rules, %llu results to measure on %u %s worker%s\n",
                (unsigned long long)sweep, reply->submitted->jobs, reply->submitted->configs_valid,
                reply->submitted->configs_rejected, (unsigned long long)reply->submitted->results_planned,
                r->n_workers, backend, r->n_workers == 1 ? "" : "s");
    }

    /* ---- follow it */
    prog = cli_progress_new(o->json ? stdout : stderr, o->json, isatty(STDERR_FILENO));
    char state[16] = "";
    for (;;) {
        if (mt_stop_requested) goto interrupted;
        bool fatal = false;
        if (check_children(r, err, sizeof err, &fatal) && fatal) {
            cli_progress_finish(prog, NULL, 0);
            keep_dir = true;
            code = cli_fail(cmd, err);
            goto out;
        }
        wire_free(&reply);
        if (cli_client_status(c, sweep, &reply, err, sizeof err) == MT_OK && reply->status_reply->n_sweeps == 1) {
            const Moetune__StatusReply *sr = reply->status_reply;
            const Moetune__SweepStatus *st = sr->sweeps[0];
            uint32_t alive = 0;
            for (size_t i = 0; i < sr->n_workers; i++)
                alive += sr->workers[i]->state && strcmp(sr->workers[i]->state, "dead") != 0;
            snprintf(state, sizeof state, "%s", st->state ? st->state : "");
            if (strcmp(state, "running") != 0) {
                cli_progress_finish(prog, st, alive);
                break;
            }
            cli_progress_update(prog, st, alive);
        }
        for (int i = 0; i < 5 && !mt_stop_requested; i++) usleep(100 * 1000);
    }

    /* ---- export, then stop */
    stop_procs(r->workers, r->n_workers);
    if (engine && strchr(engine, ',')) {
        code = cli_run_export(cmd, db, out, sweep, "sglang");
        if (code == MT_EXIT_OK) code = cli_run_export(cmd, db, out, sweep, "vllm");
    } else {
        code = cli_run_export(cmd, db, out, sweep, engine);
    }
    if (code == MT_EXIT_OK) {
        printf("config files are in %s/%s\n", out, sim ? "sim (simulated numbers, not for engines)" : "<compiler>");
    }
    if (strcmp(state, "done") != 0) {
        mt_fmt(err, sizeof err, "sweep %llu ended %s", (unsigned long long)sweep, state);
        code = cli_fail(cmd, err);
    }
    goto out;

interrupted:
    cli_progress_finish(prog, NULL, 0);
    stop_all(r);
    fprintf(stderr, "moetune tune: interrupted; every committed result stays in %s%s", db,
            sweep ? "; run the same command again to resume the sweep\n" : "\n");
    code = 130;
out:
    wire_free(&reply);
    cli_progress_destroy(&prog);
    cli_client_destroy(&c);
    if (r) {
        stop_all(r);
        if (r->dir[0]) {
            if ((keep_dir || o->keep_temp)) fprintf(stderr, "moetune tune: logs of the coordinator and workers are in %s\n", r->dir);
            else remove_run_dir(r);
        }
        free(r);
    }
    return code;
}
