/* supervise.c - the local process supervisor of `moetune tune` (see supervise.h). */
#include "supervise.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mt.h"

#define SUP_STOP_MS 5000 /* SIGTERM to SIGKILL */

uint32_t sup_count_gpus(void) {
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

mt_status_t sup_new(sup_t **out, char *err, size_t errlen) {
    *out = NULL;
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        mt_fmt(err, errlen, "cannot find my own executable (/proc/self/exe)");
        return MT_NOTFOUND;
    }
    self[sl] = '\0';
    sup_t *s = mt_calloc(1, sizeof *s);
    if (!s) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    const char *bindir = dirname(self);
    mt_fmt(s->coord_bin, sizeof s->coord_bin, "%s/moetune-coordinator", bindir);
    mt_fmt(s->worker_bin, sizeof s->worker_bin, "%s/moetune-worker", bindir);
    if (access(s->coord_bin, X_OK) != 0 || access(s->worker_bin, X_OK) != 0) {
        mt_fmt(err, errlen, "moetune-coordinator and moetune-worker must be next to moetune in %s", bindir);
        free(s);
        return MT_NOTFOUND;
    }
    *out = s;
    return MT_OK;
}

mt_status_t sup_open_dir(sup_t *s, char *err, size_t errlen) {
    snprintf(s->dir, sizeof s->dir, "/tmp/moetune-tune-XXXXXX");
    if (!mkdtemp(s->dir)) {
        mt_fmt(err, errlen, "mkdtemp: %s", strerror(errno));
        s->dir[0] = '\0';
        return MT_IO;
    }
    mt_fmt(s->workers_ep, sizeof s->workers_ep, "ipc://%s/workers", s->dir);
    mt_fmt(s->control_ep, sizeof s->control_ep, "ipc://%s/control", s->dir);
    return MT_OK;
}

static int spawn(sup_proc_t *p, char *const argv[], char *err, size_t errlen) {
    int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        mt_fmt(err, errlen, "%s: %s", p->log, strerror(errno));
        return MT_IO;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        mt_fmt(err, errlen, "fork: %s", strerror(errno));
        close(fd);
        return MT_ERR;
    }
    if (pid == 0) {
        setpgid(0, 0);
        /* However tune ends (SIGKILL included), its coordinator and workers end with it. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        mt_exec_child(argv, fd, fd);
    }
    close(fd);
    p->pid = pid;
    p->exited = false;
    return MT_OK;
}

mt_status_t sup_start_coordinator(sup_t *s, const char *db, const char *log_level, char *err, size_t errlen) {
    mt_fmt(s->coord.log, sizeof s->coord.log, "%s/coordinator.log", s->dir);
    snprintf(s->coord.label, sizeof s->coord.label, "coordinator");
    char *argv[] = {s->coord_bin, "--db",        (char *)db,    "--bind",          s->workers_ep,
                    "--control",  s->control_ep, "--log-level", (char *)log_level, NULL};
    return spawn(&s->coord, argv, err, errlen);
}

mt_status_t sup_start_worker(sup_t *s, uint32_t i, char *const args[], char *err, size_t errlen) {
    sup_proc_t *w = &s->workers[i];
    char gpu[16];
    char *argv[64];
    size_t a = 0;
    snprintf(gpu, sizeof gpu, "%u", s->gpus[i]);
    mt_fmt(w->log, sizeof w->log, "%s/worker-%u.log", s->dir, i);
    snprintf(w->label, sizeof w->label, "worker %u", i);
    argv[a++] = s->worker_bin;
    argv[a++] = "--connect";
    argv[a++] = s->workers_ep;
    argv[a++] = "--gpu";
    argv[a++] = gpu;
    for (size_t k = 0; args && args[k]; k++) {
        if (a + 1 >= sizeof argv / sizeof argv[0]) {
            mt_fmt(err, errlen, "too many worker arguments");
            return MT_INVAL;
        }
        argv[a++] = args[k];
    }
    argv[a] = NULL;
    return spawn(w, argv, err, errlen);
}

bool sup_reap(sup_proc_t *p) {
    if (p->pid <= 0 || p->exited) return p->exited;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
        p->exited = true;
        p->status = st;
    }
    return p->exited;
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

void sup_describe_exit(const sup_proc_t *p, char *buf, size_t len) {
    char tail[600];
    last_line(p->log, tail, sizeof tail);
    if (WIFEXITED(p->status))
        mt_fmt(buf, len, "%s exited with code %d%s%s", p->label, WEXITSTATUS(p->status), tail[0] ? ": " : "", tail);
    else if (WIFSIGNALED(p->status))
        mt_fmt(buf, len, "%s killed by signal %d%s%s", p->label, WTERMSIG(p->status), tail[0] ? ": " : "", tail);
    else
        mt_fmt(buf, len, "%s ended", p->label);
}

mt_status_t sup_check(sup_t *s, char *why, size_t len) {
    if (sup_reap(&s->coord)) {
        sup_describe_exit(&s->coord, why, len);
        return MT_ERR;
    }
    uint32_t alive = 0;
    for (uint32_t i = 0; i < s->n_workers; i++) {
        sup_proc_t *w = &s->workers[i];
        bool was = w->exited;
        if (!sup_reap(w)) {
            alive++;
            continue;
        }
        if (!was) {
            sup_describe_exit(w, why, len);
            /* Exit code 1/2 = the worker could not start (backend, arguments): stop. */
            if (WIFEXITED(w->status) && (WEXITSTATUS(w->status) == 1 || WEXITSTATUS(w->status) == 2)) return MT_ERR;
            fprintf(stderr, "\nmoetune tune: warning: %s\n", why);
        }
    }
    if (alive == 0) {
        mt_fmt(why, len, "all workers died (last: %.400s)", s->n_workers ? why : "none started");
        return MT_ERR;
    }
    return MT_OK;
}

bool sup_coordinator_exited(sup_t *s, int *status) {
    if (!sup_reap(&s->coord)) return false;
    *status = s->coord.status;
    return true;
}

uint32_t sup_workers_running(const sup_t *s) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_workers; i++) n += s->workers[i].pid > 0 && !s->workers[i].exited;
    return n;
}

bool sup_worker_refused_args(const sup_t *s) {
    for (uint32_t i = 0; i < s->n_workers; i++) {
        const sup_proc_t *w = &s->workers[i];
        if (w->exited && WIFEXITED(w->status) && WEXITSTATUS(w->status) == MT_EXIT_USAGE) return true;
    }
    return false;
}

/* SIGTERM, wait up to SUP_STOP_MS, then SIGKILL. */
static void stop_procs(sup_proc_t *ps, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ps[i].pid > 0 && !sup_reap(&ps[i])) kill(ps[i].pid, SIGTERM);
    uint64_t deadline = mt_now_ms() + SUP_STOP_MS;
    for (;;) {
        bool all = true;
        for (size_t i = 0; i < n; i++) all = all && (ps[i].pid <= 0 || sup_reap(&ps[i]));
        if (all) return;
        if (mt_now_ms() >= deadline) break;
        usleep(20 * 1000);
    }
    for (size_t i = 0; i < n; i++) {
        if (ps[i].pid > 0 && !sup_reap(&ps[i])) {
            kill(ps[i].pid, SIGKILL);
            waitpid(ps[i].pid, &ps[i].status, 0);
            ps[i].exited = true;
        }
    }
}

void sup_stop_workers(sup_t *s) { stop_procs(s->workers, s->n_workers); }

void sup_stop_all(sup_t *s) {
    stop_procs(s->workers, s->n_workers);
    stop_procs(&s->coord, 1);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

void sup_destroy(sup_t **s, bool keep_dir) {
    if (!s || !*s) return;
    sup_stop_all(*s);
    if ((*s)->dir[0] && !keep_dir) remove_dir((*s)->dir);
    free(*s);
    *s = NULL;
}
